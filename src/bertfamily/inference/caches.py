"""The verified caches of measured precision plans: what took minutes to measure (an int8 plan,
an int8 ONNX Runtime graph, an OpenVINO graph and its agreement with fp32) is kept per model
content and used again only once it is checked.

Each cache is one kind of `VerifiedEntry`: a directory ``cache_dir()/KIND/KEY/`` holding the
entry's files and ``record.json`` (its key, the SHA-256 of each file, what was measured, and the
SHA-256 of the record itself), written all at once. An entry is used only when its record is
readable, names its own key, is unedited (its own digest), lists exactly the files present with
their digests (`resources.cache.digest_problem`, what fetched resources are checked with) and
when what it claims holds (`Int8Plan.from_record`, `Agreement.from_record`: a plan that names
this model's layers, quantises its least damaging ones and meets its bar). Anything else is
logged and measured again. The record's own digest sees an edit, not a forgery (whoever can
write the cache can also write a consistent record), so a recorded agreement is trusted only
when this installation measured it: the record carries an HMAC (``mac``) keyed by a secret
made on first use (``cache_dir()/.record-key``, mode 0600). A record without a valid one (an
older cache, a copied one, a forged one) is *re-measured against the bar* before use: its
plan or graph runs on the calibration text again (seconds, not the minutes of the search), is
refused and rebuilt when it misses the bar, and is signed for the next loads when it meets it.

- `cached_int8_plan`: ``int8-plans/KEY/``, the record alone (`plan_int8` on
  `austen_calibration`, then the accuracy gate on every kind of `gate_texts`);
- `cached_int8`: ``int8-onnx/KEY/model.onnx`` (`int8_onnx_model` of that plan);
- `cached_openvino`: ``openvino-graphs/KEY/model.xml`` and ``model.bin``
  (`convert.openvino.save_openvino_ir`, or `openvino_int8`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import importlib.metadata
import json
import logging
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch

from ..errors import BertFamilyError, QuantizationError
from ..files import (
    atomic_directory,
    check_inside,
    directory_digest,
    make_directory_inside,
    write_text_atomic,
)
from ..notices import waiting
from ..resources.cache import cache_dir, digest_problem, sha256_file, sha256_json
from .agreement import (
    CALIBRATION_VERSION,
    AccuracyBar,
    Agreement,
    austen_calibration,
    gate_texts,
    gate_version,
    measure_gate,
    require_gate,
    swapped_agreement,
)
from .int8 import PLAN_MARGIN, Int8Plan, apply_int8, linear_layers, plan_int8, plan_steps
from .int8_graphs import int8_onnx_model, openvino_int8

__all__ = [
    "INT8_ONNX_CACHE",
    "OPENVINO_CACHE",
    "PLAN_CACHE",
    "RECORD",
    "VerifiedEntry",
    "cached_int8",
    "cached_int8_plan",
    "cached_openvino",
    "int8_cache_key",
    "int8_plan_key",
    "openvino_cache_key",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

RECORD = "record.json"  # in every entry: key, files' digests, what was measured, own digest
RECORD_FORMAT = 1
PLAN_CACHE = "int8-plans"  # under cache_dir(): one directory per `int8_plan_key`
INT8_ONNX_CACHE = "int8-onnx"  # one directory per `int8_cache_key`
OPENVINO_CACHE = "openvino-graphs"  # one directory per `openvino_cache_key`


class _Unusable(Exception):
    """Why a cache entry cannot be used (`VerifiedEntry.read` logs it)."""


_CLAIMS = (ValueError, TypeError, KeyError, IndexError, AttributeError)
KEY_FILE = ".record-key"  # in the cache root: the secret of the records' HMAC


def _record_key(root: Path) -> bytes | None:
    """The secret that signs this installation's records (made on first use, 32 random bytes,
    mode 0600), or None when it cannot be read or made (then no record is trusted)."""
    path = root / KEY_FILE
    try:
        root.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "wb") as fh:
                fh.write(os.urandom(32))
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            key = fh.read(33)
    except OSError:
        return None
    return key if len(key) == 32 else None


def _mac(root: Path, digest: str) -> str | None:
    key = _record_key(root)
    return None if key is None else hmac.new(key, digest.encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class VerifiedEntry:
    """One entry of a verified cache: the directory ``root/kind/key/``, its files, and
    ``record.json``::

        {"format": 1, "key": KEY, "files": {name: sha256}, "data": {...}, "sha256": own digest}

    ``data`` is what the caller measured; ``sha256`` is `resources.cache.sha256_json` of the
    rest of the record, so an edited record is seen like an edited file.

    Attributes:
        kind: the cache's directory under ``root`` (``"int8-plans"``).
        key: the entry's name: a digest of everything the measurement depends on.
        what: the entry in warnings ("int8 plan").
        then: what happens instead of using a bad entry ("measuring again").
        root: the cache (`resources.cache.cache_dir`); writes stay inside it.
    """

    kind: str
    key: str
    what: str
    then: str
    root: Path = dataclasses.field(default_factory=cache_dir)

    @property
    def path(self) -> Path:
        """The entry's directory."""
        return self.root / self.kind / self.key

    def read(
        self,
        claims: Callable[[dict], T],
        remeasure: Callable[[T], tuple[Mapping, T]] | None = None,
    ) -> T | None:
        """The entry's measurement when the entry can be used, else None, with a warning that
        says why and what happens instead (``then``): absent (no warning), a link, an
        unreadable, foreign or edited record, a file missing, added, not regular or altered,
        or ``claims(data)`` raising. The files are hashed once per call (once per load, not
        per batch). A record this installation did not sign (no valid ``mac``) is trusted
        only after ``remeasure`` (none given: not used); what it measured is then signed.

        Args:
            claims: reads the record's ``data`` back and checks what it claims (against the
                bar, the model); raises ValueError / TypeError / KeyError when a claim fails.
            remeasure: measures what ``claims`` returned again and returns (the new data, the
                new result); raises ValueError (a `QuantizationError`) when it misses the bar.
        """
        if not (self.path / RECORD).is_file() and not self.path.is_symlink():
            return None
        try:
            record = self._checked_record()
            found = claims(record["data"])
            mac = _mac(self.root, record["sha256"])
            if mac is not None and hmac.compare_digest(str(record.get("mac", "")), mac):
                return found
            if remeasure is None:
                raise _Unusable("its measurement was not made by this installation (no valid mac)")
            log.warning(
                "the cached %s %s was not measured by this installation: measuring it again "
                "against the accuracy bar",
                self.what,
                self.path,
            )
            data, found = remeasure(found)
            self._sign(record, data)
            return found
        except _Unusable as e:
            problem = str(e)
        except RecursionError:
            problem = "its record is nested too deep"
        except BertFamilyError as e:  # an unreadable record; the message names it
            problem = str(e)
        except _CLAIMS as e:
            problem = f"its record does not hold ({type(e).__name__}: {e})"
        log.warning("not using the cached %s %s: %s; %s", self.what, self.path, problem, self.then)
        return None

    def _checked_record(self) -> dict:
        """The entry's record once it and the files check out.

        Raises:
            _Unusable: why the entry cannot be used.
            BertFamilyError: the record is unreadable (`checkpoints.io.read_json_file`).
        """
        from ..checkpoints.io import read_json_file  # bounded: size, depth, an object

        if self.path.is_symlink():
            raise _Unusable("the entry is a symbolic link")
        record = read_json_file(self.path / RECORD, "a cache record")
        if record.get("format") != RECORD_FORMAT:
            raise _Unusable(
                f"its record is of format {record.get('format')!r}, not {RECORD_FORMAT}"
            )
        if record.get("key") != self.key:
            raise _Unusable(f"it records the key {record.get('key')!r}, not {self.key!r}")
        body = {k: v for k, v in record.items() if k not in ("sha256", "mac")}
        if record.get("sha256") != sha256_json(body):
            raise _Unusable(f"{RECORD} is not the record that was written (altered)")
        files = record.get("files")
        if not isinstance(files, dict) or not isinstance(record.get("data"), dict):
            raise _Unusable(f"{RECORD} lists no files or no data")
        for name in sorted({p.name for p in self.path.iterdir()} - files.keys() - {RECORD}):
            raise _Unusable(f"{name} is not in its record (added)")
        for name, digest in sorted(files.items()):
            if not name or name.startswith(".") or Path(name).name != name:
                raise _Unusable(f"its record names {name!r}, not a plain file name")
            problem = digest_problem(self.path / name, digest)
            if problem is not None:
                raise _Unusable(f"{name}: {problem}")
        return record

    def write(self, make: Callable[[Path], tuple[Mapping, R]]) -> R:
        """Build the entry all at once and return what ``make`` returned beside its data.

        ``make(directory)`` writes the entry's files into ``directory`` (a new sibling of the
        entry) and returns (data, result); the files are hashed, the record written last, and
        the directory swapped in (`files.atomic_directory`: a reader sees the old entry or the
        new one; modes follow the umask). An exception leaves the old entry as it was.

        Raises:
            UnsafePathError: the write would leave the cache (a linked ``kind`` directory),
                checked before ``make`` runs. Any exception of ``make`` is raised as it is.
        """
        check_inside(self.root, self.path)
        make_directory_inside(self.root, self.path.parent)
        with atomic_directory(self.path, keep_existing=False, inside=self.root) as tmp:
            data, result = make(tmp)
            files = {}
            for path in sorted(tmp.iterdir()):
                if path.is_symlink() or not path.is_file():
                    raise TypeError(f"a cache entry holds plain files only, not {path.name}")
                files[path.name] = sha256_file(path)
            body = {"format": RECORD_FORMAT, "key": self.key, "files": files, "data": dict(data)}
            write_text_atomic(tmp / RECORD, self._record_text(body), inside=tmp)
        return result

    def _record_text(self, body: dict) -> str:
        """``record.json`` for ``body``: its digest and this installation's HMAC of it."""
        digest = sha256_json(body)
        record = body | {"sha256": digest, "mac": _mac(self.root, digest)}
        return json.dumps(record, indent=1) + "\n"

    def _sign(self, record: dict, data: Mapping) -> None:
        """Rewrite the record with re-measured ``data`` and this installation's HMAC (a cache
        that cannot be written is left as it is: it is measured again at the next load)."""
        body = {k: record[k] for k in ("format", "key", "files")} | {"data": dict(data)}
        try:
            write_text_atomic(self.path / RECORD, self._record_text(body), inside=self.path)
        except OSError as e:
            log.info("cannot sign the re-measured %s %s: %s", self.what, self.path, e)


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _key(parts: list) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


