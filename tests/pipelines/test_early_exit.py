"""FastBERT (Liu et al. 2020): student classifiers, the self-distillation loss, adaptive early
exit (threshold 0 = the full model exactly, the maximum = layer 1, batched = one by one), the
encoder's step-by-step run, and the recipe / pipeline / CLI / server paths on a tiny model."""

from __future__ import annotations

import json
import math

import pytest
import torch

import bertfamily as bf
from bertfamily.heads.early_exit import (
    StudentClassifiers,
    load_students,
    normalized_entropy,
    save_students,
)
from bertfamily.objectives.self_distillation import SelfDistillation, self_distillation_loss
from bertfamily.pipelines.tasks.early_exit import early_exit_forward

pytestmark = pytest.mark.usefixtures("one_thread")

LABELS = ("neg", "neu", "pos")


def tiny_classifier(preset: str = "tiny-bert", layers: int = 3, seed: int = 0):
    """A tiny random classifier (C=3) with L layers and its L-1 students (sharpened so their
    entropies spread over [0, 1])."""
    torch.manual_seed(seed)
    overrides = dict(label_names=LABELS)
    if preset != "tiny-albert":
        overrides["num_hidden_layers"] = layers
    cfg = bf.EncoderConfig.from_preset(preset, **overrides)
    model = bf.build_model(cfg, ["classify"]).eval()
    L = len(model.encoder.schedule)
    students = StudentClassifiers(L, cfg.hidden_size, 3, width=16, num_heads=2).eval()
    with torch.no_grad():
        for s in students.students:
            s.out.weight.mul_(8.0)
    return model, students


