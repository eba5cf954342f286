"""Ray Data bulk embedding (#33 item 2) on one local Ray instance started here for the whole
module (2 CPUs, no dashboard, loopback, no usage reporting): `embed_dataset` equals the
single-process `SentenceEmbedder.encode` row for row by id on 20,000 rows; an actor that dies
mid-run (reading JSONL) is restarted by Ray with every id written exactly once; bad rows refuse
the input with the message of a local read (`EmbedBatch` on each Ray batch format, which
needs no Ray, is tested in test_table_io.py).

Skipped, with the reason, when Ray Data is not installed (the `ray` extra) or when a local Ray
instance cannot start on this machine (under CI=true that is a failure instead)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from helpers import save_tiny

ray = pytest.importorskip(
    "ray", minversion="2.10", reason='Ray Data is optional: pip install "bertfamily[ray]"'
)
pytest.importorskip("ray.data", reason='Ray Data is optional: pip install "bertfamily[ray]"')
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from bertfamily.integrations.ray import EmbedBatch, embed_dataset  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # a tiny model: 1 thread is fastest here

TESTS = Path(__file__).resolve().parent
WORDS = ["cats", "dogs", "rivers", "trains", "music", "coffee", "tea", "snow", "maps"]
BATCH = 128  # texts per forward pass, the same in both engines
CRASH_MARKER = "BERTFAMILY_TEST_CRASH_MARKER"


def texts_of(n: int) -> list[str]:
    return [f"row {i} on {WORDS[i % 9]} {WORDS[(i // 9) % 9]}" + " x" * (i % 6) for i in range(n)]


@pytest.fixture(scope="module")
def crash_marker(tmp_path_factory) -> Path:
    """The file CrashOnce writes when it kills its actor (in the job's environment, so that no
    test needs a runtime environment of its own: Ray starts new workers for each)."""
    return tmp_path_factory.mktemp("ray-crash") / "crashed"


@pytest.fixture(scope="module")
def local_ray(crash_marker):
    """One local Ray instance for every test of the module (starting one costs seconds); its
    workers import this module and the package (the test's CrashOnce class travels by
    reference)."""
    path = os.pathsep.join(
        [str(TESTS.parent / "src"), str(TESTS), os.environ.get("PYTHONPATH", "")]
    )
    env = {"PYTHONPATH": path, "OMP_NUM_THREADS": "1", CRASH_MARKER: str(crash_marker)}
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "RAY_ADDRESS", "RAY_USAGE_STATS_ENABLED")}
    os.environ["PYTHONPATH"] = path
    os.environ.pop("RAY_ADDRESS", None)  # never join a cluster this machine happens to run
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # no network
    if ray.is_initialized():
        ray.shutdown()
    try:
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            _node_ip_address="127.0.0.1",
            object_store_memory=256 * 2**20,
            runtime_env={"env_vars": env},
            # keep idle workers for the next Ray Data run (default: killed after 1 s, and each
            # new one imports Ray again: seconds of CPU apiece on a small machine)
            _system_config={"idle_worker_killing_time_threshold_ms": 600_000},
        )
    except Exception as e:  # noqa: BLE001 (any failure to start is reported as the reason)
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        if os.environ.get("CI"):
            raise
        pytest.skip(f"a local Ray instance does not start here: {type(e).__name__}: {e}")
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()
    for k, v in saved.items():
        os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


@pytest.fixture(scope="module")
def tiny(minilm_dir, tmp_path_factory):
    """A tiny random BERT (H=32, L=2) with MiniLM's tokenizer."""
    return save_tiny(tmp_path_factory.mktemp("ray-model") / "tiny", minilm_dir)


def shards(directory: Path) -> tuple[list, np.ndarray]:
    from bertfamily.data.table_io import iter_embedding_table

    ids, vectors = [], []
    for i, v, _ in iter_embedding_table(directory):
        ids.extend(i)
        vectors.append(v)
    return ids, np.concatenate(vectors)


class CrashOnce(EmbedBatch):
    """An EmbedBatch whose process dies (no exception: os._exit) on the first batch holding
    id 377, once per marker file."""

    def __call__(self, batch):
        marker = Path(os.environ[CRASH_MARKER])
        if 377 in batch.column("id").to_pylist() and not marker.exists():
            marker.write_text(str(os.getpid()))
            os._exit(1)
        return super().__call__(batch)


