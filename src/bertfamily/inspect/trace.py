"""The dataflow of one forward pass, traced by hooks (not written by hand).

Every module call becomes a step (forward pre/post hooks record the shapes of the tensors that
actually go in and come out); inside composite components (attention, heads, pooler) a
`TorchFunctionMode` records the tensor operations that carry the dataflow (projections, head
splits, score and value products, softmax), so a new attention kind shows its own steps
without any change here. Steps of the first layer step are kept in detail; later layer steps
only tell which unique layer ran (ALBERT's sharing).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ..config import EncoderConfig
from ..errors import InputError
from ..model import Model
from .describe import describe_module, describe_op
from .models import (
    DEFAULT_TEACHER_HIDDEN_SIZE,
    attach_objective_heads,
    build_heads,
    objective_heads,
    shrink_layers,
)
from .symbols import (
    choose_batch_shape,
    config_sizes,
    dim_symbol,
    shape_symbols,
    symbol_table,
)

log = logging.getLogger(__name__)

# Tensor operations that carry the dataflow inside a composite component. Other operations
# (additions, scaling, dtype casts) are folded into the step that follows them.
TRACED_OPS = {
    "linear",
    "matmul",
    "__matmul__",
    "bmm",
    "baddbmm",
    "einsum",
    "softmax",
    "scaled_dot_product_attention",
    "unbind",
    "gather",
    "tanh",
}
# Reshapes count as a step only when they change the rank between 3 (B, T, H) and 4 (heads).
RESHAPE_OPS = {"view", "reshape", "permute", "transpose", "flatten", "unflatten", "split", "chunk"}
SKIPPED_MODULES = (nn.Dropout,)
PRODUCT_OPS = {"matmul", "bmm", "baddbmm", "einsum"}
# Symbols that count things (rows, tokens, heads, layers): never the width of a Linear's output.
COUNT_SYMBOLS = ("B", "T", "S", "N", "G", "M", "L")


@dataclass
class Step:
    """One step of the traced dataflow.

    Attributes:
        key: alignment key, the same for the same role in every model: the module path with
            layer indices replaced by ``*`` (``encoder.layers.*.attention``), operations
            suffixed ``:op#k`` (k-th such operation in that module call; products are named by
            their symbolic output shape, ``:matmul(B,N,T,T)#0``, so roles line up across models).
        label: short display name.
        kind: component class name (``SelfAttention``) or ``op:<name>``.
        operation: what the step computes, as text.
        inputs / outputs: concrete shapes of the tensors that went in / came out (outputs may
            be named, e.g. ``probs`` and ``scores`` of an attention).
        input_symbols / output_symbols: the same shapes in the legend's letters.
        params: parameters owned by the step's module (0 for operations and for a shared
            layer's later runs).
        depth: nesting level for display (0 = top).
        block: the top-level part it belongs to (inputs, embeddings, layer, pooler, mlm_head...).
        repeat: how many times the step runs per forward (L for steps inside a layer).
        shared: the step runs the weights of an earlier layer step (ALBERT).
        note: extra text (e.g. which unique layers the L steps run).
        trunk: the step ran inside the encoder trunk's forward (False for inputs and heads,
            and for a trunk module that only a head runs, like DeBERTa's absolute position
            table in the enhanced mask decoder).
    """

    key: str
    label: str
    kind: str
    operation: str
    inputs: list[tuple[int, ...]]
    outputs: list[tuple[str, tuple[int, ...]]]
    input_symbols: list[str]
    output_symbols: list[str]
    params: int
    depth: int
    block: str
    repeat: int = 1
    shared: bool = False
    note: str = ""
    trunk: bool = False

    @property
    def output_shape(self) -> tuple[int, ...] | None:
        """The first output's shape, or None when the step has no output."""
        return self.outputs[0][1] if self.outputs else None

    def to_dict(self) -> dict[str, Any]:
        """Every field as a dict (`dataclasses.asdict`)."""
        return dataclasses.asdict(self)


