"""ONNX export of any bertfamily model, with dynamic batch and sequence axes.

Every family exports (absolute-position encoders, ALBERT's shared layers, DeBERTa's
disentangled attention with its enhanced mask decoder, Longformer's windowed attention) with
every head. The graph is traced with the TorchScript exporter; the attention components take
trace-friendly paths while `torch.jit.is_tracing()` (same math, no Python int taken from a
tensor's values or a dynamic size, no loop whose length depends on the input).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..errors import InputError
from ..files import atomic_write
from ..model import Model
from ..notices import silence_root_warnings
from ..runtime import require

log = logging.getLogger(__name__)

# What torch.onnx needs to write a graph; the [onnx] extra installs them (and onnxruntime).
ONNX_MODULES = ("onnx",)

MIN_OPSET = 14  # scaled_dot_product_attention has an ONNX form from opset 14 on


@dataclass(frozen=True)
class _Output:
    """One graph output: its name, the `ModelOutput` field it reads and its dynamic axes."""

    name: str
    field: str
    axes: dict[int, str]


#: The graph output of a sentence head (`export_onnx` ``sentence``): sentence-transformers' name.
SENTENCE_OUTPUT = "sentence_embedding"


def _outputs(model: Model, sentence: bool = False) -> list[_Output]:
    """The graph outputs of ``model``, under transformers' names (``sentence``: and the
    sentence head's, last)."""
    bt = {0: "B", 1: "T"}
    if sentence:
        return [*_outputs(model), _Output(SENTENCE_OUTPUT, SENTENCE_OUTPUT, {0: "B"})]
    if model.task == "qa":
        return [_Output(n, n, bt) for n in ("start_logits", "end_logits")]
    if model.task is not None:
        axes = {"classify": {0: "B"}, "tokens": bt, "choice": {0: "B", 1: "K"}}[model.task]
        return [_Output("logits", "logits", axes)]
    outs = [_Output("last_hidden_state", "last_hidden_state", bt)]
    if model.encoder.pooler is not None:
        outs.append(_Output("pooler_output", "pooler_output", {0: "B"}))
    if model.mlm_head is not None:
        outs.append(_Output("logits", "logits", bt))
    if model.pair_head is not None:
        # BertForNextSentencePrediction's "logits"; BertForPreTraining's name beside the MLM's.
        name = "seq_relationship_logits" if model.mlm_head is not None else "logits"
        outs.append(_Output(name, "pair_logits", {0: "B"}))
    return outs


def output_names(model: Model, sentence: bool = False) -> list[str]:
    """Output names of ``model``'s ONNX graph, under transformers' names.

    Base model and pretraining heads: last_hidden_state (B, T, H), then pooler_output (B, H)
    where the model has a pooler, logits (B, T, V) with an MLM head, and the pair (NSP/SOP)
    head's (B, 2) scores as logits (pair head alone) or seq_relationship_logits (beside the
    MLM head). Task heads: logits ("classify" (B, C), "tokens" (B, T, C), "choice" (B, K)), or
    start_logits and end_logits (B, T) ("qa"). ``sentence`` (a graph exported with a sentence
    head): then sentence_embedding (B, D), last.
    """
    return [o.name for o in _outputs(model, sentence)]


