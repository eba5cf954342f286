"""Small files never allocate gigabytes (#34 item 4): sizes are checked against the file before
any allocation, and the errors stay one line.

Every check here is structural (what was built, what was unpacked, the length of the message),
never a timing."""

from __future__ import annotations

import io
import json
import shutil
import struct
import zipfile
from pathlib import Path

import pytest
import torch

import bertfamily as bf
from bertfamily import pretrained
from bertfamily.errors import CheckpointError, ModelDirectoryError, TokenizerFileError

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("small") / "tiny"
    bf.build_model(bf.EncoderConfig.from_preset("tiny-bert")).save_pretrained(path)
    return path


def _with_config(tiny_dir: Path, tmp_path: Path, **changes) -> Path:
    path = tmp_path / "edited"
    shutil.copytree(tiny_dir, path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, **changes}))
    return path


@pytest.fixture
def no_full_build(monkeypatch):
    """Records every model `from_pretrained` builds: whether it had storage."""
    built: list[bool] = []
    real = pretrained.build_model

    def spy(*args, **kwargs):
        model = real(*args, **kwargs)
        built.append(not next(model.parameters()).is_meta)
        return model

    monkeypatch.setattr(pretrained, "build_model", spy)
    return built


# ---------------------------------------------------------------- zip bombs


def _torch_zip(compressed_record: bytes | None) -> bytes:
    """A real torch.save zip of one tensor; with ``compressed_record``, its data record is
    replaced by those bytes, deflated (torch.save never compresses)."""
    raw = io.BytesIO()
    torch.save({"encoder.x": torch.zeros(4)}, raw)
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(raw.getvalue())) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if compressed_record is not None and info.filename.endswith("/data/0"):
                dst.writestr(info.filename, compressed_record, zipfile.ZIP_DEFLATED)
            else:
                dst.writestr(info, data)
    return out.getvalue()


def _declared_larger(archive: bytes, size: int) -> bytes:
    """``archive`` with every central-directory record (7 of them) declaring ``size`` bytes
    unpacked."""
    data = bytearray(archive)
    at = data.find(b"PK\x01\x02")
    while at != -1:
        struct.pack_into("<I", data, at + 24, size)  # uncompressed size
        at = data.find(b"PK\x01\x02", at + 4)
    return bytes(data)


BOMBS = {
    # 16 MB of zeros deflated to ~16 KB: a small file that unpacks 1,000-fold (the issue's
    # 2 MB file expanded to gigabytes the same way)
    "compressed record": (lambda: _torch_zip(bytes(16 * 2**20)), "is compressed"),
    "records larger than the file": (
        lambda: _declared_larger(_torch_zip(None), 2**31),
        r"declare 15,032,385,536 bytes .* the file has 1,073",
    ),
}


@pytest.fixture
def no_torch_load(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("torch.load ran: the archive was unpacked")

    monkeypatch.setattr(torch, "load", refuse)


@pytest.mark.parametrize("bomb", list(BOMBS))
def test_zip_bomb_bin_is_refused_before_anything_is_unpacked(
    tiny_dir, tmp_path, no_torch_load, bomb
):
    make, words = BOMBS[bomb]
    path = tmp_path / "bomb"
    path.mkdir()
    shutil.copy(tiny_dir / "config.json", path)
    (path / "pytorch_model.bin").write_bytes(make())
    with pytest.raises(ModelDirectoryError, match=words) as info:
        bf.from_pretrained(path)
    assert "pytorch_model.bin was refused" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("bomb", list(BOMBS))
def test_zip_bomb_checkpoint_is_refused_before_anything_is_unpacked(tmp_path, no_torch_load, bomb):
    from bertfamily.train.rundir import RunDirectoryError, load_tensor_file

    make, words = BOMBS[bomb]
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(make())
    with pytest.raises(RunDirectoryError, match=words):
        load_tensor_file(path, "checkpoint")


def test_a_real_torch_save_passes_the_archive_check(tmp_path):
    from bertfamily.checkpoints.io import torch_archive_problem

    path = tmp_path / "real.pt"
    torch.save({"w": torch.randn(300, 7), "step": 3}, path)
    legacy = tmp_path / "legacy.pt"
    torch.save({"w": torch.randn(3)}, legacy, _use_new_zipfile_serialization=False)
    assert torch_archive_problem(path) is None and torch_archive_problem(legacy) is None


# ---------------------------------------------------------------- configs the weights cannot fill


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"num_hidden_layers": 9_999}, "num_hidden_layers 9,999"),
        ({"vocab_size": 4_000_000}, "vocab_size 4,000,000"),  # 10^8 is over SIZE_LIMITS
    ],
)
def test_config_the_weights_cannot_fill_is_refused_before_building_in_one_line(
    tiny_dir, tmp_path, no_full_build, changes, words
):
    path = _with_config(tiny_dir, tmp_path, **changes)
    with pytest.raises(ModelDirectoryError, match=words) as info:
        bf.from_pretrained(path)
    message = str(info.value)
    assert no_full_build == []  # no model was built at all, not even without storage
    assert "\n" not in message and len(message) < 400, message  # before: 4.6 MB, 49 s
    assert "config.json" in message and "19,978 values" in message


