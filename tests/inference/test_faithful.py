"""Faithful by default (issue 42): the default dtype is fp32 on every CPU, a
sentence-transformers directory with a Dense layer equals sentence-transformers within 1e-5,
and a text's vector is the same, bit for bit, whatever else is in its batch — alone, among
other texts, at any batch size, in any order, in the server under concurrent clients. The one
documented exception: a change of the thread count moves fp32 results by float rounding.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from bertfamily.inference.precision import resolve_dtype
from bertfamily.modules import kernels
from bertfamily.modules.kernels import INVARIANT_ROWS, RowBlockedLinear, row_blocked
from bertfamily.pipelines.embedding.embed import SentenceEmbedder
from test_sentence_transformers import _minilm_with_dense

st = pytest.importorskip("sentence_transformers")
pytestmark = pytest.mark.parity

AMX = "flags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
AVX512_BF16 = "flags\t\t: fpu avx2 avx512f avx512_bf16\n"
AVX2 = "flags\t\t: fpu avx2 fma\n"
# short and long texts, one over MiniLM's 256-token limit, and duplicates
TEXTS = [
    "A man is eating food.",
    "a",
    "The girl is carrying a baby. " * 3,
    "Stock markets fell sharply today after the announcement. " * 2,
    "word " * 300,
    "A man is eating food.",
    "Un homme mange du pain.",
]


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    return SentenceEmbedder(minilm_dir)  # every default


def test_the_default_dtype_is_fp32_on_every_cpu_kind():
    for cpu in (AMX, AVX512_BF16, AVX2):
        assert resolve_dtype("auto", "cpu", cpu)[0] == torch.float32
        assert resolve_dtype(None, "cpu", cpu)[0] == torch.float32
    assert resolve_dtype("fastest", "cpu", AMX)[0] == torch.bfloat16


@pytest.mark.slow
def test_default_embedder_with_a_dense_layer_equals_sentence_transformers(minilm_dir, tmp_path):
    d, _, _ = _minilm_with_dense(minilm_dir, tmp_path / "dense")
    ours = SentenceEmbedder(d)  # the defaults, on whatever CPU this is
    assert next(ours.model.parameters()).dtype == torch.float32
    ref = st.SentenceTransformer(str(d), device="cpu").encode(TEXTS, convert_to_numpy=True)
    got = ours.encode(TEXTS)
    assert got.shape == (len(TEXTS), 16)
    np.testing.assert_allclose(got, ref, atol=1e-5, rtol=0)
    # the ubinary bits of sentence-transformers' quantize_embeddings agree too
    from sentence_transformers.quantization import quantize_embeddings

    np.testing.assert_array_equal(
        ours.encode(TEXTS, precision="ubinary"), quantize_embeddings(ref, "ubinary")
    )


def test_a_text_gets_the_same_bits_in_any_batch(minilm):
    alone = np.stack([minilm.encode([t])[0] for t in TEXTS])
    assert (alone[0] == alone[5]).all()  # duplicates, computed apart
    for batch_size in (1, 2, 3, 32):
        got = minilm.encode(TEXTS, batch_size=batch_size)
        np.testing.assert_array_equal(got, alone)
    order = [4, 2, 6, 0, 3, 1, 5]
    np.testing.assert_array_equal(minilm.encode([TEXTS[i] for i in order]), alone[order])
    # among many other texts, with a token budget that reshapes the batches
    crowd = [f"filler sentence number {i} " * (1 + i % 7) for i in range(40)]
    got = minilm.encode(crowd + TEXTS, batch_size=16, max_batch_tokens=900)[len(crowd) :]
    np.testing.assert_array_equal(got, alone)
    # the token rows a server hands over give the same bits
    np.testing.assert_array_equal(minilm.encode_tokenized(minilm.tokenize(TEXTS)), alone)


def test_row_blocked_products_do_not_depend_on_the_other_rows():
    torch.manual_seed(0)
    lin = torch.nn.Linear(48, 40)
    x = torch.randn(3 * INVARIANT_ROWS + 5, 48)
    ref = row_blocked(x[:1], lambda b: torch.nn.functional.linear(b, lin.weight, lin.bias), 40)
    for rows in (1, 2, 15, 16, INVARIANT_ROWS, INVARIANT_ROWS + 1, len(x)):
        mixed = torch.cat([x[1:rows], x[:1]])  # the row last, after rows - 1 others
        y = row_blocked(mixed, lambda b: torch.nn.functional.linear(b, lin.weight, lin.bias), 40)
        assert torch.equal(y[-1], ref[0]) and y.shape == (rows, 40)
    np.testing.assert_allclose(y.detach().numpy(), lin(mixed).detach().numpy(), atol=1e-5)
    assert row_blocked(x[:0], lin, 40).shape == (0, 40)


@pytest.fixture
def fresh_probe(tmp_path, monkeypatch):
    """`row_invariance` with an empty memory and its store under ``tmp_path``."""
    monkeypatch.setattr(kernels, "_ROW_INVARIANCE", {})
    store = tmp_path / "kernels" / "row-invariance.json"
    monkeypatch.setattr(kernels, "_store", lambda: store)
    return store


def _linear_that_changes_below(rows_from: int, w: torch.Tensor):
    """A fake kernel whose result moves by one rounding step when a call has fewer than
    ``rows_from`` rows (as MKL's and oneDNN's small-row paths do), else a row-wise product
    that depends on nothing else (x[:, :24] * w, w (24,))."""

    def matmul(x: torch.Tensor) -> torch.Tensor:
        y = x[:, :24] * w
        return torch.nextafter(y, torch.full_like(y, 1e9)) if x.shape[0] < rows_from else y

    return matmul


@pytest.mark.parametrize(("rows_from", "expected"), [(1, 1), (8, 8), (16, 16), (17, 0), (64, 0)])
def test_row_invariance_is_measured_and_decides_one_call_or_blocks(
    fresh_probe, rows_from, expected
):
    """A kernel that agrees with the blocked products from m rows on runs as one call padded
    to m rows; one that needs more than MAX_MIN_ROWS keeps the fixed blocks. Either way every
    row gets the bits of the blocked products, whatever its batch."""
    torch.manual_seed(0)
    w = torch.randn(24)
    matmul = _linear_that_changes_below(rows_from, w)
    calls = []

    def counted(x):
        calls.append(x.shape[0])
        return matmul(x)

    assert kernels.row_invariance(matmul, torch.zeros(1, 40), ("fake", rows_from)) == expected
    x = torch.randn(150, 40)
    blocked = kernels._blocks(x, matmul)
    for rows in (1, 3, 16, 70, 150):
        calls.clear()
        y = row_blocked(x[:rows], counted, 24, ("fake", rows_from))
        assert torch.equal(y, blocked[:rows])
        want = [max(rows, expected)] if expected else [INVARIANT_ROWS] * -(-rows // INVARIANT_ROWS)
        assert calls == want


def test_row_invariance_is_kept_for_the_next_process(fresh_probe):
    w = torch.randn(24)
    assert kernels.row_invariance(_linear_that_changes_below(4, w), torch.zeros(1, 40), ("k",)) == 4
    stored = json.loads(fresh_probe.read_text())
    assert list(stored.values()) == [4] and kernels._machine_key() in next(iter(stored))
    kernels._ROW_INVARIANCE.clear()  # a new process: read, not measured again

    def fails(x):
        raise AssertionError("measured again")

    assert kernels.row_invariance(fails, torch.zeros(1, 40), ("k",)) == 4
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)  # another thread count is another entry: measured
    try:
        with pytest.raises(AssertionError, match="measured again"):
            kernels.row_invariance(fails, torch.zeros(1, 40), ("k",))
    finally:
        torch.set_num_threads(threads)
    fresh_probe.write_text("not json")  # an unreadable store: measured again
    kernels._ROW_INVARIANCE.clear()
    assert kernels.row_invariance(_linear_that_changes_below(2, w), torch.zeros(1, 40), ("k",)) == 2


def test_the_cpu_kernels_of_the_default_path_are_measured_row_invariant(minilm_dir, fresh_probe):
    """On this CPU the default path's linears run as single calls where the kernel passed the
    probe, and a text's vector is the same bits alone, in a batch of 100 and in a batch of 1,000
    tokens as before."""
    model = SentenceEmbedder(minilm_dir)
    texts = [f"sentence number {i} about rivers and mountains" for i in range(100)]
    alone = model.encode(texts[:1], batch_size=1)
    np.testing.assert_array_equal(model.encode(texts, batch_size=100)[:1], alone)
    assert fresh_probe.exists() and set(json.loads(fresh_probe.read_text()).values()) <= set(
        range(kernels.MAX_MIN_ROWS + 1)
    )


def test_training_keeps_plain_linears_and_gradients(minilm_dir):
    model = SentenceEmbedder.for_training(minilm_dir, max_seq_length=16)
    assert model.training and model.max_seq_length == 16
    assert not any(type(m) is RowBlockedLinear for m in model.modules())
    feats = model.features(["a cat", "a dog on a mat"])
    model(**feats).sum().backward()
    assert model.model.encoder.layers[0].attention.qkv.weight.grad is not None


def test_one_limit_rule_for_inference_and_training(minilm_dir, tmp_path):
    """On a 512-position directory without sentence_bert_config.json both forms cut at the
    tokenizer's 512 (sentence-transformers' rule); a custom PoolingSpec keeps the limit."""
    from bertfamily.pipelines.embedding.sentence_modules import PoolingSpec

    plain = tmp_path / "plain"
    plain.mkdir()
    for f in minilm_dir.iterdir():
        if f.is_file() and f.name not in ("sentence_bert_config.json", "modules.json"):
            (plain / f.name).symlink_to(f)
    assert SentenceEmbedder(plain).max_length == 512
    assert SentenceEmbedder.for_training(plain).max_seq_length == 512
    assert st.SentenceTransformer(str(plain), device="cpu").max_seq_length == 512
    custom = SentenceEmbedder(minilm_dir, pooling=PoolingSpec(mode="cls"))
    assert custom.max_length == 256  # the directory's, not dropped by the pooling override
    assert SentenceEmbedder(minilm_dir, max_seq_length=32).max_length == 32
    with pytest.warns(DeprecationWarning, match="max_seq_length"):
        old = SentenceEmbedder(minilm_dir, pooling=PoolingSpec(max_seq_length=24))
    assert old.max_length == 24


def test_thread_count_is_the_documented_exception(minilm):
    """fp32 results may move by float rounding when the thread count changes (the governor
    changes it under load); they stay within 1e-6 of each other."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = SentenceEmbedder.encode(minilm, TEXTS)
        torch.set_num_threads(2)
        two = SentenceEmbedder.encode(minilm, TEXTS)
    finally:
        torch.set_num_threads(before)
    np.testing.assert_allclose(one, two, atol=1e-6, rtol=0)