# ---------------------------------------------------------------- the int8 plan (torch runs it)


def int8_plan_key(embedder, bar: AccuracyBar) -> str:
    """The cache name of ``embedder``'s int8 plan alone (`cached_int8_plan`): linear kernel,
    model content, bar, margin, calibration, the accuracy gate's held-out text
    (`gate_version`: a plan checked on Austen lines alone is not used again) and torch version
    (the plan is measured with torch's int8)."""
    return _key(
        [
            "plan",
            getattr(embedder, "linear_kernel", None),
            directory_digest(embedder.path),
            dataclasses.asdict(bar),
            list(PLAN_MARGIN),
            CALIBRATION_VERSION,
            gate_version(gate_texts()),
            torch.__version__,
        ]
    )


def _plan_claims(embedder, bar: AccuracyBar) -> Callable[[Mapping], Int8Plan]:
    """Reads a recorded plan back (`Int8Plan.from_record`: this model's layers, the least
    damaging quantised, its agreement meeting its bar) measured for ``bar`` and checked on
    every kind of the gate's held-out text."""
    layers = linear_layers(embedder.model)

    def claims(data: Mapping) -> Int8Plan:
        plan = Int8Plan.from_record(data, layers)
        if plan.bar != bar:
            raise ValueError(f"it was measured for {plan.bar}, not {bar}")
        if set(plan.held_out) != set(gate_texts()):
            raise ValueError(f"it was checked on {sorted(plan.held_out)}, not every gate kind")
        return plan

    return claims


