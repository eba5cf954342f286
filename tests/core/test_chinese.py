"""Chinese BERT on real Chinese data (`bertfamily fetch` resources bert-base-chinese-vocab and
peoples-daily-1998): the tokenizer equals transformers' on the real 21,128-token vocabulary,
the People's Daily derivations (articles, gold words, character-level entities), Chinese
whole-word masking, the pair trace with segment ids 00000111, and the preset's size."""

from __future__ import annotations

import json

import numpy as np
import pytest

import bertfamily as bf
from bertfamily.data.corpora import (
    Sentence,
    bert_units,
    char_bio,
    entity_spans,
    parse_tagged_line,
    read_documents,
    tagged_sentences,
)
from bertfamily.data.tables import read_conll, tokenizer_words
from bertfamily.objectives.masking import MaskingConfig, chinese_word_ids, mask_tokens
from bertfamily.resources.cache import fetch

MIXED = [
    "我爱北京天安门，Hello World! 2024年iPhone15售价５９９９元😀",
    "ＡＰＥＣ会议在 Ｓｅａｔｔｌｅ 举行。",
    "café naïve Ünïcode 中文混排，数字１２３和123，标点！？",
    "　全角空格　与\ttab，还有emoji🎉🇨🇳以及繁體字與異體字",
    "COVID-19疫情期间，WHO发布了新的指南（第3版）。",
]


@pytest.fixture(scope="module")
def vocab_dir():
    return fetch("bert-base-chinese-vocab")


@pytest.fixture(scope="module")
def tok(vocab_dir):
    return bf.load_tokenizer(vocab_dir)


@pytest.fixture(scope="module")
def daily():
    return fetch("peoples-daily-1998")


@pytest.fixture(scope="module")
def corpus_lines(daily):
    lines = (daily / "pretrain.txt").read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line][:2000]


def test_vocabulary_and_special_ids(tok, vocab_dir):
    """The real vocabulary: 21,128 tokens, BERT's special ids, cased, one token a character."""
    assert tok.vocab_size == 21128
    assert (tok.pad_token_id, tok.unk_token_id, tok.cls_token_id) == (0, 100, 101)
    assert (tok.sep_token_id, tok.mask_token_id) == (102, 103)
    assert tok.tokenize("我爱中国") == ["我", "爱", "中", "国"]
    assert tok.convert_tokens_to_ids(["我", "爱", "狗"]) == [2769, 4263, 4318]
    assert tok.tokenize("Ａ") != tok.tokenize("ａ")  # cased, as bert-base-chinese
    lines = (vocab_dir / "vocab.txt").read_text(encoding="utf-8").rstrip("\n").split("\n")
    assert len(lines) == 21128 and sum(x.startswith("##") for x in lines) == 9614


@pytest.mark.slow
def test_tokenizer_equals_transformers(tok, vocab_dir, corpus_lines):
    """ids, offsets and special-token masks equal BertTokenizerFast built from the same files,
    on 2,000 corpus lines and mixed Chinese/English/digit/full-width/emoji text, single and
    paired (truncated at 512 as the checkpoint's model_max_length)."""
    import transformers

    hf = transformers.BertTokenizerFast.from_pretrained(str(vocab_dir))
    texts = corpus_lines + MIXED
    assert len(texts) == 2005
    kw = dict(truncation=True, max_length=512)
    for text in texts:
        ours = tok(text, return_offsets=True, return_special_tokens_mask=True, **kw)
        ref = hf(text, return_offsets_mapping=True, return_special_tokens_mask=True, **kw)
        assert ours["input_ids"][0].tolist() == ref["input_ids"], text
        assert [tuple(o) for o in ours["offset_mapping"][0].tolist()] == [
            tuple(o) for o in ref["offset_mapping"]
        ], text
        assert ours["special_tokens_mask"][0].tolist() == ref["special_tokens_mask"], text
    for a, b in zip(MIXED, corpus_lines[:50]):
        ours, ref = tok(a, b), hf(a, b)
        assert ours["input_ids"][0].tolist() == ref["input_ids"]
        assert ours["token_type_ids"][0].tolist() == ref["token_type_ids"]


def test_bert_units_are_the_tokenizers_words(tok, corpus_lines):
    """The character-level CoNLL words (`bert_units`) are exactly the words the tokenizer (and
    so `EntityTagger`) splits raw text into."""
    for text in corpus_lines[:500] + MIXED:
        assert bert_units(text) == tokenizer_words(tok, text), text


