"""The Retriever: dense (Chroma), BM25 and hybrid (RRF) search over one store.

Filters are applied inside both retrievers, before fusion: Chroma gets a ``where`` clause and
BM25 scores only the chunks the catalog says match, so a filter never empties the fused list
by cutting after the fact.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

from ..errors import InputError, UsageError
from .fusion import RRF_K, rrf, weighted

MODE_HELP = "hybrid (RRF, k=60), dense, bm25, rrf:K (RRF with another k) or weighted:W (min-max fusion, dense weight W)"


def parse_mode(mode: str) -> tuple[str, float | None]:
    """'hybrid' -> ('rrf', 60); 'rrf:10' -> ('rrf', 10); 'weighted:0.7' -> ('weighted', 0.7)."""
    name, _, arg = mode.partition(":")
    try:
        if name in ("dense", "bm25") and not arg:
            return name, None
        if name == "hybrid" and not arg:
            return "rrf", float(RRF_K)
        if name == "rrf":
            k = float(arg) if arg else float(RRF_K)
            if k > 0:
                return "rrf", k
        if name == "weighted":
            w = float(arg) if arg else 0.5
            if 0.0 <= w <= 1.0:
                return "weighted", w
    except ValueError:
        pass
    raise UsageError(f"unknown mode {mode!r}: use {MODE_HELP}")


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


class Retriever:
    def __init__(self, store, embedder=None, config: RetrieverConfig | None = None):
        store.require_indexed()
        self.store = store
        self._embedder = embedder
        self.config = config or RetrieverConfig()

    @property
    def embedder(self):
        if self._embedder is None:
            from ..embed import load_embedder

            self._embedder = load_embedder(self.store.model_id)
        self.store.check_model(self._embedder.model_id)
        return self._embedder

    def search(self, query: str, mode: str = "hybrid", top_k: int = 10, filters: dict | None = None) -> list[Hit]:
        return self.search_many([query], mode, top_k, filters)[0]

    def search_many(self, queries: Sequence[str], mode: str = "hybrid", top_k: int = 10,
                    filters: dict | None = None) -> list[list[Hit]]:
        """Search several queries, encoding them in one batch."""
        return self.run(queries, [mode], top_k, filters)[mode]

    def run(self, queries: Sequence[str], modes: Sequence[str], top_k: int = 10, filters: dict | None = None,
            progress=None, batch_size: int = 64) -> dict[str, list[list[Hit]]]:
        """Run several modes over many queries; each query is embedded and BM25-scored once.

        ``progress(n)`` is called after each batch of n queries.
        """
        parsed = {m: parse_mode(m) for m in modes}
        if top_k < 1:
            raise UsageError("--top-k must be at least 1")
        filters = {**self.config.filters, **(filters or {})}
        if filters:
            unknown = set(filters) - self.store.metadata_keys()
            if unknown:
                raise InputError(
                    f"unknown filter key(s) {', '.join(sorted(unknown))}: known keys are "
                    + ", ".join(sorted(self.store.metadata_keys()))
                )
        need_dense = any(kind != "bm25" for kind, _ in parsed.values())
        need_bm25 = any(kind != "dense" for kind, _ in parsed.values())
        mask = None
        if need_bm25 and filters:  # the filter's chunks, looked up once for every query of the run
            mask = self.store.bm25().mask(self.store.chunk_ids_matching(filters))
        depth = max(top_k, self.config.candidates)
        out: dict[str, list[list[Hit]]] = {m: [] for m in modes}
        queries = list(queries)
        for start in range(0, len(queries), batch_size):
            batch = queries[start : start + batch_size]
            dense = self._dense(batch, depth, filters) if need_dense else [[] for _ in batch]
            bm25 = self._bm25(batch, depth, mask) if need_bm25 else [[] for _ in batch]
            for mode, (kind, arg) in parsed.items():
                for d, b in zip(dense, bm25):
                    if kind == "dense":
                        fused = d
                    elif kind == "bm25":
                        fused = b
                    elif kind == "rrf":
                        # Fusion always sees the same candidate depth, whatever top_k asks for.
                        k = self.config.rrf_k if mode == "hybrid" else arg
                        n = self.config.candidates
                        fused = rrf([[c for c, _ in d[:n]], [c for c, _ in b[:n]]], k=k)
                    else:
                        n = self.config.candidates
                        fused = weighted(d[:n], b[:n], arg)
                    out[mode].append(self._hits(fused[:top_k], d, b))
            if progress:
                progress(len(batch))
        return out

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

    def _bm25(self, queries, depth, mask) -> list[list[tuple[str, float]]]:
        index = self.store.bm25()
        analyzer = self.store.analyzer
        return [index.search(analyzer(q), depth, mask) for q in queries]

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