def _checked_again(what: str, got: Agreement, bar: AccuracyBar) -> Agreement:
    """``got``, a re-measured agreement, when it meets ``bar``.

    Raises:
        QuantizationError: it misses the bar (the numbers named).
    """
    if not got.meets(bar):
        raise QuantizationError(
            f"measured again, {what} gives min cosine {got.min_cosine:.4f}, top-{got.k} overlap "
            f"{got.top_k_overlap:.3f}, under the bar ({bar.min_cosine}, {bar.min_overlap})"
        )
    return got


def _plan_remeasure(embedder, bar: AccuracyBar) -> Callable[[Int8Plan], tuple[dict, Int8Plan]]:
    """Runs a cached plan's layers in int8 on the calibration text and the gate's held-out
    text again (`VerifiedEntry.read`'s ``remeasure``): the plan with the agreements measured
    now, when they meet ``bar``."""

    def remeasure(plan: Int8Plan) -> tuple[dict, Int8Plan]:
        texts, queries = austen_calibration()
        int8 = apply_int8(embedder.model, plan.quantized)  # a copy: the fp32 model stays
        got = swapped_agreement(embedder, int8, texts, queries, bar.k)
        held = measure_gate(embedder, int8, bar.k, gate_texts())
        require_gate("measured again, the int8 plan", held, bar, "measuring it again")
        got = _checked_again("the int8 plan", got, bar)
        plan = dataclasses.replace(plan, agreement=got, held_out=held)
        return plan.to_record(), plan

    return remeasure


