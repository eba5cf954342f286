"""The engine's one batch loop (`inference.batches`): rows back in input order for shuffled
lengths, ``batch_size`` and ``max_batch_tokens`` respected, `TokenRows` split and joined; and
every task pipeline on it: each call tokenizes its inputs once (one call of the tokenizer),
runs length-sorted batches of at most ``batch_size`` rows, and answers in input order exactly
as it answers each input alone. Tiny random models (H=32, L=2) with MiniLM's tokenizer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import bertfamily as bf
from bertfamily.errors import InputError
from bertfamily.inference.batches import TokenRows, run_batches, tokenize_rows
from bertfamily.modules.embeddings import Embeddings
from bertfamily.tokenization.tokenizer import Tokenizer
from helpers import save_tiny_files, save_tiny_splade

pytestmark = pytest.mark.usefixtures("one_thread")

# lengths shuffled on purpose: the loop sorts them, the answers must not be
TEXTS = [
    "a short one",
    "the longest text of them all, with many more words than any other text here",
    "x",
    "a text of middling length about rome",
    "paris and london are cities",
    "an even longer one: " + "word " * 20,
    "york",
]


def _pad(rows: dict[str, list[list[int]]], target: int) -> dict[str, list[list[int]]]:
    return {k: [r + [0] * (target - len(r)) for r in v] for k, v in rows.items()}


def _rows(lengths: list[int]) -> TokenRows:
    """Row i holds the token i + 1, ``lengths[i]`` times."""
    ids = [[i + 1] * n for i, n in enumerate(lengths)]
    return TokenRows({"input_ids": ids, "attention_mask": [[1] * n for n in lengths]}, [False] * 7)


def test_run_batches_input_order_batch_size_and_token_budget():
    lengths = [3, 11, 1, 6, 6, 9, 2]
    tokens = _rows(lengths)
    out = [None] * len(lengths)
    shapes = []
    for idx, first in run_batches(
        tokens, lambda b: b["input_ids"][:, 0], pad=_pad, batch_size=3, max_batch_tokens=20
    ):
        shapes.append((len(idx), max(lengths[i] for i in idx)))
        for i, v in zip(idx, first.tolist()):
            assert out[i] is None  # every row once
            out[i] = v
    assert out == [1, 2, 3, 4, 5, 6, 7]  # each row's result lands at its own position
    # longest first; at most 3 rows; rows × longest ≤ 20: 11 + 9 > 20, so 11 goes alone
    assert shapes == [(1, 11), (2, 9), (3, 6), (1, 1)]
    # without a token budget: batches of exactly batch_size (the last smaller)
    sizes = [len(idx) for idx, _ in run_batches(tokens, lambda b: None, pad=_pad, batch_size=3)]
    assert sizes == [3, 3, 1]
    with pytest.raises(InputError, match="batch_size"):
        next(run_batches(tokens, lambda b: None, pad=_pad, batch_size=0))
    with pytest.raises(InputError, match="max_batch_tokens"):
        next(run_batches(tokens, lambda b: None, pad=_pad, max_batch_tokens=0))


def test_run_batches_pads_per_batch_and_keeps_keys():
    tokens = _rows([4, 2, 3])
    tokens.rows["offset_mapping"] = [[[0, 1]] * n for n in (4, 2, 3)]
    seen = []
    for _, batch in run_batches(
        tokens, lambda b: b, pad=_pad, batch_size=2, keys=("input_ids", "attention_mask")
    ):
        seen.append({k: v.tolist() for k, v in batch.items()})
    assert [sorted(b) for b in seen] == [["attention_mask", "input_ids"]] * 2
    assert seen[0]["input_ids"] == [[1, 1, 1, 1], [3, 3, 3, 0]]  # padded to its own longest
    assert seen[0]["attention_mask"] == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert seen[1]["input_ids"] == [[2, 2]]


def test_token_rows_take_join_and_empty(minilm_tokenizer):
    tokens = tokenize_rows(minilm_tokenizer, ["a b", "c", "d e f"], max_length=4)
    assert tokens.lengths == [4, 3, 4] and tokens.truncated == [False, False, True]
    tokens.extra["texts"] = ["a b", "c", "d e f"]
    part = tokens.take([2, 0])
    assert part.rows["input_ids"] == [tokens.rows["input_ids"][2], tokens.rows["input_ids"][0]]
    assert part.truncated == [True, False] and part.extra["texts"] == ["d e f", "a b"]
    again = TokenRows.join([tokens.take([0]), tokens.take([1, 2])])
    assert again.rows == tokens.rows and again.truncated == tokens.truncated
    assert again.extra == tokens.extra
    with pytest.raises(InputError, match="different fields"):
        TokenRows.join([tokens, TokenRows({"input_ids": [[1]]}, [False])])
    with pytest.raises(InputError, match="zero"):
        TokenRows.join([])
    empty = tokenize_rows(minilm_tokenizer, [], max_length=4)  # no tokenizer call, no error
    assert len(empty) == 0 and list(run_batches(empty, lambda b: 1, pad=_pad)) == []


# ------------------------------------------------------------------ the pipelines


@pytest.fixture(scope="module")
def dirs(tmp_path_factory, minilm_dir):
    """Tiny directories of every task kind (MiniLM's tokenizer, vocabulary 30522)."""
    from bertfamily.heads.early_exit import StudentClassifiers, save_students

    root = tmp_path_factory.mktemp("engine")
    config = dict(vocab_size=30522, max_position_embeddings=128)
    heads = {
        "classify": dict(heads=["classify"], label_names=("neg", "neu", "pos")),
        "rerank": dict(heads=["classify"], label_names=("score",)),
        "tokens": dict(heads=["tokens"], label_names=("O", "B-loc", "I-loc")),
        "qa": dict(heads=["qa"], label_names=None),
        "mlm": dict(heads=["mlm"], label_names=None),
    }
    out = {}
    for seed, (name, spec) in enumerate(heads.items()):
        torch.manual_seed(seed)
        labels = {"label_names": spec["label_names"]} if spec["label_names"] else {}
        cfg = bf.EncoderConfig.from_preset("tiny-bert", **config, **labels)
        model = bf.build_model(cfg, spec["heads"]).eval()
        save_tiny_files(model, root / name, minilm_dir)
        out[name] = root / name
    L = len(bf.from_pretrained(out["classify"]).encoder.schedule)
    torch.manual_seed(9)
    save_students(StudentClassifiers(L, 32, 3, width=16, num_heads=2), out["classify"])
    out["sparse"] = save_tiny_splade(root / "sparse", minilm_dir)
    return out


@pytest.fixture
def calls(monkeypatch):
    """Counts of the tokenizer's ``__call__`` and of model forwards (with their batch sizes)."""
    seen = {"tokenizer": 0, "forward": []}
    tokenize = Tokenizer.__call__

    def counting(self, *args, **kwargs):
        seen["tokenizer"] += 1
        return tokenize(self, *args, **kwargs)

    monkeypatch.setattr(Tokenizer, "__call__", counting)
    forward = Embeddings.forward  # once per encoder pass, early exit's included

    def recording(self, input_ids, *args, **kwargs):
        seen["forward"].append(input_ids.shape[0])
        return forward(self, input_ids, *args, **kwargs)

    monkeypatch.setattr(Embeddings, "forward", recording)
    return seen


def _pipeline(kind: str, dirs):
    from bertfamily.pipelines.embedding.sparse import SparseEncoder
    from bertfamily.pipelines.reranking.rerank import Reranker
    from bertfamily.pipelines.tasks.classify import TextClassifier
    from bertfamily.pipelines.tasks.early_exit import EarlyExitClassifier
    from bertfamily.pipelines.tasks.ner import EntityTagger

    return {
        "rerank": lambda: Reranker(dirs["rerank"]),
        "sparse": lambda: SparseEncoder(dirs["sparse"]),
        "classify": lambda: TextClassifier(dirs["classify"]),
        "tokens": lambda: EntityTagger(dirs["tokens"]),
        "early_exit": lambda: EarlyExitClassifier(dirs["classify"], speed=0.3),
    }[kind]()


def _inputs(kind: str) -> list:
    return [("who is in rome", t) for t in TEXTS] if kind == "rerank" else list(TEXTS)


def _comparable(kind: str, result):
    if kind == "sparse":
        return [(v.indices.tolist(), v.values) for v in result]
    if kind == "tokens":
        return [[(e.type, e.start, e.end, e.score) for e in row] for row in result]
    if kind == "rerank":
        return list(result)
    return [[(d["label"], d["score"], d.get("exit_layer")) for d in row] for row in result]


def _close(a, b) -> None:
    """Equal structure; floats within 1e-5 (padding to another length may move the last bit)."""
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _close(x, y)
    elif isinstance(a, (float, np.floating, np.ndarray)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    else:
        assert a == b


def _public(kind: str, pipe, inputs, **sizes):
    if kind == "rerank":
        return pipe.predict(inputs, **sizes)
    if kind == "sparse":
        return pipe.encode(inputs, **sizes)
    return pipe(inputs, **sizes)


@pytest.mark.parametrize("kind", ["rerank", "sparse", "classify", "tokens", "early_exit"])
def test_pipeline_tokenizes_once_and_answers_in_input_order(kind, dirs, calls):
    pipe = _pipeline(kind, dirs)
    inputs = _inputs(kind)
    calls["tokenizer"], calls["forward"] = 0, []
    got = _public(kind, pipe, inputs, batch_size=3)
    assert calls["tokenizer"] == 1  # one tokenization for the whole call
    assert calls["forward"] == [3, 3, 1]  # length-sorted batches of batch_size
    # the two halves the server calls give the same, and tokenize alone runs no model
    calls["tokenizer"], calls["forward"] = 0, []
    tokens = pipe.tokenize(inputs)
    assert isinstance(tokens, TokenRows) and len(tokens) == len(inputs)
    assert (calls["tokenizer"], calls["forward"]) == (1, [])
    again = pipe.run_tokenized(tokens, batch_size=3, max_batch_tokens=40)
    assert calls["tokenizer"] == 1  # run_tokenized does not tokenize
    assert all(n * max(tokens.lengths) <= 40 or n == 1 for n in calls["forward"][:1])
    _close(_comparable(kind, again), _comparable(kind, got))
    # input order: each answer is that input's answer alone
    alone = [_comparable(kind, _public(kind, pipe, [x], batch_size=1))[0] for x in inputs]
    _close(_comparable(kind, got), alone)


def test_token_budget_reaches_the_model(dirs, calls):
    from bertfamily.pipelines.tasks.classify import TextClassifier

    clf = TextClassifier(dirs["classify"])
    tokens = clf.tokenize(TEXTS)
    lengths = sorted(tokens.lengths, reverse=True)
    calls["forward"] = []
    clf.run_tokenized(tokens, batch_size=32, max_batch_tokens=2 * lengths[2])
    assert sum(calls["forward"]) == len(TEXTS) and max(calls["forward"]) < len(TEXTS)
    assert calls["forward"][0] == 1 or calls["forward"][0] * lengths[0] <= 2 * lengths[2]


def test_empty_inputs_run_nothing(dirs, calls):
    for kind in ("rerank", "sparse", "classify", "tokens"):
        pipe = _pipeline(kind, dirs)
        calls["tokenizer"], calls["forward"] = 0, []
        assert len(_public(kind, pipe, [])) == 0
        assert (calls["tokenizer"], calls["forward"]) == (0, [])


def test_early_exit_speed_per_call_leaves_the_instance(dirs):
    clf = _pipeline("early_exit", dirs)
    tokens = clf.tokenize(TEXTS)
    full = clf.run_tokenized(tokens, speed=0.0, top_k=None)
    fast = clf.run_tokenized(tokens, speed=1.0, top_k=None)
    assert clf.speed == 0.3
    assert {d["exit_layer"] for row in fast for d in row} == {1}
    assert {d["exit_layer"] for row in full for d in row} == {clf.num_layers}
    with pytest.raises(InputError, match="speed"):
        clf(TEXTS, speed=2.0)


def test_qa_windows_tokenized_once_and_batched(dirs, calls, monkeypatch):
    from bertfamily.pipelines.tasks import qa as qa_module

    windows = {"calls": 0}
    prepare = qa_module.prepare_windows

    def counting(*args, **kwargs):
        windows["calls"] += 1
        return prepare(*args, **kwargs)

    monkeypatch.setattr(qa_module, "prepare_windows", counting)
    qa = qa_module.QuestionAnswerer(dirs["qa"], max_length=32, doc_stride=8)
    context = " ".join(TEXTS)
    calls["forward"] = []
    tokens = qa.tokenize(["where is rome", "what is long"], [context, "a short context"])
    assert windows["calls"] == 1 and len(tokens) > 3  # the long context in several windows
    answers = qa.run_tokenized(tokens, top_k=2, batch_size=64)
    assert calls["forward"] == [len(tokens)]  # every window of both questions in one batch
    assert len(answers) == 2 and all(len(a) == 2 for a in answers)
    one = qa("where is rome", context, top_k=2)
    assert [(a.text, a.start) for a in one] == [(a.text, a.start) for a in answers[0]]
    _close([a.score for a in one], [a.score for a in answers[0]])
    for a in answers[0]:
        assert context[a.start : a.end] == a.text
    with pytest.raises(InputError, match="questions"):
        qa.tokenize(["a", "b"], ["c"])


def test_fill_mask_texts_tokenized_once(dirs, calls):
    from bertfamily.pipelines.tasks.fill_mask import FillMask

    fm = FillMask(dirs["mlm"])
    texts = ["paris is the [MASK] of france", "x <mask> y [MASK]", "[MASK]"]
    calls["tokenizer"], calls["forward"] = 0, []
    tokens = fm.tokenize(texts)
    out = fm.run_tokenized(tokens, top_k=3, batch_size=2)
    assert calls["tokenizer"] == 1 and calls["forward"] == [2, 1]
    assert [len(r) for r in out] == [1, 2, 1]  # per text, one list per mask
    for text, row in zip(texts, out):
        alone = fm(text, top_k=3)
        assert [[p.token_id for p in m] for m in row] == [[p.token_id for p in m] for m in alone]
        assert [[p.sequence for p in m] for m in row] == [[p.sequence for p in m] for m in alone]
        _close([[p.score for p in m] for m in row], [[p.score for p in m] for m in alone])
    with pytest.raises(InputError, match="no mask token in text 1"):
        fm.tokenize(["a [MASK]", "none here"])


def test_pipelines_default_to_fp32(dirs):
    import inspect

    from bertfamily.inference.loading import load_model_and_tokenizer
    from bertfamily.pipelines.tasks.fill_mask import FillMask
    from bertfamily.pipelines.tasks.qa import QuestionAnswerer

    assert inspect.signature(load_model_and_tokenizer).parameters["dtype"].default == "auto"
    loaded = load_model_and_tokenizer(dirs["classify"])
    assert loaded.dtype == torch.float32 and loaded.dtype_reason.startswith("fp32 (auto")
    for kind in ("rerank", "sparse", "classify", "tokens", "early_exit"):
        pipe = _pipeline(kind, dirs)
        assert next(pipe.model.parameters()).dtype == torch.float32, kind
    for cls in (FillMask, QuestionAnswerer):
        assert inspect.signature(cls.__init__).parameters["dtype"].default == "auto"


def test_every_task_pipeline_refuses_a_model_with_another_head(minilm_dir, tmp_path):
    """One check in the loader (`load_model_and_tokenizer(head=...)`) for every task pipeline:
    a model without their head is refused with one line, before its tokenizer is read."""
    from bertfamily.errors import InputError
    from bertfamily.pipelines.tasks.classify import TextClassifier
    from bertfamily.pipelines.tasks.ner import EntityTagger
    from bertfamily.pipelines.tasks.qa import QuestionAnswerer
    from test_serve import tiny_dir

    plain = tiny_dir(tmp_path / "plain", minilm_dir)  # an encoder with no task head
    for cls, what in [
        (TextClassifier, "a sequence classifier"),
        (EntityTagger, "a token classifier"),
        (QuestionAnswerer, "extractive QA"),
    ]:  # (a Reranker refuses it earlier: no *ForSequenceClassification architecture)
        with pytest.raises(InputError, match=rf"holds a None head, not {what}$"):
            cls(plain)
