"""Request bodies: a known field of the wrong JSON type is refused (422 on the server), never
coerced — found by an attack on /v1/rerank ("top_n": true gave 1 result, "2" gave 2, "no" was
false) and true of every route's body, which share `wire._Body`."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bertfamily.serve import wire

GOOD = [
    (wire.V1RerankRequest, {"query": "q", "documents": ["a"], "top_n": 1}),
    (wire.EmbedRequest, {"inputs": ["a"], "truncate": True, "dimensions": 8}),
    (wire.OpenAIEmbedRequest, {"input": "a", "dimensions": 8, "unknown": "ignored"}),
    (wire.MultivectorRequest, {"inputs": "a", "is_query": True}),
    (wire.PredictRequest, {"inputs": "a", "speed": 1}),  # an int is a float
]
BAD = [
    (wire.V1RerankRequest, {"query": "q", "documents": ["a"], "top_n": True}),
    (wire.V1RerankRequest, {"query": "q", "documents": ["a"], "top_n": "2"}),
    (wire.V1RerankRequest, {"query": "q", "documents": ["a"], "return_documents": "no"}),
    (wire.RerankRequest, {"query": "q", "texts": ["a"], "truncate": "yes"}),
    (wire.EmbedRequest, {"inputs": ["a"], "normalize": 0}),
    (wire.OpenAIEmbedRequest, {"input": "a", "dimensions": "8"}),
    (wire.MultivectorRequest, {"inputs": "a", "is_query": "yes"}),
    (wire.TokenizeRequest, {"inputs": "a", "add_special_tokens": 1}),
]


@pytest.mark.parametrize("cls, body", GOOD)
def test_right_types_pass(cls, body):
    cls.model_validate(body)


@pytest.mark.parametrize("cls, body", BAD)
def test_wrong_types_are_refused_not_coerced(cls, body):
    with pytest.raises(ValidationError):
        cls.model_validate(body)
