"""ONNX export: ONNX Runtime outputs equal bertfamily's within 1e-4, dynamic B and T."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from bertfamily import EncoderConfig, build_model
from bertfamily.export import export_onnx

ort = pytest.importorskip("onnxruntime")


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
