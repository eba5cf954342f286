"""Fuzzing `from_pretrained` with hypothesis: whatever config.json or model.safetensors holds,
loading either succeeds or raises a documented error (a ValueError subclass or OSError), never
anything else, never a hang or a huge allocation (issue 15). Bounded to a few seconds."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bertfamily as bf
from bertfamily import EncoderConfig, build_model

FIELDS = [
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
    "pad_token_id",
    "layer_norm_eps",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "initializer_range",
    "hidden_act",
    "model_type",
    "position_embedding_type",
    "classifier_dropout",
    "id2label",
    "num_labels",
    "architectures",
]
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**15), max_value=10**15)
    | st.sampled_from([0, 1, 2, 4, 32, 64, 10**6, 10**12, 2**63])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(["bert", "roberta", "gelu", "relu", "absolute", "tiny", ""])
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=6,
)
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("fuzz") / "model"
    build_model(EncoderConfig.from_preset("tiny-bert")).save_pretrained(path)
    return path


def _load(path: Path) -> None:
    try:
        bf.from_pretrained(path, max_parameters=10**7)
    except (ValueError, OSError):
        pass  # documented: ModelDirectoryError, CheckpointError, ConfigError, ...


@SETTINGS
@given(
    changes=st.dictionaries(st.sampled_from(FIELDS), JSON_VALUES, max_size=4),
    drop=st.lists(st.sampled_from(FIELDS), max_size=3),
)
def test_fuzzed_config_json(saved, tmp_path_factory, changes, drop):
    path = tmp_path_factory.mktemp("cfg") / "model"
    shutil.copytree(saved, path)
    cfg = json.loads((path / "config.json").read_text())
    for name in drop:
        cfg.pop(name, None)
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))
    _load(path)


@SETTINGS
@given(
    data=st.one_of(
        st.binary(max_size=64),
        st.tuples(st.integers(0, 4000), st.binary(max_size=8), st.booleans()),
    )
)
def test_fuzzed_safetensors(saved, tmp_path_factory, data):
    path = tmp_path_factory.mktemp("st") / "model"
    shutil.copytree(saved, path)
    raw = (path / "model.safetensors").read_bytes()
    if isinstance(data, bytes):  # random bytes, sometimes behind a plausible header length
        blob = data if len(data) % 2 else struct.pack("<Q", len(data)) + data
    else:  # patch bytes in (header) or cut the file at a random point
        at, patch, cut = data
        at = at % len(raw)
        blob = raw[:at] if cut else raw[:at] + patch + raw[at + len(patch) :]
    (path / "model.safetensors").write_bytes(blob)
    _load(path)


TENSOR_DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int64,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.float8_e4m3fn,
]


@SETTINGS
@given(
    which=st.integers(0, 10**6),
    dtype=st.sampled_from(TENSOR_DTYPES),
    shape=st.sampled_from(["same", "flat", "transposed", "extra-dim", "empty"]),
    poison=st.sampled_from([None, float("nan"), float("inf"), float("-inf"), 7e4]),
)
def test_fuzzed_weight_tensors(saved, tmp_path_factory, which, dtype, shape, poison):
    """One tensor of the weight file gets another dtype, shape or non-finite value: the load
    succeeds only when the result is exact and finite, and otherwise fails with a documented
    error (never a raw RuntimeError, never NaN weights)."""
    from safetensors.torch import load_file, save_file

    path = tmp_path_factory.mktemp("wt") / "model"
    shutil.copytree(saved, path)
    state = load_file(path / "model.safetensors")
    name = sorted(state)[which % len(state)]
    t = state[name].clone()
    if poison is not None:
        t.view(-1)[which % t.numel()] = poison
    t = {
        "same": t,
        "flat": t.flatten(),
        "transposed": t.T if t.dim() == 2 else t,
        "extra-dim": t[None],
        "empty": t[:0],
    }[shape]
    state[name] = t.to(dtype).contiguous()
    save_file(state, path / "model.safetensors")
    try:
        model = bf.from_pretrained(path, max_parameters=10**7)
    except (ValueError, OSError):
        return  # documented: ModelDirectoryError, CheckpointError, ...
    assert all(
        torch.isfinite(v).all() for v in model.state_dict().values() if v.is_floating_point()
    )
    assert dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64), (name, dtype)
