"""What every command area shares: the consoles, the one error handler, small input helpers.

Nothing here imports torch (or numpy) at module level: `bertfamily --help` stays fast.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperCommand

from ..errors import BertFamilyError, InputError, as_user_error

console = Console()
err = Console(stderr=True, soft_wrap=True)  # messages name paths: never broken mid-path

#: What a command reports as a one-line ``error: …`` (exit code 2): the errors bertfamily raises
#: on purpose (`bertfamily.errors`) and the operating system's (a file that cannot be read or
#: written); third-party exceptions too, where `errors.as_user_error` maps them (Unicode
#: decoding, RecursionError, faiss, Ray). Anything else is a bug: its traceback is shown.
LIBRARY_ERRORS = (BertFamilyError, OSError)

DTYPES = ("auto", "fp32", "bf16", "fastest")

#: Set by ``bertfamily -v``: tracebacks of library errors too.
VERBOSE = False


def handle_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Run a command, turning an exception `errors.as_user_error` maps (a `BertFamilyError`;
    an `OSError` such as a missing file, permission denied or a full disk; bytes that are not
    UTF-8; a RecursionError; faiss's and Ray's errors) into ``error: …`` on stderr and exit
    code 2; under ``-v`` the traceback comes first, the original exception (the
    cause) included. Any other exception propagates: the command line prints its traceback
    and exits with code 1. A thread governor the command started (`runtime.apply_threads`)
    stops when it returns (`runtime.governor_scope`)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from ..runtime import governor_scope

        try:
            with governor_scope():  # threads that followed the load end with the command
                return func(*args, **kwargs)
        except (typer.Exit, typer.Abort, click.ClickException):
            raise  # typer's own exits and usage errors are no library error
        except Exception as e:
            user = as_user_error(e)
            if user is None:
                raise  # a bug: its traceback
            if VERBOSE:
                err.print_exception()  # e's traceback, with its own causes
            err.print("[bold red]error:[/]", escape(str(user)))
            raise typer.Exit(code=2) from None

    return wrapper


def model_path(model: str | None) -> Path:
    """A ``--model`` value as a local directory (`fetch.resolve_model`): an existing directory
    (always first), a bertfamily resource name (fetched on first use; None = the default
    model), or a model id (``org/name``) already in the local Hugging Face cache (never
    downloaded).

    Raises:
        ModelNotFoundError (a ValueError): none of these; the message lists every place looked
            at and the resources.
        FetchError / CacheCorruptError: see `fetch.resolve_model`.
    """
    from ..resources.resolve import resolve_model

    return resolve_model(model, must_exist=True)


def read_lines(path: Path | str, what: str = "input file") -> list[str]:
    """The non-blank, stripped lines of a UTF-8 text file, or of standard input for ``-``
    (`data.text_input.read_text_lines`, the one reader of text inputs).

    Raises:
        DataError: missing, a directory, unreadable, not UTF-8, or no text on any line.
    """
    from ..data.text_input import read_text_lines

    return read_text_lines(path, blank="skip", what=what)


DTYPE_HELP = (
    "auto (= fp32, the faithful default: the reference's numbers, the same vector for a text "
    "whatever its batch), fp32, bf16, or fastest (bf16 on a GPU with bf16 or a CPU with "
    "AMX-BF16 or AVX512-BF16, else fp32; faster, agrees to min cosine ~0.999). The choice is "
    "printed."
)
QUANTIZE_HELP = (
    "int8: dynamic int8 of the Linear layers that keep min cosine >= 0.99 and top-10 overlap "
    ">= 0.95 to fp32 (measured at load on a fetched Jane Austen sample; the rest stay fp32). "
    "CPU only."
)


DEVICE_HELP = "auto (cuda when a CUDA device is available, else cpu), cpu, cuda or cuda:N."


def torch_device(name: str) -> str:
    """The torch device of a ``--device`` value; "auto" is cuda when torch sees a CUDA device.

    Raises:
        InputError: an unknown value, or cuda asked for where torch sees no CUDA device.
    """
    import torch

    from ..errors import InputError

    name = name.strip().lower()
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return "cpu"
    if name == "cuda" or (name.startswith("cuda:") and name[5:].isdigit()):
        if not torch.cuda.is_available():
            raise InputError(f"--device {name}: torch sees no CUDA device on this machine")
        index = int(name[5:]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            raise InputError(
                f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) here"
            )
        return name
    raise InputError(f"--device must be auto, cpu, cuda or cuda:N, got {name!r}")


def torch_dtype(name: str, device: str = "cpu"):
    """The torch dtype of a `--dtype` value (auto, fp32, bf16), printing the choice on stderr;
    warns when bf16 is asked for and would be emulated."""
    from ..inference.precision import resolve_dtype
    from ..train.mixed_precision import bf16_native

    if name not in DTYPES:
        raise typer.BadParameter(f"dtype must be one of {', '.join(DTYPES)}")
    if name == "bf16" and not bf16_native():
        err.print(
            "[yellow]warning:[/] this CPU has no native bf16 matrix units; bf16 runs emulated "
            "and is slower than fp32 here (--dtype fastest picks fp32)"
        )
    dtype, reason = resolve_dtype(name, device)
    err.print(f"dtype: {reason}", soft_wrap=True)
    return dtype


def load_int8(build: Callable[[], Any]) -> Any:
    """Run ``build`` (a loader given quantize="int8": it measures the int8 plan, minutes the
    first time, with a progress bar on stderr: `precision.cached_int8_plan`), then print the
    plan's summary on stderr, and whether it was read from the cache."""
    loaded = build()
    plan = getattr(loaded, "int8_plan", None)
    if plan is not None:
        cached = " (plan read from the cache)" if getattr(loaded, "int8_cached", False) else ""
        err.print(plan.summary() + cached, soft_wrap=True)
    return loaded


