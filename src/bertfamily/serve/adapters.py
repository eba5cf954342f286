"""One adapter per kind of served model: what the routes need of it, so that no route asks
which kind it has. Each adapter wraps one pipeline and knows how to load it (`load`), what it
answers in /info (`model_type`, `dimension`, `dtype`), how a request's texts are admitted and
tokenized (on a worker thread), and the model calls the batcher runs (`run_key`: a batcher
key is ``(bound model call, *options)``; the inputs of every request gathered under that key
are its first argument).

| adapter | pipeline | routes |
|---|---|---|
| `EmbeddingModel` | `SentenceEmbedder` | /embed, /embed_all, /similarity, /v1/embeddings |
| `SparseModel` | `SparseEncoder` | /embed_sparse |
| `RerankerModel` | `Reranker` | /rerank, /v1/rerank, /predict (pairs) |
| `ClassifierModel` | `TextClassifier` | /predict |
| `EarlyExitModel` | `EarlyExitClassifier` | /predict (with ``speed``) |
| `TaggerModel` | `EntityTagger` | /predict (single texts) |
| `ColBERTModel` | `ColBERTEncoder` | /embed_multivector (token matrices) |
| `M3Model` | `BGEM3Encoder` | /embed_m3 (dense, sparse, multi-vector), /embed_multivector |

Every adapter answers /tokenize, /decode, /info, /health and /metrics.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArgumentTypeError, InputError, ServeError
from ..inference.batches import TokenRows
from ..inference.precision import resolve_dtype
from ..pipelines.embedding.bge_m3 import BGEM3Encoder, m3_json_rows
from ..pipelines.embedding.colbert import ColBERTEncoder
from ..pipelines.embedding.embed import SentenceEmbedder
from ..pipelines.embedding.sparse import SparseEncoder, SparseVector
from ..pipelines.reranking.rerank import Reranker
from ..pipelines.tasks.classify import TextClassifier
from ..pipelines.tasks.early_exit import EarlyExitClassifier
from ..pipelines.tasks.ner import EntityTagger
from .admission import (
    INPUTS,
    InputNames,
    check_ids,
    check_speed,
    check_texts,
    check_token_counts,
    check_truncation,
    truncates,
)
from .settings import ServeSettings

__all__ = [
    "ClassifierModel",
    "ColBERTModel",
    "M3Model",
    "EarlyExitModel",
    "EmbeddingModel",
    "PredictingModel",
    "RerankerModel",
    "ServedModel",
    "SparseModel",
    "TaggerModel",
    "adapter_for",
    "join_rows",
    "run_key",
    "served_dtype",
    "split_rows",
]


def served_dtype(pipeline: Any) -> str:
    """The dtype ``pipeline`` computes in, as /info and the start-up line say it: "int8"
    (torch's dynamic int8, `SentenceEmbedder(quantize="int8")`), OpenVINO's precision
    ("float32", "bfloat16", "int8+float32" for NNCF's int8), else its torch parameters'
    dtype ("float32", "bfloat16"); a pipeline over a `SentenceEmbedder` (``embedder``: a
    `ColBERTEncoder`) computes in the embedder's."""
    pipeline = getattr(pipeline, "embedder", pipeline)
    if getattr(pipeline, "int8_plan", None) is not None:
        return "int8"
    if getattr(pipeline, "runtime", "torch") == "openvino":  # no torch parameters
        precision = pipeline.model.precision
        dtype = {"f32": "float32", "bf16": "bfloat16"}.get(precision, precision)
        return f"int8+{dtype}" if getattr(pipeline.model, "quantized", None) else dtype
    return str(next(pipeline.model.parameters()).dtype).removeprefix("torch.")


#: TEI's ``--pooling`` values and the pooling mode of each.
TEI_POOLING = {"cls": "cls", "mean": "mean", "last-token": "lasttoken", "lasttoken": "lasttoken"}


def with_pooling(embedder: SentenceEmbedder, pooling: str | None) -> SentenceEmbedder:
    """``embedder`` pooling by TEI's ``--pooling`` mode (None: the directory's), its
    normalisation and prompt handling kept.

    Raises:
        InputError: an unknown mode ("splade" is a SPLADE directory's own), or a directory
            whose pooling concatenates several modes (its width would change).
    """
    if pooling is None:
        return embedder
    if pooling not in TEI_POOLING:
        raise InputError(
            f"--pooling must be one of {', '.join(TEI_POOLING)} for an embedding model, got "
            f"{pooling!r} (splade: serve a SPLADE directory)"
        )
    if len(embedder.pooling.modes) != 1:
        raise InputError(
            f"--pooling cannot replace this model's concatenated pooling {embedder.pooling.modes}"
        )
    embedder.pooling = replace(embedder.pooling, mode=TEI_POOLING[pooling])
    return embedder


def split_rows(tokens: TokenRows) -> list[TokenRows]:
    """One `TokenRows` per input (what the batcher carries: a request's inputs are rows,
    gathered with other requests' rows into one model call, `join_rows`)."""
    return [tokens.take([i]) for i in range(len(tokens))]


def join_rows(items: Sequence[TokenRows]) -> TokenRows:
    """The `TokenRows` of gathered rows (`split_rows` of one or more requests, under one
    batcher key: the same fields and prompt)."""
    return TokenRows.join(items)


def run_key(key: Hashable, inputs: list[Any]) -> Sequence[Any]:
    """The batcher's model call: ``key`` is ``(model call, *options)``."""
    call, *options = key  # type: ignore[misc]
    return call(inputs, *options)


class ServedModel:
    """What every route needs of the served pipeline.

    Args:
        pipeline: the loaded pipeline (`load`).
        settings: the server's limits (``batch_size`` and ``max_batch_tokens`` of each model
            call).

    Class attributes:
        describe: the kind and its routes, for a request to a route it does not serve.
        refusal: how the loader's refusals name the kind ("this is a cross-encoder").
        info_kind: the key of /info's ``model_type`` for a model with labels.
    """

    pipeline_class: type = object
    describe = ""
    refusal = ""
    info_kind = "classifier"

    def __init__(self, pipeline: Any, settings: ServeSettings) -> None:
        self.pipeline = pipeline
        self.settings = settings
        self.tokenizer = pipeline.tokenizer
        self.max_length: int = pipeline.max_length  # every kind's limit comes from its model
        self.sizes = {
            "batch_size": settings.batch_size,
            "max_batch_tokens": settings.max_batch_tokens,
        }

    @classmethod
    def load(cls, path: Path, hf_config: dict | None, **options: Any) -> Any:
        """The pipeline of this kind for the directory ``path`` (options as
        `app.load_served_model`): ``pipeline_class`` on ``device`` in ``dtype``; kinds with
        more options override it."""
        return cls.pipeline_class(path, device=options["device"], dtype=options["dtype"])

    @property
    def directory(self) -> Path | None:
        """The directory the pipeline was loaded from, when it keeps it."""
        return getattr(self.pipeline, "path", None)

    @property
    def dimension(self) -> int | None:
        """The width of an embedding (None for a kind that does not embed)."""
        return None

    @property
    def dtype(self) -> str:
        """The dtype it computes in (`served_dtype`)."""
        return served_dtype(self.pipeline)

    @property
    def runtime(self) -> str:
        """The runtime that computes: "torch" or "openvino"."""
        return getattr(self.pipeline, "runtime", "torch")

    def model_type(self) -> dict:
        """/info's ``model_type`` (TEI's)."""
        names = list(self.pipeline.labels)
        labels = {
            "id2label": dict(enumerate(names)),
            "label2id": {n: i for i, n in enumerate(names)},
        }
        return {self.info_kind: labels}

    def prompt_text(self, prompt_name: str | None) -> str:
        """The prompt prepended to each input (named, or the model's default; "" for none): it
        counts toward the token limit and ``usage``.

        Raises:
            ServeError: 422 a ``prompt_name`` the model does not have.
        """
        prompts = getattr(self.pipeline, "prompts", {})
        if prompt_name is not None and prompt_name not in prompts:
            raise ServeError(
                422, f"unknown prompt_name {prompt_name!r}; this model has {sorted(prompts)}"
            )
        if prompt_name is None and self.settings.default_prompt is not None:
            return self.settings.default_prompt
        if prompt_name is None:
            prompt_name = self.settings.default_prompt_name or getattr(
                self.pipeline, "default_prompt_name", None
            )
        return prompts.get(prompt_name, "") if prompt_name is not None else ""

    def admit(
        self,
        texts: list[str],
        truncate: bool | None,
        pairs: list[str] | None = None,
        prefix: str = "",
    ) -> list[int]:
        """Check a request's texts (`admission.check_texts`, `admission.check_token_counts`)
        and count its tokens: per text (or pair), after truncation, ``prefix`` included (for
        a route whose model call tokenizes itself: /embed_all). Runs on a worker thread.

        Raises:
            ServeError: as the admission checks.
        """
        check_texts(texts, self.settings, pairs)
        firsts = [prefix + t for t in texts]
        enc = self.tokenizer(firsts, pairs, truncation=False, padding=False, return_tensors=None)
        counts = [len(ids) for ids in enc["input_ids"]]
        return check_token_counts(counts, self.max_length, truncate, self.settings)

    def checked(
        self,
        tokens: TokenRows,
        texts: list[str],
        pairs: list[str] | None,
        truncate: bool | None,
        prefix: str = "",
        names: InputNames = INPUTS,
    ) -> TokenRows:
        """``tokens`` (the one tokenization of ``texts``, with ``pairs``, ``prefix`` prepended)
        once no input was cut in a request that does not truncate (``names``: how the
        refusal names it).

        Raises:
            ServeError: 413 as `admission.check_truncation` (the refused input alone is
                tokenized again, uncut, to say its length).
        """

        def full_length(i: int) -> int:
            second = [pairs[i]] if pairs is not None else None
            enc = self.tokenizer(
                [prefix + texts[i]], second, truncation=False, padding=False, return_tensors=None
            )
            return len(enc["input_ids"][0])

        check_truncation(
            tokens.truncated, self.max_length, truncate, self.settings, full_length, names
        )
        return tokens


class EmbeddingModel(ServedModel):
    """A `SentenceEmbedder`: the request's texts tokenized once (`tokenize`), their rows
    embedded together with other requests' (`embed`)."""

    pipeline_class = SentenceEmbedder
    describe = "an embedding model: use /embed"
    refusal = "this is an embedding"

    @classmethod
    def load(  # noqa: D102
        cls, path, hf_config, *, dtype, device, quantize, runtime, pooling=None, adapter=None, **_
    ):
        if quantize is not None and runtime == "torch":  # the int8 plan is measured on fp32
            embedder = SentenceEmbedder(
                path, dtype="fp32", quantize=quantize, config_json=hf_config, adapter=adapter
            )
        else:
            embedder = SentenceEmbedder(
                path, dtype=dtype, config_json=hf_config, device=device, runtime=runtime,
                quantize=quantize, adapter=adapter,
            )  # fmt: skip
        return with_pooling(embedder, pooling)

    @property
    def dimension(self) -> int:  # noqa: D102
        return self.pipeline.dimension

    def model_type(self) -> dict:  # noqa: D102
        mode = self.pipeline.pooling.mode
        pooling = mode if isinstance(mode, str) else list(mode)
        return {"embedding": {"pooling": pooling, "dimension": self.dimension}}

    @property
    def vocab_size(self) -> int:
        """The token ids this model embeds: [0, vocab_size) (its embedding table's rows, else
        the tokenizer's vocabulary)."""
        rows = getattr(getattr(self.pipeline.model, "config", None), "vocab_size", None)
        return int(rows) if rows else int(self.tokenizer.vocab_size)

    def tokenize_ids(
        self, ids: list, truncate: bool | None, side: str, max_inputs: int | None = None
    ) -> TokenRows:
        """Token-id inputs (one sequence or a batch: TEI's and OpenAI's ``Input`` of ids) as
        token rows, used as they are (no prompt, no special tokens added, as TEI), cut to
        the model's limit on ``side`` when the request truncates.

        Raises:
            ServeError: 422/413 as `admission.check_ids` (default ``max_inputs``:
                ``max_client_batch_size``); 413 a sequence over the limit in a request that
                does not truncate.
        """
        limit = self.settings.max_client_batch_size if max_inputs is None else max_inputs
        batch = check_ids(ids, self.vocab_size, limit)
        cut = [len(row) > self.max_length for row in batch]
        if not truncates(truncate, self.settings) and any(cut):
            check_token_counts([len(r) for r in batch], self.max_length, False, self.settings)
        n = self.max_length
        rows = [list(r[-n:]) if side == "left" else list(r[:n]) for r in batch]
        fields = self.pipeline.tokenize(["a"]).rows  # the fields this model's rows carry
        out = {"input_ids": rows, "attention_mask": [[1] * len(r) for r in rows]}
        if "token_type_ids" in fields:
            out["token_type_ids"] = [[0] * len(r) for r in rows]
        return TokenRows(out, cut, 0)

    def tokenize(
        self,
        texts: list[str],
        truncate: bool | None,
        prompt_name: str | None,
        side: str,
        max_inputs: int | None = None,
    ) -> TokenRows:
        """The one tokenization of an embedding request (on a worker thread): limits checked
        (``max_inputs``: the route's inputs per request, default ``max_client_batch_size``),
        the prompt prepended, cut to the model's limit (or refused when not truncating).

        Raises:
            ServeError: as `admission.check_texts` and `checked`.
        """
        check_texts(texts, self.settings, max_inputs=max_inputs)
        prompt = self.prompt_text(prompt_name)  # the server's default prompt when not named
        encoded = self.pipeline.tokenize(texts, prompt=prompt, truncation_side=side)
        tokens = TokenRows(dict(encoded.rows), list(encoded.truncated), encoded.skip)
        return self.checked(tokens, texts, None, truncate, prompt)

    def embed(self, rows: list[TokenRows], normalize: bool, skip: int) -> np.ndarray:
        """(N, dimension) float32 vectors of gathered token rows (`split_rows`; ``skip``, the
        prompt tokens left out of the pooling, is the same for all: it is in their key)."""
        return self.pipeline.encode_tokenized(join_rows(rows), normalize=normalize, **self.sizes)

    def embed_tokens(self, rows: list[TokenRows]) -> list:
        """Every token's (T_i, H) float32 vectors of gathered token rows (TEI's /embed_all;
        `split_rows` of `tokenize`: each request tokenized once)."""
        return self.pipeline.token_states(join_rows(rows), **self.sizes)


class SparseModel(ServedModel):
    """A `SparseEncoder` (SPLADE): /embed_sparse, each request tokenized once (`tokenize`)."""

    pipeline_class = SparseEncoder
    describe = "a sparse model: use /embed_sparse"
    refusal = "this is a sparse"

    @property
    def dimension(self) -> int:  # noqa: D102
        return self.pipeline.dimension

    def model_type(self) -> dict:  # noqa: D102
        return {"embedding": {"pooling": "splade", "dimension": self.dimension}}

    def tokenize(
        self, texts: list[str], truncate: bool | None, prompt_name: str | None, side: str
    ) -> TokenRows:
        """The one tokenization of a request (on a worker thread), limits checked.

        Raises:
            ServeError: as `admission.check_texts` and `checked`.
        """
        check_texts(texts, self.settings)
        prefix = self.prompt_text(prompt_name)
        tokens = self.pipeline.tokenize(texts, prompt_name=prompt_name, truncation_side=side)
        return self.checked(tokens, texts, None, truncate, prefix)

    def encode(self, rows: list[TokenRows]) -> list[SparseVector]:
        """One `SparseVector` per gathered token row."""
        return self.pipeline.run_tokenized(join_rows(rows), **self.sizes)


class PredictingModel(ServedModel):
    """A model that answers /predict: a batch of texts ``[a]`` and pairs ``[a, b]``, run in
    two groups (single texts, pairs), each tokenized once (`tokenize`). Subclasses say which
    they take (`check_predict`), how a group is tokenized (`tokenize_group`), its batcher key
    (`predict_key`) and the wire form of its answers (`predict_answers`)."""

    early_exit = False

    def check_predict(self, items: list[list[str]], speed: float | None) -> None:
        """Refuse inputs this kind does not take, and a ``speed`` it does not take.

        Raises:
            ServeError: 422.
        """
        check_speed(speed, self.early_exit)

    def tokenize(
        self,
        items: list[list[str]],
        truncate: bool | None,
        side: str,
        max_inputs: int | None = None,
        names: InputNames = INPUTS,
    ) -> TokenRows:
        """The one tokenization of a group of inputs, all texts ``[a]`` or all pairs ``[a, b]``
        (on a worker thread): limits checked (``max_inputs``: the route's inputs per request,
        default ``max_client_batch_size``), each cut to the model's limit (or refused when
        not truncating); ``names``: how refusals name the inputs (a rerank's query and
        documents).

        Raises:
            ServeError: as `admission.check_texts` and `checked`.
        """
        texts = [x[0] for x in items]
        pairs = [x[1] for x in items] if len(items[0]) == 2 else None
        check_texts(texts, self.settings, pairs, max_inputs, names)
        tokens = self.tokenize_group(texts, pairs, side)
        return self.checked(tokens, texts, pairs, truncate, names=names)

    def tokenize_group(self, texts: list[str], pairs: list[str] | None, side: str) -> TokenRows:
        """The pipeline's tokenization of ``texts`` (with ``pairs``)."""
        raise NotImplementedError

    def predict_key(self, pair: bool, raw_scores: bool, speed: float | None) -> tuple:
        """The batcher key of one group of /predict (``pair``: pairs, else single texts)."""
        raise NotImplementedError

    def predict_answers(self, results: Sequence[Any]) -> list:
        """The wire answers of one group, per input."""
        return list(results)


class RerankerModel(PredictingModel):
    """A `Reranker` (cross-encoder): /rerank, and /predict on pairs."""

    pipeline_class = Reranker
    describe = "a reranker: use /rerank or /predict"
    refusal = "this is a cross-encoder"
    info_kind = "reranker"

    def tokenize_group(self, texts, pairs, side) -> TokenRows:  # noqa: D102
        return self.pipeline.tokenize(list(zip(texts, pairs or [])), truncation_side=side)

    def score(self, rows: list[TokenRows], raw_scores: bool) -> np.ndarray:
        """(N,) float32 scores of gathered (query, text) rows ((N, C) for C labels)."""
        return self.pipeline.run_tokenized(join_rows(rows), raw_scores=raw_scores, **self.sizes)

    def check_predict(self, items, speed) -> None:  # noqa: D102
        if any(len(x) == 1 for x in items):
            raise ServeError(
                422, 'a reranker scores pairs: send ["query", "text"] or [["query", "text"], ...]'
            )
        super().check_predict(items, speed)

    def predict_key(self, pair, raw_scores, speed) -> tuple:  # noqa: D102
        return (self.score, raw_scores)

    def predict_answers(self, results) -> list:  # noqa: D102
        labels = self.pipeline.labels
        scores = np.asarray(results)
        if self.pipeline.num_labels == 1:
            return [[{"label": labels[0], "score": float(x)}] for x in scores]
        return [
            sorted(
                ({"label": n, "score": float(v)} for n, v in zip(labels, row)),
                key=lambda d: -d["score"],
            )
            for row in scores
        ]


class ClassifierModel(PredictingModel):
    """A `TextClassifier`: /predict on texts and pairs, every label with its score."""

    pipeline_class = TextClassifier
    describe = "a classifier: use /predict"
    refusal = "this one classifies"

    def tokenize_group(self, texts, pairs, side) -> TokenRows:  # noqa: D102
        return self.pipeline.tokenize(texts, pairs, truncation_side=side)

    def classify(
        self, rows: list[TokenRows], raw_scores: bool, pair: bool, speed: float | None
    ) -> list[list[dict]]:
        """Per gathered row (a text or a pair: ``pair``), ``{"label", "score"}`` best first
        (raw logits with ``raw_scores``; an early-exit classifier's ``speed``)."""
        extra = {"speed": speed} if speed is not None else {}
        fn = "none" if raw_scores else "default"
        return self.pipeline.run_tokenized(
            join_rows(rows), top_k=None, function_to_apply=fn, **self.sizes, **extra
        )

    def predict_key(self, pair, raw_scores, speed) -> tuple:  # noqa: D102
        return (self.classify, raw_scores, pair, speed)


class EarlyExitModel(ClassifierModel):
    """An `EarlyExitClassifier` (FastBERT students): /predict, ``speed`` per request."""

    pipeline_class = EarlyExitClassifier
    early_exit = True

    @classmethod
    def load(cls, path, hf_config, *, dtype, device, speed=None, **_):  # noqa: D102
        if resolve_dtype(dtype, device)[0] != resolve_dtype("fp32")[0]:
            raise InputError(
                f"--dtype {dtype} is not for a self-distilled classifier: its students run in "
                "fp32 (use --dtype auto or fp32)"
            )
        speed = 0.0 if speed is None else speed  # the full model unless asked
        return EarlyExitClassifier(path, speed=speed, device=device, dtype="fp32")


class TaggerModel(PredictingModel):
    """An `EntityTagger`: /predict on single texts, entities with character offsets."""

    pipeline_class = EntityTagger
    describe = "a classifier: use /predict"
    refusal = "this one classifies"
    info_kind = "token_classifier"

    def tokenize_group(self, texts, pairs, side) -> TokenRows:  # noqa: D102
        return self.pipeline.tokenize(texts, truncation_side=side)

    def tag(self, rows: list[TokenRows]) -> list[list[dict]]:
        """Per gathered row, its entities ``{"type", "text", "start", "end", "score"}``."""
        entities = self.pipeline.run_tokenized(join_rows(rows), **self.sizes)
        return [[asdict(e) for e in row] for row in entities]

    def check_predict(self, items, speed) -> None:  # noqa: D102
        if any(len(x) == 2 for x in items):
            raise ServeError(422, "a token-classification model takes single texts, not pairs")
        super().check_predict(items, speed)

    def predict_key(self, pair, raw_scores, speed) -> tuple:  # noqa: D102
        return (self.tag,)


class ColBERTModel(ServedModel):
    """A `ColBERTEncoder` (late interaction): /embed_multivector, each text's (T_i, D) token
    matrix as PyLate's ``ColBERT.encode`` gives it, queries (``is_query``: the query marker,
    [MASK] expansion, cut at ``query_length``) or documents (cut at ``document_length``)."""

    pipeline_class = ColBERTEncoder
    describe = "a ColBERT model: use /embed_multivector"
    refusal = "this is a ColBERT"

    def __init__(self, pipeline: Any, settings: ServeSettings) -> None:  # noqa: D107
        self.pipeline, self.settings = pipeline, settings
        self.tokenizer = pipeline.tokenizer
        self.max_length = pipeline.settings.document_length
        self.sizes = {
            "batch_size": settings.batch_size,
            "max_batch_tokens": settings.max_batch_tokens,
        }

    @property
    def dimension(self) -> int:  # noqa: D102
        return self.pipeline.dimension

    def model_type(self) -> dict:  # noqa: D102
        return {"embedding": {"pooling": "colbert", "dimension": self.dimension}}

    def tokenize_multivector(
        self, texts: list[str], truncate: bool | None, is_query: bool
    ) -> TokenRows:
        """The one tokenization of a request (on a worker thread): limits checked, cut at the
        query or document length (or refused when not truncating).

        Raises:
            ServeError: as `admission.check_texts`; 413 a text over its length in a request
                that does not truncate.
        """
        check_texts(texts, self.settings)
        tokens = self.pipeline.tokenize(texts, is_query=is_query)
        s = self.pipeline.settings
        limit = s.query_length if is_query else s.document_length
        marker = self.pipeline.query_prefix_id if is_query else self.pipeline.document_prefix_id

        def full_length(i: int) -> int:
            ids = self.tokenizer([texts[i]], truncation=False, padding=False)["input_ids"][0]
            return len(ids) + (marker is not None)

        check_truncation(tokens.truncated, limit, truncate, self.settings, full_length)
        return tokens

    def multivector(self, rows: list[TokenRows], is_query: bool) -> list[np.ndarray]:
        """(T_i, D) float32 token matrices of gathered token rows."""
        return self.pipeline.encode_tokenized(join_rows(rows), is_query=is_query, **self.sizes)


class M3Model(ServedModel):
    """A `BGEM3Encoder`: /embed_m3 (dense, lexical weights and multi-vectors from one pass,
    as FlagEmbedding's ``BGEM3FlagModel.encode``) and /embed_multivector (its multi-vectors)."""

    pipeline_class = BGEM3Encoder
    describe = "a BGE-M3 model: use /embed_m3 or /embed_multivector"
    refusal = "this is a BGE-M3"

    @property
    def dimension(self) -> int:  # noqa: D102
        return self.pipeline.dimension

    def model_type(self) -> dict:  # noqa: D102
        return {"embedding": {"pooling": "bge-m3", "dimension": self.dimension}}

    def tokenize_m3(self, texts: list[str], truncate: bool | None, side: str) -> TokenRows:
        """The one tokenization of a request (on a worker thread), limits checked.

        Raises:
            ServeError: as `admission.check_texts` and `checked`.
        """
        check_texts(texts, self.settings)
        tokens = self.pipeline.tokenize(texts, truncation_side=side)
        return self.checked(tokens, texts, None, truncate)

    def outputs(self, rows: list[TokenRows], outputs: tuple[str, ...]) -> list[dict]:
        """Per gathered row, its JSON-ready ``{"dense", "sparse", "colbert"}`` (the asked-for
        ``outputs``; `bge_m3.m3_json_rows`)."""
        result = self.pipeline.run_tokenized(join_rows(rows), outputs=outputs, **self.sizes)
        return m3_json_rows(result)


#: Most specific first: an `EarlyExitClassifier` is a `TextClassifier`.
ADAPTERS: tuple[type[ServedModel], ...] = (
    ColBERTModel,
    M3Model,
    EarlyExitModel,
    ClassifierModel,
    TaggerModel,
    RerankerModel,
    SparseModel,
    EmbeddingModel,
)


def adapter_for(pipeline: Any, settings: ServeSettings) -> ServedModel:
    """The adapter of a loaded pipeline.

    Raises:
        ArgumentTypeError: ``pipeline`` is none of the served pipelines.
    """
    for adapter in ADAPTERS:
        if isinstance(pipeline, adapter.pipeline_class):
            return adapter(pipeline, settings)
    raise ArgumentTypeError(f"cannot serve a {type(pipeline).__name__}")
