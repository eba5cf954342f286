"""Plain test helpers (no fixtures): tiny random Hugging Face checkpoints and padded batches.

The fixtures that wrap them (a cached checkpoint factory, the CLI runner, …) live in
``conftest.py``; test modules import these functions where they build inputs themselves.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import torch

ATOL = 1e-5  # fp32 parity tolerance against transformers
# Tiny, mutually distinct sizes so transpositions cannot hide (B=3, T=7, H=32, N=4, I=37, V=99).
TINY = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
)
_ROBERTA_LIKE = dict(
    max_position_embeddings=66, type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5
)


def quiet() -> None:
    """Offline, silent transformers."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    warnings.filterwarnings("ignore")


quiet()


def hf_config(family: str, **overrides):
    """A tiny transformers config of ``family`` (a key of `checkpoints.keymaps.FAMILIES`)."""
    import transformers

    if family == "bert":
        return transformers.BertConfig(**{**TINY, **overrides})
    if family == "roberta":
        return transformers.RobertaConfig(**{**TINY, **_ROBERTA_LIKE, **overrides})
    if family == "distilbert":
        return transformers.DistilBertConfig(
            **{
                **dict(
                    vocab_size=99,
                    dim=32,
                    n_layers=2,
                    n_heads=4,
                    hidden_dim=37,
                    max_position_embeddings=64,
                ),
                **overrides,
            }
        )
    if family == "albert":
        return transformers.AlbertConfig(
            **{
                **TINY,
                "embedding_size": 16,
                "num_hidden_layers": 3,
                "num_hidden_groups": 1,
                "hidden_act": "gelu_new",
                **overrides,
            }
        )
    if family in ("deberta", "deberta-v2"):
        # legacy (masked LM) left at transformers' default, true: the `cls.predictions.*`
        # layout, the one 4.x and 5.x both run (4.x breaks legacy=false; see keymaps.py)
        cls = transformers.DebertaConfig if family == "deberta" else transformers.DebertaV2Config
        return cls(
            **{
                **TINY,
                "type_vocab_size": 0,
                "relative_attention": True,
                "pos_att_type": "c2p|p2c",
                "position_biased_input": False,
                **overrides,
            }
        )
    if family == "longformer":
        window = list(overrides.pop("attention_window", (4, 6)))
        return transformers.LongformerConfig(
            **{
                **TINY,
                **_ROBERTA_LIKE,
                "num_hidden_layers": len(window),
                "attention_window": window,
                **overrides,
            }
        )
    # --- XLM-RoBERTa, CamemBERT (RoBERTa's layout) and ELECTRA (E = 16 ≠ H unless overridden)
    if family == "xlm-roberta":
        return transformers.XLMRobertaConfig(**{**TINY, **_ROBERTA_LIKE, **overrides})
    if family == "camembert":
        return transformers.CamembertConfig(**{**TINY, **_ROBERTA_LIKE, **overrides})
    if family == "electra":
        return transformers.ElectraConfig(**{**TINY, "embedding_size": 16, **overrides})
    if family == "roformer":
        return transformers.RoFormerConfig(**{**TINY, **overrides})
    if family == "ernie":
        return transformers.ErnieConfig(**{**TINY, "use_task_id": True, **overrides})
    if family == "mpnet":
        return transformers.MPNetConfig(
            **{**TINY, "max_position_embeddings": 66, "layer_norm_eps": 1e-5, **overrides}
        )
    if family == "modernbert":
        # 4 layers (global, local, global, local), a local window of 4 (2 each side) < T, and
        # distinct rotary bases per kind
        return transformers.ModernBertConfig(
            **{
                **TINY,
                "num_hidden_layers": 4,
                "local_attention": 4,
                "global_attn_every_n_layers": 2,
                "global_rope_theta": 1000.0,
                "local_rope_theta": 50.0,
                "pad_token_id": 0,
                "bos_token_id": 1,
                "cls_token_id": 1,
                "eos_token_id": 2,
                "sep_token_id": 2,
                **overrides,
            }
        )
    if family == "gte":  # gte-base-en-v1.5's layout: no segments; a rotary base of its own
        return transformers.GteConfig(
            **{
                **TINY,
                "type_vocab_size": 0,
                "pad_token_id": 0,
                "rope_parameters": {"rope_type": "default", "rope_theta": 500.0},
                **overrides,
            }
        )
    if family == "nomic_bert":  # two segment types, SwiGLU, rotary base 1000 (the defaults)
        return transformers.NomicBertConfig(**{**TINY, **overrides})
    raise ValueError(family)