def cached_int8_plan(
    embedder, bar: AccuracyBar = AccuracyBar(), key: str | None = None
) -> tuple[Int8Plan, bool]:
    """`plan_int8` on `austen_calibration`, then the accuracy gate (`require_gate`: the plan's
    agreement with fp32 on every kind of `gate_texts`, held out from the calibration, the
    worst kind deciding; recorded per kind in ``Int8Plan.held_out``), measured once per
    `int8_plan_key` and kept under ``cache_dir()/int8-plans/KEY/`` (a `VerifiedEntry`: an
    edited, foreign or inconsistent plan is logged and measured again). What
    ``quantize="int8"`` runs: the plan's layers quantised by torch (`apply_int8`), the engine
    the plan is measured on. The first use shows a progress bar (`notices.waiting`, counted).

    Args:
        embedder: a `SentenceEmbedder` with its fp32 model on the CPU (left unchanged).
        bar: the accuracy to keep.
        key: its `int8_plan_key` when the caller has it (the key hashes the model's files).

    Returns:
        (plan, whether it came from the cache).

    Raises:
        QuantizationError: see `plan_int8`; or a kind of held-out text misses ``bar`` (the
            message names it and its numbers; nothing is cached).
        FetchError: see `austen_calibration`, `gate_texts`.
        UnsafePathError: ``int8-plans`` is a symbolic link out of the cache.
    """
    entry = VerifiedEntry(
        PLAN_CACHE, key or int8_plan_key(embedder, bar), "int8 plan", "measuring again"
    )
    plan = entry.read(_plan_claims(embedder, bar), _plan_remeasure(embedder, bar))
    if plan is not None:
        log.info("int8 plan read from the cache %s", entry.path)
        return plan, True

    def make(directory: Path) -> tuple[dict, Int8Plan]:
        what = (
            "int8: measuring each layer's error on calibration sentences, then the plan on "
            "held-out text (first use of this model; the plan is cached for the next runs)"
        )
        held_texts = gate_texts()
        total = plan_steps(len(linear_layers(embedder.model))) + len(held_texts)
        with waiting(what, total=total) as steps:
            plan = plan_int8(embedder, *austen_calibration(), bar=bar, step=steps.advance)
            int8 = apply_int8(embedder.model, plan.quantized)  # a copy: the fp32 model stays
            held = measure_gate(embedder, int8, bar.k, held_texts, steps.advance)
        require_gate("the int8 plan", held, bar, "run it in fp32")
        plan = dataclasses.replace(plan, held_out=held)
        return plan.to_record(), plan

    return entry.write(make), False


# ---------------------------------------------------------------- the int8 ONNX Runtime graph


def int8_cache_key(plan_key: str) -> str:
    """The cache name of an int8 ONNX Runtime graph: its plan's `int8_plan_key` and the
    onnxruntime version."""
    return _key([plan_key, _version("onnxruntime")])


