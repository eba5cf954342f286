"""Issue 15, "trust nothing on disk", inputs: bad masks, empty sequences, data files with missing
or out-of-range values, binary files, huge lines, and malformed tokenizer directories each get a
clear error naming what is wrong (and where), never silent garbage or a crash deep inside."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

import bertfamily as bf
from bertfamily import EncoderConfig, build_model
from bertfamily.data.tables import DataError, read_conll, read_table
from bertfamily.data.task_data import TaskData, TaskOptions
from bertfamily.tokenization.tokenizer import (
    CHARS_PER_TOKEN,
    TokenizerFileError,
    TokenizerNotFoundError,
    load_tokenizer,
)


@pytest.fixture(scope="module")
def bert():
    return build_model(EncoderConfig.from_preset("tiny-bert")).eval()


# --- model inputs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [2, -1, 7])
def test_attention_mask_values_other_than_0_1_are_refused(bert, value):
    ids = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match=rf"attention_mask contains {value}\b"):
        bert(ids, torch.tensor([[1, value, 1]]))


@pytest.mark.parametrize("mask", [[[1.0, 0.5, 1.0]], [[1.0, 1.0, 0.0]]])
def test_float_attention_masks_are_refused(bert, mask):
    with pytest.raises(ValueError, match=r"attention_mask must hold integers 0/1.*float32"):
        bert(torch.tensor([[1, 2, 3]]), torch.tensor(mask))


def test_integer_and_bool_masks_agree(bert):
    ids = torch.tensor([[1, 2, 3, 0], [4, 5, 6, 7]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    a = bert(ids, mask).last_hidden_state
    b = bert(ids, mask.bool()).last_hidden_state
    c = bert(ids, mask.int()).last_hidden_state
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(a, c)


def test_empty_sequence_is_a_clear_error(bert):
    with pytest.raises(ValueError, match=r"shape \(2, 0\).*length 0"):
        bert(torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="length 0"):
        bert.encoder(torch.zeros(1, 0, dtype=torch.long), torch.zeros(1, 0, dtype=torch.long))


# --- tables --------------------------------------------------------------------------------------
def test_csv_row_without_label_names_file_line_and_column(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text('text,label\ngood,pos\n"two\nlines",neg\nno label here\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"train\.csv:5: no label \(column 'label'\)"):
        read_table(path)
    # a quoted field over two lines: the row starts on line 3, the next on line 5
    path.write_text('text,label\ngood,pos\n"two\nlines",neg\nbad,\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"train\.csv:5: empty label"):
        read_table(path)
    path.write_text('text,label\ngood,pos\n"two\nlines",neg\n', encoding="utf-8")
    assert [(e.text, e.label, e.line) for e in read_table(path)] == [
        ("good", "pos", 2),
        ("two\nlines", "neg", 3),
    ]


def test_tsv_row_without_text_and_extra_fields(tmp_path):
    path = tmp_path / "d.tsv"
    path.write_text("label\ttext\npos\tfine\n\nneg\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"d\.tsv:4: no text \(column 'text'\)"):
        read_table(path)
    path.write_text("text\tlabel\na\tb\tc\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"d\.tsv:2: 3 fields but the header has 2"):
        read_table(path)


def test_jsonl_missing_or_null_label(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "a", "label": 1}\n\n{"text": "b", "label": null}\n', "utf-8")
    with pytest.raises(DataError, match=r"d\.jsonl:3: no label \(column 'label'\)"):
        read_table(path)
    path.write_text('{"text": "a", "label": 1}\n{"text": "b"}\n', "utf-8")
    with pytest.raises(DataError, match=r"d\.jsonl:2: no label"):
        read_table(path)
    path.write_text('{"text": ["a"], "label": 1}\n', "utf-8")
    with pytest.raises(DataError, match=r"d\.jsonl:1: the text .* must be a string"):
        read_table(path)
    path.write_text("[1, 2]\n", "utf-8")
    with pytest.raises(DataError, match=r"d\.jsonl:1: expected a JSON object"):
        read_table(path)


def test_jsonl_lines_are_editor_lines(tmp_path):
    # U+2028 inside a JSON string is valid JSON; str.splitlines would split the line there
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "a\u2028b", "label": "x"}\r\n{"text": "c"}\n', "utf-8")
    with pytest.raises(DataError, match=r"d\.jsonl:2: no label"):
        read_table(path)
    assert read_table(path, label_column=None)[0].text == "a\u2028b"


def test_binary_file_given_as_csv(tmp_path):
    path = tmp_path / "model.csv"
    path.write_bytes(b"text,label\nok,1\n\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(DataError, match=r"model\.csv:5: byte b'\\x00'.*binary"):
        read_table(path)
    conll = tmp_path / "x.conll"
    conll.write_bytes(b"EU B-ORG\n\x00\x01")
    with pytest.raises(DataError, match=r"x\.conll:2: .*binary"):
        read_conll(conll)


def test_finetune_cli_refuses_a_row_without_label(cli, minilm_dir, tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("text,label\ngood,pos\nbad\n", encoding="utf-8")
    r = cli("finetune", "--task", "classify", "--model", minilm_dir, "--train", path,
            "-o", tmp_path / "run")  # fmt: skip
    assert r.exit_code == 2
    output = " ".join(r.output.split())  # the console wraps lines
    assert "train.csv:3: no label (column 'label')" in output
    assert not (tmp_path / "run" / "model").exists()


def _task(tok, task="classify", **opts):
    return TaskData(task, tok, TaskOptions(max_length=32, **opts))


def test_regression_and_unseen_labels_name_the_line(minilm_tokenizer, tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("text,label\na,0.5\nb,high\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"r\.csv:3: regression label 'high'"):
        _task(minilm_tokenizer, regression=True).load(path)
    path.write_text("text,label\na,0.5\nb,nan\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"r\.csv:3: regression label 'nan' is not a finite"):
        _task(minilm_tokenizer, regression=True).load(path)
    train, dev = tmp_path / "t.csv", tmp_path / "dev.csv"
    train.write_text("text,label\na,pos\nb,neg\n", encoding="utf-8")
    dev.write_text("text,label\na,pos\nb,meh\n", encoding="utf-8")
    data = _task(minilm_tokenizer)
    data.load(train)
    evaluation = TaskData("classify", minilm_tokenizer, data.opts, label_names=data.label_names)
    with pytest.raises(DataError, match=r"dev\.csv:3: label 'meh' was not seen in training"):
        evaluation.load(dev)


@pytest.mark.parametrize(
    "row, message",
    [
        ({"choices": ["a", "b"], "label": 0}, r"c\.jsonl:2: no text .*None"),
        ({"text": "q", "choices": ["a", "b"]}, r"c\.jsonl:2: no label"),
        ({"text": "q", "choices": ["a", "b"], "label": 2}, r"c\.jsonl:2: label 2 is out of range"),
        ({"text": "q", "choices": ["a", "b"], "label": -1}, r"c\.jsonl:2: label -1 is out of"),
        ({"text": "q", "choices": ["a", "b"], "label": "b"}, r"c\.jsonl:2: label 'b' is not"),
        ({"text": "q", "choices": ["a", "b"], "label": 1.5}, r"c\.jsonl:2: label 1\.5 is not"),
        ({"text": "q", "choices": "ab", "label": 0}, r"c\.jsonl:2: no list of choices.*'ab'"),
        ({"text": "q", "choices": [], "label": 0}, r"c\.jsonl:2: no list of choices"),
    ],
)
def test_choice_rows_are_checked(minilm_tokenizer, tmp_path, row, message):
    path = tmp_path / "c.jsonl"
    good = {"text": "q", "choices": ["a", "b"], "label": 1}
    path.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=message):
        _task(minilm_tokenizer, "choice").load(path)


def test_choice_rows_load(minilm_tokenizer, tmp_path):
    path = tmp_path / "c.jsonl"
    rows = [{"text": "q", "choices": ["a", "b", "c"], "label": lab} for lab in (2, "0")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = _task(minilm_tokenizer, "choice").load(path)
    assert [r["labels"] for r in out] == [2, 0]
    assert len(out[0]["input_ids"]) == 3
    with pytest.raises(DataError, match=r"c\.jsonl:1: byte"):
        path.write_bytes(b"\x00{}")
        _task(minilm_tokenizer, "choice").load(path)


# --- huge inputs ----------------------------------------------------------------------------------
def _words(n: int, seed: int = 0) -> str:
    import random

    rng = random.Random(seed)
    vocab = ["the", "quick", "brown", "fox,", "jumps!", "über", "naïve", "日本語", "état-civil",
             "tokenisation", "x" * 30, "y" * 150, "3.14159", "(a)", "[MASK]",
             "e\u0301t\u00e9"]  # fmt: skip
    seps = [" ", " ", " ", "  ", "\n", "\t", " \u00a0 "]
    return "".join(rng.choice(vocab) + rng.choice(seps) for _ in range(n))


@pytest.mark.parametrize("max_length", [16, 128, 512])
def test_character_cut_keeps_the_tokens_of_the_whole_text(minilm_tokenizer, max_length):
    tok = minilm_tokenizer
    texts = [_words(20_000, seed) for seed in range(3)]
    texts.append(("word" + " " * 500) * 600)  # ~500 characters per token: the cut must grow
    texts.append("short text")
    got = tok(texts, max_length=max_length, padding=False, return_tensors=None,
              return_offsets=True, return_truncated=True)  # fmt: skip
    assert got["truncated"] == [1, 1, 1, 1, 0]
    for i, text in enumerate(texts):
        whole = tok.backend.encode(text)
        if len(whole.ids) > max_length:
            expected = whole.ids[: max_length - 1] + [tok.sep_token_id]
            offsets = [list(o) for o in whole.offsets[: max_length - 1]] + [[0, 0]]
        else:
            expected, offsets = whole.ids, [list(o) for o in whole.offsets]
        assert got["input_ids"][i] == expected, i
        assert got["offset_mapping"][i] == offsets, i


def test_character_cut_of_pairs(minilm_tokenizer):
    tok = minilm_tokenizer
    # > 64 x 64 characters, so both are cut (and few enough tokens for the library's own
    # truncation of the whole pair, whose overflowing windows grow as n1 x n2, as reference)
    a, b = _words(800, 1), _words(3, 2)
    assert len(a) > 64 * CHARS_PER_TOKEN
    for first, second in ((a, b), (b, a), (a, _words(800, 3))):
        got = tok(first, second, max_length=64, return_tensors=None)["input_ids"][0]
        whole = tok(first, second, max_length=64, return_tensors=None, truncation=False)
        assert len(whole["input_ids"][0]) > 64  # not cut: here max_length only pads
        tok.backend.enable_truncation(64, strategy="longest_first")
        try:
            expected = tok.backend.encode(first, second).ids
        finally:
            tok.backend.no_truncation()
        assert got == expected


def test_ten_megabyte_line_is_bounded_in_time(minilm_tokenizer):
    tok = minilm_tokenizer
    text = _words(1_000_000)[:10_000_000]
    start = time.perf_counter()
    got = tok([text, "a b"], return_tensors=None, padding=False, return_truncated=True)
    assert time.perf_counter() - start < 2.0
    assert got["truncated"] == [1, 0]
    assert len(got["input_ids"][0]) == tok.model_max_length == 512
    head = text[: 512 * 64]
    head = head[: head.rindex(" ")]
    assert got["input_ids"][0][:511] == tok.backend.encode(head).ids[:511]
    # no whitespace at all: still bounded; WordPiece makes any word over 100 characters [UNK]
    start = time.perf_counter()
    got = tok("a" * 10_000_000, return_tensors=None)["input_ids"][0]
    assert time.perf_counter() - start < 2.0
    assert got == [tok.cls_token_id, tok.unk_token_id, tok.sep_token_id]


def test_ten_megabyte_line_is_bounded_in_memory(minilm_dir):
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(bf.__file__).parents[1])!r})
        import bertfamily as bf
        tok = bf.load_tokenizer({str(minilm_dir)!r})
        tok(["warm up"] * 4)
        text = ("lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 200_000)[:10**7]
        def rss(field):
            for line in open("/proc/self/status"):
                if line.startswith(field):
                    return int(line.split()[1]) // 1024
        base = rss("VmRSS")
        try:
            open("/proc/self/clear_refs", "w").write("5")  # reset the peak to now
        except OSError:
            pass
        for _ in range(3):
            tok([text, text, "short"], return_tensors="np")
            tok.encode(text[:1000])
        print(rss("VmHWM") - base)
        """
    )
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc")
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    extra_mb = int(out.stdout.split()[-1])
    assert extra_mb < 200, out.stdout


