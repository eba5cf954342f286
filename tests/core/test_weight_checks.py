"""Weights are checked, not trusted (issue 34, item 2): non-finite weights are refused at load
naming the tensor, dtypes the family does not store are refused (fp16/bf16 → fp32 is exact and
reported), a weight flattened to 1-D is a clear CheckpointError, weights that overflow the run
dtype are refused, and embeddings that come out non-finite are never written (naming the
rows)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import bertfamily as bf
from bertfamily import EncoderConfig, ModelDirectoryError, build_model
from bertfamily.checkpoints.convert import CheckpointError
from bertfamily.errors import NonFiniteOutputError

LN = "encoder.layer.0.attention.output.LayerNorm.weight"
WORDS = "embeddings.word_embeddings.weight"
DENSE = "encoder.layer.1.output.dense.weight"
QUERY = "encoder.layer.0.attention.self.query.weight"


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("weights") / "model"
    build_model(EncoderConfig.from_preset("tiny-bert")).save_pretrained(path)
    return path


def edited(saved: Path, tmp_path: Path, edit, bin_file: bool = False) -> Path:
    path = tmp_path / "model"
    shutil.copytree(saved, path)
    state = load_file(path / "model.safetensors")
    assert WORDS in state and LN in state and QUERY in state, sorted(state)[:5]
    edit(state)
    if bin_file:
        (path / "model.safetensors").unlink()
        torch.save(state, path / "pytorch_model.bin")
    else:
        save_file({k: v.contiguous() for k, v in state.items()}, path / "model.safetensors")
    return path


def _set(name: str, index, value):
    def edit(state):
        state[name][index] = value

    return edit


@pytest.mark.parametrize("bin_file", [False, True])
@pytest.mark.parametrize(
    "name, index, value",
    [(DENSE, (3, 5), float("nan")), (WORDS, (7, 0), float("inf")), (LN, (2,), float("-inf"))],
)
def test_non_finite_weights_are_refused_naming_the_tensor(
    saved, tmp_path, name, index, value, bin_file
):
    path = edited(saved, tmp_path, _set(name, index, value), bin_file)
    with pytest.raises(ModelDirectoryError) as e:
        bf.from_pretrained(path)
    msg = str(e.value)
    assert f"tensor {name!r}" in msg and "1 non-finite values" in msg, msg
    assert f"at {list(index)}" in msg and str(value) in msg
    assert ("pytorch_model.bin" if bin_file else "model.safetensors") in msg and "\n" not in msg


@pytest.mark.parametrize(
    "name, dtype",
    [
        (LN, torch.int64),
        (WORDS, torch.bool),
        (DENSE, torch.uint8),
        (DENSE, torch.float8_e4m3fn),
        (WORDS, torch.int32),
    ],
)
def test_dtypes_the_family_does_not_store_are_refused(saved, tmp_path, name, dtype):
    def edit(state):
        state[name] = state[name].to(dtype)

    path = edited(saved, tmp_path, edit)
    kind = str(dtype).replace("torch.", "")
    with pytest.raises(ModelDirectoryError, match=rf"tensor '{name}' is stored as {kind}"):
        bf.from_pretrained(path)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_weights_are_converted_exactly_and_reported(saved, tmp_path, dtype, caplog):
    def edit(state):
        for k in (WORDS, DENSE):
            state[k] = state[k].to(dtype)

    path = edited(saved, tmp_path, edit)
    stored = load_file(path / "model.safetensors")
    with caplog.at_level(logging.WARNING):
        model = bf.from_pretrained(path)
    kind = str(dtype).replace("torch.", "")
    assert f"converted 2 {kind} tensors to float32 (exact)" in caplog.text
    ours = model.state_dict()
    assert ours["encoder.embeddings.token.weight"].dtype == torch.float32
    assert torch.equal(ours["encoder.embeddings.token.weight"], stored[WORDS].float())


def test_float64_is_accepted_only_when_exact(saved, tmp_path):
    def exact(state):
        state[DENSE] = state[DENSE].double()

    model = bf.from_pretrained(edited(saved, tmp_path / "a", exact))
    assert model.state_dict()["encoder.layers.1.ffn.down.weight"].dtype == torch.float32

    def inexact(state):
        state[DENSE] = state[DENSE].double() + 1e-12

    with pytest.raises(ModelDirectoryError, match=r"float64 with values float32 cannot hold"):
        bf.from_pretrained(edited(saved, tmp_path / "b", inexact))


def test_integer_position_id_buffers_still_load(saved, tmp_path):
    def edit(state):
        state["embeddings.position_ids"] = torch.arange(64)[None]

    bf.from_pretrained(edited(saved, tmp_path, edit))


@pytest.mark.parametrize("name", [QUERY, WORDS])
def test_a_weight_flattened_to_1d_is_a_checkpoint_error(saved, tmp_path, name):
    def edit(state):
        state[name] = state[name].flatten()

    path = edited(saved, tmp_path, edit)
    with pytest.raises(CheckpointError, match=r"shape mismatches \(1\)") as e:
        bf.from_pretrained(path)
    assert name in str(e.value) or "embeddings.token" in str(e.value)
    assert f"({32 * 32},)" in str(e.value) or f"({99 * 32},)" in str(e.value)


def test_weights_that_overflow_the_run_dtype_are_refused(saved, tmp_path):
    path = edited(saved, tmp_path, _set(DENSE, (0, 0), 1e6))
    bf.from_pretrained(path)  # finite in float32
    with pytest.raises(ModelDirectoryError, match=r"'encoder\.layers\.1\.ffn\.down\.weight' "):
        bf.from_pretrained(path, dtype=torch.float16)


# --- outputs -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def poisoned(minilm_dir, tmp_path_factory):
    """A tiny BERT with MiniLM's tokenizer whose embedding of "zebra" is finite but huge
    (3e38): every text holding it overflows LayerNorm to NaN; the others are fine."""
    from test_bulk_embed import save_tiny

    path = save_tiny(tmp_path_factory.mktemp("poisoned") / "m", minilm_dir)
    zebra = bf.load_tokenizer(path).convert_tokens_to_ids("zebra")
    state = load_file(path / "model.safetensors")
    state[WORDS][zebra] = 3e38
    save_file(state, path / "model.safetensors")
    return path


TEXTS = ["a cat", "a zebra", "the dog", "zebra zebra", "fine"]


def test_encode_refuses_non_finite_rows_naming_them(poisoned):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    emb = SentenceEmbedder(poisoned, dtype="fp32")
    with pytest.raises(NonFiniteOutputError, match=r"for 2 of 5 texts \(rows 1, 3, counting") as e:
        emb.encode(TEXTS)
    assert e.value.rows == [1, 3]
    ok = emb.encode([TEXTS[0], TEXTS[2]])
    assert np.isfinite(ok).all() and ok.shape == (2, 32)


def test_embed_cli_writes_nothing_when_rows_are_not_finite(cli, poisoned, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "out.npy"
    r = cli("embed", "-i", src, "-o", out, "--model", poisoned, "--dtype", "fp32")
    assert r.exit_code != 0 and "rows 1, 3" in r.output, r.output
    assert "Traceback" not in r.output and not out.exists()
    bulk = tmp_path / "bulk"
    r = cli("embed", "-i", src, "-o", bulk, "--model", poisoned, "--dtype", "fp32")
    assert r.exit_code != 0 and "lines 2, 4" in r.output, r.output
    assert not list(bulk.glob("shard-*.npy"))
