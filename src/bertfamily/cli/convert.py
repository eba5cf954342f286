"""Converting models: `export` (ONNX) and `convert to-longformer`."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import InputError
from ..notices import waiting
from .common import App, check_quantize, err, handle_errors

commands = App()
convert = App(help="Convert checkpoints between families.", no_args_is_help=True)
commands.add_typer(convert, name="convert")


@commands.command()
@handle_errors
def export(
    model: str = typer.Argument(..., help="Model: directory, resource name or cached org/name."),
    output: Path = typer.Argument(
        ...,
        help="Output directory: model.onnx beside the model's config and tokenizer files, "
        "which optimum and sentence-transformers' ONNX backend load. A path ending in .onnx "
        "writes the bare graph only.",
    ),
    format: str = typer.Option("onnx", "--format", help="Export format (onnx)."),
    opset: int = typer.Option(17, help="ONNX opset version."),
    quantize: str | None = typer.Option(
        None,
        metavar="int8",
        help="int8 (embedding models): ONNX Runtime's quantiser, per-channel, on the Linear "
        "layers of the measured int8 plan; written only if the graph keeps min cosine >= 0.99 "
        "and top-10 overlap >= 0.95 to fp32 on the calibration sentences.",
    ),
    pooling: bool = typer.Option(
        False,
        "--pooling",
        help="Sentence embedders: put the directory's pooling, Dense layers and normalisation "
        "in the graph, one more output sentence_embedding (B, D): ONNX Runtime alone then "
        "gives the sentence vectors.",
    ),
):
    """Export a model to ONNX with dynamic batch and sequence axes: a directory that optimum
    and sentence-transformers' ONNX backend load (config, tokenizer, model.onnx), or with an
    OUTPUT ending in .onnx the bare graph; with --pooling the graph ends in the sentence
    vector."""
    from ..convert.onnx import ONNX_FILE, export_onnx, export_onnx_directory, output_names
    from ..pretrained import from_pretrained
    from .common import model_path, require_extras

    if format != "onnx":
        raise InputError(f"unsupported format {format!r}; supported: onnx")
    one_file = output.suffix.lower() == ".onnx"
    if not one_file and output.suffix and not output.is_dir():
        raise InputError(
            f"OUTPUT {output}: give a directory (no suffix, or an existing directory) or a "
            "file ending in .onnx"
        )
    if quantize is not None and pooling:
        raise InputError("--quantize int8 and --pooling do not combine; export one or the other")
    if quantize is not None and not one_file:
        raise InputError("--quantize int8 writes one .onnx file; give an OUTPUT ending in .onnx")
    require_extras("onnx", *(("onnxruntime",) if quantize is not None else ()))
    if quantize is not None:
        check_quantize(quantize, "fp32")
        _export_int8(model_path(model), output, opset)
        return
    directory = model_path(model)
    with waiting(f"exporting {directory.name} to ONNX (tracing the model, opset {opset})"):
        m = from_pretrained(directory)
        if pooling:
            from ..pipelines.embedding.onnx_export import export_sentence_onnx

            export_sentence_onnx(directory, output, opset=opset, model=m)
        elif one_file:
            export_onnx(m, output, opset=opset)
        else:
            export_onnx_directory(directory, output, opset=opset, model=m)
    names = ", ".join(output_names(m, sentence=pooling))
    if not one_file:
        err.print(f"wrote {output}/{ONNX_FILE} (outputs: {names}) with the model's config and "
                  "tokenizer files")  # fmt: skip
        return
    err.print(f"wrote {output} (outputs: {names})")
    err.print(
        "[yellow]note:[/] a bare .onnx file has no config or tokenizer: optimum and "
        "sentence-transformers' ONNX backend cannot load it. Give an OUTPUT directory (no "
        ".onnx suffix) for one they load."
    )


def _export_int8(model_dir: Path, output: Path, opset: int) -> None:
    """`export --quantize int8`: the checked int8 ONNX graph of the embedder's plan
    (`precision.cached_int8`: the measured plan of `precision.cached_int8_plan`, applied by
    ONNX Runtime's quantiser and checked against the bar)."""
    from ..files import atomic_write
    from ..inference.precision import cached_int8
    from ..pipelines.embedding.embed import SentenceEmbedder

    if opset != 17:
        raise InputError("--quantize int8 exports at the default opset 17")
    embedder = SentenceEmbedder(model_dir, dtype="fp32")
    plan, model, a, graph, _ = cached_int8(embedder)
    err.print(plan.summary(), soft_wrap=True)
    data = graph.read_bytes()
    atomic_write(output, lambda t: t.write_bytes(data))
    outputs = ", ".join(o.name for o in model.encoder.session.get_outputs())
    err.print(
        f"wrote {output} (int8 ONNX Runtime graph, outputs: {outputs}; "
        f"checked on calibration: min cosine {a.min_cosine:.4f}, top-{a.k} overlap "
        f"{a.top_k_overlap:.3f})"
    )


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
    from ..convert.longformer import to_longformer as run

    with waiting(f"converting {model.name} to Longformer ({max_positions} positions)"):
        path = run(model, output, max_positions=max_positions, window=window)
    err.print(f"wrote Longformer checkpoint ({max_positions} positions, window {window}) to {path}")