def test_token_lengths_of_pipelines_are_bounded(minilm_tokenizer):
    from bertfamily.inference.limits import token_lengths

    start = time.perf_counter()
    lengths = token_lengths(minilm_tokenizer, ["a b c", "word " * 2_000_000], max_length=256)
    assert time.perf_counter() - start < 2.0
    assert lengths == [5, 256]
    assert token_lengths(minilm_tokenizer, []) == []


def test_embedder_reports_truncated_texts(minilm_dir, caplog):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    emb = SentenceEmbedder(minilm_dir)
    with caplog.at_level("INFO", logger="bertfamily.pipelines.embedding.embed"):
        vectors = emb.encode(["short", "word " * 100_000, "also short"])
    assert vectors.shape == (3, emb.dimension)
    assert emb.last_truncated == 1
    assert "1 of 3 texts were longer than" in caplog.text


# --- tokenizer keywords and files ----------------------------------------------------------------
@pytest.mark.parametrize("keyword", ["return_attention_masks", "truncations", "max_len"])
def test_misspelt_tokenizer_keyword_is_a_type_error(minilm_tokenizer, keyword):
    with pytest.raises(TypeError, match=keyword):
        minilm_tokenizer("hello", **{keyword: True})


@pytest.fixture
def wordpiece_dir(minilm_dir, tmp_path):
    out = tmp_path / "tok"
    out.mkdir()
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "config.json"):
        shutil.copy(minilm_dir / name, out / name)
    return out


