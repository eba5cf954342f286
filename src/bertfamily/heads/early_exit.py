"""Student classifiers for adaptive early exit (FastBERT, Liu et al. 2020, "FastBERT: a
Self-distilling BERT with Adaptive Inference Time", §3).

FastBERT puts a small classifier (a *student*) after every encoder layer but the last; the
last layer's classifier is the *teacher* (here: the model's own fine-tuned "classify" head).
Each student is the paper's classifier (§3.1, Figure 2; as the authors' code builds it): a
fully-connected layer H → D with tanh, one multi-head self-attention layer over the sequence in
D dimensions (2 heads), the first token's vector through a fully-connected layer D → D (tanh)
and a final one D → C. D = 128 in the paper.

At inference a sample leaves at the first layer whose student is sure enough: its normalised
entropy (§3.3, eq. 6) is below the ``speed`` threshold (`normalized_entropy`).

Shapes: B batch, T sequence, H hidden, D student width, N student heads, C classes, L layers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from ..errors import InputError, ModelDirectoryError
from ..files import atomic_write, read_json, write_text_atomic
from ..modules.skeleton import storage_free
from ..modules.stored import check_stored_tensors


def normalized_entropy(probs: torch.Tensor) -> torch.Tensor:
    """FastBERT's uncertainty (§3.3, eq. 6): Σ_c p_c log p_c / log(1/C), in [0, 1].

    Args:
        probs: (B, C) float probabilities (rows sum to 1), C ≥ 2.

    Returns:
        (B,) float: 0 for a one-hot row, 1 for the uniform distribution.
    """
    C = probs.shape[-1]
    if C < 2:
        raise InputError(f"normalised entropy needs at least 2 classes, got {C}")
    p = probs.float()
    plogp = torch.where(p > 0, p * torch.log(p), torch.zeros_like(p))  # 0·log 0 = 0
    return plogp.sum(-1) / math.log(1.0 / C)


class StudentClassifier(nn.Module):
    """One FastBERT classifier (§3.1): (B, T, H) hidden states → (B, C) logits.

    tanh(dense H→D) → N-head self-attention in D (keys masked by ``mask``; Q/K/V and output
    projections) → first token → tanh(dense D→D) → dense D→C.

    Args:
        hidden_size: H.
        num_labels: C.
        width: D (the paper: 128).
        num_heads: N (D divisible by N).
        dropout: dropout before the last layer (training only).
    """

    def __init__(
        self, hidden_size: int, num_labels: int, width: int = 128, num_heads: int = 2, dropout=0.1
    ) -> None:
        super().__init__()
        if width % num_heads:
            raise InputError(f"student width {width} is not divisible by {num_heads} heads")
        self.num_heads, self.head_dim = num_heads, width // num_heads
        self.reduce = nn.Linear(hidden_size, width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.dense = nn.Linear(width, width)
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(width, num_labels)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """hidden (B, T, H) float, mask (B, T) bool/0-1 (1 = real token) or None → (B, C)."""
        B, T, _ = hidden.shape
        x = torch.tanh(self.reduce(hidden))  # (B, T, D)
        qkv = self.qkv(x).view(B, T, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, N, T, Dh)
        q = q[:, :, :1]  # only the first token's output is read: (B, N, 1, Dh)
        bias = None
        if mask is not None:
            keep = mask.bool()[:, None, None, :]  # (B, 1, 1, T)
            bias = torch.zeros(keep.shape, dtype=x.dtype, device=x.device)
            bias = bias.masked_fill(~keep, torch.finfo(x.dtype).min)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # (B, N, 1, Dh)
        y = self.proj(y.transpose(1, 2).reshape(B, -1))  # (B, D)
        return self.out(self.dropout(torch.tanh(self.dense(y))))  # (B, C)


class StudentClassifiers(nn.Module):
    """The L - 1 students of a model with L layer steps: ``students[i]`` reads the output of
    layer step i + 1 (1-based); the teacher (the model's task head) reads layer L.

    Args:
        num_layers: L (the encoder's schedule length, ≥ 2).
        hidden_size: H; num_labels: C; width: D; num_heads: N (see `StudentClassifier`).
    """

    def __init__(
        self, num_layers: int, hidden_size: int, num_labels: int, width: int = 128, num_heads=2
    ) -> None:
        super().__init__()
        if num_layers < 2:
            raise InputError(f"early exit needs at least 2 layers, the model has {num_layers}")
        self.config = dict(
            num_layers=num_layers,
            hidden_size=hidden_size,
            num_labels=num_labels,
            width=width,
            num_heads=num_heads,
        )
        self.students = nn.ModuleList(
            StudentClassifier(hidden_size, num_labels, width, num_heads)
            for _ in range(num_layers - 1)
        )

    def __len__(self) -> int:
        return len(self.students)

    def forward(
        self, hidden_states: tuple[torch.Tensor, ...], mask: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        """The L + 1 hidden states (B, T, H) of `Encoder.forward` (embeddings first) → the
        L - 1 students' (B, C) logits, layer 1 first."""
        return [s(h, mask) for s, h in zip(self.students, hidden_states[1:])]


STUDENTS_CONFIG = "early_exit.json"
STUDENTS_WEIGHTS = "early_exit.safetensors"


def save_students(students: StudentClassifiers, directory: str | Path) -> Path:
    """Write the students beside a model directory's weights: ``early_exit.json`` (their sizes
    and the method) and ``early_exit.safetensors`` (float32), each atomically. The model
    directory itself stays a plain Hugging Face directory."""
    from safetensors.torch import save_file

    directory = Path(directory)
    state = {k: v.detach().float().cpu().contiguous() for k, v in students.state_dict().items()}
    atomic_write(directory / STUDENTS_WEIGHTS, lambda tmp: save_file(state, str(tmp)))
    meta = {"method": "FastBERT self-distillation (Liu et al. 2020)", **students.config}
    write_text_atomic(directory / STUDENTS_CONFIG, json.dumps(meta, indent=2) + "\n")
    return directory


def load_students(directory: str | Path) -> StudentClassifiers:
    """The students saved by `save_students` in ``directory``.

    Raises:
        ModelDirectoryError: no students there (the model was not self-distilled), a file
            that does not match its sizes, or a weight a model directory would refuse too
            (`modules.stored.check_stored_tensors`: NaN/±inf, an integer dtype).
    """
    from safetensors.torch import load_file

    directory = Path(directory)
    if not (directory / STUDENTS_CONFIG).is_file() or not (directory / STUDENTS_WEIGHTS).is_file():
        raise ModelDirectoryError(
            f"{directory} has no early-exit students ({STUDENTS_CONFIG}, {STUDENTS_WEIGHTS}); "
            "fine-tune with --self-distill first"
        )
    from safetensors import safe_open

    weights = directory / STUDENTS_WEIGHTS
    names = ("num_layers", "hidden_size", "num_labels", "width", "num_heads")
    try:
        meta = read_json(directory / STUDENTS_CONFIG, what="the students' sizes")
        sizes = {k: int(meta[k]) for k in names}
        with storage_free():  # shapes first: the sizes must match the file before allocating
            want = {k: tuple(v.shape) for k, v in StudentClassifiers(**sizes).state_dict().items()}
        with safe_open(str(weights), "pt") as f:
            have = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        if have != want:
            differ = sorted(set(have) ^ set(want) | {k for k in have if have[k] != want.get(k)})
            raise ValueError(f"{STUDENTS_CONFIG} does not match {STUDENTS_WEIGHTS} ({differ[:5]})")
        students = StudentClassifiers(**sizes)
        students.load_state_dict(check_stored_tensors(load_file(str(weights)), weights))
    except Exception as e:  # bad JSON or sizes, safetensors' own errors (no ValueError)
        raise ModelDirectoryError(f"{directory}: unreadable early-exit students: {e}") from e
    return students.eval()
