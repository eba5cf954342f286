"""The request bodies of the server's routes, with every field text-embeddings-inference
(TEI, ``router/src/http/types.rs``) and OpenAI's embeddings API define on them. Unknown fields
are ignored, as both servers ignore them (pydantic ``extra="ignore"``); a known field with a
wrong type is still a 422.

TEI's ``truncation_direction`` is ``"Right"`` (default) or ``"Left"``; lower case is accepted
too. OpenAI's ``encoding_format`` is ``"float"`` or ``"base64"`` (little-endian float32 bytes).
``/v1/rerank`` takes the body of Jina's and Cohere's rerank APIs (`V1RerankRequest`).
``/search`` is ours alone (no client of another server sends it): its body refuses unknown
fields (422), so that a misspelt option is never silently ignored (`SearchRequest`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import InputError

__all__ = [
    "DecodeRequest",
    "EmbedAllRequest",
    "EmbedRequest",
    "M3Request",
    "MultivectorRequest",
    "OpenAIEmbedRequest",
    "PredictRequest",
    "RerankRequest",
    "SearchRequest",
    "SimilarityInputs",
    "SimilarityRequest",
    "SparseRequest",
    "TextsOrIds",
    "TokenizeRequest",
    "V1RerankRequest",
]


class _Body(BaseModel):
    # unknown fields ignored (as TEI and OpenAI); a known field of the wrong JSON type is a
    # 422, never coerced ("2" is not 2, true is not 1, "no" is not false: pydantic's strict
    # mode; an int is still a float)
    model_config = ConfigDict(extra="ignore", strict=True)


class _Truncation(_Body):
    truncate: bool | None = None
    truncation_direction: str = "right"  # TEI: "Right" or "Left"

    @field_validator("truncation_direction")
    @classmethod
    def _direction(cls, value: str) -> str:
        if value.lower() not in ("left", "right"):
            raise InputError("truncation_direction must be 'Left' or 'Right'")
        return value.lower()


class EmbedAllRequest(_Truncation):
    """TEI ``/embed_all``: token vectors."""

    inputs: str | list[str]
    prompt_name: str | None = None


class SparseRequest(EmbedAllRequest):
    """TEI ``/embed_sparse``."""


#: Texts, or token ids of the model's vocabulary: one sequence or a batch (TEI's and OpenAI's
#: ``Input``; ids are used as they are, special tokens not added).
TextsOrIds = str | list[str] | list[int] | list[list[int]]


class EmbedRequest(EmbedAllRequest):
    """TEI ``/embed``: texts, or token ids (`TextsOrIds`)."""

    inputs: TextsOrIds  # type: ignore[assignment]
    normalize: bool = True
    dimensions: int | None = Field(default=None, ge=1)


class OpenAIEmbedRequest(_Body):
    """OpenAI ``/v1/embeddings`` (``input``: texts or token ids, `TextsOrIds`; ``model``,
    ``encoding_format``, ``dimensions``, ``user``)."""

    input: TextsOrIds
    model: str | None = None
    user: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)


class PredictRequest(_Truncation):
    """TEI ``/predict``: a text, one input as a list (a text ``[a]`` or a pair ``[a, b]``), or a
    batch of ``[a]`` / ``[a, b]`` (TEI's ``PredictInput``)."""

    inputs: str | list[str] | list[list[str]]
    raw_scores: bool = False
    speed: float | None = None  # early exit (self-distilled classifiers), in [0, 1]


class RerankRequest(_Truncation):
    """TEI ``/rerank``."""

    query: str
    texts: list[str]
    raw_scores: bool = False
    return_text: bool = False


class MultivectorRequest(EmbedAllRequest):
    """Ours, ``/embed_multivector``: each text's token matrix (ColBERT: ``is_query`` encodes
    queries, else documents; BGE-M3: its multi-vectors, ``is_query`` ignored)."""

    is_query: bool = False


class M3Request(EmbedAllRequest):
    """Ours, ``/embed_m3``: BGE-M3's ``outputs`` (some of "dense", "sparse", "colbert"; all
    by default) from one pass."""

    outputs: list[Literal["dense", "sparse", "colbert"]] = ["dense", "sparse", "colbert"]


class V1RerankRequest(_Body):
    """Jina's and Cohere's ``/v1/rerank`` (Cohere's ``/v2/rerank`` too): ``query``,
    ``documents`` (strings, or objects whose ``text`` is scored: Cohere's and Jina's document
    objects; Cohere's ``rank_fields`` may name one other field), ``top_n`` (the best
    ``top_n``; all when None), ``return_documents`` (default true, as Jina: each result's
    ``document``), ``model``; ``truncate`` is ours (None: the server's ``auto_truncate``)."""

    query: str
    documents: list[str | dict[str, Any]]
    model: str | None = None
    top_n: int | None = Field(default=None, ge=1)
    return_documents: bool = True
    rank_fields: list[str] | None = None
    truncate: bool | None = None


class TokenizeRequest(_Body):
    """TEI ``/tokenize``."""

    inputs: str | list[str]
    add_special_tokens: bool = True
    prompt_name: str | None = None


class DecodeRequest(_Body):
    """TEI ``/decode``."""

    ids: list[int] | list[list[int]]
    skip_special_tokens: bool = True


class SimilarityInputs(_Body):
    """The ``inputs`` of /similarity."""

    source_sentence: str
    sentences: list[str]


class SimilarityRequest(_Truncation):
    """TEI ``/similarity`` (the Hugging Face sentence-similarity task's body)."""

    inputs: SimilarityInputs
    prompt_name: str | None = None


class SearchRequest(_Body):
    """Ours, ``/search``: ``query`` (one text or several), the ``top_k`` hits of each (>= 1),
    from the loaded indexes ``index`` names (one name or several; None: every one), fused by
    ``fusion`` ("rrf" or "linear", `retrieval.fuse`) with ``weights`` (one per index, in the
    order ``index`` names them); ``return_documents`` adds each hit's text. Unknown fields
    are refused (422)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    query: str | list[str]
    top_k: int = Field(default=10, ge=1)
    index: str | list[str] | None = None
    fusion: Literal["rrf", "linear"] = "rrf"
    weights: list[float] | None = None
    return_documents: bool = True
