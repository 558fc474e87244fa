"""The Retriever: dense (Chroma), BM25 and hybrid (RRF) search over one store.

Filters are applied inside both retrievers, before fusion: Chroma gets a ``where`` clause and
BM25 scores only the chunks the catalog says match, so a filter never empties the fused list
by cutting after the fact.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

from .errors import InputError
from .fusion import RRF_K, rrf

MODES = ("hybrid", "dense", "bm25")


@dataclass
class Hit:
    rank: int
    chunk_id: str
    doc_id: str
    score: float
    text: str
    section_path: str
    page: int | None
    title: str
    filetype: str
    char_start: int
    char_end: int
    dense_rank: int | None = None
    dense_score: float | None = None
    bm25_rank: int | None = None
    bm25_score: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class RetrieverConfig:
    candidates: int = 100  # depth taken from each retriever before fusion
    rrf_k: int = RRF_K
    filters: dict = field(default_factory=dict)


def parse_filters(items: Sequence[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--filter {item!r}: write key=value, e.g. --filter filetype=pdf")
        out[key.strip()] = value.strip()
    return out


class Retriever:
    def __init__(self, store, embedder=None, config: RetrieverConfig | None = None):
        store.require_indexed()
        self.store = store
        self._embedder = embedder
        self.config = config or RetrieverConfig()

    @property
    def embedder(self):
        if self._embedder is None:
            from .embed import load_embedder

            self._embedder = load_embedder(self.store.model_id)
        self.store.check_model(self._embedder.model_id)
        return self._embedder

    def search(self, query: str, mode: str = "hybrid", top_k: int = 10, filters: dict | None = None) -> list[Hit]:
        return self.search_many([query], mode, top_k, filters)[0]

    def search_many(self, queries: Sequence[str], mode: str = "hybrid", top_k: int = 10,
                    filters: dict | None = None) -> list[list[Hit]]:
        """Search several queries, encoding them in one batch."""
        if mode not in MODES:
            raise InputError(f"unknown mode {mode!r}: choose one of {', '.join(MODES)}")
        if top_k < 1:
            raise InputError("--top-k must be at least 1")
        filters = {**self.config.filters, **(filters or {})}
        if filters:
            unknown = set(filters) - self.store.metadata_keys()
            if unknown:
                raise InputError(
                    f"unknown filter key(s) {', '.join(sorted(unknown))}: known keys are "
                    + ", ".join(sorted(self.store.metadata_keys()))
                )
        depth = max(top_k, self.config.candidates)
        dense = self._dense(queries, depth, filters) if mode in ("dense", "hybrid") else [[] for _ in queries]
        bm25 = self._bm25(queries, depth, filters) if mode in ("bm25", "hybrid") else [[] for _ in queries]
        results = []
        for d, b in zip(dense, bm25):
            if mode == "dense":
                fused = d
            elif mode == "bm25":
                fused = b
            else:
                fused = rrf([[c for c, _ in d], [c for c, _ in b]], k=self.config.rrf_k)
            results.append(self._hits(fused[:top_k], d, b))
        return results

    def _dense(self, queries, depth, filters) -> list[list[tuple[str, float]]]:
        col = self.store.collection()
        n = col.count()
        if n == 0:
            return [[] for _ in queries]
        vectors = self.embedder.embed_queries(list(queries))
        where = None
        if filters:
            clauses = [{k: v} for k, v in filters.items()]
            where = clauses[0] if len(clauses) == 1 else {"$and": clauses}
        res = col.query(query_embeddings=vectors, n_results=min(depth, n), where=where, include=["distances"])
        out = []
        for ids, dists in zip(res["ids"], res["distances"]):
            ranked = sorted(((cid, 1.0 - float(dist)) for cid, dist in zip(ids, dists)), key=lambda x: (-x[1], x[0]))
            out.append(ranked)
        return out

    def _bm25(self, queries, depth, filters) -> list[list[tuple[str, float]]]:
        index = self.store.bm25()
        allowed = self.store.chunk_ids_matching(filters) if filters else None
        analyzer = self.store.analyzer
        return [index.search(analyzer(q), depth, allowed) for q in queries]

    def _hits(self, fused, dense, bm25) -> list[Hit]:
        rows = self.store.chunks_by_id([cid for cid, _ in fused])
        d_rank = {cid: (i + 1, s) for i, (cid, s) in enumerate(dense)}
        b_rank = {cid: (i + 1, s) for i, (cid, s) in enumerate(bm25)}
        hits = []
        for cid, score in fused:
            row = rows.get(cid)
            if row is None:  # index ahead of catalog: never return a ghost
                continue
            dr, ds = d_rank.get(cid, (None, None))
            br, bs = b_rank.get(cid, (None, None))
            hits.append(Hit(
                rank=len(hits) + 1, chunk_id=cid, doc_id=row["doc_id"], score=round(score, 6),
                text=row["text"], section_path=row["section_path"], page=row["page"], title=row["title"],
                filetype=row["filetype"], char_start=row["char_start"], char_end=row["char_end"],
                dense_rank=dr, dense_score=None if ds is None else round(ds, 6),
                bm25_rank=br, bm25_score=None if bs is None else round(bs, 6),
            ))
        return hits