def cached_int8(embedder, bar: AccuracyBar = AccuracyBar()):
    """The plan of `cached_int8_plan` and its checked ONNX Runtime graph (`int8_onnx_model`;
    what ``bertfamily export --quantize int8`` writes), built once per `int8_cache_key` and
    kept under ``cache_dir()/int8-onnx/KEY/`` (``model.onnx`` and its `VerifiedEntry` record:
    the plan and the graph's agreement, which must meet ``bar``). An edited, truncated or
    foreign graph, or an edited or inconsistent record, is logged and built again.

    Returns:
        (plan, `convert.onnx.OnnxRuntimeModel`, ONNX Runtime `Agreement` on calibration, path
        of the graph, whether it came from the cache).

    Raises:
        QuantizationError / FetchError / MissingDependency: see `plan_int8`,
            `int8_onnx_model`, `austen_calibration`.
        UnsafePathError: ``int8-onnx`` is a symbolic link out of the cache.
    """
    from ..convert.onnx import OnnxRuntimeModel

    plan_key = int8_plan_key(embedder, bar)  # hashes the model's files: once
    entry = VerifiedEntry(
        INT8_ONNX_CACHE, int8_cache_key(plan_key), "int8 ONNX Runtime graph", "building it again"
    )
    graph = entry.path / "model.onnx"
    plan_claims = _plan_claims(embedder, bar)

    def claims(data: Mapping) -> tuple[Int8Plan, Agreement]:
        plan, check = plan_claims(data["plan"]), Agreement.from_record(data["onnx_agreement"])
        if not check.meets(bar):
            raise ValueError(f"the graph's agreement {check} misses the bar {bar}")
        return plan, check

    def remeasure(found: tuple[Int8Plan, Agreement]) -> tuple[dict, tuple[Int8Plan, Agreement]]:
        plan, model = found[0], OnnxRuntimeModel(graph, torch.get_num_threads())
        got = swapped_agreement(embedder, model, *austen_calibration(), bar.k)
        got = _checked_again("the int8 ONNX Runtime graph", got, bar)
        return {"plan": plan.to_record(), "onnx_agreement": dataclasses.asdict(got)}, (plan, got)

    found = entry.read(claims, remeasure)
    if found is not None:
        plan, check = found
        return plan, OnnxRuntimeModel(graph, torch.get_num_threads()), check, graph, True
    plan, _ = cached_int8_plan(embedder, bar, plan_key)

    def make(directory: Path):
        with waiting("int8: building and checking the ONNX Runtime graph of the plan"):
            texts, queries = austen_calibration()
            model, check = int8_onnx_model(embedder, plan, texts, queries, directory / "model.onnx")
        data = {"plan": plan.to_record(), "onnx_agreement": dataclasses.asdict(check)}
        return data, (model, check)

    model, check = entry.write(make)
    return plan, model, check, graph, False


# ---------------------------------------------------------------- the OpenVINO graph


def openvino_cache_key(
    embedder, precision: str | None, bar: AccuracyBar, quantize: str | None = None
) -> str:
    """The cache name of ``embedder``'s OpenVINO graph and its measured agreement: model
    content, precision hint, bar, calibration, torch and openvino versions (and, for int8,
    nncf's and the accuracy gate's held-out text, `gate_version`), and this CPU's
    instruction-set flags (OpenVINO's default precision and kernels follow them)."""
    from ..train.mixed_precision import cpu_flags

    parts = [
        directory_digest(embedder.path),
        precision,
        dataclasses.asdict(bar),
        CALIBRATION_VERSION,
        torch.__version__,
        _version("openvino"),
        sorted(cpu_flags()),
    ]
    if quantize is not None:
        parts += [quantize, _version("nncf"), gate_version(gate_texts())]
    return _key(parts)


