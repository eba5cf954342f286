"""The numeric precision an application runs in: ``dtype="auto"`` (bf16 only where the hardware
has bf16 matrix units) and int8 dynamic quantisation that keeps its accuracy.

int8 here is dynamic quantisation of ``nn.Linear`` layers (Jacob et al. 2018, "Quantization and
Training of Neural Networks for Efficient Integer-Arithmetic-Only Inference", §2.1: r = S(q − Z)):
weights int8 with one symmetric scale per output channel, activations uint8 with one scale per
call, computed at run time. Each layer's error is measured alone on calibration sentences
(`layer_errors`); layers are quantised from the least to the most damaging while the embeddings
still meet the accuracy bar (`AccuracyBar`: minimum cosine to fp32 and top-k search overlap);
the rest stay fp32 (`plan_int8`).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import shutil
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..errors import InputError, QuantizationError
from ..train.mixed_precision import cpu_bf16_units, cpu_int8_units

__all__ = [
    "DTYPE_NAMES",
    "Agreement",
    "AccuracyBar",
    "Int8Plan",
    "QuantizationError",
    "agreement",
    "apply_int8",
    "austen_calibration",
    "cached_int8",
    "cached_openvino",
    "openvino_int8",
    "int8_onnx_model",
    "cpu_bf16_units",
    "cpu_int8_units",
    "layer_errors",
    "linear_layers",
    "plan_int8",
    "resolve_dtype",
    "swapped_agreement",
]

log = logging.getLogger(__name__)

DTYPE_NAMES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def resolve_dtype(
    dtype: str | torch.dtype | None, device: str | torch.device = "cpu", cpuinfo: str | None = None
) -> tuple[torch.dtype, str]:
    """The parameter dtype to run in, and why (one line for a log or stderr).

    ``"auto"`` picks bf16 only where it pays: a CUDA device that supports bf16, or a CPU with
    native bf16 dot-product units — AMX-BF16 tiles, or AVX512-BF16 alone (``vdpbf16ps``, as on
    AMD Zen 4): on a 2-core Zen 4 MiniLM embeddings ran 1.64× (Austen lines) and 1.40× (short
    queries) fp32's speed idle, 1.57× / 1.47× with a core busy, at min cosine 0.9999 and the
    same STS-B Spearman (benchmarks/embed.py → results/embed_zen4.json); on a Xeon with AMX
    3.0×. Everywhere else it picks fp32:
    emulated bf16 is slower than fp32 (0.26× on an AVX2-only CPU, issue 20).

    Args:
        dtype: "auto", "fp32", "bf16", a torch dtype, or None (fp32).
        device: where the model runs.
        cpuinfo: /proc/cpuinfo text, for tests (read when None).

    Returns:
        (torch dtype, reason).

    Raises:
        ValueError: an unknown dtype name.
    """
    if dtype is None:
        return torch.float32, "fp32 (default)"
    if isinstance(dtype, torch.dtype):
        return dtype, f"{str(dtype).removeprefix('torch.')} (requested)"
    if dtype in DTYPE_NAMES:
        return DTYPE_NAMES[dtype], f"{dtype} (requested)"
    if dtype != "auto":
        raise InputError(f"dtype must be auto or one of {sorted(DTYPE_NAMES)}, got {dtype!r}")
    device = torch.device(device)
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return torch.bfloat16, "bf16 (auto: this CUDA device supports bf16)"
        return torch.float32, "fp32 (auto: this CUDA device has no bf16 support)"
    if device.type != "cpu":
        return torch.float32, f"fp32 (auto: no bf16 rule for device {device.type})"
    units = cpu_bf16_units(cpuinfo)
    if "amx_bf16" in units:
        return torch.bfloat16, "bf16 (auto: this CPU has AMX-BF16 matrix units)"
    if units:
        return torch.bfloat16, "bf16 (auto: this CPU has AVX512-BF16 dot-product units)"
    return torch.float32, "fp32 (auto: this CPU has no bf16 matrix units; bf16 would be slower)"


@dataclass(frozen=True)
class AccuracyBar:
    """What a quantised embedder must keep: on every calibration sentence a cosine to the fp32
    vector ≥ ``min_cosine``, and on average ≥ ``min_overlap`` of each query's top-``k``
    nearest sentences (cosine) shared with fp32's."""

    min_cosine: float = 0.99
    min_overlap: float = 0.95
    k: int = 10