@pytest.mark.slow
def test_ray_data_equals_single_process_by_id_on_20000_rows(local_ray, tiny, tmp_path, cli):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from bertfamily.pipelines.retrieval.dense import VectorIndex

    n = 20_000
    texts = texts_of(n)
    ids = [f"doc-{k}" for k in np.random.default_rng(0).permutation(n)]
    d = tmp_path / "in"
    d.mkdir()
    for part in range(4):  # four input files, as a cluster's table would be
        sl = slice(part * n // 4, (part + 1) * n // 4)
        pq.write_table(pa.table({"id": ids[sl], "text": texts[sl]}), d / f"part-{part}.parquet")
    out = tmp_path / "out"
    r = cli("embed", "--engine", "ray", "--input", d, "--output", out, "--model", tiny,
            "--concurrency", 2, "--actor-cpus", 0.5,  # 2 CPUs: leave one for reads and writes
            "--batch-size", BATCH, "--dtype", "fp32")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert f"wrote {n:,} (id, vector) rows" in r.output
    got_ids, got = shards(out)
    assert len(got_ids) == len(set(got_ids)) == n
    assert sorted(got_ids) == sorted(ids)
    want = SentenceEmbedder(tiny, dtype="fp32").encode(texts, batch_size=BATCH)
    order = {i: k for k, i in enumerate(got_ids)}
    np.testing.assert_allclose(got[[order[i] for i in ids]], want, rtol=0, atol=1e-6)
    # the shards are an index as they are
    idx = tmp_path / "idx"
    assert cli("index", "build", "--embeddings", out, "--output", idx).exit_code == 0
    assert sorted(VectorIndex.load(idx).ids) == sorted(ids)


@pytest.mark.slow
def test_a_failed_actor_is_retried_without_duplicate_or_missing_ids(
    local_ray, crash_marker, tiny, tmp_path
):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    n = 600
    texts = texts_of(n)
    source = tmp_path / "in.jsonl"  # JSONL: Ray's read_json path (the other test reads Parquet)
    rows = (json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts))
    source.write_text("".join(rows), encoding="utf-8")
    marker = crash_marker
    result = embed_dataset(
        str(source),
        str(tmp_path / "out"),
        model=str(tiny),
        concurrency=2,
        num_cpus=0.5,
        batch_size=BATCH,
        rows_per_call=50,
        dtype="fp32",
        batch_class=CrashOnce,
        blocks=4,
    )
    assert marker.exists(), "the actor never crashed: the test tested nothing"
    got_ids, got = shards(tmp_path / "out")
    assert result["rows"] == n and sorted(got_ids) == list(range(n))  # no duplicate, none missing
    want = SentenceEmbedder(tiny, dtype="fp32").encode(texts, batch_size=BATCH)
    np.testing.assert_allclose(got[np.argsort(got_ids)], want, rtol=0, atol=1e-6)


def test_bad_rows_refuse_the_input_as_a_local_read_does(local_ray, tiny, tmp_path, cli):
    """`embed --engine ray` and `embed --output x.parquet` (local) refuse the same table with
    the same message: every bad row counted, the first three named in input order (across
    two files); Ray writes nothing."""
    from test_table_io import BAD_MESSAGE, BAD_ROWS

    d = tmp_path / "rows"
    d.mkdir()
    ids, texts = zip(*BAD_ROWS)
    pq.write_table(pa.table({"id": list(ids[:3]), "text": list(texts[:3])}), d / "part-0.parquet")
    pq.write_table(pa.table({"id": list(ids[3:]), "text": list(texts[3:])}), d / "part-1.parquet")
    out = tmp_path / "out"
    ray_run = cli("embed", "--engine", "ray", "-i", d, "-o", out, "--model", tiny)
    local = cli("embed", "-i", d, "-o", tmp_path / "local.parquet", "--model", tiny)
    assert ray_run.exit_code == local.exit_code == 2, ray_run.output
    message = f"error: {d}: {BAD_MESSAGE}"
    lines = [" ".join(r.output.split()) for r in (ray_run, local)]
    assert lines[0].endswith(message) and lines[1].endswith(message), lines
    assert not out.exists() or not any(out.iterdir())
