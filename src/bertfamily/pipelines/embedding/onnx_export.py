"""ONNX export of a sentence embedder with its pooling in the graph (``bertfamily export
--pooling``): input_ids, attention_mask (and token_type_ids) in, the sentence vector out, so
ONNX Runtime alone gives what `SentenceEmbedder.encode` (and sentence-transformers' ``encode``)
gives, without our code or sentence-transformers at run time.

The head traced after the encoder is the directory's own: its Pooling mode(s) (`embed.pool`,
the function the embedder runs), its Dense layers, and L2 normalisation when the directory
ends with Normalize (a plain Hugging Face directory: mean pooling, normalised, as
`read_sentence_modules` reads it).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ...convert.onnx import SENTENCE_OUTPUT, export_onnx, export_onnx_directory
from ...errors import InputError
from ...model import Model
from .embed import pool
from .sentence_modules import SentenceModules, read_sentence_modules

__all__ = ["SENTENCE_OUTPUT", "SentenceOnnxHead", "export_sentence_onnx"]


class SentenceOnnxHead(nn.Module):
    """(last_hidden_state (B, T, H) float, attention_mask (B, T) int) → (B, D) float32: a
    sentence-transformers directory's Pooling, Dense layers and Normalize, as one module that
    traces into an ONNX graph (`convert.onnx.export_onnx` ``sentence``).

    Args:
        modules: the directory's modules (`read_sentence_modules`).

    Raises:
        InputError: a static-embedding directory (no encoder to export), or a Pooling with
            ``include_prompt=False`` (the graph cannot tell a prompt's tokens from the text's).
    """

    def __init__(self, modules: SentenceModules) -> None:
        super().__init__()
        if modules.static is not None:
            raise InputError(
                f"{modules.model_dir} is a static-embedding model (a table of token vectors, no "
                "encoder): there is no encoder graph to export"
            )
        if not modules.pooling.include_prompt:
            raise InputError(
                f"{modules.model_dir}: its Pooling leaves prompt tokens out "
                "(include_prompt=False), which the graph cannot tell from the text's tokens; "
                "export without --pooling and pool outside the graph"
            )
        self.modes = modules.pooling.modes
        self.normalize = modules.pooling.normalize
        self.dense = nn.Sequential(*(d.module() for d in modules.dense))

    def forward(self, last_hidden_state: torch.Tensor, attention_mask: torch.Tensor):
        """See the class docstring."""
        vec = pool(last_hidden_state, attention_mask, self.modes, False)  # (B, k·H)
        vec = self.dense(vec)  # (B, D)
        return nn.functional.normalize(vec, dim=-1) if self.normalize else vec


def export_sentence_onnx(
    model_dir: str | Path, output: str | Path, opset: int = 17, *, model: Model | None = None
) -> Path:
    """Export the encoder of ``model_dir`` with its sentence head in the graph.

    ``output`` ending in ``.onnx``: the bare graph; otherwise a directory as
    `convert.onnx.export_onnx_directory` writes it (config, tokenizer, sentence-transformers'
    module files, ``model.onnx``). The graph's outputs are the encoder's (last_hidden_state,
    pooler_output where there is a pooler) and then ``sentence_embedding`` (B, D) float32.
    ONNX Runtime on it equals `SentenceEmbedder.encode` within 1e-5 for texts tokenized by the
    directory's tokenizer (tests/inference/test_export_pooling.py). Prompts are the caller's
    text (a directory's default prompt is not added), and ``do_lower_case`` the caller's step.

    Args:
        model_dir: a sentence-transformers or plain Hugging Face encoder directory.
        output: a directory, or a file ending in ``.onnx``.
        opset: the ONNX opset (>= `convert.onnx.MIN_OPSET`).
        model: the directory's encoder when already loaded.

    Raises:
        InputError: see `SentenceOnnxHead`; a task head; an opset below the minimum.
        SentenceModulesError: a directory that is not a sentence embedder.
        MissingDependency: onnx is not installed.
    """
    from ...pretrained import from_pretrained

    source = Path(model_dir)
    modules = read_sentence_modules(source)
    head = SentenceOnnxHead(modules)
    model = model if model is not None else from_pretrained(modules.model_dir)
    modules.check_dimensions(model.config.hidden_size)
    if Path(output).suffix.lower() == ".onnx":
        return export_onnx(model, output, opset=opset, sentence=head)
    return export_onnx_directory(source, output, opset=opset, model=model, sentence=head)
