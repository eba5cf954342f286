"""Issue 32: what a new user meets. Output that pipes from every command, plain text in and
predictions out, one numbering, limits from the right source, the right gradient by default.

Every instance runs through the real entry point: ``python -m bertfamily`` as a subprocess
(stdout a pipe, ``COLUMNS`` small), the in-process `cli` runner, or the Python API.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

pytestmark = pytest.mark.usefixtures("one_thread")


def run(*args, columns: int = 20, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m bertfamily ARGS`` with stdout a pipe and a narrow ``COLUMNS``."""
    environ = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS=str(columns), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "bertfamily", *map(str, args)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=environ,
        timeout=600,
    )


@pytest.fixture(scope="module")
def tiny_dir(minilm_dir, tmp_path_factory):
    """A tiny random BERT (H=32, 64 positions) with the real WordPiece tokenizer."""
    import torch

    import bertfamily as bf

    torch.manual_seed(0)
    cfg = bf.EncoderConfig.from_preset("tiny-bert", vocab_size=30522, max_position_embeddings=64)
    path = tmp_path_factory.mktemp("tiny-base")
    bf.build_model(cfg).save_pretrained(path)
    bf.load_tokenizer(minilm_dir).save_pretrained(path)
    return path


LONG_TEXT = "a sentence long enough that a narrow terminal would wrap its json line " * 2


@pytest.fixture(scope="module")
def classifier(tiny_dir, tmp_path_factory):
    """A classify model fine-tuned for two steps (its predictions only need to exist)."""
    from bertfamily.data.task_data import TaskOptions
    from bertfamily.recipes.finetune import FinetuneConfig, finetune
    from bertfamily.train import TrainConfig

    tmp = tmp_path_factory.mktemp("clf")
    rows = [{"text": f"{w} film number {i}", "label": w} for i in range(4) for w in ("good", "bad")]
    train = tmp / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    finetune(
        FinetuneConfig("classify", tiny_dir, train, None, TaskOptions(max_length=16), epochs=None),
        TrainConfig(output_dir=tmp / "run", batch_size=4, max_steps=2, log_every=0, progress=False),
    )
    return tmp / "run" / "model"


# -- 1. output that pipes, from every command ---------------------------------------------------
def test_predict_jsonl_pipes_at_any_width(classifier, tmp_path):
    data = tmp_path / "in.jsonl"
    texts = [LONG_TEXT, "short"]
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    proc = run("predict", "--task", "classify", "--model", classifier, "-i", data)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]  # every line one JSON object
    assert [r["text"] for r in rows] == texts
    assert all(r["label"] in ("good", "bad") and 0.5 <= r["score"] <= 1 for r in rows)


