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


@pytest.mark.parametrize("precision", ["int8", "uint8", "binary", "ubinary"])
def test_equal_texts_keep_their_vector_in_every_precision(
    cli, minilm, minilm_dir, tmp_path, precision
):
    """Issue 43: `embed --precision int8` of equal texts gave -128 in every coordinate (the
    calibration range min = max). An empty range is bucketed over [-A, A] now: each row keeps
    the float vector's direction."""
    ours, _ = minilm
    out = tmp_path / "v.npy"
    r = cli("embed", "same text", "same text", "same text", "--model", minilm_dir,
            "--precision", precision, "-o", out)  # fmt: skip
    assert r.exit_code == 0, r.output
    got = np.load(out)
    assert (got == got[0]).all() and len(set(got[0].tolist())) > 2  # not one value
    floats = ours.encode(["same text"])[0]
    if precision.endswith("int8"):
        codes = got[0].astype(np.float64) - (128 if precision == "uint8" else 0)
        assert codes @ floats / np.linalg.norm(codes) / np.linalg.norm(floats) > 0.999
        assert np.array_equal(np.sign(codes[np.abs(floats) > 0.02]),
                              np.sign(floats[np.abs(floats) > 0.02]))  # fmt: skip
    else:
        np.testing.assert_array_equal(got[0], quantize_embeddings(floats[None], precision)[0])


def test_an_empty_range_is_widened_other_dimensions_match_sentence_transformers():
    from sentence_transformers.quantization import quantize_embeddings as st_quantize

    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(6, 8)).astype(np.float32)
    vectors[:, 3] = 0.25  # one dimension constant over the calibration
    got = quantize_embeddings(vectors, "int8")
    with np.errstate(divide="ignore", invalid="ignore"):
        want = st_quantize(vectors, precision="int8")
    keep = [d for d in range(8) if d != 3]
    np.testing.assert_array_equal(got[:, keep], want[:, keep])
    a = np.abs(vectors).max()
    assert (got[:, 3] == int(np.floor((0.25 + a) / (2 * a / 255))) - 128).all()


@pytest.mark.parametrize(
    "vectors, ranges, words",
    [
        ([[np.nan, 1.0], [0.0, 1.0]], None, "NaN or infinity .first: row 0"),
        ([[1.0, 2.0], [0.0, np.inf]], None, "NaN or infinity .first: row 1"),
        ([[1.0, 2.0], [0.0, 1.0]], [[0, 0, 0], [1, 1, 1]], r"shape \(2, 2\)"),
        ([[1.0, 2.0], [0.0, 1.0]], [[0, 2], [1, 1]], "minimum <= its maximum"),
        ([[1.0, 2.0], [0.0, 1.0]], [[0, np.nan], [1, 1]], "finite"),
    ],
)
def test_quantize_refuses_non_finite_input_and_bad_ranges(vectors, ranges, words):
    for precision in ("int8", "ubinary") if ranges is None else ("int8",):
        with pytest.raises(InputError, match=words):
            quantize_embeddings(np.array(vectors), precision, ranges=ranges)


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
