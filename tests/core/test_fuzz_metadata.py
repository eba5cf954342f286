"""Issue 43: fuzzing the metadata JSON reader (`files.read_json`, and through it an index's
``meta.json`` and a bulk ``manifest.json``) and the config.json loader (`read_hf_config` →
`config_from_hf` → `EncoderConfig`, then building the model without storage). Whatever the
bytes, the outcome is a correct result or one line of a `BertFamilyError`, never another
exception; a config that loads builds, and a small one runs to finite outputs. Fixed seed
(hypothesis ``derandomize``), a few seconds."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bertfamily as bf
from bertfamily.checkpoints.io import config_from_hf, config_to_hf, read_hf_config
from bertfamily.checkpoints.keymaps import FAMILIES
from bertfamily.config import SIZE_LIMITS, EncoderConfig
from bertfamily.errors import BertFamilyError
from bertfamily.files import MAX_JSON_DEPTH, json_depth, read_json
from bertfamily.modules.skeleton import storage_free
from bertfamily.presets import PRESETS

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
EDGE_INTS = st.sampled_from([0, -1, 1, 2, 3, 7, 2**31, 2**63, 10**15, 10**400])
SCALARS = (
    st.none()
    | st.booleans()
    | EDGE_INTS
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
)
JSON = st.recursive(
    SCALARS,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=10,
)


def _one_line_or(fn, *args):
    """``fn(*args)``, or None when it raised a one-line `BertFamilyError`; anything else fails
    the test (the exception propagates)."""
    try:
        return fn(*args)
    except BertFamilyError as e:
        assert str(e) and "\n" not in str(e), repr(e)
        return None


# --- the metadata JSON reader -----------------------------------------------------------------


def _mutations(text: bytes):
    """Byte-level mutations of a valid document: truncation, flipped bytes, nesting, BOM."""
    return st.one_of(
        st.integers(0, len(text)).map(lambda n: text[:n]),
        st.tuples(st.integers(0, len(text) - 1), st.integers(0, 255)).map(
            lambda p: text[: p[0]] + bytes([p[1]]) + text[p[0] + 1 :]
        ),
        st.integers(1, 3000).map(lambda d: b"[" * d + text + b"]" * d),
        st.just(b"\xef\xbb\xbf" + text),
        st.binary(max_size=64),
    )


DOC = json.dumps({"format_version": 1, "kind": "flat", "count": 2, "model": {"d": [1, 2]}})


@SETTINGS
@given(data=st.one_of(JSON.map(lambda v: json.dumps(v, allow_nan=True).encode()),
                      _mutations(DOC.encode())))  # fmt: skip
def test_read_json_gives_the_value_or_one_line(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("j") / "meta.json"
    path.write_bytes(data)
    got = _one_line_or(read_json, path)
    if got is not None:  # a correct result: what json gives, an object, within the bounds
        assert isinstance(got, dict) and json_depth(got) <= MAX_JSON_DEPTH
        assert json.dumps(got, sort_keys=True) == json.dumps(
            json.loads(data.decode("utf-8-sig")), sort_keys=True
        )


@SETTINGS
@given(key=st.sampled_from(["format_version", "kind", "count", "model", "files", "hnsw"]),
       value=JSON)  # fmt: skip
def test_index_meta_fields_of_any_type(tmp_path_factory, key, value):
    from bertfamily.pipelines.retrieval.base import read_index_meta

    directory = tmp_path_factory.mktemp("idx")
    meta = {"format_version": 1, "kind": "flat", "count": 0, "model": None}
    meta[key] = value
    (directory / "meta.json").write_text(json.dumps(meta))
    got = _one_line_or(read_index_meta, directory)
    if got is not None:
        assert got["kind"] in ("flat", "hnsw", "binary", "sparse") and got["count"] >= 0


@SETTINGS
@given(path=st.sampled_from(["shard_size", "input.lines", "input.bytes", "model.dimension",
                             "shards", "input.sha256"]), value=JSON)  # fmt: skip
def test_bulk_manifest_fields_of_any_type(tmp_path_factory, path, value):
    from bertfamily.pipelines.embedding.bulk import BulkPlan, InputIdentity
    from bertfamily.pipelines.retrieval.base import ModelIdentity

    plan = BulkPlan(ModelIdentity("d" * 64, 8, "mean"), InputIdentity("c.txt", 20, "0" * 64, 4), 2)
    body = json.loads(plan.to_json())
    *parents, last = path.split(".")
    node = body
    for part in parents:
        node = node[part]
    node[last] = value
    directory = tmp_path_factory.mktemp("bulk")
    (directory / "manifest.json").write_text(json.dumps(body))
    got = _one_line_or(BulkPlan.read, directory)
    assert got is None or json.loads(got.to_json()) == body  # a plan exactly as written


# --- the config.json loader -------------------------------------------------------------------

FAMILY_PRESETS = [n for n in PRESETS if n.startswith("tiny-")]


# each tiny family's config.json as save_pretrained writes it (base-model class)
HF_CONFIGS = {
    name: config_to_hf(config, FAMILIES[config.model_type].architectures[""])
    for name in FAMILY_PRESETS
    for config in [EncoderConfig.from_preset(name)]
}
HF_KEYS = sorted(set().union(*HF_CONFIGS.values()))
SIZE_KEYS = sorted(SIZE_LIMITS) + ["num_hidden_layers", "n_layers", "dim", "hidden_dim",
                                   "n_heads", "window_size", "rotary_emb_base"]  # fmt: skip


@pytest.fixture(scope="module")
def hf_configs():
    return HF_CONFIGS


@SETTINGS
@given(family=st.sampled_from(FAMILY_PRESETS),
       edits=st.lists(st.tuples(st.sampled_from(HF_KEYS + SIZE_KEYS) | st.text(max_size=12),
                                SCALARS | SCALARS | JSON), min_size=1, max_size=3))  # fmt: skip
def test_config_json_loads_builds_and_runs_or_one_line(hf_configs, tmp_path_factory, family, edits):
    raw = dict(hf_configs[family])
    for key, value in edits:
        raw[key] = value
    directory = tmp_path_factory.mktemp("cfg")
    text = json.dumps(raw, allow_nan=True)
    (directory / "config.json").write_text(text)
    config = _one_line_or(lambda: config_from_hf(read_hf_config(directory)))
    if config is None:
        return
    assert isinstance(config, EncoderConfig)
    for name, limit in SIZE_LIMITS.items():
        value = getattr(config, name)
        assert all(v <= limit for v in (value if isinstance(value, tuple) else (value,)) if v)
    with storage_free():  # every accepted config builds (no storage: any size costs nothing)
        model = _one_line_or(bf.build_model, config)
    if model is None or config.parameter_count() > 2_000_000:
        return
    torch.manual_seed(0)
    model = bf.build_model(config).eval()
    ids = torch.tensor([[1, 2, 3]]) % config.vocab_size
    with torch.no_grad():
        out = _one_line_or(lambda: model(input_ids=ids).last_hidden_state)
    assert out is None or bool(torch.isfinite(out).all())


@pytest.mark.parametrize("family", FAMILY_PRESETS)
def test_config_json_with_the_issue_values_is_one_line(hf_configs, tmp_path, family):
    """The reported instances, in every family: 10^15 positions, NaN, a number no float
    holds, nesting 100,000 deep."""
    raw = hf_configs[family]
    width = next(k for k in ("hidden_size", "dim") if k in raw)  # DistilBERT's is "dim"
    edits = (("max_position_embeddings", 10**15), (width, float("nan")))
    for key, value in edits + (("initializer_range", 10**400),):  # no float holds 10**400
        (tmp_path / "config.json").write_text(json.dumps({**raw, key: value}))
        assert _one_line_or(lambda: config_from_hf(read_hf_config(tmp_path))) is None
    (tmp_path / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    assert _one_line_or(read_hf_config, tmp_path) is None
