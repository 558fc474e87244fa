"""Candidates: what each retriever finds for a question, with both retrievers' real scores.

Gathering is the expensive part of a query (embedding, vector search, BM25 scoring); everything
after it (fusion, dedup, decisions) is cheap and pure, so ``eval`` and ``calibrate`` gather once
and try many settings over the same ``Candidates``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .preprocess import Processed
from .names import Mentioned, where
from .signals import term_weights


@dataclass
class Candidates:
    """Union of the retrievers' top candidates for one question.

    ``scores[r]`` holds retriever ``r``'s score of each id (cosine similarities for ``dense`` and
    ``dense:NAME``, BM25 scores for ``bm25``); NaN where a score is unknown (``fill_missing`` off,
    or a retriever not run). ``ranks[r]`` are 1-based positions in each retriever's own list (an id
    it did not return has none). ``bm25_bound`` is the BM25 score of a chunk as good as the best
    chunk on every query term: the denominator of BM25 coverage. ``retrievers``: those run.
    """

    processed: Processed
    ids: list[str]
    scores: dict[str, np.ndarray]
    ranks: dict[str, dict[str, int]]
    bm25_bound: float
    retrievers: tuple[str, ...]
    query_terms: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    # distinct query term -> (IDF over the permitted chunks, some permitted chunk holds it)
    term_weights: dict[str, tuple[float, bool]] | None = None  # None: no BM25 index to weigh them
    # the question's named things and the permitted documents mentioning each (query.names); None: no BM25 index
    names: list[Mentioned] | None = None
    tokens: dict[str, frozenset] = field(default_factory=dict, repr=False)  # analysed hit tokens, by chunk id
    rerank_cache: dict = field(default_factory=dict, repr=False)  # (reranker, question, chunk id) -> score (query.rerank)
    vectors: dict = field(default_factory=dict, repr=False)  # chunk id -> cached dense vector (postprocess.diversity)
    scope: Any = field(default=None, repr=False)  # the Scope it was gathered in (query.scope.for_language)

    def score(self, retriever: str) -> np.ndarray:
        """Retriever's scores over ``ids`` (all NaN when it was not run)."""
        got = self.scores.get(retriever)
        return got if got is not None else np.full(len(self.ids), np.nan)

    @property
    def dense(self) -> np.ndarray:
        return self.score("dense")

    @property
    def bm25(self) -> np.ndarray:
        return self.score("bm25")

    @property
    def dense_rank(self) -> dict[str, int]:
        return self.ranks.get("dense", {})

    @property
    def bm25_rank(self) -> dict[str, int]:
        return self.ranks.get("bm25", {})


