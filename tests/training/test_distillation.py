"""Distillation: hand-computed losses, the TinyBERT layer mapping, layer-copied students,
compatibility errors, a few training steps of each method, and the CLI (init, train, resume)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from bertfamily import build_model
from bertfamily.cli import app
from bertfamily.config import EncoderConfig
from bertfamily.data.augment import AugmentConfig
from bertfamily.objectives.distillation import (
    DistilBertObjective,
    TinyBertObjective,
    attention_layer_map,
    attention_score_mse,
    check_compatible,
    distilbert_loss,
    hidden_layer_map,
    layer_step,
    masked_cosine_loss,
    masked_mse,
    soft_cross_entropy,
    soft_target_kl,
    tinybert_intermediate_loss,
)
from bertfamily.recipes.distill import init_student
from bertfamily.train import IndexedBatches, TrainConfig, Trainer

V = 99


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def _softmax(xs):
    e = [math.exp(x) for x in xs]
    return [x / sum(e) for x in e]


# --- layer mapping -----------------------------------------------------------------------------


def test_layer_maps_tinybert_4_of_12_and_any_divisible_pair():
    assert hidden_layer_map(12, 4) == [(0, 0), (1, 3), (2, 6), (3, 9), (4, 12)]
    assert attention_layer_map(12, 4) == [(0, 2), (1, 5), (2, 8), (3, 11)]
    assert hidden_layer_map(6, 3) == [(0, 0), (1, 2), (2, 4), (3, 6)]
    assert attention_layer_map(6, 3) == [(0, 1), (1, 3), (2, 5)]
    assert attention_layer_map(6, 6) == [(i, i) for i in range(6)]
    assert layer_step(6, 2) == 3
    with pytest.raises(ValueError, match="multiple"):
        layer_step(6, 4)
    with pytest.raises(ValueError, match=">= 1"):
        layer_step(6, 0)


# --- losses on fixed tensors -------------------------------------------------------------------


def test_soft_target_kl_hand_value_temperature_and_padding():
    s = torch.tensor([[[1.0, 0.0, 0.0], [9.0, -9.0, 3.0]]])  # (1, 2, 3); position 1 = padding
    t = torch.tensor([[[0.0, 1.0, 0.0], [-9.0, 9.0, 0.0]]])
    mask = torch.tensor([[True, False]])
    for T in (1.0, 2.0, 4.0):
        ps, pt = _softmax([1 / T, 0, 0]), _softmax([0, 1 / T, 0])
        kl = sum(a * math.log(a / b) for a, b in zip(pt, ps))
        got = soft_target_kl(s, t, T, mask)
        assert got.item() == pytest.approx(kl * T * T, rel=1e-5)
    # Without the mask the padding position changes the value.
    assert soft_target_kl(s, t, 2.0).item() != pytest.approx(soft_target_kl(s, t, 2.0, mask).item())
    assert soft_target_kl(t, t, 2.0).item() == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="same vocabulary"):
        soft_target_kl(s, t[..., :2])
    with pytest.raises(ValueError, match="temperature"):
        soft_target_kl(s, t, 0.0)


def test_soft_cross_entropy_hand_value():
    s = torch.tensor([[2.0, 0.0], [0.0, 0.0]])
    t = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])
    # Row 0: targets (½, ½), log-probs of s; row 1: targets (¾, ¼), log-probs (ln ½, ln ½).
    ls = [2 - math.log(math.exp(2) + 1), -math.log(math.exp(2) + 1)]
    row0 = -(0.5 * ls[0] + 0.5 * ls[1])
    row1 = -math.log(0.5)
    assert soft_cross_entropy(s, t).item() == pytest.approx((row0 + row1) / 2, rel=1e-6)
    # Temperature divides both logits.
    assert soft_cross_entropy(s, t, 2.0).item() == pytest.approx(
        soft_cross_entropy(s / 2, t / 2).item(), rel=1e-6
    )


def test_cosine_and_mse_skip_padding():
    s = torch.tensor([[[1.0, 0.0], [1.0, 1.0], [1.0, 0.0]]])
    t = torch.tensor([[[0.0, 1.0], [2.0, 2.0], [-1.0, 0.0]]])
    mask = torch.tensor([[1, 1, 0]])
    # 1 − cos: 1 (orthogonal), 0 (parallel); the padding position (would be 2) is ignored.
    assert masked_cosine_loss(s, t, mask).item() == pytest.approx(0.5, abs=1e-6)
    # Squared errors over real tokens: (1 + 1) + (1 + 1) over 2 tokens × 2 features.
    assert masked_mse(s, t, mask).item() == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError, match="projection"):
        masked_cosine_loss(s, t[..., :1], mask)


def test_attention_score_mse_zeroes_masked_entries():
    mask = torch.tensor([[1, 1, 0]])
    s = torch.tensor([[[[1.0, 2.0, 50.0], [0.0, 1.0, -7.0], [30.0, 30.0, 30.0]]]])  # (1,1,3,3)
    t = torch.zeros_like(s)
    # Real (query, key) pairs: the top-left 2×2 block: (1 + 4 + 0 + 1) / 4.
    assert attention_score_mse(s, t, mask).item() == pytest.approx(1.5, abs=1e-6)
    s2 = torch.cat([s, 2 * s], dim=1)  # two heads: (1.5 + 4·1.5) / 2
    assert attention_score_mse(s2, torch.zeros_like(s2), mask).item() == pytest.approx(3.75)
    with pytest.raises(ValueError, match="heads"):
        attention_score_mse(s2, t, mask)


def test_distilbert_loss_weights_and_mlm_positions():
    torch.manual_seed(0)
    sl, tl = torch.randn(2, 3, 5), torch.randn(2, 3, 5)
    sh, th = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    labels = torch.tensor([[-100, 3, -100], [1, -100, -100]])
    loss, parts = distilbert_loss(sl, tl, sh, th, mask, labels)
    ce = soft_target_kl(sl, tl, 2.0, mask.bool())
    cos = masked_cosine_loss(sh, th, mask)
    lp = torch.log_softmax(sl, -1)
    mlm = -(lp[0, 1, 3] + lp[1, 0, 1]) / 2
    assert parts["ce_loss"].item() == pytest.approx(ce.item(), rel=1e-6)
    assert parts["cos_loss"].item() == pytest.approx(cos.item(), rel=1e-6)
    assert parts["mlm_loss"].item() == pytest.approx(mlm.item(), rel=1e-6)
    assert loss.item() == pytest.approx(5 * ce.item() + 2 * mlm.item() + cos.item(), rel=1e-6)
    loss2, _ = distilbert_loss(
        sl, tl, sh, th, mask, labels, temperature=1.0, alpha_ce=1.0, alpha_mlm=0.0, alpha_cos=0.0
    )
    assert loss2.item() == pytest.approx(soft_target_kl(sl, tl, 1.0, mask.bool()).item())


def test_tinybert_loss_follows_the_layer_mapping():
    """Student value m vs teacher value j at every layer: the loss reveals which teacher
    layer each student layer was compared with."""
    B, T, N = 1, 3, 2
    mask = torch.ones(B, T)
    sh = tuple(torch.full((B, T, 4), float(m)) for m in range(3))  # L_S = 2
    th = tuple(torch.full((B, T, 4), float(j)) for j in range(5))  # L_T = 4, k = 2
    ss = tuple(torch.full((B, N, T, T), float(i)) for i in range(2))
    ts = tuple(torch.full((B, N, T, T), float(j)) for j in range(4))
    loss, parts = tinybert_intermediate_loss(sh, th, ss, ts, mask)
    assert parts["embedding_loss"].item() == 0.0  # 0 ↔ 0
    assert parts["hidden_loss"].item() == pytest.approx((1 - 2) ** 2 + (2 - 4) ** 2)  # 1↔2, 2↔4
    assert parts["attention_loss"].item() == pytest.approx((0 - 1) ** 2 + (1 - 3) ** 2)  # 0↔1, 1↔3
    assert loss.item() == pytest.approx(10.0)
    # Projections apply to the student: W_h doubling hidden states, W_e adding 1.
    _, parts = tinybert_intermediate_loss(
        sh,
        th,
        ss,
        ts,
        mask,
        embedding_projection=lambda x: x + 1,
        hidden_projection=lambda x: 2 * x,
    )
    assert parts["embedding_loss"].item() == pytest.approx(1.0)
    assert parts["hidden_loss"].item() == pytest.approx(0.0)
    with pytest.raises(ValueError, match="multiple"):
        tinybert_intermediate_loss(sh, th[:4], ss, ts[:3], mask)


# --- student initialisation --------------------------------------------------------------------


def tiny_teacher(layers: int = 4, heads=("mlm",)):
    torch.manual_seed(0)
    cfg = EncoderConfig.from_preset(
        "tiny-bert",
        num_hidden_layers=layers,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return build_model(cfg, heads=heads).eval()


def test_init_student_copies_exactly_the_chosen_layers():
    teacher = tiny_teacher()
    student = init_student(teacher, [0, 2])
    assert student.config.num_hidden_layers == 2 and student.heads == ("mlm",)
    ts, ss = teacher.state_dict(), student.state_dict()
    for m, j in enumerate([0, 2]):
        names = [k for k in ss if k.startswith(f"encoder.layers.{m}.")]
        assert names
        for k in names:
            assert torch.equal(ss[k], ts[k.replace(f"layers.{m}.", f"layers.{j}.")]), k
    for k in ss:
        if not k.startswith("encoder.layers."):
            assert torch.equal(ss[k], ts[k]), k
    # A copied layer is not the neighbouring one.
    assert not torch.equal(
        ss["encoder.layers.1.attention.qkv.weight"], ts["encoder.layers.1.attention.qkv.weight"]
    )
    ids = torch.randint(5, V, (2, 7))
    with torch.no_grad():
        to = teacher(ids, output_hidden_states=True)
        so = student.eval()(ids, output_hidden_states=True)
    assert torch.allclose(so.hidden_states[1], to.hidden_states[1], atol=1e-6)


def test_init_student_with_distilbert_structure_drops_segments_and_pooler():
    teacher = tiny_teacher()
    student = init_student(teacher, [1, 3], preset="tiny-distilbert")
    cfg = student.config
    assert (cfg.model_type, cfg.type_vocab_size, cfg.use_pooler, cfg.hidden_size) == (
        "distilbert",
        0,
        False,
        32,
    )
    ts, ss = teacher.state_dict(), student.state_dict()
    assert not any("segment" in k or "pooler" in k for k in ss)
    pos = "encoder.embeddings.position.weight"
    assert torch.equal(ss[pos], ts[pos] + ts["encoder.embeddings.segment.weight"][0])
    assert torch.equal(ss["encoder.embeddings.token.weight"], ts["encoder.embeddings.token.weight"])
    for k in [k for k in ss if k.startswith("encoder.layers.1.")]:
        assert torch.equal(ss[k], ts[k.replace("layers.1.", "layers.3.")]), k
    ids = torch.randint(5, V, (2, 7))
    with torch.no_grad():  # folded segment row: same embedding output on single-segment input
        e_t = teacher(ids, output_hidden_states=True).hidden_states[0]
        e_s = student.eval()(ids, output_hidden_states=True).hidden_states[0]
    assert torch.allclose(e_s, e_t, atol=1e-6)
    plain = init_student(teacher, [1, 3], preset="tiny-distilbert", fold_token_types=False)
    assert torch.equal(plain.state_dict()[pos], ts[pos])
    for bad in ([], [2, 0], [1, 1], [4]):
        with pytest.raises(ValueError, match="layers"):
            init_student(teacher, bad)


# --- compatibility errors ----------------------------------------------------------------------


def test_incompatible_pairs_raise_clear_errors():
    t = EncoderConfig.from_preset("tiny-bert", num_hidden_layers=4)
    with pytest.raises(ValueError, match="vocabulary"):
        check_compatible("tinybert", t, t.replace(vocab_size=100))
    with pytest.raises(ValueError, match="MLM head"):
        check_compatible("distilbert", t, t, teacher_heads=())
    small = t.replace(hidden_size=16, intermediate_size=20)
    with pytest.raises(ValueError, match="hidden sizes"):
        check_compatible("distilbert", t, small, teacher_heads=("mlm",))
    check_compatible("distilbert", t, small, teacher_heads=("mlm",), projection=True)
    check_compatible("tinybert", t, small.replace(num_hidden_layers=2, num_hidden_groups=2))
    with pytest.raises(ValueError, match="heads"):
        check_compatible("tinybert", t, small.replace(num_attention_heads=2))
    with pytest.raises(ValueError, match="multiple"):
        check_compatible("tinybert", t, t.replace(num_hidden_layers=3, num_hidden_groups=3))
    with pytest.raises(ValueError, match="method"):
        check_compatible("bogus", t, t)
    student = build_model(small.replace(num_hidden_layers=2, num_hidden_groups=2))
    with pytest.raises(ValueError, match="MLM head"):
        DistilBertObjective(student, tiny_teacher(heads=()), projection=True)


# --- a few steps of each method on the shared Trainer --------------------------------------------


def _batches(n=32, T=10, seed=0):
    rng = np.random.default_rng(seed)
    data = []
    for _ in range(n):
        ids = rng.integers(5, V, T)
        length = int(rng.integers(6, T + 1))
        mask = (np.arange(T) < length).astype(np.int64)
        ids = np.where(mask == 1, ids, 0)
        labels = np.where((rng.random(T) < 0.15) & (mask == 1), ids, -100)
        data.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return data


def _train(model, tmp_path, steps=25, **kw):
    cfg = TrainConfig(
        output_dir=tmp_path,
        max_steps=steps,
        batch_size=8,
        learning_rate=3e-3,
        warmup_steps=0,
        schedule="constant",
        log_every=1,
        progress=False,
        device="cpu",
        **kw,
    )
    fixed = {
        k: torch.as_tensor(np.stack([e[k] for e in _batches(8, seed=9)]))
        for k in ("input_ids", "attention_mask", "labels")
    }
    model.eval()
    with torch.no_grad():
        before = model(fixed)
    summary = Trainer(
        model,
        lambda m, b: m(b),
        IndexedBatches(_batches(), 8),
        cfg,
        save_fn=lambda m, d: m.save_pretrained(d),
    ).train()
    model.eval()
    with torch.no_grad():
        after = model(fixed)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    return before, after, summary, rows


def test_tinybert_steps_reduce_the_loss_with_a_projection(tmp_path):
    teacher = tiny_teacher(heads=())
    torch.manual_seed(1)
    student = build_model(
        EncoderConfig.from_preset(
            "tiny-bert", hidden_size=16, intermediate_size=20, num_hidden_layers=2
        )
    )
    model = TinyBertObjective(student, teacher)
    assert set(model.projections) == {"hidden", "embedding"}
    before, after, summary, rows = _train(model, tmp_path)
    assert after[0].item() < 0.7 * before[0].item()
    assert {"embedding_loss", "hidden_loss", "attention_loss"} <= set(rows[0])
    assert not any(p.requires_grad for p in teacher.parameters())
    assert not teacher.training
    assert (tmp_path / "model" / "distill_projections.safetensors").is_file()
    assert all(not k.startswith("_teacher") for k in model.state_dict())


def test_distilbert_steps_reduce_the_loss(tmp_path):
    teacher = tiny_teacher()
    with torch.no_grad():  # peaked soft targets (a random head's are nearly uniform)
        teacher.mlm_head.bias.normal_(0.0, 3.0)
    torch.manual_seed(1)
    student = build_model(EncoderConfig.from_preset("tiny-distilbert"), heads=["mlm"])
    model = DistilBertObjective(student, teacher)
    before, after, summary, rows = _train(model, tmp_path)
    # The distillation terms (soft targets, cosine) fall; the total with MLM as well.
    assert after[1]["ce_loss"] < 0.7 * before[1]["ce_loss"]
    assert after[1]["cos_loss"] < before[1]["cos_loss"]
    assert after[0] < before[0]
    assert {"ce_loss", "mlm_loss", "cos_loss"} <= set(rows[0])
    # The teacher did not move.
    assert torch.equal(
        teacher.state_dict()["encoder.layers.3.attention.qkv.weight"],
        tiny_teacher().state_dict()["encoder.layers.3.attention.qkv.weight"],
    )


# --- CLI: init, train, resume --------------------------------------------------------------------


@pytest.fixture(scope="module")
def toy_teacher(tmp_path_factory):
    from bertfamily.tokenization.training import train_tokenizer

    root = tmp_path_factory.mktemp("distill_cli")
    words = "the cat sat on a mat and dog ran to park with ball while bird sang in tree".split()
    rng = np.random.default_rng(0)
    corpus = root / "corpus.txt"
    corpus.write_text(
        "\n\n".join(
            "\n".join(" ".join(rng.choice(words, 8)) + "." for _ in range(4)) for _ in range(40)
        )
        + "\n"
    )
    tok = train_tokenizer([str(corpus)], "wordpiece", 120, min_frequency=1)
    torch.manual_seed(0)
    cfg = EncoderConfig.from_preset("tiny-bert", num_hidden_layers=4, vocab_size=tok.vocab_size)
    teacher_dir = root / "teacher"
    build_model(cfg, heads=["mlm"]).save_pretrained(teacher_dir)
    tok.save_pretrained(teacher_dir)
    return teacher_dir, corpus


def test_cli_init_train_and_resume(toy_teacher, tmp_path):
    from bertfamily.pretrained import from_pretrained

    teacher_dir, corpus = toy_teacher
    runner = CliRunner()
    out = tmp_path / "student"
    r = runner.invoke(
        app,
        [
            "distill",
            "init",
            "--teacher",
            str(teacher_dir),
            "--layers",
            "1,3",
            "--student-preset",
            "tiny-distilbert",
            "-o",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    s, t = from_pretrained(out), from_pretrained(teacher_dir)
    assert s.config.model_type == "distilbert" and s.config.num_hidden_layers == 2
    assert torch.equal(
        s.state_dict()["encoder.layers.0.attention.qkv.weight"],
        t.state_dict()["encoder.layers.1.attention.qkv.weight"],
    )

    run = tmp_path / "run"
    common = [
        "distill",
        "--method",
        "distilbert",
        "--teacher",
        str(teacher_dir),
        "--student",
        str(out),
        "--corpus",
        str(corpus),
        "-o",
        str(run),
        "--max-length",
        "16",
        "--batch-size",
        "4",
        "--log-every",
        "1",
        "--eval-every",
        "0",
        "--save-every",
        "1",
        "--device",
        "cpu",
        "--no-progress",
    ]
    r = runner.invoke(app, common + ["--max-steps", "2"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, common + ["--max-steps", "4", "--resume"])
    assert r.exit_code == 0, r.output
    summary = json.loads((run / "summary.json").read_text())
    assert summary["step"] == 4 and summary["method"] == "distilbert"
    steps = [
        json.loads(x)["step"]
        for x in (run / "metrics.jsonl").read_text().splitlines()
        if json.loads(x)["split"] == "train"
    ]
    assert steps == [1, 2, 3, 4]
    assert (run / "model" / "tokenizer.json").is_file()

    r = runner.invoke(
        app,
        [
            "distill",
            "--method",
            "tinybert",
            "--teacher",
            str(teacher_dir),
            "--student",
            "tiny-bert",
            "--layers",
            "2",
            "--hidden",
            "16",
            "--corpus",
            str(corpus),
            "-o",
            str(tmp_path / "tiny"),
            "--max-length",
            "16",
            "--batch-size",
            "4",
            "--max-steps",
            "2",
            "--device",
            "cpu",
            "--no-progress",
        ],
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        app,
        [
            "distill",
            "--method",
            "tinybert",
            "--teacher",
            str(teacher_dir),
            "--student",
            "tiny-bert",
            "--layers",
            "3",
            "--corpus",
            str(corpus),
            "-o",
            str(tmp_path / "bad"),
            "--device",
            "cpu",
            "--no-progress",
        ],
    )
    assert r.exit_code == 2 and "multiple" in r.output


# --- TinyBERT task distillation ------------------------------------------------------------------


def test_task_distillation_two_stages(toy_teacher, tmp_path):
    from bertfamily.pretrained import from_pretrained
    from bertfamily.tokenization import load_tokenizer

    teacher_dir, _ = toy_teacher
    tok = load_tokenizer(teacher_dir)
    torch.manual_seed(0)
    cfg = EncoderConfig.from_preset(
        "tiny-bert",
        num_hidden_layers=2,
        vocab_size=tok.vocab_size,
        label_names=("neg", "pos"),
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    teacher = build_model(cfg, heads=["classify"])
    with torch.no_grad():  # peaked teacher logits (a random head's are nearly uniform)
        teacher.task_head.out.weight.mul_(30.0)
    tdir = tmp_path / "teacher"
    teacher.save_pretrained(tdir)
    tok.save_pretrained(tdir)
    before_t = {k: v.clone() for k, v in from_pretrained(tdir).state_dict().items()}
    words = ["cat sat on the mat", "dog ran to the park", "bird sang in a tree", "the ball"]
    csv = tmp_path / "train.csv"
    csv.write_text(
        "sentence,y\n"
        + "".join(f"{w} {i},{'pos' if i % 2 else 'neg'}\n" for i, w in enumerate(words * 4))
    )
    out = tmp_path / "run"
    runner = CliRunner()
    r = runner.invoke(
        app,
        [
            "distill",
            "--method",
            "tinybert-task",
            "--teacher",
            str(tdir),
            "--student",
            "1",
            "--train",
            str(csv),
            "--text-column",
            "sentence",
            "--label-column",
            "y",
            "-o",
            str(out),
            "--intermediate-steps",
            "5",
            "--prediction-steps",
            "30",
            "--batch-size",
            "8",
            "--lr",
            "3e-3",
            "--warmup",
            "0",
            "--log-every",
            "1",
            "--device",
            "cpu",
            "--no-progress",
        ],
    )
    assert r.exit_code == 0, r.output
    inter = [
        json.loads(x) for x in (out / "intermediate" / "metrics.jsonl").read_text().splitlines()
    ]
    pred = [json.loads(x) for x in (out / "prediction" / "metrics.jsonl").read_text().splitlines()]
    assert {"embedding_loss", "hidden_loss", "attention_loss"} <= set(inter[0])
    losses = [row["prediction_loss"] for row in pred if "prediction_loss" in row]
    assert len(losses) == 30 and np.mean(losses[-5:]) < np.mean(losses[:5])
    # The student's logits moved toward the teacher's; the teacher did not move.
    student = from_pretrained(out / "model").eval()
    t_model = from_pretrained(tdir).eval()
    assert student.config.num_hidden_layers == 1 and student.config.label_names == ("neg", "pos")
    enc = tok([w for w in words], padding=True, return_tensors="pt")
    inputs = dict(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
    fresh = from_pretrained(out / "intermediate" / "model").eval()  # before stage 2
    with torch.no_grad():
        t_logits = t_model(**inputs).logits
        gap_after = soft_cross_entropy(student(**inputs).logits, t_logits).item()
        gap_fresh = soft_cross_entropy(fresh(**inputs).logits, t_logits).item()
    assert gap_after < gap_fresh
    assert all(torch.equal(v, t_model.state_dict()[k]) for k, v in before_t.items())


def test_task_distillation_on_augmented_data(toy_teacher, tmp_path):
    """distill_task with TinyBERT augmentation: the training set holds every original and its
    N_a variants (same labels), and the statistics come back."""
    from bertfamily.data.augment import AugmentConfig
    from bertfamily.recipes.distill import TaskDistillConfig, distill_task
    from bertfamily.tokenization import load_tokenizer

    teacher_dir, _ = toy_teacher
    tok = load_tokenizer(teacher_dir)
    cfg = EncoderConfig.from_preset(
        "tiny-bert", vocab_size=tok.vocab_size, label_names=("neg", "pos")
    )
    tdir = tmp_path / "teacher"
    build_model(cfg, heads=["classify"]).save_pretrained(tdir)
    tok.save_pretrained(tdir)
    csv = tmp_path / "train.csv"
    words = ["cat sat on the mat", "dog ran to the park", "bird sang in a tree", "the ball"]
    csv.write_text(
        "text,label\n" + "".join(f"{w},{'pos' if i % 2 else 'neg'}\n" for i, w in enumerate(words))
    )
    res = distill_task(
        TaskDistillConfig(
            tdir,
            csv,
            student=[1],
            intermediate_steps=1,
            prediction_steps=1,
            augment=AugmentConfig(mlm=False, samples=3, candidates=2),
        ),
        TrainConfig(output_dir=tmp_path / "run", batch_size=4, progress=False, device="cpu"),
    )
    assert res["examples"] == 16
    aug = res["augmentation"]
    assert aug["examples"] == 4 and aug["samples"] == 12 and aug["words"] == 3 * 17
    lines = [json.loads(x) for x in (tmp_path / "run" / "augmented.jsonl").read_text().splitlines()]
    assert [r["text"] for r in lines[::4]] == words
    assert [r["label"] for r in lines] == [lab for lab in ("neg", "pos") * 2 for _ in range(4)]
    with pytest.raises(ValueError, match="MLM head"):
        distill_task(
            TaskDistillConfig(tdir, csv, student=[1], augment=AugmentConfig()),
            TrainConfig(output_dir=tmp_path / "run2", batch_size=4, device="cpu"),
        )


def test_token_level_task_distillation(toy_teacher, tmp_path):
    """TinyBERT task distillation of a token classifier: the prediction loss is the soft
    cross-entropy over real tokens (checked against a direct computation), normalised per
    token, and distill_task runs both stages on a CoNLL file."""
    from bertfamily.objectives.distillation import TinyBertTaskObjective
    from bertfamily.recipes.distill import TaskDistillConfig, distill_task
    from bertfamily.tokenization import load_tokenizer

    teacher_dir, _ = toy_teacher
    tok = load_tokenizer(teacher_dir)
    labels = ("O", "B-ANIMAL", "I-ANIMAL")
    cfg = EncoderConfig.from_preset("tiny-bert", vocab_size=tok.vocab_size, label_names=labels)
    torch.manual_seed(0)
    teacher = build_model(cfg, heads=["tokens"])
    student = build_model(cfg.replace(num_hidden_layers=1, num_hidden_groups=1), heads=["tokens"])
    obj = TinyBertTaskObjective(student, teacher, stage="prediction", temperature=2.0)
    student.eval()  # no dropout: the direct computation below must see the same logits
    ids = torch.randint(5, tok.vocab_size, (3, 7))
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5])
    batch = dict(input_ids=ids, attention_mask=mask)
    assert obj.counts(batch) == {"tokens": 13}
    loss, parts = obj(batch, {"tokens": 13.0})
    with torch.no_grad():
        zs, zt = student(ids, mask).logits, teacher(ids, mask).logits  # (B, T, C)
    keep = mask.bool()
    expect = soft_cross_entropy(zs[keep], zt[keep], 2.0)
    torch.testing.assert_close(loss.detach(), expect)
    assert set(parts) == {"prediction_loss"}
    with pytest.raises(ValueError, match="differ"):
        TinyBertTaskObjective(build_model(cfg, heads=["classify"]), teacher)

    tdir = tmp_path / "teacher"
    teacher.save_pretrained(tdir)
    tok.save_pretrained(tdir)
    conll = tmp_path / "train.conll"
    conll.write_text("the O\ncat B-ANIMAL\nsat O\n\na O\nbig O\ndog B-ANIMAL\nran O\n\n")
    out = tmp_path / "run"
    res = distill_task(
        TaskDistillConfig(
            tdir, conll, student=[1], task="ner", intermediate_steps=2, prediction_steps=3
        ),
        TrainConfig(output_dir=out, batch_size=2, progress=False, device="cpu", log_every=1),
    )
    assert res["examples"] == 2 and res["prediction"]["step"] == 3
    rows = [json.loads(x) for x in (out / "prediction" / "metrics.jsonl").read_text().splitlines()]
    assert sum("prediction_loss" in r for r in rows) == 3
    with pytest.raises(ValueError, match="sequence classification only"):
        distill_task(
            TaskDistillConfig(tdir, conll, task="ner", augment=AugmentConfig(mlm=False)),
            TrainConfig(output_dir=tmp_path / "x", device="cpu"),
        )
