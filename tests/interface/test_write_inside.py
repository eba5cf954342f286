"""Writes stay inside (#34 item 1): no writer follows a symbolic link out of its target, deletes
a file it did not write, or writes a target it cannot write safely without a clear error.

Each test puts a link where a writer writes (a linked subdirectory, a linked file, a linked
target) pointing at an ``outside`` directory whose files are fingerprinted before and compared
after: every one of them must be byte-identical and present."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import bertfamily as bf
from bertfamily.errors import UnsafePathError
from bertfamily.files import (
    atomic_directory,
    atomic_write,
    check_inside,
    is_own_temporary,
    recover_directory,
    write_text_atomic,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def _tiny(seed: int = 0):
    torch.manual_seed(seed)
    return bf.build_model(bf.EncoderConfig.from_preset("tiny-bert"))


def _outside(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A directory outside every target, holding files named like the ones writers write."""
    out = tmp_path / "outside"
    out.mkdir()
    files = {
        "model-00001-of-00002.safetensors": b"precious shard",
        "config.json": b'{"precious": true}',
        "model.safetensors": b"precious weights",
        ".shard-00000.npy.tmp-abcd1234": b"precious look-alike",
        ".model.tmp-abcd1234": b"precious look-alike",
        "metrics.jsonl": b"precious log\n",
        "graph.onnx": b"precious graph",
    }
    for name, data in files.items():
        (out / name).write_bytes(data)
    return out, files


def _untouched(out: Path, files: dict[str, bytes]) -> None:
    assert sorted(p.name for p in out.iterdir()) == sorted(files)
    for name, data in files.items():
        assert (out / name).read_bytes() == data, name


# ---------------------------------------------------------------- the primitives


def test_check_inside_refuses_links_dotdot_and_outside_paths(tmp_path):
    root = tmp_path / "root"
    (root / "real").mkdir(parents=True)
    out, _ = _outside(tmp_path)
    (root / "link").symlink_to(out, target_is_directory=True)
    assert check_inside(root, root / "real" / "x") == root / "real" / "x"
    assert check_inside(root, root / "new" / "deeper" / "x")  # absent directories are fine
    assert check_inside(root, root / "file-link")  # a final link is replaced by rename
    for bad, words in (
        (root / "link" / "config.json", r"is a symbolic link \(to"),
        (root / "real" / ".." / ".." / "outside" / "x", "a '..' in a path below"),
        (root / "link" / ".." / "x", "a '..' in a path below"),  # the system: outside/../x
        (out / "x", "outside"),
    ):
        with pytest.raises(UnsafePathError, match=words):
            check_inside(root, bad)


def test_a_write_inside_a_directory_being_built_never_goes_through_a_kept_link(tmp_path):
    out, files = _outside(tmp_path)
    target = tmp_path / "model"
    target.mkdir()
    (target / "1_Pooling").symlink_to(out, target_is_directory=True)
    with pytest.raises(UnsafePathError, match="1_Pooling is a symbolic link"):
        with atomic_directory(target) as tmp:
            write_text_atomic(tmp / "1_Pooling" / "config.json", "{}")
    _untouched(out, files)
    assert (target / "1_Pooling").is_symlink()  # the directory is as it was


def test_a_link_at_the_file_is_replaced_never_written_through(tmp_path):
    out, files = _outside(tmp_path)
    (tmp_path / "config.json").symlink_to(out / "config.json")
    write_text_atomic(tmp_path / "config.json", "new", inside=tmp_path)
    assert not (tmp_path / "config.json").is_symlink()
    assert (tmp_path / "config.json").read_text() == "new"
    _untouched(out, files)


def test_a_directory_swapped_in_whole_must_not_be_a_link(tmp_path):
    out, files = _outside(tmp_path)
    (tmp_path / "model").symlink_to(out, target_is_directory=True)
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        with atomic_directory(tmp_path / "model"):
            pass
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        _tiny().save_pretrained(tmp_path / "model")
    assert (tmp_path / "model").is_symlink()
    _untouched(out, files)


def test_stale_clean_up_deletes_only_its_own_temporaries_and_links_themselves(tmp_path):
    out, files = _outside(tmp_path)
    target = tmp_path / "model"
    target.mkdir()
    ours = [tmp_path / ".model.tmp-k3j9x_2a", tmp_path / ".model.old-0a1b2c3d"]
    for p in ours:
        p.mkdir()
        (p / "model.safetensors").write_bytes(b"stale")
    link = tmp_path / ".model.tmp-abcd1234"  # ours by name, but a link to outside
    link.symlink_to(out, target_is_directory=True)
    user = [tmp_path / ".model.tmp-notes.txt", tmp_path / ".model.old-keep", tmp_path / "x.tmp-"]
    for p in user:
        p.write_text("the user's")
    assert all(is_own_temporary(p, "model") for p in [*ours, link])
    assert not any(is_own_temporary(p, "model") for p in user)
    recover_directory(target)
    assert not any(os.path.lexists(p) for p in [*ours, link])
    assert all(p.read_text() == "the user's" for p in user)
    _untouched(out, files)


