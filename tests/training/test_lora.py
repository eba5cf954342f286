"""LoRA adapters in PEFT's format on our encoders: an adapter made by ``peft`` on a tiny random
BERT saved by transformers gives, merged and unmerged, the hidden states of ``peft``'s own
``PeftModel`` (≤ 1e-5), on `from_pretrained`, `SentenceEmbedder` (against
sentence-transformers' ``load_adapter``) and ``embed --adapter``; ``finetune --lora`` trains the
adapter's matrices only and writes a directory ``PeftModel.from_pretrained`` loads with our
outputs; mismatched adapters and other PEFT methods are refused with the keys named."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from bertfamily.checkpoints.adapters import LoraSpec
from bertfamily.errors import CheckpointError, InputError, ModelDirectoryError
from bertfamily.modules.lora import LoraLinear
from bertfamily.pipelines.embedding.embed import SentenceEmbedder
from bertfamily.pretrained import from_pretrained
from helpers import make_tiny

peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")
st = pytest.importorskip("sentence_transformers")

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["the cat sat on a mat", "a dog ran far away", "red car", "big small tree " * 20]
WORDS = "the cat sat on a mat dog ran far away red blue car fast slow big small tree".split()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A tiny random BERT (H=32, L=2, I=37): a sentence-transformers directory whose weights
    transformers saved (`helpers.make_tiny`)."""
    return make_tiny(tmp_path_factory.mktemp("tiny"))


def _peft_adapter(base: Path, out: Path, seed: int = 0, **lora) -> torch.nn.Module:
    """An adapter made and saved by peft on ``base`` (random, non-zero B); returns the
    PeftModel in eval mode."""
    torch.manual_seed(seed)
    model = transformers.BertModel.from_pretrained(base)
    config = peft.LoraConfig(init_lora_weights=False, **lora)
    peft_model = peft.get_peft_model(model, config)
    peft_model.save_pretrained(out)
    return peft_model.eval()


