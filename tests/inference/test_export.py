"""ONNX export: every tiny preset x every head exports with dynamic axes, and ONNX Runtime equals
PyTorch within 1e-4 at shapes other than the export example, padded batches included."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from bertfamily import EncoderConfig, build_model
from bertfamily.convert.onnx import export_onnx, output_names

ort = pytest.importorskip("onnxruntime")

TINY = [
    "tiny-bert",
    "tiny-roberta",
    "tiny-distilbert",
    "tiny-albert",
    "tiny-deberta",
    "tiny-longformer",
]
HEADS = ["base", "mlm", "pair", "classify", "tokens", "qa", "choice"]
# Two shapes other than the export example (B=2, T=11): a batch of rows of different lengths
# and a single full row; both lengths are multiples of neither Longformer window (4 and 6).
SHAPES = (((3, 13), (13, 7, 10)), ((1, 7), (7,)))


def batch(config: EncoderConfig, lengths, T: int, seed: int = 0):
    """(B, T) ids of ordinary tokens laid out as ``x q q </s></s> c ... </s>`` where the config
    has a separator (task heads' default global attention), right-padded to the lengths."""
    gen = torch.Generator().manual_seed(seed)
    ordinary = torch.tensor(
        [t for t in range(config.vocab_size) if t not in (config.pad_token_id, config.sep_token_id)]
    )
    ids = ordinary[torch.randint(len(ordinary), (len(lengths), T), generator=gen)]
    mask = torch.zeros(len(lengths), T, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
        if config.sep_token_id is not None:
            ids[row, 3:5] = ids[row, n - 1] = config.sep_token_id
    return ids.masked_fill(mask == 0, config.pad_token_id), mask


def compare(model, session, ids, mask) -> float:
    """Max |ONNX Runtime - PyTorch| over every output (at real tokens for per-token outputs)."""
    feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    if model.config.type_vocab_size:
        feed["token_type_ids"] = np.zeros(ids.shape, dtype=np.int64)
    got = dict(zip(output_names(model), session.run(None, feed)))
    with torch.no_grad():
        want = model(ids, mask)
    fields = {"seq_relationship_logits": "pair_logits"}
    if model.pair_head is not None and model.mlm_head is None:
        fields["logits"] = "pair_logits"
    real = mask.bool().numpy()
    worst = 0.0
    for name, value in got.items():
        expected = getattr(want, fields.get(name, name)).numpy()
        assert value.shape == expected.shape, name
        if model.task != "choice" and value.ndim >= 2 and value.shape[1] == ids.shape[1]:
            value, expected = value[real], expected[real]  # per-token: real positions
        worst = max(worst, float(np.abs(value - expected).max()))
    return worst


def _make(preset: str, head: str):
    config = EncoderConfig.from_preset(preset)
    if head == "pair" and not config.use_pooler:
        pytest.skip(f"{preset} has no pooler, so no pair head")
    torch.manual_seed(0)
    return build_model(config, heads=[] if head == "base" else [head]).eval()


@pytest.mark.slow
@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("preset", TINY)
def test_every_family_and_head(preset, head, tmp_path):
    model = _make(preset, head)
    path = export_onnx(model, tmp_path / "m.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for (B, T), lengths in SHAPES:
        ids, mask = batch(model.config, lengths, T, seed=B)
        if head == "choice":  # (B, K, T): K = 2 choices, a shape other than the export's
            ids = torch.stack([ids, batch(model.config, lengths, T, seed=B + 1)[0]], dim=1)
            mask = torch.stack([mask, mask], dim=1)
        diff = compare(model, session, ids, mask)
        assert diff <= 1e-4, f"{preset}/{head} at {tuple(ids.shape)}: max diff {diff:.2e}"
    assert model.encoder.unpad and not model.training  # restored after export


def test_longformer_global_tokens_dynamic(tmp_path):
    """Longformer "qa": the number of global tokens (the question) is computed in the graph,
    varies per row and per batch, and may be 0."""
    model = _make("tiny-longformer", "qa")
    session = ort.InferenceSession(str(export_onnx(model, tmp_path / "m.onnx")))
    sep = model.config.sep_token_id
    ids, mask = batch(model.config, (17, 9, 12), 17, seed=5)
    ids[1, 1], ids[2, 0] = sep, sep  # questions of 7, 1 and 0 tokens (the row's first </s>)
    assert compare(model, session, ids, mask) <= 1e-4
    ids, mask = batch(model.config, (9, 9), 9, seed=6)
    ids[:, 0] = sep  # no global token in the whole batch
    assert compare(model, session, ids, mask) <= 1e-4


def test_export_refuses_what_it_cannot_compute(tmp_path):
    model = _make("tiny-bert", "base")
    with pytest.raises(ValueError, match="opset"):
        export_onnx(model, tmp_path / "m.onnx", opset=13)
    config = EncoderConfig.from_preset(
        "tiny-bert", conditional_norms=("attention",), condition_size=4
    )
    with pytest.raises(ValueError, match="conditional norms"):
        export_onnx(build_model(config), tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()


def test_output_names():
    names = {h: output_names(_make("tiny-bert", h)) for h in HEADS}
    assert names["base"] == ["last_hidden_state", "pooler_output"]
    assert names["mlm"] == ["last_hidden_state", "logits"]  # no pooler: BertForMaskedLM
    assert names["pair"] == ["last_hidden_state", "pooler_output", "logits"]
    assert names["qa"] == ["start_logits", "end_logits"]
    assert names["classify"] == names["tokens"] == names["choice"] == ["logits"]
    both = build_model(EncoderConfig.from_preset("tiny-bert"), heads=["mlm", "pair"])
    assert output_names(both)[-2:] == ["logits", "seq_relationship_logits"]


@pytest.mark.parametrize("preset", ["tiny-bert", "tiny-roberta", "tiny-distilbert"])
def test_onnx_runtime_matches(preset, tmp_path):
    model = build_model(EncoderConfig.from_preset(preset), heads=["mlm"]).eval()
    path = export_onnx(model, tmp_path / "m.onnx")
    session = ort.InferenceSession(str(path))
    for B, T in ((3, 11), (1, 5)):  # shapes other than the export example: axes are dynamic
        ids = torch.randint(3, 99, (B, T))
        mask = torch.ones(B, T, dtype=torch.long)
        mask[-1, T // 2 :] = 0
        feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
        if model.config.type_vocab_size:
            feed["token_type_ids"] = np.zeros((B, T), dtype=np.int64)
        got = session.run(None, feed)
        with torch.no_grad():
            want = model(ids, mask)
        real = mask.bool().numpy()
        np.testing.assert_allclose(got[0][real], want.last_hidden_state.numpy()[real], atol=1e-4)
        np.testing.assert_allclose(got[-1][real], want.logits.numpy()[real], atol=1e-4)
    assert model.encoder.unpad  # restored after export


def test_export_cli(minilm_dir, tmp_path):
    from bertfamily.cli import app

    result = CliRunner().invoke(app, ["export", str(minilm_dir), str(tmp_path / "m.onnx")])
    assert result.exit_code == 0, result.output
    assert "pooler_output" in result.output and (tmp_path / "m.onnx").stat().st_size > 80e6


def test_export_directory_is_what_optimum_and_sentence_transformers_load(minilm_dir, tmp_path):
    """`bertfamily export MODEL DIR` (issue 44): config, tokenizer and sentence-transformers'
    module files beside one model.onnx (no other weights), which sentence-transformers' ONNX
    backend finds without exporting again, and whose outputs pooled as the directory says
    equal our embedder. optimum itself (optimum-onnx 0.1.0) does not install beside
    transformers 5, so the graph is run here with ONNX Runtime directly."""
    import warnings

    import onnxruntime as ort
    import transformers

    from bertfamily.cli import app
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    out = tmp_path / "minilm-onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("error", torch.jit.TracerWarning)  # none points at our source
        result = CliRunner().invoke(app, ["export", str(minilm_dir), str(out)])
    assert result.exit_code == 0, result.output
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    for name in ("config.json", "tokenizer.json", "modules.json", "1_Pooling/config.json",
                 "config_sentence_transformers.json", "model.onnx"):  # fmt: skip
        assert name in names, names
    assert not [n for n in names if n.endswith((".safetensors", ".bin", ".pt"))], names
    st_utils = pytest.importorskip("sentence_transformers.backend.utils")
    export, kwargs = st_utils.backend_should_export(out, True, {}, "model.onnx", "*.onnx", "ONNX")
    assert export is False and kwargs.get("subfolder") is None  # found, at the root
    assert transformers.AutoConfig.from_pretrained(out).model_type == "bert"
    tok = transformers.AutoTokenizer.from_pretrained(out)
    texts = ["A man is eating food.", "a cat", ""]
    enc = tok(texts, padding=True, return_tensors="np")
    session = ort.InferenceSession(str(out / "model.onnx"))
    feeds = {i.name: enc[i.name].astype(np.int64) for i in session.get_inputs()}
    hidden = session.run(["last_hidden_state"], feeds)[0]  # (B, T, H)
    mask = enc["attention_mask"][..., None]
    mean = (hidden * mask).sum(1) / mask.sum(1)
    mean /= np.linalg.norm(mean, axis=1, keepdims=True)
    np.testing.assert_allclose(mean, SentenceEmbedder(minilm_dir).encode(texts), atol=1e-5)
    bare = CliRunner().invoke(app, ["export", str(minilm_dir), str(tmp_path / "m.onnx")])
    assert bare.exit_code == 0 and "cannot load it" in " ".join(bare.output.split())
