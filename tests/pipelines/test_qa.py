"""QA windows and answer post-processing on hand-made cases (real MiniLM WordPiece tokenizer)."""

from __future__ import annotations

import json
import unicodedata

import numpy as np
import pytest

from bertfamily.data.squad import QAExample, postprocess, prepare_windows, read_squad
from bertfamily.data.tables import DataError


def _logits(features, targets, low=-5.0, high=5.0):
    """Start/end logits peaked at targets[fi] = (start token, end token) or None."""
    starts, ends = [], []
    for f, t in zip(features, targets):
        s, e = np.full(len(f.input_ids), low), np.full(len(f.input_ids), low)
        if t is not None:
            s[t[0]], e[t[1]] = high, high
        starts.append(s)
        ends.append(e)
    return starts, ends


FILLER = " ".join(f"word{i}" for i in range(40))


def test_answer_only_in_second_window(minilm_tokenizer):
    ctx = FILLER + " the capital is Zanzibar city ."
    ex = QAExample("q1", "what is the capital?", ctx, [("Zanzibar city", ctx.index("Zanzibar"))])
    feats = prepare_windows(minilm_tokenizer, [ex], max_length=48, doc_stride=8)
    assert len(feats) >= 2
    assert feats[0].start_position == feats[0].end_position == 0  # not in window 1
    holding = [f for f in feats if f.start_position]
    assert holding and holding[0] is not feats[0]
    f = holding[0]
    answer = f.input_ids[f.start_position : f.end_position + 1]
    assert minilm_tokenizer.decode(answer) == "zanzibar city"
    # the model is confident in window 1 about a filler word, more so in window 2 about the answer
    targets = [(5, 5) if fi == 0 else None for fi in range(len(feats))]
    targets[feats.index(f)] = (f.start_position, f.end_position)
    s, e = _logits(feats, targets)
    s[feats.index(f)][f.start_position] += 1
    pred = postprocess([ex], feats, s, e)[0]
    assert pred.answer.text == "Zanzibar city"
    assert (pred.answer.start, pred.answer.end) == (ctx.index("Zanzibar"), ctx.index(" ."))
    assert pred.n_best[0].probability > pred.n_best[1].probability
    assert abs(sum(a.probability for a in pred.n_best) - 1) < 1e-9


def test_answer_at_very_end_of_context(minilm_tokenizer):
    ctx = FILLER + " it ended in 1989"
    ex = QAExample("q2", "when?", ctx, [("1989", len(ctx) - 4)])
    feats = prepare_windows(minilm_tokenizer, [ex], max_length=40, doc_stride=10)
    last = feats[-1]
    assert last.start_position > 0
    assert last.offsets[last.end_position][1] == len(ctx)
    targets = [None] * len(feats)
    targets[-1] = (last.start_position, last.end_position)
    pred = postprocess([ex], feats, *_logits(feats, targets))[0]
    assert pred.answer.text == "1989" and pred.answer.end == len(ctx)


def test_answer_never_from_the_question(minilm_tokenizer):
    ctx = "Berlin is large. The answer is Paris of France."
    ex = QAExample("q3", "Is it Paris of France?", ctx)
    (f,) = prepare_windows(minilm_tokenizer, [ex], max_length=64, doc_stride=16)
    toks = minilm_tokenizer.convert_ids_to_tokens(f.input_ids)
    q_paris = toks.index("paris")  # first occurrence: in the question
    c_paris = toks.index("paris", q_paris + 1)
    assert f.offsets[q_paris] is None and f.offsets[c_paris] is not None
    s, e = _logits([f], [(q_paris, q_paris + 2)], high=9.0)  # strongest on the question words
    s[0][c_paris] = e[0][c_paris + 2] = 4.0
    pred = postprocess([ex], [f], s, e)[0]
    assert pred.answer.text == "Paris of France"
    assert pred.answer.start == ctx.index("Paris")
    assert all(a.start >= 0 and ctx[a.start : a.end] == a.text for a in pred.n_best)


