"""The CPU kernel of fp32 inference linears (`modules.kernels`): oneDNN equals ``nn.Linear``
within float noise, leaves training, export and int8 as they were, and "auto" follows the CPU
vendor; a `SentenceEmbedder` on either kernel equals sentence-transformers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from bertfamily.errors import InputError
from bertfamily.modules import kernels
from bertfamily.modules.kernels import OneDnnLinear, resolve_linear_kernel, use_kernel

pytestmark = pytest.mark.usefixtures("one_thread")

onednn = pytest.mark.skipif(
    not kernels._onednn_available(), reason="this torch build has no oneDNN linear kernel"
)


@onednn
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(7, 48), (3, 5, 48), (0, 48)])
def test_onednn_linear_equals_nn_linear(bias, shape):
    torch.manual_seed(0)
    layer = nn.Linear(48, 96, bias=bias)
    x = torch.randn(*shape)
    with torch.inference_mode():
        want = layer(x)
        use_kernel(layer, "onednn")
        assert type(layer) is OneDnnLinear
        got = layer(x)
    assert got.shape == want.shape == (*shape[:-1], 96)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@onednn
def test_training_and_state_dict_are_unchanged():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert use_kernel(model, "onednn") == 2
    assert model.state_dict().keys() == before.keys()
    x = torch.randn(5, 8)
    model(x).sum().backward()  # autograd on: F.linear, so gradients flow as before
    grads = [p.grad.clone() for p in model.parameters()]
    assert use_kernel(model, "blas") == 2 and type(model[0]) is nn.Linear
    model.zero_grad()
    model(x).sum().backward()
    for a, b in zip(grads, [p.grad for p in model.parameters()], strict=True):
        torch.testing.assert_close(a, b)


@onednn
@pytest.mark.parametrize(
    ("act", "fused"),
    [
        (nn.GELU(), True),
        (nn.GELU(approximate="tanh"), True),
        (nn.ReLU(), True),
        (nn.SiLU(), False),  # no oneDNN post-op of the same formula: two steps
    ],
)
def test_feed_forward_activation_runs_as_the_products_post_op(act, fused):
    from bertfamily.modules.ffn import FeedForward

    torch.manual_seed(0)
    ffn = FeedForward(32, 128, act).eval()
    x = 3 * torch.randn(4, 9, 32)  # wide enough to reach GELU's tails
    calls = []
    act.register_forward_hook(lambda *_: calls.append(1))
    with torch.inference_mode():
        want = ffn(x)
        assert len(calls) == 1
        use_kernel(ffn, "onednn")
        got = ffn(x)
    assert len(calls) == 1 + (not fused)  # fused: the activation module itself never ran
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # with autograd the activation runs on its own again and gradients equal nn.Linear's
    x.requires_grad_(True)
    ffn(x).sum().backward()
    assert len(calls) == 2 + (not fused)
    grad = x.grad.clone()
    x.grad = None
    use_kernel(ffn, "blas")
    ffn(x).sum().backward()
    torch.testing.assert_close(x.grad, grad)


@onednn
def test_packed_weight_follows_the_parameter():
    torch.manual_seed(0)
    layer = nn.Linear(48, 96)
    x = torch.randn(10, 48)
    use_kernel(layer, "onednn")
    with torch.inference_mode():
        layer(x)
    first = layer.__dict__["_onednn_packed"][1]
    assert first.is_mkldnn and "_onednn_packed" not in layer.state_dict()
    with torch.inference_mode():
        layer(x)
    assert layer.__dict__["_onednn_packed"][1] is first  # packed once, reused
    other = nn.Linear(48, 96)
    edits = [
        lambda: layer.load_state_dict(other.state_dict()),  # copy_: version counter
        lambda: torch.no_grad()(lambda: layer.weight.mul_(-2.0))(),
        lambda: setattr(layer, "weight", nn.Parameter(torch.randn(96, 48))),  # new storage
    ]
    for edit in edits:
        edit()
        with torch.inference_mode():
            torch.testing.assert_close(
                layer(x), x @ layer.weight.T + layer.bias, atol=1e-5, rtol=1e-5
            )
    for dtype in (torch.bfloat16, torch.float32):  # .to() there and back: new storage each time
        layer.to(dtype)
    with torch.inference_mode():
        torch.testing.assert_close(layer(x), x @ layer.weight.T + layer.bias, atol=1e-5, rtol=1e-5)
    layer.weight.data.mul_(3.0)  # unseen by the version counter: use_kernel packs again
    use_kernel(layer, "onednn")
    with torch.inference_mode():
        torch.testing.assert_close(layer(x), x @ layer.weight.T + layer.bias, atol=1e-5, rtol=1e-5)
    # copies and pickles leave the packed copy behind and pack their own
    import copy

    for twin in (copy.deepcopy(layer), torch.load(_saved(layer), weights_only=False)):
        assert "_onednn_packed" not in twin.__dict__
        with torch.inference_mode():
            torch.testing.assert_close(twin(x), layer(x))


def _saved(module: nn.Module):
    import io

    buffer = io.BytesIO()
    torch.save(module, buffer)
    buffer.seek(0)
    return buffer


@onednn
@pytest.mark.parametrize("shape", [(7, 48), (3, 5, 48), (0, 48)])
def test_bf16_onednn_linear_equals_nn_linear(shape):
    torch.manual_seed(0)
    layer = nn.Linear(48, 96).to(torch.bfloat16)
    x = torch.randn(*shape).to(torch.bfloat16)
    with torch.inference_mode():
        want = layer(x)
        use_kernel(layer, "onednn")
        got = layer(x)
    assert got.dtype == torch.bfloat16 and got.shape == (*shape[:-1], 96)
    torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=1e-2)


def test_subclasses_are_left_alone():
    class Other(nn.Linear):
        pass

    model = nn.Sequential(Other(4, 4), nn.Linear(4, 4))
    assert use_kernel(model, "onednn") == 1 and type(model[0]) is Other


def test_auto_is_onednn_where_torch_has_it(monkeypatch):
    monkeypatch.setattr(kernels, "_onednn_available", lambda: True)
    for vendor in ("AuthenticAMD", "GenuineIntel", ""):  # every CPU, fp32 and bf16
        monkeypatch.setattr(kernels, "cpu_vendor", lambda v=vendor: v)
        kernel, reason = resolve_linear_kernel("auto")
        assert kernel == "onednn" and "row-invariant" in reason
        assert resolve_linear_kernel("auto", torch.bfloat16)[0] == "onednn"
    assert resolve_linear_kernel("onednn") == ("onednn", "onednn (asked)")
    monkeypatch.setattr(kernels, "_onednn_available", lambda: False)
    assert resolve_linear_kernel("auto", torch.bfloat16)[0] == "blas"
    assert resolve_linear_kernel("auto")[0] == "blas"
    with pytest.raises(InputError, match="no oneDNN"):
        resolve_linear_kernel("onednn")
    with pytest.raises(InputError, match="auto, blas, onednn"):
        resolve_linear_kernel("mkl")


def test_cpu_vendor_reads_proc_cpuinfo():
    info = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 23\n"
    assert kernels.cpu_vendor(info) == "AuthenticAMD"
    assert kernels.cpu_vendor("processor\t: 0\n") == ""


@onednn
@pytest.mark.slow
def test_embedder_on_either_kernel_equals_sentence_transformers(minilm_dir, tmp_path):
    from sentence_transformers import SentenceTransformer

    from bertfamily.convert.onnx import OnnxRuntimeModel, export_onnx
    from bertfamily.inference.precision import apply_int8, linear_layers
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    texts = ["A cat sat on the mat.", "short", "It is a truth universally acknowledged, " * 9]
    want = SentenceTransformer(str(minilm_dir), device="cpu").encode(texts)
    for kernel in ("blas", "onednn"):
        emb = SentenceEmbedder(minilm_dir, dtype="fp32", linear_kernel=kernel)
        assert emb.linear_kernel == kernel
        np.testing.assert_allclose(emb.encode(texts), want, atol=1e-5)
    with pytest.raises(InputError, match="linear_kernel"):
        SentenceEmbedder(minilm_dir, dtype="fp32", linear_kernel="mkl")
    # bf16: oneDNN by default, within bf16's agreement of the fp32 reference
    bf16 = SentenceEmbedder(minilm_dir, dtype="bf16")
    assert bf16.linear_kernel == "onednn"
    assert any(type(m) is OneDnnLinear for m in bf16.model.modules())
    cosine = (bf16.encode(texts) * want).sum(axis=1) / np.linalg.norm(want, axis=1)
    assert cosine.min() >= 0.999
    # a oneDNN model still exports (F.linear while traced) and still quantises (torch.ao
    # maps nn.Linear: apply_int8 converts its copy back)
    graph = export_onnx(emb.model, tmp_path / "m.onnx")
    fp32 = emb.model
    emb.model = OnnxRuntimeModel(graph, 1)
    np.testing.assert_allclose(emb.encode(texts), want, atol=1e-5)
    from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

    layers = linear_layers(fp32)[:2]
    int8 = apply_int8(fp32, layers)
    quantized = {n for n, m in int8.named_modules() if isinstance(m, DynamicInt8Linear)}
    assert quantized == set(layers)
    assert type(dict(fp32.named_modules())[layers[0]]) is OneDnnLinear  # the original kept


@onednn
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_every_pipeline_loader_gives_the_kernel(minilm_dir, dtype):
    """`load_model_and_tokenizer` (classify, tag, answer, rerank, fill-mask, sparse) runs the
    same kernel as the embedder, with the same outputs as F.linear."""
    from bertfamily.inference.loading import load_model_and_tokenizer

    fast = load_model_and_tokenizer(minilm_dir, dtype=dtype, linear_kernel="onednn")
    plain = load_model_and_tokenizer(minilm_dir, dtype=dtype, linear_kernel="blas")
    assert any(type(m) is OneDnnLinear for m in fast.model.modules())
    assert not any(type(m) is OneDnnLinear for m in plain.model.modules())
    batch = fast.tokenizer(["A cat sat on the mat.", "short"], padding=True)
    with torch.inference_mode():
        got = fast.model(batch["input_ids"], batch["attention_mask"]).last_hidden_state
        want = plain.model(batch["input_ids"], batch["attention_mask"]).last_hidden_state
    tol = 1e-5 if dtype == "fp32" else 0.1  # bf16: a rounding step apart in a few places
    torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=tol)
    with pytest.raises(InputError, match="linear_kernel"):
        load_model_and_tokenizer(minilm_dir, linear_kernel="mkl")


def test_apply_linear_kernel_only_where_one_applies():
    from bertfamily.modules.kernels import apply_linear_kernel

    model = nn.Sequential(nn.Linear(4, 4))
    for dtype, device in ((torch.float32, "cuda"), (torch.float16, "cpu")):
        assert apply_linear_kernel(model, "blas", dtype, torch.device(device))[0] is None
        with pytest.raises(InputError, match="linear_kernel"):  # refused on every device
            apply_linear_kernel(model, "mkl", dtype, torch.device(device))
    assert type(model[0]) is nn.Linear
    assert apply_linear_kernel(model, "blas", torch.float32, torch.device("cpu"))[0] == "blas"
