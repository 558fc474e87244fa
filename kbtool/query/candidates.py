"""Candidates: what each retriever finds for a question, with both retrievers' real scores.

Gathering is the expensive part of a query (embedding, vector search, BM25 scoring); everything
after it (fusion, dedup, decisions) is cheap and pure, so ``eval`` and ``calibrate`` gather once
and try many settings over the same ``Candidates``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .preprocess import Processed
from .signals import term_weights


@dataclass
class Candidates:
    """Union of both retrievers' top candidates for one question.

    ``dense`` holds cosine similarities and ``bm25`` BM25 scores, one per id; NaN where a score
    is unknown (``fill_missing`` off, or a retriever not run). ``dense_rank``/``bm25_rank`` are
    1-based positions in each retriever's own list (None when it did not return the id).
    ``bm25_bound`` is the BM25 score of a chunk as good as the best chunk on every query term: the
    denominator of BM25 coverage.
    """

    processed: Processed
    ids: list[str]
    dense: np.ndarray
    bm25: np.ndarray
    dense_rank: dict[str, int]
    bm25_rank: dict[str, int]
    bm25_bound: float
    retrievers: tuple[str, ...]
    query_terms: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    # distinct query term -> (IDF over the permitted chunks, some permitted chunk holds it)
    term_weights: dict[str, tuple[float, bool]] | None = None  # None: no BM25 index to weigh them
    tokens: dict[str, frozenset] = field(default_factory=dict, repr=False)  # analysed hit tokens, by chunk id
    rerank_cache: dict = field(default_factory=dict, repr=False)  # (reranker, question, chunk id) -> score (query.rerank)


class Gatherer:
    """Runs the retrievers of a store for many questions, batching the embedding."""

    def __init__(self, store, embedder=None):
        self.store = store
        self._embedder = embedder

    @property
    def embedder(self):
        if self._embedder is None:
            from ..embed import load_embedder

            self._embedder = load_embedder(self.store.embedding_spec())
        self.store.check_model(self._embedder.spec)
        return self._embedder

    def gather(self, processed: list[Processed], *, retrievers: tuple[str, ...], depth: int,
               allowed: set[str] | None, allowed_docs: list[str] | None, fill_missing: bool = True,
               extra_dense: int = 0, visible: set[str] | None = None,
               batch_size: int = 64, progress=None) -> list[Candidates]:
        """``allowed`` is the set of chunk ids filters and access permit (None: all); ``visible``
        the chunk ids access alone permits (None: all), over which BM25 statistics (IDF, average
        length, the coverage bound) are computed, so hidden chunks move no score."""
        out: list[Candidates] = []
        index = self.store.bm25() if "bm25" in retrievers else None
        mask = index.mask(allowed) if index is not None and allowed is not None else None
        scoped = None
        if index is not None and visible is not None:
            scoped = index.scoped(index.mask(visible))
            if scoped is not None and not index.has_raw():  # an index saved before raw postings were
                index.set_raw(self._tokens_of(index))
        for start in range(0, len(processed), batch_size):
            batch = processed[start : start + batch_size]
            t0 = time.perf_counter()
            dense_lists: list[list[tuple[str, float]]] = [[] for _ in batch]
            qvecs = None
            if "dense" in retrievers and (allowed is None or allowed):
                qvecs = self.embedder.embed_queries([p.dense_text for p in batch])
                dense_lists = self.store.dense_search(qvecs, depth + extra_dense, allowed_docs)
            t_dense = (time.perf_counter() - t0) / max(1, len(batch))
            for i, p in enumerate(batch):
                t1 = time.perf_counter()
                terms = self.store.analyzer(p.bm25_text) if index is not None else []
                scores = index.scores(terms, mask, scoped) if index is not None else None
                bm25_list = index.top(scores, depth) if scores is not None else []
                t_bm25 = time.perf_counter() - t1
                d = dense_lists[i]
                if allowed is not None:  # Chroma filtered by document; chunk-level filters (page) here
                    d = [x for x in d if x[0] in allowed][:depth]
                ids = list(dict.fromkeys([c for c, _ in d] + [c for c, _ in bm25_list]))
                dense = np.full(len(ids), np.nan)
                bm25 = np.full(len(ids), np.nan)
                pos = {c: j for j, c in enumerate(ids)}
                for c, s in d:
                    dense[pos[c]] = s
                for c, s in bm25_list:
                    bm25[pos[c]] = s
                if fill_missing:
                    if qvecs is not None:
                        missing = [c for c in ids if np.isnan(dense[pos[c]])]
                        if missing:
                            vecs = self.store.chunk_vectors(missing)
                            for c in missing:
                                if c in vecs:
                                    dense[pos[c]] = float(np.dot(vecs[c], qvecs[i]))
                    if scores is not None:
                        for c in ids:
                            if np.isnan(bm25[pos[c]]):
                                row = index.row_of.get(c)
                                bm25[pos[c]] = float(scores[row]) if row is not None else 0.0
                bound = index.bound(terms, mask, scoped) if index is not None else 0.0
                weights = term_weights(index, terms, mask) if index is not None else None
                out.append(Candidates(
                    processed=p, ids=ids, dense=dense, bm25=bm25,
                    dense_rank={c: r for r, (c, _) in enumerate(d, start=1)},
                    bm25_rank={c: r for r, (c, _) in enumerate(bm25_list, start=1)},
                    bm25_bound=bound, retrievers=retrievers, query_terms=terms,
                    timings={"dense_ms": round(t_dense * 1000, 2), "bm25_ms": round(t_bm25 * 1000, 2)},
                    term_weights=weights,
                ))
            if progress:
                progress(len(batch))
        return out

    def _tokens_of(self, index) -> list[list[str]]:
        """Each BM25 row's analysed tokens, from the catalog, as the index was built from them."""
        from ..document import embed_text

        analyzer = self.store.analyzer
        by_id = {r["chunk_id"]: (r["prefix"], r["text"]) for r in self.store.catalog.chunks_for_index()}
        return [analyzer(embed_text(*by_id[c])) if c in by_id else [] for c in index.chunk_ids]
