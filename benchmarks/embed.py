"""The main job side by side with every CPU embedding engine users would pick: sentence
embeddings of the real all-MiniLM-L6-v2 with `bertfamily`'s `SentenceEmbedder` (what
`bertfamily embed` runs), sentence-transformers (torch, ONNX and OpenVINO backends), ONNX
Runtime (our export, and its transformer fusions), OpenVINO, CTranslate2 and fastembed, fp32 and
int8, in one process with interleaved rounds, idle and with one core taken by another process.

Sentence sets (real text, fetched resource ``janeausten``): "austen", every k-th line of the six
novels with at least 3 words (``--sentences``, default 300); "queries", short lines of 4–10 words
(``--queries``, default 100), timed as a set of their own and used as the search queries;
"sixteen", STS-B sentences of exactly 16 MiniLM tokens (``--sixteen``, default 128; timing only).
Every system gets the same threads (``OMP_NUM_THREADS``, else min(2, CPUs)), the same texts, the
same truncation (MiniLM's ``max_seq_length``, 256 tokens) and batches of 32 (``--batch-size``),
length-sorted where the engine sorts (bertfamily, sentence-transformers) and sorted by the
benchmark where it does not (fastembed); the ONNX Runtime, OpenVINO and CTranslate2 rows run
only the trunk on that engine inside `SentenceEmbedder` (same tokenisation, batching and
pooling as bertfamily). Each system embeds each set once per round, the order rotating from round
to round; the median of ``--repeats`` rounds gives sentences/s. Phases (``--phase``, default
both): "idle", then "busy", the same rounds while one extra process
(``python -c "while True: pass"``) spins on one of our CPUs; ``--busy`` is ``--phase busy``.

Accuracy, against sentence-transformers fp32 (the reference), measured once, outside the
timing: max |difference|, min and mean cosine, top-10 overlap of each query's nearest "austen"
sentences (`precision.agreement`), the min and mean cosine on STS-B **test** sentences (the
first `STSB_SENTENCES` distinct ones, both columns, pair by pair: other text than Austen's, where
an int8 graph can fall under its bar), and the STS Benchmark **test** Spearman ×100 of each
engine's vectors (fetched resource ``stsb``, read by `data.pairs.read_pairs`, scored by
`evaluation.metrics.evaluate_sts`: cosine vs the gold scores, as `bertfamily evaluate sts`).

Systems (``--systems`` picks some by substring; the reference always runs):
- bertfamily fp32 (its linear kernel as ``linear_kernel="auto"`` picks it; where that is
  oneDNN, also a row with BLAS linears and one with oneDNN on unpacked weights); bertfamily
  bf16 where ``dtype="fastest"`` picks it (and a row with ``F.linear`` beside its oneDNN
  linears); each of the two again with threads that follow the load, as the commands run it
  (`runtime.AdaptiveThreads`, at most the benchmark's threads: with one core taken it drops
  to one thread, which every other row keeps at the fixed count);
  sentence-transformers fp32 (torch); ``backend="onnx"`` and ``backend="openvino"``
  of sentence-transformers (their optimum exports, fp32);
- ONNX Runtime fp32 on our export (`convert.onnx.export_onnx`), and on that export after
  ``onnxruntime.transformers.optimizer.optimize_model(model_type="bert")`` fusions (the row
  lists which fused), and int8 of the fused graph (``quantize_dynamic``: int8 weights per
  output channel, uint8 activations scaled at run time, every MatMul);
- ``bertfamily --runtime openvino --quantize int8``: NNCF's int8 of our OpenVINO graph, the
  fewest products kept in float that meet the accuracy bar on held-out Austen lines
  (`precision.openvino_int8`; built once, cached);
- bertfamily int8 (what ``--quantize int8`` runs: the accuracy-checked plan of
  `precision.cached_int8_plan`, measured on a disjoint Austen sample, applied by torch's
  dynamic int8); the same plan as ONNX Runtime's per-channel quantiser applies it to our
  export (the ``export --quantize int8`` graph, `precision.cached_int8`; the time to build
  plan and graph is reported); and, for accuracy only, the naive plan: every Linear layer
  quantised with one scale per tensor;
- OpenVINO fp32 (``openvino.convert_model`` of our ONNX export, ``INFERENCE_PRECISION_HINT``
  f32; where the CPU's default precision is not f32, also a row at that default, which is what
  OpenVINO users get), int8 by NNCF post-training quantisation (``nncf.quantize``,
  ``ModelType.TRANSFORMER``, calibrated on `precision.austen_calibration`'s disjoint lines) and
  int8 weights only (``nncf.compress_weights``);
- CTranslate2 fp32 and int8 (``TransformersConverter`` of the MiniLM directory, one
  ``ctranslate2.Encoder`` per compute type; mean pooling and normalisation of its
  ``last_hidden_state`` by `SentenceEmbedder`, as the reference does). CTranslate2 runs in a
  worker process of its own, fed through a pipe: its wheel brings its own libgomp, which
  slowed every torch engine of a process it was loaded in, so in one process its rows could
  not come from the same run as the others;
- fastembed on our local ONNX export (``TextEmbedding.add_custom_model`` + a local
  ``specific_model_path``, mean pooling, normalised; no download).
A peer that cannot be installed, imported or run offline is a row with "unavailable": why.

Setting up (the peers do not go into the project's venv, and torch must stay the venv's build):
``cp -a .venv /tmp/peersvenv``, then ``/tmp/peersvenv/bin/python -m pip install --only-binary
:all: --no-deps -r benchmarks/requirements-peers.txt`` (always ``python -m pip``: the copied
``bin/pip`` still names the original venv on its first line). ``--no-deps`` because several
peers would pull another torch, transformers or huggingface_hub; the file pins what ran
together, lists the light dependencies by hand and says why each pin is there.

Writes benchmarks/results/embed.json (``--quick``: embed_quick.json): CPU model and flags,
threads, load average before and after each phase, versions. Run from the repository root:
``nice -n 10 /tmp/peersvenv/bin/python benchmarks/embed.py`` (about 14 min on an idle 2-core
machine; ``--quick``: 100 sentences, 30 queries, 2 rounds, 200 STS pairs, about 4 min idle).
"""

