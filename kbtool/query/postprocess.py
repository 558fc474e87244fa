"""Post-processing of the fused list: drop exact and near-duplicate chunks so the top K is not
spent on overlapping windows or copies of the same text."""

from __future__ import annotations

import re

_WORD = re.compile(r"\w+")


def shingles(text: str, n: int = 3) -> set[tuple[str, ...]]:
    words = _WORD.findall(text.lower())
    if len(words) < n:
        return {tuple(words)} if words else set()
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def dedup(items: list, text_of, similarity: float) -> tuple[list, list[tuple]]:
    """Keep items in order, dropping one when ``similarity`` or more of its word 3-grams occur in a
    single better item. Returns (kept, [(dropped, kept_it_duplicates)])."""
    kept, dropped, seen = [], [], []
    for item in items:
        sh = shingles(text_of(item))
        dup = None
        if sh:
            for other, osh in seen:
                if len(sh & osh) >= similarity * len(sh):
                    dup = other
                    break
        if dup is None:
            kept.append(item)
            seen.append((item, sh))
        else:
            dropped.append((item, dup))
    return kept, dropped