def test_chinese_and_emoji_offsets_exact(minilm_tokenizer):
    ctx = "Café 👍🏽 — 我们在北京见面 🎉 then naïve talk."
    answer = "北京见面 🎉 then"
    ex = QAExample("q4", "哪里?", ctx, [(answer, ctx.index(answer))])
    (f,) = prepare_windows(minilm_tokenizer, [ex], max_length=64, doc_stride=16)
    assert (f.offsets[f.start_position][0], f.offsets[f.end_position][1]) == (
        ctx.index(answer),
        ctx.index(answer) + len(answer),
    )
    pred = postprocess([ex], [f], *_logits([f], [(f.start_position, f.end_position)]))[0]
    assert pred.answer.text == answer
    assert ctx[pred.answer.start : pred.answer.end] == answer

    # every context token's offsets point at its own characters (lower-cased, accents off)
    def plain(text):
        return "".join(
            c for c in unicodedata.normalize("NFD", text.lower()) if not unicodedata.combining(c)
        )

    for tid, o in zip(f.input_ids, f.offsets):
        if o is not None and minilm_tokenizer.convert_ids_to_tokens(tid) != "[UNK]":
            assert minilm_tokenizer.convert_ids_to_tokens(tid).lstrip("#") == plain(
                ctx[o[0] : o[1]]
            )


def test_max_answer_length_and_order(minilm_tokenizer):
    ctx = "alpha beta gamma delta epsilon zeta"
    ex = QAExample("q5", "which?", ctx)
    (f,) = prepare_windows(minilm_tokenizer, [ex], max_length=32, doc_stride=8)
    first = next(i for i, o in enumerate(f.offsets) if o is not None)
    s, e = _logits([f], [None])
    s[0][first + 1] = 3.0  # "beta"
    e[0][first] = 5.0  # "alpha": ends before the start, invalid
    e[0][first + 5] = 4.0  # "beta … zeta": 5 tokens, longer than max_answer_length=3
    e[0][first + 2] = 2.0  # "gamma"
    pred = postprocess([ex], [f], s, e, max_answer_length=3)[0]
    assert pred.answer.text == "beta gamma"


def test_no_answer_threshold(minilm_tokenizer):
    ctx = "The river is long and wide."
    ex = QAExample("q6", "how wide?", ctx)
    (f,) = prepare_windows(minilm_tokenizer, [ex], max_length=32, doc_stride=8)
    toks = minilm_tokenizer.convert_ids_to_tokens(f.input_ids)
    i = len(toks) - 1 - toks[::-1].index("wide")  # the context's "wide", not the question's
    s, e = _logits([f], [(i, i)], high=3.0)
    s[0][0] = e[0][0] = 4.0  # null score 8 vs best span 6: null − best = 2
    above = postprocess([ex], [f], s, e, null_threshold=1.0)[0]
    below = postprocess([ex], [f], s, e, null_threshold=2.5)[0]
    squad11 = postprocess([ex], [f], s, e)[0]
    assert above.answer.text == "" and above.null_score == 8.0
    assert below.answer.text == "wide" and squad11.answer.text == "wide"


def test_read_squad(tmp_path):
    data = {
        "data": [
            {
                "paragraphs": [
                    {
                        "context": "Ünïcode 中文 here",
                        "qas": [
                            {
                                "id": "a",
                                "question": "what?",
                                "answers": [{"text": "中文", "answer_start": 8}],
                            },
                            {"id": "b", "question": "none?", "answers": [], "is_impossible": True},
                        ],
                    }
                ]
            }
        ]
    }
    p = tmp_path / "s.json"
    p.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    exs = read_squad(p)
    assert [(e.id, e.answers) for e in exs] == [("a", [("中文", 8)]), ("b", [])]
    data["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = 7
    p.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(DataError, match="not at character 7"):
        read_squad(p)


def test_window_too_small_is_a_clear_error(minilm_tokenizer):
    with pytest.raises(ValueError, match="doc_stride"):
        prepare_windows(
            minilm_tokenizer, [QAExample("x", "q " * 10, "c " * 50)], max_length=16, doc_stride=8
        )


def test_max_context_rule_picks_the_central_window(minilm_tokenizer):
    ctx = FILLER
    ex = QAExample("q7", "which word?", ctx)
    feats = prepare_windows(minilm_tokenizer, [ex], max_length=32, doc_stride=16)
    a, b = feats[0], feats[1]
    shared = [o for o in a.offsets if o is not None and o in b.offsets]
    span = shared[-2]  # next to the end of window 0, well inside window 1
    i, j = a.offsets.index(span), b.offsets.index(span)
    assert not a.token_is_max_context[i] and b.token_is_max_context[j]
    targets = [None] * len(feats)
    targets[0], targets[1] = (i, i), (j, j)
    s, e = _logits(feats, targets, high=5.0)
    s[1][j] = e[1][j] = 3.0  # less confident where the token has more context
    pred = postprocess([ex], feats, s, e)[0]
    assert pred.answer.text == ctx[span[0] : span[1]]
    assert pred.answer.score == 6.0  # from window 1, not the 10.0 of window 0