def save_hf_tiny(family: str, cls_name: str, directory: Path, **overrides):
    """Save a random-init transformers ``cls_name`` of a tiny config into ``directory``; returns
    the model (eval mode). Norms and biases get non-trivial values so that a swap cannot hide."""
    import transformers

    torch.manual_seed(0)
    model = getattr(transformers, cls_name)(hf_config(family, **overrides)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if (
                "LayerNorm" in name
                or "layer_norm" in name
                or name.endswith("bias")
                or name.endswith(("q_bias", "v_bias"))
                or "_norm." in name
                or ".norm." in name
            ):
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(directory)
    return model


def padded_batch(
    lengths=(7, 5, 2),
    T: int | None = None,
    pad_id: int | None = 0,
    left: bool = False,
    seed: int = 1,
    low: int = 3,
    vocab: int = 99,
):
    """(ids, mask) of shape (len(lengths), T): row r has lengths[r] real tokens, padded right
    (or left) with ``pad_id`` (None: padding positions keep their random ids)."""
    T = T or max(lengths)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(low, vocab, (len(lengths), T), generator=g)
    mask = torch.ones(len(lengths), T, dtype=torch.long)
    for row, n in enumerate(lengths):
        if left:
            mask[row, : T - n] = 0
        else:
            mask[row, n:] = 0
    if pad_id is not None:
        ids[mask == 0] = pad_id
    return ids, mask


def assert_same_state(a: torch.nn.Module, b: torch.nn.Module) -> None:
    """Same keys in the same order, bit-identical tensors."""
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key


def longformer_global_mask(kind: str, mask: torch.Tensor):
    """Explicit Longformer global masks for a (3, T) batch: None, the first real token of each
    row, or different numbers of global tokens per row (3, 1, 0)."""
    if kind == "none":
        return None
    g = torch.zeros_like(mask)
    if kind == "first":
        g[torch.arange(len(mask)), mask.argmax(dim=1)] = 1
    else:
        real = [torch.nonzero(row).flatten() for row in mask]
        g[0, real[0][[0, 5, 9]]] = 1
        g[1, real[1][4]] = 1
    return g


def torchrun_env(rank: int, world: int, port: int) -> None:
    """Set the variables torchrun gives process ``rank`` of ``world`` (rendezvous on
    127.0.0.1:``port``), for workers started by ``torch.multiprocessing.spawn``."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
    )


def mlm_loss(model, batch):
    """Cross-entropy of an MLM model's (B, T, V) logits against ``batch["labels"]`` (B, T) at
    every position: the loss_fn of the small training-loop tests."""
    logits = model(batch["input_ids"]).logits
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1)
    )
    return loss, {"mlm_loss": loss.item()}


def tiny_wordpiece_vocab() -> list[str]:
    """[PAD] [UNK] [CLS] [SEP] [MASK] (ids 0-4), then a-z and ##a-##z."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + letters + ["##" + c for c in letters]


def save_wordpiece_bert(
    directory: Path, vocab: list[str], *, dropout: float = 0.0, seed: int = 0
) -> Path:
    """A tiny random BERT (H=32, L=2, 64 positions, ``seed``) with an uncased WordPiece
    tokenizer over ``vocab`` (which holds [PAD], [UNK], [CLS], [SEP] and [MASK]), as a plain
    Hugging Face directory; ``dropout``: its two dropout probabilities."""
    import tokenizers
    import transformers

    directory.mkdir(parents=True, exist_ok=True)
    backend = tokenizers.Tokenizer(
        tokenizers.models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]")
    )
    backend.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    backend.post_processor = tokenizers.processors.BertProcessing(
        ("[SEP]", vocab.index("[SEP]")), ("[CLS]", vocab.index("[CLS]"))
    )
    backend.decoder = tokenizers.decoders.WordPiece()
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    tok.save_pretrained(directory)
    cfg = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=64,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )
    torch.manual_seed(seed)
    transformers.BertModel(cfg).save_pretrained(directory)
    return directory


def make_tiny(directory: Path, *, dropout: float = 0.0, seed: int = 0) -> Path:
    """A tiny random BERT (H=32, L=2) as a sentence-transformers directory (mean, normalised)."""
    save_wordpiece_bert(directory, tiny_wordpiece_vocab(), dropout=dropout, seed=seed)
    from bertfamily.pipelines.embedding.bi_encoder import BiEncoder

    BiEncoder.from_directory(directory, max_seq_length=32).save(directory)
    return directory


def save_tiny(path: Path, minilm_dir: Path, seed: int = 0) -> Path:
    """A tiny random BERT (H=32, L=2) with MiniLM's tokenizer, saved as a model directory."""
    import bertfamily as bf

    config = bf.EncoderConfig.from_preset(
        "tiny-bert", vocab_size=30522, max_position_embeddings=512
    )
    torch.manual_seed(seed)
    save_tiny_files(bf.build_model(config), path, minilm_dir)
    return path