def test_duplicate_vocab_token_fails_at_load(wordpiece_dir):
    vocab = wordpiece_dir / "vocab.txt"
    lines = vocab.read_text(encoding="utf-8").split("\n")
    original = lines.index("hello")
    assert original != 2000
    lines[2000] = "hello"  # line 2001: "hello" is now listed twice
    vocab.write_text("\n".join(lines), encoding="utf-8")
    first, second = sorted((2000, original))
    with pytest.raises(
        TokenizerFileError,
        match=rf"vocab\.txt: token 'hello' on line {second + 1} is already on line {first + 1}",
    ):
        load_tokenizer(wordpiece_dir)


def test_vocab_read_like_the_library(wordpiece_dir, minilm_tokenizer):
    tok = load_tokenizer(wordpiece_dir)
    assert tok.backend.get_vocab() == minilm_tokenizer.backend.get_vocab()
    text = "Tokenisation of naïve café prices: £3.50!"
    assert tok(text)["input_ids"].tolist() == minilm_tokenizer(text)["input_ids"].tolist()


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("tokenizer.json", "{not json", r"tokenizer\.json is not a tokenizer"),
        ("tokenizer.json", '{"version": "1.0"}', r"tokenizer\.json is not a tokenizer"),
        ("tokenizer_config.json", "{", r"tokenizer_config\.json is not valid JSON"),
        ("tokenizer_config.json", "[1, 2]", r"tokenizer_config\.json must hold a JSON object"),
        ("tokenizer_config.json", '{"model_max_length": "long"}', r"tokenizer_config\.json: "),
        ("tokenizer_config.json", '{"model_max_length": -3}', r"tokenizer_config\.json: "),
        ("tokenizer_config.json", '{"cls_token": 7}', r"tokenizer_config\.json: cls_token"),
        ("special_tokens_map.json", "\xff\xfe", r"special_tokens_map\.json is not valid JSON"),
        ("special_tokens_map.json", '{"pad_token": {"id": 0}}', r"special_tokens_map\.json: pad"),
        ("config.json", '{"type_vocab_size": "two"}', r"config\.json: type_vocab_size"),
        ("vocab.txt", b"\xff\xfe\x00a", r"vocab\.txt is not readable UTF-8"),
        ("vocab.txt", "", r"vocab\.txt lists no tokens"),
    ],
)
def test_malformed_tokenizer_files_name_the_file(wordpiece_dir, name, content, message):
    path = wordpiece_dir / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="latin-1" if "\xff" in content else "utf-8")
    with pytest.raises(TokenizerFileError, match=message) as info:
        load_tokenizer(wordpiece_dir)
    assert isinstance(info.value, ValueError)