class _OnnxWrapper(nn.Module):
    """Positional inputs and outputs for the exporter: (input_ids, attention_mask
    [, token_type_ids]) → the tensors named by `output_names`."""

    def __init__(
        self, model: Model, with_token_types: bool, sentence: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.model = model
        self.with_token_types = with_token_types
        self.sentence = sentence
        self.fields = [o.field for o in _outputs(model)]

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        out = self.model(
            input_ids, attention_mask, token_type_ids if self.with_token_types else None
        )
        outs = tuple(getattr(out, f) for f in self.fields)
        if self.sentence is None:
            return outs
        return outs + (self.sentence(out.last_hidden_state, attention_mask),)


def _example(model: Model) -> tuple[torch.Tensor, torch.Tensor]:
    """A padded example batch to trace: ids (2, T) ((2, 2, T) for "choice") of ordinary
    tokens with separators laid out as ``x q q </s></s> c c ... </s>`` (so that task heads'
    default global attention finds a question and an answer), and a mask whose second row is
    padded from T // 2 on. Only the ops are recorded, not these values."""
    config = model.config
    T = min(11, config.max_sequence_length)
    special = {config.pad_token_id, config.sep_token_id}
    ordinary = [t for t in range(config.vocab_size) if t not in special] or [0]
    gen = torch.Generator().manual_seed(0)
    ids = torch.tensor(ordinary)[torch.randint(len(ordinary), (2, T), generator=gen)]
    mask = torch.ones(2, T, dtype=torch.long)
    mask[1, T // 2 :] = 0
    if config.sep_token_id is not None and T >= 6:
        ids[:, 3:5] = config.sep_token_id
        ids[0, T - 1] = ids[1, T // 2 - 1] = config.sep_token_id
    ids = ids.masked_fill(mask == 0, config.pad_token_id)
    if model.task == "choice":
        ids, mask = ids[:, None].repeat(1, 2, 1), mask[:, None].repeat(1, 2, 1)
    return ids, mask


def check_exportable(model: Model, opset: int = 17, sentence: bool = False) -> None:
    """Raise ``ValueError`` for what the exported graph could not compute correctly.

    Raises:
        ValueError: an opset below `MIN_OPSET`; a model with conditional norms (the graph has
            no ``condition`` input); a sentence head on a model with a task head.
    """
    if sentence and model.task is not None:
        raise InputError(
            f"a sentence head (pooling) exports on a base encoder, not on a {model.task!r} "
            "task head"
        )
    if opset < MIN_OPSET:
        raise InputError(f"ONNX export needs opset >= {MIN_OPSET} (attention), got {opset}")
    if model.takes_condition:
        raise InputError(
            "cannot export a model with conditional norms: the ONNX graph has no condition input"
        )


def export_onnx(
    model: Model, path: str | Path, opset: int = 17, *, sentence: nn.Module | None = None
) -> Path:
    """Write ``model`` as an ONNX graph with dynamic batch (B) and sequence (T) axes.

    ``sentence``: a module ``(last_hidden_state (B, T, H) float32, attention_mask (B, T)
    int64) → (B, D) float32`` traced into the graph after the encoder, whose result is one
    more output, ``sentence_embedding`` (`SENTENCE_OUTPUT`; a sentence-transformers
    directory's pooling, Dense layers and normalisation:
    `pipelines.embedding.onnx_export.SentenceOnnxHead`). Base encoders only.

    Inputs: input_ids (B, T) int64, attention_mask (B, T) int64 (0/1, any padding), and
    token_type_ids (B, T) int64 for models with a segment embedding; with the "choice" head
    each is (B, K, T) with a dynamic K. Outputs: see `output_names`. The padded execution path
    of the eval-mode model is exported (unpadding is data-dependent); ONNX Runtime matches
    PyTorch within 1e-4 at any B, T (and K) up to the model's position limit.

    Windowed attention (Longformer): any T (not only multiples of the window). There is no
    global_attention_mask input: task heads with a default global attention ("classify",
    "qa", "choice") compute it in the graph from input_ids, with a number of global tokens
    that is a dynamic size of the graph (0 allowed); the base model and the "mlm" and
    "tokens" heads run without global attention, as in PyTorch when none is given. Unlike
    PyTorch, the graph does not check its inputs: ids outside the vocabulary, a sequence longer
    than the position table, or (Longformer "qa"/"choice") a row without a separator, which
    PyTorch refuses with ValueError, give unspecified outputs.

    Raises:
        ValueError: see `check_exportable`.
        MissingDependency: onnx is not installed (``pip install "bertfamily[onnx]"``).
    """
    with_sentence = sentence is not None
    check_exportable(model, opset, with_sentence)
    for module in ONNX_MODULES:
        require(module, "onnx", "ONNX export (bertfamily export)")
    path = Path(path)
    was_training, unpad = model.training, model.encoder.unpad
    head_training = sentence.training if with_sentence else False
    model.eval()
    if with_sentence:
        sentence.eval()
    model.encoder.unpad = False
    with_tt = model.config.type_vocab_size > 0
    ids, mask = _example(model)
    inputs = (ids, mask) + ((torch.zeros_like(ids),) if with_tt else ())
    names_in = ["input_ids", "attention_mask"] + (["token_type_ids"] if with_tt else [])
    in_axes = {0: "B", 1: "K", 2: "T"} if model.task == "choice" else {0: "B", 1: "T"}
    outputs = _outputs(model, with_sentence)
    axes = {n: in_axes for n in names_in} | {o.name: o.axes for o in outputs}
    try:

        def write(tmp: Path) -> None:
            with warnings.catch_warnings():
                # torch's notices that the TorchScript exporter (chosen here: dynamo=False, for
                # every family's trace-friendly paths) is the legacy one, with URLs
                warnings.filterwarnings("ignore", "You are using the legacy TorchScript")
                warnings.filterwarnings("ignore", "The feature will be removed")
                # a Python branch of ours on a traced size: the branches the export takes are
                # the padded path's, the same for every size (checked against ONNX Runtime)
                warnings.filterwarnings(
                    "ignore", category=torch.jit.TracerWarning, module=r"bertfamily\."
                )
                # the sentence head's first/last-token pick: its indices come from argmax, so
                # the negative indices this notice warns about never occur
                warnings.filterwarnings("ignore", "Exporting aten::index operator of advanced")
                torch.onnx.export(
                    _OnnxWrapper(model, with_tt, sentence),
                    inputs,
                    str(tmp),
                    input_names=names_in,
                    output_names=[o.name for o in outputs],
                    dynamic_axes=axes,
                    opset_version=opset,
                    dynamo=False,
                )

        atomic_write(path, write)
    finally:
        model.train(was_training)
        if with_sentence:
            sentence.train(head_training)
        model.encoder.unpad = unpad
    log.info("exported %s to %s", type(model).__name__, path)
    return path


#: What `export_onnx_directory` leaves out of the copied model directory: other weight files
#: and other runtimes' graphs (the directory gets the ONNX graph as its weights).
_NOT_COPIED = ("*.safetensors", "*.bin", "*.pt", "*.h5", "*.msgpack", "*.onnx", "*.onnx_data",
               "onnx", "openvino", ".git", ".cache")  # fmt: skip
ONNX_FILE = "model.onnx"


def export_onnx_directory(
    model_dir: str | Path,
    output: str | Path,
    opset: int = 17,
    *,
    model: Model | None = None,
    sentence: nn.Module | None = None,
) -> Path:
    """Write ``output``, a model directory whose weights are an ONNX graph: ``model.onnx``
    (`export_onnx` of the directory's model) beside every other file of ``model_dir``
    (config.json, the tokenizer files, sentence-transformers' module files), so that optimum's
    ``ORTModelForFeatureExtraction.from_pretrained(output)`` and sentence-transformers'
    ``SentenceTransformer(output, backend="onnx")`` (which looks for ``model.onnx``, then
    ``onnx/model.onnx``) load it without exporting again. Other weight files are not copied.
    Replaces ``output`` all-or-nothing. ``model``: the directory's model when already loaded;
    ``sentence``: a sentence head traced into the graph (see `export_onnx`).

    Raises:
        ValueError: see `check_exportable`.
        MissingDependency: onnx is not installed.
        InputError: ``model_dir`` is not a directory.
    """
    import shutil

    from ..files import atomic_directory
    from ..pretrained import from_pretrained

    source, output = Path(model_dir), Path(output)
    if not source.is_dir():
        raise InputError(f"{source} is not a model directory")
    model = model if model is not None else from_pretrained(source)
    with atomic_directory(output, keep_existing=False) as tmp:
        for item in source.iterdir():
            if any(item.match(p) for p in _NOT_COPIED):
                continue
            if item.is_dir():
                shutil.copytree(item, tmp / item.name, ignore=shutil.ignore_patterns(*_NOT_COPIED))
            else:
                shutil.copy2(item, tmp / item.name)
        export_onnx(model, tmp / ONNX_FILE, opset=opset, sentence=sentence)
    return output


def onnx_node_name(linear: str) -> str:
    """The MatMul node the TorchScript exporter names for the Linear layer ``linear`` of a
    `Model` exported by `export_onnx` (``encoder.layers.0.ffn.up`` →
    ``/model/encoder/layers.0/ffn/up/MatMul``)."""
    segments: list[str] = []
    for part in linear.split("."):
        if part.isdigit() and segments:
            segments[-1] += f".{part}"
        else:
            segments.append(part)
    return "/model/" + "/".join(segments) + "/MatMul"


def quantize_onnx_int8(source: str | Path, path: str | Path, linears: list[str]) -> Path:
    """Write an int8 copy of an `export_onnx` graph: ONNX Runtime's dynamic quantiser
    (`onnxruntime.quantization.quantize_dynamic`: int8 weights with one scale per output
    channel, uint8 activations scaled at run time) on the MatMuls of the Linear layers
    ``linears`` only; every other node stays fp32.

    Raises:
        ValueError: a layer whose MatMul is not in the graph, or no layers.
        MissingDependency: onnxruntime is not installed.
    """
    require("onnxruntime", "onnx", "int8 ONNX export (bertfamily export --quantize int8)")
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    if not linears:
        raise InputError("no layers to quantise")
    nodes = {n.name for n in onnx.load(str(source), load_external_data=False).graph.node}
    wanted = [onnx_node_name(n) for n in linears]
    missing = [w for w in wanted if w not in nodes]
    if missing:
        raise InputError(f"these Linear layers have no MatMul node in {source}: {missing}")
    path = Path(path)

    def write(tmp: Path) -> None:
        # ONNX Runtime logs advice with a URL on the root logger: run its pre-processing
        # (shape inference, graph optimisation) first. Not needed here: its quantiser infers
        # the shapes itself, and only the named MatMuls are quantised.
        with silence_root_warnings("Please consider"):
            quantize_dynamic(
                str(source),
                str(tmp),
                per_channel=True,
                weight_type=QuantType.QInt8,
                nodes_to_quantize=wanted,
            )

    atomic_write(path, write)
    return path


class OnnxRuntimeEncoder:
    """An `export_onnx` graph run by ONNX Runtime, callable as ``Model.encoder`` is by the
    pipelines (``encoder(input_ids=…, attention_mask=…[, token_type_ids=…])`` → an object with
    ``last_hidden_state`` (B, T, H) float32): put it in a `SentenceEmbedder`'s ``model`` to run
    the same tokenisation, batching and pooling on ONNX Runtime (`OnnxRuntimeModel`).

    Args:
        path: the .onnx file.
        threads: ONNX Runtime intra-op threads (0: its default).

    Raises:
        MissingDependency: onnxruntime is not installed.
    """

    def __init__(self, path: str | Path, threads: int = 0) -> None:
        ort = require("onnxruntime", "onnx", "ONNX Runtime inference")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        # Idle workers sleep instead of spinning: between graph runs the pipeline tokenises and
        # pools in torch, and spinning workers would take its cores (measured in issue 20).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def __call__(self, **batch: torch.Tensor):
        """Run the graph on a tokenizer batch ((B, T) int64 tensors; keys the graph does not
        take are ignored)."""
        feed = {k: v.cpu().numpy() for k, v in batch.items() if k in self.inputs}
        (hidden,) = self.session.run(["last_hidden_state"], feed)
        return _Hidden(torch.from_numpy(hidden))


@dataclass(frozen=True)
class _Hidden:
    last_hidden_state: torch.Tensor


class OnnxRuntimeModel:
    """Stands for a `Model` in a pipeline that only calls ``model.encoder`` (`SentenceEmbedder`)."""

    def __init__(self, path: str | Path, threads: int = 0) -> None:
        self.encoder = OnnxRuntimeEncoder(path, threads)
