"""Training-dynamics check: bertfamily's MLM training vs transformers' BertForMaskedLM.

Both start from the same random bert-tiny weights (ours saved with save_pretrained, loaded by
transformers), see the same dynamically masked batches of Emma (Jane Austen corpus, packed to
64 tokens, a WordPiece tokenizer trained on the corpus) and take AdamW steps at the same rate;
the mean loss of every 50 steps is printed side by side. Needs `bertfamily fetch janeausten`
and a tokenizer directory (argument 1, e.g. from `bertfamily tokenizer train`).

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/train_parity_hf.py TOKENIZER_DIR [STEPS]
"""

import os
import sys
import tempfile
import warnings

import numpy as np
import torch

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import transformers  # noqa: E402

from bertfamily import build_model  # noqa: E402
from bertfamily.config import EncoderConfig  # noqa: E402
from bertfamily.data.corpora import read_documents  # noqa: E402
from bertfamily.objectives.instances import SpecialIds  # noqa: E402
from bertfamily.objectives.masking import MaskingConfig  # noqa: E402
from bertfamily.objectives.pretraining import (  # noqa: E402
    MLMCollator,
    PretrainingModel,
    build_instances,
    tokenize_documents,
)
from bertfamily.resources.cache import fetch  # noqa: E402
from bertfamily.tokenization import load_tokenizer  # noqa: E402

tok = load_tokenizer(sys.argv[1])
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 400
docs = read_documents(fetch("janeausten") / "emma.txt")
inst = build_instances(
    tokenize_documents(docs, tok), "packed", 64, SpecialIds(tok.cls_token_id, tok.sep_token_id)
)
collate = MLMCollator(
    MaskingConfig(),
    vocab_size=tok.vocab_size,
    mask_token_id=tok.mask_token_id,
    pad_token_id=tok.pad_token_id,
    special_ids=tok.all_special_ids,
)
torch.manual_seed(0)
cfg = EncoderConfig.from_preset(
    "bert-tiny",
    vocab_size=tok.vocab_size,
    use_pooler=False,
    pair_head=None,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
ours = build_model(cfg, heads=["mlm"])
with tempfile.TemporaryDirectory() as d:
    ours.save_pretrained(d)
    hf = transformers.BertForMaskedLM.from_pretrained(d)
pm = PretrainingModel(ours)
opt_ours = torch.optim.AdamW(ours.parameters(), lr=2e-3, weight_decay=0.0)
opt_hf = torch.optim.AdamW(hf.parameters(), lr=2e-3, weight_decay=0.0)
rng = np.random.default_rng(0)
ours_losses, hf_losses = [], []
print("step  bertfamily  transformers")
for step in range(steps):
    batch = collate([inst[i] for i in rng.integers(0, len(inst), 32)], np.random.default_rng(step))
    loss, _ = pm(batch)
    opt_ours.zero_grad()
    loss.backward()
    opt_ours.step()
    ref = hf(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]
    ).loss
    opt_hf.zero_grad()
    ref.backward()
    opt_hf.step()
    ours_losses.append(loss.item())
    hf_losses.append(ref.item())
    if (step + 1) % 50 == 0:
        print(
            f"{step + 1:4d}  {np.mean(ours_losses[-50:]):10.3f}  {np.mean(hf_losses[-50:]):12.3f}",
            flush=True,
        )