def test_finetune_summary_is_the_only_stdout(tiny_dir, tmp_path):
    rows = ["text,label"] + [f"{'good' if i % 2 else 'bad'} movie {i},{i % 2}" for i in range(8)]
    (tmp_path / "train.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "a-run-directory-with-a-long-name-that-would-wrap"
    proc = run(
        "finetune", "--task", "classify", "--model", tiny_dir, "--train", tmp_path / "train.csv",
        "-o", out, "--batch-size", 4, "--max-steps", 1, "--threads", 1,  # the bar: on stderr
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)  # the whole of stdout is one JSON document
    assert summary["labels"] == ["0", "1"]
    assert summary["model"] == str(out / "model")
    assert "new task head" in proc.stderr


def test_params_and_dataflow_json_pipes_with_format_json(cli, monkeypatch):
    """The documented ``--format json`` (docs/using.md) on params and dataflow, as on models."""
    monkeypatch.setenv("COLUMNS", "20")
    for args in (("params", "bert-tiny"), ("dataflow", "bert-tiny", "--no-compare")):
        result = cli(*args, "--format", "json")
        assert result.exit_code == 0, result.output
        assert isinstance(json.loads(result.stdout), dict)
    assert (
        json.loads(cli("params", "bert-tiny", "--format", "json").stdout)["total"]
        == (json.loads(cli("params", "bert-tiny", "--json").stdout)["total"])
    )


def test_no_command_prints_json_through_a_rich_console():
    """Every JSON of the CLI goes through `cli.common.write_out` (plain stdout)."""
    offenders = []
    for path in sorted((SRC / "bertfamily" / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "print_json"
            ):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


# -- 2. plain text in, predictions out ----------------------------------------------------------
def _jsonl(result) -> list[dict]:
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_predict_classify_reads_a_text_file(cli, classifier, tmp_path):
    from bertfamily.pipelines.tasks.classify import TextClassifier

    (tmp_path / "sentences.txt").write_text("good film number 9\n\nbad film\n", encoding="utf-8")
    rows = _jsonl(cli("predict", "--task", "classify", "--model", classifier,
                      "-i", tmp_path / "sentences.txt"))  # fmt: skip
    assert [(r["line"], r["text"]) for r in rows] == [(1, "good film number 9"), (3, "bad film")]
    clf = TextClassifier(classifier)
    for r in rows:
        (best,) = clf(r["text"], top_k=1)
        assert r["label"] == best[0]["label"] and abs(r["score"] - best[0]["score"]) < 1e-5
    # --format text reads any file name; a text file holds no labels
    (tmp_path / "sentences.dat").write_text("good film\n", encoding="utf-8")
    rows = _jsonl(cli("predict", "--task", "classify", "--model", classifier,
                      "-i", tmp_path / "sentences.dat", "--format", "text"))  # fmt: skip
    assert [r["text"] for r in rows] == ["good film"]
    result = cli("predict", "--task", "classify", "--model", classifier,
                 "-i", tmp_path / "sentences.txt", "--labelled")  # fmt: skip
    assert result.exit_code == 2 and "holds no labels" in result.output
    result = cli("predict", "--task", "classify", "--model", classifier,
                 "-i", tmp_path / "sentences.dat")  # fmt: skip
    assert result.exit_code == 2 and "--format" in result.output


@pytest.fixture(scope="module")
def tagger_dir(tiny_dir, tmp_path_factory):
    """A tiny NER model that has learnt "the city after 'to' is a location"."""
    from bertfamily.data.task_data import TaskOptions
    from bertfamily.recipes.finetune import FinetuneConfig, finetune
    from bertfamily.train import TrainConfig

    tmp = tmp_path_factory.mktemp("ner")
    cities, words = ["paris", "london", "rome", "oslo"], ["we", "flew", "to", "happily"]
    lines = []
    for i, c in enumerate(cities * 3):
        sent = words[: 1 + i % 4] + [c, "today"]
        lines += [f"{w}\t{'B-loc' if w == c else 'O'}" for w in sent] + [""]
    path = tmp / "train.conll"
    path.write_text("\n".join(lines), encoding="utf-8")
    res = finetune(
        FinetuneConfig("ner", tiny_dir, path, path, TaskOptions(max_length=16), epochs=None),
        TrainConfig(
            output_dir=tmp / "run", batch_size=6, max_steps=40, learning_rate=3e-3,
            warmup_ratio=0.0, eval_every=10, log_every=0, progress=False,
        ),
    )  # fmt: skip
    assert res["eval"]["f1"] == 1.0
    return tmp / "run" / "best", path


def test_predict_ner_tags_raw_sentences(cli, tagger_dir, tmp_path):
    from bertfamily.pipelines.tasks.ner import EntityTagger

    model, conll = tagger_dir
    text = "we  flew to rome today"
    (tmp_path / "sentences.txt").write_text(f"{text}\nYork\n", encoding="utf-8")
    result = cli("predict", "--task", "ner", "--model", model, "-i", tmp_path / "sentences.txt")
    rows = _jsonl(result)
    assert "tags not seen" not in result.output and "f1" not in result.output
    assert rows[0]["line"] == 1 and rows[0]["text"] == text
    ents = [(e["type"], e["text"], e["start"], e["end"]) for e in rows[0]["entities"]]
    assert ents == [("loc", "rome", 12, 16)]
    tagged = EntityTagger(model)([text, "York"])
    got = [(e["text"], e["start"], round(e["score"], 5)) for r in rows for e in r["entities"]]
    assert got == [(e.text, e.start, round(e.score, 5)) for t in tagged for e in t]
    # CoNLL: predictions, and metrics only with --labelled
    rows = _jsonl(cli("predict", "--task", "ner", "--model", model, "-i", conll))
    assert "gold" in rows[0] and all("f1" not in r for r in rows)
    # by content whatever the name: CoNLL as .tsv, raw sentences as .tsv
    (tmp_path / "conll.tsv").write_bytes(conll.read_bytes())
    assert _jsonl(cli("predict", "--task", "ner", "--model", model, "-i",
                      tmp_path / "conll.tsv")) == rows  # fmt: skip
    (tmp_path / "raw.tsv").write_text(f"{text}\n", encoding="utf-8")
    (raw,) = _jsonl(cli("predict", "--task", "ner", "--model", model, "-i", tmp_path / "raw.tsv"))
    assert [e["text"] for e in raw["entities"]] == ["rome"]
    result = cli("predict", "--task", "ner", "--model", model, "-i", conll, "--labelled")
    assert result.exit_code == 0 and '"f1": 1.0' in result.output


def test_ner_offsets_index_the_line_as_it_is_in_the_file(cli, tagger_dir, tmp_path):
    model, _ = tagger_dir
    line = "   we flew to rome today  "  # leading spaces: offsets must still index the line
    (tmp_path / "spaced.txt").write_text(f"{line}\n", encoding="utf-8")
    (row,) = _jsonl(
        cli("predict", "--task", "ner", "--model", model, "-i", tmp_path / "spaced.txt")
    )
    assert row["text"] == line
    (ent,) = row["entities"]
    assert (ent["text"], ent["start"], ent["end"]) == ("rome", 14, 18)
    assert line[ent["start"] : ent["end"]] == "rome"


def test_predict_qa_and_choice_read_tab_separated_text(cli, tiny_dir, tmp_path):
    import bertfamily as bf
    from bertfamily.pipelines.tasks.qa import QuestionAnswerer

    for head in ("qa", "choice"):
        bf.from_pretrained(tiny_dir, heads=[head], new_heads=True).save_pretrained(tmp_path / head)
        bf.load_tokenizer(tiny_dir).save_pretrained(tmp_path / head)
    context = "the cat sat on the mat in paris"
    (tmp_path / "qa.txt").write_text(f"where is the cat?\t{context}\n", encoding="utf-8")
    (row,) = _jsonl(cli("predict", "--task", "qa", "--model", tmp_path / "qa",
                        "-i", tmp_path / "qa.txt"))  # fmt: skip
    (ref,) = QuestionAnswerer(tmp_path / "qa", max_length=64, doc_stride=21)(
        "where is the cat?", context
    )
    assert (row["answer"], row["start"], row["end"]) == (ref.text, ref.start, ref.end)
    assert context[row["start"] : row["end"]] == row["answer"]
    (tmp_path / "c.txt").write_text("the sky is\tblue\tgreen cheese\n\ngrass is\tgreen\tloud\n")
    rows = _jsonl(cli("predict", "--task", "choice", "--model", tmp_path / "choice",
                      "-i", tmp_path / "c.txt"))  # fmt: skip
    assert [r["line"] for r in rows] == [1, 3]
    assert all(r["label"] in (0, 1) and 0.5 <= r["score"] <= 1 for r in rows)
    # any name: read by its content (issue 46: a .tsv was taken for SQuAD JSON)
    for name in ("qa.tsv", "qa.text", "questions"):
        (tmp_path / name).write_text(f"where is the cat?\t{context}\n", encoding="utf-8")
        (same,) = _jsonl(cli("predict", "--task", "qa", "--model", tmp_path / "qa",
                             "-i", tmp_path / name))  # fmt: skip
        assert same == row
    (tmp_path / "bad.tsv").write_text("no tab on this line\n", encoding="utf-8")
    bad = cli("predict", "--task", "qa", "--model", tmp_path / "qa", "-i", tmp_path / "bad.tsv")
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    assert "SQuAD JSON" in bad.output and "question TAB context" in bad.output


# -- 4. one numbering ---------------------------------------------------------------------------
def test_search_corpus_and_index_number_a_hit_by_its_line(cli, minilm_dir, tmp_path):
    corpus = tmp_path / "corpus.txt"
    lines = ["", "The cat sat on the mat.", "", "   ", "Stock markets fell sharply today.", ""]
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert cli("index", "build", "--corpus", corpus, "-o", tmp_path / "idx",
               "--model", minilm_dir).exit_code == 0  # fmt: skip
    found = {}
    for where in (("--corpus", corpus), ("--index", tmp_path / "idx")):
        result = cli("search", "a cat", "markets", *where, "-k", "5", "--format", "jsonl",
                     "--model", minilm_dir)  # fmt: skip
        rows = _jsonl(result)
        key = "line" if where[0] == "--corpus" else "id"
        found[where[0]] = [(r["query_number"], r["rank"], r[key], r["text"]) for r in rows]
        assert all(r["text"].strip() for r in rows)  # blank lines are never hits
    assert found["--corpus"] == found["--index"]
    assert found["--corpus"][0] == (1, 1, 2, "The cat sat on the mat.")
    assert found["--corpus"][2] == (2, 1, 5, "Stock markets fell sharply today.")
    assert len(found["--corpus"]) == 4  # two non-blank lines per query
    for line, text in ((2, "The cat sat on the mat."), (5, "Stock markets fell sharply today.")):
        assert lines[line - 1] == text  # "line" is the editor's line number
    # the table shows the same numbers
    table = cli("search", "markets", "--index", tmp_path / "idx", "--model", minilm_dir).stdout
    cells = [row.replace("│", " ").split() for row in table.splitlines() if "│" in row]
    assert ["1", "5", "Stock"] == [cells[0][0], *cells[0][2:4]]  # rank 1, line 5
    # a plain text corpus added to an index numbers by line too: a clash is an error
    result = cli("index", "add", "--index", tmp_path / "idx", "--corpus", corpus,
                 "--model", minilm_dir)  # fmt: skip
    assert result.exit_code == 2 and "line 2 is already an id" in " ".join(result.output.split())


def test_semantic_search_api_never_returns_blank_entries(minilm_dir):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder, semantic_search

    emb = SentenceEmbedder(minilm_dir)
    (hits,) = semantic_search(emb, ["cats"], ["", "a cat", " \t", "stocks"], top_k=4)
    assert [(h.index, h.text) for h in hits] == [(1, "a cat"), (3, "stocks")]


# -- 6. limits from the right source ------------------------------------------------------------
def test_pipelines_take_their_limits_from_a_64_position_model(tiny_dir, tmp_path):
    """tiny_dir: 64 positions, a tokenizer whose model_max_length is MiniLM's 512."""
    import bertfamily as bf
    from bertfamily.pipelines.tasks.classify import TextClassifier
    from bertfamily.pipelines.tasks.fill_mask import FillMask
    from bertfamily.pipelines.tasks.ner import EntityTagger
    from bertfamily.pipelines.tasks.qa import QuestionAnswerer

    tok = bf.load_tokenizer(tiny_dir)
    assert tok.model_max_length == 512
    for head in ("qa", "classify", "tokens", "mlm"):
        model = bf.from_pretrained(tiny_dir, heads=[head], new_heads=True)
        model.save_pretrained(tmp_path / head)
        tok.save_pretrained(tmp_path / head)
    context = " ".join(f"word{i % 7} city" for i in range(40))
    question = "which city is it?"
    n = len(tok.tokenize(question)) + len(tok.tokenize(context)) + 3
    assert n > 64
    qa = QuestionAnswerer(tmp_path / "qa")  # transformers' default windows: 384, stride 128
    assert qa.max_length == 64 and qa.window["doc_stride"] == 21
    (a,) = qa(question, context)
    assert context[a.start : a.end] == a.text
    clf = TextClassifier(tmp_path / "classify")
    assert clf.max_length == 64 and len(clf([context])) == 1
    tagger = EntityTagger(tmp_path / "tokens")
    assert tagger.max_length == 64 and len(tagger([context])) == 1
    with pytest.raises(ValueError, match=r"max_length=100 must lie in \[1, 64\]"):
        TextClassifier(tmp_path / "classify", max_length=100)
    with pytest.raises(ValueError, match="more than 64 tokens"):
        FillMask(tmp_path / "mlm")(context + " [MASK]")


def test_predict_qa_on_a_64_position_model_with_the_cli_defaults(cli, tiny_dir, tmp_path):
    import bertfamily as bf

    bf.from_pretrained(tiny_dir, heads=["qa"], new_heads=True).save_pretrained(tmp_path / "qa")
    bf.load_tokenizer(tiny_dir).save_pretrained(tmp_path / "qa")
    context = " ".join(f"word{i % 7} city" for i in range(40))
    (tmp_path / "q.txt").write_text(f"which city?\t{context}\n", encoding="utf-8")
    # --max-length defaults to 128: cut to the model's 64
    (row,) = _jsonl(cli("predict", "--task", "qa", "--model", tmp_path / "qa", "-i",
                        tmp_path / "q.txt"))  # fmt: skip
    assert context[row["start"] : row["end"]] == row["answer"]


# -- 3. schedules that match the budget ---------------------------------------------------------
def test_time_budget_plans_the_schedule_for_the_steps_that_fit(tmp_path):
    import time

    import torch

    from bertfamily.train import TrainConfig, Trainer

    model = torch.nn.Linear(2, 1)

    def slow_loss(m, batch):
        time.sleep(0.15)
        return m(batch).pow(2).mean(), {}

    # the budget is the whole run's (issue 46): 1 s of it is kept for loss.png (`PLOT_S`)
    cfg = TrainConfig(output_dir=tmp_path / "a", max_steps=1000, max_time_s=2.5, learning_rate=1.0,
                      warmup_ratio=0.1, log_every=1, progress=False, device="cpu")  # fmt: skip
    summary = Trainer(model, slow_loss, [torch.ones(1, 2)], cfg).train()
    assert summary["stopped"] == "time"
    assert 6 <= summary["planned_steps"] <= 14, summary  # ~ (2.5 - 1) s / 0.15 s, not 1000
    logged = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    lrs = [r["lr"] for r in logged if r["split"] == "train"]
    assert lrs[:3] == pytest.approx([0.01, 0.02, 0.03])  # warm-up planned for 1000 steps
    # from step 4 on: the plan for the steps that fit, decaying to ~0 at its end (non-increasing:
    # on a loaded machine the steps after the plan can be faster than the first ones, and the
    # steps past the plan's end run at its final rate, 0)
    assert lrs[3] > 0.5 and all(a >= b for a, b in zip(lrs[3:], lrs[4:])) and lrs[-1] < 0.35
    assert lrs[4] < lrs[3]
    # a run that stops in warm-up says so
    cfg = TrainConfig(output_dir=tmp_path / "b", max_steps=1000, max_time_s=1.5, warmup_steps=100,
                      log_every=1, progress=False, device="cpu")  # fmt: skip
    summary = Trainer(torch.nn.Linear(2, 1), slow_loss, [torch.ones(1, 2)], cfg).train()
    assert summary["stopped"] == "time" and summary["step"] < 10
    assert "before the learning-rate warm-up ended (step 100)" in summary["notes"][0]


def test_finetune_with_a_time_budget_and_a_model_that_learnt_nothing(cli, tiny_dir, tmp_path):
    rows = ["text,label"] + [f"{'good' if i % 4 else 'bad'} movie {i},{'pos' if i % 4 else 'neg'}"
                             for i in range(400)]  # fmt: skip
    (tmp_path / "train.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "dev.csv").write_text("\n".join(rows[:9]) + "\n")
    proc = run(
        "finetune", "--task", "classify", "--model", tiny_dir, "--train", tmp_path / "train.csv",
        "--eval", tmp_path / "dev.csv", "-o", tmp_path / "run", "--batch-size", 4,
        "--max-time", 4, "--lr", 1e-9, "--no-progress", "--threads", 1,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    # 3 epochs of 100 steps did not fit in 4 s in all: planned for fewer, or (on a busy
    # machine, the budget spent before the speed was measured) stopped by the clock
    assert summary["steps"] < 300
    assert summary["planned_steps"] < 300 or summary["stopped"] == "time", summary
    assert any("no better than always predicting the majority class 'pos'" in n
               for n in summary["notes"])  # fmt: skip
    stderr = " ".join(proc.stderr.split())
    assert stderr.count("no better than always predicting the majority class") == 1  # once


# -- 9. first use says what it does -------------------------------------------------------------
def test_params_names_the_trunk_by_what_it_holds_and_dataflow_explains_its_marks():
    proc = run("params", "distilbert-base", "--head", "mlm", columns=100)
    assert proc.returncode == 0, proc.stderr
    assert "trunk (base model, no pooler)" in proc.stdout and "+ pooler" not in proc.stdout
    proc = run("params", "bert-base", "--head", "classify", columns=100)
    assert "trunk (base model + pooler)" in proc.stdout
    proc = run("dataflow", "albert-base", columns=100)
    assert proc.returncode == 0, proc.stderr
    assert "≠" in proc.stdout
    text = " ".join(proc.stdout.split())
    assert "≠: only sizes differ from bert-base" in text
    assert "△: the structure differs from bert-base" in text
