"""The request bodies of the server's routes, with every field text-embeddings-inference
(TEI, ``router/src/http/types.rs``) and OpenAI's embeddings API define on them. Unknown fields
are ignored, as both servers ignore them (pydantic ``extra="ignore"``); a known field with a
wrong type is still a 422.

TEI's ``truncation_direction`` is ``"Right"`` (default) or ``"Left"``; lower case is accepted
too. OpenAI's ``encoding_format`` is ``"float"`` or ``"base64"`` (little-endian float32 bytes).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import InputError

__all__ = [
    "DecodeRequest",
    "EmbedAllRequest",
    "EmbedRequest",
    "OpenAIEmbedRequest",
    "PredictRequest",
    "RerankRequest",
    "SimilarityInputs",
    "SimilarityRequest",
    "SparseRequest",
    "TextsOrIds",
    "TokenizeRequest",
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


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
