"""Models already in the local Hugging Face cache, by name, offline: `hub_cache.resolve_model_dir`
and every loader that calls it (from_pretrained, load_tokenizer, SentenceEmbedder, --model)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import bertfamily as bf
from bertfamily.checkpoints.io import ModelDirectoryError
from bertfamily.cli import app
from bertfamily.pipelines.embedding.embed import SentenceEmbedder
from bertfamily.resources.resolve import (
    ModelNotFoundError,
    hub_cache_dir,
    is_repo_id,
    resolve_model_dir,
)

SHA_MAIN = "1" * 40
SHA_V2 = "2" * 40
SHA_MISSING = "3" * 40
VOCAB = (
    ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    + ["##" + chr(c) for c in range(ord("a"), ord("z") + 1)]
    + [f"w{i}" for i in range(42)]
)  # 99 = tiny-bert's vocabulary


def _model_files(directory: Path, seed: int) -> None:
    torch.manual_seed(seed)
    bf.build_model(bf.EncoderConfig.from_preset("tiny-bert")).save_pretrained(directory)
    (directory / "vocab.txt").write_text("\n".join(VOCAB) + "\n")


def _cache_repo(cache: Path, repo_id: str, tmp: Path) -> Path:
    """``models--org--name`` as huggingface_hub lays it out: files in blobs/ (named by their
    hash), snapshots/<commit>/ of symlinks to them, refs/main and refs/v2."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    for seed, sha in ((0, SHA_MAIN), (1, SHA_V2)):
        src = tmp / f"src-{sha[:4]}"
        _model_files(src, seed)
        snap = repo / "snapshots" / sha
        snap.mkdir(parents=True)
        for f in src.iterdir():
            blob = repo / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
            blob.parent.mkdir(exist_ok=True)
            blob.write_bytes(f.read_bytes())
            (snap / f.name).symlink_to(os.path.relpath(blob, snap))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(SHA_MAIN)  # huggingface_hub writes no newline
    (repo / "refs" / "v2").write_text(SHA_V2)
    return repo


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    hub = tmp_path / "hub"
    _cache_repo(hub, "org/tiny", tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.chdir(tmp_path)  # no ./org/tiny here
    return hub


def _first_weight(model) -> torch.Tensor:
    return model.encoder.embeddings.token.weight.detach()


def test_refs_main_and_an_explicit_revision(cache):
    repo = cache / "models--org--tiny"
    assert resolve_model_dir("org/tiny") == repo / "snapshots" / SHA_MAIN
    assert resolve_model_dir("org/tiny", revision="v2") == repo / "snapshots" / SHA_V2
    assert resolve_model_dir("org/tiny", revision=SHA_V2) == repo / "snapshots" / SHA_V2
    main, v2 = bf.from_pretrained("org/tiny"), bf.from_pretrained("org/tiny", revision="v2")
    direct = bf.from_pretrained(repo / "snapshots" / SHA_MAIN)
    assert torch.equal(_first_weight(main), _first_weight(direct))
    assert not torch.equal(_first_weight(main), _first_weight(v2))


def test_same_directory_as_huggingface_hub(cache):
    hub = pytest.importorskip("huggingface_hub")
    for rev in (None, "v2", SHA_V2):
        theirs = hub.snapshot_download(
            "org/tiny", revision=rev, cache_dir=cache, local_files_only=True
        )
        assert resolve_model_dir("org/tiny", revision=rev) == Path(theirs)


def test_tokenizer_and_embedder_by_name(cache):
    tok = bf.load_tokenizer("org/tiny")
    assert tok(["a w3"])["input_ids"].tolist() == [[2, 5, 60, 3]]
    emb = SentenceEmbedder("org/tiny")
    assert emb.path == cache / "models--org--tiny" / "snapshots" / SHA_MAIN
    vectors = emb.encode(["a w3", "b"])
    assert vectors.shape == (2, 32)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    other = SentenceEmbedder("org/tiny", revision="v2").encode(["a w3", "b"])
    assert np.abs(other - vectors).max() > 1e-3


def test_hf_home_and_the_default_location(tmp_path, monkeypatch):
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    default = tmp_path / "home" / ".cache" / "huggingface" / "hub"
    assert hub_cache_dir() == (default, "the default")
    _cache_repo(default, "org/tiny", tmp_path)
    assert resolve_model_dir("org/tiny") == default / "models--org--tiny" / "snapshots" / SHA_MAIN
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ModelNotFoundError, match="HF_HOME/hub"):
        resolve_model_dir("org/tiny")  # HF_HOME moves the cache away from the default
    (tmp_path / "hf").mkdir()
    os.rename(default, tmp_path / "hf" / "hub")
    snap = tmp_path / "hf" / "hub" / "models--org--tiny" / "snapshots" / SHA_MAIN
    assert resolve_model_dir("org/tiny") == snap
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))  # wins over HF_HOME
    with pytest.raises(ModelNotFoundError, match=r"\$HF_HUB_CACHE"):
        resolve_model_dir("org/tiny")


