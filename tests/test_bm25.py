"""The store's BM25 (bm25s) must score as rank_bm25's BM25Okapi, the reference, given the same IDF.

rank_bm25 scores idf x tf (k1 + 1) / (tf + k1 (1 - b + b |d| / avgdl)); bm25s, and so kbtool, the
same without the constant (k1 + 1). The IDF is where they differ by design: BM25Okapi's is
Robertson's, log((N - df + 0.5) / (df + 0.5)), negative for a term in more than half the documents
(floored at epsilon x the mean IDF); kbtool's (``DEFAULT_PARAMS``) is Lucene's,
log(1 + (N - df + 0.5) / (df + 0.5)), never negative. So the reference is BM25Okapi with only its
IDF replaced by Lucene's: everything else (term and document frequencies, lengths, the sum over
the query's tokens) is rank_bm25's own."""

import math

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from kbtool.store.analyzer import Analyzer
from kbtool.store.bm25 import DEFAULT_PARAMS as BM25_PARAMS
from kbtool.store.bm25 import BM25Index


class LuceneOkapi(BM25Okapi):
    """rank_bm25's BM25Okapi with Lucene's IDF."""

    def _calc_idf(self, nd):
        n = self.corpus_size
        self.idf = {t: math.log(1 + (n - df + 0.5) / (df + 0.5)) for t, df in nd.items()}


def reference(tokens: list[list[str]]) -> LuceneOkapi:
    assert BM25_PARAMS["method"] == "lucene"  # the IDF LuceneOkapi gives
    return LuceneOkapi(tokens, k1=BM25_PARAMS["k1"], b=BM25_PARAMS["b"])


def reference_scores(ref: LuceneOkapi, query: list[str]) -> np.ndarray:
    return ref.get_scores(query) / (ref.k1 + 1)


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


def test_scores_and_rankings_match_rank_bm25(corpus, tmp_path):
    ids, tokens = corpus
    assert len(ids) >= 100
    BM25Index.build(tmp_path / "bm25", ids, tokens, BM25_PARAMS)
    ours = BM25Index.load(tmp_path / "bm25")
    assert ours.chunk_ids == ids
    ref = reference(tokens)
    analyzer = Analyzer()
    for q in QUERIES:
        qt = analyzer(q)
        expected = reference_scores(ref, qt)
        assert (expected > 0).sum() >= 2, q
        # the same score for every chunk (bm25s stores float32) ...
        np.testing.assert_allclose(ours.scores(qt), expected, rtol=1e-5, atol=1e-6, err_msg=q)
        # ... hence the same top-10 in the same order (ties by id)
        got = ours.search(qt, k=10)
        order = sorted(range(len(ids)), key=lambda i: (-round(expected[i], 4), ids[i]))
        assert [c for c, _ in got] == [ids[i] for i in order if expected[i] > 0][:10], q


def test_a_term_in_most_documents_scores_as_lucene_idf_says(tmp_path):
    """Six documents, "relay" in four: Robertson's IDF (rank_bm25's own) gives it no weight, Lucene's
    (kbtool's) some, and kbtool's scores are LuceneOkapi's."""
    docs = [["relay", "restarts", "relay"], ["relay", "port"], ["relay", "timeout", "proxy", "hosts"],
            ["relay", "log", "levels"], ["refund", "window"], ["billing", "team", "refund"]]
    ids = [f"d{i}" for i in range(len(docs))]
    BM25Index.build(tmp_path / "bm25", ids, docs, BM25_PARAMS)
    ours = BM25Index.load(tmp_path / "bm25")
    for query in (["relay"], ["refund", "relay"], ["relay", "relay", "port"], ["window"]):
        np.testing.assert_allclose(ours.scores(query), reference_scores(reference(docs), query), rtol=1e-5, atol=1e-6)
    robertson = BM25Okapi(docs, k1=BM25_PARAMS["k1"], b=BM25_PARAMS["b"], epsilon=0)  # its negative IDF floored at 0
    assert not robertson.get_scores(["relay"]).any() and (ours.scores(["relay"]) > 0).sum() == 4
    assert [c for c, _ in ours.search(["relay"], k=10)] == ["d0", "d1", "d3", "d2"]  # twice first, then the shorter


def test_filter_mask_scores_as_an_index_of_the_allowed_chunks(corpus, tmp_path):
    """A filtered search's statistics (N, average length, document frequencies) count the allowed
    chunks only: the scores of rank_bm25 built from those chunks alone."""
    ids, tokens = corpus
    BM25Index.build(tmp_path / "bm25", ids, tokens, BM25_PARAMS)
    index = BM25Index.load(tmp_path / "bm25")
    keep = [i for i, c in enumerate(ids) if c.startswith(("zh/", "manual/"))]
    assert 5 <= len(keep) < len(ids)
    mask = index.mask({ids[i] for i in keep})
    ref = reference([tokens[i] for i in keep])
    qt = Analyzer()("sync conflict 同步冲突 refund proxy")
    got = index.scores(qt, mask, scoped=index.scoped(mask))
    assert not got[~mask].any()
    np.testing.assert_allclose(got[keep], reference_scores(ref, qt), rtol=1e-5, atol=1e-6)
    assert (got[keep] > 0).sum() >= 2
    assert all(c in {ids[i] for i in keep} for c, _ in index.search(qt, k=50, mask=mask))


def test_unknown_terms_give_no_results(corpus, tmp_path):
    ids, tokens = corpus
    BM25Index.build(tmp_path / "bm25", ids, tokens, BM25_PARAMS)
    assert BM25Index.load(tmp_path / "bm25").search(["zzzqqq"], k=5) == []


def test_empty_index(tmp_path):
    BM25Index.build(tmp_path / "bm25", [], [], BM25_PARAMS)
    index = BM25Index.load(tmp_path / "bm25")
    assert index.search(["anything"], k=5) == [] and index.scores(["anything"]) is None
