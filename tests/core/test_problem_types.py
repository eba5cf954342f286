"""Classification problem types (single-label, multi-label, regression) through data reading,
the loss, metrics, training, `predict`, the `TextClassifier` pipeline (checked against
transformers' text-classification pipeline) and save/load."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import bertfamily as bf
from bertfamily.data.tables import DataError
from bertfamily.data.task_data import TaskData, TaskOptions, infer_problem_type
from bertfamily.evaluation.metrics import (
    classification_metrics,
    multilabel_metrics,
    regression_metrics,
)

pytestmark = pytest.mark.usefixtures("one_thread")

WORDS = ["red", "blue", "green", "cat", "dog", "the", "is", "and", "very", "a", "b", "c"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
MULTI = ("a", "b", "c")
KINDS = {
    "single_label_classification": ("neg", "neu", "pos"),
    "multi_label_classification": MULTI,
    "regression": ("score",),
}


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab")
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tok(vocab_dir):
    return bf.load_tokenizer(vocab_dir)


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tok):
    """``saved(problem_type) -> directory``: a tiny random classifier of that problem type,
    saved with our ``save_pretrained`` and tokenizer."""
    cache = {}

    def make(kind):
        if kind not in cache:
            torch.manual_seed(1)
            cfg = bf.EncoderConfig.from_preset(
                "tiny-bert", vocab_size=len(VOCAB), label_names=KINDS[kind], problem_type=kind
            )
            model = bf.build_model(cfg, heads=["classify"])
            with torch.no_grad():  # spread the scores: random tiny heads give near-equal ones
                for p in model.parameters():
                    if p.dim() == 2 and p.shape[0] == len(KINDS[kind]):
                        p.mul_(20)
            path = tmp_path_factory.mktemp(kind)
            model.save_pretrained(path)
            tok.save_pretrained(path)
            cache[kind] = path
        return cache[kind]

    return make


TEXTS = ["the cat is red", "dog", "a very blue and green dog", "b c"]


# --- pipeline against transformers -----------------------------------------------------------
@pytest.mark.parametrize("kind", list(KINDS))
def test_pipeline_scores_match_transformers(saved, kind):
    import transformers

    from bertfamily.pipelines.tasks.classify import TextClassifier

    path = saved(kind)
    hf_model = transformers.AutoModelForSequenceClassification.from_pretrained(path)
    assert hf_model.config.problem_type == kind
    pipe = transformers.pipeline(
        "text-classification", model=hf_model, tokenizer=str(path), device="cpu"
    )
    clf = TextClassifier(path)
    ours = clf(TEXTS, top_k=None)
    theirs = pipe(TEXTS, top_k=None)
    for a, b in zip(ours, theirs):
        assert [x["label"] for x in a] == [x["label"] for x in b]
        assert [x["score"] for x in a] == pytest.approx([x["score"] for x in b], abs=1e-5)
    for fn in ("softmax", "sigmoid", "none"):
        a = clf(TEXTS, top_k=None, function_to_apply=fn)
        b = pipe(TEXTS, top_k=None, function_to_apply=fn)
        for x, y in zip(a, b):
            assert [(d["label"], round(d["score"], 4)) for d in x] == [
                (d["label"], round(d["score"], 4)) for d in y
            ]

    # top_k as transformers defines it: the best k, all for None or k beyond the labels
    def same(a, b):
        assert [x["label"] for x in a] == [x["label"] for x in b]
        assert [x["score"] for x in a] == pytest.approx([x["score"] for x in b], abs=1e-5)

    (one,) = clf(TEXTS[0])
    same(one, ours[0][:1])
    same(clf(TEXTS[0], top_k=2)[0], ours[0][:2])
    same(clf(TEXTS[0], top_k=10)[0], ours[0])
    with pytest.raises(ValueError, match="top_k"):
        clf(TEXTS[0], top_k=0)
    with pytest.raises(ValueError, match="function_to_apply"):
        clf(TEXTS[0], function_to_apply="tanh")


def test_multi_label_pipeline_is_sigmoid_not_softmax(saved):
    """Issue 14.3: a multi-label checkpoint scored labels with a softmax (summing to 1)."""
    from bertfamily.pipelines.tasks.classify import TextClassifier

    path = saved("multi_label_classification")
    clf = TextClassifier(path)
    model = bf.from_pretrained(path)
    enc = clf.tokenizer([TEXTS[2]])
    logits = model(**enc).logits[0].detach()
    (scores,) = clf(TEXTS[2], top_k=None)
    got = {d["label"]: d["score"] for d in scores}
    want = dict(zip(MULTI, logits.sigmoid().tolist()))
    assert got == pytest.approx(want, abs=1e-6)
    assert abs(sum(got.values()) - 1) > 0.05  # independent scores, not a distribution
    single = TextClassifier(saved("single_label_classification"))
    assert sum(d["score"] for d in single(TEXTS[2], top_k=None)[0]) == pytest.approx(1, abs=1e-6)
    (reg,) = TextClassifier(saved("regression"))(TEXTS[2])
    ref = bf.from_pretrained(saved("regression"))(**enc).logits[0, 0].item()
    assert reg == [{"label": "score", "score": pytest.approx(ref, abs=1e-6)}]


@pytest.mark.parametrize("kind", list(KINDS))
def test_problem_type_round_trips(saved, kind, tmp_path):
    path = saved(kind)
    assert json.loads((path / "config.json").read_text())["problem_type"] == kind
    model = bf.from_pretrained(path)
    assert model.config.problem_type == kind
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["problem_type"] == kind


# --- loss ------------------------------------------------------------------------------------
def test_task_loss_passes_the_problem_type():
    from bertfamily.heads.losses import task_loss

    logits = torch.tensor([[0.3, -1.0, 2.0], [1.0, 0.5, -0.5]])
    out = type("Out", (), {"logits": logits})()
    multi = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    want = F.binary_cross_entropy_with_logits(logits, multi)
    assert task_loss("classify", out, {"labels": multi}, "multi_label_classification") == want
    ids = torch.tensor([2, 0])
    want = F.cross_entropy(logits, ids)
    assert task_loss("classify", out, {"labels": ids}, "single_label_classification") == want
    reg = type("Out", (), {"logits": logits[:, :1]})()
    target = torch.tensor([0.5, 2.0])
    assert task_loss("classify", reg, {"labels": target}, "regression") == F.mse_loss(
        logits[:, 0], target
    )
    with pytest.raises(ValueError, match="problem_type"):
        task_loss("classify", out, {"labels": ids}, "multi")


# --- metrics ---------------------------------------------------------------------------------
def test_multilabel_metrics_match_sklearn():
    from sklearn.metrics import accuracy_score, f1_score

    t = np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 0, 0]])
    p = np.array([[1, 0, 0], [0, 1, 0], [1, 0, 1], [0, 0, 0]])
    m = multilabel_metrics(t, p)
    assert m["micro_f1"] == pytest.approx(f1_score(t, p, average="micro"))
    assert m["macro_f1"] == pytest.approx(f1_score(t, p, average="macro", zero_division=0))
    assert m["subset_accuracy"] == pytest.approx(accuracy_score(t, p)) == 0.5


def test_regression_metrics_match_scipy():
    from scipy.stats import pearsonr, spearmanr

    t = [1.0, 2.0, 2.0, 3.5, 0.0]
    p = [0.8, 2.5, 1.0, 3.0, 0.5]
    m = regression_metrics(t, p)
    assert m["mse"] == pytest.approx(np.mean((np.array(t) - np.array(p)) ** 2))
    assert m["pearson"] == pytest.approx(pearsonr(t, p)[0])
    assert m["spearman"] == pytest.approx(spearmanr(t, p)[0])


def test_metrics_on_degenerate_inputs_are_finite():
    for m in (
        classification_metrics([1, 1, 1], [1, 1, 1]),
        classification_metrics([0], [1]),
        multilabel_metrics([[0, 0]], [[0, 0]]),
        multilabel_metrics([[1, 1]], [[0, 0]]),
        regression_metrics([2.0, 2.0], [1.0, 3.0]),
        regression_metrics([1.0], [1.0]),
    ):
        assert all(math.isfinite(v) for v in m.values()), m
    assert classification_metrics([1, 1, 1], [1, 1, 1])["accuracy"] == 1.0
    assert multilabel_metrics([[0, 0]], [[0, 0]])["subset_accuracy"] == 1.0
    for fn in (classification_metrics, regression_metrics, multilabel_metrics):
        with pytest.raises(ValueError, match="non-zero"):
            fn([], [])
    with pytest.raises(ValueError, match="finite"):
        regression_metrics([1.0, 2.0], [float("nan"), 1.0])


# --- data ------------------------------------------------------------------------------------
def test_infer_problem_type():
    assert infer_problem_type(["pos", "neg"]) == "single_label_classification"
    assert infer_problem_type([0, 1, "2"]) == "single_label_classification"
    assert infer_problem_type(["a|b", "c"]) == "multi_label_classification"
    assert infer_problem_type([["a"], "b"]) == "multi_label_classification"
    assert infer_problem_type(["a;b"], separator=";") == "multi_label_classification"
    assert infer_problem_type([0.5, "1", 2]) == "regression"
    assert infer_problem_type(["1.5", "x"]) == "single_label_classification"


def test_multi_label_rows_from_csv_and_jsonl(tok, tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text('text,label\nred cat,a|b\ndog, c \nthe,"b|"\n', encoding="utf-8")
    data = TaskData("classify", tok, TaskOptions())
    rows = data.load(csv)
    assert data.problem_type == "multi_label_classification"
    assert data.label_names == ("a", "b", "c")
    assert [r["labels"] for r in rows] == [[1.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
    jl = tmp_path / "t.jsonl"
    jl.write_text(
        '{"text": "red", "label": ["a", "c"]}\n{"text": "dog", "label": []}\n', encoding="utf-8"
    )
    ev = TaskData("classify", tok, TaskOptions(), data.label_names, data.problem_type)
    assert [r["labels"] for r in ev.load(jl)] == [[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "red", "label": ["a", "z"]}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.jsonl:1: labels \['z'\] were not seen"):
        TaskData("classify", tok, TaskOptions(), data.label_names, data.problem_type).load(bad)
    # chosen explicitly, "a|b" stays one class name
    single = TaskData("classify", tok, TaskOptions(problem_type="single_label_classification"))
    single.load(csv)
    assert single.label_names == ("a|b", "b|", "c")  # stripped, else kept as written (#34)
    with pytest.raises(DataError, match="list of labels"):
        TaskData("classify", tok, TaskOptions(problem_type="single_label_classification")).load(jl)
    with pytest.raises(ValueError, match="problem_type"):
        TaskOptions(problem_type="multilabel")
    with pytest.raises(ValueError, match="contradicts"):
        TaskOptions(regression=True, problem_type="multi_label_classification")


# --- training, predict, CLI ------------------------------------------------------------------
@pytest.fixture(scope="module")
def base_dir(tmp_path_factory, tok):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("base")
    bf.build_model(
        bf.EncoderConfig.from_preset("tiny-bert", vocab_size=len(VOCAB))
    ).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def base_dir_no_dropout(tmp_path_factory, tok):
    """`base_dir` without dropout: the training run below then draws no random numbers in the
    forward, so its result does not depend on how attention draws its dropout mask (per
    sequence, or over the padded batch as transformers and the bucketed path do)."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("base-no-dropout")
    config = bf.EncoderConfig.from_preset("tiny-bert", vocab_size=len(VOCAB))
    config = config.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    bf.build_model(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _train(base_dir, out, train_file, **opts):
    from bertfamily.recipes.finetune import FinetuneConfig, finetune
    from bertfamily.train import TrainConfig

    return finetune(
        FinetuneConfig(
            "classify", base_dir, train_file, train_file, TaskOptions(max_length=16, **opts), None
        ),
        TrainConfig(
            output_dir=out,
            batch_size=8,
            max_steps=120,
            learning_rate=5e-3,
            warmup_ratio=0.0,
            eval_every=20,
            log_every=0,
            progress=False,
        ),
    )


def test_multi_label_training_predict_and_cli(base_dir_no_dropout, tmp_path, cli):
    base_dir = base_dir_no_dropout
    import transformers

    from bertfamily.recipes.finetune import predict

    colour = {"red": "a", "blue": "b", "green": "c"}
    rows = []
    for combo in (["red"], ["blue"], ["green"], ["red", "blue"], ["blue", "green"], []):
        for filler in ("the", "cat", "dog"):
            words = [filler, *combo] if combo else [filler, "is", filler]
            rows.append({"text": " ".join(words), "label": [colour[w] for w in combo]})
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = _train(base_dir, tmp_path / "run", path)
    assert res["problem_type"] == "multi_label_classification"
    assert res["labels"] == ["a", "b", "c"]
    ev = res["eval"]
    assert set(ev) == {"micro_f1", "macro_f1", "subset_accuracy"}
    assert ev["micro_f1"] == 1.0 and ev["subset_accuracy"] == 1.0, ev
    best = tmp_path / "run" / "best"
    assert json.loads((best / "config.json").read_text())["problem_type"] == (
        "multi_label_classification"
    )
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(best)
    assert hf.config.problem_type == "multi_label_classification"
    pred = json.loads((tmp_path / "run" / "eval_predictions.jsonl").read_text().splitlines()[9])
    assert pred["labels"] == pred["gold"] == ["a", "b"] and set(pred["scores"]) == {"a", "b", "c"}

    unlabelled = tmp_path / "u.jsonl"
    unlabelled.write_text('{"text": "dog red blue"}\n{"text": "the is the"}\n', encoding="utf-8")
    preds, _ = predict("classify", best, unlabelled)
    assert [sorted(d["label"] for d in p["labels"]) for p in preds] == [["a", "b"], []]
    assert all(0.5 < d["score"] <= 1 for d in preds[0]["labels"])
    everything, _ = predict("classify", best, unlabelled, TaskOptions(threshold=0.0))
    assert [len(p["labels"]) for p in everything] == [3, 3]
    _, metrics = predict("classify", best, path, labelled=True)
    assert metrics["subset_accuracy"] == 1.0
    out = tmp_path / "p.jsonl"
    r = cli(
        "predict",
        "--task",
        "classify",
        "--model",
        best,
        "-i",
        unlabelled,
        "-o",
        out,
        "--threshold",
        "1.0",
    )
    assert r.exit_code == 0, r.output
    assert [json.loads(x)["labels"] for x in out.read_text().splitlines()] == [[], []]


def test_regression_inferred_training_and_predict(base_dir, tmp_path):
    from bertfamily.pipelines.tasks.classify import TextClassifier
    from bertfamily.recipes.finetune import predict

    value = {"red": 0.5, "blue": 2.0, "green": 3.5}
    rows = [
        {"text": f"{f} {w}", "label": v} for w, v in value.items() for f in ("the", "cat", "dog")
    ]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = _train(base_dir, tmp_path / "run", path)  # no option: 0.5 / 3.5 imply regression
    assert res["problem_type"] == "regression" and res["labels"] == ["score"]
    assert set(res["eval"]) == {"mse", "pearson", "spearman"}
    assert res["eval"]["mse"] < 0.5 and res["eval"]["spearman"] > 0.8, res["eval"]
    best = tmp_path / "run" / "best"
    preds, _ = predict("classify", best, path)
    assert set(preds[0]) == {"line", "text", "value", "score"}
    (top,) = TextClassifier(best)("dog green")
    assert top[0]["label"] == "score" and top[0]["score"] == pytest.approx(
        preds[8]["value"], abs=1e-5
    )


def test_single_label_is_the_default_and_confusion_png(base_dir, tmp_path):
    rows = [{"text": f"{f} {w}", "label": w} for w in ("red", "blue") for f in ("the", "cat")]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = _train(base_dir, tmp_path / "run", path)
    assert res["problem_type"] == "single_label_classification"
    assert {"accuracy", "macro_f1", "mcc"} == set(res["eval"])
    assert (tmp_path / "run" / "confusion_matrix.png").is_file()