from __future__ import annotations

import argparse
import atexit
import copy
import dataclasses
import importlib.metadata
import json
import logging
import os
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
# before torch loads: the OpenMP wait (GOMP_SPINCOUNT) that `import bertfamily` sets when none is
# set applies to every row of this process, as it does to a user's bertfamily process
import bertfamily  # noqa: E402, F401, I001

import numpy as np  # noqa: E402
import torch  # noqa: E402

from machine import cpu_model  # noqa: E402  (benchmarks/machine.py)

from bertfamily.files import write_text_atomic  # noqa: E402

REFERENCE = "sentence-transformers fp32"
INT8 = "bertfamily int8 (--quantize int8: torch dynamic int8 of the plan)"
PACKAGES = ("torch", "transformers", "sentence-transformers", "huggingface_hub", "onnxruntime",
            "onnx", "openvino", "nncf", "optimum", "optimum-intel", "optimum-onnx", "ctranslate2",
            "fastembed", "tokenizers", "numpy")  # fmt: skip


def sentence_sets(n_sentences: int, n_queries: int) -> tuple[list[str], list[str]]:
    """The "austen" and "queries" sets (offset 0: disjoint from the int8 calibration's)."""
    from bertfamily.resources.cache import fetch

    lines = (fetch("janeausten") / "austen.txt").read_text(encoding="utf-8").splitlines()
    lines = [x.strip() for x in lines if len(x.split()) >= 3 and not x.isupper()]
    short = [x for x in lines if 4 <= len(x.split()) <= 10]
    return lines[:: len(lines) // n_sentences][:n_sentences], short[1 :: len(short) // n_queries][
        :n_queries
    ]


def sixteen_token_set(n: int) -> list[str]:
    """``n`` distinct STS-B sentences (test, then train) that MiniLM's tokenizer makes exactly 16
    tokens with [CLS] and [SEP]: the issue's "16-token batches", real text of one length."""
    from bertfamily.data.pairs import read_pairs
    from bertfamily.resources.cache import fetch
    from bertfamily.tokenization import load_tokenizer

    tokenizer = load_tokenizer(fetch("all-MiniLM-L6-v2"))
    found: list[str] = []
    for split in ("stsb:test", "stsb:train"):
        pairs = read_pairs(split)
        texts = dict.fromkeys(t for col in (0, 1) for t in pairs.column(col))
        for text in texts:
            ids = tokenizer(text, return_tensors=None)["input_ids"][0]
            if text not in found and len(ids) == 16:
                found.append(text)
                if len(found) == n:
                    return found
    return found


