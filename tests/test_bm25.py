"""bm25s (what the store uses) must rank exactly like rank_bm25's BM25Okapi, the reference."""

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from kbtool.store.analyzer import Analyzer
from kbtool.store.bm25 import BM25Index
from kbtool.store.manifest import BM25_PARAMS


@pytest.fixture(scope="module")
def corpus(sample_store):
    rows = sample_store.catalog.db.execute("SELECT chunk_id, prefix, text FROM chunks ORDER BY chunk_id").fetchall()
    analyzer = Analyzer()
    return [r["chunk_id"] for r in rows], [analyzer(f"{r['prefix']}\n\n{r['text']}") for r in rows]


QUERIES = [
    "error TW-E5120 block storage", "refund policy European Union", "proxy configuration timeout",
    "rate limit per plan", "offline mode queues changes", "order TWS-2025-000219", "同步冲突",
    "rotate token", "selective sync folders", "SSO SAML",
]


def test_rankings_match_rank_bm25(corpus, tmp_path):
    ids, tokens = corpus
    BM25Index.build(tmp_path / "bm25", ids, tokens, BM25_PARAMS)
    ours = BM25Index.load(tmp_path / "bm25")
    ref = BM25Okapi(tokens, k1=BM25_PARAMS["k1"], b=BM25_PARAMS["b"], epsilon=0)
    analyzer = Analyzer()
    for q in QUERIES:
        qt = analyzer(q)
        ref_scores = ref.get_scores(qt)
        got = ours.search(qt, k=10)
        assert got, q
        # Same scores up to the constant factor (k1 + 1) ...
        for cid, score in got:
            assert score * (BM25_PARAMS["k1"] + 1) == pytest.approx(ref_scores[ids.index(cid)], rel=1e-4)
        # ... hence the same top-10 in the same order (ties by id).
        order = sorted(range(len(ids)), key=lambda i: (-round(ref_scores[i], 4), ids[i]))
        expected = [ids[i] for i in order if ref_scores[i] > 0][:10]
        assert [c for c, _ in got] == expected, q


def test_filter_mask_only_scores_allowed_chunks(corpus, tmp_path):
    ids, tokens = corpus
    BM25Index.build(tmp_path / "bm25", ids, tokens, BM25_PARAMS)
    index = BM25Index.load(tmp_path / "bm25")
    allowed = {c for c in ids if c.startswith("zh/")}
    got = index.search(Analyzer()("sync conflict 同步冲突 refund"), k=50, mask=index.mask(allowed))
    assert got and all(c in allowed for c, _ in got)


def test_unknown_terms_give_no_results(corpus, tmp_path):
    ids, tokens = corpus
    BM25Index.build(tmp_path / "bm25", ids, tokens, BM25_PARAMS)
    assert BM25Index.load(tmp_path / "bm25").search(["zzzqqq"], k=5) == []


def test_empty_index(tmp_path):
    BM25Index.build(tmp_path / "bm25", [], [], BM25_PARAMS)
    assert BM25Index.load(tmp_path / "bm25").search(["anything"], k=5) == []
    assert np is not None
