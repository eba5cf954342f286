"""Ray Data bulk embedding (#33 item 2) on a local Ray instance started here (2 CPUs, no
dashboard, loopback): `embed_dataset` / `embed --engine ray` equal the single-process
`SentenceEmbedder.encode` row for row by id, and an actor that dies mid-run is restarted by Ray
with every id written exactly once. Skipped when Ray is not installed (the `ray` extra)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from helpers import save_tiny

ray = pytest.importorskip("ray", reason='Ray Data is optional: pip install "bertfamily[ray]"')
pytest.importorskip("ray.data", reason='Ray Data is optional: pip install "bertfamily[ray]"')
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from bertfamily.integrations.ray import EmbedBatch, embed_dataset  # noqa: E402

TESTS = Path(__file__).resolve().parent
WORDS = ["cats", "dogs", "rivers", "trains", "music", "coffee", "tea", "snow", "maps"]


def texts_of(n: int) -> list[str]:
    return [f"row {i} on {WORDS[i % 9]} {WORDS[(i // 9) % 9]}" + " x" * (i % 6) for i in range(n)]


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray instance with 2 CPUs; its workers import this module and the package (the
    test's CrashOnce class travels by reference)."""
    path = os.pathsep.join(
        [str(TESTS.parent / "src"), str(TESTS), os.environ.get("PYTHONPATH", "")]
    )
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = path
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
        runtime_env={"env_vars": {"PYTHONPATH": path, "OMP_NUM_THREADS": "1"}},
    )
    yield ray
    ray.shutdown()
    if old is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = old


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
    id 777, once per marker file."""

    def __call__(self, batch):
        marker = Path(os.environ["BERTFAMILY_TEST_CRASH_MARKER"])
        if 777 in batch.column("id").to_pylist() and not marker.exists():
            marker.write_text(str(os.getpid()))
            os._exit(1)
        return super().__call__(batch)


@pytest.mark.slow
def test_ray_data_equals_single_process_by_id_on_20000_rows(local_ray, tiny, tmp_path, cli):
    from bertfamily.pipelines.embed import SentenceEmbedder

    n = 20_000
    texts = texts_of(n)
    texts[5] = "   "  # blank: never embedded, its id absent
    rng = np.random.default_rng(0)
    ids = [f"doc-{k}" for k in rng.permutation(n)]
    d = tmp_path / "in"
    d.mkdir()
    for part in range(4):  # four input files, as a cluster's table would be
        sl = slice(part * n // 4, (part + 1) * n // 4)
        pq.write_table(pa.table({"id": ids[sl], "text": texts[sl]}), d / f"part-{part}.parquet")
    out = tmp_path / "out"
    r = cli(
        "embed",
        "--engine",
        "ray",
        "--input",
        d,
        "--output",
        out,
        "--model",
        tiny,
        "--concurrency",
        2,
        "--actor-cpus",
        0.5,
    )  # 2 CPUs: leave one for reads/writes
    assert r.exit_code == 0, r.output
    got_ids, got = shards(out)
    assert len(got_ids) == len(set(got_ids)) == n - 1
    want_ids = [i for i, t in zip(ids, texts) if t.strip()]
    want = SentenceEmbedder(tiny).encode([t for t in texts if t.strip()])
    order = {i: k for k, i in enumerate(got_ids)}
    got = got[[order[i] for i in want_ids]]
    assert sorted(got_ids) == sorted(want_ids)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    # the shards are an index as they are
    idx = tmp_path / "idx"
    assert cli("index", "build", "--embeddings", out, "--output", idx).exit_code == 0
    from bertfamily.pipelines.index import VectorIndex

    assert sorted(VectorIndex.load(idx).ids) == sorted(want_ids)


@pytest.mark.slow
def test_a_failed_actor_is_retried_without_duplicate_or_missing_ids(
    local_ray, tiny, tmp_path, monkeypatch
):
    from bertfamily.pipelines.embed import SentenceEmbedder

    n = 1500
    texts = texts_of(n)
    pq.write_table(pa.table({"id": list(range(n)), "text": texts}), tmp_path / "in.parquet")
    marker = tmp_path / "crashed"
    result = embed_dataset(
        str(tmp_path / "in.parquet"),
        str(tmp_path / "out"),
        model=str(tiny),
        concurrency=2,
        num_cpus=0.5,
        rows_per_call=100,
        batch_class=CrashOnce,
        blocks=6,
        runtime_env={"env_vars": {"BERTFAMILY_TEST_CRASH_MARKER": str(marker)}},
    )
    assert marker.exists(), "the actor never crashed: the test tested nothing"
    got_ids, got = shards(tmp_path / "out")
    assert result["rows"] == n and sorted(got_ids) == list(range(n))  # no duplicate, none missing
    want = SentenceEmbedder(tiny).encode(texts)
    np.testing.assert_allclose(got[np.argsort(got_ids)], want, rtol=0, atol=1e-6)


def test_embed_batch_formats_agree_and_drop_blank_rows(tiny):
    import pandas as pd

    step = EmbedBatch(str(tiny), with_text=True)
    texts = ["alpha", "", "gamma delta"]
    table = step(pa.table({"id": [1, 2, 3], "text": texts}))
    frame = step(pd.DataFrame({"id": [1, 2, 3], "text": texts}))
    numpy = step({"id": np.array([1, 2, 3]), "text": np.array(texts, dtype=object)})
    assert table.column("id").to_pylist() == frame["id"].tolist() == list(numpy["id"]) == [1, 3]
    assert table.column("text").to_pylist() == ["alpha", "gamma delta"]
    vec = np.stack(table.column("vector").to_pylist())
    np.testing.assert_array_equal(vec, np.stack(frame["vector"]))
    np.testing.assert_array_equal(vec, numpy["vector"])
    np.testing.assert_allclose(vec, step.embedder.encode(["alpha", "gamma delta"]), atol=1e-6)