def cpu_flags() -> list[str]:
    """The SIMD / matrix flags of /proc/cpuinfo that decide these kernels' speed."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = line.split(":", 1)[1].split()
            keep = ("avx", "fma", "amx", "vnni", "bf16", "f16c")
            return sorted(f for f in flags if any(k in f for k in keep))
    return []


def versions() -> dict[str, str | None]:
    """Installed versions of the packages this benchmark may use (None: not installed)."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def one_line(exc: BaseException) -> str:
    """An exception as one short line for the JSON."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:400]


@dataclass
class System:
    """One engine to time: ``run(texts) -> (N, 384) float32`` unit vectors, and what it is."""

    run: Callable[[list[str]], np.ndarray]
    info: dict
    timed: bool = True


class Trunk:
    """Stands for a `Model` in `SentenceEmbedder` (which only calls ``model.encoder``): a
    function of the (B, T) int64 tokenizer batch to the (B, T, H) float32 last hidden state
    (``(B, T, H)`` numpy or torch; positions past a row's length may hold anything: pooling
    masks them)."""

    def __init__(self, forward: Callable[..., np.ndarray]) -> None:
        self.forward = forward

    def encoder(self, **batch: torch.Tensor):
        hidden = self.forward(**batch)
        return _Hidden(torch.as_tensor(np.asarray(hidden, dtype=np.float32)))


@dataclass(frozen=True)
class _Hidden:
    last_hidden_state: torch.Tensor


def openvino_trunk(model, threads: int, precision: str | None) -> Trunk:
    """An OpenVINO model (ONNX inputs input_ids, attention_mask, token_type_ids) compiled for
    the CPU with ``threads`` inference threads and ``precision`` ("f32", or None: the CPU
    plugin's default) as the trunk."""
    import openvino as ov

    config = {"INFERENCE_NUM_THREADS": threads}
    if precision is not None:
        config["INFERENCE_PRECISION_HINT"] = precision
    compiled = ov.Core().compile_model(model, "CPU", config)
    request = compiled.create_infer_request()
    names = {i.get_any_name() for i in compiled.inputs}
    output = compiled.output(0)

    def forward(**batch):
        feed = {k: v.numpy() for k, v in batch.items() if k in names}
        return np.array(request.infer(feed)[output])  # (B, T, H), copied out of the request

    return Trunk(forward)


CT2_WORKER = r"""
import struct, sys
import numpy as np
import ctranslate2

path, compute_type, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
encoder = ctranslate2.Encoder(path, device="cpu", compute_type=compute_type, intra_threads=threads)
read, write = sys.stdin.buffer.read, sys.stdout.buffer.write
write(b"ready\n")
sys.stdout.flush()
while True:
    head = read(8)
    if len(head) < 8:
        break
    b, t = struct.unpack("<ii", head)
    ids = np.frombuffer(read(4 * b * t), dtype=np.int32).reshape(b, t).copy()
    lengths = np.frombuffer(read(4 * b), dtype=np.int32).copy()
    out = encoder.forward_batch(
        ctranslate2.StorageView.from_array(ids), ctranslate2.StorageView.from_array(lengths)
    )
    h = np.ascontiguousarray(np.asarray(out.last_hidden_state), dtype=np.float32)
    write(struct.pack("<iii", *h.shape) + h.tobytes())
    sys.stdout.flush()
"""


def ctranslate2_convert(model_dir: Path, out_dir: Path) -> None:
    """``TransformersConverter`` of ``model_dir`` into ``out_dir``, in a child process: importing
    ctranslate2 loads its own libgomp, which slows the torch engines of the process it is in
    (measured: bertfamily fp32 queries 920.6 → 597.2/s; embed_zen5_with_ct2.json)."""
    code = (
        "import sys; from ctranslate2.converters import TransformersConverter; "
        "TransformersConverter(sys.argv[1]).convert(sys.argv[2], quantization=None)"
    )
    subprocess.run([sys.executable, "-c", code, str(model_dir), str(out_dir)], check=True)


def ctranslate2_trunk(model_dir: Path, compute_type: str, threads: int) -> Trunk:
    """A converted CTranslate2 encoder as the trunk, run in a worker process of its own (no
    torch there; see `ctranslate2_convert` for why): the padded int32 ids and their lengths go
    down a pipe, the (B, T, H) float32 last hidden state comes back (its copy is part of the
    time: 32 × 64 × 384 floats, 3.1 MB, went through a pipe there and back in 2.3 ms on the
    Zen 5, so about 1 ms a batch, under 1 % of a batch's encoding)."""
    worker = subprocess.Popen(
        [sys.executable, "-c", CT2_WORKER, str(model_dir), compute_type, str(threads)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    if worker.stdout.readline() != b"ready\n":
        raise RuntimeError(f"the CTranslate2 worker did not start (exit code {worker.poll()})")
    atexit.register(worker.kill)

    def read(n: int) -> bytes:
        data = worker.stdout.read(n)
        if len(data) != n:
            raise RuntimeError(f"the CTranslate2 worker stopped (exit code {worker.poll()})")
        return data

    def forward(input_ids, attention_mask, **_):
        ids = input_ids.numpy().astype(np.int32)
        lengths = attention_mask.sum(1).numpy().astype(np.int32)
        worker.stdin.write(struct.pack("<ii", *ids.shape) + ids.tobytes() + lengths.tobytes())
        worker.stdin.flush()
        shape = struct.unpack("<iii", read(12))
        return np.frombuffer(read(4 * int(np.prod(shape))), dtype=np.float32).reshape(shape)

    return Trunk(forward)


class Clock:
    """Wall and CPU seconds (this process, all threads) per section of the run: CPU seconds
    are what tell the length of a run on an idle machine from one on a loaded one."""

    def __init__(self) -> None:
        self.start = self.last = (time.perf_counter(), self._cpu())
        self.laps: dict[str, dict[str, float]] = {}

    @staticmethod
    def _cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    def lap(self, name: str) -> None:
        now = (time.perf_counter(), self._cpu())
        self.laps[name] = {
            "wall": round(now[0] - self.last[0], 1),
            "cpu": round(now[1] - self.last[1], 1),
        }
        self.last = now

    def total(self) -> dict[str, float]:
        return {
            "wall": round(time.perf_counter() - self.start[0], 1),
            "cpu": round(self._cpu() - self.start[1], 1),
        }


class Busy:
    """One extra process spinning on one of our CPUs while the ``with`` block runs."""

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self.cpu = cpus[-1] if cpus else None
        if self.cpu is not None:
            os.sched_setaffinity(self.proc.pid, {self.cpu})
        time.sleep(0.5)
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


BF16_AUTO = "bf16 (--dtype fastest)"
ADAPTIVE = "threads that follow the load (as the commands)"


def build_systems(args, threads: int, work: Path, calibration) -> tuple[dict, dict]:
    """Every system (`System`, or a dict with "unavailable") by row name, and the int8 plan's
    facts. Each peer is built inside its own try: one that cannot run becomes its reason."""
    import sentence_transformers
    from sentence_transformers import SentenceTransformer

    from bertfamily.convert.onnx import OnnxRuntimeModel, export_onnx
    from bertfamily.inference.precision import apply_int8, cached_int8, linear_layers
    from bertfamily.modules.kernels import OneDnnLinear, use_kernel
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from bertfamily.resources.cache import fetch

    bs = args.batch_size
    model_dir = fetch("all-MiniLM-L6-v2")
    ours = SentenceEmbedder(model_dir, dtype="fp32")
    fp32_model = ours.model
    export = export_onnx(fp32_model, work / "model.onnx")
    pipeline = "bertfamily SentenceEmbedder (tokenisation, length-sorted batches, pooling)"

    def with_model(model, embedder=ours) -> Callable[[list[str]], np.ndarray]:
        """``embedder``'s pipeline running ``model`` for the call, its own model put back."""
        original = embedder.model

        def run(texts):
            embedder.model = model
            try:
                return embedder.encode(texts, batch_size=bs)
            finally:
                embedder.model = original

        return run

    def st_run(model):
        return lambda t: model.encode(
            t, batch_size=bs, normalize_embeddings=True, convert_to_numpy=True
        )

    systems: dict[str, System | dict] = {}

    keep = [k.strip() for k in (args.systems or "").split(",") if k.strip()]

    def add(name: str, build: Callable[[], System]) -> None:
        if keep and not any(k in name for k in keep):
            return
        t0 = time.perf_counter()
        try:
            system = build()
        except Exception as e:  # a peer that cannot run is a row saying why
            logging.getLogger("embed").warning("%s unavailable: %s", name, one_line(e))
            systems[name] = {"unavailable": one_line(e)}
            return
        system.info["build_seconds"] = round(time.perf_counter() - t0, 1)
        systems[name] = system

    kernel = {"engine": "bertfamily (torch)", "linear_kernel": ours.linear_kernel}
    add("bertfamily fp32", lambda: System(with_model(fp32_model), kernel))

    def adaptive(run: Callable[[list[str]], np.ndarray], info: dict) -> System:
        """``run`` under the thread governor the commands start (`runtime.AdaptiveThreads`,
        at most the benchmark's threads): the threads `bertfamily embed` would use. Its look
        starts afresh with each call (`reset`): CTranslate2's worker processes ran in between,
        and the governor would count them as a neighbour's load."""
        from bertfamily.runtime import AdaptiveThreads

        governor = AdaptiveThreads(threads)
        used = info.setdefault("threads_per_call", [])

        def governed(texts):
            governor.reset()
            with governor:
                out = run(texts)
            used.append(governor.threads)
            return out

        return System(governed, info | {"threads": f"adaptive, at most {threads}"})

    add(
        f"bertfamily fp32, {ADAPTIVE}",
        lambda: adaptive(with_model(fp32_model), dict(kernel)),
    )
    if ours.linear_kernel != "blas":  # auto chose oneDNN here: the BLAS kernel beside it

        def blas() -> System:
            model = copy.deepcopy(fp32_model)
            use_kernel(model, "blas")
            return System(with_model(model), kernel | {"linear_kernel": "blas"})

        add("bertfamily fp32, BLAS linears (linear_kernel='blas')", blas)

        def unpacked(texts):  # oneDNN on the weight as stored: what packing adds
            OneDnnLinear.pack = False
            try:
                return with_model(fp32_model)(texts)
            finally:
                OneDnnLinear.pack = True

        add(
            "bertfamily fp32, oneDNN on unpacked weights",
            lambda: System(unpacked, kernel | {"linear_kernel": "onednn, unpacked"}),
        )
    # --dtype fastest (an explicit choice since the default became fp32): bf16 on a CPU with
    # AMX-BF16 or AVX512-BF16
    auto = SentenceEmbedder(model_dir, dtype="fastest")
    if next(auto.model.parameters()).dtype != torch.float32:

        def auto_run(texts):
            return auto.encode(texts, batch_size=bs)

        add(
            f"bertfamily {BF16_AUTO}",
            lambda: System(
                auto_run,
                {
                    "engine": "bertfamily (torch)",
                    "dtype": auto.dtype_reason,
                    "linear_kernel": auto.linear_kernel,
                },
            ),
        )
        if auto.linear_kernel != "blas":

            def bf16_blas() -> System:
                model = copy.deepcopy(auto.model)
                use_kernel(model, "blas")
                info = {"engine": "bertfamily (torch)", "linear_kernel": "F.linear"}
                return System(with_model(model, auto), info)

            add("bertfamily bf16, F.linear (linear_kernel='blas')", bf16_blas)

        add(
            f"bertfamily {BF16_AUTO}, {ADAPTIVE}",
            lambda: adaptive(
                auto_run, {"engine": "bertfamily (torch)", "dtype": auto.dtype_reason}
            ),
        )

    def runtime_openvino() -> System:  # what `embed --runtime openvino` runs
        embedder = SentenceEmbedder(model_dir, runtime="openvino")
        info = {"engine": "bertfamily --runtime openvino", "dtype": embedder.dtype_reason}
        return System(lambda texts: embedder.encode(texts, batch_size=bs), info)

    add("bertfamily --runtime openvino (its default precision)", runtime_openvino)

    def runtime_openvino_int8() -> System:  # what `embed --runtime openvino --quantize int8` runs
        embedder = SentenceEmbedder(model_dir, runtime="openvino", quantize="int8")
        info = {
            "engine": "bertfamily --runtime openvino --quantize int8 (NNCF)",
            "dtype": embedder.dtype_reason,
            "held_out_check": dataclasses.asdict(embedder.runtime_check),
        }
        return System(lambda texts: embedder.encode(texts, batch_size=bs), info)

    add("bertfamily --runtime openvino --quantize int8", runtime_openvino_int8)
    st = SentenceTransformer(str(model_dir), device="cpu")
    systems[REFERENCE] = System(st_run(st), {"engine": f"torch {torch.__version__}"})
    if st.max_seq_length != ours.max_length:
        raise SystemExit(f"truncation differs: {st.max_seq_length} vs {ours.max_length}")

    def st_backend(backend: str) -> System:
        if backend == "onnx":
            import onnxruntime

            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = threads
            kwargs = {"provider": "CPUExecutionProvider", "session_options": options}
        else:
            kwargs = {
                "ov_config": {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32"}
            }
        try:
            model = SentenceTransformer(
                str(model_dir), device="cpu", backend=backend, model_kwargs=kwargs
            )
        except Exception as e:
            needs = {"onnx": "optimum-onnx", "openvino": "optimum-intel"}[backend]
            try:
                pins = [r for r in importlib.metadata.requires(needs) or [] if "transformers" in r]
                why = f"; {needs} {importlib.metadata.version(needs)} requires {pins}"
            except importlib.metadata.PackageNotFoundError:
                why = f"; {needs} is not installed"
            raise RuntimeError(
                f"{one_line(e)}{why}; sentence-transformers {sentence_transformers.__version__}"
                f" runs on transformers {importlib.metadata.version('transformers')}"
            ) from e
        return System(
            st_run(model),
            {
                "engine": f"sentence-transformers backend={backend!r}"
                " (optimum's export of the HF model, fp32)"
            },
        )

    add("sentence-transformers onnx backend fp32", lambda: st_backend("onnx"))
    add("sentence-transformers openvino backend fp32", lambda: st_backend("openvino"))

    def ort(path: Path, info: dict) -> System:
        return System(with_model(OnnxRuntimeModel(path, threads)), {"pipeline": pipeline} | info)

    add("onnxruntime fp32 (our export)", lambda: ort(export, {"engine": "onnxruntime"}))
    fused_path = work / "fused.onnx"

    def fused() -> System:
        from onnxruntime.transformers.optimizer import optimize_model

        cfg = fp32_model.config
        opt = optimize_model(
            str(export),
            model_type="bert",
            num_heads=cfg.num_attention_heads,
            hidden_size=cfg.hidden_size,
            opt_level=0,
        )
        opt.save_model_to_file(str(fused_path))
        stats = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
        return ort(
            fused_path, {"engine": "onnxruntime + transformers optimizer", "fused_operators": stats}
        )

    add("onnxruntime fp32 fused (our export)", fused)

    def fused_int8() -> System:
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic

        if not fused_path.is_file():
            raise RuntimeError("the fused fp32 graph could not be built")
        path = work / "fused-int8.onnx"
        # the fused operators (com.microsoft domain) have no shape inference: their outputs
        # are declared float32, as ONNX Runtime's error message suggests
        quantize_dynamic(
            str(fused_path),
            str(path),
            per_channel=True,
            weight_type=QuantType.QInt8,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
        return ort(
            path,
            {
                "engine": "onnxruntime quantize_dynamic of the fused graph",
                "quantized": "every MatMul, int8 weights per channel",
            },
        )

    add("onnxruntime int8 fused (quantize_dynamic)", fused_int8)

    t0 = time.perf_counter()
    plan, ort_int8, _, _, from_cache = cached_int8(ours)
    plan_s = time.perf_counter() - t0
    torch8 = {"engine": "torch"}
    add(INT8, lambda: System(with_model(apply_int8(fp32_model, plan.quantized)), torch8))
    ort8 = {"engine": "onnxruntime", "pipeline": pipeline}
    add(
        "onnxruntime int8 of the same plan (the export --quantize int8 graph)",
        lambda: System(with_model(ort_int8), ort8),
    )
    naive = {"engine": "torch", "accuracy only": True}
    add(
        "naive int8 (all layers, per-tensor)",
        lambda: System(
            with_model(apply_int8(fp32_model, linear_layers(fp32_model), per_channel=False)),
            naive,
            timed=False,
        ),
    )

    ov_model: dict = {}

    def ov_fp32(precision: str | None) -> System:
        import openvino as ov

        if "fp32" not in ov_model:
            ov_model["fp32"] = ov.convert_model(str(export))
        trunk = openvino_trunk(ov_model["fp32"], threads, precision)
        hint = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT")
        label = precision or hint.get_type_name()
        info = {"engine": f"openvino (convert_model of our ONNX export), precision {label}"}
        return System(with_model(trunk), info | {"pipeline": pipeline})

    add("openvino fp32 (our export)", lambda: ov_fp32("f32"))
    try:
        import openvino as ov

        default = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()
    except Exception:  # noqa: BLE001 (no OpenVINO: the rows above say so)
        default = "f32"
    if default != "f32":
        add(f"openvino default precision ({default})", lambda: ov_fp32(None))

    def nncf_int8(kind: str) -> System:
        import nncf

        nncf.set_log_level(logging.ERROR)
        if "fp32" not in ov_model:
            raise RuntimeError("the OpenVINO fp32 model could not be built")
        base = ov_model["fp32"].clone()
        if kind == "weights":
            model = nncf.compress_weights(base)  # INT8_ASYM, per channel
            info = {"quantized": "weights int8 (nncf.compress_weights), activations fp32"}
        else:
            texts, _ = calibration
            rows = ours.tokenize(texts)
            items = []
            for i in range(0, len(texts), bs):
                chunk = {k: v[i : i + bs] for k, v in rows.rows.items()}
                padded = ours.tokenizer.pad_rows(chunk, max(len(r) for r in chunk["input_ids"]))
                items.append({k: np.asarray(v, np.int64) for k, v in padded.items()})
            model = nncf.quantize(
                base,
                nncf.Dataset(items),
                model_type=nncf.ModelType.TRANSFORMER,
                subset_size=len(items),
            )
            info = {
                "quantized": f"nncf.quantize, ModelType.TRANSFORMER, {len(texts)} calibration"
                " lines (precision.austen_calibration, disjoint from the sets)"
            }
        trunk = openvino_trunk(model, threads, "f32")
        return System(with_model(trunk), {"engine": "openvino + nncf", "pipeline": pipeline} | info)

    add("openvino int8 (NNCF post-training quantisation)", lambda: nncf_int8("ptq"))
    add("openvino int8 weights (NNCF compress_weights)", lambda: nncf_int8("weights"))

    ct2_dir = work / "ct2"

    def ct2(compute_type: str) -> System:
        if not ct2_dir.is_dir():
            ctranslate2_convert(model_dir, ct2_dir)
        trunk = ctranslate2_trunk(ct2_dir, compute_type, threads)
        return System(
            with_model(trunk),
            {
                "engine": f"ctranslate2 Encoder, compute_type {compute_type}, in a worker process",
                "pipeline": pipeline,
            },
        )

    add("ctranslate2 fp32", lambda: ct2("float32"))
    add("ctranslate2 int8", lambda: ct2("int8"))

    def fastembed() -> System:
        from fastembed import TextEmbedding
        from fastembed.common.model_description import ModelSource, PoolingType

        local = work / "fastembed"
        local.mkdir()
        for name in (
            "tokenizer.json",
            "tokenizer_config.json",
            "special_tokens_map.json",
            "config.json",
            "vocab.txt",
        ):
            if (model_dir / name).is_file():
                shutil.copy(model_dir / name, local / name)
        shutil.copy(export, local / "model.onnx")
        # fastembed truncates at tokenizer_config's model_max_length: the same 256 as the others
        config = json.loads((local / "tokenizer_config.json").read_text(encoding="utf-8"))
        config["model_max_length"] = ours.max_length
        (local / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
        name = "bertfamily-benchmark/all-MiniLM-L6-v2-local"
        TextEmbedding.add_custom_model(
            name,
            pooling=PoolingType.MEAN,
            normalization=True,
            dim=ours.dimension,
            sources=ModelSource(hf=name),
            model_file="model.onnx",
            output_name="last_hidden_state",
        )
        model = TextEmbedding(
            name, specific_model_path=str(local), threads=threads, local_files_only=True
        )

        def run(texts):
            order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # as s-t sorts
            vecs = np.asarray(list(model.embed([texts[i] for i in order], batch_size=bs)))
            out = np.empty_like(vecs)
            out[order] = vecs
            return out

        return System(
            run,
            {
                "engine": "fastembed TextEmbedding (onnxruntime) on our ONNX export,"
                " local files only",
                "batches": "sorted by the benchmark (by "
                "characters, as sentence-transformers) and restored",
            },
        )

    add("fastembed (local ONNX: our export)", fastembed)
    facts = {
        "plan": plan,
        "plan_seconds": round(plan_s, 1),
        "from_cache": from_cache,
        "max_length": ours.max_length,
    }
    return systems, facts


def run_phase(systems: dict, sets: dict, repeats: int, phase: str) -> dict:
    """Time every timed system on every set, ``repeats`` rounds in rotating order; the
    machine's load average before and after. Returns {"times": name → set → seconds, ...}."""
    timed = [n for n, s in systems.items() if isinstance(s, System) and s.timed]
    times = {n: {s: [] for s in sets} for n in timed}
    load_before = os.getloadavg()
    t_phase = time.perf_counter()
    for r in range(repeats):
        order = timed[r % len(timed) :] + timed[: r % len(timed)]
        for name in order:
            for s, texts in sets.items():
                t0 = time.perf_counter()
                systems[name].run(texts)
                times[name][s].append(time.perf_counter() - t0)
        print(f"{phase}: round {r + 1}/{repeats} done", flush=True)
    return {
        "times": times,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "seconds": round(time.perf_counter() - t_phase, 1),
    }


STSB_SENTENCES = 1000  # STS-B test sentences whose cosine to the reference each row reports


def stsb_sentences(sts, n: int = STSB_SENTENCES) -> list[str]:
    """The first ``n`` distinct sentences of an STS-B table (`data.pairs.PairTable`), both
    columns, pair by pair."""
    pairs = zip(sts.column(0), sts.column(1))
    return list(dict.fromkeys(t.strip() for pair in pairs for t in pair if t.strip()))[:n]


def row_cosines(ref: np.ndarray, new: np.ndarray):
    """`precision.agreement` of rows alone (no queries): its min and mean cosine count."""
    from bertfamily.inference.precision import agreement

    return agreement(ref, new, ref[:0], new[:0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3, help="rounds per phase")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--sixteen", type=int, default=128, help="STS-B sentences of exactly 16 tokens (0: none)"
    )
    parser.add_argument(
        "--sts-pairs",
        type=int,
        default=None,
        help="STS-B test pairs scored (default all 1,379; 0: none)",
    )
    parser.add_argument("--phase", choices=("both", "idle", "busy"), default="both")
    parser.add_argument("--busy", action="store_true", help="only the busy phase")
    parser.add_argument("--systems", help="comma-separated substrings of the systems to run")
    parser.add_argument(
        "--quick", action="store_true", help="100 sentences, 30 queries, 2 rounds, 200 STS pairs"
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.sentences, args.queries, args.repeats = 100, 30, 2
        args.sts_pairs = 200 if args.sts_pairs is None else args.sts_pairs
    if args.json is None:
        name = "embed_quick.json" if args.quick else "embed.json"
        args.json = ROOT / "benchmarks/results" / name
    phases = ["busy"] if args.busy else {"both": ["idle", "busy"]}.get(args.phase, [args.phase])
    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    for noisy in ("nncf", "sentence_transformers", "transformers", "optimum"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every peer loads local files only

    from bertfamily.data.pairs import read_pairs
    from bertfamily.evaluation.metrics import evaluate_sts
    from bertfamily.inference.precision import agreement, austen_calibration

    threads = int(os.environ.get("OMP_NUM_THREADS", min(2, os.cpu_count() or 1)))
    torch.set_num_threads(threads)
    sentences, queries = sentence_sets(args.sentences, args.queries)
    sets = {"austen": sentences, "queries": queries}
    if args.sixteen:
        sets["sixteen"] = sixteen_token_set(args.sixteen)
    clock = Clock()
    load_start = [round(x, 2) for x in os.getloadavg()]
    work = Path(tempfile.mkdtemp(prefix="embed-bench-"))
    try:
        systems, int8 = build_systems(args, threads, work, austen_calibration())
        clock.lap("build")
        ready = {n: s for n, s in systems.items() if isinstance(s, System)}
        # one untimed pass each: warm-up, and the vectors the accuracy is measured on
        vectors = {n: {k: s.run(t) for k, t in sets.items()} for n, s in ready.items()}
        sts = read_pairs("stsb:test")
        n_pairs = len(sts) if args.sts_pairs is None else min(args.sts_pairs, len(sts))
        spearman = {}
        stsb_texts = stsb_sentences(sts) if n_pairs else []
        stsb_vectors = {n: s.run(stsb_texts) for n, s in ready.items()} if stsb_texts else {}
        if n_pairs:
            s1, s2, gold = sts.column(0)[:n_pairs], sts.column(1)[:n_pairs], sts.labels[:n_pairs]
            for name, system in ready.items():
                spearman[name] = 100 * evaluate_sts(system.run, s1, s2, gold)["spearman"]
        clock.lap("accuracy (vectors + STS-B)")
        measured = {}
        for phase in phases:
            if phase == "busy":
                with Busy() as busy:
                    measured[phase] = run_phase(systems, sets, args.repeats, phase)
                    measured[phase]["spinner_cpu"] = busy.cpu
            else:
                measured[phase] = run_phase(systems, sets, args.repeats, phase)
            clock.lap(f"{phase} phase")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    ref = vectors[REFERENCE]
    rows: dict[str, dict] = {}
    for name, system in systems.items():
        if not isinstance(system, System):
            rows[name] = dict(system)
            continue
        vecs = vectors[name]
        a = agreement(ref["austen"], vecs["austen"], ref["queries"], vecs["queries"], 10)
        row = dict(system.info) | {
            "max_abs_diff": float(f"{a.max_abs_diff:.3g}"),
            "min_cosine": round(a.min_cosine, 5),
            "mean_cosine": round(a.mean_cosine, 5),
            "top10_overlap": round(a.top_k_overlap, 4),
        }
        if name in stsb_vectors:
            on_sts = row_cosines(stsb_vectors[REFERENCE], stsb_vectors[name])
            row["stsb_test_min_cosine"] = round(on_sts.min_cosine, 5)
            row["stsb_test_mean_cosine"] = round(on_sts.mean_cosine, 5)
        if name in spearman:
            row["stsb_test_spearman"] = round(spearman[name], 2)
            row["stsb_vs_reference"] = round(spearman[name] - spearman[REFERENCE], 2)
        for phase, m in measured.items():
            if name in m["times"]:
                row[phase] = {}
                for s, texts in sets.items():
                    med = statistics.median(m["times"][name][s])
                    row[phase][f"{s}_sentences_per_s"] = round(len(texts) / med, 1)
                    row[phase][f"{s}_times_s"] = [round(t, 3) for t in m["times"][name][s]]
        rows[name] = row

    def speed(name: str, phase: str, s: str) -> float:
        return rows[name][phase][f"{s}_sentences_per_s"]

    ratios: dict[str, dict] = {}
    for phase in measured:
        timed = [n for n in rows if phase in rows[n]]
        ratios[phase] = {
            f"{n} vs {REFERENCE}, {s}": round(speed(n, phase, s) / speed(REFERENCE, phase, s), 3)
            for n in timed
            if n != REFERENCE
            for s in sets
        }
        ours_ort = ("bertfamily fp32", "onnxruntime fp32 (our export)")
        if all(n in timed for n in ours_ort):
            ratios[phase] |= {
                f"bertfamily fp32 vs onnxruntime fp32, {s}": round(
                    speed(ours_ort[0], phase, s) / speed(ours_ort[1], phase, s), 3
                )
                for s in sets
            }
    if {"idle", "busy"} <= set(measured):
        ratios["busy vs idle"] = {
            f"{n}, {s}": round(speed(n, "busy", s) / speed(n, "idle", s), 3)
            for n in rows
            if "busy" in rows[n] and "idle" in rows[n]
            for s in sets
        }
    plan = int8["plan"]
    int8_plan = {
        "quantized": list(plan.quantized),
        "kept_fp32": list(plan.kept),
        "layer_errors_min_mean_cosine": {
            k: [round(v[0], 5), round(v[1], 5)] for k, v in plan.layer_errors.items()
        },
        "calibration_agreement": {
            "min_cosine": round(plan.agreement.min_cosine, 5),
            "top10_overlap": round(plan.agreement.top_k_overlap, 4),
        },
        "held_out_gate": {  # the accuracy gate's kinds, as recorded in the plan's cache entry
            kind: {"min_cosine": round(a.min_cosine, 5), "top10_overlap": round(a.top_k_overlap, 4)}
            for kind, a in plan.held_out.items()
        },
        "plan_seconds": int8["plan_seconds"],
        "plan_from_cache": int8["from_cache"],
    }
    if INT8 in vectors and "bertfamily fp32" in vectors:
        ours32, ours8 = vectors["bertfamily fp32"], vectors[INT8]
        held = agreement(ours32["austen"], ours8["austen"], ours32["queries"], ours8["queries"])
        int8_plan["held_out_vs_bertfamily_fp32"] = {
            "min_cosine": round(held.min_cosine, 5),
            "mean_cosine": round(held.mean_cosine, 5),
            "top10_overlap": round(held.top_k_overlap, 4),
        }
        if INT8 in stsb_vectors and "bertfamily fp32" in stsb_vectors:
            on_sts = row_cosines(stsb_vectors["bertfamily fp32"], stsb_vectors[INT8])
            int8_plan["held_out_vs_bertfamily_fp32"] |= {
                "stsb_test_min_cosine": round(on_sts.min_cosine, 5),
                "stsb_test_mean_cosine": round(on_sts.mean_cosine, 5),
            }
    lengths = [len(s.split()) for s in sentences]
    result = {
        "benchmark": "embed",
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),
        "threads": threads,
        "openmp_wait": {k: os.environ.get(k) for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")},
        "cpus": os.cpu_count(),
        "load_average_at_start": load_start,
        "versions": versions(),
        "model": "all-MiniLM-L6-v2 (real, fetched)",
        "truncation_tokens": int8["max_length"],
        "sets": {
            "austen": {
                "sentences": len(sentences),
                "median_words": statistics.median(lengths),
                "max_words": max(lengths),
            },
            "queries": {"sentences": len(queries)},
            "sixteen": {"sentences": len(sets.get("sixteen", [])), "tokens": 16},
            "stsb_test_pairs": n_pairs,
            "stsb_test_sentences": len(stsb_texts),
        },
        "batch_size": args.batch_size,
        "repeats": args.repeats,
        "reference": REFERENCE,
        "phases": {p: {k: v for k, v in m.items() if k != "times"} for p, m in measured.items()},
        "systems": rows,
        "ratios": ratios,
        "int8_plan": int8_plan,
        "seconds": clock.laps | {"total": clock.total()},
        "command": "python benchmarks/embed.py " + " ".join(sys.argv[1:]),
    }
    write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
    print(json.dumps({"ratios": ratios, "seconds": result["seconds"]}, indent=1))


if __name__ == "__main__":
    main()
