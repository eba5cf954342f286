"""`bertfamily data split` and the ready-file writers (`bertfamily.data.prepare`), issue 32 item 5:
deterministic, stratified, every format kept, atomic UTF-8 writes, clear errors."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from bertfamily.data.prepare import normalise_conll, split_file, write_labelled_csv
from bertfamily.data.tables import read_conll, read_table
from bertfamily.errors import BertFamilyError, DataError, InputError


def _csv(path: Path, labels: list[str]) -> Path:
    rows = ["text,label"] + [f'"text {i}, with a comma",{lab}' for i, lab in enumerate(labels)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_cli_split_is_stratified_deterministic_and_prints_the_files(cli, tmp_path):
    labels = ["a"] * 50 + ["b"] * 30 + ["c"] * 20  # 100 rows: 10 % is 5, 3 and 2 of each
    src = _csv(tmp_path / "all.csv", labels)
    out = tmp_path / "s"
    result = cli("data", "split", src, "--dev", 0.1, "--test", 0.1, "--seed", 0, "-o", out)
    assert result.exit_code == 0, result.output
    names = ["train.csv", "dev.csv", "test.csv"]
    assert result.stdout.splitlines() == [str(tmp_path / "s" / n) for n in names]
    assert "train 80, dev 10, test 10 (stratified by 'label'; seed 0)" in result.stderr
    parts = {n: read_table(tmp_path / "s" / n) for n in names}
    for n, want in (("train.csv", (40, 24, 16)), ("dev.csv", (5, 3, 2)), ("test.csv", (5, 3, 2))):
        counts = collections.Counter(r.label for r in parts[n])
        assert (counts["a"], counts["b"], counts["c"]) == want
    texts = [r.text for n in names for r in parts[n]]
    assert sorted(texts) == sorted(r.text for r in read_table(src))  # a partition, no repeats
    order = [int(r.text.split()[1].rstrip(",")) for r in parts["train.csv"]]
    assert order != sorted(order)  # shuffled: the input is sorted by label
    assert len({r.label for r in parts["train.csv"][:10]}) > 1
    first = {n: (tmp_path / "s" / n).read_bytes() for n in names}
    assert cli("data", "split", src, "-o", tmp_path / "again").exit_code == 0  # the defaults
    assert {n: (tmp_path / "again" / n).read_bytes() for n in names} == first
    assert cli("data", "split", src, "--seed", 1, "-o", tmp_path / "other").exit_code == 0
    assert (tmp_path / "other" / "test.csv").read_bytes() != first["test.csv"]
    assert not [p for p in (tmp_path / "s").iterdir() if p.name.startswith(".")]  # no temporaries


def test_every_format_is_split_into_files_of_its_own_format(tmp_path):
    # JSONL with class labels: stratified by the key
    rows = [{"text": f"t{i}", "label": "pos" if i % 4 else "neg"} for i in range(40)]
    src = tmp_path / "x.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n", encoding="utf-8")
    res = split_file(src, tmp_path / "j", dev=0.25, test=0.25)
    assert res.counts == {"train": 20, "dev": 10, "test": 10}
    assert res.label_counts["test"] == {"pos": 7, "neg": 3} or res.label_counts["test"] == {
        "neg": 3, "pos": 7,
    }  # fmt: skip
    back = [json.loads(x) for x in (tmp_path / "j" / "test.jsonl").read_text().splitlines()]
    assert all(r in rows for r in back)
    # regression scores: not stratified
    rows = [{"text": f"t{i}", "label": i / 7} for i in range(20)]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert split_file(src, tmp_path / "r").stratified_by is None
    # plain text: non-blank lines
    txt = tmp_path / "x.txt"
    txt.write_text("".join(f"line {i}\n\n" for i in range(20)), encoding="utf-8")
    res = split_file(txt, tmp_path / "t", dev=0.0, test=0.2)
    assert res.counts == {"train": 16, "test": 4} and set(res.paths) == {"train", "test"}
    assert not (tmp_path / "t" / "dev.txt").exists()
    # CoNLL: sentences (tab-only separators read, empty ones written), TSV: rows under the header
    conll = tmp_path / "x.conll"
    conll.write_text("\n\t\n".join(f"w{i}\tB-x\nz\tO" for i in range(10)) + "\n", encoding="utf-8")
    res = split_file(conll, tmp_path / "c", dev=0.1, test=0.1)
    assert res.counts == {"train": 8, "dev": 1, "test": 1}
    got = [s.words for p in res.paths.values() for s in read_conll(p)]
    assert sorted(got) == sorted([f"w{i}", "z"] for i in range(10))
    assert "\t\n" not in (tmp_path / "c" / "train.conll").read_text()
    tsv = tmp_path / "x.tsv"
    tsv.write_text("text\tlabel\n" + "".join(f"a {i}\t{i % 2}\n" for i in range(10)))
    res = split_file(tsv, tmp_path / "v", dev=0.2, test=0.2)
    assert res.stratified_by == "label" and res.counts == {"train": 6, "dev": 2, "test": 2}
    assert (tmp_path / "v" / "dev.tsv").read_text().startswith("text\tlabel\n")


def test_bad_splits_are_clear_errors(cli, tmp_path):
    src = _csv(tmp_path / "few.csv", ["a", "b", "a"])
    for args, message in (
        (["--dev", 0.5, "--test", 0.5], "leave nothing to train on"),
        (["--dev", 1.5], "--dev must be a fraction in [0, 1)"),
        (["--format", "xml"], "--format must be one of"),
    ):
        result = cli("data", "split", src, "-o", tmp_path / "o", *args)
        assert result.exit_code == 2, result.output
        assert message in " ".join(result.output.split())
    result = cli("data", "split", _csv(tmp_path / "two.csv", ["a", "b"]), "-o", tmp_path / "o")
    assert result.exit_code == 2
    assert "holds 2 records: too few to give test, dev and train one each" in result.output
    assert not (tmp_path / "o").exists()  # nothing written
    (tmp_path / "x.txt").write_text("a\nb\nc\nd\n")
    with pytest.raises(InputError, match="no class labels"):
        split_file(tmp_path / "x.txt", tmp_path / "o", stratify=True)
    (tmp_path / "x.dat").write_text("a\n")
    with pytest.raises(InputError, match="pass --format"):
        split_file(tmp_path / "x.dat", tmp_path / "o")
    (tmp_path / "blank.txt").write_text("\n \n")
    with pytest.raises(DataError, match="holds no records"):
        split_file(tmp_path / "blank.txt", tmp_path / "o")
    assert issubclass(DataError, BertFamilyError)


def test_the_ready_writers_read_mixed_encodings_and_tab_separators(tmp_path):
    raw = tmp_path / "raw.csv"
    raw.write_bytes(b'sentiment,confidence,text\r\nneg,0.5,caf\xe9 bad\r\npos,0.9,"a,\rb"\r\n')
    assert write_labelled_csv(raw, tmp_path / "t.csv", text_column="text", label_column="sentiment")
    assert (tmp_path / "t.csv").read_bytes() == b'text,label\ncaf\xc3\xa9 bad,neg\n"a,\rb","pos"\n'
    assert [(r.text, r.label) for r in read_table(tmp_path / "t.csv")] == [
        ("café bad", "neg"), ("a,\rb", "pos"),
    ]  # fmt: skip
    ner = tmp_path / "ner.txt"
    ner.write_bytes(b"a\tO\nParis\tB-loc\n\t\n-DOCSTART-\tO\n\nb\tO  \n")
    assert normalise_conll(ner, tmp_path / "n.conll") == 2
    assert (tmp_path / "n.conll").read_text() == "a\tO\nParis\tB-loc\n\nb\tO\n\n"


def test_the_tweet_csvs_mangled_bytes_become_text_not_mojibake(tmp_path):
    """Issue 46: the fetched tweet CSV's quotes, stored as lossy Mac code page runs, were
    decoded as cp1252 into "Itäó»s" / "GoogleÕ¢_ŠÎ_†¢s"."""
    raw = tmp_path / "raw.csv"
    raw.write_bytes(
        b"sentiment,confidence,text\r\n"
        b"neg,0.5,It\xe4\xf3\xbbs \xe4\xf3\xecsad\xe4\xf3\x9d and "
        b"Google\xd5\xa2_\x8a\xce_\x86\xa2s\r\n"
        b"pos,0.9,\xd5\xa2_\x8a\xce\x81\xd0@user: fun \xf4\xd6\x89_\xf4\xd6\x89 ok \xe4\xf3_\r\n"
        b"pos,0.7,plain caf\xc3\xa9 stays\r\n"
    )
    write_labelled_csv(raw, tmp_path / "t.csv", text_column="text", label_column="sentiment")
    assert [r.text for r in read_table(tmp_path / "t.csv")] == [
        "It\u2019s \u201csad\u201d and Google\u2019s",
        "\u201c@user: fun  ok \u2026",  # the lost emoji run is dropped
        "plain café stays",
    ]