def check_quantize(quantize: str | None, dtype: str) -> None:
    """Refuse a `--quantize` value other than int8, or int8 with --dtype bf16."""
    if quantize is None:
        return
    if quantize != "int8":
        raise typer.BadParameter(f"--quantize must be int8, got {quantize!r}")
    if dtype == "bf16":
        raise typer.BadParameter("--quantize int8 runs from fp32 weights; drop --dtype bf16")


RUNTIMES = ("torch", "openvino")
RUNTIME_HELP = (
    "torch, or openvino: the encoder exported to ONNX and run by OpenVINO on the CPU (pip "
    'install "bertfamily[openvino]"; --dtype auto = fp32, --dtype fastest = its default '
    "precision, bf16 on a CPU with bf16 units), refused unless it keeps min cosine 0.99 and "
    "top-10 overlap 0.95 to torch fp32 on a fetched Austen sample (graph and check cached per "
    "model and CPU). With "
    "--quantize int8: NNCF's int8 of the graph, the fewest products kept in float that meet "
    "the same bar on every kind of held-out text (Austen prose and queries, STS-B, code)."
)


def check_runtime(
    runtime: str, quantize: str | None = None, device: str = "cpu", *, packages: bool = True
) -> None:
    """Refuse an unknown ``--runtime``, OpenVINO off the CPU, and an unknown ``--quantize``
    with it, before anything loads (OpenVINO takes ``--quantize int8``: NNCF's int8); with
    ``packages``, check that the runtime's packages are installed (`require_extras`). A
    command whose other options may still contradict ``--runtime`` (SPLADE models, Ray)
    passes ``packages=False`` and leaves the package check to `load_embedder`, so the
    contradiction is what the user reads, not a package to install for nothing.

    Raises:
        InputError: as above.
        MissingDependency: openvino (or nncf for int8) is not installed.
    """
    if runtime not in RUNTIMES:
        raise InputError(f"--runtime must be torch or openvino, got {runtime!r}")
    if runtime != "torch" and device != "cpu":
        raise InputError(f"--runtime {runtime} runs on the CPU")
    if runtime != "torch" and quantize not in (None, "int8"):
        raise InputError(f"--runtime {runtime} takes --quantize int8 or none, got {quantize!r}")
    if runtime == "openvino" and packages:
        require_extras("openvino", *(("nncf",) if quantize == "int8" else ()))


