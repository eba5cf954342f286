"""Training embedding models and rerankers end to end on a tiny random model: `bertfamily
finetune --task embedding` writes whole sentence-transformers directories (model/ and the best
evaluation in best/) that sentence-transformers loads with the vectors of our `SentenceEmbedder`
(1e-5); `bertfamily evaluate sts`; the STS Benchmark reader; `--task rerank` writes a directory
sentence-transformers' CrossEncoder loads with our scores."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from bertfamily.cli import app
from bertfamily.data.pairs import read_pairs, read_sts
from bertfamily.errors import DataError
from bertfamily.evaluation.metrics import evaluate_sts, similarity_metrics
from bertfamily.pipelines.embedding.bi_encoder import BiEncoder
from bertfamily.pipelines.embedding.embed import SentenceEmbedder
from bertfamily.pipelines.reranking.rerank import Reranker
from helpers import make_tiny

st = pytest.importorskip("sentence_transformers")

WORDS = "the cat sat on a mat dog ran far away red blue car fast slow big small tree".split()
TEXTS = ["the cat sat", "a dog ran far away", "red car", "", "big small tree " * 30]


def _sentence(rng: np.random.Generator) -> str:
    return " ".join(rng.choice(WORDS, size=int(rng.integers(2, 6))))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return make_tiny(tmp_path_factory.mktemp("tiny"), dropout=0.1)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(0)
    triplets = d / "triplets.csv"
    triplets.write_text(
        "anchor,positive,negative\n"
        + "".join(f"{_sentence(rng)},{_sentence(rng)},{_sentence(rng)}\n" for _ in range(24))
    )
    scored = d / "sts.jsonl"
    scored.write_text(
        "".join(
            json.dumps({"sentence1": _sentence(rng), "sentence2": _sentence(rng), "score": s})
            for s in rng.random(20).round(3)
        ).replace("}{", "}\n{")
        + "\n"
    )
    return {"triplets": triplets, "scored": scored}


def _run(args: list[str]) -> str:
    """The command's stdout (its progress lines go to stderr)."""
    res = CliRunner().invoke(app, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.stdout


def _assert_same_vectors(directory: Path) -> None:
    ours = SentenceEmbedder(directory, dtype="fp32").encode(TEXTS)
    theirs = st.SentenceTransformer(str(directory), device="cpu").encode(TEXTS)
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)


CARD_SECTIONS = [
    "## Usage",
    "## Training Details",
    "### Training Hyperparameters",
    "### Framework Versions",
    "- **Base model:** tiny",
    "- **Maximum sequence length:**",
    "| learning_rate |",
    "- torch: ",
    "- transformers: ",
    "- bertfamily: ",
]


def _assert_card_and_one_copy(directory: Path, sections: list[str]) -> None:
    """The model card has sentence-transformers' sections and no path of this machine; the
    weights are stored once (issue 44)."""
    card = (directory / "README.md").read_text()
    for section in CARD_SECTIONS + sections:
        assert section in card, (section, card)
    for root in {str(directory.parents[2]), str(Path.home()), "/tmp/", "/root/"}:
        assert root not in card, root
    weights = [p.name for p in directory.rglob("*") if p.suffix in (".pt", ".bin", ".safetensors")]
    assert weights == ["model.safetensors"], weights


def test_cli_trains_a_sentence_transformers_directory_and_keeps_the_best(tiny, files, tmp_path):
    out = tmp_path / "run"
    _run(
        [
            "finetune", "--task", "embedding", "--loss", "mnrl", "--model", str(tiny),
            "--train", str(files["triplets"]), "--eval", str(files["scored"]), "-o", str(out),
            "--max-steps", "4", "--batch-size", "8", "--eval-every", "2", "--lr", "1e-3",
            "--no-progress", "--threads", "1",
        ]
    )  # fmt: skip
    for sub in ("model", "best"):
        d = out / sub
        assert (d / "modules.json").is_file() and (d / "1_Pooling" / "config.json").is_file()
        _assert_same_vectors(d)
        assert json.loads((d / "sentence_bert_config.json").read_text())["max_seq_length"] == 32
        assert "mnrl" in (d / "README.md").read_text()
        _assert_card_and_one_copy(d, ["## Model Details", "### Full Model Architecture"])
    evals = [
        json.loads(line)
        for line in (out / "metrics.jsonl").read_text().splitlines()
        if '"eval"' in line
    ]
    assert [e["step"] for e in evals] == [2, 4]
    final = json.loads((out / "final_metrics.json").read_text())
    assert final["eval"]["spearman"] == pytest.approx(max(e["eval_spearman"] for e in evals))
    # sentence-transformers' trainer defaults: transformers' AdamW, no weight decay
    train = json.loads((out / "run.json").read_text())["config"]["train"]
    assert (train["weight_decay"], train["adam_eps"], train["warmup_ratio"]) == (0.0, 1e-8, 0.1)
    assert "spearman" in (out / "best" / "README.md").read_text()
    printed = _run(
        ["evaluate", "sts", "--model", str(out / "best"), "--data", str(files["scored"])]
    )
    assert json.loads(printed)["spearman"] == pytest.approx(final["eval"]["spearman"], abs=1e-5)