def test_missing_name_lists_where_it_looked(cache, tmp_path):
    with pytest.raises(ModelNotFoundError) as e:
        bf.from_pretrained("org/nothing")
    msg = str(e.value)
    assert str(tmp_path / "org" / "nothing") in msg  # the local directory it looked for
    assert str(cache) in msg and "$HF_HUB_CACHE" in msg
    assert str(cache / "models--org--nothing" / "refs" / "main") in msg
    with pytest.raises(ModelNotFoundError, match="no ref 'v9'"):
        resolve_model_dir("org/tiny", revision="v9")
    with pytest.raises(ModelNotFoundError, match=f"commit {SHA_MISSING}.*missing"):
        resolve_model_dir("org/tiny", revision=SHA_MISSING)
    (cache / "models--org--tiny" / "refs" / "bad").write_text("../../../etc")
    with pytest.raises(ModelNotFoundError, match="not a 40-hex commit"):
        resolve_model_dir("org/tiny", revision="bad")
    with pytest.raises(ValueError, match="not a branch, tag or commit"):
        resolve_model_dir("org/tiny", revision="../x")


def test_a_local_directory_wins(cache, tmp_path):
    local = tmp_path / "org" / "tiny"
    _model_files(local, seed=5)
    assert resolve_model_dir("org/tiny") == Path("org/tiny")
    ours = bf.from_pretrained("org/tiny")
    assert torch.equal(_first_weight(ours), _first_weight(bf.from_pretrained(local)))
    with pytest.raises(ModelNotFoundError, match="is a local directory"):
        resolve_model_dir("org/tiny", revision="v2")


def test_paths_are_not_names(cache, tmp_path):
    assert not is_repo_id("/abs/path") and not is_repo_id("a/b/c") and not is_repo_id("a--b")
    assert is_repo_id("org/tiny") and is_repo_id("bert-base-uncased")
    assert resolve_model_dir(tmp_path / "none" / "here") == tmp_path / "none" / "here"
    with pytest.raises(ModelDirectoryError, match="is not a directory"):
        bf.from_pretrained(tmp_path / "none" / "here")


def test_cli_model_name(cache):
    runner = CliRunner()
    result = runner.invoke(app, ["embed", "a w3", "b", "--model", "org/tiny", "--format", "jsonl"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [len(r["embedding"]) for r in rows] == [32, 32]
    result = runner.invoke(app, ["embed", "a", "--model", "org/nothing"])
    assert result.exit_code == 2
    assert "models--org--nothing" in result.output and "all-MiniLM-L6-v2" in result.output


def test_every_model_option_of_the_cli_reads_the_cache(cache, tmp_path):
    """`resources.resolve.resolve_model` (behind --model, --teacher, --init-from and export's
    MODEL) finds a cached model id; `export org/tiny` writes a graph of the cached model."""
    from bertfamily.resources.resolve import resolve_model

    assert resolve_model("org/tiny") == resolve_model_dir("org/tiny")
    with pytest.raises(ModelNotFoundError, match="neither an existing directory"):
        resolve_model(tmp_path / "missing", must_exist=True)
    out = tmp_path / "tiny.onnx"
    result = CliRunner().invoke(app, ["export", "org/tiny", str(out)])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 10_000
