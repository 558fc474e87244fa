"""Near-duplicate removal: the relation computed once (NearDuplicates) gives, for any ordering and
any stopping point, exactly what an item-by-item pass against the kept items gives (the
algorithm dedup used before calibrate shared the relation across settings)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbtool.query.postprocess import NearDuplicates, _all_shingles, dedup, shingles


def reference(items, text_of, similarity, keep=None):
    kept, dropped = [], []
    owners: dict = {}
    for item in items:
        if keep is not None and len(kept) >= keep:
            break
        sh = shingles(text_of(item))
        dup = None
        if sh:
            counts = Counter(k for s in sh for k in owners.get(s, ()))
            need = similarity * len(sh)
            full = _all_shingles(text_of(item))
            dup = next((kept[k] for k, c in sorted(counts.items()) if c >= need
                        and len(full & _all_shingles(text_of(kept[k]))) >= similarity * len(full)), None)
        if dup is None:
            for s in sh:
                owners.setdefault(s, []).append(len(kept))
            kept.append(item)
        else:
            dropped.append((item, dup))
    return kept, dropped


WORDS = ["sync", "token", "retry", "error", "client", "server", "the", "a", "queue", "disk"]
texts = st.lists(st.sampled_from(WORDS), min_size=0, max_size=12).map(" ".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(texts, min_size=1, max_size=14), st.sampled_from([0.5, 0.8, 0.9, 1.0]),
       st.one_of(st.none(), st.integers(1, 8)), st.randoms())
@pytest.mark.slow
def test_shared_relation_equals_the_item_by_item_pass(pool, similarity, keep, rnd):
    items = [(f"c{i}", t) for i, t in enumerate(pool)]
    near = NearDuplicates([t for _, t in items], similarity)
    for _ in range(3):  # the same relation, several orders (as calibrate's settings reorder)
        rnd.shuffle(items)
        want = reference(items, lambda x: x[1], similarity, keep)
        assert near.dedup(items, lambda x: x[1], keep) == want
        assert dedup(items, lambda x: x[1], similarity, keep) == want


def test_long_overlapping_windows_are_dropped_and_copies_too():
    base = " ".join(f"w{i}" for i in range(200))
    shifted = " ".join(f"w{i}" for i in range(5, 205))
    items = [("a", base), ("b", "something else entirely here"), ("c", shifted), ("d", base)]
    kept, dropped = dedup(items, lambda x: x[1], 0.9)
    assert [k for k, _ in kept] == ["a", "b"]
    assert [(d[0], k[0]) for d, k in dropped] == [("c", "a"), ("d", "a")]