@dataclass(frozen=True)
class Agreement:
    """How close vectors are to reference ones: max |difference|, min/mean row cosine, mean
    top-k search overlap (queries against the sentences)."""

    max_abs_diff: float
    min_cosine: float
    mean_cosine: float
    top_k_overlap: float
    k: int

    def meets(self, bar: AccuracyBar) -> bool:
        """Whether this agreement satisfies ``bar``."""
        return self.min_cosine >= bar.min_cosine and self.top_k_overlap >= bar.min_overlap


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.clip(np.linalg.norm(x, axis=1, keepdims=True), 1e-12, None)


def agreement(
    ref: np.ndarray, new: np.ndarray, ref_queries: np.ndarray, new_queries: np.ndarray, k: int = 10
) -> Agreement:
    """Compare embeddings with reference ones.

    Args:
        ref: (N, D) reference sentence vectors.
        new: (N, D) candidate sentence vectors.
        ref_queries: (Q, D) reference query vectors; each side searches its own sentences.
        new_queries: (Q, D) candidate query vectors.
        k: neighbours compared per query (capped at N).

    Returns:
        `Agreement`; top-k overlap = mean over queries of |top_k(ref) ∩ top_k(new)| / k.

    Raises:
        ValueError: shapes that differ, or no rows.
    """
    if ref.shape != new.shape or ref_queries.shape != new_queries.shape or not len(ref):
        raise InputError(
            f"shapes differ or are empty: {ref.shape} vs {new.shape}, "
            f"{ref_queries.shape} vs {new_queries.shape}"
        )
    cos = (_unit(ref) * _unit(new)).sum(1)
    k = min(k, len(ref))

    def top(q: np.ndarray, s: np.ndarray) -> np.ndarray:
        return np.argsort(-(_unit(q) @ _unit(s).T), axis=1, kind="stable")[:, :k]

    a, b = top(ref_queries, ref), top(new_queries, new)
    overlap = float(np.mean([len(set(x) & set(y)) / k for x, y in zip(a, b)])) if len(a) else 1.0
    return Agreement(
        max_abs_diff=float(np.abs(ref - new).max()),
        min_cosine=float(cos.min()),
        mean_cosine=float(cos.mean()),
        top_k_overlap=overlap,
        k=k,
    )


def linear_layers(model: nn.Module) -> list[str]:
    """Names of the encoder's ``nn.Linear`` layers that an embedding forward pass runs (the
    layer stack; not the pooler or pretraining heads), in order."""
    return [
        n
        for n, m in model.named_modules()
        if isinstance(m, nn.Linear) and n.startswith("encoder.layers.")
    ]


def apply_int8(model: nn.Module, names: Sequence[str], per_channel: bool = True) -> nn.Module:
    """A copy of ``model`` whose Linear layers ``names`` are dynamically quantised to int8
    (`torch.ao.quantization.quantize_dynamic`: int8 weights, uint8 activations scaled per call).

    Args:
        model: an fp32 model on the CPU.
        names: module names of ``nn.Linear`` layers (see `linear_layers`).
        per_channel: one weight scale per output channel (else one per tensor).

    Raises:
        QuantizationError: a name that is not a Linear layer of ``model``, or a non-fp32 model.
    """
    modules = dict(model.named_modules())
    bad = [n for n in names if not isinstance(modules.get(n), nn.Linear)]
    if bad:
        raise QuantizationError(f"not Linear layers of this model: {bad}")
    if any(p.dtype != torch.float32 or p.device.type != "cpu" for p in model.parameters()):
        raise QuantizationError("int8 quantisation needs an fp32 model on the CPU")
    from torch.ao.quantization import (
        default_dynamic_qconfig,
        per_channel_dynamic_qconfig,
        quantize_dynamic,
    )

    from ..modules.kernels import use_kernel

    qconfig = per_channel_dynamic_qconfig if per_channel else default_dynamic_qconfig
    copied = copy.deepcopy(model)
    onednn = use_kernel(copied, "blas")  # torch.ao maps nn.Linear itself, not the subclass
    with warnings.catch_warnings():  # torch.ao's deprecation notice, once per layer
        warnings.simplefilter("ignore")
        quantized = quantize_dynamic(copied, {n: qconfig for n in names}, torch.qint8)
    if onednn:  # the layers kept fp32 run on the kernel they had
        use_kernel(quantized, "onednn")
    return quantized


