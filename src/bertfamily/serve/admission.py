"""What a request may ask, checked before any model work, in plain Python (no HTTP): inputs
per request, characters per input, tokens per input when the request does not truncate, the
``dimensions`` of an embedding, the shape of a /predict body, an early-exit ``speed``, the ids
of /decode. Every refusal is a `ServeError` with its HTTP status: 413 for a request over a
limit, 422 for an empty or malformed one (the routes turn it into TEI's JSON)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import ServeError
from .settings import ServeSettings

__all__ = [
    "INPUTS",
    "InputNames",
    "as_list",
    "check_count",
    "check_dimensions",
    "check_ids",
    "check_speed",
    "check_texts",
    "check_token_counts",
    "check_truncation",
    "predict_items",
    "token_inputs",
    "truncates",
]


@dataclass(frozen=True)
class InputNames:
    """How a refusal names a request's inputs: "input 3" (TEI's routes, /predict), or a
    rerank's one query and its "documents[3]" (``query``: the name of the first segment,
    the same text in every pair; ``items``: the field holding the second ones).

    Attributes:
        query: the name of every pair's first segment (None: each input is named alone).
        items: the field of the inputs ("input": named "input i"; else "items[i]").
    """

    query: str | None = None
    items: str = "input"

    def item(self, i: int) -> str:
        """The name of input ``i`` (of its second segment, with ``query``)."""
        return f"input {i}" if self.items == "input" else f"{self.items}[{i}]"

    def segment(self, i: int, second: bool) -> str:
        """The name of input ``i``'s first (the query) or second segment."""
        return self.item(i) if second or self.query is None else self.query

    def whole(self, i: int) -> str:
        """The name of input ``i`` as one sequence (both segments)."""
        return self.item(i) if self.query is None else f"the {self.query} with {self.item(i)}"


#: The names of TEI's routes: "input i".
INPUTS = InputNames()


def as_list(inputs: str | list[str]) -> list[str]:
    """A TEI ``inputs`` (one string or a list) as a list."""
    return [inputs] if isinstance(inputs, str) else inputs


def truncates(truncate: bool | None, settings: ServeSettings) -> bool:
    """Whether a request's inputs are cut to the model's limit: its ``truncate``, or the
    server's ``auto_truncate`` when it does not say."""
    return settings.auto_truncate if truncate is None else truncate


def check_count(count: int, limit: int, name: str = "max_client_batch_size") -> None:
    """Refuse a request of ``count`` inputs over ``limit`` (the one inputs-per-request check
    of every route: TEI's routes take ``max_client_batch_size``, /v1/embeddings
    ``openai_max_inputs``).

    Raises:
        ServeError: 413 ``count`` > ``limit``.
    """
    if count > limit:
        raise ServeError(413, f"{count} inputs in one request; the maximum is {limit} ({name})")


def check_texts(
    texts: Sequence[str],
    settings: ServeSettings,
    pairs: Sequence[str] | None = None,
    max_inputs: int | None = None,
    names: InputNames = INPUTS,
) -> None:
    """Refuse a request's texts (with ``pairs``: the second segments) before tokenizing.

    Args:
        max_inputs: the route's inputs per request (default ``max_client_batch_size``).
        names: how the messages name the inputs (default "input i").

    Raises:
        ServeError: 422 no texts, an empty text or segment, or one that is not valid Unicode
            (a lone surrogate escape); 413 more than ``max_inputs`` texts, or a text (both
            segments together) over ``max_input_chars`` characters.
    """
    if not texts:
        raise ServeError(422, "inputs cannot be empty", "Empty")
    if max_inputs is None:
        check_count(len(texts), settings.max_client_batch_size)
    else:
        check_count(len(texts), max_inputs, "openai_max_inputs")
    for i, t in enumerate(texts):
        second = pairs[i] if pairs is not None else ""
        for is_second, segment in ((False, t), (True, second)):
            try:
                segment.encode("utf-8")
            except UnicodeEncodeError:
                where = names.segment(i, is_second)
                raise ServeError(
                    422, f"{where} is not valid Unicode (a lone surrogate escape)", "Validation"
                ) from None
        if not t.strip() or (pairs is not None and not second.strip()):
            where = names.segment(i, bool(t.strip()))
            raise ServeError(422, f"{where} is empty", "Empty")
        chars = len(t) + len(second)
        if chars > settings.max_input_chars:
            raise ServeError(
                413,
                f"{names.whole(i)} has {chars:,} characters; the maximum is "
                f"{settings.max_input_chars:,} (max_input_chars)",
            )


def _too_long(index: int, tokens: int, max_length: int, names: InputNames = INPUTS) -> ServeError:
    return ServeError(
        413,
        f"{names.whole(index)} has {tokens} tokens; this model takes at most {max_length} tokens "
        '(send "truncate": true to cut it)',
    )


