"""Matryoshka `dimensions`, `quantize_embeddings` and SPLADE against sentence-transformers 6 on
the same directories: `SentenceEmbedder.encode(dimensions=)` = `SentenceTransformer.encode(
truncate_dim=, normalize_embeddings=True)` on the real MiniLM; every precision =
`quantize_embeddings` (with and without calibration); `SparseEncoder` = sentence-transformers'
`SparseEncoder` (1e-5) on SPLADE directories it saved (max / sum pooling, relu / log1p_relu);
`bertfamily embed --dimensions --precision`."""

from __future__ import annotations

import numpy as np
import pytest

from bertfamily.errors import InputError
from bertfamily.pipelines.embedding.quantize import PRECISIONS, quantize_embeddings
from retrieval_dirs import splade

st = pytest.importorskip("sentence_transformers")
TEXTS = ["The cat sat on the mat.", "a", "Dynamic batching", "the quick brown fox " * 20]


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    return SentenceEmbedder(minilm_dir, dtype="fp32"), st.SentenceTransformer(str(minilm_dir))


@pytest.mark.parametrize("dims", [32, 128, 384])
def test_matryoshka_equals_truncate_dim(minilm, dims):
    ours, theirs = minilm
    got = ours.encode(TEXTS, dimensions=dims)
    want = theirs.encode(TEXTS, truncate_dim=dims, normalize_embeddings=True)
    assert got.shape == (len(TEXTS), dims)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_precisions_equal_quantize_embeddings(minilm, precision):
    from sentence_transformers.quantization import quantize_embeddings as st_quantize

    ours, _ = minilm
    floats = ours.encode(TEXTS * 3)
    want = st_quantize(floats, precision=precision)
    got = quantize_embeddings(floats, precision)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(ours.encode(TEXTS * 3, precision=precision), want)
    calib = ours.encode(["calibration sentence one", "two", "three more words"])
    if precision.endswith("int8"):
        want = st_quantize(floats, precision=precision, calibration_embeddings=calib)
        np.testing.assert_array_equal(
            quantize_embeddings(floats, precision, calibration=calib), want
        )


def test_errors(minilm):
    ours, _ = minilm
    with pytest.raises(InputError, match="384"):
        ours.encode(["x"], dimensions=385)
    with pytest.raises(InputError, match="precision"):
        quantize_embeddings(np.zeros((2, 4)), "int4")
    with pytest.raises(InputError, match="two embeddings"):
        quantize_embeddings(np.zeros((1, 4)), "int8")


def test_cli_embed_dimensions_precision(cli, minilm, minilm_dir, tmp_path):
    ours, _ = minilm
    out = tmp_path / "v.npy"
    r = cli("embed", *TEXTS, "--model", minilm_dir, "--dtype", "fp32", "--dimensions", "64",
            "--precision", "ubinary", "-o", out)  # fmt: skip
    assert r.exit_code == 0, r.output
    got = np.load(out)
    want = quantize_embeddings(ours.encode(TEXTS, dimensions=64), "ubinary")
    np.testing.assert_array_equal(got, want)
    assert got.shape == (len(TEXTS), 8)


@pytest.fixture(scope="module")
def splade_dirs(tmp_path_factory, minilm_dir):
    root = tmp_path_factory.mktemp("splade")
    return {
        (p, a): splade(root / f"{p}-{a}", minilm_dir, p, a, bias=-0.7)
        for p, a in (("max", "relu"), ("sum", "relu"), ("max", "log1p_relu"))
    }


@pytest.mark.parametrize("kind", [("max", "relu"), ("sum", "relu"), ("max", "log1p_relu")])
def test_sparse_equals_sparse_encoder(splade_dirs, kind):
    from bertfamily.pipelines.embedding.sentence_modules import directory_kind
    from bertfamily.pipelines.embedding.sparse import SparseEncoder, to_dense

    d = splade_dirs[kind]
    ours = SparseEncoder(d)
    want = st.SparseEncoder(str(d)).encode(TEXTS).to_dense().numpy()
    vectors = ours.encode(TEXTS)
    np.testing.assert_allclose(to_dense(vectors, ours.dimension), want, atol=1e-5, rtol=0)
    assert all(0 < len(v.indices) < ours.dimension for v in vectors)
    assert directory_kind(d) == "sparse"
    top = ours.encode(TEXTS, max_active_dims=5)
    assert all(len(v.indices) <= 5 for v in top)


def test_splade_pooling_with_the_older_dimension_key_loads(minilm_dir, tmp_path):
    """Older sentence-transformers wrote ``word_embedding_dimension`` in the SpladePooling
    config (6.x renames it on load); such a directory loads and encodes as the new one."""
    import json

    from bertfamily.pipelines.embedding.sparse import SparseEncoder
    from helpers import save_tiny_splade

    d = save_tiny_splade(tmp_path / "splade", minilm_dir)
    new = SparseEncoder(d).encode_dense(["a cat sat", "stocks fell"])
    cfg_file = d / "1_SpladePooling" / "config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["word_embedding_dimension"] = 30522
    cfg_file.write_text(json.dumps(cfg))
    np.testing.assert_array_equal(SparseEncoder(d).encode_dense(["a cat sat", "stocks fell"]), new)
