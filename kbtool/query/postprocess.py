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
