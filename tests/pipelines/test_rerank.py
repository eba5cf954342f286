"""`Reranker` against sentence-transformers 6's `CrossEncoder` (1e-5, fp32) on tiny random
cross-encoders in both layouts (a plain Hugging Face directory and one saved by CrossEncoder
itself), its activations (default Sigmoid, a named one, Identity for several labels, raw
scores), `rank` order and top_k, left truncation, `bertfamily rerank`, and the errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertfamily.errors import InputError
from bertfamily.pipelines.embedding.sentence_modules import SentenceModulesError, directory_kind
from bertfamily.pipelines.reranking.rerank import Reranker
from retrieval_dirs import classic_cross_encoder, st6_cross_encoder

st = pytest.importorskip("sentence_transformers")

QUERY = "who wrote the novel about the whale"
DOCS = [
    "Moby-Dick was written by Herman Melville.",
    "The cat sat on the mat.",
    "a",
    "Whales are large marine mammals; the novel " + "is long " * 200,
    "Herman Melville, American novelist.",
]
PAIRS = [(QUERY, d) for d in DOCS] + [("x", "y"), ("long " * 100, "short")]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory, minilm_dir):
    root = tmp_path_factory.mktemp("ce")
    classic = classic_cross_encoder(root / "classic", minilm_dir)
    return {
        "classic": classic,
        "st6": st6_cross_encoder(root / "st6", classic),
        "identity": classic_cross_encoder(
            root / "identity",
            minilm_dir,
            sbert_ce_default_activation_function="torch.nn.modules.linear.Identity",
        ),
        "three": classic_cross_encoder(root / "three", minilm_dir, num_labels=3),
        "st6-tanh": st6_cross_encoder(root / "st6-tanh", classic, activation_fn=torch.nn.Tanh()),
    }


@pytest.mark.parametrize("name", ["classic", "st6", "identity", "three", "st6-tanh"])
def test_predict_equals_cross_encoder(dirs, name):
    ours = Reranker(dirs[name])
    theirs = st.CrossEncoder(str(dirs[name]))
    np.testing.assert_allclose(ours.predict(PAIRS), theirs.predict(PAIRS), atol=1e-5, rtol=0)
    raw = theirs.predict(PAIRS, activation_fn=torch.nn.Identity())
    np.testing.assert_allclose(ours.predict(PAIRS, raw_scores=True), raw, atol=1e-5, rtol=0)
    # a plain classifier with several labels and no mark is served as a classifier (labels)
    assert directory_kind(dirs[name]) == ("embedding" if name == "three" else "cross-encoder")


@pytest.mark.parametrize("name", ["classic", "st6"])
def test_rank_equals_cross_encoder(dirs, name):
    ours = Reranker(dirs[name]).rank(QUERY, DOCS, top_k=3, return_documents=True)
    theirs = st.CrossEncoder(str(dirs[name])).rank(QUERY, DOCS, top_k=3, return_documents=True)
    assert [d.corpus_id for d in ours] == [d["corpus_id"] for d in theirs]
    assert [d.text for d in ours] == [d["text"] for d in theirs]
    np.testing.assert_allclose([d.score for d in ours], [d["score"] for d in theirs], atol=1e-5)
    scores = [d.score for d in ours]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == 3
    everything = Reranker(dirs[name]).rank(QUERY, DOCS)
    assert sorted(d.corpus_id for d in everything) == list(range(len(DOCS)))
    # sentence-transformers' dicts: the same keys (no "text" unless asked), indexable
    bare = st.CrossEncoder(str(dirs[name])).rank(QUERY, DOCS)
    assert (
        [set(d) for d in everything]
        == [set(d) for d in bare]
        == [{"corpus_id", "score"}] * len(DOCS)
    )
    assert [d["corpus_id"] for d in everything] == [d["corpus_id"] for d in bare]
    assert ours[0] == {"corpus_id": ours[0].corpus_id, "score": ours[0].score, "text": ours[0].text}
    assert everything[0].text is None and isinstance(ours[0], dict)


def test_left_truncation_equals_transformers(dirs):
    import transformers

    r = Reranker(dirs["classic"], max_length=16)
    pairs = [("one two three", "four five six seven eight nine ten " * 5)]
    tok = transformers.AutoTokenizer.from_pretrained(dirs["classic"])
    tok.truncation_side = "left"
    enc = tok([pairs[0][0]], [pairs[0][1]], max_length=16, truncation=True, return_tensors="pt")
    hf = transformers.BertForSequenceClassification.from_pretrained(dirs["classic"]).eval()
    with torch.no_grad():
        want = hf(**enc).logits[:, 0].numpy()
    got = r.predict(pairs, raw_scores=True, truncation_side="left")
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    assert not np.allclose(got, r.predict(pairs, raw_scores=True))


def test_errors(dirs, minilm_dir):
    with pytest.raises(InputError, match="one-label"):
        Reranker(dirs["three"]).rank("q", ["d"])
    with pytest.raises(InputError, match="two strings"):
        Reranker(dirs["classic"]).predict([("only one",)])
    with pytest.raises(SentenceModulesError, match="one Transformer module"):
        Reranker(minilm_dir)
    assert directory_kind(minilm_dir) == "embedding"
    from bertfamily.pipelines.embedding.sentence_modules import read_sentence_modules

    with pytest.raises(SentenceModulesError, match="Reranker"):
        read_sentence_modules(dirs["st6"])


def test_cli_rerank(cli, dirs, tmp_path):
    docs = tmp_path / "docs.txt"
    # a blank line counts (line numbers as an editor shows them) and is never ranked
    docs.write_text(DOCS[0] + "\n\n" + "\n".join(DOCS[1:3]) + "\n")
    result = cli("rerank", QUERY, "--input", docs, "--model", dirs["st6"], "--format", "jsonl")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    want = Reranker(dirs["st6"]).rank(QUERY, DOCS[:3], return_documents=True)
    assert [r["line"] for r in rows] == [[1, 3, 4][d.corpus_id] for d in want]
    assert {r["line"] for r in rows} == {1, 3, 4} and "index" not in rows[0]
    assert [r["rank"] for r in rows] == [1, 2, 3]
    # nothing requested: the default says so (issue 46: it said "fp32 (requested)")
    assert "dtype: fp32 (auto" in result.stderr and "requested" not in result.stderr
    # DOCUMENT arguments come first, numbered from 1; the file's lines follow them
    both = cli("rerank", QUERY, DOCS[3], "--input", docs, "--model", dirs["st6"], "--format",
               "jsonl")  # fmt: skip
    lines = {json.loads(x)["text"]: json.loads(x)["line"] for x in both.stdout.splitlines()}
    assert lines == {DOCS[3]: 1, DOCS[0]: 2, DOCS[1]: 4, DOCS[2]: 5}
    np.testing.assert_allclose([r["score"] for r in rows], [d.score for d in want], atol=1e-6)
    table = cli("rerank", QUERY, *DOCS[:2], "--model", dirs["classic"], "-k", "1")
    assert table.exit_code == 0 and "rank" in table.stdout
    assert cli("rerank", QUERY, "--model", dirs["classic"]).exit_code != 0