# ---------------------------------------------------------------- save_pretrained


def test_save_pretrained_never_deletes_a_shard_behind_a_link(tmp_path):
    """The issue's instance: a directory holding a symlinked subdirectory and a shard index;
    the save deleted the shard the index named through the link, outside the target."""
    out, files = _outside(tmp_path)
    target = tmp_path / "model"
    target.mkdir()
    (target / "sub").symlink_to(out, target_is_directory=True)
    save_file({"w": torch.zeros(2)}, str(target / "model-00002-of-00002.safetensors"))
    index = {
        "weight_map": {
            "a": "sub/model-00001-of-00002.safetensors",  # behind the link: kept
            "b": "model-00002-of-00002.safetensors",  # a real shard inside: superseded
            "c": "sub/config.json",  # not a shard at all: kept
        }
    }
    (target / "model.safetensors.index.json").write_text(json.dumps(index))
    _tiny().save_pretrained(target)
    _untouched(out, files)
    names = sorted(p.name for p in target.iterdir())
    assert names == ["config.json", "model.safetensors", "sub"], names
    assert (target / "sub").is_symlink()
    loaded, saved = bf.from_pretrained(target).state_dict(), _tiny().state_dict()
    assert all(torch.equal(loaded[k], saved[k]) for k in saved)


# ---------------------------------------------------------------- sentence-transformers, tokenizer


@pytest.fixture(scope="module")
def st_dir(tmp_path_factory, minilm_dir):
    """A tiny random BERT with MiniLM's tokenizer (no transformers import: fast)."""
    from helpers import save_tiny

    return save_tiny(tmp_path_factory.mktemp("st") / "tiny", minilm_dir)


def test_sentence_transformers_export_refuses_a_linked_module_directory(st_dir, tmp_path):
    from bertfamily.pipelines.embedding.bi_encoder import BiEncoder

    out, files = _outside(tmp_path)
    target = tmp_path / "export"
    target.mkdir()
    (target / "1_Pooling").symlink_to(out, target_is_directory=True)
    model = BiEncoder.from_directory(st_dir, max_seq_length=32)
    with pytest.raises(UnsafePathError, match="1_Pooling is a symbolic link"):
        model.save(target)
    _untouched(out, files)
    clean = tmp_path / "clean"
    model.save(clean)  # without the link, the same save works and loads back
    assert (clean / "1_Pooling" / "config.json").is_file()


def test_tokenizer_save_replaces_a_linked_file_never_writes_through_it(st_dir, tmp_path):
    out, files = _outside(tmp_path)
    target = tmp_path / "tok"
    target.mkdir()
    (target / "tokenizer_config.json").symlink_to(out / "config.json")
    bf.load_tokenizer(st_dir).save_pretrained(target)
    _untouched(out, files)
    assert not (target / "tokenizer_config.json").is_symlink()
    assert bf.load_tokenizer(target)("hello")["input_ids"].shape[1] > 2


# ---------------------------------------------------------------- bulk shards, index, run dirs


def test_bulk_stale_cleanup_removes_only_its_own_temporaries(st_dir, tmp_path):
    from bertfamily.pipelines.embedding.bulk import embed_file
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    out, files = _outside(tmp_path)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one line\ntwo lines\nthree\n")
    target = tmp_path / "vectors"
    embedder = SentenceEmbedder(st_dir)
    embed_file(embedder, corpus, target, shard_size=2)
    (target / "shard-00000.npy").unlink()  # to be embedded again: its temporaries are cleaned
    link = target / ".shard-00000.npy.tmp-abcd1234"
    link.symlink_to(out / ".shard-00000.npy.tmp-abcd1234")
    mine = target / ".shard-00000.npy.tmp-notes.txt"
    mine.write_text("the user's")
    result = embed_file(embedder, corpus, target, shard_size=2)
    assert result.complete and result.written == [0]
    assert not os.path.lexists(link)  # the link itself is gone ...
    _untouched(out, files)  # ... what it pointed to is not
    assert mine.read_text() == "the user's"


def test_index_save_refuses_a_linked_index_directory(st_dir, tmp_path):
    pytest.importorskip("faiss")
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from bertfamily.pipelines.retrieval.dense import VectorIndex

    out, files = _outside(tmp_path)
    (tmp_path / "idx").symlink_to(out, target_is_directory=True)
    index = VectorIndex.build(SentenceEmbedder(st_dir), ["a cat", "a dog"])
    with pytest.raises(UnsafePathError, match="symbolic link"):
        index.save(tmp_path / "idx")
    _untouched(out, files)