# --------------------------------------------------------------------------- People's Daily
LINE = "中共中央/nt  总书记/n  、/w  国家/n  主席/n  江/nr  泽民/nr  会见/v  克林顿/nr  ，/w  "
LINE += "欧阳/nr  明/nr  在/p  北京/ns  。/w  "


def test_person_split_into_surname_and_given_name_is_one_entity():
    words = parse_tagged_line(LINE)
    text = "".join(w for w, _ in words)
    got = [(k, text[s:e]) for k, s, e in entity_spans(words)]
    assert got == [
        ("ORG", "中共中央"),
        ("PER", "江泽民"),
        ("PER", "克林顿"),
        ("PER", "欧阳明"),
        ("LOC", "北京"),
    ]
    units, tags = char_bio(words)
    assert "".join(units) == text
    assert tags[units.index("江") : units.index("泽") + 2] == ["B-PER", "I-PER", "I-PER"]
    assert tags[:4] == ["B-ORG", "I-ORG", "I-ORG", "I-ORG"] and tags[4] == "O"


def test_run_of_names_is_read_two_words_a_person():
    words = parse_tagged_line("江/nr  泽民/nr  李/nr  鹏/nr  乔/nr  石/nr  与/p  群众/n")
    text = "".join(w for w, _ in words)
    assert [text[s:e] for _, s, e in entity_spans(words)] == ["江泽民", "李鹏", "乔石"]


def test_malformed_line_names_the_place():
    with pytest.raises(ValueError, match=r"f.txt:3: '江泽民' is not a word/tag item"):
        parse_tagged_line("江泽民  发表/v", "f.txt:3")


def test_sentences_split_after_final_punctuation_and_closing_quotes():
    words = parse_tagged_line("他/r  说/v  ：/w  “/w  好/a  。/w  ”/w  我们/r  走/v  ！/w  再见/v")
    texts = ["".join(w for w, _ in s) for s in tagged_sentences(words)]
    assert texts == ["他说：“好。”", "我们走！", "再见"]


@pytest.mark.slow
def test_derived_files(daily):
    """Articles split 9:1, gold words readable as `Sentence.words`, NER CoNLL by article."""
    train = read_documents(daily / "pretrain.jsonl")
    held = read_documents(daily / "heldout.jsonl")
    assert (len(train), len(held)) == (2927, 325)  # 3,252 articles, every 10th held out
    first = train[0][0]
    assert isinstance(first, Sentence) and first.startswith("迈向充满希望的新世纪")
    assert [first[s:e] for s, e in first.words[:3]] == ["迈向", "充满", "希望"]
    assert all(e > s for doc in train[:50] for sent in doc for s, e in sent.words)
    # words cover every character of their sentence, in order
    for sent in (s for doc in train[:50] for s in doc):
        assert "".join(sent[s:e] for s, e in sent.words) == sent
    ner = read_conll(daily / "ner_test.conll")
    tags = {t for s in ner for t in s.tags}
    assert tags == {"O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"}
    held_text = "\n".join(json.loads(x)["text"] for x in open(daily / "heldout.jsonl"))
    assert "".join(ner[0].words) in held_text.split("\n")


# --------------------------------------------------------------------------- masking
def _masked(tok, sentences, words_of, seed=0):
    rng = np.random.default_rng(seed)
    for text in sentences:
        enc = tok.backend.encode(text, add_special_tokens=False)
        ids = np.asarray(enc.ids)
        special = np.zeros(len(ids), dtype=bool)
        wid = chinese_word_ids(text, enc.offsets, special, words=words_of(text))
        res = mask_tokens(
            ids,
            special,
            MaskingConfig(strategy="whole_word"),
            rng,
            vocab_size=tok.vocab_size,
            mask_token_id=tok.mask_token_id,
            word_ids=wid,
            special_ids=tok.all_special_ids,
        )
        yield ids, wid, res


