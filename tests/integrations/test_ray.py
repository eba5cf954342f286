"""Ray Data bulk embedding (#33 item 2, #50) on one local Ray instance started here for the
whole module (2 CPUs, no dashboard, loopback, no usage reporting): `embed --engine ray` with
its defaults (sized from the cluster: one actor of 1 CPU here) writes every row of a table,
equal to the local `embed` of it; an explicit setting that would starve Ray Data's read tasks
is refused before any job starts; a starved job (the refusal bypassed) stops with the stall
error within seconds and leaves nothing; `embed_dataset` equals the single-process
`SentenceEmbedder.encode` row for row by id on 20,000 rows; an actor that dies mid-run
(reading JSONL) is restarted by Ray with every id written exactly once; bad rows refuse the
input with the message of a local read (`EmbedBatch` on each Ray batch format, which needs no
Ray, is tested in test_table_io.py). Every Ray job here runs under a stall timeout and a hard
alarm, so a hang fails its test instead of the run.

Skipped, with the reason, when Ray Data is not installed (the `ray` extra) or when a local Ray
instance cannot start on this machine (under CI=true that is a failure instead)."""

from __future__ import annotations

import json
import os
import signal
import time
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

import bertfamily.integrations.ray as ray_engine  # noqa: E402
from bertfamily.errors import DataEngineError, InputError  # noqa: E402
from bertfamily.integrations.ray import EmbedBatch, embed_dataset, plan_actors  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # a tiny model: 1 thread is fastest here

TESTS = Path(__file__).resolve().parents[1]  # the shared test modules (helpers, ...)
HERE = Path(__file__).resolve().parent  # this module: Ray's workers import it
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
        [str(TESTS.parent / "src"), str(TESTS), str(HERE), os.environ.get("PYTHONPATH", "")]
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


@pytest.fixture
def hard_limit():
    """Fail a test that runs past ``seconds`` (SIGALRM in the main thread, where the driver
    waits on Ray), instead of hanging the run."""

    def arm(seconds: int) -> None:
        def expired(signum, frame):
            raise TimeoutError(f"the Ray job ran past the test's hard limit of {seconds} s")

        signal.signal(signal.SIGALRM, expired)
        signal.alarm(seconds)

    before = signal.getsignal(signal.SIGALRM)
    yield arm
    signal.alarm(0)
    signal.signal(signal.SIGALRM, before)


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


@pytest.mark.parametrize(
    ("cpus", "asked", "planned"),
    [
        (2, (None, None), (1, 1.0)),  # this machine: one actor, one CPU left to the reads
        (1, (None, None), (1, 0.5)),  # the reads ask for the other half
        (3, (None, None), (2, 1.0)),
        (16, (None, None), (15, 1.0)),
        (2, (2, None), (2, 0.5)),
        (8, (None, 2.0), (3, 2.0)),
        (2, (2, 0.5), (2, 0.5)),
    ],
)
def test_actors_are_sized_from_the_cluster(cpus, asked, planned):
    assert plan_actors(cpus, *asked) == planned


@pytest.mark.parametrize(
    ("cpus", "asked", "works"),
    [
        (2, (2, 1.0), "--concurrency 1 --actor-cpus 1"),  # the old defaults on 2 CPUs
        (3, (3, 1.0), "--concurrency 2 --actor-cpus 1"),
        (1, (1, 1.0), "--concurrency 1 --actor-cpus 0.5"),
        (2, (1, 2.0), "--concurrency 1 --actor-cpus 1"),
    ],
)
def test_a_setting_that_starves_the_reads_is_refused_with_one_that_works(cpus, asked, works):
    with pytest.raises(InputError) as e:
        plan_actors(cpus, *asked)
    message = str(e.value)
    assert "\n" not in message and f"the cluster's {cpus:g} CPUs" in message, message
    assert f"{asked[0]} Ray actors × {asked[1]:g} CPUs" in message and works in message, message
    c, n = (float(w) for w in works.split()[1::2])
    assert plan_actors(cpus, int(c), n) == (int(c), n)  # what it proposes runs


