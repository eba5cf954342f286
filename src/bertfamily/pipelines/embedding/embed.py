"""Sentence embeddings and semantic search (Reimers & Gurevych 2019, Sentence-BERT §3).

A model directory runs as sentence-transformers runs it (`sentence_modules`): encoder →
pooling → Dense layers → L2 normalisation, with its prompts and tokenizer settings.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import normalizers
from torch import nn

from ...checkpoints.io import read_hf_config
from ...errors import InputError, NonFiniteOutputError
from ...inference.batches import (
    FEATURE_KEYS,
    TokenRows,
    eval_mode,
    run_batches,
    text_list,
    tokenize_rows,
)
from ...inference.limits import input_limit
from ...inference.precision import (
    AccuracyBar,
    QuantizationError,
    apply_int8,
    cached_int8_plan,
    cpu_int8_units,
    plan_int8,
    resolve_dtype,
)
from ...modules.kernels import apply_linear_kernel, make_batch_invariant, resolve_linear_kernel
from ...pretrained import model_from_directory
from ...resources.resolve import resolve_model
from ...runtime import ThreadPolicy
from ...tokenization.tokenizer import tokenizer_from_directory
from .sentence_modules import POOLING_MODES, PoolingSpec, SentenceModules, read_sentence_modules

__all__ = [
    "POOLING_MODES",
    "Hit",
    "PoolingSpec",
    "SentenceEmbedder",
    "cosine_matrix",
    "pool",
    "semantic_search",
]

log = logging.getLogger(__name__)


def pool(
    last_hidden_state: torch.Tensor,
    attention_mask: torch.Tensor,
    mode: str | Sequence[str] = "mean",
    normalize: bool = True,
    prompt_length: int = 0,
) -> torch.Tensor:
    """Pool token states into one vector per sequence (sentence-transformers' Pooling).

    With m the (B, T) mask of pooled tokens (real tokens, minus the first ``prompt_length``):

    - ``cls``: the first pooled token's state;
    - ``max``: the elementwise maximum over pooled tokens;
    - ``mean``: Σ m_t h_t / Σ m_t (Sentence-BERT §3, "MEAN-strategy");
    - ``mean_sqrt_len_tokens``: Σ m_t h_t / √(Σ m_t);
    - ``weightedmean``: Σ t·m_t h_t / Σ t·m_t with positions t = 1..T (Muennighoff 2022,
      SGPT §3.1, position-weighted mean pooling);
    - ``lasttoken``: the last pooled token's state (zero when none).

    Several modes give their vectors concatenated, in the order given.

    Args:
        last_hidden_state: (B, T, H) float.
        attention_mask: (B, T) 0/1, 1 = real token; padding on the right.
        mode: one of `POOLING_MODES`, or a sequence of them.
        normalize: L2-normalise the result.
        prompt_length: leading tokens (the prompt, with [CLS]) left out of the pooling
            (``include_prompt=False``); their positions still count for ``weightedmean``.

    Returns:
        (B, k·H) float32 for k modes.

    Raises:
        ValueError: an unknown mode, or a negative ``prompt_length``.
    """
    modes = (mode,) if isinstance(mode, str) else tuple(mode)
    bad = [m for m in modes if m not in POOLING_MODES]
    if bad or not modes:
        raise InputError(f"unknown pooling mode {bad or mode!r}; expected one of {POOLING_MODES}")
    if prompt_length < 0:
        raise InputError(f"prompt_length must be >= 0, got {prompt_length}")
    h = last_hidden_state.float()
    keep = attention_mask.clone()
    keep[:, :prompt_length] = 0
    m = keep.to(h.dtype).unsqueeze(-1)  # (B, T, 1)
    rows = torch.arange(h.shape[0], device=h.device)
    outs = []
    for name in modes:
        if name == "cls":
            out = h[rows, keep.int().argmax(1)]  # first pooled token (0 when none)
        elif name == "max":
            out = h.masked_fill(m == 0, torch.finfo(h.dtype).min).amax(1)
        elif name in ("mean", "mean_sqrt_len_tokens"):
            count = m.sum(1).clamp(min=1e-9)  # (B, 1)
            out = (h * m).sum(1) / (count if name == "mean" else count.sqrt())
        elif name == "weightedmean":
            t = torch.arange(1, h.shape[1] + 1, device=h.device, dtype=h.dtype)
            w = m * t.view(1, -1, 1)  # (B, T, 1)
            out = (h * w).sum(1) / w.sum(1).clamp(min=1e-9)
        else:  # lasttoken
            last = h.shape[1] - 1 - keep.int().flip(1).argmax(1)  # (B,)
            out = (h * m)[rows, last]
        outs.append(out)  # (B, H)
    out = torch.cat(outs, dim=-1)  # (B, k·H)
    return torch.nn.functional.normalize(out, dim=-1) if normalize else out


#: Texts tokenized once for embedding (the engine's `inference.batches.TokenRows`: ``rows``,
#: ``truncated``, ``skip`` the prompt tokens left out of the pooling); the former name.
TokenizedTexts = TokenRows


class SentenceEmbedder(nn.Module):
    """Text → sentence embeddings with any bertfamily model directory, run as
    sentence-transformers runs it (see `sentence_modules.read_sentence_modules`): the one
    embedding class, for inference (`encode`) and training (`forward` with gradients, `save`
    writes a sentence-transformers directory).

    Faithful by default: fp32, equal to sentence-transformers (≤ 1e-5), and on the CPU every
    text's vector is the same, bit for bit, whatever else is in its batch, the batch size or
    the order of the texts (`modules.kernels.make_batch_invariant`); only a change of the
    thread count may move it, by float rounding (≤ 2e-7 on MiniLM's unit vectors).

    Args:
        model_dir: a local model directory (a sentence-transformers directory with
            ``modules.json``, or a plain Hugging Face one: mean pooling, normalised, with a
            logged warning that says so, and that names a cross-encoder or sequence
            classifier as one: `sentence_modules.assumed_pooling`), or the id ``org/name``
            of a model in the local Hugging Face cache.
        pooling: override of the directory's pooling (mode, normalisation, include_prompt);
            its Dense layers still apply, and its token limit stays the directory's.
        max_seq_length: tokens per text, special tokens and prompt included (longer texts are
            cut); default the directory's ``max_seq_length`` (sentence_bert_config.json), else
            the tokenizer's ``model_max_length``; capped by the model's position table
            (`inference.limits.input_limit`, the one rule for inference and training).
        dtype: encoder parameter dtype: "auto" (default: fp32, the faithful choice, on every
            device), "fp32", "bf16", "fastest" (bf16 on a CUDA device with bf16 or a CPU with
            AMX-BF16 or AVX512-BF16, else fp32: faster, min cosine ~0.999 to fp32) or a torch
            dtype (`inference.precision.resolve_dtype`; its reason kept in
            ``dtype_reason``). Pooling and Dense layers run in float32.
        device: torch device.
        revision: for a cache id, a branch, tag or commit.
        quantize: None, or "int8": dynamic int8 of the encoder's Linear layers that keep the
            accuracy bar (`precision.plan_int8`, measured at load time on ``calibration``;
            the plan is kept in ``int8_plan``, its agreement with fp32 in ``int8_check``), run
            by torch (`precision.apply_int8`: faster than the same plan on ONNX Runtime, idle
            and busy, on the CPUs of benchmarks/embed.py). CPU and fp32 only. The ONNX Runtime
            graph of the plan is what ``bertfamily export --quantize int8`` writes
            (`precision.cached_int8`).
        calibration: (sentences, queries) for the int8 measurement (default: a fetched
            Jane Austen sample, `precision.austen_calibration`, with the plan cached per model
            content: `precision.cached_int8_plan`).
        bar: the accuracy int8 must keep (`precision.AccuracyBar`: min cosine 0.99, top-10
            overlap 0.95).
        config_json: the transformer directory's parsed config.json when the caller has read
            it (the server does); else it is read once here.
        runtime: "torch" (default), or "openvino": the encoder exported to ONNX and run by
            OpenVINO on the CPU (`convert.openvino.OpenVinoModel`; ``dtype`` "auto" = OpenVINO's
            default precision, bf16 on a CPU with bf16 units; "fp32"/"bf16" ask for one). The
            compiled graph must keep ``bar`` against this model's torch fp32 vectors on
            ``calibration`` (default: the Austen sample) or the load is refused; the
            agreement is kept in ``runtime_check``. Needs the ``openvino`` extra. With
            ``quantize="int8"``: NNCF post-training int8 of the graph
            (`precision.openvino_int8`), the fewest products kept in float that meet ``bar``
            on text held out from its calibration (default: `austen_calibration`'s held-out
            lines; a given ``calibration`` is split in halves), cached per model and CPU.
        linear_kernel: the kernel of the fp32 and bf16 Linear layers on the CPU (torch
            runtime): "auto" (default: oneDNN on pre-packed weights for bf16, and for fp32 on
            CPUs that are not Intel's, where it measured faster, else BLAS;
            `modules.kernels.resolve_linear_kernel`), "blas" or "onednn". fp32 outputs agree
            within 1e-6; the choice is kept in ``linear_kernel``.
        threads: torch intra-op threads while this embedder computes: 0 (default) = the
            engine's thread policy (`runtime.ThreadPolicy`: a governor that follows
            the load, as on the command line, unless ``OMP_NUM_THREADS`` is set or a command
            already governs), N = exactly N.
        adapter: a PEFT LoRA adapter directory trained on this model's encoder (e.g.
            by ``bertfamily finetune --lora``), put on the encoder when it loads
            (`checkpoints.adapters.apply_adapter`; LoRA only).
        merge: with ``adapter``: True (default) folds the update into the weights (the
            base model's speed and batch invariance); False keeps it apart
            (`modules.lora.LoraLinear`: trainable, not batch-invariant on the CPU, and not
            with ``quantize`` or the OpenVINO runtime).
        sentence_modules: the directory's modules when the caller has read them (a ColBERT
            directory: `colbert.read_colbert`); else `read_sentence_modules` reads them.

    Raises:
        QuantizationError: int8 asked with a dtype other than fp32 or a non-CPU device, an
            unknown ``quantize``, or a model where no layer can be quantised within the bar;
            the OpenVINO graph missing ``bar``.
        InputError: an unknown ``runtime``, OpenVINO off the CPU, with ``quantize`` or with a
            dtype it does not run.
        ModelNotFoundError: an id neither a local directory nor in the cache.
        InputError: ``max_seq_length`` < 1, ``threads`` out of range.
        SentenceModulesError: a module we cannot run, or Dense sizes that do not match.
        ModelDirectoryError / CheckpointError / TokenizerNotFoundError: see the loaders.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        pooling: PoolingSpec | None = None,
        max_seq_length: int | None = None,
        dtype: str | torch.dtype | None = "auto",
        device: str | torch.device = "cpu",
        revision: str | None = None,
        quantize: str | None = None,
        calibration: tuple[Sequence[str], Sequence[str]] | None = None,
        bar: AccuracyBar = AccuracyBar(),
        config_json: dict | None = None,
        runtime: str = "torch",
        linear_kernel: str = "auto",
        threads: int = 0,
        adapter: str | os.PathLike[str] | None = None,
        merge: bool | None = None,
        sentence_modules: SentenceModules | None = None,
    ) -> None:
        super().__init__()
        self.eval()  # an inference model until `train()` (see `for_training`)
        self.threads = ThreadPolicy(threads)
        if runtime not in ("torch", "openvino"):
            raise InputError(f"runtime must be 'torch' or 'openvino', got {runtime!r}")
        ov_precision = ov_quantize = None
        if runtime == "openvino":
            from ...convert.openvino import openvino_precision

            if torch.device(device).type != "cpu":
                raise InputError("the OpenVINO runtime runs on the CPU")
            if quantize not in (None, "int8"):
                raise QuantizationError(f"quantize must be None or 'int8', got {quantize!r}")
            ov_precision = openvino_precision(dtype)
            dtype = "fp32"  # the graph is exported from the fp32 model
            ov_quantize, quantize = quantize, None  # int8 by NNCF, in `_use_openvino`
        if quantize not in (None, "int8"):
            raise QuantizationError(f"quantize must be None or 'int8', got {quantize!r}")
        if quantize is not None and dtype == "auto":
            dtype = "fp32"  # int8 replaces fp32 Linear layers; the rest stays fp32
        dtype, self.dtype_reason = resolve_dtype(dtype, device)
        if quantize is not None and (dtype != torch.float32 or torch.device(device).type != "cpu"):
            raise QuantizationError(
                f"int8 quantisation runs on the CPU from fp32 weights (got {dtype} on {device})"
            )
        log.info("dtype %s", self.dtype_reason)
        self.path = resolve_model(model_dir, revision)  # the one lookup of this load
        modules = read_sentence_modules(self.path) if sentence_modules is None else sentence_modules
        if pooling is not None:
            if pooling.max_seq_length is not None:  # the token limit left the pooling spec
                warnings.warn(
                    "PoolingSpec.max_seq_length is deprecated: give SentenceEmbedder"
                    "(max_seq_length=...)",
                    DeprecationWarning,
                    stacklevel=2,
                )
                max_seq_length = max_seq_length or pooling.max_seq_length
            modules = dataclasses.replace(modules, pooling=pooling)
        elif modules.assumed is not None:  # no modules.json: said, as sentence-transformers does
            log.warning("%s", modules.assumed)
        self.sentence_modules = modules
        self.pooling = modules.pooling
        self.device = torch.device(device)
        if modules.static is not None:  # a table of token vectors as the trunk (`static`)
            from .static import load_static

            if runtime != "torch" or quantize is not None or adapter is not None:
                raise InputError("a static embedding model runs on torch, unquantised, unadapted")
            model, self.tokenizer = load_static(
                modules.model_dir, modules.static, modules.static_max_length
            )
            self.model = model.to(device)
        else:
            if config_json is None:  # read once, for the model and the tokenizer
                config_json = read_hf_config(modules.model_dir)
            if merge is False and (quantize is not None or runtime != "torch"):
                raise InputError("an unmerged adapter runs on the torch runtime without quantize")
            adapted = (
                {} if adapter is None and merge is None else {"adapter": adapter, "merge": merge}
            )
            self.model = model_from_directory(
                modules.model_dir, config_json=config_json, dtype=dtype, **adapted
            ).to(device)
            self.tokenizer = tokenizer_from_directory(modules.model_dir, model_config=config_json)
        if modules.do_lower_case:  # as sentence-transformers: a Lowercase normalizer first
            backend = self.tokenizer.backend
            first = [normalizers.Lowercase()]
            rest = [backend.normalizer] if backend.normalizer is not None else []
            backend.normalizer = normalizers.Sequence(first + rest)
        self._dimension = modules.check_dimensions(self.model.config.hidden_size)
        self.dense = torch.nn.Sequential(*(d.module() for d in modules.dense)).to(self.device)
        self.prompts = dict(modules.prompts)
        self.default_prompt_name = modules.default_prompt_name
        self.do_lower_case = modules.do_lower_case
        self.source = str(model_dir)  # what the caller named, for a trained model's card
        # the one limit rule (sentence-transformers' max_seq_length decides, capped by the
        # position table), for inference and training alike
        self.max_length = input_limit(
            self.model.config,
            self.tokenizer,
            modules.max_seq_length if max_seq_length is None else max_seq_length,
        )
        self.last_truncated = 0  # texts cut to max_length by the last `encode`
        self.last_truncated_rows: list[int] = []  # their positions in its texts
        self.int8_plan = self.int8_check = None
        self.int8_cached = False  # whether the int8 plan was read from the cache
        self.runtime, self.runtime_check = runtime, None
        self.linear_kernel = None  # the fp32 CPU Linear kernel of the torch model, if any
        if runtime == "torch":  # before int8: its plan is measured on this kernel
            self.linear_kernel, reason = apply_linear_kernel(
                self.model, linear_kernel, dtype, self.device
            )
            if self.linear_kernel is not None:
                log.info("linear kernel %s", reason)
            if self.device.type == "cpu":  # the same vector for a text in any batch
                make_batch_invariant(self.model)
                make_batch_invariant(self.dense)
        else:
            resolve_linear_kernel(linear_kernel, dtype)  # an unknown name is refused here too
        if runtime == "openvino":
            self._use_openvino(ov_precision, calibration, bar, ov_quantize)
        if quantize == "int8":
            if calibration is None:
                plan, self.int8_cached = cached_int8_plan(self, bar)
            else:
                plan = plan_int8(self, *calibration, bar=bar)
            # run by torch, the engine the plan was measured on: its agreement is the model's
            self.model = apply_int8(self.model, plan.quantized)
            self.int8_plan, self.int8_check = plan, plan.agreement
            log.info("%s", plan.summary())
            if not cpu_int8_units():
                log.warning(
                    "this CPU has no int8 dot-product units (VNNI/AMX): int8 keeps its accuracy "
                    "but was measured no faster than fp32 on such a CPU (benchmarks/embed.py)"
                )

    def _use_openvino(
        self, precision: str | None, calibration, bar: AccuracyBar, quantize: str | None = None
    ) -> None:
        """Swap the torch encoder for the OpenVINO graph once it keeps ``bar`` (graph and
        agreement cached per model and CPU with the default calibration:
        `precision.cached_openvino`; int8: `precision.openvino_int8`, calibrated on the first
        half of a given ``calibration`` and checked on the second)."""
        import tempfile

        from ...convert.openvino import OpenVinoModel, inference_threads, save_openvino_ir
        from ...inference.precision import (
            cached_openvino,
            openvino_int8,
            require_gate,
            swapped_agreement,
        )

        cached = False
        if calibration is None:
            model, got, cached = cached_openvino(self, precision, bar, quantize)
        elif quantize is None:
            model = OpenVinoModel(self.model, inference_threads(), precision)
            got = swapped_agreement(self, model, *calibration, bar.k)
        else:
            texts, queries = list(calibration[0]), list(calibration[1])
            fit = (texts[: len(texts) // 2], queries[: len(queries) // 2])
            check = (texts[len(texts) // 2 :], queries[len(queries) // 2 :])
            with tempfile.TemporaryDirectory() as tmp:
                fp32 = save_openvino_ir(self.model, Path(tmp) / "fp32.xml")
                model, got = openvino_int8(
                    self, fp32, Path(tmp) / "int8.xml", fit, {"calibration": check}, bar, precision
                )  # compiled: the files may go
        what = f"OpenVINO int8 ({model.quantized})" if quantize else "OpenVINO"
        if quantize and model.held_out:  # the accuracy gate: the worst held-out kind decides
            advice = "use the OpenVINO runtime without --quantize or the torch runtime"
            require_gate(what, model.held_out, bar, advice)
        if not got.meets(bar):
            raise QuantizationError(
                f"{what} ({precision or 'its default precision'}) misses the accuracy bar on "
                f"calibration text: min cosine {got.min_cosine:.4f}, top-{got.k} overlap "
                f"{got.top_k_overlap:.3f} (bar {bar.min_cosine}, {bar.min_overlap}); use "
                + ("the OpenVINO runtime without --quantize" if quantize else "--dtype fp32")
                + " or the torch runtime"
            )
        self.model = model
        self.runtime_check = got
        int8 = f"int8 in {model.quantized}, else " if quantize else ""
        self.dtype_reason = (
            f"OpenVINO {int8}{self.model.precision} ("
            f"{'requested' if precision else 'its default'} on this CPU, {model.threads} "
            f"threads); min cosine {got.min_cosine:.4f} to torch fp32 on "
            + ("held-out text (worst kind)" if quantize else "calibration text")
            + ("; graph from the cache" if cached else "")
        )
        log.info("runtime %s", self.dtype_reason)

    def __setattr__(self, name: str, value) -> None:
        """``model`` may be swapped for an exported-graph runtime (OpenVINO, ONNX Runtime),
        which is not a torch module: it then replaces the registered submodule."""
        if name == "model" and not isinstance(value, nn.Module) and "model" in self._modules:
            del self._modules["model"]
        super().__setattr__(name, value)

    @property
    def dimension(self) -> int:
        """Length of each embedding vector: k·H for k pooling modes, or the last Dense
        layer's out_features (Dense layers added for training count)."""
        for layer in reversed(self.dense):
            return layer[0].out_features
        return self._dimension

    def _prompt(self, prompt: str | None, prompt_name: str | None) -> str:
        """The prompt text to prepend ("" for none), chosen as sentence-transformers does."""
        if prompt is not None and prompt_name is not None:
            raise InputError("give prompt or prompt_name, not both")
        if prompt is not None:
            return prompt
        name = prompt_name if prompt_name is not None else self.default_prompt_name
        if name is None:
            return ""
        if name not in self.prompts:
            raise InputError(f"unknown prompt_name {name!r}; this model has {sorted(self.prompts)}")
        return self.prompts[name]

    def prompt_length(self, prompt: str) -> int:
        """Tokens of ``prompt`` with the leading special token and without a trailing one:
        what ``include_prompt=False`` leaves out of the pooling (0 for "")."""
        if not prompt:
            return 0
        ids = self.tokenizer([prompt], max_length=self.max_length, padding=False)["input_ids"]
        ids = ids[0].tolist() if hasattr(ids[0], "tolist") else list(ids[0])
        return len(ids) - (1 if ids and ids[-1] in self.tokenizer.all_special_ids else 0)

    @torch.inference_mode()
    def encode(
        self,
        texts: Sequence[str] | str,
        *,
        prompt_name: str | None = None,
        prompt: str | None = None,
        batch_size: int = 32,
        show_progress_bar: bool | None = False,
        output_value: str = "sentence_embedding",
        precision: str = "float32",
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        normalize_embeddings: bool = False,
        truncate_dim: int | None = None,
        progress: Callable[[int], None] | None = None,
        max_batch_tokens: int | None = None,
        normalize: bool | None = None,
        dimensions: int | None = None,
        truncation_side: str = "right",
        **unknown,
    ) -> np.ndarray | torch.Tensor | list[torch.Tensor]:
        """Embed texts; takes sentence-transformers' ``encode`` keywords (`st_calls`) and
        returns its shapes.

        Texts are sorted by token count so each batch pads little, then restored to input
        order. Texts longer than ``max_length`` tokens (prompt included) are truncated (the
        tokenizer cuts a huge text by characters first, so its cost is bounded by
        ``max_length``); how many were is logged and kept in ``last_truncated``, and which
        in ``last_truncated_rows``.

        Args:
            texts: N strings, or one string (then one (dimension,) vector is returned, as
                sentence-transformers does; a bare string is never N one-character texts).
            prompt_name: a key of ``prompts`` (the directory's
                config_sentence_transformers.json); default ``default_prompt_name``.
            prompt: a prompt text, instead of ``prompt_name``; "" for none.
            batch_size: sequences per forward pass.
            show_progress_bar: a tqdm bar over the texts (None: when logging is at INFO).
            output_value: "sentence_embedding", or "token_embeddings": the encoder's last
                hidden state, one (T_i, H) tensor per text (prompt and special tokens in).
            precision: "float32", or "int8", "uint8", "binary", "ubinary" as
                sentence-transformers' ``quantize_embeddings`` (int8 ranges from these rows;
                `quantize.quantize_embeddings` takes calibration ranges).
            convert_to_numpy: return the (N, D) numpy array (default); False: a list of N
                (D,) tensors.
            convert_to_tensor: return one (N, D) torch tensor (wins over convert_to_numpy).
            normalize_embeddings: L2-normalise the rows last (after ``truncate_dim``), as
                sentence-transformers does; False keeps what the model's modules do.
            truncate_dim: keep the first ``truncate_dim`` coordinates, not renormalised
                unless ``normalize_embeddings`` (sentence-transformers' rule).
            progress: called with the number of texts done after each batch.
            max_batch_tokens: also cap each batch's padded size (sequences × longest) at this
                many tokens (`train.data.sorted_batches`), as a server's token budget does.
            normalize: L2-normalise the rows; None = as the model's modules say (a
                ``Normalize`` module, or the pooling's ``normalize``).
            dimensions: keep the first ``dimensions`` coordinates (Matryoshka), renormalised
                when ``normalize`` (`quantize.truncate_dimensions`).
            truncation_side: "right" (default) or "left": which end of a long text is cut.

        Returns:
            (N, dimension or ``dimensions``) float32 array (or the precision's integers), or
            the form ``convert_to_tensor`` / ``convert_to_numpy`` / ``output_value`` ask for.

        Raises:
            ValueError (InputError): an unknown keyword (``device``, ``pool``, ... are named),
                both ``prompt`` and ``prompt_name``, an unknown ``prompt_name``,
                ``max_batch_tokens`` < 1, a text that is not a str (None, a list, ...),
                ``dimensions`` with ``truncate_dim``, ``normalize=False`` with
                ``normalize_embeddings=True``.
            NonFiniteOutputError: a row came out NaN or infinite (the message lists the rows,
                counting from 0 in ``texts``); nothing is returned.
        """
        from . import st_calls
        from .quantize import quantize_embeddings, truncate_dimensions

        st_calls.check_keywords(
            unknown,
            normalize=normalize,
            normalize_embeddings=normalize_embeddings,
            dimensions=dimensions,
            truncate_dim=truncate_dim,
            output_value=output_value,
        )
        one = isinstance(texts, str)  # one text, as sentence-transformers takes it: one vector
        texts = text_list([texts] if one else texts)
        width = truncate_dim if truncate_dim is not None else dimensions
        if width is not None:  # checked before any work
            truncate_dimensions(np.zeros((1, self.dimension), np.float32), width, False)
        encoded = self.tokenize(
            texts, prompt=prompt, prompt_name=prompt_name, truncation_side=truncation_side
        )
        bar_progress, bar = st_calls.progress_bar(len(texts), show_progress_bar)
        try:
            if output_value == "token_embeddings":
                out = self.token_states(
                    encoded, batch_size=batch_size, max_batch_tokens=max_batch_tokens
                )
            else:
                out = self._embed(
                    encoded,
                    batch_size=batch_size,
                    progress=progress or bar_progress,
                    max_batch_tokens=max_batch_tokens,
                    normalize=True if normalize_embeddings and truncate_dim is None else normalize,
                    dimensions=dimensions,
                    truncate_dim=truncate_dim,
                    normalize_embeddings=normalize_embeddings,
                )
                if precision != "float32" and len(out):
                    out = quantize_embeddings(out, precision)
        finally:
            if bar is not None:
                bar.close()
        out = st_calls.shape(
            out, convert_to_numpy=convert_to_numpy, convert_to_tensor=convert_to_tensor
        )
        return out[0] if one else out

    def _embed(
        self,
        encoded: TokenRows,
        *,
        normalize: bool | None,
        dimensions: int | None,
        truncate_dim: int | None,
        normalize_embeddings: bool,
        **loop,
    ) -> np.ndarray:
        """(N, D) float32 rows of `encode_tokenized`, cut to ``dimensions`` (renormalised when
        the rows are) or ``truncate_dim`` (renormalised only for ``normalize_embeddings``)."""
        from .quantize import truncate_dimensions

        if not len(encoded):
            width = truncate_dim or dimensions or self.dimension
            return np.zeros((0, width), dtype=np.float32)
        out = self.encode_tokenized(encoded, normalize=normalize, **loop)
        if truncate_dim is not None:
            return truncate_dimensions(out, truncate_dim, normalize_embeddings)
        return truncate_dimensions(out, dimensions, self._normalize(normalize))

    def encode_query(self, texts: Sequence[str] | str, **kwargs):
        """`encode` with the model's "query" prompt when it has one and none is given
        (sentence-transformers' ``encode_query``; else ``default_prompt_name`` applies)."""
        if kwargs.get("prompt_name") is None and kwargs.get("prompt") is None:
            if "query" in self.prompts:
                kwargs["prompt_name"] = "query"
        return self.encode(texts, **kwargs)

    def encode_document(self, texts: Sequence[str] | str, **kwargs):
        """`encode` with the model's first prompt of "document", "passage", "corpus" when it
        has one and none is given (sentence-transformers' ``encode_document``)."""
        from .st_calls import document_prompt_name

        if kwargs.get("prompt_name") is None and kwargs.get("prompt") is None:
            kwargs["prompt_name"] = document_prompt_name(self.prompts)
        return self.encode(texts, **kwargs)

    def _normalize(self, normalize: bool | None) -> bool:
        return self.pooling.normalize if normalize is None else normalize

    def tokenize(
        self,
        texts: Sequence[str],
        *,
        prompt: str | None = None,
        prompt_name: str | None = None,
        truncation_side: str = "right",
    ) -> TokenRows:
        """The one tokenization of an `encode` (the server calls it once per request and
        hands the result to `encode_tokenized`): the prompt prepended, cut to ``max_length``.

        Returns:
            `inference.batches.TokenRows`, with ``skip`` the prompt tokens left out of the
            pooling.

        Raises:
            ValueError: as `encode` for prompts.
        """
        prefix = self._prompt(prompt, prompt_name)
        tokens = tokenize_rows(
            self.tokenizer,
            [prefix + t for t in text_list(texts)],
            max_length=self.max_length,
            truncation_side=truncation_side,
        )
        tokens.skip = 0 if self.pooling.include_prompt else self.prompt_length(prefix)
        return tokens

    @torch.inference_mode()
    def encode_tokenized(
        self,
        encoded: TokenRows,
        *,
        batch_size: int = 32,
        progress: Callable[[int], None] | None = None,
        max_batch_tokens: int | None = None,
        normalize: bool | None = None,
    ) -> np.ndarray:
        """(N, dimension) float32 embeddings of already tokenized texts (`tokenize`), in
        their order: the engine's length-sorted batches (`inference.batches.run_batches`)
        through the trunk (`Model.encoder`), `pool`, Dense, Normalize, under the thread
        policy; in eval mode (a model being trained is put back in its mode after).

        Raises:
            NonFiniteOutputError: as `encode`.
        """
        n = len(encoded)
        out = np.zeros((n, self.dimension), dtype=np.float32)
        normalize = self._normalize(normalize)

        def step(batch: dict[str, torch.Tensor]) -> torch.Tensor:
            hidden = self.model.encoder(**batch).last_hidden_state  # (B, T, H)
            vec = pool(hidden, batch["attention_mask"], self.pooling.modes, False, encoded.skip)
            vec = self.dense(vec)  # (B, dimension)
            return torch.nn.functional.normalize(vec, dim=-1) if normalize else vec

        with eval_mode(self):
            for idx, vec in run_batches(
                encoded,
                step,
                pad=self.tokenizer.pad_rows,
                batch_size=batch_size,
                max_batch_tokens=max_batch_tokens,
                device=self.device,
                keys=FEATURE_KEYS,
                progress=progress,
                threads=self.threads,
            ):
                out[idx] = vec.float().cpu().numpy()
        self._check_finite(out)
        truncated = sum(encoded.truncated)
        self.last_truncated = truncated
        self.last_truncated_rows = [i for i, c in enumerate(encoded.truncated) if c]
        if truncated:
            log.info(
                "%d of %d texts were longer than %d tokens and were truncated",
                truncated,
                n,
                self.max_length,
            )
        return out

    def _check_finite(self, out: np.ndarray) -> None:
        """Raise `NonFiniteOutputError` naming the rows of ``out`` that are NaN or infinite."""
        finite = np.isfinite(out).all(axis=1)
        if finite.all():
            return
        bad = np.flatnonzero(~finite)
        shown = ", ".join(map(str, bad[:10].tolist())) + (", ..." if len(bad) > 10 else "")
        raise NonFiniteOutputError(
            f"the model produced NaN or infinite embeddings for {len(bad)} of {len(out)} "
            f"texts (rows {shown}, counting from 0); nothing is returned. The weights or "
            f"the run dtype ({self.dtype_reason}) overflow",
            bad.tolist(),
        )

    def encode_tokens(
        self,
        texts: Sequence[str],
        *,
        prompt_name: str | None = None,
        batch_size: int = 32,
        truncation_side: str = "right",
    ) -> list[np.ndarray]:
        """The encoder's last hidden state of every token of each text (prompt and special
        tokens included; TEI's ``/embed_all``): one (T_i, H) float32 array per text;
        `token_states` of `tokenize`."""
        tokens = self.tokenize(texts, prompt_name=prompt_name, truncation_side=truncation_side)
        return self.token_states(tokens, batch_size=batch_size)

    @torch.inference_mode()
    def token_states(
        self, tokens: TokenRows, *, batch_size: int = 32, max_batch_tokens: int | None = None
    ) -> list[np.ndarray]:
        """One (T_i, H) float32 array of token states per row of already tokenized texts
        (`tokenize`), in their order, through the engine's batch loop."""
        hidden_size = self.model.config.hidden_size
        out: list[np.ndarray] = [np.zeros((0, hidden_size), np.float32)] * len(tokens)
        lengths = tokens.lengths

        def step(batch: dict[str, torch.Tensor]) -> np.ndarray:
            return self.model.encoder(**batch).last_hidden_state.float().cpu().numpy()

        for idx, hidden in run_batches(
            tokens,
            step,
            pad=self.tokenizer.pad_rows,
            batch_size=batch_size,
            max_batch_tokens=max_batch_tokens,
            device=self.device,
            keys=FEATURE_KEYS,
            threads=self.threads,
        ):
            for row, i in enumerate(idx):
                out[i] = hidden[row, : lengths[i]]
        return out

    # --- training: the same class with gradients -------------------------------------------

    @property
    def max_seq_length(self) -> int:
        """Tokens per text (sentence-transformers' name for ``max_length``)."""
        return self.max_length

    @max_seq_length.setter
    def max_seq_length(self, value: int) -> None:
        self.max_length = input_limit(self.model.config, self.tokenizer, value)

    @classmethod
    def for_training(
        cls, path: str | os.PathLike[str], max_seq_length: int | None = None, **kwargs
    ) -> SentenceEmbedder:
        """The directory loaded for training: fp32, plain BLAS Linear layers, the padded
        batch (no batch-invariant inference path), in train mode.

        Raises:
            InputError: a ``do_lower_case`` directory (its lowercasing lives in the
                tokenizer this class would save).
        """
        model = cls(
            path, max_seq_length=max_seq_length, dtype="fp32", linear_kernel="blas", **kwargs
        )
        if model.do_lower_case:
            raise InputError(f"{path}: training a do_lower_case model is not supported")
        if model.sentence_modules.static is not None:
            raise InputError(f"{path}: training a static embedding model is not supported")
        make_batch_invariant(model, False)
        return model.train()

    def features(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """The encoder inputs of ``texts`` for a training step: (B, T) int64 ``input_ids``,
        ``attention_mask`` (and ``token_type_ids``), padded to the longest, cut at
        ``max_seq_length``; no prompt."""
        batch = self.tokenizer(text_list(texts), max_length=self.max_length)
        return {k: v for k, v in batch.items() if k in FEATURE_KEYS}

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(B, T) int64 inputs → (B, dimension) float32 vectors, with gradients (L2-normalised
        when ``pooling.normalize``): encoder → `pool` → Dense → Normalize."""
        extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        hidden = self.model.encoder(
            input_ids=input_ids, attention_mask=attention_mask, **extra
        ).last_hidden_state
        vec = self.dense(pool(hidden, attention_mask, self.pooling.modes, normalize=False))
        return torch.nn.functional.normalize(vec, p=2, dim=-1) if self.pooling.normalize else vec

    def save(self, directory: str | os.PathLike[str], card: dict | None = None) -> Path:
        """Write the whole sentence-transformers directory (`saving.save_directory`): the
        encoder's files, the tokenizer, the modules, a model card. Returns the directory.

        Raises:
            UnsafePathError: a write would go through a link out of ``directory``.
        """
        from .saving import save_directory

        return save_directory(self, Path(directory), card or {})


@dataclass(frozen=True)
class Hit:
    """One search result: corpus index, cosine similarity, and the text."""

    index: int
    score: float
    text: str


def cosine_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N, H), (M, H) → (N, M) cosine similarities (rows need not be normalised)."""
    a = a / np.clip(np.linalg.norm(a, axis=1, keepdims=True), 1e-12, None)
    b = b / np.clip(np.linalg.norm(b, axis=1, keepdims=True), 1e-12, None)
    return a @ b.T


def semantic_search(
    embedder: SentenceEmbedder,
    queries: Sequence[str],
    corpus: Sequence[str],
    top_k: int = 5,
    corpus_embeddings: np.ndarray | None = None,
    batch_size: int = 32,
) -> list[list[Hit]]:
    """The ``top_k`` corpus entries closest (cosine) to each query, best first. A blank
    entry (empty or whitespace only) is never a hit, so fewer than ``top_k`` may come back;
    `Hit.index` is the entry's 0-based position in ``corpus`` (blank entries counted).

    Raises:
        ValueError: top_k < 1.
    """
    if top_k < 1:
        raise InputError(f"top_k must be >= 1, got {top_k}")
    if corpus_embeddings is None:
        corpus_embeddings = embedder.encode(corpus, batch_size=batch_size)
    sims = cosine_matrix(embedder.encode(queries, batch_size=batch_size), corpus_embeddings)
    blank = np.array([not str(t).strip() for t in corpus], dtype=bool)
    k = min(top_k, int((~blank).sum()))
    results = []
    for row in sims:
        row = np.where(blank, -np.inf, row)
        best = np.argsort(-row, kind="stable")[:k]
        results.append([Hit(int(i), float(row[i]), corpus[i]) for i in best])
    return results