def test_shapes_are_compared_without_storage_before_allocating(tiny_dir, tmp_path, no_full_build):
    # a vocabulary the coarse bound lets through (1.01 M values vs 20 K stored): the model is
    # built on the meta device, its shapes compared, and the real model never allocated
    path = _with_config(tiny_dir, tmp_path, vocab_size=31_600)
    with pytest.raises(CheckpointError, match=r"\(99, 32\) vs model \(31600, 32\)"):
        bf.from_pretrained(path)
    assert no_full_build == [False]


def test_a_matching_config_builds_one_real_model(tiny_dir, no_full_build):
    bf.from_pretrained(tiny_dir)
    assert no_full_build == [True]


def test_key_lists_in_errors_are_cut_to_a_few_names(tiny_dir, tmp_path):
    path = _with_config(tiny_dir, tmp_path, num_hidden_layers=9)  # 7 layers of 12 keys missing
    with pytest.raises(CheckpointError) as info:
        bf.from_pretrained(path)
    message = str(info.value)
    assert "missing keys (84): " in message and "... and 79 more" in message, message
    assert len(info.value.missing) == 84  # every key is still on the exception
    assert "\n" not in message and len(message) < 600


def test_early_exit_students_of_absurd_sizes_are_refused_before_allocating(tmp_path):
    from bertfamily.heads.early_exit import StudentClassifiers, load_students, save_students

    save_students(StudentClassifiers(2, 32, 3, 16, 2), tmp_path)
    meta = json.loads((tmp_path / "early_exit.json").read_text())
    meta["hidden_size"] = 10**7  # would be tens of gigabytes
    (tmp_path / "early_exit.json").write_text(json.dumps(meta))
    with pytest.raises(ModelDirectoryError, match="does not match early_exit.safetensors"):
        load_students(tmp_path)


# ---------------------------------------------------------------- tokenizer pipelines


def _tokenizer_dir(minilm_dir: Path, tmp_path: Path, rules: int, **pre) -> Path:
    path = tmp_path / f"tok-{rules}"
    path.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(minilm_dir / name, path / name)
    data = json.loads((path / "tokenizer.json").read_text())
    double = {"type": "Replace", "pattern": {"String": "a"}, "content": "aa"}
    chain = [data["normalizer"]] + [double] * rules
    data["normalizer"] = {"type": "Sequence", "normalizers": chain}
    if pre:
        data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [pre] * 33}
    (path / "tokenizer.json").write_text(json.dumps(data))
    return path


TEXT_44K = ("a banana and a papaya, " * 2_000)[:44_000]


def test_chained_replace_rules_are_refused_at_load(minilm_dir, tmp_path):
    # the instance: 16 rules doubling every "a" (65,536-fold; 3.3 GB on a 44 KB text)
    with pytest.raises(TokenizerFileError, match=r"up to 196,608 .*at most 64") as info:
        bf.load_tokenizer(_tokenizer_dir(minilm_dir, tmp_path, 16))
    assert "tokenizer.json" in str(info.value)
    with pytest.raises(TokenizerFileError, match="33 pre-tokenizers chained"):
        bf.load_tokenizer(_tokenizer_dir(minilm_dir, tmp_path, 0, type="Whitespace"))


def test_an_accepted_chain_grows_a_44_kb_text_within_the_bound(minilm_dir, tmp_path):
    from bertfamily.tokenization.hf_files import MAX_NORMALIZER_EXPANSION

    tok = bf.load_tokenizer(_tokenizer_dir(minilm_dir, tmp_path, 4))  # 3 × 16 = 48-fold: kept
    grown = len(tok.backend.normalizer.normalize_str(TEXT_44K))
    assert TEXT_44K.count("a") * 15 < grown <= MAX_NORMALIZER_EXPANSION * len(TEXT_44K)
    assert tok(TEXT_44K)["input_ids"].shape == (1, 512)  # cut to the limit, as any text