@pytest.mark.slow
def test_server_under_eight_clients_gives_the_bits_of_encode_alone(minilm_dir):
    from test_serve import Server, httpx

    server = Server(Path(minilm_dir))  # the server's defaults (dtype auto = fp32), 1 thread
    minilm = SentenceEmbedder(minilm_dir, threads=1)  # the same thread count
    try:
        texts = [f"client {i} asks about item {i * 7 % 11} " * (1 + i % 5) for i in range(16)]
        texts += TEXTS
        got: dict[int, np.ndarray] = {}

        def client(k: int) -> None:
            for i in range(k, len(texts), 8):
                r = httpx.post(
                    server.url + "/embed", json={"inputs": texts[i], "truncate": True}, timeout=60
                )
                got[i] = np.array(r.json()[0], dtype=np.float32)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, text in enumerate(texts):
            np.testing.assert_array_equal(got[i], minilm.encode([text])[0])
    finally:
        server.stop()


def test_a_fixed_count_reaches_the_thread_that_computes(monkeypatch):
    """A server started with --threads 1 computes on its batcher thread: torch's count is per
    thread, so the engine sets the process's fixed count there (a fresh server once ran its
    first requests on the default count, and their bits differed from encode())."""
    from bertfamily import runtime
    from bertfamily.inference.threads import ThreadPolicy

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    seen: list[int] = []
    before = runtime.fixed_threads()  # another test's command may have fixed one already
    with runtime.governor_scope():
        runtime.apply_threads(1, adapt=False)
        assert runtime.fixed_threads() == 1

        def worker() -> None:
            with ThreadPolicy(0).scope():
                seen.append(torch.get_num_threads())

        t = threading.Thread(target=worker)
        t.start()
        t.join()
    assert seen == [1] and runtime.fixed_threads() == before  # given back with the scope


