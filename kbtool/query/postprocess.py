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


def dedup(items: list, text_of, similarity: float, keep: int | None = None) -> tuple[list, list[tuple]]:
    """Keep items in order, dropping one when ``similarity`` or more of its word 3-grams occur in a
    single better kept item. Stops once ``keep`` items are kept. Returns (kept, [(dropped, its
    duplicate)])."""
    kept, dropped = [], []
    owners: dict[tuple, list[int]] = {}  # shingle -> indexes of kept items holding it
    for item in items:
        if keep is not None and len(kept) >= keep:
            break
        sh = shingles(text_of(item))
        dup = None
        if sh:
            counts = Counter(k for s in sh for k in owners.get(s, ()))
            need = similarity * len(sh)
            full = _all_shingles(text_of(item))
            # the sketch proposes, the full shingle sets decide: no drop on a sampling accident
            dup = next((kept[k] for k, c in sorted(counts.items()) if c >= need
                        and len(full & _all_shingles(text_of(kept[k]))) >= similarity * len(full)), None)
        if dup is None:
            for s in sh:
                owners.setdefault(s, []).append(len(kept))
            kept.append(item)
        else:
            dropped.append((item, dup))
    return kept, dropped
