"""The Spark pandas UDF recipe (#33 item 3), tested with pandas alone (pyspark is not a
dependency): the body embeds like `SentenceEmbedder.encode`, keeps the Series index, loads the
model once, and carries the iterator-of-Series type hints `pandas_udf` needs."""

from __future__ import annotations

import typing
from collections.abc import Iterator

import numpy as np
import pytest

from helpers import save_tiny

pd = pytest.importorskip("pandas", reason='the Spark UDF needs pandas: "bertfamily[spark]"')


@pytest.fixture(scope="module")
def tiny(minilm_dir, tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("spark-model") / "tiny", minilm_dir)


def test_the_udf_body_embeds_like_encode(tiny, monkeypatch):
    from bertfamily.integrations import spark
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    loads = []
    real = SentenceEmbedder.__init__

    def counting(self, *a, **k):
        loads.append(a)
        real(self, *a, **k)

    monkeypatch.setattr(SentenceEmbedder, "__init__", counting)
    monkeypatch.setattr(spark, "_MODELS", {})
    body = spark.series_embedder(str(tiny), dtype="fp32")
    hints = typing.get_type_hints(body)
    assert hints == {"batches": Iterator[pd.Series], "return": Iterator[pd.Series]}
    texts = [f"text {i} about {w}" for i, w in enumerate(["cats", "dogs", "rivers"] * 7)]
    parts = [
        pd.Series(texts[:8], index=range(100, 108)),  # Arrow batches of one partition
        pd.Series(texts[8:] + ["  ", None], index=range(108, 123)),
    ]
    out = list(body(iter(parts)))
    out += list(body(iter([pd.Series(texts[:2])])))  # a second partition, same worker
    assert len(loads) == 1  # the model is loaded once per Python worker
    assert [list(s.index) for s in out[:2]] == [list(p.index) for p in parts]
    got = np.stack([v for s in out[:2] for v in s if len(v)])
    want = SentenceEmbedder(tiny, dtype="fp32").encode(texts)
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert list(out[1].iloc[-2:].map(len)) == [0, 0]  # blank and null texts: empty lists
    assert got.dtype == np.float32
