"""Post-processing of the fused list: drop exact and near-duplicate chunks so the top K is not
spent on overlapping windows or copies of the same text."""

from __future__ import annotations

import re
import zlib
from collections import Counter
from functools import lru_cache

_WORD = re.compile(r"\w+")


SAMPLE = 4  # keep 1 in SAMPLE shingles (by a stable hash) once a text has at least MIN_FULL
MIN_FULL = 64  # so a sketch keeps about 16 or more


@lru_cache(maxsize=20000)
def _all_shingles(text: str, n: int = 3) -> frozenset[int]:
    words = _WORD.findall(text.lower())
    grams = [" ".join(words[i : i + n]) for i in range(max(1, len(words) - n + 1))] if words else []
    return frozenset(zlib.crc32(g.encode()) for g in grams)


@lru_cache(maxsize=20000)
def shingles(text: str, n: int = 3) -> frozenset[int]:
    """Stable hashes of the word n-grams of a text (lowercased); a text shorter than n words is
    one shingle. Long texts keep a fixed 1-in-SAMPLE subset of their shingles (the same subset in
    every text, as in MinHash-style sketches), which estimates the shared share closely and makes
    dedup linear in practice."""
    hashes = _all_shingles(text, n)
    if len(hashes) >= MIN_FULL:
        sampled = {h for h in hashes if h % SAMPLE == 0}
        if sampled:
            return frozenset(sampled)
    return frozenset(hashes)


class NearDuplicates:
    """Which texts of a fixed set are near-duplicates of which, computed once: an item is a
    near-duplicate of another when ``similarity`` or more of its word 3-grams occur in it (the
    sketch proposes, the full shingle sets decide: no drop on a sampling accident). Dedup of any
    ordering of these texts is then linear — calibrate answers one question's candidates under
    dozens of settings with one relation."""

    def __init__(self, texts, similarity: float):
        unique = list(dict.fromkeys(texts))
        sketches = [shingles(t) for t in unique]
        owners: dict[int, list[int]] = {}  # shingle -> indexes of the texts holding it
        for i, sh in enumerate(sketches):
            for s in sh:
                owners.setdefault(s, []).append(i)
        self.similarity = similarity
        self.words = {t for t, sh in zip(unique, sketches) if sh}  # a text with no words is never dropped
        self.partners: dict[str, set[str]] = {}  # text -> the other texts it is a near-duplicate of
        for i, (text, sh) in enumerate(zip(unique, sketches)):
            if not sh:
                continue
            counts = Counter(k for s in sh for k in owners[s] if k != i)
            need, full = similarity * len(sh), _all_shingles(text)
            near = {unique[k] for k, c in counts.items()
                    if c >= need and len(full & _all_shingles(unique[k])) >= similarity * len(full)}
            if near:
                self.partners[text] = near

    def dedup(self, items: list, text_of, keep: int | None = None) -> tuple[list, list[tuple]]:
        """Keep items in order, dropping one that is a near-duplicate (or a copy) of an item kept
        before it; its duplicate is the first such kept item. Stops once ``keep`` items are kept.
        Returns (kept, [(dropped, its duplicate)])."""
        kept, dropped = [], []
        first: dict[str, int] = {}  # text -> index in kept of the first kept item with it
        for item in items:
            if keep is not None and len(kept) >= keep:
                break
            text = text_of(item)
            hits = [first[t] for t in self.partners.get(text, ()) if t in first]
            if text in first and text in self.words:
                hits.append(first[text])
            if hits:
                dropped.append((item, kept[min(hits)]))
            else:
                first.setdefault(text, len(kept))
                kept.append(item)
        return kept, dropped


def dedup(items: list, text_of, similarity: float, keep: int | None = None) -> tuple[list, list[tuple]]:
    """Keep items in order, dropping one when ``similarity`` or more of its word 3-grams occur in a
    single better kept item. Stops once ``keep`` items are kept. Returns (kept, [(dropped, its
    duplicate)])."""
    return NearDuplicates([text_of(i) for i in items], similarity).dedup(items, text_of, keep)


def diversify(items: list[tuple[str, float]], vectors: dict, doc_of, *, mmr_lambda: float | None,
              max_per_document: int | None, keep: int, pool: int | None = None) -> tuple[list, dict]:
    """Re-order fused ``(chunk_id, score)`` items, best first, for more distinct documents.

    MMR (``mmr_lambda``): pick, one at a time, the item maximising ``lambda * relevance - (1 -
    lambda) * max cosine to the items picked``, relevance the fused score min-max scaled to 0..1
    over ``items``; ``vectors`` maps chunk id -> vector (a chunk without one is similar to
    nothing). The most relevant item is always picked first. ``max_per_document``: an item whose
    document already has that many picked is dropped. Stops once ``keep`` items are picked.
    Returns (picked, trace): trace ``moved`` [[chunk id, rank before, rank after]] for picked items
    whose rank changed, ``dropped`` [[chunk id, doc id]] (the cap), ranks 1-based.

    ``pool``: MMR picks among (and scales relevance over) the first ``pool`` items only; the rest
    follow in their fused order once the pool is used up (the cap still applies). The pipeline
    passes the items of the contract's window, so the first hits do not depend on how many a
    caller asks for (query 5, eval 100): the same hits from query, eval and calibrate."""
    import numpy as np

    total = len(items)
    n = total if pool is None else max(0, min(pool, total))
    scores = np.array([s for _, s in items[:n]], dtype=np.float64)
    lo, hi = (float(scores.min()), float(scores.max())) if n else (0.0, 0.0)
    rel = (scores - lo) / (hi - lo) if hi > lo else np.ones(n)
    sims = None
    if mmr_lambda is not None and n:
        dim = next((len(v) for v in vectors.values()), 0)
        mat = np.zeros((n, max(dim, 1)), dtype=np.float64)
        for i, (cid, _) in enumerate(items[:n]):
            v = vectors.get(cid)
            if v is not None and dim and len(v) == dim:
                norm = float(np.linalg.norm(v))
                if norm > 0:
                    mat[i] = np.asarray(v, dtype=np.float64) / norm
        sims = mat @ mat.T
    per_doc: dict[str, int] = {}
    picked: list[int] = []
    dropped: list[list] = []
    left = list(range(n))
    nearest = np.zeros(n)  # max cosine to a picked item

    def take(i: int) -> bool:
        """Pick item i unless its document already has max_per_document picked (then drop it)."""
        doc = doc_of(items[i][0])
        if max_per_document is not None and per_doc.get(doc, 0) >= max_per_document:
            dropped.append([items[i][0], doc])
            return False
        per_doc[doc] = per_doc.get(doc, 0) + 1
        picked.append(i)
        return True

    while left and len(picked) < keep:
        if sims is None or not picked:
            best = left[0]
        else:
            value = mmr_lambda * rel[left] - (1 - mmr_lambda) * nearest[left]
            best = left[int(np.argmax(value))]  # ties: the better fused rank (argmax takes the first)
        left.remove(best)
        if take(best) and sims is not None:
            nearest = np.maximum(nearest, sims[best])
    for i in range(n, total):  # beyond the pool: the fused order
        if len(picked) >= keep:
            break
        take(i)
    moved = [[items[i][0], i + 1, r] for r, i in enumerate(picked, start=1) if i + 1 != r]
    return [items[i] for i in picked], {"moved": moved, "dropped": dropped}