def _inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 40, (3, 7), generator=g)
    mask = torch.ones(3, 7, dtype=torch.long)
    mask[1, 4:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _assert_hidden_equal(ours, theirs) -> None:
    batch = _inputs()
    keep = batch["attention_mask"].bool()
    with torch.no_grad():
        a = ours.encoder(**batch).last_hidden_state
        b = theirs(**batch).last_hidden_state
    assert (b - a)[keep].abs().max().item() <= 1e-5


@pytest.fixture(scope="module")
def adapter(tiny, tmp_path_factory):
    """(directory, PeftModel) of a LoRA adapter on query, value and every dense layer."""
    out = tmp_path_factory.mktemp("adapter")
    model = _peft_adapter(tiny, out, r=4, lora_alpha=8, target_modules=["query", "value", "dense"])
    return out, model


@pytest.mark.parametrize("merge", [True, False])
def test_adapter_equals_peft(tiny, adapter, merge):
    directory, peft_model = adapter
    base = from_pretrained(tiny)
    ours = from_pretrained(tiny, adapter=directory, merge=merge)
    lora = [m for m in ours.modules() if isinstance(m, LoraLinear)]
    assert len(lora) == (0 if merge else 2 * 4 + 1)  # per layer: qkv, out, up, down; pooler
    _assert_hidden_equal(ours, peft_model)
    with torch.no_grad():  # the adapter does change the outputs
        adapted = ours.encoder(**_inputs()).last_hidden_state
        moved = adapted - base.encoder(**_inputs()).last_hidden_state
    assert moved.abs().max() > 1e-2


def test_rslora_rank_and_alpha_patterns_equal_peft(tiny, tmp_path):
    peft_model = _peft_adapter(
        tiny,
        tmp_path,
        seed=3,
        r=4,
        lora_alpha=6,
        target_modules=["query", "key", "value"],
        use_rslora=True,
        rank_pattern={"key": 2},
        alpha_pattern={"value": 3},
    )
    for merge in (True, False):
        _assert_hidden_equal(from_pretrained(tiny, adapter=tmp_path, merge=merge), peft_model)


@pytest.mark.parametrize("merge", [True, False])
def test_a_fused_projection_stored_interleaved_equals_peft(hf_checkpoint, tmp_path, merge):
    """DeBERTa's ``in_proj`` holds Q, K, V interleaved per head; ours holds [Q; K; V]: the
    adapter's B rows must be placed by the key table's own transform."""
    base, _ = hf_checkpoint("deberta", "DebertaModel")
    torch.manual_seed(0)
    model = transformers.DebertaModel.from_pretrained(base)
    config = peft.LoraConfig(
        r=3, lora_alpha=5, target_modules=["in_proj", "output.dense"], init_lora_weights=False
    )
    peft_model = peft.get_peft_model(model, config).eval()
    peft_model.save_pretrained(tmp_path)
    batch = _inputs()
    ours = from_pretrained(base, adapter=tmp_path, merge=merge)
    with torch.no_grad():
        a = ours.encoder(**batch).last_hidden_state
        b = peft_model(**batch).last_hidden_state
    assert (b - a)[batch["attention_mask"].bool()].abs().max().item() <= 1e-5


def test_sentence_embedder_and_cli_equal_sentence_transformers(tiny, adapter, cli, tmp_path):
    directory, _ = adapter
    reference = st.SentenceTransformer(str(tiny), device="cpu")
    reference.load_adapter(str(directory))
    theirs = reference.encode(TEXTS)
    for merge in (True, False):
        ours = SentenceEmbedder(tiny, adapter=directory, merge=merge).encode(TEXTS)
        np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)
    out = tmp_path / "v.npy"
    res = cli("embed", *TEXTS, "--model", tiny, "--adapter", directory, "-o", out)
    assert res.exit_code == 0, res.output
    np.testing.assert_allclose(np.load(out), theirs, atol=1e-5, rtol=0)
    plain = SentenceEmbedder(tiny).encode(TEXTS)
    assert np.abs(plain - theirs).max() > 1e-3


def test_real_minilm_with_a_peft_adapter_equals_sentence_transformers(minilm_dir, tmp_path):
    _peft_adapter(
        minilm_dir, tmp_path, seed=5, r=4, lora_alpha=4, target_modules=["query", "value"]
    )
    reference = st.SentenceTransformer(str(minilm_dir), device="cpu")
    reference.load_adapter(str(tmp_path))
    ours = SentenceEmbedder(minilm_dir, adapter=tmp_path).encode(TEXTS)
    np.testing.assert_allclose(ours, reference.encode(TEXTS), atol=1e-5, rtol=0)