# What each optional feature of the commands imports: need -> (module, extra, feature).
EXTRA_NEEDS = {
    "faiss": ("faiss", "index", "the vector index (FAISS: index build/add, search --index)"),
    "parquet": ("pyarrow", "parquet", "Parquet tables"),
    "ray": ("ray", "ray", "bertfamily embed --engine ray"),
    "openvino": ("openvino", "openvino", "--runtime openvino"),
    "nncf": ("nncf", "openvino", "OpenVINO int8 (--runtime openvino --quantize int8)"),
    "onnx": ("onnx", "onnx", "ONNX export"),
    "onnxruntime": ("onnxruntime", "onnx", "ONNX Runtime"),
    "plots": ("matplotlib", "plots", "plots (PNG)"),
    "phrases": ("textblob", "phrases", "English phrase masking"),
    "jieba": ("jieba", "chinese", "Chinese word segmentation (jieba)"),
}


def require_extras(*needs: str, tables: tuple = ()) -> None:
    """The one check of optional packages at a command's start, before any model loads or
    any text is read: each of ``needs`` (keys of `EXTRA_NEEDS`), and pyarrow for each of
    ``tables`` (input or output paths; None skipped) that is Parquet (`table_kind`).
    Nothing is imported (`runtime.require_extra`), so the check costs milliseconds.

    Raises:
        MissingDependency: the first package missing, with its ``pip install`` command.
    """
    from ..data.table_io import table_kind
    from ..runtime import require_extra

    if any(t is not None and table_kind(t) == "parquet" for t in tables):
        needs = (*needs, "parquet")
    for need in needs:
        require_extra(*EXTRA_NEEDS[need])


def load_embedder(
    model: str | None,
    dtype: str,
    quantize: str | None = None,
    device: str = "cpu",
    runtime: str = "torch",
    adapter: Path | None = None,
):
    """The `SentenceEmbedder` of a command (embed, search, index, mine-negatives) on
    ``device`` (a `torch_device` value), with ``--runtime`` and ``--quantize``; the dtype
    choice, the runtime's check or the int8 plan on stderr. ``adapter``: a PEFT LoRA adapter
    directory merged into the encoder (``--adapter``).

    Raises:
        InputError: see `check_runtime`; int8 asked for off the CPU (its engine is ONNX
            Runtime on the CPU).
    """
    from ..pipelines.embedding.embed import SentenceEmbedder

    check_runtime(runtime, quantize, device)
    if runtime != "torch":
        path = model_path(model)
        embedder = SentenceEmbedder(
            path, dtype=dtype, runtime=runtime, quantize=quantize, adapter=adapter
        )
        err.print(f"runtime: {embedder.dtype_reason}", soft_wrap=True)
        return embedder
    check_quantize(quantize, dtype)
    if quantize is None:
        return SentenceEmbedder(
            model_path(model), dtype=torch_dtype(dtype, device), device=device, adapter=adapter
        )
    if device != "cpu":
        raise InputError(
            f"--quantize int8 runs on the CPU; drop it or use --device cpu, not {device}"
        )
    return load_int8(
        lambda: SentenceEmbedder(
            model_path(model), dtype="fp32", quantize=quantize, adapter=adapter
        )
    )


def model_overrides(
    layers: int | None,
    hidden: int | None,
    heads: int | None,
    dropout: float | None = None,
) -> dict[str, Any]:
    """`EncoderConfig` overrides from --layers / --hidden (FFN = 4H) / --heads / --dropout."""
    overrides: dict[str, Any] = {}
    if layers:
        overrides["num_hidden_layers"] = layers
    if hidden:
        overrides.update(hidden_size=hidden, intermediate_size=4 * hidden)
    if heads:
        overrides["num_attention_heads"] = heads
    if dropout is not None:
        overrides.update(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    return overrides


@contextlib.contextmanager
def training_threads(requested: int = 0) -> Iterator[str]:
    """Thread pools that do not oversubscribe the CPU while a training command runs (restored
    after); prints, on the main process, the one line that says what was chosen (and yields it).

    ``TOKENIZERS_PARALLELISM`` (when unset) becomes ``false``: the tokenizer's pool and torch's
    otherwise fight over the same cores. torch's intra-op threads: ``requested`` when > 0, else
    ``OMP_NUM_THREADS`` when that is set, else the cores free right now (`runtime.free_cores`:
    never more threads than free cores) divided by the processes on this node
    (``LOCAL_WORLD_SIZE`` under torchrun), then kept at the free cores while the run goes on
    (`runtime.AdaptiveThreads`, re-decided between steps).
    """
    import os

    import torch

    from ..runtime import apply_threads, governor_scope

    before_threads, before_env = torch.get_num_threads(), os.environ.get("TOKENIZERS_PARALLELISM")
    tokenizers = ""
    if "TOKENIZERS_PARALLELISM" not in os.environ:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        tokenizers = "; TOKENIZERS_PARALLELISM=false"
    from ..runtime import MAX_PROCESSES, env_int

    procs = env_int("LOCAL_WORLD_SIZE", 1, minimum=1, maximum=MAX_PROCESSES)
    try:
        with governor_scope():  # the governor apply_threads starts ends with the block
            line = apply_threads(requested, procs) + tokenizers
            if is_main_process():
                err.print(line, markup=False, highlight=False)
            yield line
    finally:
        torch.set_num_threads(before_threads)
        if before_env is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)