@pytest.mark.slow
@pytest.mark.parametrize("source", ["gold", "jieba"])
def test_whole_word_masking_on_the_corpus(tok, daily, source):
    """Over 300 real sentences: 15 % of the tokens chosen, 80/10/10, no word partly masked;
    gold words come from the corpus, jieba's from its segmentation."""
    docs = read_documents(daily / "pretrain.jsonl")
    sentences = [s for d in docs[:40] for s in d][:300]
    assert len(sentences) == 300
    words_of = (lambda s: s.words) if source == "gold" else (lambda s: None)
    maskable = chosen = to_mask = unchanged = partly = multi = 0
    for ids, wid, res in _masked(tok, sentences, words_of):
        sel = res.labels != -100
        maskable += len(ids)
        chosen += int(sel.sum())
        to_mask += int((res.input_ids[sel] == tok.mask_token_id).sum())
        unchanged += int((res.input_ids[sel] == ids[sel]).sum())
        for w in np.unique(wid):
            c = sel[wid == w]
            partly += int(c.any() and not c.all())
            multi += int(c.all() and len(c) > 1)
    assert partly == 0
    assert multi > 100  # words of several characters were masked as units
    assert abs(chosen / maskable - 0.15) < 0.005
    assert abs(to_mask / chosen - 0.8) < 0.03 and abs(unchanged / chosen - 0.1) < 0.03


def test_gold_and_jieba_words_differ(tok):
    """The gold units are the corpus's, not jieba's: the corpus splits 江泽民 into surname and
    given name, jieba keeps the name whole."""
    words = parse_tagged_line("中共中央/nt  总书记/n  江/nr  泽民/nr")
    text = Sentence("".join(w for w, _ in words), words=[(0, 4), (4, 7), (7, 8), (8, 10)])
    enc = tok.backend.encode(text, add_special_tokens=False)
    special = np.zeros(len(enc.ids), dtype=bool)
    gold = chinese_word_ids(text, enc.offsets, special, words=text.words)
    assert gold.tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 3, 3]
    jieba = chinese_word_ids(text, enc.offsets, special)
    assert jieba.tolist()[-3:] == [jieba[-1]] * 3 and gold.tolist()[-3:] == [2, 3, 3]


def test_pretraining_reads_gold_words(tok, daily):
    """`tokenize_documents` takes word starts from `Sentence.words` when a corpus has them."""
    from bertfamily.objectives.pretraining import tokenize_documents

    docs = read_documents(daily / "pretrain.jsonl")[:1]
    (segments,) = tokenize_documents(docs, tok)
    sent = docs[0][0]
    starts = segments[0].starts
    # 迈向 充满 希望 的 新 世纪: starts at characters 0, 2, 4, 6, 7, 8
    assert starts[:10].tolist() == [1, 0, 1, 0, 1, 0, 1, 1, 1, 0]
    assert sent[:10] == "迈向充满希望的新世纪"


# --------------------------------------------------------------------------- preset, dataflow
def test_preset_size():
    """102,267,648 = BERT-base with a 21,128 × 768 token table (SPEC §1)."""
    from bertfamily.inspect.models import meta_model
    from bertfamily.inspect.params import parameter_table

    config = bf.EncoderConfig.from_preset("bert-base-chinese")
    assert meta_model(config).num_parameters() == 102_267_648
    table = parameter_table("bert-base-chinese")
    rows = {r.name: r.params for r in table.rows}
    assert table.total == 102_267_648
    assert rows["encoder.embeddings.token"] == 16_226_304
    assert rows["encoder.embeddings.segment"] == 1_536
    assert rows["encoder.embeddings.position"] == 393_216