def check_token_counts(
    counts: Sequence[int], max_length: int, truncate: bool | None, settings: ServeSettings
) -> list[int]:
    """The tokens each input computes (``counts``: before truncation, special tokens and
    prompt included), cut to ``max_length``.

    Raises:
        ServeError: 413 an input over ``max_length`` tokens in a request that does not
            truncate (`truncates`).
    """
    if not truncates(truncate, settings):
        for i, n in enumerate(counts):
            if n > max_length:
                raise _too_long(i, n, max_length)
    return [min(n, max_length) for n in counts]


def check_truncation(
    truncated: Sequence[bool],
    max_length: int,
    truncate: bool | None,
    settings: ServeSettings,
    full_length: Callable[[int], int],
    names: InputNames = INPUTS,
) -> None:
    """Refuse inputs that were cut to ``max_length`` (``truncated``: per input, from the one
    tokenization) in a request that does not truncate; ``full_length(i)`` is input i's token
    count uncut, for the message (only the refused input is counted again; ``names``: how
    it is named).

    Raises:
        ServeError: 413 as `check_token_counts`.
    """
    if truncates(truncate, settings):
        return
    over = next((i for i, cut in enumerate(truncated) if cut), None)
    if over is not None:
        raise _too_long(over, full_length(over), max_length, names)


def check_dimensions(dimensions: int | None, width: int) -> None:
    """Refuse an embedding's ``dimensions`` (None: every coordinate) that the model's
    ``width``-wide vectors cannot give, before the model runs.

    Raises:
        ServeError: 422 ``dimensions`` not a whole number in 1..``width``.
    """
    if dimensions is None:
        return
    if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
        raise ServeError(422, f"dimensions must be a positive integer, got {dimensions!r}")
    if dimensions > width:
        raise ServeError(422, f"dimensions={dimensions} is more than the model's {width}")


def predict_items(
    inputs: str | list[str] | list[list[str]], settings: ServeSettings
) -> tuple[list[list[str]], bool]:
    """TEI's /predict ``inputs`` (its ``PredictInput``) as a batch of texts ``[a]`` and pairs
    ``[a, b]``, and whether it was one input (answered with one flat list): a string is one
    text; a list of strings is ONE input, a text or a pair; a list of lists is a batch.

    Raises:
        ServeError: 422 no inputs, a list of more than two strings, an input of neither one
            nor two texts; 413 more than ``max_client_batch_size`` inputs.
    """
    single = isinstance(inputs, str) or (bool(inputs) and all(isinstance(x, str) for x in inputs))
    if isinstance(inputs, str):
        items = [[inputs]]
    elif single:
        if len(inputs) > 2:
            raise ServeError(
                422,
                f"a list of strings is one input, a text [a] or a pair [a, b] (as TEI reads "
                f'it), got {len(inputs)} strings: send a batch as [["a"], ["b"], ...] and pairs '
                'as [["a", "b"], ...]',
            )
        items = [list(inputs)]
    else:
        items = [list(x) for x in inputs]
    if not items or not items[0]:
        raise ServeError(422, "inputs cannot be empty", "Empty")
    for i, x in enumerate(items):
        if len(x) not in (1, 2):
            raise ServeError(
                422, f"input {i} has {len(x)} texts; give one text [a] or a pair [a, b]"
            )
    check_count(len(items), settings.max_client_batch_size)
    return items, single


def check_speed(speed: float | None, early_exit: bool) -> None:
    """Refuse a /predict ``speed`` for a model without early exit, or outside [0, 1].

    Raises:
        ServeError: 422 as above.
    """
    if speed is None:
        return
    if not early_exit:
        raise ServeError(422, "speed is for a self-distilled classifier (finetune --self-distill)")
    if not 0.0 <= speed <= 1.0:
        raise ServeError(422, f"speed must lie in [0, 1], got {speed}")


def check_ids(
    ids: list[int] | list[list[int]], vocab_size: int, max_inputs: int | None = None
) -> list[list[int]]:
    """Token ids (one sequence or a batch: /decode's ``ids``, the token-id ``inputs`` of
    /embed and /v1/embeddings) as a batch of sequences.

    Raises:
        ServeError: 422 no ids, an empty sequence, or an id outside [0, ``vocab_size``) (the
            message names the sequence, the position and the id); 413 more than
            ``max_inputs`` sequences.
    """
    batch = ids if ids and isinstance(ids[0], list) else [ids]
    if not batch or not batch[0]:
        raise ServeError(422, "ids cannot be empty", "Empty")
    if max_inputs is not None:
        check_count(len(batch), max_inputs)
    for r, row in enumerate(batch):
        if not row:
            raise ServeError(422, f"input {r} has no token ids", "Empty")
        bad = next((j for j, i in enumerate(row) if not 0 <= i < vocab_size), None)
        if bad is not None:
            raise ServeError(
                422,
                f"input {r}: token id {row[bad]} at position {bad} is outside this model's "
                f"vocabulary, ids must be in [0, {vocab_size})",
            )
    return batch  # type: ignore[return-value]


def token_inputs(inputs: object) -> bool:
    """Whether a TEI ``inputs`` / OpenAI ``input`` holds token ids (a list of ints, or a list
    of lists of ints) rather than texts."""
    return isinstance(inputs, list) and bool(inputs) and not isinstance(inputs[0], str)