def test_malformed_bpe_files_name_them(tmp_path):
    (tmp_path / "vocab.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    with pytest.raises(TokenizerFileError, match=r"vocab\.json \+ .*merges\.txt"):
        load_tokenizer(tmp_path)
    with pytest.raises(TokenizerNotFoundError):
        load_tokenizer(tmp_path / "nothing")


def test_tokenizer_save_is_all_or_nothing(minilm_tokenizer, tmp_path, monkeypatch):
    out = tmp_path / "model"
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"weights")
    minilm_tokenizer.save_pretrained(out)
    assert (out / "model.safetensors").read_bytes() == b"weights"  # kept
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert {"tokenizer.json", "vocab.txt", "tokenizer_config.json"} <= set(before)

    from bertfamily.tokenization import tokenizer as tokenization

    real = tokenization.write_text_atomic

    def fail_on_vocab(path, text):
        if path.name == "vocab.txt":
            raise OSError("disk full")
        real(path, text)

    monkeypatch.setattr(tokenization, "write_text_atomic", fail_on_vocab)
    (out / "tokenizer.json").unlink()
    before.pop("tokenizer.json")
    with pytest.raises(OSError, match="disk full"):
        minilm_tokenizer.save_pretrained(out)
    # nothing of the failed save is visible: no new tokenizer.json, no temporaries
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(os.listdir(tmp_path)) == ["model"]
    monkeypatch.undo()
    minilm_tokenizer.save_pretrained(out)
    again = load_tokenizer(out)
    assert (
        again("hello world")["input_ids"].tolist()
        == minilm_tokenizer("hello world")["input_ids"].tolist()
    )
