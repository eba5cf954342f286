"""Model directories on disk are trusted for nothing: saves are all-or-nothing (even under
SIGKILL), and corrupt, truncated, lying, malicious or oversized files fail with a clear error
naming the file (issue 15)."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import bertfamily as bf
from bertfamily import ConfigError, EncoderConfig, ModelDirectoryError, build_model
from bertfamily.checkpoints.convert import CheckpointError
from bertfamily.config import MAX_PARAMETERS_ENV

SRC = Path(__file__).resolve().parents[2] / "src"


def _tiny(seed: int, **overrides):
    torch.manual_seed(seed)
    return build_model(EncoderConfig.from_preset("tiny-bert", **overrides)).eval()


def _state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _leftovers(parent: Path, name: str) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}."))


@pytest.fixture()
def saved(tmp_path):
    """A saved tiny model directory (copy of nothing shared) and the model's state."""
    model = _tiny(0)
    path = tmp_path / "model"
    model.save_pretrained(path)
    return path, _state(model)


# --- directory-atomic saves ------------------------------------------------------------------
def test_save_keeps_other_files_and_drops_superseded_weights(tmp_path):
    path = tmp_path / "m"
    path.mkdir()
    (path / "tokenizer.json").write_text("{}")
    (path / "pytorch_model.bin").write_bytes(b"old")
    (path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00001-of-00001.safetensors"}})
    )
    (path / "model-00001-of-00001.safetensors").write_bytes(b"old")
    model = _tiny(1)
    model.save_pretrained(path)
    assert sorted(p.name for p in path.iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    ]
    assert _same(_state(bf.from_pretrained(path)), _state(model))
    assert _leftovers(tmp_path, "m") == []


def test_failed_save_leaves_the_old_directory(saved, monkeypatch):
    path, old = saved
    import bertfamily.checkpoints.io as io

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(io, "save_file", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        _tiny(2).save_pretrained(path)
    assert _same(_state(bf.from_pretrained(path)), old)
    assert _leftovers(path.parent, path.name) == []


def test_loads_and_saves_remove_stale_temporaries(saved):
    path, old = saved
    for stale in (".model.tmp-abc123xy", ".model.old-deadbeef"):
        (path.parent / stale).mkdir()
        (path.parent / stale / "model.safetensors").write_bytes(b"x" * 1000)
    (path.parent / ".model.tmp-file0000").write_bytes(b"half a file")
    assert _same(_state(bf.from_pretrained(path)), old)
    assert _leftovers(path.parent, "model") == []
    (path.parent / ".model.tmp-again000").mkdir()
    _tiny(3).save_pretrained(path)
    assert _leftovers(path.parent, "model") == []


def test_load_puts_back_a_directory_killed_at_the_rename_instant(saved):
    path, old = saved
    os.replace(path, path.parent / ".model.old-12345678")  # renamed aside, new one not in yet
    (path.parent / ".model.tmp-99999999").mkdir()
    assert _same(_state(bf.from_pretrained(path)), old)
    assert _leftovers(path.parent, "model") == []


# A server imports torch once, then forks one saver per trial: the saver alternates saving
# model A and model B over the directory until it is SIGKILLed.
_SERVER = r"""
import os, sys, torch
torch.set_num_threads(1)
import bertfamily as bf
a, b, target = (bf.from_pretrained(p) for p in sys.argv[1:3]), None, sys.argv[3]
a, b = list(a)
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "go":
        pid = os.fork()
        if pid == 0:
            try:
                while True:
                    b.save_pretrained(target)
                    a.save_pretrained(target)
            finally:
                os._exit(0)
        print(pid, flush=True)
    elif line.strip() == "reap":
        os.waitpid(pid, 0)
        print("reaped", flush=True)
"""


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_sigkill_during_save_leaves_old_or_new_never_a_mix(tmp_path):
    """20 random SIGKILLs of a process saving over an existing model: the directory then holds
    exactly the old or the new model (or, at the rename instant only, is briefly absent and the
    next load puts the old one back), and no temporary survives the next load or save."""
    models = {name: _tiny(seed, vocab_size=20000) for name, seed in (("a", 10), ("b", 11))}
    states = {name: _state(m) for name, m in models.items()}
    for name, model in models.items():
        model.save_pretrained(tmp_path / f"ref-{name}")
    target = tmp_path / "target"
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER, str(tmp_path / "ref-a"), str(tmp_path / "ref-b"), target],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    rng = random.Random(0)
    seen = {"a": 0, "b": 0}
    try:
        assert server.stdout.readline().strip() == "ready"
        for trial in range(20):
            models["a"].save_pretrained(target)  # the existing (old) version
            server.stdin.write("go\n")
            server.stdin.flush()
            pid = int(server.stdout.readline())
            time.sleep(rng.uniform(0.0, 0.15))
            os.kill(pid, signal.SIGKILL)
            server.stdin.write("reap\n")
            server.stdin.flush()
            assert server.stdout.readline().strip() == "reaped"
            if trial % 2:  # the next save cleans up
                models["a"].save_pretrained(target)
                assert _leftovers(tmp_path, "target") == []
                assert _same(_state(bf.from_pretrained(target)), states["a"])
                continue
            loaded = _state(bf.from_pretrained(target))  # the next load cleans up
            assert _leftovers(tmp_path, "target") == [], f"trial {trial}"
            match = [name for name, s in states.items() if _same(loaded, s)]
            assert match, f"trial {trial}: the directory holds neither model"
            seen[match[0]] += 1
    finally:
        server.kill()
        server.wait()
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "model.safetensors"]


