"""Tables mean what they say (#34 item 6): CSV follows the standard dialect (RFC 4180: quoted
fields hold the delimiter, quotes doubled) with a clear error for what it is not; labels are
stripped (" pos" is "pos") and validated (a label seen once among thousands, labels differing
only in case are reported); fine-tuning prints the label set before it trains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertfamily.data.tables import read_table
from bertfamily.data.task_data import TaskData, TaskOptions, label_report
from bertfamily.errors import DataError

pytestmark = pytest.mark.usefixtures("one_thread")


def _csv(tmp_path: Path, body: str, name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return path


def test_quoted_fields_hold_the_delimiter_quotes_and_line_breaks(tmp_path):
    # the instance: these rows became extra classes
    path = _csv(
        tmp_path,
        'text,label\n"good, very good",pos\n"she said ""fine""",pos\n"two\nlines",neg\nplain,neg\n',
    )
    rows = [(e.text, e.label, e.line) for e in read_table(path)]
    assert rows == [
        ("good, very good", "pos", 2),
        ('she said "fine"', "pos", 3),
        ("two\nlines", "neg", 4),
        ("plain", "neg", 6),
    ]
    tsv = _csv(tmp_path, 'text\tlabel\n"a\ttab"\tpos\n', "t.tsv")
    assert [(e.text, e.label) for e in read_table(tsv)] == [("a\ttab", "pos")]


@pytest.mark.parametrize(
    "body, words",
    [
        ('text,label\nfine, "pos"\n', r"""t.csv:2: field 'label' is ' "pos"': a space before"""),
        (
            'text,label\n"fine,pos\nbad,neg\n',
            "t.csv:2: a quoted field starting on this line is never closed",
        ),  # fmt: skip
        ('text,label\nok,neg\n"fine"x,pos\n', r"t.csv:3: not valid CSV: ',' expected after '\"'"),
        ('text,label\n"a, b",c,pos\n', "t.csv:2: 3 fields but the header has 2"),
    ],
)
def test_what_the_dialect_does_not_allow_is_one_clear_error(tmp_path, body, words):
    with pytest.raises(DataError, match=words) as info:
        read_table(_csv(tmp_path, body))
    assert "\n" not in str(info.value)


def test_labels_are_stripped_in_every_format(tmp_path, minilm_tokenizer):
    # " pos" and "pos" were two classes
    csv_path = _csv(tmp_path, "text,label\ngood, pos\nfine,pos \nbad,neg\n")
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text(
        "".join(json.dumps(r) + "\n" for r in (
            {"text": "good", "label": " pos"}, {"text": "bad", "label": "neg\t"},
            {"text": "both", "label": [" pos", "neg "]},
        )), encoding="utf-8",
    )  # fmt: skip
    assert [e.label for e in read_table(csv_path)] == ["pos", "pos", "neg"]
    assert [e.label for e in read_table(jsonl)] == ["pos", "neg", ["pos", "neg"]]
    data = TaskData("classify", minilm_tokenizer, TaskOptions(max_length=16))
    data.load(csv_path)
    assert data.label_names == ("neg", "pos") and data.label_counts == {"neg": 1, "pos": 2}


def test_a_label_seen_once_among_thousands_is_reported(tmp_path, minilm_tokenizer):
    lines = ["text,label"] + [f"row {i},{'pos' if i % 2 else 'neg'}" for i in range(1_500)]
    lines[700] = "row 699,poss"  # a typo: one row in 1,500
    lines[900] = "row 899,Neg"  # differs from "neg" only in case
    path = _csv(tmp_path, "\n".join(lines) + "\n")
    data = TaskData("classify", minilm_tokenizer, TaskOptions(max_length=8))
    data.load(path)
    assert data.label_counts == {"Neg": 1, "neg": 750, "pos": 748, "poss": 1}
    notes = " | ".join(data.label_notes)
    assert f"{path}:701: label 'poss' is seen once among 1,500 rows" in notes
    assert f"{path}:901: label 'Neg' is seen once" in notes
    assert "differ only in case are separate classes: 'Neg' (1 rows" in notes
    counts, few = label_report([("a", 1), ("b", 2), ("b", 3)], 3, path)  # a small table
    assert counts == {"a": 1, "b": 2} and few == []


@pytest.fixture(scope="module")
def tiny_dir(minilm_dir, tmp_path_factory):
    from helpers import save_tiny

    return save_tiny(tmp_path_factory.mktemp("dialect") / "tiny", minilm_dir)


def test_finetune_prints_the_label_set_before_training(tiny_dir, tmp_path, monkeypatch, cli):
    import sys

    from bertfamily.train import loop

    path = _csv(tmp_path, 'text,label\n"good, very good", pos\nbad,neg\nfine,pos\n')
    printed_before_training: list[str] = []
    real_train = loop.Trainer.train

    def train(self):  # what the command line had written to stderr when training started
        printed_before_training.append(sys.stderr.buffer.getvalue().decode())
        return real_train(self)

    monkeypatch.setattr(loop.Trainer, "train", train)
    result = cli("finetune", "--task", "classify", "--model", tiny_dir, "--train", path,
                 "-o", tmp_path / "run", "--max-steps", 1, "--max-length", 16)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert len(printed_before_training) == 1
    assert "labels (2): neg (1), pos (2)" in " ".join(printed_before_training[0].split())
    summary = json.loads((tmp_path / "run" / "final_metrics.json").read_text())
    assert summary["label_counts"] == {"neg": 1, "pos": 2}
