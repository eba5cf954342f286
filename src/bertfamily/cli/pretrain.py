"""`bertfamily pretrain`: pretraining from a corpus, with the shared training options."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import InputError
from .common import (
    App,
    handle_errors,
    model_overrides,
    print_summary_on_main_rank,
    training_threads,
)
from .options import TrainOptions, training_options

commands = App()


@commands.command()
@handle_errors
@training_options("pretrain")
def pretrain(
    corpus: list[Path] = typer.Argument(
        ..., metavar="CORPUS", help="Corpus files (.txt / .jsonl / dataset dir)."
    ),
    output: Path = typer.Option(
        ..., "--output", "-o", help="Run directory: checkpoint, metrics.jsonl, loss.png, model/."
    ),
    tokenizer: Path | None = typer.Option(None, help="Tokenizer directory."),
    preset: str = typer.Option("bert-tiny", help="Preset for a model from scratch."),
    init_from: str | None = typer.Option(
        None,
        help="Continue pretraining this model (directory, resource or cached org/name; fresh "
        "heads if absent).",
    ),
    objectives: str | None = typer.Option(
        None,
        help="e.g. mlm,nsp | mlm,sop | mlm | mlm,sbo | rtd (ELECTRA replaced-token detection, "
        "ELECTRA models; saves the discriminator) (default: the preset's).",
    ),
    generator_size: float = typer.Option(
        0.25,
        min=0.0,
        max=1.0,
        help="rtd: the generator's width as a fraction of the discriminator's (ELECTRA §3.2).",
    ),
    masking: str | None = typer.Option(
        None, help="token | whole_word | ngram | entity | span (default: the preset's, else token)"
    ),
    mlm_probability: float = typer.Option(
        0.15, min=0.0, max=1.0, help="Share of the tokens chosen for masked-LM prediction."
    ),
    max_predictions: int | None = typer.Option(None, help="Cap per sequence."),
    static_copies: int = typer.Option(0, help="0: dynamic masking; k: k static maskings."),
    packing: str = typer.Option(
        "full_sentences",
        help="MLM-only inputs: full_sentences (may cross documents) | doc_sentences (one "
        "document each; the batch grows to keep the tokens per batch), RoBERTa §4.2.",
    ),
    max_length: int = typer.Option(128, min=5, help="Tokens per training sequence."),
    layers: int | None = typer.Option(None, help="Override num_hidden_layers."),
    hidden: int | None = typer.Option(None, help="Override hidden_size (FFN = 4H)."),
    heads: int | None = typer.Option(None, help="Override num_attention_heads."),
    dropout: float | None = typer.Option(None, help="Override hidden and attention dropout."),
    training: TrainOptions = None,
    split_sentences: bool = typer.Option(False, help="Split lines with pysbd."),
    chinese_words: bool = typer.Option(False, help="Whole words from jieba."),
    phrases: str | None = typer.Option(
        None,
        help="english | chinese: ERNIE phrase masking, chunker phrases masked as units "
        "(masking entity).",
    ),
    eval_corpus: list[Path] | None = typer.Option(
        None,
        metavar="FILE",
        help="Held-out corpus file (repeatable): evaluate on its documents and train on every "
        "document of CORPUS (default: hold out 20 documents of CORPUS).",
    ),
    eval_batches: int = typer.Option(20, min=1, help="Held-out batches per evaluation."),
):
    """Pretrain (or continue pretraining) with MLM (+ NSP / SOP / SBO). Runs under torchrun."""
    from ..objectives.masking import MaskingConfig
    from ..recipes.pretrain import PretrainConfig
    from ..recipes.pretrain import pretrain as run
    from .common import model_path, require_extras

    require_extras(
        *(("jieba",) if chinese_words or phrases == "chinese" else ()),
        *(("phrases",) if phrases == "english" else ()),
    )
    sizes = model_overrides(layers, hidden, heads, dropout)
    if init_from and sizes:
        raise InputError(
            f"--init-from {init_from} continues that model at its own size; "
            f"{', '.join(sorted(sizes))} cannot change (drop --layers/--hidden/--heads/--dropout, "
            "or pretrain from --preset with those sizes)"
        )
    custom_masking = masking or mlm_probability != 0.15 or max_predictions
    cfg = PretrainConfig(
        corpus=corpus,
        tokenizer=tokenizer,
        preset=preset,
        overrides=sizes,
        init_from=model_path(init_from) if init_from else None,
        objectives=objectives.split(",") if objectives else None,
        generator_size=generator_size,
        masking=MaskingConfig(
            strategy=masking or "token",
            mlm_probability=mlm_probability,
            max_predictions=max_predictions,
        )
        if custom_masking
        else None,
        static_copies=static_copies,
        packing=packing,
        max_length=max_length,
        split_sentences=split_sentences,
        chinese_words=chinese_words,
        phrases=phrases,
        eval_corpus=eval_corpus or (),
        eval_batches=eval_batches,
    )
    with training_threads(training.threads):
        summary = run(cfg, output_dir=output, **training.train_config_fields())
    print_summary_on_main_rank(summary, ("step", "stopped", "elapsed_s", "eval"), training.device)
