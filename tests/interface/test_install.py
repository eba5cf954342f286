"""Install and start-up contracts: the fast commands import no torch, optional features name the
pip command that installs them, and written files keep the user's umask."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bertfamily.runtime import MissingDependency, install_command, require

ROOT = Path(__file__).resolve().parents[2]

# Runs `bertfamily ARGS` in a fresh interpreter, then reports on stderr whether torch was imported.
PROBE = (
    "import sys, runpy; sys.argv = ['bertfamily'] + sys.argv[1:]\n"
    "try:\n    runpy.run_module('bertfamily', run_name='__main__')\n"
    "except SystemExit as e:\n    code = e.code\nelse:\n    code = 0\n"
    "print('TORCH', 'torch' in sys.modules, 'CODE', code, file=sys.stderr)"
)


def _run(*args: str, pre: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", pre + PROBE, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("args", [["--help"], ["fetch", "--list"], ["models", "--format", "json"]])
def test_fast_commands_do_not_import_torch(args):
    r = _run(*args)
    assert r.stderr.strip().splitlines()[-1] in ("TORCH False CODE 0", "TORCH False CODE None")
    assert r.stdout.strip()
    if args[0] == "fetch":
        assert "all-MiniLM-L6-v2" in r.stdout


def test_models_command_stays_correct():
    """`models` counts without torch, and its counts are the published ones."""
    from bertfamily.presets import FAMILY

    r = _run("models", "--format", "json")
    assert r.stderr.strip().splitlines()[-1] == "TORCH False CODE 0"
    rows = {row["model"]: row for row in json.loads(r.stdout)}
    assert list(rows) == list(FAMILY)
    assert rows["bert-base"]["parameters"] == rows["bert-base"]["published"] == 109482240
    assert all(row["parameters"] == row["published"] for row in rows.values())


def test_require_returns_the_module():
    assert require("json", "x", "a feature") is json


def test_require_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "bertfamily_missing_pkg", None)
    with pytest.raises(MissingDependency) as info:
        require("bertfamily_missing_pkg", "onnx", "ONNX export")
    e = info.value
    assert isinstance(e, ModuleNotFoundError) and isinstance(e, RuntimeError)
    assert e.name == "bertfamily_missing_pkg"
    assert 'pip install "bertfamily[onnx]"' in str(e) and "ONNX export" in str(e)
    assert install_command("onnx") == 'pip install "bertfamily[onnx]"'


def test_require_reraises_a_broken_inner_import(tmp_path, monkeypatch):
    (tmp_path / "bf_broken_pkg.py").write_text("import bf_no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as info:
        require("bf_broken_pkg", "x", "a feature")
    assert not isinstance(info.value, MissingDependency)


def test_pyproject_has_the_onnx_extra():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = " ".join(project["optional-dependencies"]["onnx"])
    for name in ("onnx", "onnxruntime", "onnxscript"):
        assert name in extra
    deps = " ".join(project["dependencies"])
    assert "onnx" not in deps and "selenium" not in deps


@pytest.fixture
def tiny_dir(tmp_path):
    import bertfamily as bf
    from bertfamily.config import EncoderConfig

    d = tmp_path / "tiny"
    bf.build_model(EncoderConfig.from_preset("tiny-bert")).save_pretrained(d)
    return d


def test_export_without_onnx_names_the_extra(tiny_dir, tmp_path):
    out = tmp_path / "x.onnx"
    r = _run("export", str(tiny_dir), str(out), pre="import sys; sys.modules['onnx'] = None\n")
    assert "CODE 2" in r.stderr, r.stderr
    assert 'pip install "bertfamily[onnx]"' in r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists()


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_export_keeps_the_umask(cli, tiny_dir, tmp_path, umask_022):
    pytest.importorskip("onnx")
    out = tmp_path / "x.onnx"
    result = cli("export", tiny_dir, out)
    assert result.exit_code == 0, result.output
    assert out.stat().st_mode & 0o777 == 0o644


@pytest.mark.slow
def test_embed_output_keeps_the_umask(cli, minilm_dir, tmp_path, umask_022):
    inp = tmp_path / "in.txt"
    inp.write_text("A man is eating food.\nA girl carries a baby.\n")
    out = tmp_path / "x.npy"
    result = cli("embed", "--input", inp, "--output", out, "--model", minilm_dir)
    assert result.exit_code == 0, result.output
    assert out.stat().st_mode & 0o777 == 0o644
