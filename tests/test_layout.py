"""The package layout (issue #27): named folders, no oversized room, one error base, old import
paths kept."""

from __future__ import annotations

import ast
import importlib
import warnings
from pathlib import Path

import pytest

import bertfamily
from bertfamily import _compat, errors

PACKAGE = Path(bertfamily.__file__).parent
# pure data tables may be longer: key maps and presets
DATA_TABLES = {"checkpoints/keymaps.py", "presets.py"}


def test_at_most_twelve_files_at_the_top():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 12, top
    for first in ("model.py", "build.py", "config.py", "presets.py", "errors.py"):
        assert first in top


def test_no_source_file_over_900_lines():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 900
    }
    assert not set(long) - DATA_TABLES, long


@pytest.mark.parametrize("old", sorted(_compat.MOVED))
def test_old_import_paths_give_the_module_at_its_new_place(old):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = importlib.import_module(old)
    assert module is importlib.import_module(_compat.MOVED[old])
    assert module.__name__ == _compat.MOVED[old]


def test_old_from_imports_still_work():
    from bertfamily.data.task_data import TaskData as New
    from bertfamily.fetch import fetch  # noqa: F401
    from bertfamily.tasks.encode import TaskData

    assert TaskData is New


def _exception_classes():
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and (
                node.name.endswith(("Error", "Exception")) or node.name == "MissingDependency"
            ):
                yield path.relative_to(PACKAGE), node.name


def test_every_error_class_is_defined_once_in_errors_and_derives_from_the_base():
    found = list(_exception_classes())
    elsewhere = [f"{p}:{n}" for p, n in found if str(p) != "errors.py"]
    assert not elsewhere, f"error classes outside errors.py: {elsewhere}"
    for _, name in found:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.BertFamilyError), name
        assert getattr(bertfamily, name) is cls  # exported from the top
    assert len(found) >= 17


def test_errors_keep_the_builtin_bases_users_catch():
    assert issubclass(errors.ConfigError, ValueError)
    assert issubclass(errors.CheckpointError, ValueError)
    assert issubclass(errors.FetchError, RuntimeError)
    assert issubclass(errors.CacheCorruptError, ValueError)
    assert issubclass(errors.MissingDependency, ImportError)
    from bertfamily.checkpoints.convert import CheckpointError

    assert CheckpointError is errors.CheckpointError  # importable from where it is raised