# --- corrupt weights -------------------------------------------------------------------------
def _with_weights(path: Path, data: bytes) -> Path:
    (path / "model.safetensors").write_bytes(data)
    return path


def _header(raw: bytes) -> tuple[int, dict]:
    (n,) = struct.unpack("<Q", raw[:8])
    return n, json.loads(raw[8 : 8 + n])


def _rebuild(header: dict, body: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + body


@pytest.mark.parametrize(
    "damage",
    [
        "empty",
        "seven_bytes",
        "header_only_half",
        "cut_in_data",
        "cut_last_byte",
        "huge_header_length",
        "header_not_json",
        "header_a_list",
        "lying_offsets",
        "overlapping_offsets",
        "unknown_dtype",
        "bad_shape",
        "trailing_bytes",
        "zeros",
    ],
)
def test_corrupt_safetensors_names_the_file(saved, damage):
    path, _ = saved
    raw = (path / "model.safetensors").read_bytes()
    n, header = _header(raw)
    body = raw[8 + n :]
    name = next(k for k in header if k != "__metadata__")
    bad = {
        "empty": lambda: b"",
        "seven_bytes": lambda: raw[:7],
        "header_only_half": lambda: raw[: 8 + n // 2],
        "cut_in_data": lambda: raw[: len(raw) // 2],
        "cut_last_byte": lambda: raw[:-1],
        "huge_header_length": lambda: struct.pack("<Q", 2**62) + raw[8:],
        "header_not_json": lambda: raw[:8] + b"\xff" * n + body,
        "header_a_list": lambda: _rebuild([1, 2], body),
        "lying_offsets": lambda: _rebuild(
            {**header, name: {**header[name], "data_offsets": [0, 10**12]}}, body
        ),
        "overlapping_offsets": lambda: _rebuild(
            {
                k: (
                    {**v, "data_offsets": [0, v["data_offsets"][1] - v["data_offsets"][0]]}
                    if k != "__metadata__"
                    else v
                )
                for k, v in header.items()
            },
            body,
        ),
        "unknown_dtype": lambda: _rebuild({**header, name: {**header[name], "dtype": "Q7"}}, body),
        "bad_shape": lambda: _rebuild({**header, name: {**header[name], "shape": [-1]}}, body),
        "trailing_bytes": lambda: raw + b"\0" * 16,
        "zeros": lambda: b"\0" * len(raw),
    }[damage]()
    _with_weights(path, bad)
    with pytest.raises(ModelDirectoryError, match="model.safetensors") as e:
        bf.from_pretrained(path)
    assert "safetensors" in str(e.value)


def test_bit_flips_in_the_header_never_escape(saved):
    path, _ = saved
    raw = (path / "model.safetensors").read_bytes()
    n, _ = _header(raw)
    rng = random.Random(1)
    for _ in range(40):
        data = bytearray(raw)
        pos = rng.randrange(8 + n)
        data[pos] ^= 1 << rng.randrange(8)
        _with_weights(path, bytes(data))
        try:
            bf.from_pretrained(path)  # a flip in a name or a key order may still load
        except ModelDirectoryError as e:
            assert "model.safetensors" in str(e)
        except bf.CheckpointError:
            pass  # a flipped tensor name: a missing and an unexpected key


def test_malicious_bin_is_refused_naming_the_file(saved):
    path, _ = saved
    (path / "model.safetensors").unlink()

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    torch.save({"x": Evil()}, path / "pytorch_model.bin")
    with pytest.raises(ModelDirectoryError, match=r"pytorch_model.bin.*refused"):
        bf.from_pretrained(path)
    (path / "pytorch_model.bin").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(ModelDirectoryError, match="pytorch_model.bin"):
        bf.from_pretrained(path)
    torch.save([torch.zeros(2)], path / "pytorch_model.bin")
    with pytest.raises(ModelDirectoryError, match=r"pytorch_model.bin.*name -> tensor"):
        bf.from_pretrained(path)


# --- sharded indexes ---------------------------------------------------------------------------
def _sharded(path: Path, index: object, shards: dict[str, dict] | None = None) -> Path:
    (path / "model.safetensors").unlink(missing_ok=True)
    for name, tensors in (shards or {}).items():
        save_file(tensors, path / name)
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    return path


def test_sharded_index_must_be_sane(saved, tmp_path):
    path, state = saved
    from safetensors.torch import load_file

    tensors = load_file(path / "model.safetensors")
    keys = sorted(tensors)
    half = len(keys) // 2
    shards = {
        "s1.safetensors": {k: tensors[k] for k in keys[:half]},
        "s2.safetensors": {k: tensors[k] for k in keys[half:]},
    }
    good = {
        "weight_map": {
            k: "s1.safetensors" if i < half else "s2.safetensors" for i, k in enumerate(keys)
        }
    }
    _sharded(path, good, shards)
    assert _same(_state(bf.from_pretrained(path)), state)
    cases = [
        ({"metadata": {}}, "no weight_map"),
        ([1, 2], "must hold a JSON object"),
        ({"weight_map": {keys[0]: "gone.safetensors"}}, "gone.safetensors.*missing"),
        ({"weight_map": {keys[0]: "../outside.safetensors"}}, "outside its directory"),
        ({"weight_map": {keys[0]: "sub/../../x.safetensors"}}, "outside its directory"),
        ({"weight_map": {keys[0]: str(tmp_path / "abs.safetensors")}}, "absolute path"),
        ({"weight_map": {keys[0]: 7}}, "invalid file"),
        ({"weight_map": {**good["weight_map"], "ghost": "s1.safetensors"}}, "does not hold"),
    ]
    save_file({"x": torch.zeros(1)}, tmp_path / "outside.safetensors")
    save_file({"x": torch.zeros(1)}, tmp_path / "abs.safetensors")
    for index, message in cases:
        _sharded(path, index)
        with pytest.raises(ModelDirectoryError, match="model.safetensors.index.json") as e:
            bf.from_pretrained(path)
        assert __import__("re").search(message, str(e.value)), (index, str(e.value))


# --- config.json ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text,message",
    [
        ("[1, 2]", "must hold a JSON object"),
        ("null", "must hold a JSON object"),
        ('"bert"', "must hold a JSON object"),
        ("{not json", "not valid JSON"),
        ("\xff\xfe", "not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, "not valid JSON"),
    ],
)
def test_config_json_must_be_an_object(saved, text, message):
    path, _ = saved
    (path / "config.json").write_bytes(text.encode("latin-1"))
    with pytest.raises(ModelDirectoryError, match=f"config.json.*{message}"):
        bf.from_pretrained(path)


def _edit_config(path: Path, **changes) -> None:
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize(
    "field,value",
    [
        ("layer_norm_eps", "tiny"),
        ("layer_norm_eps", 0),
        ("layer_norm_eps", -1e-5),
        ("hidden_size", 32.0),
        ("hidden_size", "32"),
        ("hidden_size", True),
        ("num_hidden_layers", 0),
        ("num_hidden_layers", [2]),
        ("hidden_dropout_prob", 1.5),
        ("hidden_dropout_prob", "0.1"),
        ("attention_probs_dropout_prob", -0.1),
        ("hidden_act", ["gelu"]),
        ("hidden_act", "swish9"),
        ("model_type", ["bert"]),
        ("type_vocab_size", "2"),
        ("pad_token_id", 10**9),
        ("initializer_range", None),  # null: the default is kept
        ("num_labels", 10**12),
        ("id2label", [0, 1]),
        ("architectures", 5),  # ignored, not a crash
    ],
)
def test_config_fields_are_checked(saved, field, value):
    path, _ = saved
    _edit_config(path, **{field: value}, **({"id2label": None} if field == "num_labels" else {}))
    if field in ("initializer_range", "architectures"):
        bf.from_pretrained(path)
        return
    with pytest.raises(ModelDirectoryError) as e:
        bf.from_pretrained(path)
    msg = str(e.value)
    assert "config.json" in msg and field.split("_")[0] in msg, msg


@pytest.mark.parametrize("field,value", [("num_hidden_layers", 1_000_000), ("vocab_size", 10**12)])
def test_huge_configs_are_refused_before_allocating(saved, field, value, monkeypatch):
    path, _ = saved
    _edit_config(path, **{field: value})
    limit = "layer steps" if field == "num_hidden_layers" else "SIZE_LIMITS"
    with pytest.raises(ModelDirectoryError, match=rf"config.json.*{field}={value}.*{limit}"):
        bf.from_pretrained(path)
    with pytest.raises(ConfigError, match=f"{field}={value}"):
        build_model(EncoderConfig.from_preset("tiny-bert", **{field: value}))
    monkeypatch.setenv(MAX_PARAMETERS_ENV, "1000")
    with pytest.raises(ConfigError, match="limit of 1,000"):
        _tiny(0)


def test_parameter_limit_can_be_raised_and_lowered(saved, monkeypatch):
    path, state = saved
    with pytest.raises(ModelDirectoryError, match="limit of 100"):
        bf.from_pretrained(path, max_parameters=100)
    monkeypatch.setenv(MAX_PARAMETERS_ENV, "100")
    with pytest.raises(ModelDirectoryError, match="limit of 100"):
        bf.from_pretrained(path)
    assert _same(_state(bf.from_pretrained(path, max_parameters=10**6)), state)
    monkeypatch.setenv(MAX_PARAMETERS_ENV, "many")
    with pytest.raises(ConfigError, match="BERTFAMILY_MAX_PARAMETERS='many'"):
        build_model(EncoderConfig.from_preset("tiny-bert"))
    monkeypatch.setenv(MAX_PARAMETERS_ENV, "1e9")
    build_model(EncoderConfig.from_preset("tiny-bert"))


def test_estimate_matches_the_built_model():
    from bertfamily.presets import PRESETS

    for name in PRESETS:
        config = EncoderConfig.from_preset(name)
        heads = ("mlm",) + (("pair",) if config.pair_head and config.use_pooler else ())
        with torch.device("meta"):
            count = build_model(config, heads=heads).num_parameters(heads=True)
        assert count <= config.estimated_parameters(heads) <= 1.12 * count, name


def test_huge_config_json_file_is_refused(saved):
    path, _ = saved
    with open(path / "config.json", "ab") as f:
        f.truncate(65 * 2**20)  # sparse: no real disk used
    with pytest.raises(ModelDirectoryError, match=r"config.json is .* bytes"):
        bf.from_pretrained(path)


def test_shutil_copy_of_a_saved_model_loads(saved, tmp_path):
    """Sanity: a plain copy (no temporaries, no lock files) is a valid directory."""
    path, state = saved
    shutil.copytree(path, tmp_path / "copy")
    assert _same(_state(bf.from_pretrained(tmp_path / "copy")), state)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize(
    "preset, change, message",
    [
        ("distilbert-base", dict(layer_norm_eps=1e-6), "layer_norm_eps=1e-06"),
        ("roberta-base", dict(position_scheme="absolute"), "position_scheme='absolute'"),
        ("deberta-base", dict(classifier_pooling="pooler"), "classifier_pooling='pooler'"),
    ],
)
def test_save_refuses_a_config_its_family_cannot_express(tmp_path, preset, change, message):
    """A field that every checkpoint of the family fixes (config_fixed) and the config changes
    would be silently run otherwise by transformers: save_pretrained refuses, writing nothing."""
    config = bf.EncoderConfig.from_preset(
        preset, num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=37,
        vocab_size=99, max_position_embeddings=64,
    )  # fmt: skip
    model = bf.build_model(config.replace(**change))
    with pytest.raises(CheckpointError, match=message):
        model.save_pretrained(tmp_path / "out")
    assert not (tmp_path / "out").exists()
