"""bm25s (what the store uses) must score exactly like a plain BM25 with Lucene's IDF, the reference."""

import math
from collections import Counter

import numpy as np
import pytest

from kbtool.store.analyzer import Analyzer
from kbtool.store.bm25 import DEFAULT_PARAMS as BM25_PARAMS
from kbtool.store.bm25 import BM25Index


class ReferenceBM25:
    """BM25 written out: idf = log(1 + (N - df + 0.5) / (df + 0.5)) (Lucene's, never negative),
    tf part = tf / (tf + k1 (1 - b + b |d| / avgdl))."""

    def __init__(self, docs: list[list[str]], k1: float, b: float):
        self.tfs = [Counter(d) for d in docs]
        self.lens = [len(d) for d in docs]
        self.avg = sum(self.lens) / len(docs)
        df = Counter(t for d in docs for t in set(d))
        n = len(docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self.k1, self.b = k1, b

    def get_scores(self, query: list[str]) -> np.ndarray:
        out = np.zeros(len(self.tfs))
        for i, (tf, length) in enumerate(zip(self.tfs, self.lens)):
            norm = self.k1 * (1 - self.b + self.b * length / self.avg)
            out[i] = sum(self.idf[t] * tf[t] / (tf[t] + norm) for t in query if t in tf)
        return out


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


def test_rankings_match_the_reference(corpus, tmp_path):
    ids, tokens = corpus
    BM25Index.build(tmp_path / "bm25", ids, tokens, BM25_PARAMS)
    ours = BM25Index.load(tmp_path / "bm25")
    ref = ReferenceBM25(tokens, k1=BM25_PARAMS["k1"], b=BM25_PARAMS["b"])
    analyzer = Analyzer()
    for q in QUERIES:
        qt = analyzer(q)
        ref_scores = ref.get_scores(qt)
        got = ours.search(qt, k=10)
        assert got, q
        # Same scores ...
        for cid, score in got:
            assert score == pytest.approx(ref_scores[ids.index(cid)], rel=1e-4)
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