def _trainer(run: Path):
    from torch.nn import functional as F

    from bertfamily.train import IndexedBatches, TrainConfig, Trainer

    model = bf.build_model(
        bf.EncoderConfig.from_preset("tiny-bert", use_pooler=False), heads=["mlm"]
    )
    rng = np.random.default_rng(0)
    data = [
        {"input_ids": rng.integers(5, 99, 8), "labels": rng.integers(5, 99, 8)} for _ in range(8)
    ]

    def loss(m, batch):
        out = m(batch["input_ids"])
        return F.cross_entropy(out.logits.reshape(-1, 99), batch["labels"].reshape(-1)), {}

    cfg = TrainConfig(output_dir=run, max_steps=1, batch_size=4, log_every=1, progress=False,
                      device="cpu")  # fmt: skip
    return Trainer(model, loss, IndexedBatches(data, 4, seed=1), cfg)


@pytest.mark.parametrize("name", ["metrics.jsonl", "model", "best"])
def test_a_run_refuses_links_where_it_writes(tmp_path, name):
    from bertfamily.train import RunDirectoryError

    out, files = _outside(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    where = out / "metrics.jsonl" if name == "metrics.jsonl" else out
    (run / name).symlink_to(where, target_is_directory=where.is_dir())
    with pytest.raises(RunDirectoryError, match=f"{name} is a symbolic link"):
        _trainer(run).train()
    _untouched(out, files)


def test_run_clean_up_does_not_enter_a_linked_subdirectory(tmp_path):
    from bertfamily.train.rundir import clean_run_directory

    out, files = _outside(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    (run / "best").symlink_to(out, target_is_directory=True)
    (run / ".checkpoint.pt.tmp-abcd1234").write_bytes(b"half")
    cleaned = clean_run_directory(run, ("model", "best"))
    assert cleaned == [".checkpoint.pt.tmp-abcd1234"]
    _untouched(out, files)


# ---------------------------------------------------------------- fetch cache, ONNX export


def test_fetch_cache_entry_with_a_linked_directory_is_refused_and_refetch_stays_inside(
    tmp_path, monkeypatch
):
    import hashlib
    import shutil
    import zipfile

    from bertfamily.errors import CacheCorruptError
    from bertfamily.resources import cache as cache_mod
    from bertfamily.resources import registry
    from bertfamily.resources.registry import Resource

    out, files = _outside(tmp_path)
    monkeypatch.setenv("BERTFAMILY_CACHE", str(tmp_path / "cache"))
    archive = tmp_path / "x.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for rel in ("config.json", "1_Pooling/config.json"):
            zf.writestr(zipfile.ZipInfo(f"pkg/{rel}", (2020, 1, 1, 0, 0, 0)), b"{}")

    def download(resource, dest):
        return Path(shutil.copy(archive, dest / "x.zip"))

    kind = registry.Kind(download=download, extract=registry._extract_zip)
    monkeypatch.setitem(cache_mod.KINDS, "test-zip", kind)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    resource = Resource("linked", "test-zip", "x", "0", digest, member="pkg/")
    monkeypatch.setitem(cache_mod.RESOURCES, "linked", resource)
    entry = cache_mod.fetch("linked")
    shutil.rmtree(entry / "1_Pooling")
    (entry / "1_Pooling").symlink_to(out, target_is_directory=True)
    with pytest.raises(CacheCorruptError, match="1_Pooling"):
        cache_mod.fetch("linked")
    assert cache_mod.fetch("linked", force=True) == entry  # the repair: the link is dropped
    assert not (entry / "1_Pooling").is_symlink()
    _untouched(out, files)


@pytest.mark.long  # 4 s of export; atomic_write's rename is tested above
def test_onnx_export_replaces_a_linked_file_never_writes_through_it(tmp_path):
    pytest.importorskip("onnx")
    from bertfamily.convert.onnx import export_onnx

    out, files = _outside(tmp_path)
    (tmp_path / "model.onnx").symlink_to(out / "graph.onnx")
    export_onnx(_tiny(), tmp_path / "model.onnx")
    assert not (tmp_path / "model.onnx").is_symlink()
    assert (tmp_path / "model.onnx").stat().st_size > 1000
    _untouched(out, files)


def test_atomic_write_with_an_explicit_root_refuses_a_linked_parent(tmp_path):
    out, files = _outside(tmp_path)
    (tmp_path / "plans").symlink_to(out, target_is_directory=True)
    with pytest.raises(UnsafePathError, match="plans is a symbolic link"):
        atomic_write(tmp_path / "plans" / "k.onnx", lambda t: t.write_bytes(b"x"), inside=tmp_path)
    _untouched(out, files)
