"""K-BERT (Liu et al. 2020): the sentence tree, soft positions and visible matrix against the
paper's worked example, the visible matrix on the encoder's attention mask (no entity = the
plain model exactly), WordNet and TSV triple readers, and --knowledge through fine-tuning."""

from __future__ import annotations

import json

import pytest
import torch

import bertfamily as bf
from bertfamily.data.knowledge import (
    KnowledgeGraph,
    knowledge_row,
    read_triples_tsv,
    read_wordnet,
    sentence_tree,
)
from bertfamily.data.tables import DataError
from bertfamily.data.task_data import pad_batch

pytestmark = pytest.mark.usefixtures("one_thread")

# The paper's Figure 2/3 sentence: "Tim Cook is visiting Beijing now", with the triples
# (Tim Cook, CEO, Apple), (Beijing, capital, China), (Beijing, is_a, City).
SEGMENTS = [["[CLS]"], ["Tim", "Cook"], ["is"], ["visiting"], ["Beijing"], ["now"], ["[SEP]"]]
BRANCHES = {1: [["CEO", "Apple"]], 4: [["capital", "China"], ["is_a", "City"]]}
TRIPLES = [
    ("Tim Cook", "CEO", "Apple"),
    ("Beijing", "capital", "China"),
    ("Beijing", "is_a", "City"),
]


def test_sentence_tree_is_the_papers_worked_example():
    tree = sentence_tree(SEGMENTS, BRANCHES)
    assert tree.tokens == [
        "[CLS]", "Tim", "Cook", "CEO", "Apple", "is", "visiting", "Beijing",
        "capital", "China", "is_a", "City", "now", "[SEP]",
    ]  # fmt: skip
    # soft positions (§3.2, Figure 3): the branch CEO Apple continues from Cook (2) as 3, 4;
    # "is" keeps its sentence position 3; both branches of Beijing (5) are 6, 7; "now" is 6
    assert tree.soft_positions == [0, 1, 2, 3, 4, 3, 4, 5, 6, 7, 6, 7, 6, 7]
    # visible matrix (§3.3, Figure 4), by hand: rows = queries, 1 = may attend
    expected = """
        [CLS] Tim Cook CEO Apple is visiting Beijing capital China is_a City now [SEP]
    [CLS]     1     1    1   0     0  1        1       1       0     0    0    0   1     1
    Tim       1     1    1   1     1  1        1       1       0     0    0    0   1     1
    Cook      1     1    1   1     1  1        1       1       0     0    0    0   1     1
    CEO       0     1    1   1     1  0        0       0       0     0    0    0   0     0
    Apple     0     1    1   1     1  0        0       0       0     0    0    0   0     0
    is        1     1    1   0     0  1        1       1       0     0    0    0   1     1
    visiting  1     1    1   0     0  1        1       1       0     0    0    0   1     1
    Beijing   1     1    1   0     0  1        1       1       1     1    1    1   1     1
    capital   0     0    0   0     0  0        0       1       1     1    0    0   0     0
    China     0     0    0   0     0  0        0       1       1     1    0    0   0     0
    is_a      0     0    0   0     0  0        0       1       0     0    1    1   0     0
    City      0     0    0   0     0  0        0       1       0     0    1    1   0     0
    now       1     1    1   0     0  1        1       1       0     0    0    0   1     1
    [SEP]     1     1    1   0     0  1        1       1       0     0    0    0   1     1
    """
    rows = [line.split()[1:] for line in expected.strip().splitlines()[1:]]
    assert tree.visible.int().tolist() == [[int(v) for v in r] for r in rows]
    assert tree.trunk == [t in ("[CLS]", "Tim", "Cook", "is", "visiting", "Beijing", "now",
                                "[SEP]") for t in tree.tokens]  # fmt: skip


