"""Old import paths of modules that moved in the 0.2 re-layout keep working.

``import bertfamily.fetch`` (and ``from bertfamily.fetch import fetch``) returns the module at
its new place, `bertfamily.resources.cache`, under the old name too, so names, monkeypatches and
``isinstance`` checks see one module object. Each old name emits a `DeprecationWarning` once.
The table is the changelog's list of moved modules (docs/changelog.md).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

# old dotted name -> new dotted name
MOVED = {
    "bertfamily.fetch": "bertfamily.resources.cache",
    "bertfamily.hub_cache": "bertfamily.resources.resolve",
    "bertfamily.spm": "bertfamily.tokenization.spm",
    "bertfamily.corpora": "bertfamily.data.corpora",
    "bertfamily.tasks": "bertfamily.data",
    "bertfamily.tasks.data": "bertfamily.data.tables",
    "bertfamily.tasks.qa": "bertfamily.data.squad",
    "bertfamily.tasks.augment": "bertfamily.data.augment",
    "bertfamily.tasks.encode": "bertfamily.data.task_data",
    "bertfamily.tasks.metrics": "bertfamily.evaluation.metrics",
    "bertfamily.train.data": "bertfamily.data.batching",
    "bertfamily.train.precision": "bertfamily.train.mixed_precision",
    "bertfamily.heads.tasks": "bertfamily.heads.task_heads",
    "bertfamily.objectives.tasks": "bertfamily.heads.losses",
    "bertfamily.export": "bertfamily.convert.onnx",
    "bertfamily.to_longformer": "bertfamily.convert.longformer",
    "bertfamily.precision": "bertfamily.inference.precision",
    "bertfamily.index": "bertfamily.pipelines.retrieval.dense",
    "bertfamily.recipes.tokenizer": "bertfamily.tokenization.training",
    "bertfamily.deps": "bertfamily.runtime",
    # the 0.3 re-layout (issue 42): pipelines by kind, the inference engine
    "bertfamily.pipelines.embed": "bertfamily.pipelines.embedding.embed",
    "bertfamily.pipelines.sentence_modules": "bertfamily.pipelines.embedding.sentence_modules",
    "bertfamily.pipelines.bi_encoder": "bertfamily.pipelines.embedding.bi_encoder",
    "bertfamily.pipelines.quantize": "bertfamily.pipelines.embedding.quantize",
    "bertfamily.pipelines.bulk": "bertfamily.pipelines.embedding.bulk",
    "bertfamily.pipelines.sparse": "bertfamily.pipelines.embedding.sparse",
    "bertfamily.pipelines.rerank": "bertfamily.pipelines.reranking.rerank",
    "bertfamily.pipelines.cross_encoder": "bertfamily.pipelines.reranking.cross_encoder",
    "bertfamily.pipelines.classify": "bertfamily.pipelines.tasks.classify",
    "bertfamily.pipelines.ner": "bertfamily.pipelines.tasks.ner",
    "bertfamily.pipelines.qa": "bertfamily.pipelines.tasks.qa",
    "bertfamily.pipelines.fill_mask": "bertfamily.pipelines.tasks.fill_mask",
    "bertfamily.pipelines.early_exit": "bertfamily.pipelines.tasks.early_exit",
    "bertfamily.pipelines.index": "bertfamily.pipelines.retrieval.dense",
    "bertfamily.pipelines.mining": "bertfamily.pipelines.retrieval.mining",
    "bertfamily.pipelines.batching": "bertfamily.inference.limits",
    "bertfamily.pipelines.loading": "bertfamily.inference.loading",
    "bertfamily.pipelines.precision": "bertfamily.inference.precision",
}


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves an old module name of `MOVED` to the module at its new place."""

    def find_spec(self, fullname, path=None, target=None):  # noqa: D102
        if fullname in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):  # noqa: D102
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}; the old name keeps working but will be removed",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(new)

    def exec_module(self, module):  # noqa: D102
        return None  # the module was executed under its new name


def install() -> None:
    """Put the finder first on `sys.meta_path` (once)."""
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