def batch(B: int = 5, T: int = 9, V: int = 99, seed: int = 1):
    """Right-padded ids (B, T) with lengths T, T-1, ... and their (B, T) mask."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (B, T), generator=g)
    lengths = [max(2, T - i) for i in range(B)]
    mask = torch.zeros(B, T, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    return ids.masked_fill(mask == 0, 0), mask


def test_normalized_entropy_values():
    p = torch.tensor([[1.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3], [0.5, 0.5, 0.0]])
    u = normalized_entropy(p)
    assert u[0] == 0.0
    assert abs(float(u[1]) - 1.0) < 1e-6
    assert abs(float(u[2]) - math.log(2) / math.log(3)) < 1e-6


@pytest.mark.parametrize("preset", ["tiny-bert", "tiny-roberta", "tiny-albert", "tiny-deberta"])
def test_threshold_zero_is_the_full_model_exactly(preset):
    model, students = tiny_classifier(preset)
    ids, mask = batch()
    out = early_exit_forward(model, students, ids, mask, speed=0.0)
    L = len(model.encoder.schedule)
    assert out.exit_layers.tolist() == [L] * len(ids)
    with torch.no_grad():  # inference (with autograd, SDPA may pick another CPU kernel)
        full = model(ids, mask).logits.float()
    assert torch.equal(out.logits, full)


def test_maximum_threshold_exits_every_sample_at_layer_one():
    model, students = tiny_classifier()
    ids, mask = batch()
    out = early_exit_forward(model, students, ids, mask, speed=1.0)
    assert out.exit_layers.tolist() == [1] * len(ids)
    hidden = model.encoder(ids, mask, output_hidden_states=True).hidden_states
    expected = students.students[0](hidden[1], mask.bool())
    torch.testing.assert_close(out.logits, expected, rtol=0, atol=1e-6)


def test_batched_and_one_by_one_give_the_same_exits():
    model, students = tiny_classifier(layers=4)
    ids, mask = batch(B=8, T=11)
    mixed = 0
    for speed in (0.1, 0.3, 0.31, 0.33, 0.5, 0.62, 0.65, 0.8):
        out = early_exit_forward(model, students, ids, mask, speed=speed)
        single = [
            early_exit_forward(
                model, students, ids[i : i + 1, : int(n)], mask[i : i + 1, : int(n)], speed=speed
            )
            for i, n in enumerate(mask.sum(1))
        ]
        assert out.exit_layers.tolist() == [int(s.exit_layers) for s in single], speed
        one_by_one = torch.cat([s.logits for s in single])
        torch.testing.assert_close(out.logits, one_by_one, atol=1e-5, rtol=0)
        mixed += len(set(out.exit_layers.tolist())) > 1
    assert mixed >= 2  # the speeds above really split the batch between layers


def test_exits_move_earlier_as_speed_grows():
    model, students = tiny_classifier(layers=4)
    ids, mask = batch(B=8, T=11)
    means = [
        float(early_exit_forward(model, students, ids, mask, speed=s).exit_layers.float().mean())
        for s in (0.0, 0.3, 0.6, 0.9, 1.0)
    ]
    assert means == sorted(means, reverse=True) and means[0] == 4 and means[-1] == 1


def test_self_distillation_loss_is_the_kl_to_the_teacher_by_hand():
    teacher = torch.tensor([[2.0, 0.0, -1.0], [0.1, 0.2, 0.3]])
    students = [
        torch.tensor([[0.0, 0.0, 0.0], [1.0, -1.0, 0.5]]),
        torch.tensor([[3.0, 1, 0], [0, 0, 1]]),
    ]

    def kl(t_row, s_row):  # KL(p_t || p_s) = Σ p_t (log p_t − log p_s), by hand
        zt = sum(math.exp(v) for v in t_row)
        zs = sum(math.exp(v) for v in s_row)
        pt = [math.exp(v) / zt for v in t_row]
        ps = [math.exp(v) / zs for v in s_row]
        return sum(a * (math.log(a) - math.log(b)) for a, b in zip(pt, ps))

    by_hand = [sum(kl(t, s) for t, s in zip(teacher.tolist(), st.tolist())) / 2 for st in students]
    loss, terms = self_distillation_loss(students, teacher)
    assert [round(float(t), 6) for t in terms] == [round(v, 6) for v in by_hand]
    assert abs(float(loss) - sum(by_hand)) < 1e-6
    # the objective module: the teacher is the model's head on the last layer, students on
    # layers 1..L-1; labels are not read; only the students get gradients
    model, studs = tiny_classifier()
    ids, mask = batch()
    objective = SelfDistillation(model, studs).train()
    assert not model.training and studs.training
    objective.eval()  # no student dropout, to compare values
    loss, parts = objective(ids, mask, labels=torch.tensor([9] * len(ids)))
    with torch.no_grad():
        out = model(ids, mask, output_hidden_states=True)
        expected, _ = self_distillation_loss(
            [s(h, mask.bool()) for s, h in zip(studs.students, out.hidden_states[1:])],
            out.logits,
        )
    assert set(parts) == {"kl_1", "kl_2"}
    torch.testing.assert_close(loss, expected, atol=1e-6, rtol=0)
    loss.backward()
    assert all(p.grad is None for p in model.parameters())
    assert all(p.grad is not None for p in studs.parameters())


def test_encoder_step_by_step_equals_forward_and_rows_leave():
    model, _ = tiny_classifier("tiny-deberta-v3")
    enc = model.encoder
    ids, mask = batch()
    full = enc(ids, mask, output_hidden_states=True)
    run = enc.begin(ids, mask)
    enc.step(run)
    assert torch.equal(run.hidden(), full.hidden_states[1])
    keep = torch.tensor([1, 3])
    run = enc.keep_rows(run, keep)
    for _ in enc.schedule[1:]:
        enc.step(run)
    alone = enc(ids[keep], mask[keep]).last_hidden_state
    torch.testing.assert_close(run.hidden(), alone, atol=1e-6, rtol=0)


def test_students_save_and_load(tmp_path):
    _, students = tiny_classifier()
    save_students(students, tmp_path)
    meta = json.loads((tmp_path / "early_exit.json").read_text())
    assert meta["num_layers"] == 3 and meta["num_labels"] == 3 and "FastBERT" in meta["method"]
    again = load_students(tmp_path)
    for a, b in zip(students.state_dict().values(), again.state_dict().values()):
        assert torch.equal(a, b)
    with pytest.raises(bf.ModelDirectoryError, match="self-distill"):
        load_students(tmp_path / "nothing")


def test_bad_speed_and_depth_are_refused():
    model, students = tiny_classifier()
    ids, mask = batch()
    with pytest.raises(ValueError, match="speed must lie in"):
        early_exit_forward(model, students, ids, mask, speed=1.5)
    other = StudentClassifiers(5, 32, 3)
    with pytest.raises(ValueError, match="students"):
        early_exit_forward(model, other, ids, mask, speed=0.5)


# --- recipe, CLI, pipeline and server on a tiny model with the real tokenizer ----------------
@pytest.fixture(scope="module")
def distilled(minilm_dir, tmp_path_factory):
    """A tiny 3-layer BERT fine-tuned on a separable toy task, then self-distilled."""
    from bertfamily.data.task_data import TaskOptions
    from bertfamily.recipes.finetune import FinetuneConfig, finetune
    from bertfamily.train import TrainConfig

    root = tmp_path_factory.mktemp("fastbert")
    torch.manual_seed(0)
    cfg = bf.EncoderConfig.from_preset(
        "tiny-bert", vocab_size=30522, num_hidden_layers=3, max_position_embeddings=64
    )
    bf.build_model(cfg).save_pretrained(root / "base")
    bf.load_tokenizer(minilm_dir).save_pretrained(root / "base")
    good, bad = ["excellent", "wonderful", "great", "superb"], ["terrible", "awful", "dreadful"]
    rows = [
        {"text": f"the film was {w} {s}", "label": lab}
        for lab, ws in (("pos", good), ("neg", bad))
        for w in ws
        for s in ("", "today", "again")
    ]
    path = root / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = finetune(
        FinetuneConfig(
            "classify",
            root / "base",
            path,
            path,
            TaskOptions(max_length=16),
            epochs=None,
            self_distill=True,
            distill_steps=30,
            speeds=(0.0, 0.5, 1.0),
        ),
        TrainConfig(
            output_dir=root / "run",
            batch_size=8,
            max_steps=60,
            learning_rate=3e-3,
            warmup_ratio=0.0,
            eval_every=20,
            log_every=0,
            progress=False,
        ),
    )
    return res, root / "run" / "best", path, rows


def test_finetune_self_distill_saves_students_and_evaluates_speeds(distilled):
    res, best, _, _ = distilled
    sd = res["self_distill"]
    assert sd["saved_in"] == str(best) and (best / "early_exit.safetensors").is_file()
    by_speed = {e["speed"]: e for e in sd["eval"]}
    assert by_speed[0.0]["mean_exit_layer"] == 3.0
    assert by_speed[0.0]["accuracy"] == res["eval"]["accuracy"]  # speed 0 = the full model
    assert by_speed[1.0]["mean_exit_layer"] == 1.0
    losses = [json.loads(x) for x in (best.parent / "self_distill" / "metrics.jsonl").open()]
    kl = [x["loss"] for x in losses if "loss" in x]
    assert kl[-1] < kl[0]  # the students learn the teacher


def test_predict_speed_cli_and_pipeline(distilled, cli, tmp_path):
    from bertfamily.pipelines.tasks.early_exit import EarlyExitClassifier
    from bertfamily.recipes.finetune import predict

    res, best, path, rows = distilled
    full, m0 = predict("classify", best, path, labelled=True)
    fast, m1 = predict("classify", best, path, labelled=True, speed=1.0)
    assert m1["mean_exit_layer"] == 1.0 and {p["exit_layer"] for p in fast} == {1}
    zero, m2 = predict("classify", best, path, labelled=True, speed=0.0)
    assert m2["accuracy"] == m0["accuracy"] and [p["label"] for p in zero] == [
        p["label"] for p in full
    ]
    out = tmp_path / "p.jsonl"
    r = cli("predict", "--task", "classify", "--model", best, "-i", path, "-o", out, "--speed", 1)
    assert r.exit_code == 0, r.output
    assert {json.loads(x)["exit_layer"] for x in out.read_text().splitlines()} == {1}
    clf = EarlyExitClassifier(best, speed=0.0)
    (top,) = clf("the film was superb")
    assert top[0]["exit_layer"] == 3 and top[0]["label"] == "pos"
    assert clf("the film was superb", speed=1.0)[0][0]["exit_layer"] == 1
    assert clf.speed == 0.0


def test_server_predict_early_exit(distilled):
    from fastapi.testclient import TestClient

    from bertfamily.serve.app import ServeSettings, create_app, load_served_model

    _, best, _, _ = distilled
    served = load_served_model(best)
    app = create_app(served, ServeSettings(), model_dir=best)
    with TestClient(app) as client:
        r = client.post("/predict", json={"inputs": "the film was great"})
        assert r.status_code == 200 and r.json()[0]["exit_layer"] == 3  # default speed 0
        pair = [["the film was great", "awful"]]  # a batch of one pair
        r = client.post("/predict", json={"inputs": pair, "speed": 1})
        assert r.status_code == 200 and r.json()[0][0]["exit_layer"] == 1  # at layer 1
        batch = [["the film was great"], ["the film was awful today"]]
        r = client.post("/predict", json={"inputs": batch, "speed": 1.0})
        assert r.status_code == 200
        assert [row[0]["exit_layer"] for row in r.json()] == [1, 1]
        r = client.post("/predict", json={"inputs": "x", "speed": 2.0})
        assert r.status_code == 422 and "speed" in r.json()["error"]
