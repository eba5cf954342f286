"""A missing optional package is reported at the command's start, before any model loads or
any text is read (`cli.common.require_extras`; issue 46: faiss was reported only after the
corpus had been embedded). The model named here does not exist: a command that looked at it
first would report that instead."""

from __future__ import annotations

import sys

import pytest

MISSING_MODEL = "/nonexistent/model-dir"


@pytest.mark.parametrize(
    ("hidden", "extra", "args"),
    [
        ("faiss", "index", ["index", "build", "--corpus", "{txt}", "-o", "{tmp}/idx"]),
        (
            "faiss",
            "index",
            ["index", "build", "--corpus", "{txt}", "--kind", "binary", "-o", "{tmp}/idx"],
        ),  # fmt: skip
        ("pyarrow", "parquet", ["embed", "--input", "{txt}", "--output", "{tmp}/o.parquet"]),
        (
            "pyarrow",
            "parquet",
            [
                "index",
                "build",
                "--corpus",
                "{tmp}/c.parquet",
                "--kind",
                "sparse",
                "-o",
                "{tmp}/idx",
            ],
        ),  # fmt: skip
        (
            "ray",
            "ray",
            ["embed", "--input", "{txt}", "--output", "{tmp}/shards", "--engine", "ray"],
        ),  # fmt: skip
        ("openvino", "openvino", ["embed", "a", "b", "--runtime", "openvino", "--device", "cpu"]),
        ("onnx", "onnx", ["export", MISSING_MODEL, "{tmp}/m.onnx"]),
        ("matplotlib", "plots", ["attention", "a b", "-o", "{tmp}/a.png"]),
        ("textblob", "phrases", ["pretrain", "{txt}", "--phrases", "english", "-o", "{tmp}/r"]),
    ],
)
def test_a_missing_package_is_named_before_the_model_loads(
    cli, tmp_path, monkeypatch, hidden, extra, args
):
    txt = tmp_path / "c.txt"
    txt.write_text("one document\nanother\n", encoding="utf-8")
    monkeypatch.setitem(sys.modules, hidden, None)  # import and find_spec both fail
    argv = [a.format(txt=txt, tmp=tmp_path) for a in args]
    if argv[0] in ("embed", "index", "attention"):
        argv += ["--model", MISSING_MODEL]
    result = cli(*argv)
    assert result.exit_code == 2, result.output
    assert f"bertfamily[{extra}]" in result.output and repr(hidden) in result.output
    assert MISSING_MODEL not in result.output and "Traceback" not in result.output


def test_require_extra_imports_nothing(monkeypatch):
    from bertfamily.errors import MissingDependency
    from bertfamily.runtime import require_extra

    monkeypatch.delitem(sys.modules, "json.tool", raising=False)
    require_extra("json.tool", "x", "y")
    assert "json.tool" not in sys.modules  # looked up, not imported
    with pytest.raises(MissingDependency, match=r'pip install "bertfamily\[index\]"'):
        require_extra("no_such_module_46", "index", "the vector index")