class Gatherer:
    """Runs the retrievers of a store for many questions, batching the embedding."""

    def __init__(self, store, embedder=None):
        self.store = store
        self._embedders = {"dense": embedder} if embedder is not None else {}

    @property
    def embedder(self):
        return self.embedder_for("dense")

    def embedder_for(self, name: str):
        """The loaded model of dense retriever ``name`` (checked against the store's record)."""
        if self._embedders.get(name) is None:
            from ..embed import load_embedder

            self._embedders[name] = load_embedder(self.store.embedding_spec(name))
        self.store.check_model(self._embedders[name].spec, name)
        return self._embedders[name]

    def gather(self, processed: list[Processed], *, retrievers: tuple[str, ...], depth: int,
               allowed: set[str] | None, allowed_docs: list[str] | None, fill_missing: bool = True,
               extra_dense: int = 0, visible: set[str] | None = None,
               batch_size: int = 64, progress=None, wanted=None) -> list[Candidates]:
        """``allowed`` is the set of chunk ids filters and access permit (None: all); ``visible``
        the chunk ids access alone permits (None: all), over which BM25 statistics (IDF, average
        length, the coverage bound) are computed, so hidden chunks move no score. ``wanted(p)``:
        the retrievers (of ``retrievers``) question ``p`` needs (None: all of them) — a dense model
        no question of a batch weighs is never loaded."""
        out: list[Candidates] = []
        index = self.store.bm25() if "bm25" in retrievers else None
        mask = index.held("mask", allowed) if index is not None and allowed is not None else None
        scoped = None
        if index is not None and visible is not None:
            if not index.has_raw() and not index.mask(visible).all():  # an index saved before raw postings were
                index.set_raw(self._tokens_of(index))
            scoped = index.held("scoped", visible)
        dense_names = [r for r in retrievers if r != "bm25"]
        for start in range(0, len(processed), batch_size):
            batch = processed[start : start + batch_size]
            needs = [set(wanted(p)) if wanted else set(retrievers) for p in batch]
            lists: dict[str, list[list[tuple[str, float]]]] = {}
            qvecs: dict[str, dict[int, np.ndarray]] = {}
            t_dense: dict[str, float] = {}
            for name in dense_names:
                rows = [i for i, n in enumerate(needs) if name in n]
                lists[name] = [[] for _ in batch]
                if not rows or (allowed is not None and not allowed):
                    continue
                t0 = time.perf_counter()
                vecs = self.embedder_for(name).embed_queries([batch[i].dense_text for i in rows])
                found = self.store.dense_search(vecs, depth, allowed_docs, name=name, allowed=allowed, extra=extra_dense)
                for j, i in enumerate(rows):
                    lists[name][i] = found[j]
                qvecs[name] = {i: vecs[j] for j, i in enumerate(rows)}
                t_dense[name] = (time.perf_counter() - t0) / len(rows)
            for i, p in enumerate(batch):
                t1 = time.perf_counter()
                use_bm25 = index is not None and "bm25" in needs[i]
                terms = p.bm25_terms(self.store.analyzer) if index is not None else []
                bm25_scores = index.scores(terms, mask, scoped) if use_bm25 else None
                found = {name: lists[name][i] for name in dense_names if name in needs[i]}
                if use_bm25:
                    found["bm25"] = index.top(bm25_scores, depth)
                t_bm25 = time.perf_counter() - t1
                for name in dense_names:
                    if name in found and allowed is not None:  # Chroma filtered by document; chunk-level filters (page) here
                        found[name] = [x for x in found[name] if x[0] in allowed][:depth]
                ids = list(dict.fromkeys(c for lst in found.values() for c, _ in lst))
                pos = {c: j for j, c in enumerate(ids)}
                scores = {}
                for name, lst in found.items():
                    arr = np.full(len(ids), np.nan)
                    for c, s in lst:
                        arr[pos[c]] = s
                    scores[name] = arr
                if fill_missing:
                    for name in found:
                        arr = scores[name]
                        missing = [c for c in ids if np.isnan(arr[pos[c]])]
                        if not missing:
                            continue
                        if name == "bm25":
                            for c in missing:
                                row = index.row_of.get(c)
                                arr[pos[c]] = float(bm25_scores[row]) if row is not None else 0.0
                        elif i in qvecs.get(name, {}):
                            vecs = self.store.chunk_vectors(missing, name=name)
                            for c in missing:
                                if c in vecs:
                                    arr[pos[c]] = float(np.dot(vecs[c], qvecs[name][i]))
                bound = index.bound(terms, mask, scoped) if index is not None else 0.0
                weights = term_weights(index, terms, mask) if index is not None else None
                names = where(self.store, index, p, mask) if index is not None else None
                timings = {("dense_ms" if n == "dense" else f"{n}_ms"): round(t * 1000, 2)
                           for n, t in t_dense.items() if n in found}
                timings.setdefault("dense_ms", 0.0)
                timings["bm25_ms"] = round(t_bm25 * 1000, 2)
                out.append(Candidates(
                    processed=p, ids=ids, scores=scores,
                    ranks={name: {c: r for r, (c, _) in enumerate(lst, start=1)} for name, lst in found.items()},
                    bm25_bound=bound, retrievers=tuple(r for r in retrievers if r in found),
                    query_terms=terms, timings=timings, term_weights=weights, names=names,
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
