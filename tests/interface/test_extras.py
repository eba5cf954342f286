"""The lean core install: matplotlib, scikit-learn, seqeval, pysbd, mwparserfromhell and jieba
are extras, and every feature that needs one stops with `MissingDependency` naming the
``pip install "bertfamily[extra]"`` that installs it (simulated here by hiding the package)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bertfamily.runtime import MissingDependency

ROOT = Path(__file__).resolve().parents[2]

# the import name, the pip name, the extras that install it
OPTIONAL = [
    ("matplotlib", "matplotlib", ("train", "plots")),
    ("sklearn", "scikit-learn", ("train",)),
    ("seqeval", "seqeval", ("train",)),
    ("pysbd", "pysbd", ("corpora",)),
    ("mwparserfromhell", "mwparserfromhell", ("corpora",)),
    ("jieba", "jieba", ("corpora", "chinese")),
    ("bm25s", "bm25s", ("bm25",)),
]


def hide(monkeypatch: pytest.MonkeyPatch, *packages: str) -> None:
    """Make ``packages`` (and every submodule already imported) unimportable."""
    for top in packages:
        names = [n for n in sys.modules if n == top or n.startswith(top + ".")]
        for name in set(names) | {top}:
            monkeypatch.setitem(sys.modules, name, None)


def assert_names_extra(info: pytest.ExceptionInfo, package: str, extra: str) -> None:
    message = str(info.value)
    assert info.value.name == package
    assert f"optional package {package!r}" in message
    assert f'pip install "bertfamily[{extra}]"' in message


def _requirement_names(requirements: list[str]) -> set[str]:
    import re

    return {re.split(r"[<>=\[; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_core_dependencies_leave_the_optional_packages_to_extras():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = _requirement_names(project["dependencies"])
    extras = {k: _requirement_names(v) for k, v in project["optional-dependencies"].items()}
    for _module, pip_name, in_extras in OPTIONAL:
        assert pip_name not in core
        for extra in in_extras:
            assert pip_name in extras[extra], (pip_name, extra)
        assert pip_name in extras["test"]  # CI installs them


def test_classification_metrics_without_scikit_learn(monkeypatch):
    from bertfamily.evaluation.metrics import classification_metrics

    assert classification_metrics([0, 1, 1], [0, 1, 0])["accuracy"] == pytest.approx(2 / 3)
    hide(monkeypatch, "sklearn")
    with pytest.raises(MissingDependency) as info:
        classification_metrics([0, 1, 1], [0, 1, 0])
    assert_names_extra(info, "sklearn", "train")
    assert "classification metrics" in str(info.value)


def test_entity_metrics_without_seqeval(monkeypatch):
    from bertfamily.evaluation.metrics import entity_metrics

    tags = [["B-PER", "I-PER", "O"]]
    assert entity_metrics(tags, tags)["f1"] == 1.0
    hide(monkeypatch, "seqeval")
    for scheme in ("BIO", "BIOES"):
        with pytest.raises(MissingDependency) as info:
            entity_metrics(tags, tags, scheme)
        assert_names_extra(info, "seqeval", "train")


def test_confusion_png_without_matplotlib(monkeypatch, tmp_path):
    from bertfamily.recipes.finetune import confusion_png

    hide(monkeypatch, "matplotlib")
    out = tmp_path / "confusion.png"
    with pytest.raises(MissingDependency) as info:
        confusion_png([0, 1], [0, 0], ["a", "b"], out)
    assert_names_extra(info, "matplotlib", "train")
    assert not out.exists()


@pytest.mark.parametrize(
    ("task", "problem_type", "package"),
    [
        ("ner", None, "seqeval"),
        ("classify", "single_label_classification", "sklearn"),
        ("pair", "single_label_classification", "matplotlib"),
        ("choice", None, "sklearn"),
    ],
)
def test_finetune_eval_checks_its_packages_before_training(
    monkeypatch, task, problem_type, package
):
    from bertfamily.recipes.finetune import _require_eval_packages

    _require_eval_packages(task, problem_type)  # all installed: no error
    hide(monkeypatch, package)
    with pytest.raises(MissingDependency) as info:
        _require_eval_packages(task, problem_type)
    assert_names_extra(info, package, "train")
    assert f"--task {task}" in str(info.value)


def test_finetune_eval_without_metrics_packages_is_fine_where_none_is_used(monkeypatch):
    from bertfamily.recipes.finetune import _require_eval_packages

    hide(monkeypatch, "sklearn", "seqeval", "matplotlib")
    _require_eval_packages("qa", None)
    _require_eval_packages("classify", "regression")
    _require_eval_packages("classify", "multi_label_classification")


def test_loss_curve_is_skipped_without_matplotlib(monkeypatch, tmp_path, caplog):
    from bertfamily.train.plot import plot_metrics

    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"split": "train", "step": 1, "loss": 2.0}\n')
    hide(monkeypatch, "matplotlib")
    with caplog.at_level("INFO", logger="bertfamily.train.plot"):
        assert plot_metrics(metrics, tmp_path / "loss.png") is None
    assert 'pip install "bertfamily[train]"' in caplog.text
    assert not (tmp_path / "loss.png").exists()


def test_attention_heatmap_without_matplotlib_stops_before_loading(monkeypatch, tmp_path):
    from bertfamily.inspect.attention_plot import attention_heatmap, plot_attention

    hide(monkeypatch, "matplotlib")
    with pytest.raises(MissingDependency) as info:  # the model path is never read
        attention_heatmap("hi", tmp_path / "a.png", tmp_path / "no-such-model")
    assert_names_extra(info, "matplotlib", "plots")
    with pytest.raises(MissingDependency):
        plot_attention(["a"], [[1.0]], tmp_path / "a.png")


def test_attention_command_without_matplotlib_prints_the_fix(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from bertfamily.cli import app

    hide(monkeypatch, "matplotlib")
    result = CliRunner().invoke(app, ["attention", "hi", "-o", str(tmp_path / "a.png")])
    assert result.exit_code == 2, result.output
    assert 'pip install "bertfamily[plots]"' in result.output
    assert "Traceback" not in result.output


def test_sentence_splitting_without_pysbd(monkeypatch):
    from bertfamily.data import corpora

    corpora._segmenter.cache_clear()  # a segmenter built earlier would hide the import
    hide(monkeypatch, "pysbd")
    try:
        with pytest.raises(MissingDependency) as info:
            corpora.split_sentences("One. Two.")
    finally:
        corpora._segmenter.cache_clear()
    assert_names_extra(info, "pysbd", "corpora")


def test_wikipedia_dump_without_mwparserfromhell(monkeypatch, tmp_path):
    from bertfamily.data.corpora import wiki_xml_to_documents

    dump = tmp_path / "dump.xml"
    dump.write_text(
        "<mediawiki><page><title>A</title><ns>0</ns><revision><text>Hello.</text>"
        "</revision></page></mediawiki>"
    )
    hide(monkeypatch, "mwparserfromhell")
    with pytest.raises(MissingDependency) as info:
        list(wiki_xml_to_documents(dump))
    assert_names_extra(info, "mwparserfromhell", "corpora")


def test_chinese_words_without_jieba(monkeypatch):
    import numpy as np

    from bertfamily.objectives.masking import chinese_word_ids
    from bertfamily.objectives.phrase_masking import chinese_phrases
    from bertfamily.tokenization.jieba_words import jieba_segmenter

    hide(monkeypatch, "jieba", "rjieba")
    with pytest.raises(MissingDependency) as info:
        chinese_phrases("我爱北京")
    assert_names_extra(info, "jieba", "chinese")
    with pytest.raises(MissingDependency) as info:
        chinese_word_ids("我爱", [(0, 1), (1, 2)], np.array([False, False]))
    assert_names_extra(info, "jieba", "chinese")
    with pytest.raises(MissingDependency) as info:
        jieba_segmenter()
    assert_names_extra(info, "jieba", "chinese")
    assert "RoFormer" in str(info.value)
    # gold words need no segmenter
    assert chinese_phrases("我爱北京", ["我", "爱", "北京"]) == [(2, 4)]