@dataclass(frozen=True)
class Int8Plan:
    """Which Linear layers run int8, which stay fp32, and the evidence.

    ``layer_errors``: name → (min cosine, mean cosine) of the calibration embeddings with that
    layer alone quantised; ``agreement``: the whole plan's agreement with fp32 on calibration.
    """

    quantized: tuple[str, ...]
    kept: tuple[str, ...]
    layer_errors: dict[str, tuple[float, float]] = field(repr=False)
    agreement: Agreement
    bar: AccuracyBar

    def summary(self) -> str:
        """One line for a log or stderr."""
        n = len(self.quantized) + len(self.kept)
        a = self.agreement
        return (
            f"int8: {len(self.quantized)} of {n} Linear layers quantised (per-channel dynamic), "
            f"{len(self.kept)} kept fp32; calibration min cosine {a.min_cosine:.4f}, "
            f"top-{a.k} overlap {a.top_k_overlap:.3f} (bar {self.bar.min_cosine}, "
            f"{self.bar.min_overlap})"
        )


def layer_errors(embedder, texts: Sequence[str], ref: np.ndarray) -> dict[str, tuple[float, float]]:
    """Each encoder Linear layer's damage alone: the (min, mean) cosine of ``texts``' vectors
    with only that layer quantised (per-channel int8) to the fp32 vectors ``ref`` (N, D)."""
    fp32 = embedder.model
    out = {}
    try:
        for name in linear_layers(fp32):
            embedder.model = apply_int8(fp32, [name])
            cos = (_unit(ref) * _unit(embedder.encode(texts))).sum(1)
            out[name] = (float(cos.min()), float(cos.mean()))
    finally:
        embedder.model = fp32
    return out


PLAN_MARGIN = (0.002, 0.02)  # (cosine, overlap) the plan keeps above the bar on calibration


def plan_int8(
    embedder,
    texts: Sequence[str],
    queries: Sequence[str],
    bar: AccuracyBar = AccuracyBar(),
    margin: tuple[float, float] = PLAN_MARGIN,
) -> Int8Plan:
    """Choose the Linear layers to quantise: measure each alone (`layer_errors`), order them
    from least to most damaging (mean cosine), and keep the longest prefix whose quantised model
    meets ``bar`` raised by ``margin`` on ``texts``/``queries`` (binary search over the prefix
    length). The margin is there because the plan must hold on text it was not chosen on: with
    none, a plan at exactly 0.953 calibration overlap gave 0.943 on held-out Austen lines.

    Args:
        embedder: a `SentenceEmbedder` with an fp32 model on the CPU (left unchanged).
        texts: calibration sentences; queries: calibration queries searched among them.
        bar: the accuracy to keep.
        margin: (cosine, overlap) added to the bar during the search (capped at 1).

    Raises:
        QuantizationError: no texts or queries; not even the least damaging layer meets the bar.
    """
    if not texts or not queries:
        raise QuantizationError("int8 calibration needs sentences and queries")
    fp32 = embedder.model
    ref, ref_q = embedder.encode(texts), embedder.encode(queries)
    errors = layer_errors(embedder, texts, ref)
    order = sorted(errors, key=lambda n: -errors[n][1])
    search = AccuracyBar(
        min(1.0, bar.min_cosine + margin[0]), min(1.0, bar.min_overlap + margin[1]), bar.k
    )

    def check(n: int) -> Agreement:
        embedder.model = apply_int8(fp32, order[:n])
        try:
            return agreement(ref, embedder.encode(texts), ref_q, embedder.encode(queries), bar.k)
        finally:
            embedder.model = fp32

    lo, hi, best = 0, len(order), None  # invariant: prefix lo meets the bar
    while lo < hi:
        mid = (lo + hi + 1) // 2
        a = check(mid)
        if a.meets(search):
            lo, best = mid, a
        else:
            hi = mid - 1
    if lo == 0:
        a = check(1)
        raise QuantizationError(
            f"int8 cannot meet the accuracy bar on this model: quantising only its least "
            f"damaging layer ({order[0]}) gives min cosine {a.min_cosine:.4f}, top-{a.k} overlap "
            f"{a.top_k_overlap:.3f} (bar {search.min_cosine}, {search.min_overlap} with the "
            f"calibration margin); run it in fp32"
        )
    return Int8Plan(tuple(order[:lo]), tuple(order[lo:]), errors, best, bar)