def test_graph_matching_longest_head_and_limits():
    g = KnowledgeGraph(
        TRIPLES + [("Tim", "x", "y"), ("Beijing", "r3", "t3"), ("the", "is_a", "word")],
        max_branches=2,
    )
    m = g.match("Tim Cook is visiting Beijing now".split())
    assert [(a, b, br) for a, b, br in m] == [
        (0, 2, [("CEO", "Apple")]),  # "Tim Cook" beats "Tim"
        (4, 5, [("capital", "China"), ("is_a", "City")]),  # at most 2 branches
    ]
    assert g.match(["the", "the"]) == []  # stop words are never entities


def test_knowledge_row_with_the_real_tokenizer(minilm_tokenizer, tmp_path):
    tsv = tmp_path / "kg.tsv"
    tsv.write_text("# head relation tail\n" + "".join("\t".join(t) + "\n" for t in TRIPLES))
    g = KnowledgeGraph(read_triples_tsv(tsv))
    row = knowledge_row(minilm_tokenizer, "Tim Cook is visiting Beijing now", g, 64)
    tokens = minilm_tokenizer.convert_ids_to_tokens(row["input_ids"])
    assert tokens == [
        "[CLS]", "tim", "cook", "ceo", "apple", "is", "visiting", "beijing",
        "capital", "china", "is", "_", "a", "city", "now", "[SEP]",
    ]  # fmt: skip
    assert row["position_ids"] == [0, 1, 2, 3, 4, 3, 4, 5, 6, 7, 6, 7, 8, 9, 6, 7]
    assert row["attention_mask"].shape == (16, 16) and row["attention_mask"].dtype == torch.bool
    # max_length leaves out branches first; the sentence stays whole
    short = knowledge_row(minilm_tokenizer, "Tim Cook is visiting Beijing now", g, 12)
    assert len(short["input_ids"]) <= 12
    assert minilm_tokenizer.convert_ids_to_tokens(short["input_ids"])[-2:] == ["now", "[SEP]"]
    (tmp_path / "bad.tsv").write_text("a\tb\n")
    with pytest.raises(DataError, match="bad.tsv:1"):
        read_triples_tsv(tmp_path / "bad.tsv")


def tiny_model(layers: int = 2, preset: str = "tiny-bert"):
    torch.manual_seed(0)
    cfg = bf.EncoderConfig.from_preset(
        preset, vocab_size=30522, num_hidden_layers=layers, max_position_embeddings=66
    )
    return bf.build_model(cfg, ["classify"]).eval()


def test_no_matching_entity_is_exactly_the_plain_model(minilm_tokenizer):
    g = KnowledgeGraph(TRIPLES)
    text = "my flight was delayed again today"
    row = knowledge_row(minilm_tokenizer, text, g, 64)
    plain = minilm_tokenizer(text, max_length=64, padding=False, return_tensors=None)
    ids = plain["input_ids"][0] if isinstance(plain["input_ids"][0], list) else plain["input_ids"]
    assert row["input_ids"] == ids
    assert row["position_ids"] == list(range(len(ids)))
    assert bool(row["attention_mask"].all())
    model = tiny_model()
    with torch.no_grad():
        batch = pad_batch([row], 0)
        got = model(**batch)
        want = model(torch.tensor([ids]))
    assert torch.equal(got.logits, want.logits)
    assert torch.equal(got.last_hidden_state, want.last_hidden_state)


def test_visible_matrix_keeps_knowledge_from_the_rest_of_the_sentence(minilm_tokenizer):
    g = KnowledgeGraph(TRIPLES)
    g2 = KnowledgeGraph([("Tim Cook", "CEO", "Microsoft")] + TRIPLES[1:])
    text = "Tim Cook is visiting Beijing now"
    a, b = (knowledge_row(minilm_tokenizer, text, k, 64) for k in (g, g2))
    model = tiny_model(layers=1)  # one layer: a trunk token sees only what the mask allows
    with torch.no_grad():
        ha, hb = (model.encoder(**pad_batch([r], 0)).last_hidden_state[0] for r in (a, b))
    trunk_not_entity = [0, 5, 6, 7, 14, 15]  # [CLS] is visiting beijing now [SEP]
    torch.testing.assert_close(ha[trunk_not_entity], hb[trunk_not_entity], rtol=0, atol=1e-6)
    assert not torch.allclose(ha[1:3], hb[1:3])  # "tim cook" sees its own branch


