"""Bulk embedding (`embed --input FILE --output DIR`, `pipelines.bulk`) on a tiny random model:
the shards equal `SentenceEmbedder.encode` of all lines, a run SIGKILLed in the middle of a shard
write and restarted ends identical to an uninterrupted run, two processes (RANK / WORLD_SIZE as
torchrun sets them) equal one, and a restart with another model, input or shard size is
refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bertfamily as bf
from bertfamily.pipelines.embedding.bulk import BulkEmbedError, embed_file, load_shards
from helpers import save_tiny

pytestmark = pytest.mark.usefixtures("one_thread")  # bitwise comparisons across processes

ROOT = Path(__file__).resolve().parents[2]
WORDS = ["cats", "dogs", "rivers", "trains", "music", "coffee", "a much longer line of words"]
# 33 lines, one empty (its row is the embedding of ""), lengths varied so batches pad
LINES = [f"line {i} is about {WORDS[i % 7]}" + " again" * (i % 5) for i in range(33)]
LINES[10] = ""
SHARD = 7  # 5 shards: 7, 7, 7, 7, 5 lines


@pytest.fixture(scope="module")
def models(minilm_dir, tmp_path_factory):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    base = tmp_path_factory.mktemp("bulk-models")
    a, b = save_tiny(base / "a", minilm_dir, 0), save_tiny(base / "b", minilm_dir, 1)
    return a, b, SentenceEmbedder(a), SentenceEmbedder(b)


@pytest.fixture
def corpus(tmp_path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


def env_one_thread(**extra) -> dict:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "OMP_NUM_THREADS": "1",
        **extra,
    }


def test_shards_equal_encode_of_all_lines(cli, models, corpus, tmp_path):
    a, _, emb_a, _ = models
    out = tmp_path / "vectors"
    result = cli("embed", "--input", corpus, "--output", out, "--shard-size", SHARD, "--model", a)
    assert result.exit_code == 0, result.output
    assert "33 lines in 5 shards: complete" in result.output
    got = load_shards(out)
    want = emb_a.encode(LINES)
    assert got.shape == (33, 32) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=1e-6)
    np.testing.assert_allclose(got[10], emb_a.encode([""])[0], atol=1e-6)
    manifest = json.loads((out / "manifest.json").read_text())
    assert [(s["file"], s["start"], s["stop"]) for s in manifest["shards"]] == [
        (f"shard-0000{i}.npy", 7 * i, min(7 * i + 7, 33)) for i in range(5)
    ]
    assert manifest["input"]["lines"] == 33 and manifest["model"]["dimension"] == 32
    assert manifest["model"]["digest"] == bf.files.directory_digest(a)
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json"] + [
        f"shard-0000{i}.npy" for i in range(5)
    ]
    # running it again does nothing and changes nothing
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    again = cli("embed", "--input", corpus, "--output", out, "--shard-size", SHARD, "--model", a)
    assert again.exit_code == 0 and "wrote 0 shards" in again.output
    assert "(5 already finished)" in again.output
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


KILLED = """
import os, signal, sys
import numpy as np, torch
torch.set_num_threads(1)
from bertfamily.pipelines import bulk
from bertfamily.pipelines.embedding.embed import SentenceEmbedder

calls = []
real_save = np.save

def save(fh, arr):
    calls.append(1)
    if len(calls) == 2:  # the second shard: half its bytes on disk, then killed
        fh.write(b"\\x93NUMPY partial")
        fh.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    real_save(fh, arr)