def is_main_process() -> bool:
    """Rank 0, or no torchrun at all (from the environment; nothing initialised)."""
    import os

    return os.environ.get("RANK", "0") == "0"


class MetavarCommand(TyperCommand):
    """A command whose positional arguments show only their name or ``metavar`` in help (typer
    otherwise appends the annotation as a type label, e.g. ``<list[Path]>``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.param_type_name == "argument":
                param.display_type_rich = lambda ctx: None  # type: ignore[method-assign]


class App(typer.Typer):
    """`typer.Typer` whose commands are `MetavarCommand`s (every command of the CLI)."""

    def command(self, *args: Any, **kwargs: Any) -> Any:
        """As `typer.Typer.command`, with ``cls`` defaulting to `MetavarCommand`."""
        kwargs.setdefault("cls", MetavarCommand)
        return super().command(*args, **kwargs)


#: Texts longer than this are shortened in tables (the full text goes to machine output).
SHOWN_CHARS = 40


def shorten(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` on one line, cut to ``limit`` characters plus "…" when longer."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


def fmt_score(x: float, digits: int = 3) -> str:
    """``x`` with ``digits`` decimals; a value that rounds to zero prints as 0.000, never -0.000."""
    s = f"{x:.{digits}f}"
    return s[1:] if s.startswith("-") and float(s) == 0 else s


FORMAT_HELP = "table (for reading) or jsonl (one JSON object a line on stdout, for pipes)."


def check_format(fmt: str) -> None:
    """Refuse a ``--format`` other than table or jsonl (`typer.BadParameter`)."""
    if fmt not in ("table", "jsonl"):
        raise typer.BadParameter(f"--format must be table or jsonl, got {fmt!r}")


def write_out(text: str) -> None:
    """Machine output: ``text`` as it is on stdout (never through the width-aware rich
    `console`, which wraps at the terminal width or ``COLUMNS`` even when stdout is a pipe)."""
    sys.stdout.write(text)
    sys.stdout.flush()


def print_json(obj) -> None:
    """Machine output: indented JSON on stdout with plain print (never wrapped or highlighted)."""
    write_out(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def write_jsonl(rows) -> None:
    """Machine output: one compact JSON object a line on stdout (`write_out`)."""
    write_out("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def print_summary_on_main_rank(summary: dict, keys: tuple[str, ...], device: str) -> None:
    """Print the run summary's ``keys`` as JSON on the main process only (under torchrun)."""
    from ..train.distributed import cleanup_distributed, init_distributed

    if init_distributed(device).is_main:
        print_json({k: summary[k] for k in keys})
    cleanup_distributed()


THREADS_HELP = (
    "torch intra-op threads (0: OMP_NUM_THREADS when set, else one per free core, re-decided "
    "between batches while the command runs; a core busy with another process is left to it). "
    "At most 4 per logical CPU; an OMP_NUM_THREADS above that is capped, one that is not a "
    "count ignored, each with a warning."
)


def compute_threads(requested: int = 0) -> str:
    """Set the intra-op threads of an inference command (`runtime.apply_threads`); the chosen
    line is logged at INFO (shown with ``-v``) and returned."""
    from ..runtime import apply_threads

    line = apply_threads(requested)
    logging.getLogger("bertfamily").info(line)
    return line