@pytest.mark.slow
def test_dataflow_of_a_sentence_pair(cli):
    """`dataflow --text --text-pair` traces [CLS] 我 爱 你 [SEP] 中 国 [SEP]: segment ids 00000111,
    the three lookups (V×H, 2×H, 512×H) and their sum."""
    r = cli(
        "dataflow",
        "bert-base-chinese",
        "--text",
        "我爱你",
        "--text-pair",
        "中国",
        "--tokenizer",
        "bert-base-chinese-vocab",
        "--json",
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    lk = out["lookups"]
    assert lk["tokens"] == ["[CLS]", "我", "爱", "你", "[SEP]", "中", "国", "[SEP]"]
    assert "".join(map(str, lk["token_type_ids"])) == "00000111"
    assert lk["position_ids"] == list(range(8))
    steps = {s["key"]: s for s in out["steps"]}
    assert steps["encoder.embeddings.token"]["params"] == 21128 * 768
    assert steps["encoder.embeddings.segment"]["params"] == 2 * 768
    assert steps["encoder.embeddings.position"]["params"] == 512 * 768
    assert steps["encoder.embeddings"]["outputs"][0][1] == [1, 8, 768]
    text = cli(
        "dataflow", "bert-base-chinese", "--text", "我爱你", "--text-pair", "中国",
        "--tokenizer", "bert-base-chinese-vocab",
    )  # fmt: skip
    assert "segment ids 00000111" in text.output
    bad = cli("dataflow", "bert-base-chinese", "--text", "我爱你")
    assert bad.exit_code != 0 and "--tokenizer" in bad.output


# --------------------------------------------------------------------------- end to end
def _conll_slice(src, n: int) -> str:
    """The first ``n`` sentences of a CoNLL file (read as text: the file has 1.6 M lines)."""
    with open(src, encoding="utf-8") as f:
        blocks, cur = [], []
        for line in f:
            if line.strip():
                cur.append(line)
            elif cur:
                blocks.append("".join(cur))
                cur = []
                if len(blocks) == n:
                    break
    return "\n".join(blocks)


RAW = [
    "江泽民主席在北京会见了美国总统克林顿。",
    "  新华社上海１月５日电 (记者 王军) 中国人民银行今天宣布降息。",
    "WTO 总干事鲁杰罗昨天抵达香港，1998年访问日本😀。",
]


@pytest.mark.slow
def test_entity_tagger_offsets_on_raw_chinese(tmp_path, daily, vocab_dir):
    """A tiny Chinese model (L=1, H=64) fine-tuned for 80 steps on 100 sentences of ner_train
    that hold entities: on raw, unspaced sentences (with spaces, ASCII, full-width digits and
    an emoji) `EntityTagger`'s entities are ``sentence[start:end]``, trimmed, in order; on
    corpus sentences its (type, start, end) equal the spans of the tags `predict` gives the
    same characters read as CoNLL words (so character index = word index)."""
    torch = pytest.importorskip("torch")
    from bertfamily.data.task_data import TaskOptions
    from bertfamily.pipelines.tasks.ner import EntityTagger, bio_spans
    from bertfamily.recipes.finetune import FinetuneConfig, finetune, predict
    from bertfamily.train import TrainConfig

    blocks = [b for b in _conll_slice(daily / "ner_train.conll", 1000).split("\n\n") if "B-" in b]
    train = tmp_path / "train.conll"
    train.write_text("\n\n".join(blocks[:100]), encoding="utf-8")
    config = bf.EncoderConfig.from_preset(
        "bert-base-chinese",
        num_hidden_layers=1,
        hidden_size=64,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    base = tmp_path / "base"
    bf.build_model(config).save_pretrained(base)
    bf.load_tokenizer(vocab_dir).save_pretrained(base)
    opts = TaskOptions(max_length=64)
    finetune(
        FinetuneConfig("ner", base, train, None, opts, epochs=None),
        TrainConfig(
            output_dir=tmp_path / "run", max_steps=80, batch_size=16, learning_rate=2e-3,
            schedule="constant", warmup_ratio=0.1, save_every=0, log_every=20, progress=False,
        ),
    )  # fmt: skip
    model = tmp_path / "run" / "model"
    tagger = EntityTagger(model, max_length=64)

    for text, ents in zip(RAW, tagger(RAW)):
        last = 0
        for e in ents:
            assert e.text == text[e.start : e.end] and e.text.strip() == e.text, (text, e)
            assert last <= e.start < e.end and e.type in {"PER", "LOC", "ORG"}
            last = e.end

    # training sentences whose characters are their CoNLL words: raw and CoNLL inputs give the
    # same tokens, so the tagger must find exactly the spans of predict's word tags
    sents = [s for s in read_conll(train) if len(s.words) <= 62]
    sents = [s for s in sents if all(len(w) == 1 for w in s.words)][:40]
    texts = ["".join(s.words) for s in sents]
    assert len(texts) == 40
    assert all(bert_units(t) == [(i, i + 1) for i in range(len(t))] for t in texts)
    probe = tmp_path / "probe.conll"
    probe.write_text(
        "\n\n".join("\n".join(f"{w}\t{t}" for w, t in zip(s.words, s.tags)) for s in sents),
        encoding="utf-8",
    )
    preds, metrics = predict("ner", model, probe, opts, labelled=True)
    found = tagger(texts)
    assert sum(map(len, found)) >= 20  # the model does tag entities
    assert metrics["f1"] > 0.3  # ... and many of them right
    for text, ents, p in zip(texts, found, preds):
        assert [(e.type, e.start, e.end) for e in ents] == bio_spans(p["tags"]), text
        assert all(e.text == text[e.start : e.end] for e in ents)


@pytest.mark.slow
def test_chinese_bert_benchmark_quick(tmp_path, daily):
    """`benchmarks/chinese_bert.py --quick` runs the whole path (pretrain with the held-out
    articles as --eval-corpus, fill-mask, both fine-tuning tasks from both starts, the tagger)
    on slices of the real files, and its JSON says what it did."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "result.json"
    subprocess.run(
        [sys.executable, str(root / "benchmarks" / "chinese_bert.py"), "--quick",
         "--work", str(tmp_path / "work"), "--out", str(out)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    r = json.loads(out.read_text(encoding="utf-8"))
    pre = r["pretrain"]
    assert r["mode"] == "quick" and pre["steps"] == 3 and pre["objectives"] == ["mlm", "nsp"]
    held = [json.loads(x)["text"] for x in open(daily / "heldout.jsonl", encoding="utf-8")]
    assert 0 < pre["instances"]["eval"] <= sum(t.count("\n") + 1 for t in held[:4])
    h = pre["heldout"]
    assert h["perplexity"] == pytest.approx(np.exp(h["loss"]))
    assert h["baseline_perplexity"] == pytest.approx(np.exp(h["baseline_loss"]))
    assert r["fill_mask"] and all(
        len(x["top5"]) == len(x["answer"]) and x["masked"].count("[MASK]") == len(x["answer"])
        for x in r["fill_mask"]
    )
    for task, keys in (("sentiment", ("accuracy", "macro_f1")), ("ner", ("precision", "f1"))):
        runs = r["finetune"][task]
        assert runs["pretrained"]["steps"] == runs["random_init"]["steps"] == 3
        for k in keys:
            a, b = runs["pretrained"]["test"][k], runs["random_init"]["test"][k]
            assert 0.0 <= a <= 1.0 and runs["gain"][k] == pytest.approx(a - b, abs=1e-4)
    base = r["finetune"]["sentiment"]["majority_baseline"]
    assert base["label"] in ("positive", "negative") and 0.3 < base["accuracy"] < 0.8
    tagged = r["entity_tagger"]["pretrained"]
    assert [t["sentence"] for t in tagged][:1] == ["江泽民主席在北京会见了美国总统克林顿。"]
    for t in tagged + r["entity_tagger"]["random_init"]:
        assert all(t["sentence"][e["start"] : e["end"]] == e["text"] for e in t["entities"])


def test_pretraining_evaluates_on_the_eval_corpus(tmp_path, tok):
    """`mlm_data(eval_corpus=...)`: every corpus document trains, the held-out instances are
    made of the eval corpus's text only (no random split)."""
    from bertfamily.recipes.common import mlm_data
    from bertfamily.train import TrainConfig
    from bertfamily.train.distributed import DistInfo

    train_docs = [
        "我爱北京。\n天安门很大。",
        "今天下雨了。\n明天晴天。",
        "他们去上海。\n上海很远。",
    ]
    held_docs = ["猫和狗是朋友。\n鱼在水里游。", "山高水长。\n风吹草动。"]
    for name, docs in (("train.jsonl", train_docs), ("held.jsonl", held_docs)):
        lines = [json.dumps({"text": d}, ensure_ascii=False) for d in docs]
        (tmp_path / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    data = mlm_data(
        [tmp_path / "train.jsonl"],
        tok,
        TrainConfig(output_dir=tmp_path / "run", batch_size=2),
        DistInfo(),
        kind="packed",
        max_length=32,
        masking=MaskingConfig(strategy="whole_word"),
        eval_documents=1,
        eval_batches=5,
        eval_corpus=[tmp_path / "held.jsonl"],
    )

    def chars(instances):
        ids = {int(i) for inst in instances for i in inst.input_ids}
        return set(tok.convert_ids_to_tokens(sorted(ids))) - {"[CLS]", "[SEP]"}

    held_chars = set("".join(held_docs)) - {"\n"}
    assert chars(data.eval_instances) == held_chars
    assert chars(data.train_instances) == set("".join(train_docs)) - {"\n"}
