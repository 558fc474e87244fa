"""Filtered dense search at scale (kbtool.store.filtered): a large store searches a filter's chunks
exactly over their cached vectors, or by an unfiltered ANN search deep enough and then filtered —
never with Chroma's ``where``, which costs 130-240 ms per query at 100k chunks. Each way must give
what the engine's own filter gives. The sample store is small, so the size limits are lowered."""

from __future__ import annotations

import pytest

import kbtool.store.filtered as filtered
from kbtool.contract import load_contract
from kbtool.query.pipeline import retrieve
from kbtool.query.scope import scope

QUESTIONS = ["How do I fix error TW-E1042?", "laptop drops off the Wi-Fi", "refund for an annual plan",
             "Which regions store data?", "rotate an API token"]


def _same(a, b) -> bool:
    return [c for c, _ in a] == [c for c, _ in b] and all(abs(x - y) < 1e-5 for (_, x), (_, y) in zip(a, b))


@pytest.fixture()
def large(monkeypatch):
    """Make the sample store count as large: every filtered search goes the large-store way."""
    monkeypatch.setattr(filtered, "NATIVE_MAX", 0)
    return monkeypatch


@pytest.mark.parametrize("spec", ["dir=manual/**", "dir=policies/**|security/**", "filetype=md"])
def test_exact_and_oversampled_search_equal_the_engines_own_filter(sample_store, embedder, large, spec):
    c = load_contract(search=False)
    sc = scope(sample_store, c, [spec])
    assert 0 < len(sc.allowed) < sample_store.chunk_total()
    vecs = embedder.embed_queries(QUESTIONS)
    depth = 10
    native = [[x for x in lst if x[0] in sc.allowed][:depth]
              for lst in sample_store.vectors.search(vecs, depth + sc.extra_dense, sc.allowed_docs)]
    searcher = sample_store._filtered
    before = dict(searcher.stats)
    exact = sample_store.dense_search(vecs, depth, sc.allowed_docs, allowed=sc.allowed, extra=sc.extra_dense)
    assert searcher.stats["exact"] == before["exact"] + 1
    large.setattr(filtered, "EXACT_MAX", 0)
    over = sample_store.dense_search(vecs, depth, sc.allowed_docs, allowed=sc.allowed, extra=sc.extra_dense)
    assert searcher.stats["oversampled"] == before["oversampled"] + 1
    for n, e, o in zip(native, exact, over):
        assert [c for c, _ in e] == [c for c, _ in n]  # HNSW on 177 vectors is exact
        assert [c for c, _ in o] == [c for c, _ in n]
        assert _same(e, n) and _same(o, n)
        assert all(cid in sc.allowed for cid, _ in e + o)


def test_a_filter_too_rare_for_the_oversampled_search_falls_back_to_exact(sample_store, embedder, large):
    large.setattr(filtered, "EXACT_MAX", 0)
    large.setattr(filtered, "OVERSAMPLE", 0.01)  # the unfiltered search is far too shallow
    allowed = set(sorted(c for c, _, _ in sample_store.chunk_metadata())[:3])
    vecs = embedder.embed_queries(QUESTIONS[:2])
    fb = sample_store._filtered.stats["fallback"]
    got = sample_store.dense_search(vecs, 10, None, allowed=allowed)
    assert sample_store._filtered.stats["fallback"] == fb + 2
    assert [sorted(c for c, _ in lst) for lst in got] == [sorted(allowed)] * 2


def test_held_vectors_stay_within_the_row_budget_and_follow_the_generation(sample_store, embedder, large):
    large.setattr(filtered, "BYTE_BUDGET", 40 * 384 * 4)  # 40 vectors
    searcher = filtered.FilteredSearch()
    ids = sorted(c for c, _, _ in sample_store.chunk_metadata())
    a, b = set(ids[:30]), set(ids[30:60])
    vecs = embedder.embed_queries(QUESTIONS[:1])
    searcher.search(sample_store, sample_store.vectors, "dense", vecs, 5, a, None, 0)
    searcher.search(sample_store, sample_store.vectors, "dense", vecs, 5, b, None, 0)
    assert len(searcher._held) == 1  # 60 vectors over a budget of 40: the older filter's vectors left
    (gen, _, key_id), = searcher._held
    assert gen == sample_store.generation() and key_id == id(b)


def test_answers_of_a_large_store_equal_the_engines_filter_through_the_pipeline(sample_store, embedder, monkeypatch):
    c = load_contract(search=False)
    want = [retrieve(sample_store, c, q, filters=["dir=manual/**"], embedder=embedder) for q in QUESTIONS]
    monkeypatch.setattr(filtered, "NATIVE_MAX", 0)
    got = [retrieve(sample_store, c, q, filters=["dir=manual/**"], embedder=embedder) for q in QUESTIONS]
    for w, g in zip(want, got):
        assert [h.chunk_id for h in g.hits] == [h.chunk_id for h in w.hits]
        assert g.decision == w.decision
        assert g.confidence == pytest.approx(w.confidence, abs=1e-4)


def test_a_scope_is_worked_out_once_per_generation(sample_store):
    c = load_contract(search=False)
    one = scope(sample_store, c, ["dir=manual/**"])
    assert scope(sample_store, c, ["dir=manual/**"]) is one
    assert scope(sample_store, c, ["dir=policies/**"]) is not one
    # the same chunks as deciding chunk by chunk
    want = {cid for cid, doc, _ in sample_store.chunk_metadata() if doc.startswith("manual/")}
    assert one.allowed == want and one.allowed_docs == sorted({d for _, d, _ in sample_store.chunk_metadata()
                                                               if d.startswith("manual/")})