@pytest.mark.parametrize("loss", ["cosent", "simcse"])
def test_other_losses_and_matryoshka_through_the_recipe(tiny, files, tmp_path, loss):
    data = files["scored"]
    if loss == "simcse":
        data = tmp_path / "lines.txt"
        data.write_text("the cat sat\na dog ran\nred car fast\nbig tree\n")
    args = [
        "finetune", "--task", "embedding", "--loss", loss, "--model", str(tiny),
        "--train", str(data), "-o", str(tmp_path / "run"), "--max-steps", "2",
        "--batch-size", "4", "--no-progress", "--threads", "1",
    ]  # fmt: skip
    if loss == "cosent":
        args += ["--matryoshka-dims", "32,16"]
    _run(args)
    _assert_same_vectors(tmp_path / "run" / "model")


def test_dense_layers_train_save_and_load_in_sentence_transformers(tiny, tmp_path):
    model = BiEncoder.from_directory(tiny)
    model.dense.append(torch.nn.Sequential(torch.nn.Linear(32, 8), torch.nn.Tanh()))
    feats = model.tokenize(TEXTS)
    model(**feats).sum().backward()
    assert model.dense[0][0].weight.grad is not None
    d = model.save(tmp_path / "dense")
    assert SentenceEmbedder(d, dtype="fp32").dimension == 8
    _assert_same_vectors(d)
    np.testing.assert_allclose(
        model.encode(TEXTS), SentenceEmbedder(d, dtype="fp32").encode(TEXTS), atol=1e-5
    )


def test_read_sts_takes_quotes_and_extra_columns(tmp_path):
    f = tmp_path / "sts-test.csv"
    f.write_text(
        'main-captions\tMSRvid\t2012test\t0001\t5.000\tA "plane" takes off.\tA plane.\n'
        "main-news\tx\t2014\t0002\t1.5\tOne, two\tThree\tsource-a\tsource-b\n"
    )
    pairs = read_sts(f)
    assert [(p.sentence1, p.sentence2, p.score) for p in pairs] == [
        ('A "plane" takes off.', "A plane.", 5.0),
        ("One, two", "Three", 1.5),
    ]
    table = read_pairs(f, format="sts")
    assert table.columns == ("sentence1", "sentence2") and table.labels == [1.0, 0.3]
    bad = tmp_path / "bad.csv"
    bad.write_text("a\tb\tc\n")
    with pytest.raises(DataError, match="bad.csv:1"):
        read_sts(bad)
    with pytest.raises(DataError, match="splits"):
        read_pairs("stsb:validation")


def test_similarity_metrics():
    a = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    b = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    m = similarity_metrics(a, b, [3.0, 2.0, 1.0])
    assert m["spearman"] == pytest.approx(1.0) and m["pearson"] > 0.9
    assert evaluate_sts(lambda t: np.ones((len(t), 2)), ["x"], ["y"], [1.0])["spearman"] == 0.0


def test_rerank_trains_a_directory_cross_encoder_loads(tiny, files, tmp_path):
    out = tmp_path / "rerank"
    _run(
        [
            "finetune", "--task", "rerank", "--model", str(tiny), "--train", str(files["scored"]),
            "--eval", str(files["scored"]), "-o", str(out), "--max-steps", "3",
            "--batch-size", "8", "--eval-every", "3", "--no-progress", "--threads", "1",
        ]
    )  # fmt: skip
    pairs = [("the cat sat", "a cat sat"), ("red car", "big small tree"), ("a", "")]
    for sub in ("model", "best"):
        _assert_card_and_one_copy(out / sub, ["CrossEncoder(", "pipeline_tag: text-ranking"])
    assert "| spearman |" in (out / "best" / "README.md").read_text()
    ours = Reranker(out / "best").predict(pairs)
    from sentence_transformers import CrossEncoder

    theirs = CrossEncoder(str(out / "best"), device="cpu").predict(pairs)
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)
    final = json.loads((out / "final_metrics.json").read_text())
    printed = _run(
        ["evaluate", "sts-rerank", "--model", str(out / "best"), "--data", str(files["scored"])]
    )
    assert json.loads(printed)["spearman"] == pytest.approx(final["eval"]["spearman"], abs=1e-5)


