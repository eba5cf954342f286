"""`bertfamily export --pooling` (issue 48 item 7): the graph ends in the sentence vector
(the directory's Pooling, Dense layers, Normalize), so ONNX Runtime alone, fed by the exported
directory's tokenizer, gives sentence-transformers' ``encode`` within 1e-5: on the real MiniLM
and on tiny random directories that sentence-transformers saves (several pooling modes, Dense,
with and without Normalize). What the graph cannot compute is refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from retrieval_dirs import SIZES, classic_cross_encoder

st = pytest.importorskip("sentence_transformers")
stm = pytest.importorskip("sentence_transformers.sentence_transformer.modules")
ort = pytest.importorskip("onnxruntime")
transformers = pytest.importorskip("transformers")

TEXTS = ["A man is eating food.", "a cat", "", "The quick brown fox jumps over the lazy dog."]


def run_graph(directory, graph) -> np.ndarray:
    """ONNX Runtime on the graph, fed by the exported directory's own tokenizer: no bertfamily."""
    tok = transformers.AutoTokenizer.from_pretrained(directory)
    enc = tok(TEXTS, padding=True, return_tensors="np")
    session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    assert session.get_outputs()[-1].name == "sentence_embedding"
    feeds = {i.name: enc[i.name].astype(np.int64) for i in session.get_inputs()}
    return session.run(["sentence_embedding"], feeds)[0]


def reference(directory) -> np.ndarray:
    model = st.SentenceTransformer(str(directory), device="cpu")
    return model.encode(TEXTS, batch_size=2, convert_to_numpy=True)


def test_minilm_directory_and_bare_graph(cli, minilm_dir, tmp_path):
    res = cli("export", minilm_dir, tmp_path / "out", "--pooling")
    assert res.exit_code == 0, res.output
    assert "sentence_embedding" in res.output
    want = reference(minilm_dir)
    got = run_graph(tmp_path / "out", tmp_path / "out" / "model.onnx")
    assert got.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)  # Normalize
    res = cli("export", minilm_dir, tmp_path / "m.onnx", "--pooling")
    assert res.exit_code == 0, res.output
    np.testing.assert_allclose(run_graph(minilm_dir, tmp_path / "m.onnx"), want, atol=1e-5)


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory, minilm_dir):
    """A tiny random BERT (H=32, L=2) with MiniLM's tokenizer."""
    d = tmp_path_factory.mktemp("tiny-hf")
    torch.manual_seed(0)
    transformers.BertModel(transformers.BertConfig(**SIZES)).eval().save_pretrained(d)
    transformers.AutoTokenizer.from_pretrained(minilm_dir).save_pretrained(d)
    return d


CASES = {  # pooling mode(s), Dense layers (out, activation, bias), Normalize
    "cls-dense-tanh-normalize": ("cls", [(16, torch.nn.Tanh(), True)], True),
    "mean-max-concatenated": (("mean", "max"), [], False),
    "lasttoken-two-dense": ("lasttoken", [(24, torch.nn.ReLU(), False), (8, None, True)], True),
    "weightedmean": ("weightedmean", [], False),
    "mean_sqrt_len_tokens": ("mean_sqrt_len_tokens", [], True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_tiny_directories_equal_sentence_transformers(case, tiny_hf, tmp_path):
    from bertfamily.pipelines.embedding.onnx_export import export_sentence_onnx

    mode, dense, normalize = CASES[case]
    torch.manual_seed(1)
    H = SIZES["hidden_size"]
    modules = [stm.Transformer(str(tiny_hf)), stm.Pooling(H, pooling_mode=mode)]
    width = H * (1 if isinstance(mode, str) else len(mode))
    for n_out, act, bias in dense:
        act = act if act is not None else torch.nn.Identity()
        modules.append(stm.Dense(width, n_out, bias=bias, activation_function=act))
        width = n_out
    if normalize:
        modules.append(stm.Normalize())
    source = tmp_path / "st"
    st.SentenceTransformer(modules=modules, device="cpu").save(str(source))
    out = export_sentence_onnx(source, tmp_path / "onnx")
    got = run_graph(out, out / "model.onnx")
    assert got.shape == (len(TEXTS), width)
    np.testing.assert_allclose(got, reference(source), atol=1e-5, rtol=0)


def test_refused(cli, tiny_hf, minilm_dir, tmp_path):
    from bertfamily.errors import InputError
    from bertfamily.pipelines.embedding.onnx_export import export_sentence_onnx

    H = SIZES["hidden_size"]
    modules = [stm.Transformer(str(tiny_hf)), stm.Pooling(H, "mean", include_prompt=False)]
    source = tmp_path / "instructor"
    st.SentenceTransformer(modules=modules, device="cpu").save(str(source))
    with pytest.raises(InputError, match="include_prompt=False"):
        export_sentence_onnx(source, tmp_path / "a")
    ce = classic_cross_encoder(tmp_path / "ce", minilm_dir)
    with pytest.raises(InputError, match="base encoder"):
        export_sentence_onnx(ce, tmp_path / "b.onnx")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b.onnx").exists()
    res = cli("export", minilm_dir, tmp_path / "q.onnx", "--pooling", "--quantize", "int8")
    assert res.exit_code != 0 and "do not combine" in " ".join(res.output.split())