def _train(cli, tiny: Path, data: Path, out: Path, *extra: str):
    res = cli(
        "finetune", "--task", "embedding", "--model", tiny, "--train", data, "-o", out,
        "--eval", data.with_suffix(".jsonl"), "--eval-every", "2",
        "--max-steps", "3", "--batch-size", "4", "--lr", "1e-2", "--no-progress",
        "--threads", "1", "--lora", "--lora-r", "4", "--lora-alpha", "8",
        "--lora-targets", "query,value,intermediate.dense", *extra,
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_finetune_lora_trains_the_adapter_only_and_peft_loads_it(tiny, cli, tmp_path):
    rng = np.random.default_rng(0)
    data = tmp_path / "pairs.csv"
    rows = [",".join(" ".join(rng.choice(WORDS, 4)) for _ in "ab") for _ in range(16)]
    data.write_text("anchor,positive\n" + "\n".join(rows) + "\n")
    scored = [{"sentence1": r.split(",")[0], "sentence2": r.split(",")[1], "score": i / 16}
              for i, r in enumerate(rows)]  # fmt: skip
    data.with_suffix(".jsonl").write_text("".join(json.dumps(r) + "\n" for r in scored))
    _train(cli, tiny, data, tmp_path / "run")
    saved = tmp_path / "run" / "model"
    for sub in ("model", "best"):  # best/: the trainer's model state loaded back, then gone
        files = sorted(p.name for p in (tmp_path / "run" / sub).iterdir())
        assert files == ["adapter_config.json", "adapter_model.safetensors"]
    config = json.loads((saved / "adapter_config.json").read_text())
    assert (config["peft_type"], config["r"], config["lora_alpha"]) == ("LORA", 4, 8.0)
    tensors = load_file(saved / "adapter_model.safetensors")
    assert len(tensors) == 2 * 2 * 3  # A and B of query, value, intermediate.dense, 2 layers
    assert all(t.abs().max() > 0 for k, t in tensors.items() if "lora_B" in k)  # B trained
    # only the adapter changed: every other weight is the base model's, bit for bit
    state = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)["model"]
    base = SentenceEmbedder(tiny).state_dict()
    assert {k for k in state if ".lora." in k} and set(base) == {
        k for k in state if ".lora." not in k
    }
    for key, tensor in base.items():
        assert torch.equal(state[key], tensor), key
    # peft loads it onto the transformers model with our outputs
    peft_model = peft.PeftModel.from_pretrained(
        transformers.BertModel.from_pretrained(tiny), saved
    ).eval()
    _assert_hidden_equal(from_pretrained(tiny, adapter=saved, merge=False), peft_model)
    # --lora-merge: the same run saved as a whole model with the update folded in
    _train(cli, tiny, data, tmp_path / "merged", "--lora-merge")
    merged = SentenceEmbedder(tmp_path / "merged" / "model").encode(TEXTS)
    adapted = SentenceEmbedder(tiny, adapter=saved).encode(TEXTS)
    np.testing.assert_allclose(merged, adapted, atol=1e-5, rtol=0)


def test_mismatched_adapter_is_refused_with_its_keys(tiny, tmp_path):
    wide = tmp_path / "wide"
    cfg = transformers.BertConfig(
        vocab_size=99, hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
        intermediate_size=37,
    )  # fmt: skip
    transformers.BertModel(cfg).save_pretrained(wide)
    _peft_adapter(wide, tmp_path / "ad", r=2, lora_alpha=2, target_modules=["query"])
    with pytest.raises(CheckpointError) as e:
        from_pretrained(tiny, adapter=tmp_path / "ad")
    message = str(e.value)
    assert "does not have as linear layers (1): encoder.layer.2.attention.self.query" in message
    assert "shape mismatches (2): encoder.layer.0.attention.self.query" in message
    assert "(2, 48)" in message


