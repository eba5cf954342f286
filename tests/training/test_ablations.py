"""benchmarks/ablations.py: every arm differs from its reference in exactly its switch, the
harness runs end to end at toy size, the verdict follows its rule, and the committed page's
table is the one the committed JSON renders."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import ablations  # noqa: E402

# The PretrainConfig fields each switch may change (language changes the data, not them).
FIELDS = {
    "masking": {"masking"},
    "static_copies": {"static_copies"},
    "packing": {"packing"},
    "objectives": {"objectives"},
    "phrases": {"phrases"},
    "language": set(),
    # the fine-tuning switches leave every pretraining field alone
    **{switch: set() for switch in ablations.DOWNSTREAM},
}


@pytest.mark.parametrize("arm", [a for a, (ref, _) in ablations.ARMS.items() if ref])
def test_arm_differs_from_its_reference_in_exactly_its_switch(arm):
    reference, overrides = ablations.ARMS[arm]
    mine, theirs = ablations.resolved(arm), ablations.resolved(reference)
    assert set(mine) == set(theirs) == set(ablations.BASELINE)
    changed = {k for k in mine if mine[k] != theirs[k]}
    assert len(overrides) == 1 and changed == set(overrides)
    (switch,) = changed
    a, b = ablations.pretrain_fields(mine), ablations.pretrain_fields(theirs)
    differ = {k for k in a if a[k] != b[k]}
    allowed = set(FIELDS[switch])
    if arm == "electra":
        allowed.add("preset")  # RTD trains the ELECTRA layout (the recipe refuses others)
    if arm == "phrases":
        allowed.add("masking")  # phrases are masked as units by the "entity" strategy
    if arm == "zh_whole_word":
        allowed.add("chinese_words")  # jieba's word boundaries
    assert switch in ("language", *ablations.DOWNSTREAM) or differ & FIELDS[switch]
    assert differ <= allowed, (arm, differ)
    assert ablations.is_downstream(arm) == (
        switch in ablations.DOWNSTREAM or arm == "distill_augment"
    )


def test_every_claim_has_an_arm_and_a_reference():
    assert set(ablations.CLAIMS) == {a for a, (ref, _) in ablations.ARMS.items() if ref} - set(
        ablations.REFERENCE_ONLY
    )
    assert ablations.resolved("distill_augment") == {
        **ablations.BASELINE,
        "task_distill": True,
        "augment": True,
    }
    assert ablations.resolved("sop")["objectives"] == ("mlm", "sop")
    assert ablations.resolved("span_sbo") == {
        **ablations.BASELINE,
        "masking": "span",
        "objectives": ("mlm", "sbo"),
    }


def _study(arm_values: list[float], ref_values: list[float]) -> dict:
    runs = {
        name: {str(i): {"metrics": {"mean_downstream": v}} for i, v in enumerate(vals)}
        for name, vals in (("whole_word", arm_values), ("baseline", ref_values))
    }
    return ablations.compare({"runs": runs})


def test_verdict_rule():
    up = _study([0.52, 0.55, 0.61], [0.50, 0.52, 0.59])  # +2, +3, +2: consistent
    cell = up["whole_word"]["mean_downstream"]
    assert cell["diff"] == pytest.approx(0.07 / 3)
    assert cell["p"] == pytest.approx(0.0198, abs=1e-4)  # t = 7.0 on 2 degrees of freedom
    assert up["whole_word"]["claim"]["verdict"] == "reproduces"
    down = _study([0.50, 0.52, 0.59], [0.52, 0.55, 0.61])
    assert down["whole_word"]["claim"]["verdict"] == "contradicted"
    noisy = _study([0.55, 0.50, 0.60], [0.50, 0.55, 0.59])
    assert noisy["whole_word"]["claim"]["verdict"] == "within noise"
    flat = _study([0.0, 0.0, 0.0], [0.0, 0.0, 0.0])  # e.g. NER F1 of untrained models
    assert flat["whole_word"]["claim"]["verdict"] == "no signal"
    assert noisy["baseline"]["mean_downstream"]["mean"] == pytest.approx(1.64 / 3)


def test_verdict_of_a_claim_of_no_loss():
    """FastBERT claims no loss (sign 0): only a significant drop contradicts it."""

    def study(arm_values, ref_values):
        runs = {
            name: {
                str(i): {"metrics": {"sentiment_acc": v, "layers_saved": saved}}
                for i, v in enumerate(vals)
            }
            for name, vals in (("fastbert", arm_values), ("baseline", ref_values))
        }
        return ablations.compare({"runs": runs})["fastbert"]["claim"]["verdict"]

    saved = 0.0  # no text exited early: the claim was not exercised
    assert study([0.50, 0.52, 0.59], [0.52, 0.55, 0.61]) == "no signal"
    saved = 0.4

    assert ablations.CLAIMS["fastbert"][2] == 0
    assert study([0.50, 0.52, 0.59], [0.52, 0.55, 0.61]) == "contradicted"  # -2, -3, -2
    assert study([0.55, 0.50, 0.60], [0.50, 0.55, 0.59]) == "reproduces"  # within noise
    assert study([0.52, 0.55, 0.61], [0.50, 0.52, 0.59]) == "reproduces"  # better still


def test_entity_token_f1_counts_words_by_type_without_the_prefix():
    rows = [
        # person/person: tp; person/O: fp; O/O: nothing; loc/geo-loc: fp and fn
        {
            "tags": ["B-person", "I-person", "O", "B-loc"],
            "gold": ["B-person", "O", "O", "B-geo-loc"],
        },
        # I- against B- of the same type: tp (a boundary error keeps its words); O/company: fn
        {"tags": ["I-person", "O"], "gold": ["B-person", "B-company"]},
    ]
    assert ablations.entity_token_f1(rows) == pytest.approx(2 * 2 / (2 * 2 + 2 + 2))
    assert ablations.entity_token_f1([{"tags": ["O", "O"], "gold": ["B-person", "O"]}]) == 0.0


def test_toy_study_runs_and_renders(tmp_path):
    out = tmp_path / "a.json"
    arms = "baseline,static,electra,kbert,fastbert,distill,distill_augment"
    args = ["--toy", "--seeds", "0,1", "--arms", arms, "--work", str(tmp_path / "w")]
    threads = torch.get_num_threads()
    try:
        ablations.main([*args, "--out", str(out)])
    finally:
        torch.set_num_threads(threads)  # main sets --threads for the process
    result = json.loads(out.read_text())
    assert set(result["runs"]) == set(arms.split(","))
    assert result["machine"]["cpu"] and result["machine"]["cores"] >= 1
    pretrained = ("baseline", "static", "electra")
    for arm, seeds in result["runs"].items():
        assert set(seeds) == {"0", "1"}
        if arm not in pretrained:  # fine-tuning arms: tweet accuracy of the baseline's model
            for seed, run in seeds.items():
                assert 0 <= run["metrics"]["sentiment_acc"] <= 1
                assert "pretrain_steps" not in run and "mlm_acc" not in run["metrics"]
                assert (tmp_path / "w" / f"{arm}-{seed}" / "model" / "config.json").exists()
            continue
        for run in seeds.values():
            m = run["metrics"]
            assert 0 <= m["sentiment_acc"] <= 1 and 0 <= m["ner_f1"] <= 1
            assert 0 <= m["ner_token_f1"] <= 1
            assert m["mean_downstream"] == pytest.approx((m["sentiment_acc"] + m["ner_f1"]) / 2)
            assert ("mlm_acc" in m) == (arm != "electra")  # RTD saves no MLM head
    rtd = result["electra"]
    assert rtd["steps"] == round(3 * rtd["flops_per_step"]["mlm"] / rtd["flops_per_step"]["rtd"])
    assert result["runs"]["electra"]["0"]["pretrain_steps"] == rtd["steps"]
    row = result["table"]["static"]
    runs = result["runs"]
    diffs = [
        runs["static"][s]["metrics"]["sentiment_acc"]
        - runs["baseline"][s]["metrics"]["sentiment_acc"]
        for s in ("0", "1")
    ]
    assert row["sentiment_acc"]["diff"] == pytest.approx(sum(diffs) / 2)
    assert row["claim"]["verdict"] in {"reproduces", "contradicted", "within noise", "no signal"}
    fast = runs["fastbert"]["0"]
    assert set(fast["speeds"]) == {str(s) for s in ablations.FASTBERT_SPEEDS}
    at = fast["speeds"][str(ablations.FASTBERT_SPEED)]
    assert fast["metrics"]["sentiment_acc"] == at["accuracy"]
    assert 1 <= fast["metrics"]["mean_exit_layer"] == at["mean_exit_layer"] <= 2
    assert fast["metrics"]["layers_saved"] == pytest.approx(2 - at["mean_exit_layer"])
    # FastBERT's fine-tuning is the baseline's (same seed, steps, data): the same full model
    for seed in ("0", "1"):
        assert runs["fastbert"][seed]["metrics"]["sentiment_acc_full"] == pytest.approx(
            runs["baseline"][seed]["metrics"]["sentiment_acc"]
        )
    aug = runs["distill_augment"]["0"]["distill"]
    rows = result["downstream_rows"]["distill"]
    assert runs["distill"]["0"]["distill"]["examples"] == rows
    assert aug["examples"] == rows * (1 + 20) and aug["augmentation"]["samples"] == rows * 20
    assert runs["kbert"]["0"]["knowledge_entities"] == 3  # the toy triples
    assert result["table"]["distill_augment"]["reference"] == "distill"
    table = ablations.render_table(result)
    assert table.count("\n") == 2 + 3 + 1 + 2 + 4
    assert "| static | baseline |" in table and row["claim"]["verdict"] in table
    assert "| distill_augment | distill | augment=True |" in table

    # --only-task ner: NER fine-tuned again from the saved models, nothing else touched
    redo = tmp_path / "ner.json"
    ner_args = ["--only-task", "ner", "--base", str(out), "--out", str(redo)]
    try:
        ablations.main([*args, *ner_args])
    finally:
        torch.set_num_threads(threads)
    again = json.loads(redo.read_text())
    assert set(again["runs"]) == set(pretrained)  # NER again: the pretrained arms only
    assert again["ner_rerun"]["budget"]["ner_ft_steps"] == ablations.SIZES["toy"]["ner_ft_steps"]
    for arm, seeds in again["runs"].items():
        for seed, run in seeds.items():
            old, new = runs[arm][seed]["metrics"], run["metrics"]
            assert new["sentiment_acc"] == old["sentiment_acc"]
            assert new["mean_downstream"] == pytest.approx(
                (new["sentiment_acc"] + new["ner_f1"]) / 2
            )
    merged = ablations.main(["--merge", str(out), str(redo), "--out", str(tmp_path / "m.json")])
    assert merged["runs"] == {**runs, **again["runs"]} and "ner_rerun" in merged["parts"][1]


def test_committed_page_table_is_rendered_from_the_committed_json():
    result = json.loads(ablations.OUT.read_text())
    page = ablations.PAGE.read_text(encoding="utf-8")
    assert ablations.page_table(page) == ablations.render_table(result)
    for arm in ablations.ARMS:  # the committed study covers every arm with >= 3 seeds
        assert len(result["runs"][arm]) >= 3, arm


def test_toy_study_under_torchrun_pretrains_with_ddp(tmp_path):
    """Two processes (gloo on the CPU): pretraining and fine-tuning run as DDP, rank 0 alone
    writes the JSON, and the fine-tuning arm waits for the baseline's saved model."""
    import os
    import subprocess

    out, work = tmp_path / "a.json", tmp_path / "w"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    cmd += [str(ROOT / "benchmarks" / "ablations.py"), "--toy", "--seeds", "0"]
    cmd += ["--arms", "baseline,kbert", "--work", str(work), "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result["runs"]) == {"baseline", "kbert"}
    summary = json.loads((work / "baseline-0" / "summary.json").read_text())
    assert summary["world_size"] == 2
    assert res.stdout.count("baseline 0 ") == 1  # one rank prints and writes