@dataclass
class Trace:
    """The traced dataflow of one model: steps in execution order plus what they need to be read.

    Attributes:
        name: display name (preset or directory name).
        config: the full-size config the trace describes (layer count L included).
        symbols: symbol -> size for this config and batch shape.
        steps: the steps (first layer step in detail).
        layer_schedule: unique layer run at each of the L steps (from the config).
        lookups: when the trace ran on tokenized text (`text_inputs`), what each embedding
            table was indexed with, row by row: ``tokens``, ``input_ids``, ``token_type_ids``,
            ``position_ids`` (lists of the first row of the batch); else empty.
    """

    name: str
    config: EncoderConfig
    symbols: dict[str, int]
    steps: list[Step]
    layer_schedule: list[int] = field(default_factory=list)
    lookups: dict[str, list] = field(default_factory=dict)

    def by_key(self) -> dict[str, Step]:
        """Step key -> step."""
        return {s.key: s for s in self.steps}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: name, symbols, layer schedule, config (without ``extra``), steps,
        and the table lookups when the trace ran on text."""
        out = {
            "name": self.name,
            "symbols": self.symbols,
            "layer_schedule": self.layer_schedule,
            "config": {k: v for k, v in self.config.to_dict().items() if k != "extra"},
            "steps": [s.to_dict() for s in self.steps],
        }
        if self.lookups:
            out["lookups"] = self.lookups
        return out


# ----------------------------------------------------------------------------------------------
def _tensors(obj: Any, name: str = "") -> list[tuple[str, torch.Tensor]]:
    """Tensors in an output, named by dataclass field or dict key where there is one (one level
    deep; a dict's dataclass values, e.g. Longformer's GlobalTokens, one level further)."""
    if isinstance(obj, torch.Tensor):
        return [(name, obj)]
    if isinstance(obj, (tuple, list)):  # e.g. a layer's (hidden, attention output): tensors only
        return [(name, item) for item in obj if isinstance(item, torch.Tensor)]
    if isinstance(obj, dict):  # encoder-level attention inputs: {"relative_embeddings": ...}
        out: list[tuple[str, torch.Tensor]] = []
        for key, value in obj.items():
            if isinstance(value, torch.Tensor):
                out.append((str(key), value))
            elif dataclasses.is_dataclass(value) and not isinstance(value, type):
                out += [(f"{key}.{n}", t) for n, t in _tensors(value)]
            elif isinstance(value, dict):  # rotary: table name → RotaryTables
                out += [(f"{key}.{n}", t) for n, t in _tensors(value)]
        return out
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [
            (f.name, v)
            for f in dataclasses.fields(obj)
            if isinstance(v := getattr(obj, f.name), torch.Tensor)
        ]
    return []


def _key(path: str) -> str:
    """Module path with list indices replaced by ``*`` (layer 0 and layer 5 share a role)."""
    return re.sub(r"(?<=\.)\d+(?=\.|$)|^\d+(?=\.|$)", "*", path)


@dataclass
class _Call:
    path: str
    module: nn.Module
    depth: int
    unit: int  # index of the layer step this call belongs to (-1 outside layers)
    step: Step | None = None
    op_counts: dict[str, int] = field(default_factory=dict)


class _Tracer(TorchFunctionMode):
    """Records module calls (through hooks) and the dataflow operations inside composites."""

    def __init__(
        self, model: Model, symbols: dict[str, int], extra: dict[str, int] | None = None
    ) -> None:
        super().__init__()
        self.model = model
        self.base = symbols
        self.extra = extra if extra is not None else {}  # filled during the forward (M)
        self.names = {m: n for n, m in model.named_modules()}
        self.stack: list[_Call] = []
        self.steps: list[Step] = []
        self.unit = -1  # current layer step
        self.unit_modules: list[str] = []  # module path run at each layer step
        self.handles: list[Any] = []

    @property
    def symbols(self) -> dict[str, int]:
        """The config's symbols, then those the objective heads set while running."""
        return {**self.base, **self.extra}

    # -- hooks -----------------------------------------------------------------------------
    def attach(self) -> None:
        for module in self.model.modules():
            if module is self.model:
                continue
            self.handles.append(module.register_forward_pre_hook(self._pre, with_kwargs=True))
            self.handles.append(module.register_forward_hook(self._post))

    def detach(self) -> None:
        for h in self.handles:
            h.remove()

    def _is_unit(self, path: str) -> bool:
        # A direct child of a ModuleList of layers: one layer step.
        return bool(re.fullmatch(r".*layers\.\d+", path))

    def _pre(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        path = self.names.get(module, type(module).__name__)
        if self._is_unit(path):
            self.unit += 1
            self.unit_modules.append(path)
        unit = self.unit if ".layers." in path + "." or self._is_unit(path) else -1
        depth = sum(1 for c in self.stack if c.step is not None)
        in_trunk = any(c.path == "encoder" for c in self.stack)
        call = _Call(path, module, depth, unit)
        self.stack.append(call)
        # The trunk container is not a step of its own (its parts are); nor are dropouts
        # (identity in eval mode) and later layer steps (they repeat the first one).
        if path == "encoder" or isinstance(module, SKIPPED_MODULES) or unit > 0:
            return
        shapes = [
            tuple(a.shape)
            for a in list(args) + list(kwargs.values())
            if isinstance(a, torch.Tensor)
        ]
        op, kind = describe_module(
            module, self.model.config, {"Ht": self.extra["Ht"]} if "Ht" in self.extra else None
        )
        key = _key(path)
        label = key.removeprefix("encoder.").removeprefix("layers.*.")
        call.step = Step(
            key=key,
            label="layer" if label == "layers.*" else label,
            kind=kind,
            operation=op,
            inputs=shapes,
            outputs=[],
            input_symbols=[shape_symbols(s, self.symbols) for s in shapes],
            output_symbols=[],
            params=sum(p.numel() for p in module.parameters()),
            depth=depth,
            block=_block(path),
            trunk=in_trunk,
        )
        self.steps.append(call.step)

    def _post(self, module: nn.Module, args: tuple, output: Any) -> None:
        call = self.stack.pop()
        if call.step is None:
            return
        outs = [(n, tuple(t.shape)) for n, t in _tensors(output)]
        call.step.outputs = outs
        call.step.output_symbols = [self._output_symbols(call, module, s) for _, s in outs]

    def _output_symbols(self, call: _Call, module: nn.Module, shape: tuple[int, ...]) -> str:
        """A module output's shape in symbols, from what the trace knows of where each size came
        from rather than from the first symbol with that value (bert-tiny's 2 classes are not
        its 2 heads, N): a Linear's last size is its width, named only by a width symbol
        (`COUNT_SYMBOLS` never name one); a container's output is its last traced step of that
        shape, whose symbols it keeps."""
        if isinstance(module, nn.Linear) and shape:
            widths = {k: v for k, v in self.symbols.items() if k not in COUNT_SYMBOLS}
            lead = [dim_symbol(int(d), self.symbols) for d in shape[:-1]]
            return "(" + ", ".join([*lead, dim_symbol(int(shape[-1]), widths)]) + ")"
        start = self.steps.index(call.step)
        for step in reversed(self.steps[start + 1 :]):
            for (_, inner), symbols in zip(step.outputs, step.output_symbols, strict=False):
                if tuple(inner) == shape:
                    return symbols
        return shape_symbols(shape, self.symbols)

    # -- operations ----------------------------------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.stack:
            call = self.stack[-1]
            if call.step is not None and any(True for _ in call.module.children()):
                self._record_op(call, func, args, out)
        return out

    def _record_op(self, call: _Call, func, args, out) -> None:
        name = getattr(func, "__name__", str(func))
        ins = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
        outs = [t for _, t in _tensors(out)] if not isinstance(out, torch.Tensor) else [out]
        if not outs or not ins:
            return
        if name in RESHAPE_OPS:
            if not (
                (len(ins[0]) == 3 and outs[0].dim() == 4)
                or (len(ins[0]) == 4 and outs[0].dim() == 3)
            ):
                return
        elif name not in TRACED_OPS:
            return
        name = "matmul" if name == "__matmul__" else name
        out_shapes = (
            [tuple(t.shape) for t in outs][:1]
            if name != "unbind"
            else [tuple(outs[0].shape)] * len(outs)
        )
        in_sym = [shape_symbols(s, self.symbols) for s in ins]
        out_sym = [shape_symbols(s, self.symbols) for s in out_shapes]
        # Products are keyed by their symbolic output shape, so the same role lines up across
        # models whatever other products an attention kind adds before it (DeBERTa's position
        # terms, Longformer's global columns): "matmul(B,N,T,T)#0" is the scores QKᵀ.
        role = f"matmul{out_sym[0].replace(' ', '')}" if name in PRODUCT_OPS and out_sym else name
        k = call.op_counts.get(role, 0)
        call.op_counts[role] = k + 1
        text = describe_op(name, in_sym, out_sym, args, self.model.config)
        base = call.step.key
        self.steps.append(
            Step(
                key=f"{base}:{role}#{k}",
                label=f"{call.step.label} · {name}",
                kind=f"op:{name}",
                operation=text,
                inputs=ins,
                outputs=[("", s) for s in out_shapes],
                input_symbols=in_sym,
                output_symbols=out_sym,
                params=0,
                depth=call.step.depth + 1,
                block=call.step.block,
                trunk=call.step.trunk,
            )
        )


def _block(path: str) -> str:
    parts = path.split(".")
    if parts[0] == "encoder" and len(parts) > 1:
        return "layer" if parts[1] == "layers" else parts[1]
    return parts[0]


# ----------------------------------------------------------------------------------------------
def example_inputs(
    config: EncoderConfig, batch: int, seq_len: int, seed: int = 0
) -> dict[str, torch.Tensor]:
    """A batch for tracing: random ids away from the padding id, the last two tokens of the
    last row padded, segment ids (0 then 1) when the model has two or more segments, a
    condition vector when the model has conditional norms, and (windowed attention) a global
    attention mask on the first G tokens of every row (`global_token_count`), so the trace
    shows the global rows and columns beside the band."""
    g = torch.Generator().manual_seed(seed)
    low = config.pad_token_id + 1 if config.pad_token_id + 1 < config.vocab_size else 0
    ids = torch.randint(low, config.vocab_size, (batch, seq_len), generator=g)
    mask = torch.ones(batch, seq_len, dtype=torch.long)
    if seq_len > 2:
        ids[-1, -2:] = config.pad_token_id
        mask[-1, -2:] = 0
    inputs = {"input_ids": ids, "attention_mask": mask}
    if config.type_vocab_size >= 2:
        types = torch.zeros(batch, seq_len, dtype=torch.long)
        types[:, seq_len // 2 :] = 1
        inputs["token_type_ids"] = types
    C = getattr(config, "condition_size", None)
    if C and getattr(config, "conditional_norms", ()):
        inputs["condition"] = torch.randn(batch, C, generator=g)
    if config.attention_kind == "windowed":
        glob = torch.zeros(batch, seq_len, dtype=torch.long)
        glob[:, : global_token_count(config, batch, seq_len)] = 1
        inputs["global_attention_mask"] = glob
    return inputs


def global_token_count(config: EncoderConfig, batch: int, seq_len: int) -> int:
    """G for a traced batch of a windowed model: the smallest count from 5 up that differs from
    B, T and every size of the config (so "G" names exactly one size), and leaves at least
    one local token; 1 when no such count exists (then G is shown as a number)."""
    taken = {batch, seq_len} | config_sizes(config)
    for g in range(5, seq_len - 1):
        if g not in taken:
            return g
    return 1


def text_inputs(
    tokenizer: Any, text: str, text_pair: str | None = None
) -> tuple[dict[str, torch.Tensor], dict[str, list]]:
    """A batch of one tokenized text or sentence pair (B = 1), and its table lookups.

    For a pair the segment ids read 0 over ``[CLS] A [SEP]`` and 1 over ``B [SEP]`` (the
    walkthrough's 00000111 for ``[CLS] 我 爱 你 [SEP] 中 国 [SEP]``; Devlin et al. 2019 §3,
    Figure 2: input embedding = token + segment + position embedding).

    Returns:
        (inputs: ``input_ids``, ``attention_mask``, ``token_type_ids`` when the tokenizer
        makes them, each (1, T) int64; lookups: ``tokens``, ``input_ids``,
        ``token_type_ids``, ``position_ids`` as plain lists of length T).

    Raises:
        ValueError: an empty text.
    """
    if not text or (text_pair is not None and not text_pair):
        raise InputError("the text (and the text pair, when given) must not be empty")
    enc = tokenizer(text, text_pair) if text_pair is not None else tokenizer(text)
    ids = enc["input_ids"][0].tolist()
    T = len(ids)
    types = enc["token_type_ids"][0].tolist() if "token_type_ids" in enc else [0] * T
    lookups = {
        "tokens": tokenizer.convert_ids_to_tokens(ids),
        "input_ids": ids,
        "token_type_ids": types,
        "position_ids": list(range(T)),
    }
    return dict(enc), lookups


def trace_model(
    model: Model,
    *,
    name: str = "model",
    batch: int | None = None,
    seq_len: int | None = None,
    full_config: EncoderConfig | None = None,
    inputs: dict[str, torch.Tensor] | None = None,
    extra_symbols: dict[str, int] | None = None,
) -> Trace:
    """Trace one forward pass of ``model`` (eval mode, no gradients, attention weights on).

    Args:
        model: the model to run (may have fewer layers than ``full_config``).
        name: display name.
        batch, seq_len: B and T (default: chosen distinct from every size of the config).
        full_config: the config the trace stands for (default ``model.config``); gives L and the
            layer schedule shown.
        inputs: the batch to run (default `example_inputs`).
        extra_symbols: symbols of attached objective heads (`attach_objective_heads`'s dict,
            which its hook fills during the forward).

    Returns:
        A `Trace`.
    """
    config = model.config
    full = full_config or config
    if batch is None or seq_len is None:
        b, t = choose_batch_shape(config, batch or 5, seq_len or 16)
        batch, seq_len = batch or b, seq_len or t
    inputs = inputs if inputs is not None else example_inputs(config, batch, seq_len)
    symbols = symbol_table(config, batch, seq_len)
    glob = inputs.get("global_attention_mask")
    if glob is not None:
        G = int(glob.bool().sum(dim=1).max()) if glob.numel() else 0
        if G > 1 and G not in symbols.values() and G not in config_sizes(config):
            symbols["G"] = G
    tracer = _Tracer(model, symbols, extra_symbols)
    input_steps = [
        Step(
            key=f"inputs.{k}",
            label=k,
            kind="input",
            operation=_INPUT_TEXT.get(k, "input"),
            inputs=[],
            outputs=[("", tuple(v.shape))],
            input_symbols=[],
            output_symbols=[shape_symbols(v.shape, symbols)],
            params=0,
            depth=0,
            block="inputs",
        )
        for k, v in inputs.items()
    ]
    was_training = model.training
    model.eval()
    tracer.attach()
    try:
        with torch.no_grad(), tracer:
            model(**inputs, output_attentions=True)
    finally:
        tracer.detach()
        model.train(was_training)
    steps = input_steps + tracer.steps
    _annotate_layers(steps, tracer.unit_modules, full)
    return Trace(
        name=name,
        config=full,
        symbols={**tracer.symbols, "L": full.num_hidden_layers},
        steps=steps,
        layer_schedule=list(full.layer_schedule),
    )


_INPUT_TEXT = {
    "input_ids": "token ids in [0, V)",
    "attention_mask": "1 = real token, 0 = padding",
    "token_type_ids": "segment ids (sentence A = 0, B = 1)",
    "condition": "condition vector c for the Conditional LayerNorms",
    "global_attention_mask": "1 = global attention (attends to and is attended by all T)",
}


def _annotate_layers(steps: list[Step], units: list[str], config: EncoderConfig) -> None:
    """Steps inside layers run L times; the layer step's note says which unique layers run and
    whether the traced model reused a layer's weights at a later step (sharing)."""
    L = config.num_hidden_layers
    unique = config.num_unique_layers
    shared_traced = len(set(units)) < len(units)
    for s in steps:
        if s.block == "layer":
            s.repeat = L
    for s in steps:
        if s.block == "layer" and s.depth == 0 and s.key.endswith("layers.*"):
            if shared_traced or unique < L:
                s.shared = True
                s.note = (
                    f"{L} steps run {unique} unique layer"
                    f"{'s' if unique != 1 else ''} (weights shared); schedule "
                    f"{config.layer_schedule}"
                )
            else:
                s.note = f"× {L} layers, each with its own weights"


def trace(
    model: str | EncoderConfig,
    *,
    heads: list[str] | tuple[str, ...] = (),
    batch: int | None = None,
    seq_len: int | None = None,
    vocab_size: int | None = None,
    condition_size: int | None = None,
    shrink: bool = True,
    seed: int = 0,
    tokenizer: Any = None,
    text: str | None = None,
    text_pair: str | None = None,
    teacher_hidden_size: int = DEFAULT_TEACHER_HIDDEN_SIZE,
) -> Trace:
    """Trace a preset, checkpoint directory's config, or config (random weights).

    With ``text`` (and ``text_pair``) the forward runs on that text as ``tokenizer`` (a
    loaded tokenizer) encodes it (`text_inputs`: B = 1, T = its length; ``batch`` and
    ``seq_len`` are ignored), and the trace records the table lookups.

    The model is built with the config's sizes but (``shrink``) at most two layer steps with the
    same sharing pattern, so even BERT-large traces in a fraction of a second; L and the layer
    schedule shown are the full model's.

    Raises:
        ValueError: see `resolve_config`, `build_heads`; ``text`` without ``tokenizer``; an
            id outside the model's vocabulary (a tokenizer of another model).
    """
    from ..build import build_model
    from .models import resolve_config

    name, config = resolve_config(model, vocab_size=vocab_size, condition_size=condition_size)
    inputs, lookups = None, {}
    if text is not None:
        if tokenizer is None:
            raise InputError("tracing a text needs its tokenizer")
        inputs, lookups = text_inputs(tokenizer, text, text_pair)
        batch, seq_len = inputs["input_ids"].shape
        if max(lookups["input_ids"]) >= config.vocab_size:
            raise InputError(
                f"the tokenizer gives id {max(lookups['input_ids'])}, outside {name}'s "
                f"vocabulary of {config.vocab_size}: use the model's own tokenizer"
            )
    run_config = shrink_layers(config) if shrink else config
    torch.manual_seed(seed)
    m = build_model(run_config, heads=build_heads(heads))
    extra = attach_objective_heads(
        m, objective_heads(heads), teacher_hidden_size=teacher_hidden_size
    )
    log.info(
        "tracing %s (%d of %d layer steps built)",
        name,
        run_config.num_hidden_layers,
        config.num_hidden_layers,
    )
    tr = trace_model(
        m,
        name=name,
        batch=batch,
        seq_len=seq_len,
        full_config=config,
        inputs=inputs,
        extra_symbols=extra,
    )
    tr.lookups = lookups
    return tr
