"""Corpus readers and the unpacking of the real corpora (on synthetic archives: no network)."""

from __future__ import annotations

import bz2
import json
import shutil
import struct
import subprocess
import zlib

import pytest

from bertfamily.data.corpora import (
    austen_from_rdb,
    parse_rdata_strings,
    read_documents,
    split_sentences,
    wiki_xml_to_documents,
)
from bertfamily.resources import cache as f


def rdata_record(strings):
    """R XDR serialisation (version 3) of a character vector."""
    out = b"X\n" + struct.pack(">iii", 3, 0x040201, 0x030500)
    out += struct.pack(">i", 5) + b"UTF-8"
    out += struct.pack(">ii", 0x10, len(strings))
    for s in strings:
        if s is None:
            out += struct.pack(">ii", 9, -1)
        else:
            b = s.encode()
            out += struct.pack(">ii", 0x00040009, len(b)) + b
    return out


def rdb(*novels):
    data = b""
    for lines in novels:
        rec = rdata_record(lines)
        data += struct.pack(">i", len(rec)) + zlib.compress(rec)
    return data


def test_parse_rdata_strings():
    assert parse_rdata_strings(rdata_record(["EMMA", "", None, "Emma Woodhouse, été"])) == [
        "EMMA",
        "",
        None,
        "Emma Woodhouse, été",
    ]
    with pytest.raises(ValueError, match="XDR"):
        parse_rdata_strings(b"RDX2\n")


def test_austen_from_rdb(tmp_path):
    path = tmp_path / "Rdata.rdb"
    path.write_bytes(
        rdb(
            ["EMMA", "", "CHAPTER I", "", "Emma was rich. She was", "clever."],
            ["PERSUASION", "Chapter 1", "Sir Walter Elliot."],
        )
    )
    novels = austen_from_rdb(path)
    assert [t for t, _ in novels] == ["EMMA", "PERSUASION"]
    assert novels[0][1][-1] == "clever."


def test_austen_extractor_on_a_real_deb_layout(tmp_path):
    if not shutil.which("dpkg-deb"):
        pytest.skip("dpkg-deb not installed")
    res = f.RESOURCES["janeausten"]
    root = tmp_path / "pkg"
    target = root / res.member
    target.parent.mkdir(parents=True)
    target.write_bytes(
        rdb(
            [
                "EMMA",
                "CHAPTER I",
                "",
                "Emma was rich. She was clever.",
                "",
                "CHAPTER II",
                "",
                "Mr. Knightley came. He sat down.",
            ],
            ["PERSUASION", "Chapter 1", "Sir Walter Elliot read."],
        )
    )
    (root / "DEBIAN").mkdir()
    (root / "DEBIAN" / "control").write_text(
        "Package: fake\nVersion: 1\nArchitecture: all\nMaintainer: x <x@y>\nDescription: x\n"
    )
    deb = tmp_path / "fake.deb"
    subprocess.run(["dpkg-deb", "--build", str(root), str(deb)], check=True, capture_output=True)
    dest = tmp_path / "entry"
    dest.mkdir()
    f.KINDS["apt-deb"].extract(deb, res.member, dest)
    docs = read_documents(dest / "austen.txt")
    assert docs == [
        ["Emma was rich.", "She was clever."],
        ["Mr. Knightley came.", "He sat down."],
        ["Sir Walter Elliot read."],
    ]
    assert (dest / "emma.txt").is_file() and (dest / "Rdata.rdb").is_file()


def test_corpus_resources_registered():
    for name, kind in [("janeausten", "apt-deb"), ("gensim-test-data", "pip-wheel-cp311")]:
        r = f.RESOURCES[name]
        assert r.kind == kind and r.kind in f.KINDS and len(r.sha256) == 64 and r.files


def test_read_documents_txt_jsonl(tmp_path):
    txt = tmp_path / "c.txt"
    txt.write_text("a b.\nc d.\n\n\ne f.\n")
    assert read_documents(txt) == [["a b.", "c d."], ["e f."]]
    jl = tmp_path / "c.jsonl"
    jl.write_text(json.dumps({"body": "Mr. Smith came. He sat."}) + "\n")
    assert read_documents(jl, text_field="body", split=True) == [["Mr. Smith came.", "He sat."]]
    with pytest.raises(ValueError, match="no field"):
        read_documents(jl)
    with pytest.raises(ValueError, match="does not exist"):
        read_documents(tmp_path / "missing.txt")