def austen_calibration(
    sentences: int = 64, queries: int = 32, *, held_out: bool = False
) -> tuple[list[str], list[str]]:
    """Real calibration text: every k-th line of Jane Austen's novels (fetched resource
    ``janeausten``) of 3–64 words, and short lines (4–10 words) as queries; deterministic.
    ``held_out``: other lines (offsets 11 / 13), disjoint from the default ones, for checking
    what was calibrated on them.

    Raises:
        FetchError: the resource cannot be fetched.
    """
    from ..resources.cache import fetch

    lines = (fetch("janeausten") / "austen.txt").read_text(encoding="utf-8").splitlines()
    lines = [x.strip() for x in lines if 3 <= len(x.split()) <= 64 and not x.isupper()]
    short = [x for x in lines if 4 <= len(x.split()) <= 10]
    # offset 3 / 5: disjoint from the benchmark's slices (offset 0); 11 / 13 held out
    first, second = (11, 13) if held_out else (3, 5)
    return (
        lines[first :: len(lines) // sentences][:sentences],
        short[second :: len(short) // queries][:queries],
    )


CALIBRATION_VERSION = "austen-64x32-v1"  # names `austen_calibration`'s output in plan cache keys


def _plan_to_json(plan: Int8Plan) -> dict:
    return {
        "quantized": list(plan.quantized),
        "kept": list(plan.kept),
        "layer_errors": {k: list(v) for k, v in plan.layer_errors.items()},
        "agreement": dataclasses.asdict(plan.agreement),
        "bar": dataclasses.asdict(plan.bar),
    }


def _plan_from_json(data: dict) -> Int8Plan:
    return Int8Plan(
        tuple(data["quantized"]),
        tuple(data["kept"]),
        {k: (v[0], v[1]) for k, v in data["layer_errors"].items()},
        _recorded_agreement(data["agreement"]),
        AccuracyBar(**data["bar"]),
    )


def swapped_agreement(embedder, model, texts, queries, k: int = 10) -> Agreement:
    """How ``model``, standing in for ``embedder.model`` (an exported graph's runtime), agrees
    with it: both embed ``texts`` and ``queries`` through ``embedder``'s own tokenisation and
    pooling (`agreement`). ``embedder.model`` is restored, also on an error."""
    own = embedder.model
    ref, ref_q = embedder.encode(list(texts)), embedder.encode(list(queries))
    embedder.model = model
    try:
        new, new_q = embedder.encode(list(texts)), embedder.encode(list(queries))
        return agreement(ref, new, ref_q, new_q, k)
    finally:
        embedder.model = own


def int8_onnx_model(embedder, plan: Int8Plan, texts, queries, path: str | Path | None = None):
    """The plan run by ONNX Runtime (the engine chosen when it measured faster on a loaded
    machine; on the idle re-run of benchmarks/embed.py torch's dynamic int8 of the same plan
    was faster, see benchmarks/results/embed.json): ``embedder``'s fp32 model exported
    (`export.export_onnx`), its planned layers quantised by ONNX Runtime's quantiser
    (`export.quantize_onnx_int8`), and the graph checked against ``plan.bar`` on
    ``texts``/``queries`` through ``embedder``'s own tokenisation and pooling.

    Args:
        embedder: a `SentenceEmbedder` with the fp32 model (left unchanged).
        plan: from `plan_int8`.
        path: where to keep the int8 graph (None: a temporary file, removed once loaded).

    Returns:
        (`export.OnnxRuntimeModel`, its `Agreement` with fp32 on the calibration text).

    Raises:
        QuantizationError: the graph misses the bar (nothing kept at ``path``).
        MissingDependency: onnx / onnxruntime are not installed.
    """
    import tempfile

    from ..convert.onnx import OnnxRuntimeModel, export_onnx, quantize_onnx_int8

    with tempfile.TemporaryDirectory() as tmp:
        export_onnx(embedder.model, Path(tmp) / "fp32.onnx")
        graph = quantize_onnx_int8(
            Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx", list(plan.quantized)
        )
        model = OnnxRuntimeModel(graph, torch.get_num_threads())
        got = swapped_agreement(embedder, model, texts, queries, plan.bar.k)
        if not got.meets(plan.bar):
            raise QuantizationError(
                f"the int8 ONNX Runtime graph misses the accuracy bar on calibration text: min "
                f"cosine {got.min_cosine:.4f}, top-{got.k} overlap {got.top_k_overlap:.3f} (bar "
                f"{plan.bar.min_cosine}, {plan.bar.min_overlap}); run it in fp32"
            )
        if path is not None:
            from ..files import atomic_write

            data = graph.read_bytes()
            atomic_write(Path(path), lambda t: t.write_bytes(data))
    return model, got


def int8_plan_key(embedder, bar: AccuracyBar) -> str:
    """The cache name of ``embedder``'s int8 plan alone (`cached_int8_plan`): linear kernel,
    model content, bar, margin, calibration and torch version (the plan is measured with
    torch's int8)."""
    import hashlib
    import json

    from ..files import directory_digest

    parts = [
        "plan",
        getattr(embedder, "linear_kernel", None),
        directory_digest(embedder.path),
        dataclasses.asdict(bar),
        list(PLAN_MARGIN),
        CALIBRATION_VERSION,
        torch.__version__,
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def cached_int8_plan(
    embedder, bar: AccuracyBar = AccuracyBar(), key: str | None = None
) -> tuple[Int8Plan, bool]:
    """`plan_int8` on `austen_calibration`, measured once per `int8_plan_key` and kept as
    ``cache_dir()/int8-plans/KEY.plan.json`` (written atomically; used only when it records its
    own key, else logged and measured again). What ``quantize="int8"`` runs: the plan's layers
    quantised by torch (`apply_int8`), the engine the plan is measured on. ``key``: its
    `int8_plan_key` when the caller has it (the key hashes the model's files).

    Returns:
        (plan, whether it came from the cache).

    Raises:
        QuantizationError / FetchError: see `plan_int8`, `austen_calibration`.
        UnsafePathError: ``int8-plans`` is a symbolic link out of the cache.
    """
    import json

    from ..files import check_inside, make_directory_inside, write_text_atomic
    from ..notices import waiting
    from ..resources.cache import cache_dir

    root = cache_dir()
    key = key or int8_plan_key(embedder, bar)
    meta = root / "int8-plans" / f"{key}.plan.json"
    try:
        data = _verified_record(meta, key, lambda _: {}, "int8 plan", "measuring again")
        if data is not None:
            return _plan_from_json(data), True
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
        log.warning("ignoring unreadable int8 plan %s (%s); measuring again", meta, e)
    what = (
        "int8: measuring each layer's error on calibration sentences (first use of this model; "
        "the plan is cached for the next runs)"
    )
    check_inside(root, meta)  # before minutes of measuring
    with waiting(what):
        plan = plan_int8(embedder, *austen_calibration(), bar=bar)
    make_directory_inside(root, meta.parent)
    write_text_atomic(
        meta, json.dumps(_plan_to_json(plan) | {"key": key}, indent=1) + "\n", inside=root
    )
    return plan, False


def int8_cache_key(plan_key: str) -> str:
    """The cache name of an int8 ONNX Runtime graph: its plan's `int8_plan_key` and the
    onnxruntime version."""
    import hashlib
    import importlib.metadata
    import json

    try:
        ort = importlib.metadata.version("onnxruntime")
    except importlib.metadata.PackageNotFoundError:
        ort = None
    parts = [plan_key, ort]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def cached_int8(embedder, bar: AccuracyBar = AccuracyBar()):
    """The plan of `cached_int8_plan` and its checked ONNX Runtime graph (`int8_onnx_model`;
    what ``bertfamily export --quantize int8`` writes), built once per `int8_cache_key` and
    kept under ``cache_dir()/int8-plans/`` (KEY.json, KEY.onnx; written atomically, the JSON
    last).

    The cache is verified on use: KEY.json records its key (which holds the digest of the
    model directory the plan was measured on) and the SHA-256 of KEY.onnx, and a cached plan is
    used only when both match (the graph is hashed once per load, not per batch). An edited,
    truncated or foreign graph, or an unreadable plan, is logged and measured again. Writes stay
    inside the cache (`files.check_inside`: ``int8-plans`` must not be a link out of it).

    Returns:
        (plan, `export.OnnxRuntimeModel`, ONNX Runtime `Agreement` on calibration, path of the
        graph, whether it came from the cache).

    Raises:
        QuantizationError / FetchError / MissingDependency: see `plan_int8`,
            `int8_onnx_model`, `austen_calibration`.
        UnsafePathError: ``int8-plans`` is a symbolic link.
    """
    import json

    from ..convert.onnx import OnnxRuntimeModel
    from ..files import check_inside, make_directory_inside, write_text_atomic
    from ..resources.cache import cache_dir, sha256_file

    root = cache_dir()
    plan_key = int8_plan_key(embedder, bar)  # hashes the model's files: once
    key = int8_cache_key(plan_key)
    base = root / "int8-plans" / key
    meta, graph = base.with_suffix(".json"), base.with_suffix(".onnx")

    def digests(data: dict) -> dict[Path, object]:  # a plan of an older bertfamily has none
        return {graph: data.get("graph_sha256")}

    try:
        data = _verified_record(meta, key, digests, "int8 plan", "measuring again")
        if data is not None:
            plan, check = _plan_from_json(data), _recorded_agreement(data["onnx_agreement"])
            return plan, OnnxRuntimeModel(graph, torch.get_num_threads()), check, graph, True
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
        log.warning("ignoring unreadable int8 plan %s (%s); measuring again", meta, e)
    from ..notices import waiting

    plan, _ = cached_int8_plan(embedder, bar, plan_key)
    with waiting("int8: building and checking the ONNX Runtime graph of the plan"):
        texts, queries = austen_calibration()
        check_inside(root, graph)
        make_directory_inside(root, graph.parent)
        model, check = int8_onnx_model(embedder, plan, texts, queries, graph)
    data = _plan_to_json(plan) | {
        "onnx_agreement": dataclasses.asdict(check),
        "key": key,
        "graph_sha256": sha256_file(graph),
    }
    write_text_atomic(meta, json.dumps(data, indent=1) + "\n", inside=root)
    return plan, model, check, graph, False


def _verified_record(
    meta: Path, key: str, digests: Callable[[dict], dict[Path, object]], what: str, then: str
) -> dict | None:
    """The JSON record of a cache entry (`cached_int8_plan`, `cached_int8`, `cached_openvino`)
    when it can be used, else None with a warning saying why and ``then`` (what happens
    instead): absent, not a JSON object, another ``key``, or a file of ``digests(record)``
    (path → recorded SHA-256) missing, without a recorded digest (an entry of an older
    bertfamily) or with another one (edited). The files are hashed once per load, not per
    batch."""
    import json

    from ..resources.cache import sha256_file

    if not meta.is_file():
        return None
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise TypeError(f"a JSON {type(data).__name__}, not an object")
    except (ValueError, TypeError, OSError) as e:
        log.warning("ignoring unreadable %s %s (%s); %s", what, meta, e, then)
        return None
    problem = None
    if data.get("key") != key:
        problem = f"it records the key {data.get('key')!r}, not {key!r}"
    else:
        for path, recorded in digests(data).items():
            if not isinstance(recorded, str):
                problem = f"it records no digest of {path.name}"
            elif not path.is_file():
                problem = f"{path.name} is missing"
            elif (actual := sha256_file(path)) != recorded:
                problem = f"{path.name} has sha256 {actual[:12]}, recorded {recorded[:12]} (edited)"
            if problem:
                break
    if problem is None:
        return data
    log.warning("not using the cached %s %s: %s; %s", what, meta, problem, then)
    return None


OPENVINO_CACHE = "openvino-graphs"  # under cache_dir(): one directory per `openvino_cache_key`


def openvino_cache_key(
    embedder, precision: str | None, bar: AccuracyBar, quantize: str | None = None
) -> str:
    """The cache name of ``embedder``'s OpenVINO graph and its measured agreement: model
    content, precision hint, bar, calibration, torch and openvino versions (and nncf's for
    int8), and this CPU's instruction-set flags (OpenVINO's default precision and kernels
    follow them)."""
    import hashlib
    import importlib.metadata
    import json

    from ..files import directory_digest
    from ..train.mixed_precision import cpu_flags

    parts = [
        directory_digest(embedder.path),
        precision,
        dataclasses.asdict(bar),
        CALIBRATION_VERSION,
        torch.__version__,
        importlib.metadata.version("openvino"),
        sorted(cpu_flags()),
    ]
    if quantize is not None:  # the fp32/bf16 graphs keep their old keys
        parts += [quantize, importlib.metadata.version("nncf")]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def openvino_int8(
    embedder, xml: Path, out: Path, calibration, check, bar: AccuracyBar, precision: str | None
):
    """The int8 OpenVINO graph of ``embedder``'s fp32 IR ``xml`` that keeps ``bar``: NNCF
    post-training quantisation calibrated on ``calibration`` ((sentences, queries), tokenised
    by ``embedder``, batches of 32), each step of `convert.openvino.INT8_STEPS` in turn (fewer
    products in int8 at each) until the graph's agreement with torch fp32 on ``check`` (text
    disjoint from the calibration) meets ``bar``. ``precision``: OpenVINO's precision hint for
    what stays in float (None: its default).

    Returns:
        (`OpenVinoModel` of the graph saved at ``out``, its ``quantized`` the step's
        description; its `Agreement` on ``check``), or the last step's when none meets the bar
        (the caller refuses it).

    Raises:
        MissingDependency: openvino or nncf is not installed.
    """
    import numpy as np

    from ..convert.openvino import (
        INT8_STEPS,
        OpenVinoModel,
        inference_threads,
        quantize_openvino_ir,
    )

    texts = list(calibration[0]) + list(calibration[1])
    rows = embedder.tokenize(texts).rows
    batches = []
    for i in range(0, len(texts), 32):
        chunk = {k: v[i : i + 32] for k, v in rows.items()}
        padded = embedder.tokenizer.pad_rows(chunk, max(len(r) for r in chunk["input_ids"]))
        batches.append({k: np.asarray(v, dtype=np.int64) for k, v in padded.items()})
    threads = inference_threads()
    for step, keep in INT8_STEPS:
        quantize_openvino_ir(xml, out, batches, keep)
        model = OpenVinoModel(embedder.model, threads, precision, ir=out)
        got = swapped_agreement(embedder, model, *check, bar.k)
        log.info("OpenVINO int8, %s: %s", step, got)
        if got.meets(bar):
            break
    model.quantized = step
    return model, got


def _recorded_agreement(fields: dict) -> Agreement:
    """An `Agreement` read back from a cache record, its numbers checked (finite; cosines and
    overlap in [-1, 1] and [0, 1]).

    Raises:
        ValueError / TypeError / KeyError: a field missing, of the wrong type or out of range
            (the caller builds the entry again).
    """
    import math

    got = Agreement(**fields)
    for name in ("max_abs_diff", "min_cosine", "mean_cosine", "top_k_overlap"):
        value = getattr(got, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} is {value!r}, not a number")
        if not math.isfinite(value):
            raise ValueError(f"{name} is {value}")
    if not (-1.0 <= got.min_cosine <= got.mean_cosine <= 1.0 + 1e-6):
        raise ValueError(f"cosines out of range: {got.min_cosine}, {got.mean_cosine}")
    if not 0.0 <= got.top_k_overlap <= 1.0 or got.max_abs_diff < 0:
        raise ValueError("overlap or difference out of range")
    if isinstance(got.k, bool) or not isinstance(got.k, int) or got.k < 1:
        raise TypeError(f"k is {got.k!r}")
    return got


def cached_openvino(
    embedder, precision: str | None, bar: AccuracyBar = AccuracyBar(), quantize: str | None = None
):
    """``embedder``'s fp32 model as an OpenVINO graph (`convert.openvino.OpenVinoModel`) and
    its `Agreement` with torch fp32 on `austen_calibration`, measured once per
    `openvino_cache_key` and kept under ``cache_dir()/openvino-graphs/KEY/`` (model.xml,
    model.bin: the IR of `convert.openvino.save_openvino_ir`; check.json: the agreement, the
    key and both files' SHA-256), the directory written all at once (`files.atomic_directory`).

    A later load reads the IR and the recorded agreement instead of exporting, converting and
    encoding the calibration text twice (13.8 → ~4 s for all-MiniLM-L6-v2 on a loaded 2-core
    Xeon). The entry is verified on use: a different key or an edited file is logged and built
    again. The caller decides what the agreement allows (`SentenceEmbedder` refuses a graph
    under its bar).

    With ``quantize="int8"`` the graph is `openvino_int8`'s: calibrated on `austen_calibration`
    and checked on its held-out lines (``austen_calibration(held_out=True)``); check.json names
    the step that kept the bar.

    Args:
        embedder: a `SentenceEmbedder` with its torch fp32 model (left in place).
        precision: OpenVINO's ``INFERENCE_PRECISION_HINT`` ("f32", "bf16") or None (its
            default).
        bar: part of the key (its ``k`` is the overlap's neighbour count).
        quantize: None, or "int8" (NNCF post-training quantisation; needs nncf).

    Returns:
        (`OpenVinoModel`, `Agreement`, whether it came from the cache).

    Raises:
        MissingDependency: openvino / onnx are not installed.
        FetchError: the calibration text cannot be fetched.
        UnsafePathError: ``openvino-graphs`` is a symbolic link out of the cache.
    """
    import json

    from ..convert.openvino import INT8_STEPS, OpenVinoModel, inference_threads, save_openvino_ir
    from ..files import atomic_directory, check_inside, make_directory_inside
    from ..notices import waiting
    from ..resources.cache import cache_dir, sha256_file

    root = cache_dir()
    key = openvino_cache_key(embedder, precision, bar, quantize)
    entry = root / OPENVINO_CACHE / key
    threads = inference_threads()
    meta = entry / "check.json"

    def digests(data: dict) -> dict[Path, object]:
        recorded = data.get("sha256")
        recorded = recorded if isinstance(recorded, dict) else {}
        return {entry / n: recorded.get(n) for n in ("model.xml", "model.bin")}

    try:
        data = _verified_record(meta, key, digests, "OpenVINO graph", "building it again")
        if data is not None:
            got = _recorded_agreement(data["agreement"])
            step = data.get("int8")
            if step not in {None} | {name for name, _ in INT8_STEPS}:
                raise ValueError(f"unknown int8 step {step!r}")
            if (step is None) != (quantize is None):
                raise ValueError("the record does not match the quantisation asked for")
            model = OpenVinoModel(embedder.model, threads, precision, ir=entry / "model.xml")
            model.quantized = step
            return model, got, True
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        log.warning("unreadable OpenVINO entry %s (%s); building it again", entry, e)
    what = (
        "OpenVINO: exporting the graph"
        + (", quantising it to int8 (NNCF)" if quantize else "")
        + " and checking it on calibration sentences (first use of this model; the graph is "
        "cached for the next runs)"
    )
    with waiting(what):
        texts, queries = austen_calibration()
        check_inside(root, entry)
        make_directory_inside(root, entry.parent)
        with atomic_directory(entry, keep_existing=False, inside=root) as tmp:
            if quantize is None:
                xml = save_openvino_ir(embedder.model, tmp / "model.xml")
                model = OpenVinoModel(embedder.model, threads, precision, ir=xml)
                got = swapped_agreement(embedder, model, texts, queries, bar.k)
                model.quantized = None
            else:
                (tmp / "fp32").mkdir()
                fp32 = save_openvino_ir(embedder.model, tmp / "fp32" / "model.xml")
                check = austen_calibration(held_out=True)
                model, got = openvino_int8(
                    embedder, fp32, tmp / "model.xml", (texts, queries), check, bar, precision
                )
                shutil.rmtree(tmp / "fp32")
            record = {
                "key": key,
                "precision": model.precision,
                "int8": model.quantized,
                "agreement": dataclasses.asdict(got),
                "sha256": {n: sha256_file(tmp / n) for n in ("model.xml", "model.bin")},
            }
            (tmp / "check.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return model, got, False
