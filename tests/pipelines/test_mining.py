"""Hard-negative mining through the vector index equals exact (numpy) search and
sentence-transformers' ``mine_hard_negatives`` (n-tuple, top; with its FAISS search and
without) on a fixed small input with a tiny random model: no filters, a rank range, margins,
score bounds, an anchor with two positives; a built index (`bertfamily index build`) gives the
same rows as the in-memory one; `bertfamily mine-negatives --index`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertfamily.errors import InputError
from bertfamily.pipelines.embedding.embed import SentenceEmbedder
from bertfamily.pipelines.retrieval.mining import MiningOptions, mine_hard_negatives
from helpers import make_tiny

pytest.importorskip("faiss")
st = pytest.importorskip("sentence_transformers")
datasets = pytest.importorskip("datasets")

WORDS = "the cat sat on a mat dog ran far away red blue car fast slow big small tree".split()


def _texts(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 8)))) for _ in range(n)]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    model_dir = make_tiny(tmp_path_factory.mktemp("mine") / "tiny", seed=3)
    anchors, positives = _texts(9, 1), _texts(10, 2)
    rows = [(a, p) for a, p in zip(anchors, positives)]
    rows.insert(3, (anchors[2], positives[9]))  # an anchor with two positives (adjacent rows)
    corpus = _texts(30, 4)
    return model_dir, rows, corpus, st.SentenceTransformer(str(model_dir), device="cpu")


OPTIONS = {
    "top": MiningOptions(num_negatives=3, range_max=10),
    "range": MiningOptions(num_negatives=2, range_min=2, range_max=9),
    "margins": MiningOptions(
        num_negatives=2, range_max=12, absolute_margin=0.002, relative_margin=0.001
    ),  # fmt: skip
    "scores": MiningOptions(num_negatives=2, range_max=20, max_score=0.975, min_score=0.95),
}


def theirs(model, rows, corpus, o: MiningOptions, use_faiss: bool) -> list[tuple]:
    from sentence_transformers.util import mine_hard_negatives as st_mine

    data = datasets.Dataset.from_dict({"anchor": [a for a, _ in rows],
                                       "positive": [p for _, p in rows]})  # fmt: skip
    out = st_mine(
        data, model, corpus=list(corpus),
        range_min=o.range_min, range_max=o.range_max, max_score=o.max_score,
        min_score=o.min_score, absolute_margin=o.absolute_margin,
        relative_margin=o.relative_margin, num_negatives=o.num_negatives,
        output_format="n-tuple", use_faiss=use_faiss, verbose=False,
    )  # fmt: skip
    return [tuple(r.values()) for r in out]


@pytest.mark.parametrize("case", sorted(OPTIONS))
def test_index_equals_exact_search_and_sentence_transformers(setup, case):
    model_dir, rows, corpus, model = setup
    emb = SentenceEmbedder(model_dir, dtype="fp32")
    o = OPTIONS[case]
    got, counts = mine_hard_negatives(emb.encode, rows, corpus, o, search="index")
    exact, _ = mine_hard_negatives(emb.encode, rows, corpus, o, search="numpy")
    assert got == exact
    assert 0 < counts["rows_out"] and all(len(r) == 2 + o.num_negatives for r in got)
    for use_faiss in (False, True):
        assert got == theirs(model, rows, corpus, o, use_faiss), (case, use_faiss)
    if case in ("margins", "scores"):  # the filters removed candidates: without, rows differ
        plain = MiningOptions(num_negatives=2, range_max=o.range_max)
        assert mine_hard_negatives(emb.encode, rows, corpus, plain)[0] != got


def test_a_built_index_gives_the_same_rows(setup, tmp_path, cli):
    from bertfamily.pipelines.retrieval.dense import VectorIndex

    model_dir, rows, corpus, _ = setup
    emb = SentenceEmbedder(model_dir, dtype="fp32")
    texts = list(dict.fromkeys([*corpus, *(p for _, p in rows)]))
    built = VectorIndex.build(emb, texts)
    built.save(tmp_path / "idx")
    o = OPTIONS["top"]
    want, _ = mine_hard_negatives(emb.encode, rows, corpus, o)
    loaded = VectorIndex.load(tmp_path / "idx")
    assert mine_hard_negatives(emb.encode, rows, options=o, index=loaded)[0] == want
    with pytest.raises(InputError, match="corpus"):
        mine_hard_negatives(emb.encode, rows, corpus, o, index=loaded)

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"anchor": a, "positive": p}) + "\n" for a, p in rows))
    out = tmp_path / "mined.csv"
    res = cli("mine-negatives", "-i", pairs, "-o", out, "--model", model_dir, "--index",
              tmp_path / "idx", "--num-negatives", "3", "--range-max", "10")  # fmt: skip
    assert res.exit_code == 0, res.output
    import csv

    with open(out, newline="") as f:
        written = [tuple(r) for r in csv.reader(f)][1:]
    assert written == want
    other = make_tiny(tmp_path / "other", seed=9)
    res = cli("mine-negatives", "-i", pairs, "-o", out, "--model", other, "--index",
              tmp_path / "idx")  # fmt: skip
    assert res.exit_code != 0 and "built with model" in res.output


def test_option_errors():
    with pytest.raises(InputError, match="cannot mine 5"):
        MiningOptions(num_negatives=5, range_min=8, range_max=10)
    with pytest.raises(InputError, match="search"):
        mine_hard_negatives(lambda t: np.ones((len(t), 2)), [("a", "b")], search="brute")