def cached_openvino(
    embedder, precision: str | None, bar: AccuracyBar = AccuracyBar(), quantize: str | None = None
):
    """``embedder``'s fp32 model as an OpenVINO graph (`convert.openvino.OpenVinoModel`) and
    its `Agreement` with torch fp32 on `austen_calibration`, measured once per
    `openvino_cache_key` and kept under ``cache_dir()/openvino-graphs/KEY/`` (model.xml,
    model.bin: the IR of `convert.openvino.save_openvino_ir`, and the `VerifiedEntry` record:
    the agreement, the precision, the int8 step).

    A later load reads the IR and the recorded agreement instead of exporting, converting and
    encoding the calibration text twice (13.8 → ~4 s for all-MiniLM-L6-v2 on a loaded 2-core
    Xeon). An edited file or record is logged and built again. The caller decides what the
    agreement allows (`SentenceEmbedder` refuses a graph under its bar).

    With ``quantize="int8"`` the graph is `openvino_int8`'s: calibrated on `austen_calibration`
    and checked on every kind of the accuracy gate's held-out text (`gate_texts`; the returned
    agreement is the worst kind's, each kind's in the model's ``held_out``); the record names
    the step that kept the bar and each kind's agreement. The first build shows a progress bar
    (`notices.waiting`, counted).

    Args:
        embedder: a `SentenceEmbedder` with its torch fp32 model (left in place).
        precision: OpenVINO's ``INFERENCE_PRECISION_HINT`` ("f32", "bf16") or None (its
            default).
        bar: part of the key (its ``k`` is the overlap's neighbour count).
        quantize: None, or "int8" (NNCF post-training quantisation; needs nncf).

    Returns:
        (`OpenVinoModel`, `Agreement`, whether it came from the cache).

    Raises:
        MissingDependency: openvino / onnx (/ nncf) are not installed.
        FetchError: the calibration text cannot be fetched.
        UnsafePathError: ``openvino-graphs`` is a symbolic link out of the cache.
    """
    from ..convert.openvino import INT8_STEPS, OpenVinoModel, inference_threads, save_openvino_ir

    entry = VerifiedEntry(
        OPENVINO_CACHE,
        openvino_cache_key(embedder, precision, bar, quantize),
        "OpenVINO graph",
        "building it again",
    )
    threads = inference_threads()

    def claims(data: Mapping) -> tuple[Agreement, str | None, dict | None]:
        step = data["int8"]
        if step is not None and step not in {name for name, _ in INT8_STEPS}:
            raise ValueError(f"unknown int8 step {step!r}")
        if (step is None) != (quantize is None):
            raise ValueError("the record does not match the quantisation asked for")
        held = None
        if step is not None:  # int8: checked on every kind of held-out text
            held = {k: Agreement.from_record(v) for k, v in data["held_out"].items()}
            if set(held) != set(gate_texts()):
                raise ValueError(f"it was checked on {sorted(held)}, not every gate kind")
        return Agreement.from_record(data["agreement"]), step, held

    def remeasure(found: tuple[Agreement, str | None, dict | None]):
        step = found[1]
        model = OpenVinoModel(embedder.model, threads, precision, ir=entry.path / "model.xml")
        held = None
        if step is None:
            got = swapped_agreement(embedder, model, *austen_calibration(), bar.k)
            got = _checked_again("the OpenVINO graph", got, bar)
        else:  # as when it was built: the gate's kinds
            held = measure_gate(embedder, model, bar.k, gate_texts())
            got = require_gate("measured again, the OpenVINO graph", held, bar, "building again")
        return _openvino_record(model.precision, step, got, held), (got, step, held)

    found = entry.read(claims, remeasure)
    if found is not None:
        got, step, held = found
        model = OpenVinoModel(embedder.model, threads, precision, ir=entry.path / "model.xml")
        model.quantized, model.held_out = step, held
        log.info("OpenVINO graph read from the cache %s", entry.path)
        return model, got, True

    def make(directory: Path):
        what = (
            "OpenVINO: exporting the graph"
            + (", quantising it to int8 (NNCF)" if quantize else "")
            + " and checking it on calibration sentences (first use of this model; the graph "
            "is cached for the next runs)"
        )
        held_texts = gate_texts() if quantize else {}
        total = len(INT8_STEPS) * (1 + len(held_texts)) if quantize else None
        with waiting(what, total=total) as steps:
            texts, queries = austen_calibration()
            if quantize is None:
                xml = save_openvino_ir(embedder.model, directory / "model.xml")
                model = OpenVinoModel(embedder.model, threads, precision, ir=xml)
                got = swapped_agreement(embedder, model, texts, queries, bar.k)
                model.quantized = None
            else:
                (directory / "fp32").mkdir()
                fp32 = save_openvino_ir(embedder.model, directory / "fp32" / "model.xml")
                model, got = openvino_int8(
                    embedder,
                    fp32,
                    directory / "model.xml",
                    (texts, queries),
                    held_texts,
                    bar,
                    precision,
                    steps.advance,
                )
                shutil.rmtree(directory / "fp32")
        held = model.held_out if quantize else None
        data = _openvino_record(model.precision, model.quantized, got, held)
        return data, (model, got)

    model, got = entry.write(make)
    return model, got, False


def _openvino_record(
    precision: str, step: str | None, got: Agreement, held: Mapping[str, Agreement] | None
) -> dict:
    """An OpenVINO graph's record data: its precision, int8 step, agreement (the worst kind's
    for int8) and, for int8, each held-out kind's agreement."""
    data = {"precision": precision, "int8": step, "agreement": dataclasses.asdict(got)}
    if held is not None:
        data["held_out"] = {k: dataclasses.asdict(v) for k, v in held.items()}
    return data