def save_tiny_files(model, path: Path, minilm_dir: Path) -> None:
    """``model.save_pretrained(path)`` with MiniLM's tokenizer files beside it."""
    model.save_pretrained(path)
    copy_tokenizer_files(minilm_dir, path)


def copy_tokenizer_files(source: Path, path: Path) -> None:
    """Copy the tokenizer files of ``source`` (MiniLM's) that exist into ``path``."""
    import shutil

    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        if (source / name).exists():
            shutil.copy(source / name, path / name)


def save_tiny_splade(path: Path, minilm_dir: Path, seed: int = 1, bias: float = -0.3) -> Path:
    """A tiny random SPLADE directory (BERT masked LM, H=32, L=2, MiniLM's tokenizer; then
    max-pooled ReLU) in sentence-transformers' layout, written by us (no sentence-transformers
    import); ``bias`` shifts the MLM output bias (about 2% of the vocabulary active at -0.3)."""
    import json

    import bertfamily as bf

    config = bf.EncoderConfig.from_preset(
        "tiny-bert", vocab_size=30522, max_position_embeddings=512
    )
    torch.manual_seed(seed)
    model = bf.build_model(config, ("mlm",))
    with torch.no_grad():
        model.mlm_head.bias += bias
    save_tiny_files(model, path, minilm_dir)
    entries = [("MLMTransformer", "", "mlm_transformer"), ("SpladePooling", "1_SpladePooling",
                                                            "splade_pooling")]  # fmt: skip
    modules = [
        {"idx": i, "name": str(i), "path": p,
         "type": f"sentence_transformers.sparse_encoder.modules.{m}.{c}"}
        for i, (c, p, m) in enumerate(entries)
    ]  # fmt: skip
    (path / "modules.json").write_text(json.dumps(modules, indent=2), encoding="utf-8")
    (path / "1_SpladePooling").mkdir()
    pooling = {"pooling_strategy": "max", "activation_function": "relu"}
    (path / "1_SpladePooling" / "config.json").write_text(json.dumps(pooling), encoding="utf-8")
    return path


def write_jsonl(path: Path, rows) -> Path:
    """``rows`` (JSON values) written to ``path``, one a line; returns ``path``."""
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def save_tiny_pylate_colbert(root: Path, minilm_dir: Path) -> Path:
    """A random tiny BERT (H=32, 64 positions, MiniLM's tokenizer) made a ColBERT (D=16,
    query length 12, document length 20) by PyLate and saved by it in ``root / "colbert"``
    (needs pylate: `reference.pylate_colbert.make_pylate_colbert`)."""
    from reference.pylate_colbert import make_pylate_colbert

    base = root / "bert"
    save_hf_tiny(
        "bert", "BertModel", base, vocab_size=30522, max_position_embeddings=64, hidden_size=32
    )
    copy_tokenizer_files(minilm_dir, base)
    return make_pylate_colbert(
        base, root / "colbert", embedding_size=16, query_length=12, document_length=20
    )


def save_tiny_bge_m3(directory: Path, texts: list[str], colbert_dim: int = 24) -> Path:
    """A tiny BGE-M3 directory in FlagEmbedding's layout: an XLM-R tokenizer whose Unigram
    vocabulary holds the words of ``texts`` (with and without their punctuation) and each of
    their characters, a random XLM-R trunk (H=32, initializer range 0.4: distinct first-token
    vectors), and the heads ``colbert_linear.pt`` (32 → ``colbert_dim``) and
    ``sparse_linear.pt`` (32 → 1, bias 0.5: some weights > 0, some cut to 0 by the ReLU)."""
    import transformers

    # laid out as XLM-R's vocabulary: fairseq's first four ids, <mask> last; words as "▁" pieces
    words = {w for line in texts for w in line.split()}
    words |= {w.strip(".,") for w in words} - {""}
    chars = sorted({c for line in texts for c in line if not c.isspace()})
    vocab = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -3.0)]
    vocab += [("▁" + w, -2.0 - 0.1 * len(w)) for w in sorted(words)]
    vocab += [(c, -6.0) for c in chars] + [("<mask>", 0.0)]
    tokenizer = transformers.XLMRobertaTokenizer(vocab=vocab)
    tokenizer.save_pretrained(directory)
    save_hf_tiny(
        "xlm-roberta",
        "XLMRobertaModel",
        directory,
        vocab_size=len(tokenizer),
        initializer_range=0.4,
    )
    torch.manual_seed(3)
    colbert, sparse = torch.nn.Linear(32, colbert_dim), torch.nn.Linear(32, 1)
    with torch.no_grad():
        sparse.bias.fill_(0.5)
    torch.save(colbert.state_dict(), directory / "colbert_linear.pt")
    torch.save(sparse.state_dict(), directory / "sparse_linear.pt")
    return directory
