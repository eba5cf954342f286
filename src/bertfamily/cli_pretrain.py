"""CLI commands of the pretraining area: `tokenizer train`, `pretrain`, `fill-mask`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .cli import _fail, console

tokenizer_app = typer.Typer(help="Tokenizer training.", no_args_is_help=True)


@tokenizer_app.command("train")
def tokenizer_train(
        corpus: list[Path] = typer.Argument(..., help="Text files, one sentence per line."),
        output: Path = typer.Option(..., "--output", "-o", help="Directory to write."),
        kind: str = typer.Option("wordpiece", help="wordpiece | bpe | unigram"),
        vocab_size: int = typer.Option(30522, min=10),
        lowercase: bool = typer.Option(True, help="Lower-case (WordPiece, Unigram)."),
        strip_accents: Optional[bool] = typer.Option(None, help="Default: follow --lowercase."),
        min_frequency: int = typer.Option(2, min=1)):
    """Train a WordPiece / byte-level BPE / Unigram tokenizer (Hugging Face layout)."""
    from .recipes.tokenizer import train_tokenizer

    try:
        tok = train_tokenizer([str(c) for c in corpus], kind, vocab_size, lowercase=lowercase,
                              strip_accents=strip_accents, min_frequency=min_frequency,
                              output_dir=output)
    except (ValueError, OSError) as e:
        _fail(e)
    console.print(f"{tok} -> {output}")


def pretrain(
        corpus: list[Path] = typer.Argument(..., help="Corpus files (.txt / .jsonl / dataset dir)."),
        output: Path = typer.Option(..., "--output", "-o"),
        tokenizer: Optional[Path] = typer.Option(None, help="Tokenizer directory."),
        preset: str = typer.Option("bert-tiny", help="Preset for a model from scratch."),
        init_from: Optional[str] = typer.Option(None, help="Continue pretraining this model "
                                                "directory or resource (fresh heads if absent)."),
        objectives: Optional[str] = typer.Option(None, help="e.g. mlm,nsp | mlm,sop | mlm | "
                                                 "mlm,sbo (default: the preset's)."),
        masking: Optional[str] = typer.Option(None, help="token | whole_word | ngram | entity | "
                                              "span (default: the preset's, else token)"),
        mlm_probability: float = typer.Option(0.15),
        max_predictions: Optional[int] = typer.Option(None, help="Cap per sequence."),
        static_copies: int = typer.Option(0, help="0: dynamic masking; k: k static maskings."),
        max_length: int = typer.Option(128, min=5),
        layers: Optional[int] = typer.Option(None, help="Override num_hidden_layers."),
        hidden: Optional[int] = typer.Option(None, help="Override hidden_size (FFN = 4H)."),
        heads: Optional[int] = typer.Option(None, help="Override num_attention_heads."),
        dropout: Optional[float] = typer.Option(None, help="Override hidden and attention "
                                                "dropout."),
        batch_size: int = typer.Option(32, min=1, help="Per process."),
        grad_accum: int = typer.Option(1, min=1),
        max_steps: int = typer.Option(10000, min=1),
        max_time: Optional[float] = typer.Option(None, help="Wall-clock budget, seconds."),
        lr: float = typer.Option(1e-3),
        warmup: float = typer.Option(0.05, help="Warm-up ratio."),
        schedule: str = typer.Option("linear"),
        weight_decay: float = typer.Option(0.01),
        eval_every: int = typer.Option(500),
        save_every: int = typer.Option(500),
        log_every: int = typer.Option(50),
        bf16: bool = typer.Option(False),
        seed: int = typer.Option(0),
        resume: bool = typer.Option(False, help="Continue from OUTPUT/checkpoint.pt."),
        split_sentences: bool = typer.Option(False, help="Split lines with pysbd."),
        chinese_words: bool = typer.Option(False, help="Whole words from jieba."),
        device: str = typer.Option("auto"),
        no_progress: bool = typer.Option(False)):
    """Pretrain (or continue pretraining) with MLM (+ NSP / SOP / SBO). Runs under torchrun."""
    from .fetch import resolve_model
    from .objectives.masking import MaskingConfig
    from .train.loop import TrainConfig
    from .recipes.pretrain import PretrainConfig, pretrain as run

    try:
        overrides = {}
        if layers:
            overrides["num_hidden_layers"] = layers
        if hidden:
            overrides.update(hidden_size=hidden, intermediate_size=4 * hidden)
        if heads:
            overrides["num_attention_heads"] = heads
        if dropout is not None:
            overrides.update(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
        cfg = PretrainConfig(
            corpus=corpus, tokenizer=tokenizer, preset=preset, overrides=overrides,
            init_from=resolve_model(init_from) if init_from else None,
            objectives=objectives.split(",") if objectives else None,
            masking=MaskingConfig(strategy=masking or "token", mlm_probability=mlm_probability,
                                  max_predictions=max_predictions)
            if masking or mlm_probability != 0.15 or max_predictions else None,
            static_copies=static_copies, max_length=max_length,
            split_sentences=split_sentences, chinese_words=chinese_words)
        tc = TrainConfig(output_dir=output, max_steps=max_steps, max_time_s=max_time,
                         batch_size=batch_size, grad_accum_steps=grad_accum, learning_rate=lr,
                         weight_decay=weight_decay, warmup_ratio=warmup, schedule=schedule,
                         bf16=bf16, eval_every=eval_every, save_every=save_every,
                         log_every=log_every, seed=seed, resume=resume, device=device,
                         progress=not no_progress, metric_for_best="loss")
        summary = run(cfg, tc)
    except (ValueError, OSError, KeyError) as e:
        _fail(e)
    from .train.distributed import cleanup_distributed, init_distributed

    if init_distributed(device).is_main:
        console.print_json(data={k: summary[k] for k in ("step", "stopped", "elapsed_s", "eval")})
    cleanup_distributed()


def fill_mask(text: list[str] = typer.Argument(..., help="Texts with [MASK] or <mask>."),
              model: Path = typer.Option(..., help="Model directory with an MLM head."),
              top_k: int = typer.Option(5, "--top-k", "-k", min=1)):
    """The most likely tokens at each mask."""
    from rich.table import Table

    from .pipelines.fill_mask import FillMask

    try:
        pipe = FillMask(model)
        for t in text:
            for m, preds in enumerate(pipe(t, top_k=top_k)):
                table = Table("rank", "token", "score", "sequence",
                              title=f"{t}" + (f" (mask {m + 1})" if m else ""))
                for r, p in enumerate(preds, 1):
                    table.add_row(str(r), p.token, f"{p.score:.4f}", p.sequence)
                console.print(table)
    except (ValueError, OSError) as e:
        _fail(e)


def register(app: typer.Typer) -> None:
    app.add_typer(tokenizer_app, name="tokenizer")
    app.command("pretrain")(pretrain)
    app.command("fill-mask")(fill_mask)
