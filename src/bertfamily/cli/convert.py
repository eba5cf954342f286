"""Converting models: `export` (ONNX) and `convert to-longformer`."""

from __future__ import annotations

from pathlib import Path

import typer

from .common import App, console, handle_errors

commands = App()
convert = App(help="Convert checkpoints between families.", no_args_is_help=True)
commands.add_typer(convert, name="convert")


@commands.command()
@handle_errors
def export(
    model: str = typer.Argument(..., help="Model: directory, resource name or cached org/name."),
    output: Path = typer.Argument(..., help="Output file (.onnx)."),
    format: str = typer.Option("onnx", "--format", help="Export format (onnx)."),
    opset: int = typer.Option(17, help="ONNX opset version."),
):
    """Export a model to ONNX with dynamic batch and sequence axes."""
    from ..export import export_onnx, output_names
    from ..fetch import resolve_model
    from ..pretrained import from_pretrained

    if format != "onnx":
        raise ValueError(f"unsupported format {format!r}; supported: onnx")
    if output.suffix.lower() != ".onnx":
        raise ValueError(f"the output of an ONNX export must end in .onnx, got {output}")
    m = from_pretrained(resolve_model(model))
    export_onnx(m, output, opset=opset)
    console.print(f"wrote {output} (outputs: {', '.join(output_names(m))})")


@convert.command("to-longformer")
@handle_errors
def to_longformer(
    model: Path = typer.Option(..., help="RoBERTa checkpoint directory (Hugging Face)."),
    output: Path = typer.Option(..., help="Directory for the Longformer checkpoint."),
    max_positions: int = typer.Option(
        4096, "--max-positions", min=1, help="Longest input of the result."
    ),
    window: int = typer.Option(512, help="Full attention window (even)."),
):
    """RoBERTa → Longformer: position table copied block by block, global projections
    initialised from the local ones (Beltagy et al. 2020, §5)."""
    from ..to_longformer import to_longformer as run

    path = run(model, output, max_positions=max_positions, window=window)
    console.print(
        f"wrote Longformer checkpoint ({max_positions} positions, window {window}) to {path}"
    )