@pytest.mark.slow
def test_ray_defaults_on_two_cpus_write_every_row_equal_to_local_embed(
    local_ray, tiny, tmp_path, cli, hard_limit
):
    """The command of #50 with its defaults, on this 2-CPU instance: one actor of 1 CPU, the
    job finishes, every id once, vectors equal to `embed` in this process (fp32, ≤1e-6)."""
    n = 200
    ids = [f"doc-{k}" for k in np.random.default_rng(1).permutation(n)]
    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({"doc_id": ids, "body": texts_of(n)}), source)
    hard_limit(300)  # generous: the other xdist worker shares the 2 CPUs (a hang still fails)
    start = time.monotonic()
    out = tmp_path / "out"
    r = cli("embed", "--engine", "ray", "--input", source, "--id-column", "doc_id",
            "--text-column", "body", "--output", out, "--model", tiny,
            "--stall-timeout", 120)  # fmt: skip
    assert r.exit_code == 0, r.output
    assert f"wrote {n:,} (id, vector) rows" in r.output and "1 Ray actors × 1 CPUs" in r.output
    assert time.monotonic() - start < 240
    local = tmp_path / "local.parquet"
    args = ("--id-column", "doc_id", "--text-column", "body", "--model", tiny)
    assert cli("embed", "-i", source, "-o", local, *args).exit_code == 0
    got_ids, got = shards(out)
    assert len(got_ids) == len(set(got_ids)) == n and sorted(got_ids) == sorted(ids)
    want = pq.read_table(local)
    order = {i: k for k, i in enumerate(got_ids)}
    want_vectors = np.asarray(want.column("vector").to_pylist(), dtype=np.float32)
    rows = [order[i] for i in want.column("id").to_pylist()]
    np.testing.assert_allclose(got[rows], want_vectors, rtol=0, atol=1e-6)
    from bertfamily.data.table_io import table_identity

    assert table_identity(out)["dimension"] == 32  # in every shard's schema metadata
    assert {p.suffix for p in out.iterdir()} == {".parquet"}  # polars/duckdb read the directory
    done = pq.read_table(out / "_bertfamily.parquet")  # the last file: no rows, same schema
    assert done.num_rows == 0 and done.schema == pq.read_schema(next(out.glob("part-*")))


def test_an_explicit_starving_setting_is_refused_before_any_job(local_ray, tiny, tmp_path, cli):
    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": [1, 2], "text": ["a", "b"]}), source)
    out = tmp_path / "out"
    start = time.monotonic()
    r = cli("embed", "--engine", "ray", "-i", source, "-o", out, "--model", tiny,
            "--concurrency", 2, "--actor-cpus", 1)  # fmt: skip
    assert r.exit_code == 2, r.output
    line = " ".join(r.output.split())
    assert "2 Ray actors × 1 CPUs" in line and "the cluster's 2 CPUs" in line, line
    assert "use --concurrency 1 --actor-cpus 1" in line, line
    assert not out.exists() and time.monotonic() - start < 15
    with pytest.raises(InputError, match="leave 0 of the cluster's 2 CPUs"):
        embed_dataset(str(source), str(out), model=str(tiny), concurrency=1, num_cpus=2.0)


@pytest.mark.slow
def test_a_starved_job_stops_with_the_stall_error_and_leaves_nothing(
    local_ray, tiny, tmp_path, monkeypatch, hard_limit
):
    """The refusal bypassed: 2 actors × 1 CPU hold both CPUs, Ray Data's read tasks never
    start; the job stops after the stall timeout, naming the operator and the CPUs, and the
    CPUs come back for the next job."""
    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": list(range(50)), "text": texts_of(50)}), source)
    monkeypatch.setattr(ray_engine, "plan_actors", lambda cpus, c, n: (2, 1.0))
    hard_limit(180)
    start = time.monotonic()
    out = tmp_path / "out"
    with pytest.raises(DataEngineError) as e:
        embed_dataset(str(source), str(out), model=str(tiny), stall_timeout=5)
    assert time.monotonic() - start < 120  # the stall timeout, Ray's start-up and teardown
    message = str(e.value)
    assert "no progress for 5 s (0 rows written)" in message, message
    assert "is stalled (" in message and "0 of 2 CPUs free" in message, message
    assert "2 embedding actors × 1 CPUs" in message, message
    assert not out.exists() or list(out.iterdir()) == []
    for _ in range(40):  # the actors end with the executor: the CPUs come back
        if local_ray.available_resources().get("CPU", 0) >= 2:
            break
        time.sleep(0.25)
    assert local_ray.available_resources().get("CPU", 0) >= 2


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
    local_ray, crash_marker, tiny, tmp_path, hard_limit
):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    n = 600
    texts = texts_of(n)
    source = tmp_path / "in.jsonl"  # JSONL: Ray's read_json path (the other test reads Parquet)
    rows = (json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts))
    source.write_text("".join(rows), encoding="utf-8")
    marker = crash_marker
    hard_limit(120)
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
        stall_timeout=60,
    )
    assert marker.exists(), "the actor never crashed: the test tested nothing"
    got_ids, got = shards(tmp_path / "out")
    assert result["rows"] == n and sorted(got_ids) == list(range(n))  # no duplicate, none missing
    assert result["files"] == len(list((tmp_path / "out").glob("part-*.parquet")))
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
