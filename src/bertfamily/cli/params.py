"""`bertfamily params` and `bertfamily dataflow`: parameter tables and the traced dataflow of a
model."""

from __future__ import annotations

from pathlib import Path

import typer

from .common import App, console, handle_errors, print_json

commands = App()

FORMAT = typer.Option(
    "table", "--format", help="table (for reading) or json (one JSON document on stdout)."
)
JSON = typer.Option(False, "--json", help="The same as --format json.")


def _wants_json(fmt: str, json_out: bool) -> bool:
    if fmt not in ("table", "json"):
        raise typer.BadParameter(f"--format must be table or json, got {fmt!r}")
    return json_out or fmt == "json"


@commands.command()
@handle_errors
def params(
    model: str = typer.Argument(..., help="Preset name or model directory."),
    vocab_size: int | None = typer.Option(None, "--vocab-size", help="Override V (e.g. 21128)."),
    head: list[str] = typer.Option(
        [],
        "--head",
        metavar="HEAD",
        help="Head to include (mlm, nsp, sop, rtd, a task head, or the objective heads sbo "
        "and distill); repeat for several.",
    ),
    teacher_hidden_size: int = typer.Option(
        768, "--teacher-hidden-size", min=1, help="Teacher H of --head distill's projections."
    ),
    condition_size: int | None = typer.Option(
        None, "--condition-size", help="Conditional LayerNorm condition size C."
    ),
    fmt: str = FORMAT,
    json_out: bool = JSON,
):
    """Every component with output shape and parameter count, block subtotals, total."""
    from ..inspect.params import parameter_table
    from ..inspect.render import params_rich

    json_out = _wants_json(fmt, json_out)
    table = parameter_table(
        model,
        heads=head,
        vocab_size=vocab_size,
        condition_size=condition_size,
        teacher_hidden_size=teacher_hidden_size,
    )
    if json_out:
        print_json(table.to_dict())
    else:
        console.print(params_rich(table, width=console.width))


@commands.command()
@handle_errors
def dataflow(
    model: str = typer.Argument(..., help="Preset name or model directory."),
    batch: int | None = typer.Option(None, "--batch", min=1, help="B."),
    seq_len: int | None = typer.Option(None, "--seq-len", min=1, help="T."),
    head: list[str] = typer.Option(
        [],
        "--head",
        metavar="HEAD",
        help="Head to include (mlm, nsp, sop, rtd, a task head, or the objective heads sbo "
        "and distill); repeat for several.",
    ),
    teacher_hidden_size: int = typer.Option(
        768, "--teacher-hidden-size", min=1, help="Teacher H of --head distill's projections."
    ),
    compare: bool = typer.Option(True, help="Mark differences from bert-base."),
    fmt: str = FORMAT,
    json_out: bool = JSON,
    text: str | None = typer.Option(
        None, "--text", help="Trace this text (sentence A) instead of random ids; B = 1."
    ),
    text_pair: str | None = typer.Option(
        None, "--text-pair", help="Sentence B of a pair (segment ids 1), with --text."
    ),
    tokenizer: str | None = typer.Option(
        None,
        "--tokenizer",
        help="Tokenizer directory or resource for --text (default: the model directory).",
    ),
):
    """The traced dataflow of one forward pass with every shape; with --text (and
    --text-pair), on that text, showing the rows each embedding table looks up."""
    from ..config import EncoderConfig
    from ..inspect.compare import REFERENCE, diff_traces
    from ..inspect.render import (
        WIDE,
        dataflow_differences,
        dataflow_rich,
        legend_text,
        lookups_rich,
        lookups_sum_text,
    )
    from ..inspect.trace import trace

    json_out = _wants_json(fmt, json_out)
    tok = None
    if text_pair is not None and text is None:
        raise typer.BadParameter("--text-pair needs --text")
    if text is not None:
        from ..tokenization.tokenizer import load_tokenizer
        from .common import model_path

        if tokenizer is None and not Path(model).is_dir():
            raise typer.BadParameter(
                f"{model!r} is a preset and has no tokenizer; pass --tokenizer "
                "(e.g. --tokenizer bert-base-chinese-vocab)"
            )
        tok = load_tokenizer(model_path(tokenizer or model))
    tr = trace(
        model,
        heads=head,
        batch=batch,
        seq_len=seq_len,
        tokenizer=tok,
        text=text,
        text_pair=text_pair,
        teacher_hidden_size=teacher_hidden_size,
    )
    diff = None
    if compare and tr.name != REFERENCE:
        # the reference traced at the longest T it accepts (bert-base: 512 positions), so a
        # long-input model (Longformer at 1100) is still compared, step by step, symbolically
        ref_limit = EncoderConfig.from_preset(REFERENCE).max_sequence_length
        ref_len = min(tr.symbols["T"], ref_limit)
        ref = trace(
            REFERENCE,
            heads=head,
            batch=tr.symbols["B"],
            seq_len=ref_len,
            vocab_size=tr.config.vocab_size,
            teacher_hidden_size=teacher_hidden_size,
        )
        diff = diff_traces(ref, tr)
        if ref_len < tr.symbols["T"]:
            diff.notes.insert(
                0,
                f"{REFERENCE} traced at T={ref_len}, its longest input (this model's T is "
                f"{tr.symbols['T']}); shapes are compared by their symbols",
            )
    if json_out:
        out = tr.to_dict()
        if diff:
            out["differences"] = diff.to_dict()
        print_json(out)
        return
    console.print(dataflow_rich(tr, diff, width=console.width))
    if console.width < WIDE:
        for line in dataflow_differences(tr, diff):
            console.print(line, markup=False, highlight=False)
    console.print(legend_text(tr, diff))
    if tr.lookups:
        console.print(lookups_rich(tr))
        console.print(lookups_sum_text(tr), markup=False, highlight=False)
    if diff and diff.notes:
        console.print("differences from " + diff.reference + ": " + "; ".join(diff.notes))
