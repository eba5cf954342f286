"""Late interaction: MaxSim, the score of a query's token vectors against a document's.

ColBERT (Khattab & Zaharia 2020, §3.3, Eq. 3) scores a query q (token vectors E_q, Tq × D) and
a document d (E_d, Td × D) by, for each query token, its largest dot product with any document
token, summed over the query tokens:

    S(q, d) = Σ_i max_j  E_q[i] · E_d[j]

PyLate and ColBERT sum; BGE-M3 (Chen et al. 2024, §3.2, "multi-vector retrieval") divides that
sum by the number of query tokens (``reduce="mean"``). With unit vectors each term is a cosine.
"""

from __future__ import annotations

import torch

from ..errors import InputError

__all__ = ["maxsim", "maxsim_packed"]


def maxsim(
    queries: torch.Tensor,
    documents: torch.Tensor,
    query_mask: torch.Tensor | None = None,
    document_mask: torch.Tensor | None = None,
    *,
    reduce: str = "sum",
    padding_scores_zero: bool = False,
) -> torch.Tensor:
    """MaxSim scores of every query against every document (ColBERT Eq. 3).

    Args:
        queries: (Q, Tq, D) float token vectors of Q queries, padded to Tq.
        documents: (N, Td, D) float token vectors of N documents, padded to Td; same dtype and
            D as ``queries``.
        query_mask: (Q, Tq), 1/True = a real token; None: every token counts. A padded query
            token adds nothing to the sum.
        document_mask: (N, Td), 1/True = a real token; None: every token counts. A padded
            document token is never a token's maximum. A document with no real token
            scores 0 for every query token.
        reduce: "sum" (ColBERT, PyLate) or "mean" (BGE-M3: the sum divided by the query's
            real tokens).
        padding_scores_zero: PyLate's rule for a padded document token: it scores 0 (PyLate
            multiplies the similarities by the mask, and pads documents of a batch with zero
            vectors) instead of never being the maximum, so a query token whose best real
            similarity is negative adds 0. False: the definition (Eq. 3) over real tokens.

    Returns:
        (Q, N) float scores, the dtype of ``queries``.

    Raises:
        InputError: shapes that do not fit, or another ``reduce``.
    """
    if reduce not in ("sum", "mean"):
        raise InputError(f"reduce must be 'sum' or 'mean', got {reduce!r}")
    if queries.dim() != 3 or documents.dim() != 3 or queries.shape[-1] != documents.shape[-1]:
        raise InputError(
            f"maxsim needs (Q, Tq, D) queries and (N, Td, D) documents of one D, got "
            f"{tuple(queries.shape)} and {tuple(documents.shape)}"
        )
    for mask, x, name in ((query_mask, queries, "query"), (document_mask, documents, "document")):
        if mask is not None and tuple(mask.shape) != tuple(x.shape[:2]):
            raise InputError(
                f"{name}_mask has shape {tuple(mask.shape)}, its vectors {tuple(x.shape[:2])}"
            )
    sims = torch.einsum("qid,njd->qnij", queries, documents)  # (Q, N, Tq, Td)
    if document_mask is not None:
        keep = document_mask.to(torch.bool)[None, :, None, :]  # (1, N, 1, Td)
        sims = sims.masked_fill(~keep, 0.0 if padding_scores_zero else float("-inf"))
    best = sims.max(dim=-1).values  # (Q, N, Tq)
    best = torch.nan_to_num(best, neginf=0.0)  # a document of no real token
    if query_mask is not None:
        best = best * query_mask.to(best.dtype)[:, None, :]
    scores = best.sum(dim=-1)  # (Q, N)
    if reduce == "mean":
        count = (
            query_mask.to(best.dtype).sum(-1, keepdim=True)
            if query_mask is not None
            else torch.full((queries.shape[0], 1), queries.shape[1], dtype=best.dtype)
        )
        scores = scores / count.clamp(min=1)
    return scores


def maxsim_packed(
    query: torch.Tensor, tokens: torch.Tensor, owner: torch.Tensor, count: int
) -> torch.Tensor:
    """MaxSim (ColBERT Eq. 3, summed) of one query against documents stored packed, token
    after token, with no padding (an index's storage): the same scores as `maxsim` with masks.

    Args:
        query: (Tq, D) float token vectors of the query (every row counts).
        tokens: (M, D) float token vectors of the documents, same dtype and D.
        owner: (M,) int64, the document (0..count-1) each token belongs to.
        count: N, the number of documents; one with no token scores 0.

    Returns:
        (N,) float scores, the dtype of ``query``.

    Raises:
        InputError: shapes that do not fit, or an owner outside [0, count).
    """
    if query.dim() != 2 or tokens.dim() != 2 or query.shape[-1] != tokens.shape[-1]:
        raise InputError(
            f"maxsim_packed needs a (Tq, D) query and (M, D) tokens of one D, got "
            f"{tuple(query.shape)} and {tuple(tokens.shape)}"
        )
    if owner.shape != tokens.shape[:1] or (len(owner) and not 0 <= int(owner.min())):
        raise InputError(f"owner must give one document in [0, {count}) per token")
    if len(owner) and int(owner.max()) >= count:
        raise InputError(f"owner must give one document in [0, {count}) per token")
    sims = tokens @ query.T  # (M, Tq)
    best = torch.full((count, query.shape[0]), float("-inf"), dtype=sims.dtype)  # (N, Tq)
    best = best.scatter_reduce(0, owner[:, None].expand_as(sims), sims, reduce="amax")
    return torch.nan_to_num(best, neginf=0.0).sum(dim=-1)  # (N,)
