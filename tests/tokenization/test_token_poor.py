"""Truncation after a long token-poor prefix (#34 item 3): after 300,000 characters of spaces, a
hex blob or DNA, the real text that follows is kept exactly as the reference keeps it (the HF
tokenizers library truncating the whole text; sentence-transformers embedding it), while what
our tokenizer hands its backend stays bounded by the model's limit, not by the line.

Before: the character cut accepted its largest prefix (limit × 1,024 characters) without
counting, dropping the text after it (cosine 0.18–0.39 to sentence-transformers)."""

from __future__ import annotations

import numpy as np
import pytest
import tokenizers

from bertfamily.tokenization.cutting import MAX_CHARS_PER_TOKEN

REAL = (
    "The committee met on Tuesday to review the harbour project. After a long debate about "
    "costs, tides and the old lighthouse, the members agreed to rebuild the northern pier first "
    "and to publish every estimate, so that the town could follow the work week by week. "
) * 8  # ~400 words: more than the 256 tokens MiniLM keeps
PREFIX = 300_000  # characters: beyond the old cut's last, uncounted round (256 × 1,024)
ONE_RUN = {  # a prefix of n characters
    "spaces": lambda n: " " * n + REAL,
    "hex blob": lambda n: "0123456789abcdef" * (n // 16) + " " + REAL,
    "DNA": lambda n: "ACGT" * (n // 4) + "\n" + REAL,
}
TEXTS = {
    **{name: make(PREFIX) for name, make in ONE_RUN.items()},
    "hex words": ("deadbeef" * 2_000 + "\n") * (PREFIX // 16_001) + REAL,  # 16 K-char words
    "mixed": "  \t" * 50_000 + "ACGT" * 40_000 + " " * 60_000 + REAL,
}


class Recorder:
    """Stands in for the Rust backend and records the longest text handed to it."""

    def __init__(self, backend):
        self.backend, self.longest = backend, 0

    def _see(self, items):
        for item in items:
            for t in (item,) if isinstance(item, str) else item:
                self.longest = max(self.longest, len(t))

    def encode(self, text, *args, **kwargs):
        self._see([text] if args == () or isinstance(text, str) else [(text, *args[:1])])
        return self.backend.encode(text, *args, **kwargs)

    def encode_batch(self, inputs, *args, **kwargs):
        self._see(inputs)
        return self.backend.encode_batch(inputs, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.backend, name)


@pytest.fixture(scope="module")
def reference(minilm_dir):
    ref = tokenizers.Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    ref.enable_truncation(256)
    ref.no_padding()
    return ref


def _tokenize(tok, text: str) -> tuple[dict, int]:
    """``tok(text)`` at MiniLM's limit, and the longest text its backend was handed."""
    real = tok.backend
    tok.backend = recorder = Recorder(real)
    try:
        got = tok(text, max_length=256, return_tensors=None, return_offsets=True,
                  return_truncated=True)  # fmt: skip
    finally:
        tok.backend = real
    return got, recorder.longest


@pytest.mark.parametrize("name", list(TEXTS))
def test_tokens_after_a_token_poor_prefix_are_the_references(minilm_tokenizer, reference, name):
    text = TEXTS[name]
    got, longest = _tokenize(minilm_tokenizer, text)
    want = reference.encode(text)
    assert got["input_ids"][0] == want.ids
    assert got["truncated"] == [1]
    # offsets point into the text given, as the reference's do
    assert got["offset_mapping"][0] == [list(o) for o in want.offsets]
    # memory: what reached the backend is bounded by the limit, not by the 300 K-char line
    assert longest <= 256 * MAX_CHARS_PER_TOKEN < len(text), longest


@pytest.mark.parametrize("name", list(ONE_RUN))
def test_what_the_backend_tokenises_does_not_grow_with_the_prefix(minilm_tokenizer, name):
    texts = (ONE_RUN[name](PREFIX), ONE_RUN[name](3 * PREFIX))  # a prefix three times as long
    (short, n_short), (long, n_long) = (_tokenize(minilm_tokenizer, t) for t in texts)
    assert long["input_ids"] == short["input_ids"]
    assert n_long == n_short <= 256 * 64, (n_short, n_long)  # one window at most


def test_nothing_to_cut_after_the_prefix_is_not_reported_truncated(minilm_tokenizer, reference):
    text = " " * PREFIX + "a short text at the end"
    got = minilm_tokenizer(text, max_length=256, return_tensors=None, return_truncated=True)
    assert got["input_ids"][0] == reference.encode(text).ids and got["truncated"] == [0]


@pytest.mark.slow
def test_embeddings_after_a_token_poor_prefix_match_sentence_transformers(minilm_dir):
    st = pytest.importorskip("sentence_transformers")
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    texts = [TEXTS["spaces"], TEXTS["hex blob"], TEXTS["DNA"], REAL]
    ours = SentenceEmbedder(minilm_dir, dtype="fp32").encode(texts)
    theirs = st.SentenceTransformer(str(minilm_dir), device="cpu").encode(texts)
    cosine = np.sum(ours * theirs, axis=1) / (
        np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1)
    )
    assert cosine.min() > 0.9999, cosine  # before: 0.18-0.39 after such prefixes
