"""Rank fusion."""

from __future__ import annotations

RRF_K = 60


def rrf(rankings: list[list[str]], k: int = RRF_K) -> list[tuple[str, float]]:
    """Reciprocal Rank Fusion: score(d) = sum over rankings of 1 / (k + rank(d)), rank from 1.

    k = 60 as in Cormack, Clarke & Buettcher (SIGIR 2009). Ties are broken by id.
    """
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda x: (-x[1], x[0]))


def weighted(dense: list[tuple[str, float]], bm25: list[tuple[str, float]], w_dense: float = 0.5) -> list[tuple[str, float]]:
    """Min-max normalise each candidate list to [0, 1], then w * dense + (1 - w) * bm25 (absent = 0)."""

    def norm(items):
        if not items:
            return {}
        scores = [s for _, s in items]
        lo, hi = min(scores), max(scores)
        span = hi - lo
        return {c: (s - lo) / span if span > 0 else 1.0 for c, s in items}

    nd, nb = norm(dense), norm(bm25)
    fused = {c: w_dense * nd.get(c, 0.0) + (1 - w_dense) * nb.get(c, 0.0) for c in set(nd) | set(nb)}
    return sorted(fused.items(), key=lambda x: (-x[1], x[0]))