def test_a_forked_child_keeps_torchs_count(monkeypatch):
    """GNU OpenMP is not fork-safe: a child of a process that ran a parallel region on two
    threads hung in its first parallel region once the automatic policy raised its count (a
    fine-tune's first evaluation in a forked child, the resume test). In a forked child the
    automatic policy keeps torch's count as it is, and no governor starts."""
    import os

    from bertfamily import runtime
    from bertfamily.inference.threads import ThreadPolicy

    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # not even the variable raises it
    monkeypatch.setattr(runtime, "threads_are_automatic", lambda requested=0: True)
    before = torch.get_num_threads()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report (count seen in the scope, governor active) and leave
        code = 1
        try:
            torch.set_num_threads(1)
            with ThreadPolicy(0).scope():
                seen = torch.get_num_threads(), runtime.active_governor() is not None
            os.write(write, f"{seen[0]} {int(seen[1])}".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    answer = os.read(read, 64).decode()
    os.close(read)
    assert status == 0 and answer == "1 0", (status, answer)
    assert not runtime.forked_child() and torch.get_num_threads() == before


def test_texts_are_checked_once_for_every_pipeline(minilm):
    from bertfamily.errors import InputError

    for bad in (None, b"bytes", [None], 5):
        with pytest.raises(InputError, match="string"):
            minilm.encode(bad)
    assert minilm.features("one text")["input_ids"].shape[0] == 1  # never 8 one-char texts
    np.testing.assert_array_equal(minilm.encode("a cat"), minilm.encode(["a cat"])[0])
    with pytest.raises(InputError, match="max_seq_length must be >= 1"):
        SentenceEmbedder(minilm.path, max_seq_length=0)
