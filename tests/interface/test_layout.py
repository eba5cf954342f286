"""The package layout (issue #27): named folders, no oversized room, one error base, old import
paths kept."""

from __future__ import annotations

import ast
import importlib
import sys
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


# --- one resolver, called once; config.json parsed once per load ------------------------------


@pytest.fixture
def count_loads(monkeypatch):
    """Counts name lookups of the one resolver and reads of any config.json."""
    from bertfamily.resources import resolve

    reads: list[Path] = []
    real_open, real_read_bytes = open, Path.read_bytes

    def counting_open(file, *a, **k):
        # the cache's integrity hash is no parse: it re-reads a file whose inode or ctime
        # another test process changed (resources.cache), whatever the loader does
        hashing = sys._getframe(1).f_code.co_name == "sha256_file"
        if Path(str(file)).name == "config.json" and not hashing:
            reads.append(Path(str(file)))
        return real_open(file, *a, **k)

    def counting_read_bytes(self):
        if self.name == "config.json":
            reads.append(self)
        return real_read_bytes(self)

    monkeypatch.setattr("builtins.open", counting_open)
    monkeypatch.setattr(Path, "read_bytes", counting_read_bytes)

    def counts(action):
        """(result, name lookups, reads of the model's own config.json — not a module's)."""
        start, reads[:] = resolve.RESOLUTIONS, []
        out = action()
        model_reads = [p for p in reads if not p.parent.name[:1].isdigit()]  # 1_Pooling/...
        return out, resolve.RESOLUTIONS - start, len(model_reads)

    return counts


def test_python_loaders_take_the_names_the_cli_takes(minilm_dir, count_loads):
    """`bertfamily embed x --model all-MiniLM-L6-v2` worked, `from_pretrained` of the same name
    did not; now every loader takes it, resolving it once and reading config.json once."""
    import bertfamily as bf
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    model, lookups, reads = count_loads(lambda: bf.from_pretrained("all-MiniLM-L6-v2"))
    assert (lookups, reads) == (1, 1)
    assert model.config.hidden_size == 384 and model.config.num_hidden_layers == 6

    tok, lookups, reads = count_loads(lambda: bf.load_tokenizer("all-MiniLM-L6-v2"))
    assert (lookups, reads) == (1, 1)
    assert tok("hello world")["input_ids"].tolist() == [[101, 7592, 2088, 102]]

    emb, lookups, reads = count_loads(lambda: SentenceEmbedder("all-MiniLM-L6-v2", dtype="fp32"))
    assert (lookups, reads) == (1, 1)  # model and tokenizer share one parse
    direct = SentenceEmbedder(minilm_dir, dtype="fp32")
    a, b = emb.encode(["a cat"]), direct.encode(["a cat"])
    assert float((a * b).sum()) == pytest.approx(1.0, abs=1e-6)


def test_serving_a_model_resolves_and_parses_once(minilm_dir, count_loads):
    from bertfamily.serve.app import load_served_model

    embedder, lookups, reads = count_loads(
        lambda: load_served_model("all-MiniLM-L6-v2", dtype="fp32")
    )
    assert (lookups, reads) == (1, 1)
    assert embedder.max_length == 256


def test_every_pipeline_takes_device_and_dtype_the_same_way():
    import inspect

    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from bertfamily.pipelines.tasks.classify import TextClassifier
    from bertfamily.pipelines.tasks.fill_mask import FillMask
    from bertfamily.pipelines.tasks.ner import EntityTagger
    from bertfamily.pipelines.tasks.qa import QuestionAnswerer

    for cls in (TextClassifier, EntityTagger, QuestionAnswerer, FillMask, SentenceEmbedder):
        params = inspect.signature(cls.__init__).parameters
        assert "device" in params and "dtype" in params, cls.__name__
