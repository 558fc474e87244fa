"""Fusion: one ranked list from the candidates of any number of retrievers (``bm25``, ``dense``,
``dense:NAME``), each with a weight.

- ``weighted``: each retriever's scores normalised over the candidates (min-max or z-score),
  then ``sum w_r * score_r``.
- ``rrf``: reciprocal rank fusion, ``sum 2 * w_r / (k + rank_r)`` (equal weights of two
  retrievers = plain RRF, Cormack, Clarke & Buettcher, SIGIR 2009; k is retrieve.fusion.rrf_k).
- a retriever's name: that retriever alone.

A score is NaN where a retriever did not score a candidate (``fill_missing`` off); it then counts
as the bottom of that retriever's scale (0 after min-max) and gets no RRF term. Ties are broken
by chunk id, so every ranking is deterministic.
"""

from __future__ import annotations

import numpy as np


def normalise(scores: np.ndarray, how: str) -> np.ndarray:
    """Min-max to [0, 1] or z-score; NaN (unknown) becomes the bottom of the scale."""
    known = ~np.isnan(scores)
    out = np.zeros_like(scores, dtype=np.float64)
    if not known.any():
        return out
    vals = scores[known]
    if how == "zscore":
        sd = vals.std()
        z = (scores - vals.mean()) / sd if sd > 0 else np.zeros_like(scores)
        floor = z[known].min() if sd > 0 else 0.0
        return np.where(known, z, floor)
    lo, hi = vals.min(), vals.max()
    if hi > lo:
        out = (scores - lo) / (hi - lo)
    else:
        out = np.ones_like(scores, dtype=np.float64)
    return np.where(known, out, 0.0)


def ranks(ids: list[str], scores: np.ndarray) -> np.ndarray:
    """1-based rank of each id by score (desc, ties by id); NaN scores get no rank (inf)."""
    order = sorted((i for i in range(len(ids)) if not np.isnan(scores[i])), key=lambda i: (-scores[i], ids[i]))
    out = np.full(len(ids), np.inf)
    for r, i in enumerate(order, start=1):
        out[i] = r
    return out


def fuse(ids: list[str], scores: dict[str, np.ndarray], weights: dict[str, float], *, method: str,
         normalization: str = "minmax", rrf_k: int) -> list[tuple[str, float]]:
    """[(chunk_id, fused score)] best first over the retrievers of ``weights`` (name -> weight > 0;
    ``scores[name]`` over ``ids``); ``method`` is weighted, rrf, or a retriever name (that one
    alone); ``rrf_k`` is ``retrieve.fusion.rrf_k``."""
    if not ids:
        return []
    nan = np.full(len(ids), np.nan)
    if method not in ("weighted", "rrf"):
        fused = scores.get(method, nan)
        keep = ~np.isnan(fused)
        if method == "bm25":
            keep &= np.nan_to_num(fused) > 0
    elif method == "rrf":
        fused = np.zeros(len(ids))
        for name, w in weights.items():
            s = scores.get(name, nan)
            if w > 0:
                r = ranks(ids, np.where(s > 0, s, np.nan) if name == "bm25" else s)
                fused += np.where(np.isfinite(r), 2 * w / (rrf_k + r), 0.0)
        keep = fused > 0
    elif method == "weighted":
        fused = np.zeros(len(ids))
        keep = np.zeros(len(ids), dtype=bool)
        for name, s in scores.items():
            keep |= ~np.isnan(s)
            if weights.get(name, 0) > 0:
                fused += weights[name] * normalise(s, normalization)
    else:  # pragma: no cover - the contract validates the method
        raise ValueError(method)
    order = sorted((i for i in range(len(ids)) if keep[i]), key=lambda i: (-fused[i], ids[i]))
    return [(ids[i], float(fused[i])) for i in order]