def test_sentence_splitting_keeps_abbreviations():
    assert split_sentences("Mr. Darcy arrived at 10 a.m. on Monday. Elizabeth was out.") == [
        "Mr. Darcy arrived at 10 a.m. on Monday.",
        "Elizabeth was out.",
    ]


def test_wiki_markup_stripped(tmp_path):
    xml = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/"><page><title>Cat</title>
<ns>0</ns><revision><text>{{Infobox animal|name=Cat}}The '''cat''' is a small [[carnivore|carnivorous]] mammal.&lt;ref&gt;{{cite web|title=Cats}}&lt;/ref&gt; It is often kept as a [[pet]] by people in many countries.

== History ==
[[File:Cat.jpg|thumb|A cat]]
Cats were domesticated in the Near East around 7500 BC according to archaeologists.</text>
</revision></page><page><title>Kitty</title><ns>0</ns><revision><text>#REDIRECT [[Cat]]</text>
</revision></page><page><title>Talk:Cat</title><ns>1</ns><revision><text>Some talk text that
is long enough to be kept if it were an article page.</text></revision></page></mediawiki>"""  # noqa: E501
    path = tmp_path / "w.xml.bz2"
    path.write_bytes(bz2.compress(xml.encode()))
    docs = list(wiki_xml_to_documents(path))
    assert [t for t, _ in docs] == ["Cat"]
    text = " ".join(docs[0][1])
    assert text.startswith("The cat is a small carnivorous mammal. It is often kept as a pet")
    assert "Cats were domesticated" in text
    for junk in ("{{", "[[", "cite", "Infobox", "'''", "thumb", "=="):
        assert junk not in text


def test_entity_spans_flow_from_jsonl_to_instances(tmp_path):
    import numpy as np

    from bertfamily.objectives.instances import SpecialIds
    from bertfamily.objectives.masking import MaskingConfig
    from bertfamily.objectives.pretraining import MLMCollator, build_instances, tokenize_documents
    from bertfamily.tokenization.training import train_tokenizer

    text = "Elizabeth Bennet lives at Longbourn House. Mr. Darcy owns Pemberley."
    ents = [[0, 16], [26, 41], [43, 52]]  # "Elizabeth Bennet", "Longbourn House", "Mr. Darcy"
    jl = tmp_path / "c.jsonl"
    jl.write_text("".join(json.dumps({"text": text, "entities": ents}) + "\n" for _ in range(3)))
    docs = read_documents(jl, split=True)
    assert docs[0] == ["Elizabeth Bennet lives at Longbourn House.", "Mr. Darcy owns Pemberley."]
    assert docs[0][0].entities == ((0, 16), (26, 41)) and docs[0][1].entities == ((0, 9),)
    tok = train_tokenizer([text] * 5, "wordpiece", 200, min_frequency=1)
    segs = tokenize_documents(docs, tok)
    assert tok.backend.decode(segs[0][0].ids[slice(*segs[0][0].entities[0])].tolist()) == (
        "elizabeth bennet"
    )
    inst = build_instances(segs, "nsp", 40, SpecialIds(tok.cls_token_id, tok.sep_token_id))
    collate = MLMCollator(
        MaskingConfig(strategy="entity", mlm_probability=0.5),
        vocab_size=tok.vocab_size,
        mask_token_id=tok.mask_token_id,
        pad_token_id=0,
        special_ids=tok.all_special_ids,
    )
    whole = 0
    for seed in range(30):
        b = collate(inst, np.random.default_rng(seed))
        for r, i in enumerate(inst):
            chosen = (b["labels"][r] != -100).numpy()
            for s, e in i.entities:
                assert tok.decode(i.input_ids[s:e].tolist()) in (
                    "elizabeth bennet",
                    "longbourn house",
                    "mr. darcy",
                )
                assert chosen[s:e].all() or not chosen[s:e].any()
                whole += chosen[s:e].all()
    assert whole > 10
