"""ELECTRA replaced-token detection as a pretraining objective (Clark et al. 2020): generator
sizing and shared embeddings, the corruption and its labels, L_MLM + 50·L_Disc with no gradient
through the sampling, and `pretrain --objectives rtd` saving a discriminator that transformers'
ElectraForPreTraining and ElectraModel load with the same outputs."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

import bertfamily as bf
from bertfamily.build import build_model
from bertfamily.config import EncoderConfig
from bertfamily.objectives.electra import (
    ReplacedTokenDetection,
    evaluate_rtd,
    generator_config,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def _config(**overrides) -> EncoderConfig:
    base = dict(hidden_size=64, num_attention_heads=4, intermediate_size=256, embedding_size=24)
    base.update(overrides)
    return EncoderConfig.from_preset("tiny-electra", hidden_dropout_prob=0.0, **base)


def _rtd(size: float = 0.5) -> ReplacedTokenDetection:
    torch.manual_seed(0)
    config = _config()
    disc = build_model(config, heads=["rtd"])
    gen = build_model(generator_config(config, size), heads=["mlm"])
    return ReplacedTokenDetection(disc, gen)


def _batch(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 99, (3, 10), generator=g)
    mask = torch.ones(3, 10, dtype=torch.long)
    mask[1, 7:] = 0
    ids[1, 7:] = 0
    labels = torch.full((3, 10), -100)
    for b, positions in enumerate([(1, 4, 8), (0, 2, 6), (3, 5, 9)]):
        for t in positions:
            labels[b, t] = ids[b, t]
            ids[b, t] = 4  # [MASK]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def test_generator_config_scales_width_keeps_depth_and_embedding_size():
    config = _config()
    gen = generator_config(config, 0.25)
    assert (gen.hidden_size, gen.num_attention_heads, gen.intermediate_size) == (16, 1, 64)
    assert gen.num_hidden_layers == config.num_hidden_layers
    assert gen.embedding_size == config.embedding_size == 24
    assert generator_config(config, 1.0).hidden_size == 64
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="fraction"):
            generator_config(config, bad)


def test_embeddings_are_shared_and_the_decoder_is_tied():
    rtd = _rtd()
    g, d = rtd.generator.encoder.embeddings, rtd.discriminator.encoder.embeddings
    for name in ("token", "position", "segment", "norm"):
        assert getattr(g, name) is getattr(d, name)
    assert rtd.generator.mlm_head.decoder_weight is d.token.weight
    assert g.projection is not d.projection  # E→H of each model's own width
    params = list(rtd.parameters())
    assert len({id(p) for p in params}) == len(params)  # each shared tensor trained once


def test_a_sample_equal_to_the_original_is_not_replaced():
    rtd = _rtd()
    batch = _batch()
    token = int(batch["labels"][0, 1])  # the generator now always samples this token
    with torch.no_grad():
        rtd.generator.mlm_head.bias.fill_(-1e4)
        rtd.generator.mlm_head.bias[token] = 1e4
    _, corrupted, labels, originals = rtd.corrupt(batch)
    selected = batch["labels"] != -100
    assert (corrupted[selected] == token).all()
    assert (corrupted[~selected] == batch["input_ids"][~selected]).all()
    expected = torch.zeros_like(labels)
    expected[selected] = (originals != token).long()
    assert torch.equal(labels, expected)
    assert labels[0, 1] == 0 and labels.sum() == int((originals != token).sum()) > 0


def test_loss_is_mlm_plus_50_bce_and_no_gradient_through_the_sampling():
    rtd = _rtd()
    batch = _batch()
    torch.manual_seed(1)
    loss, parts = rtd(batch)
    torch.testing.assert_close(loss, parts["mlm_loss"] + 50.0 * parts["rtd_loss"])
    # the same sample again, by hand
    torch.manual_seed(1)
    gen_logits, corrupted, labels, originals = rtd.corrupt(batch)
    real = batch["attention_mask"] == 1
    disc = rtd.discriminator(corrupted, attention_mask=batch["attention_mask"]).logits
    bce = F.binary_cross_entropy_with_logits(disc[real], labels[real].float())
    torch.testing.assert_close(parts["rtd_loss"], bce.detach())
    torch.testing.assert_close(parts["mlm_loss"], F.cross_entropy(gen_logits, originals).detach())
    assert 0 < float(parts["replaced"]) <= 9 / 27 + 1e-6
    # generator-only weights get the gradient of L_MLM alone
    rtd.zero_grad()
    torch.manual_seed(1)
    rtd(batch)[0].backward()
    full = rtd.generator.encoder.layers[0].attention.qkv.weight.grad.clone()
    rtd.zero_grad()
    torch.manual_seed(1)
    logits, *_, originals = rtd.corrupt(batch)
    F.cross_entropy(logits, originals).backward()
    torch.testing.assert_close(full, rtd.generator.encoder.layers[0].attention.qkv.weight.grad)
    assert full.abs().sum() > 0


def test_denominators_give_the_merged_batch():
    rtd = _rtd()
    with torch.no_grad():  # one sure sample (token 50), so the halves see the same corruption
        rtd.generator.mlm_head.bias[50] = 1e4
    a, b = _batch(0), _batch(1)
    merged = {k: torch.cat([a[k], b[k]]) for k in a}
    whole, _ = rtd(merged)
    counts = {k: rtd.counts(a)[k] + rtd.counts(b)[k] for k in ("mlm", "rtd")}
    assert counts == {"mlm": 18, "rtd": 54}
    halves = rtd(a, counts)[0] + rtd(b, counts)[0]
    torch.testing.assert_close(halves, whole, atol=1e-5, rtol=0)


def test_evaluation_leaves_the_training_rng_alone():
    rtd = _rtd()
    torch.manual_seed(5)
    state = torch.get_rng_state()
    first = evaluate_rtd(rtd, [_batch(0), _batch(1)], seed=0)
    assert torch.equal(state, torch.get_rng_state())
    assert first == evaluate_rtd(rtd, [_batch(0), _batch(1)], seed=0)
    assert first["loss"] == pytest.approx(first["mlm_loss"] + 50 * first["rtd_loss"])
    assert 0 < first["replaced"] < 1 and 0 <= first["accuracy"] <= 1


@pytest.mark.slow
def test_pretrain_rtd_saves_a_discriminator_transformers_loads(cli, tmp_path):
    import transformers

    from bertfamily.tokenization.training import train_tokenizer

    lines = ["the sky is blue .", "the grass is green .", "a cat sat on the mat ."] * 30
    (tmp_path / "c.txt").write_text("\n\n".join(lines) + "\n")
    train_tokenizer(tmp_path / "c.txt", "wordpiece", 60, min_frequency=1, output_dir=tmp_path / "t")
    res = cli(
        "pretrain", tmp_path / "c.txt", "-o", tmp_path / "run", "--tokenizer", tmp_path / "t",
        "--preset", "tiny-electra", "--objectives", "rtd", "--generator-size", "0.5",
        "--max-length", "16", "--max-steps", "4", "--batch-size", "4", "--threads", "1",
        "--device", "cpu",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    path = tmp_path / "run" / "model"
    ours = bf.from_pretrained(path)
    assert ours.heads == ("rtd",)
    ref = transformers.ElectraForPreTraining.from_pretrained(path).eval()
    base = transformers.ElectraModel.from_pretrained(path).eval()
    ids = torch.tensor([[2, 7, 8, 9, 10, 3, 0], [2, 11, 12, 3, 0, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        a = ours.eval()(ids, mask)
        b = ref(input_ids=ids, attention_mask=mask)
        h = base(input_ids=ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    torch.testing.assert_close(a.logits[real], b.logits[real], atol=1e-5, rtol=0)
    torch.testing.assert_close(a.last_hidden_state[real], h[real], atol=1e-5, rtol=0)
    # the saved discriminator is the trained one, not a fresh model
    state = torch.load(path / "model_state.pt", weights_only=True)
    disc = {k.removeprefix("discriminator."): v for k, v in state.items() if "discriminator." in k}
    assert disc and any("rtd_head" in k for k in disc)
    rows = (tmp_path / "run" / "metrics.jsonl").read_text()
    assert '"rtd_loss"' in rows and '"mlm_loss"' in rows
    bad = cli(
        "pretrain", tmp_path / "c.txt", "-o", tmp_path / "bad", "--tokenizer", tmp_path / "t",
        "--objectives", "rtd", "--max-steps", "1",
    )  # fmt: skip
    assert bad.exit_code == 2 and "ELECTRA" in bad.output