def test_other_peft_methods_and_variants_are_refused(tiny, tmp_path):
    torch.manual_seed(0)
    ia3 = peft.get_peft_model(
        transformers.BertModel.from_pretrained(tiny),
        peft.IA3Config(
            target_modules=["key", "value", "output.dense"], feedforward_modules=["output.dense"]
        ),
    )
    ia3.save_pretrained(tmp_path / "ia3")
    with pytest.raises(ModelDirectoryError, match="peft_type 'IA3' is not supported; only LoRA"):
        from_pretrained(tiny, adapter=tmp_path / "ia3")
    _peft_adapter(tiny, tmp_path / "emb", r=2, lora_alpha=2, target_modules=["word_embeddings"])
    with pytest.raises(ModelDirectoryError, match="LoRA on embeddings"):
        from_pretrained(tiny, adapter=tmp_path / "emb")
    _peft_adapter(tiny, tmp_path / "dora", r=2, lora_alpha=2, target_modules=["query"])
    config = json.loads((tmp_path / "dora" / "adapter_config.json").read_text())
    (tmp_path / "dora" / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    with pytest.raises(ModelDirectoryError, match="DoRA"):
        from_pretrained(tiny, adapter=tmp_path / "dora")


def test_bad_arguments_are_refused(tiny, tmp_path, cli):
    with pytest.raises(InputError, match="merge applies to an adapter"):
        from_pretrained(tiny, merge=True)
    with pytest.raises(InputError, match="match no linear layer"):
        from bertfamily.checkpoints.adapters import add_lora

        add_lora(from_pretrained(tiny), LoraSpec(targets=("nothing",)))
    res = cli("finetune", "--task", "classify", "--train", tmp_path / "x.csv", "--lora")
    assert res.exit_code == 2 and "--lora trains --task embedding" in res.output
    res = cli("embed", "-i", tmp_path / "x.txt", "-o", tmp_path / "shards", "--adapter", tmp_path)
    assert res.exit_code == 2 and "--adapter embeds SENTENCEs" in res.output
    # A without B
    _peft_adapter(tiny, tmp_path / "half", r=2, lora_alpha=2, target_modules=["query"])
    file = tmp_path / "half" / "adapter_model.safetensors"
    save_file({k: v for k, v in load_file(file).items() if "lora_B" not in k}, str(file))
    with pytest.raises(ModelDirectoryError, match="has lora_A only"):
        from_pretrained(tiny, adapter=tmp_path / "half")


@pytest.mark.parametrize(
    "edit, message",
    [
        ({"lora_alpha": float("nan")}, "lora_alpha nan is not a finite number"),
        ({"lora_alpha": "16"}, "lora_alpha '16' is not a finite number"),
        ({"r": 0}, "r 0 for .*rank 2"),
        ({"r": 4}, "r 4 for .*rank 2"),
        ({"r": "two"}, "r 'two' for"),
        ({"rank_pattern": {"query": 3}}, "r 3 for .*query.*rank 2"),
    ],
)
def test_an_adapter_config_that_contradicts_its_tensors_is_refused(tiny, tmp_path, edit, message):
    """PEFT builds the matrices from r and scales by α/r: a config whose r is not the tensors'
    rank, or whose α is no finite number, is refused with the file named (found by an attack:
    NaN blamed the base model's weights, r = 0 loaded silently)."""
    _peft_adapter(tiny, tmp_path / "ad", r=2, lora_alpha=2, target_modules=["query"])
    path = tmp_path / "ad" / "adapter_config.json"
    text = json.dumps({**json.loads(path.read_text()), **edit})  # NaN as JSON's NaN
    path.write_text(text)
    with pytest.raises(ModelDirectoryError, match=message) as e:
        from_pretrained(tiny, adapter=tmp_path / "ad")
    assert "adapter_config.json" in str(e.value)


def test_served_embedding_model_carries_the_adapter(tiny, adapter, cli, tmp_path):
    """`serve --adapter`: the served pipeline is the adapted embedder (through the one loader
    of every served model, replicas included); DIR alone with one model only (NAME=DIR
    targets one of several: tests/serve/test_serve_search.py); embedding models only."""
    from bertfamily.serve.app import load_served_model
    from bertfamily.serve.replicas import replica_environment

    directory, _ = adapter
    served = load_served_model(tiny, adapter=directory)
    want = SentenceEmbedder(tiny, adapter=directory).encode(TEXTS)
    np.testing.assert_allclose(served.encode(TEXTS), want, atol=1e-6, rtol=0)
    assert np.abs(load_served_model(tiny).encode(TEXTS) - want).max() > 1e-3
    from bertfamily.serve.app import ServeSettings

    env = json.loads(replica_environment(tiny, ServeSettings(), adapter=directory))
    assert env["adapter"] == str(directory)
    res = cli("serve", "--model", f"a={tiny}", "--model", f"b={tiny}", "--adapter", directory)
    said = " ".join(res.output.split())  # several models: DIR alone is refused
    assert res.exit_code == 2 and "give --adapter NAME=DIR for the model it adapts" in said
