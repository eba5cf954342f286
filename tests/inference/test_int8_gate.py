"""Issue 45 item 5: the accuracy gate of both int8 paths (torch's dynamic int8 plan, OpenVINO's
NNCF graph) checks several kinds of held-out text — long prose, short queries, STS-B sentences,
code-mixed lines — disjoint from the calibration text, records each kind, and lets the worst
kind decide: a model that passes on Austen lines but fails on STS-B is refused, the kind and
its numbers named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertfamily.errors import QuantizationError
from bertfamily.inference import agreement as agreement_mod
from bertfamily.inference.agreement import (
    GATE_KINDS,
    GATE_SENTENCES,
    AccuracyBar,
    Agreement,
    austen_calibration,
    gate_texts,
    gate_version,
    require_gate,
    worst,
)

pytestmark = pytest.mark.usefixtures("one_thread")

GOOD = Agreement(0.01, 0.9935, 0.998, 0.97, 10)  # the independent measurement's Austen lines
BAD = Agreement(0.05, 0.9835, 0.996, 0.96, 10)  # … and its STS-B sentences
SMALL = {  # four one-kind samples, for the gate on a tiny model
    "long prose": (["It is a truth universally acknowledged, said she.", "A long day."], ["day"]),
    "short queries": (["She smiled at him.", "He left early."], ["who left"]),
    "STS-B": (["A man is playing a guitar.", "A woman is slicing onions."], ["a man plays"]),
    "code-mixed": (["# add the two numbers", "def add(a, b): return a + b"], ["add numbers"]),
}


def test_the_gate_texts_are_every_kind_disjoint_from_the_calibration_and_fixed():
    texts = gate_texts()
    assert tuple(texts) == GATE_KINDS
    parts = [part for held in (False, True) for part in austen_calibration(held_out=held)]
    calibration = {t for part in parts for t in part}
    for kind, (sentences, queries) in texts.items():
        assert len(sentences) == GATE_SENTENCES and len(queries) == 32, kind
        assert not (set(sentences) | set(queries)) & calibration, kind
    long, _ = texts["long prose"]
    assert min(len(t.split()) for t in long) >= 16
    short = texts["short queries"][0] + texts["short queries"][1]
    assert all(4 <= len(t.split()) <= 10 for t in short)
    from bertfamily.data.pairs import read_sts
    from bertfamily.resources.cache import fetch

    test = {
        t
        for p in read_sts(fetch("stsb") / "sts-test.csv")
        for t in (p.sentence1.strip(), p.sentence2.strip())
    }
    train = {
        t.strip()
        for p in read_sts(fetch("stsb") / "sts-train.csv")
        for t in (p.sentence1, p.sentence2)
    }
    assert set(texts["STS-B"][0]) <= train and not set(texts["STS-B"][0]) & (test - train)
    code = texts["code-mixed"][0]
    assert any(t.startswith("#") for t in code) and any("(" in t and "=" in t for t in code)
    version = gate_version()
    gate_texts.cache_clear()
    assert gate_texts() == texts and gate_version() == version  # deterministic
    assert gate_version(SMALL) != version


def test_the_worst_kind_decides_and_is_named():
    per_kind = {"long prose": GOOD, "short queries": GOOD, "STS-B": BAD, "code-mixed": GOOD}
    assert worst(per_kind) == Agreement(0.05, 0.9835, 0.996, 0.96, 10)
    with pytest.raises(QuantizationError) as e:
        require_gate("OpenVINO int8", per_kind, AccuracyBar(), "run it in fp32")
    message = str(e.value)
    assert "on STS-B: min cosine 0.9835, top-10 overlap 0.960" in message
    assert "long prose" not in message and message.endswith("run it in fp32")
    ok = dict(per_kind, **{"STS-B": GOOD})
    assert require_gate("OpenVINO int8", ok, AccuracyBar(), "-") == GOOD


def _fake_gate(monkeypatch, failing: str | None, calls: list[str] | None = None):
    """The gate on `SMALL`, each kind measuring `GOOD` but ``failing`` (`BAD`)."""
    from bertfamily.inference import caches

    def measure(embedder, model, texts, queries, k=10):
        kind = next((name for name, (s, _) in SMALL.items() if list(texts) == s), "extra")
        if calls is not None:
            calls.append(kind)
        return BAD if kind == failing else GOOD

    monkeypatch.setattr(caches, "gate_texts", lambda: SMALL)
    monkeypatch.setattr(agreement_mod, "swapped_agreement", measure)
    monkeypatch.setattr(caches, "austen_calibration", lambda **k: (["a text", "b text"], ["a"]))


@pytest.fixture
def tiny(tmp_path, monkeypatch, minilm_dir):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from helpers import save_tiny

    monkeypatch.setenv("BERTFAMILY_CACHE", str(tmp_path / "cache"))
    return SentenceEmbedder(save_tiny(tmp_path / "tiny", minilm_dir))


LOW = AccuracyBar(min_cosine=0.5, min_overlap=0.0)  # a random tiny model meets it on calibration


def test_torch_int8_passing_austen_but_failing_stsb_is_refused(tiny, monkeypatch, tmp_path):
    from bertfamily.inference.caches import cached_int8_plan

    bar = AccuracyBar(min_cosine=0.99, min_overlap=0.0)  # met on calibration, not on STS-B
    _fake_gate(monkeypatch, "STS-B")
    monkeypatch.setattr("bertfamily.inference.caches.plan_int8", _plan_meeting(bar))
    with pytest.raises(
        QuantizationError, match=r"int8 plan misses .* on STS-B: min cosine 0\.9835"
    ):
        cached_int8_plan(tiny, bar)
    assert not list((tmp_path / "cache" / "int8-plans").iterdir())  # nothing cached


def _plan_meeting(bar: AccuracyBar):
    """Stands for `plan_int8`: the first layer quantised, `GOOD` on calibration."""
    from bertfamily.inference.int8 import Int8Plan, linear_layers

    def plan(embedder, texts, queries, bar=bar, step=None):
        layers = linear_layers(embedder.model)
        errors = {n: (0.999, 0.9999 - 1e-4 * i) for i, n in enumerate(layers)}
        step()  # one step of the progress bar
        return Int8Plan((layers[0],), tuple(layers[1:]), errors, GOOD, bar)

    return plan


def test_torch_int8_plan_records_every_kind_and_is_cached(tiny, monkeypatch, tmp_path):
    from bertfamily.inference.caches import cached_int8_plan

    calls: list[str] = []
    _fake_gate(monkeypatch, None, calls)
    plan, cached = cached_int8_plan(tiny, LOW)  # the real plan search, on the tiny model
    assert not cached and calls == list(SMALL)
    assert plan.held_out == dict.fromkeys(SMALL, GOOD)
    (entry,) = (tmp_path / "cache" / "int8-plans").iterdir()
    data = json.loads((entry / "record.json").read_text())["data"]
    assert data["held_out"] == {k: GOOD.__dict__ for k in SMALL}
    assert "held-out (long prose, short queries, STS-B, code-mixed) worst min cosine 0.9935" in (
        plan.summary()
    )
    again, cached = cached_int8_plan(tiny, LOW)  # read back, nothing measured
    assert cached and again == plan and calls == list(SMALL)
    # a plan of the same model and bar checked on other held-out text is another entry
    monkeypatch.setattr(
        "bertfamily.inference.caches.gate_texts", lambda: dict(SMALL, extra=(["x y"], ["x"]))
    )
    assert cached_int8_plan(tiny, LOW)[1] is False
    assert len(list((tmp_path / "cache" / "int8-plans").iterdir())) == 2


def test_openvino_int8_fails_on_stsb_and_the_refusal_names_it(tiny, monkeypatch):
    """OpenVINO replaced by recorders (the package is optional): every NNCF step is tried
    while STS-B misses the bar, the record keeps each kind, and the load is refused."""
    from bertfamily.convert import openvino as ov
    from bertfamily.inference.caches import cached_openvino

    tried: list[tuple[str, ...]] = []

    class Graph:
        def __init__(self, model, threads, precision, ir):
            self.precision, self.threads, self.quantized, self.held_out = "f32", 2, None, None

    def save(model, xml):
        Path(xml).write_text("<net/>")
        Path(xml).with_suffix(".bin").write_bytes(b"\0")
        return Path(xml)

    def quantize(xml, out, batches, keep=()):
        tried.append(keep)
        return save(None, out)

    monkeypatch.setattr(ov, "OpenVinoModel", Graph)
    monkeypatch.setattr(ov, "save_openvino_ir", save)
    monkeypatch.setattr(ov, "quantize_openvino_ir", quantize)
    monkeypatch.setattr(ov, "inference_threads", lambda: 2)
    _fake_gate(monkeypatch, "STS-B")
    model, got, cached = cached_openvino(tiny, "f32", AccuracyBar(), "int8")
    assert tried == [keep for _, keep in ov.INT8_STEPS] and not cached
    assert got == worst(model.held_out) and model.held_out["STS-B"] == BAD
    assert set(model.held_out) == set(SMALL)
    with pytest.raises(QuantizationError) as e:
        tiny._use_openvino("f32", None, AccuracyBar(), "int8")
    assert "OpenVINO int8 (" in str(e.value)
    assert "on STS-B: min cosine 0.9835, top-10 overlap 0.960" in str(e.value)