def test_visibility_matrix_batched_equals_one_by_one_and_naive_mask():
    model = tiny_model(preset="tiny-deberta")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 200, (3, 7), generator=g)
    vis = torch.rand(3, 7, 7, generator=g) > 0.4
    vis |= torch.eye(7, dtype=torch.bool)
    vis[2, :, 5:] = vis[2, 5:, :] = False  # row 2 has 5 tokens, then padding
    with torch.no_grad():
        batched = model.encoder(ids, vis).last_hidden_state
        alone = model.encoder(ids[2:, :5], vis[2:, :5, :5]).last_hidden_state
        ones = model.encoder(ids, torch.ones(3, 7, 7, dtype=torch.long)).last_hidden_state
        plain = model.encoder(ids).last_hidden_state
    torch.testing.assert_close(batched[2, :5], alone[0], rtol=0, atol=1e-5)
    assert torch.equal(ones, plain)  # an all-ones matrix is exactly no mask
    assert not torch.allclose(batched[0], plain[0])


def test_windowed_attention_refuses_a_visibility_matrix():
    cfg = bf.EncoderConfig.from_preset("tiny-longformer")
    model = bf.build_model(cfg).eval()
    ids = torch.randint(5, 90, (1, 6))
    with pytest.raises(ValueError, match="visibility matrix"):
        model(ids, torch.ones(1, 6, 6, dtype=torch.long))


def test_read_wordnet_hand_made_files(tmp_path):
    (tmp_path / "data.noun").write_text(
        "  1 licence header line\n"
        "00000001 03 n 02 dog 0 domestic_dog 0 001 @ 00000002 n 0000 | a dog\n"
        "00000002 03 n 01 canine 0 000 | a canine\n"
    )
    (tmp_path / "index.noun").write_text(
        "  1 licence\ndog n 1 1 @ 1 0 00000001\ncanine n 1 0 1 0 00000002\n"
    )
    for pos in ("verb", "adj", "adv"):
        (tmp_path / f"data.{pos}").write_text("")
        (tmp_path / f"index.{pos}").write_text("")
    triples = list(read_wordnet(tmp_path))
    assert triples == [("dog", "is a", "canine"), ("dog", "synonym", "domestic dog")]


def test_finetune_and_predict_with_knowledge(cli, minilm_dir, tmp_path):
    torch.manual_seed(0)
    cfg = bf.EncoderConfig.from_preset("tiny-bert", vocab_size=30522, max_position_embeddings=64)
    bf.build_model(cfg).save_pretrained(tmp_path / "base")
    bf.load_tokenizer(minilm_dir).save_pretrained(tmp_path / "base")
    (tmp_path / "kg.tsv").write_text("superb\tis a\tgood thing\nawful\tis a\tbad thing\n")
    words = [("superb", "pos"), ("awful", "neg"), ("great", "pos"), ("dreadful", "neg")] * 4
    rows = [{"text": f"the film was {w}", "label": lab} for w, lab in words]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = cli(
        "finetune", "--task", "classify", "--model", tmp_path / "base", "--train",
        tmp_path / "t.jsonl", "--eval", tmp_path / "t.jsonl", "-o", tmp_path / "run",
        "--max-steps", 3, "--batch-size", 4, "--no-progress", "--knowledge", tmp_path / "kg.tsv",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    out = tmp_path / "p.jsonl"
    r = cli(
        "predict", "--task", "classify", "--model", tmp_path / "run" / "best", "-i",
        tmp_path / "t.jsonl", "-o", out, "--knowledge", tmp_path / "kg.tsv",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert len(out.read_text().splitlines()) == len(rows)