bulk.np.save = save
model, corpus, out, shard = sys.argv[1:]
bulk.embed_file(SentenceEmbedder(model), corpus, out, shard_size=int(shard))
"""


@pytest.mark.slow
def test_killed_run_resumes_to_the_uninterrupted_result(models, corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the threads of the child processes: same bits
    a, _, emb_a, _ = models
    out = tmp_path / "killed"
    proc = subprocess.run(
        [sys.executable, "-c", KILLED, str(a), str(corpus), str(out), str(SHARD)],
        env=env_one_thread(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names[0].startswith(".shard-00001.npy.tmp-")  # the half-written temporary
    assert names[1:] == ["manifest.json", "shard-00000.npy"]
    first = (out / "shard-00000.npy").stat().st_mtime_ns

    result = embed_file(emb_a, corpus, out, shard_size=SHARD)
    assert result.skipped == [0] and result.written == [1, 2, 3, 4] and result.complete
    assert result.lines == 26
    assert (out / "shard-00000.npy").stat().st_mtime_ns == first  # not embedded again
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # temporary removed
    embed_file(emb_a, corpus, tmp_path / "whole", shard_size=SHARD)
    np.testing.assert_array_equal(load_shards(out), load_shards(tmp_path / "whole"))


@pytest.mark.slow
def test_two_processes_equal_one(models, corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the threads of the child processes: same bits
    a, _, emb_a, _ = models
    out = tmp_path / "two"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "bertfamily", "embed", "--input", str(corpus), "--output",
             str(out), "--shard-size", str(SHARD), "--model", str(a)],
            env=env_one_thread(RANK=str(r), WORLD_SIZE="2"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]  # fmt: skip
    logs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs
    assert "rank 0/2: wrote 3 shards, 19 lines" in logs[0]  # shards 0, 2, 4
    assert "rank 1/2: wrote 2 shards, 14 lines" in logs[1]  # shards 1, 3
    embed_file(emb_a, corpus, tmp_path / "one", shard_size=SHARD)
    np.testing.assert_array_equal(load_shards(out), load_shards(tmp_path / "one"))
    assert (out / "manifest.json").read_bytes() == (tmp_path / "one/manifest.json").read_bytes()


def test_a_restart_with_another_model_input_or_shard_size_is_refused(models, corpus, tmp_path):
    _, _, emb_a, emb_b = models
    out = tmp_path / "run"
    embed_file(emb_a, corpus, out, shard_size=SHARD)
    with pytest.raises(BulkEmbedError, match=r"of model 'a' .*this run's model is 'b'"):
        embed_file(emb_b, corpus, out, shard_size=SHARD)
    other = tmp_path / "other.txt"
    other.write_text("\n".join(LINES[:-1]) + "\nchanged\n", encoding="utf-8")
    with pytest.raises(BulkEmbedError, match=r"input 'corpus.txt' \(33 lines.*'other.txt'"):
        embed_file(emb_a, other, out, shard_size=SHARD)
    with pytest.raises(BulkEmbedError, match="resume with --shard-size 7"):
        embed_file(emb_a, corpus, out, shard_size=8)
    with pytest.raises(BulkEmbedError, match="0 <= rank < world_size"):
        embed_file(emb_a, corpus, out, shard_size=SHARD, rank=2, world_size=2)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(BulkEmbedError, match="other files \\(notes.txt\\) and no manifest"):
        embed_file(emb_a, corpus, tmp_path / "busy")
    (tmp_path / "blank.txt").write_text("\n  \n")
    with pytest.raises(BulkEmbedError, match="is empty"):
        embed_file(emb_a, tmp_path / "blank.txt", tmp_path / "x")
    # a wrong or half-written shard is named, never silently reused or mixed in
    np.save(out / "shard-00002.npy", np.zeros((3, 32), np.float32))
    with pytest.raises(BulkEmbedError, match=r"shard-00002.npy is float32\(3, 32\).*\(7, 32\)"):
        load_shards(out)


def test_cli_bulk_mode_errors(cli, models, corpus, tmp_path):
    a = models[0]
    result = cli("embed", "hello", "--input", corpus, "--output", tmp_path / "d", "--model", a)
    assert result.exit_code != 0 and "not SENTENCE arguments" in result.output
    result = cli("embed", "--input", corpus, "--output", tmp_path / "x.npy", "--shard-size", 5)
    assert result.exit_code != 0 and "--shard-size is for bulk mode" in result.output
    result = cli("embed", "--input", corpus, "--output", tmp_path / "x.txt", "--model", a)
    assert result.exit_code != 0 and "or be a directory" in result.output
    result = cli("embed", "--input", corpus, "--output", tmp_path / "d", "--model", models[1])
    assert result.exit_code == 0
    result = cli("embed", "--input", corpus, "--output", tmp_path / "d", "--model", a)
    assert result.exit_code != 0 and "this run's model is 'a'" in result.output


def test_bulk_and_in_memory_modes_number_lines_alike(models, tmp_path, cli):
    """Line i is row i in both modes, whatever characters a line holds: only \\n and \\r\\n
    end a line, as wc -l and sed count them (a lone \\r, \\u2028 or form feed does not)."""
    path = tmp_path / "odd.txt"
    path.write_bytes("one\u2028still one\r\ntwo\x0cstill two\rthree\n\nfive".encode())
    out_dir, out_npy = tmp_path / "bulk", tmp_path / "rows.npy"
    a = str(models[0])
    assert cli("embed", "--input", path, "--output", out_dir, "--model", a).exit_code == 0
    assert cli("embed", "--input", path, "--output", out_npy, "--model", a).exit_code == 0
    bulk, in_memory = load_shards(out_dir), np.load(out_npy)
    assert bulk.shape == in_memory.shape == (4, 32)
    np.testing.assert_allclose(bulk, in_memory, atol=1e-6)