def test_retrieval_metrics_by_hand():
    from bertfamily.evaluation.metrics import retrieval_metrics

    ranked = {"q1": ["d3", "d1", "d2"], "q2": ["d1", "d2", "d3"], "q3": ["d1"]}
    qrels = {"q1": {"d1": 1, "d2": 1}, "q2": {"d1": 2, "d9": 0}, "q3": {"d9": 1}}
    m = retrieval_metrics(ranked, qrels, ks=(1, 2))
    # q1: hits at ranks 2, 3; q2: hit at rank 1; q3: none (its relevant doc is not ranked)
    assert m["mrr@10"] == pytest.approx((1 / 2 + 1 + 0) / 3)
    assert m["recall@1"] == pytest.approx((0 + 1 + 0) / 3)
    assert m["recall@2"] == pytest.approx((0.5 + 1 + 0) / 3)
    ndcg_q1 = (1 / np.log2(3) + 1 / np.log2(4)) / (1 + 1 / np.log2(3))
    assert m["ndcg@10"] == pytest.approx((ndcg_q1 + 1 + 0) / 3)
    assert m["map@100"] == pytest.approx(((1 / 2 + 2 / 3) / 2 + 1 + 0) / 3)


def test_evaluate_retrieval_and_mine_negatives(tiny, tmp_path):
    d = tmp_path / "beir"
    d.mkdir()
    docs = {"d1": "the cat sat on a mat", "d2": "a red car ran fast", "d3": "big small tree"}
    (d / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in docs.items())
    )
    (d / "queries.jsonl").write_text(
        json.dumps({"_id": "q1", "text": "the cat sat on a mat"}) + "\n"
        + json.dumps({"_id": "q2", "text": "a red car ran fast"}) + "\n"
    )  # fmt: skip
    (d / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    res = json.loads(_run(["evaluate", "retrieval", "--model", str(tiny), "--data", str(d)]))
    assert res["mrr@10"] == pytest.approx(1.0) and res["ndcg@10"] == pytest.approx(1.0)

    pairs = tmp_path / "pairs.csv"
    rows = [("the cat sat", "a cat sat on a mat"), ("red car", "a red car ran fast"),
            ("big tree", "big small tree"), ("dog ran", "a dog ran far away")]  # fmt: skip
    pairs.write_text("anchor,positive\n" + "".join(f"{a},{p}\n" for a, p in rows))
    out = tmp_path / "mined.csv"
    counts = json.loads(
        _run(
            [
                "mine-negatives",
                "-i",
                str(pairs),
                "-o",
                str(out),
                "--model",
                str(tiny),
                "--num-negatives",
                "2",
            ]
        )  # fmt: skip
    )
    assert counts == {"rows_in": 4, "rows_out": 4, "dropped": 0, "output": str(out)}
    table = read_pairs(out)
    assert table.columns == ("anchor", "positive", "negative_1", "negative_2")
    for (a, p, n1, n2), (a0, p0) in zip(table.rows, rows):
        assert (a, p) == (a0, p0) and p not in (n1, n2) and n1 != n2
    # a margin that nothing passes drops every row
    counts = json.loads(
        _run(
            [
                "mine-negatives",
                "-i",
                str(pairs),
                "-o",
                str(out),
                "--model",
                str(tiny),
                "--absolute-margin",
                "5",
            ]
        )  # fmt: skip
    )
    assert counts["rows_out"] == 0 and counts["dropped"] == 4


def test_mining_order_range_and_margin():
    from bertfamily.pipelines.retrieval.mining import MiningOptions, mine_hard_negatives

    vecs = {"a": [1, 0], "p": [0.9, 0.1], "x": [0.8, 0.2], "y": [0.5, 0.5], "z": [0, 1]}
    embed = lambda texts: np.array([vecs[t] for t in texts], float)  # noqa: E731
    rows = [("a", "p")]
    corpus = ["x", "y", "z"]
    got, _ = mine_hard_negatives(embed, rows, corpus, MiningOptions(num_negatives=2))
    assert got == [("a", "p", "x", "y")]
    got, _ = mine_hard_negatives(embed, rows, corpus, MiningOptions(num_negatives=1, range_min=1))
    assert got == [("a", "p", "y")]
    opts = MiningOptions(num_negatives=1, absolute_margin=0.1)  # cos(a,x)=0.97 > 0.99-0.1
    assert mine_hard_negatives(embed, rows, corpus, opts)[0] == [("a", "p", "y")]
