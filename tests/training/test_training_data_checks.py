"""The one training-data validator (issue 43, kind 3): data an embedding or reranker loss reads
but learns nothing or the wrong thing from is refused (one line, the count and the first file
line) or warned about, by `data.validate.check_training_table`, which every training loss
routes through its ``data_rules``; end to end, `finetune` refuses it before the model loads."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bertfamily.cli import app
from bertfamily.data.pairs import read_pairs
from bertfamily.data.validate import DataRules, check_training_table
from bertfamily.errors import DataError
from bertfamily.objectives.contrastive import build_loss
from bertfamily.objectives.ranking import build_rerank_loss
from helpers import make_tiny


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return make_tiny(tmp_path_factory.mktemp("tiny"))


def _csv(tmp_path: Path, text: str, name: str = "train.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _check(path: Path, rules: DataRules) -> list[str]:
    return check_training_table(read_pairs(path), path, rules)


def test_clean_data_passes_silently(tmp_path, caplog):
    path = _csv(tmp_path, "anchor,positive\na,b\nc,d\ne,f\n")
    with caplog.at_level("WARNING"):
        assert _check(path, build_loss("mnrl").data_rules) == []
    assert caplog.records == []


@pytest.mark.parametrize("blank", ['""', '"   "', '"\t"'])
def test_blank_texts_are_refused_with_count_and_line(tmp_path, blank):
    path = _csv(tmp_path, f"anchor,positive\na,b\n{blank},c\nd,e\nf,{blank}\n")
    with pytest.raises(
        DataError, match=r"2 of 4 rows hold an empty or blank text \(first: .*train.csv:3\)"
    ):
        _check(path, build_loss("mnrl").data_rules)


@pytest.mark.parametrize("loss", ["mnrl", "cosent", "cosine", "simcse"])
def test_one_row_is_refused(tmp_path, loss):
    path = _csv(tmp_path, "sentence1,sentence2,score\na,b,0.5\n")
    with pytest.raises(DataError, match="1 training row.*needs at least 2"):
        _check(path, build_loss(loss).data_rules)


def test_identical_rows_for_in_batch_negatives_are_refused(tmp_path):
    path = _csv(tmp_path, "anchor,positive\n" + "q,p\n" * 16)
    for rules in (build_loss("mnrl").data_rules, build_rerank_loss("mnrl").data_rules):
        with pytest.raises(DataError, match="all 16 rows have the same 'positive' text"):
            _check(path, rules)
    # a loss without in-batch negatives is not concerned (its labels decide)
    scored = _csv(tmp_path, "s1,s2,score\n" + "q,p,0.5\nq,p,0.7\n", "scored.csv")
    assert _check(scored, build_loss("cosine").data_rules) == []


def test_repeated_positives_are_warned_once_with_the_count(tmp_path, caplog):
    path = _csv(tmp_path, "anchor,positive\na,x\nb,y\nc,x\nd,x\n")
    with caplog.at_level("WARNING", logger="bertfamily.data.validate"):
        warnings = _check(path, build_loss("cached_mnrl", matryoshka_dims=(8,)).data_rules)
    assert len(warnings) == 1 and "2 of 4 rows repeat" in warnings[0]
    assert "train.csv:4" in warnings[0]
    assert [r.getMessage() for r in caplog.records] == warnings


@pytest.mark.parametrize(
    "loss, labels, words",
    [
        ("cosine", [0.5, 7.0], r"1 label\(s\) outside \[-1, 1\].*first: 7 at .*:3"),
        ("cosent", [0.4, 0.4], "all 2 labels are 0.4"),
    ],
)
def test_labels_the_loss_cannot_use_are_refused(tmp_path, loss, labels, words):
    body = "".join(f"t{i},u{i},{y}\n" for i, y in enumerate(labels))
    path = _csv(tmp_path, "sentence1,sentence2,score\n" + body)
    with pytest.raises(DataError, match=words):
        _check(path, build_loss(loss).data_rules)


def test_bce_labels_outside_zero_one_are_refused(tmp_path):
    path = _csv(tmp_path, "q,p,label\na,b,0\nc,d,1.5\n")
    with pytest.raises(DataError, match=r"outside \[0, 1\].*bce"):
        _check(path, build_rerank_loss("bce").data_rules)


def test_listnet_queries_with_one_passage(tmp_path):
    one_each = _csv(tmp_path, "q,p,label\na,x,1\nb,y,0\nc,z,1\n")
    with pytest.raises(DataError, match="3 of 3 queries have one passage"):
        _check(one_each, build_rerank_loss("listnet").data_rules)
    some = _csv(tmp_path, "q,p,label\na,x,1\na,y,0\nc,z,1\n", "some.csv")
    warnings = _check(some, build_rerank_loss("listnet").data_rules)
    assert len(warnings) == 1 and "1 of 2 queries have one passage (first: " in warnings[0]
    assert "some.csv:4" in warnings[0]


@pytest.mark.parametrize(
    "task, loss, rows, words",
    [
        ("embedding", "mnrl", "anchor,positive\n" + "q,p\n" * 8, "have the same 'positive'"),
        ("embedding", "cosine", "s1,s2,score\na,b,0.2\nc,d,7\n", "outside [-1, 1]"),
        ("embedding", "mnrl", "anchor,positive\na,b\n,c\n", "empty or blank text"),
        ("rerank", "listnet", "q,p,label\na,x,1\nb,y,0\n", "queries have one passage"),
    ],
)
def test_finetune_refuses_before_training(tiny, tmp_path, task, loss, rows, words):
    """Before: exit 0 after training nothing (loss 0.0 at every step, or the wrong target)."""
    data = _csv(tmp_path, rows)
    out = tmp_path / "run"
    res = CliRunner().invoke(
        app,
        ["finetune", "--task", task, "--loss", loss, "--model", str(tiny),
         "--train", str(data), "-o", str(out), "--max-steps", "1", "--no-progress"],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert any(words in line and line.startswith("error") for line in lines), res.output
    assert "Traceback" not in res.output
    assert not (out / "model").exists()


def test_warnings_reach_the_log_once(tmp_path, caplog):
    path = _csv(tmp_path, "anchor,positive\na,x\nb,x\nc,y\n")
    with caplog.at_level(logging.WARNING, logger="bertfamily.data.validate"):
        _check(path, build_loss("mnrl").data_rules)
    assert len(caplog.records) == 1
    assert json.dumps(caplog.records[0].getMessage())  # one printable line
    assert "\n" not in caplog.records[0].getMessage()


def test_classification_files_warn_about_blank_texts(tmp_path, caplog):
    from bertfamily.data.task_data import TaskData, TaskOptions
    from bertfamily.tokenization import load_tokenizer

    tiny_vocab = tmp_path / "tok"
    tiny_vocab.mkdir()
    (tiny_vocab / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n")
    path = _csv(tmp_path, 'text,label\nhello,pos\n"  ",neg\nhello,neg\n', "cls.csv")
    data = TaskData("classify", load_tokenizer(tiny_vocab), TaskOptions())
    with caplog.at_level("WARNING", logger="bertfamily.data.validate"):
        rows = data.load(path)
    assert len(rows) == 3
    (message,) = [r.getMessage() for r in caplog.records]
    assert "1 of 3 rows hold an empty or blank text (first: " in message
    assert "cls.csv:3" in message
