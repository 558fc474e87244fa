"""Reading the store's chunks, vectors and BM25: what the pipeline and ``kbtool chunks``/``status`` ask
(``Store`` reads them through ``ChunksView``; nothing here writes the manifest)."""

from __future__ import annotations

import json

import time
from typing import Callable

from ..document import embed_text
from ..errors import StoreError
from . import manifest as mf
from .analyzer import Analyzer, AnalyzerConfig
from .bm25 import BM25Index
from .vectors import index_hash


class ChunksView:
    """Index state, chunks, dense and BM25 search, status of a ``Store``."""

    def bm25_spec(self) -> dict:
        return mf.bm25_spec(self.manifest)

    @property
    def analyzer(self) -> Analyzer:
        return Analyzer(AnalyzerConfig.from_dict(self.manifest["analyzer"]))

    # ---- state ---------------------------------------------------------------------------
    def generation(self) -> int:
        return self.catalog.generation()

    def index_targets(self, rows: list | None = None) -> dict[str, str]:
        """chunk_id -> index hash of every catalog chunk: what both indexes must hold (from ``rows`` of
        ``chunks_for_index`` when the caller has read them already)."""
        if rows is not None:
            return {r["chunk_id"]: index_hash(r["content_hash"], r["meta"]) for r in rows}
        return {r[0]: index_hash(r[1], r[2]) for r in self.catalog.chunk_hashes()}

    def is_indexed(self) -> bool:
        """Both indexes hold the catalog's generation: the last sync finished at it, BM25 records it in
        its own folder, vectors exist. A sync killed before the BM25 swap is never current."""
        self._refresh()
        gen = self.generation()
        bm25_dir = self.path / "bm25"
        bm25_gen = BM25Index.state(bm25_dir).get("generation", self.manifest.get("indexed_generation"))
        return (self.manifest.get("indexed_generation") == gen
                and mf.bm25_built_with(self.manifest) == self.bm25_spec()
                and BM25Index.exists(bm25_dir) and bm25_gen == gen and (gen == 0 or self.vectors.exists())
                and all(rec.get("indexed_generation") == gen for rec in self.manifest.get("models", {}).values()))

    def require_indexed(self) -> None:
        """Readers are served while a writer works (the pipeline drops hits the catalog no longer
        holds: never a ghost); only a store left behind with no writer at work is an error."""
        # In this order, looking twice: a writer that finishes between the first look and the lock
        # probe leaves the indexes current, not behind (a server once answered 503 in that moment).
        # Three rounds, 0.3 s in all, before calling it behind: another process's ingest between the
        # catalog's move and its writer lock showing (a CI run's live-serve test saw one such moment).
        for pause in (0.1, 0.2, 0.0):
            if self.is_indexed() or self.writer_active() or self.is_indexed():
                return
            time.sleep(pause)
        raise StoreError(f"the indexes of {self.path} are behind its catalog: run `kbtool index`")

    # ---- chunks and vectors --------------------------------------------------------------
    def chunks_for_index(self) -> list:
        """Every chunk's id, hash, text, prefix and metadata, as index embeds and analyses them."""
        return self.catalog.chunks_for_index()

    def cached_vectors(self, key: str, hashes: set[str]) -> dict:
        """content hash -> vector the embedding cache holds for model ``key`` (a spec's ``cache_key``)."""
        return self.catalog.cached_vectors(key, hashes)

    def cached_hashes(self, key: str, hashes: set[str]) -> set[str]:
        """Which of these content hashes the embedding cache holds a vector of for model ``key``."""
        return self.catalog.cached_hashes(key, hashes)

    def cache_vectors(self, key: str, items: list) -> None:
        """Keep (content hash, vector) pairs of model ``key`` in the embedding cache."""
        self.catalog.cache_vectors(key, items)

    def document_dating(self, doc_ids: list[str]) -> dict[str, tuple[dict, float | None]]:
        """doc_id -> (metadata, file mtime) of these documents: what their dates are read from."""
        return self.catalog.document_dating(doc_ids)

    def chunks_by_id(self, chunk_ids: list[str]) -> dict[str, dict]:
        return self.catalog.chunks_by_id(chunk_ids)


    def chunks(self, doc_id: str | None = None, over_limit: bool = False, gate=None) -> list[dict]:
        """What `kbtool chunks` shows, in catalog order: one document's chunks, or (``over_limit``)
        every chunk longer than the model's token limit; each with its section path, lines, token
        count, ``over_limit`` and ``embedded`` (the exact text embedded and BM25-indexed: section
        prefix and text). StoreError naming close ids for a document the store does not hold."""
        limit = self.token_limit()
        if doc_id is not None and self.document_text(doc_id) is None:
            import difflib

            close = difflib.get_close_matches(doc_id, self.document_ids(), n=3, cutoff=0.5)
            raise StoreError(f"store {self.path} has no document {doc_id!r}"
                             + (f": did you mean {', '.join(repr(c) for c in close)}?" if close
                                else ": `kbtool status` counts them, `kbtool chunks` lists them"))
        rows = self.catalog.chunk_listing(doc_id, limit if over_limit else None)
        if gate is not None:  # the sensitive rules' scan: each chunk as answers would show it
            rows = [dict(r) for r in rows]
            for r in rows:
                r["text"] = gate(r["text"], *self.source_window(r["doc_id"], r["char_start"], len(r["text"])))[0]
                r["prefix"] = gate(r["prefix"] or "")[0]
        return [{"chunk_id": r["chunk_id"], "doc_id": r["doc_id"], "n": r["ordinal"], "section_path": r["section_path"],
                 "page": r["page"], "lines": [r["line_start"], r["line_end"]] if r["line_start"] else None,
                 "line_source": json.loads(r["line_source"]) if r["line_source"] else None,
                 "tokens": r["n_tokens"], "limit": limit, "over_limit": r["n_tokens"] > limit,
                 "embedded": embed_text(r["prefix"], r["text"])} for r in rows]

    def chunk_metadata(self) -> list[tuple[str, str, dict]]:
        """(chunk_id, doc_id, metadata) of every chunk, read once per catalog generation."""
        cache, gen = self._meta_cache, self.generation()
        if cache[0] != gen:
            self._meta_cache = cache = (gen, self.catalog.chunk_metadata())
        return cache[1]

    def any_chunk_contains(self, phrase: str, chunk_ids: set[str] | None = None) -> bool:
        """Whether any chunk's text or section path (within ``chunk_ids``) holds ``phrase``, any case."""
        return any(chunk_ids is None or c in chunk_ids for c in self.catalog.chunks_containing(phrase.lower()))

    def embedding_texts(self) -> list[str]:
        """The distinct texts index embeds (section prefix + chunk text), in catalog order."""
        return list(dict.fromkeys(embed_text(p, t) for p, t in self.catalog.chunk_texts()))

    def chunk_vectors(self, chunk_ids: list[str] | None = None, name: str = "dense"):
        """chunk_id -> cached vector of dense retriever ``name``'s model, for these chunks (or every chunk)."""
        return self.catalog.chunk_vectors(self.embedding_spec(name).cache_key, chunk_ids)

    def dense_search(self, vectors, depth: int, doc_ids: list[str] | None = None,
                     name: str = "dense", *, allowed: set[str] | None = None,
                     extra: int = 0) -> list[list[tuple[str, float]]]:
        """Nearest chunks by cosine per query vector in dense retriever ``name``'s index, best first,
        ties by id. ``allowed`` (chunk ids a filter or access permits, ``doc_ids`` their documents,
        ``extra`` chunks of those documents the filter leaves out): only those, searched the way
        that is fast at the store's size (``kbtool.store.filtered``); without it, ``doc_ids``
        restricts the engine's search to these documents and ``depth`` counts every chunk of them."""
        self.check_dim(vectors, name=name)
        engine = self.search_engine(name)
        if allowed is None:
            return engine.search(vectors, depth + extra, doc_ids)
        return self._filtered.search(self, engine, name, vectors, depth, allowed, doc_ids, extra)

    def chunk_total(self) -> int:
        """How many chunks the catalog holds (read once per catalog generation)."""
        return self.memo("chunk_total", self.catalog.chunk_total)

    def memo(self, key, compute: Callable[[], object]):
        """``compute()``, once per catalog generation and ``key`` (at most 64 keys kept): what every
        query of a generation would otherwise work out again (chunk counts, a filter's scope)."""
        gen = self.generation()
        with self._memo_lock:
            gen_seen, held = self._memo
            if gen_seen != gen:
                held = {}
                self._memo = (gen, held)
            if key in held:
                return held[key]
        value = compute()  # outside the lock: two threads may both compute, one result is kept
        with self._memo_lock:
            if len(held) >= 64:
                held.pop(next(iter(held)))
            return held.setdefault(key, value)

    def metadata_groups(self) -> list[tuple[str, dict, list[str]]]:
        """(doc_id, metadata, chunk ids) per distinct metadata of each document, read once per
        catalog generation: a filter is decided once per group (3k groups for 100k chunks)."""
        cache, gen = self._groups_cache, self.generation()
        if cache[0] != gen:
            self._groups_cache = cache = (gen, self.catalog.metadata_groups())
        return cache[1]

    def has_bm25(self) -> bool:
        """Whether the store has a BM25 retriever: an index is there, or a rebuild is swapping one in
        (between its two renames only ``bm25.old`` and ``bm25.tmp`` exist; a reader asking then must
        not drop BM25 from a question's fusion — the reader loads after the swap, retrying once)."""
        d = self.path / "bm25"
        # Looked at once more last: a swap that completes between the first two looks (bm25 gone,
        # then bm25.tmp renamed in and bm25.old removed) left neither pair visible to this reader.
        return (BM25Index.exists(d) or (BM25Index.exists(d.with_name("bm25.old"))
                                        and BM25Index.exists(d.with_name("bm25.tmp"))) or BM25Index.exists(d))
    def bm25(self) -> BM25Index:
        """The BM25 index on disk; a long-lived Store reloads it after another process's rebuild."""
        with self._bm25_lock:  # a writer thread may drop self._bm25 at any moment: return our own
            self._bm25 = index = BM25Index.current(self.path / "bm25", self._bm25)
            return index

    def status(self) -> dict:
        self._refresh()
        m = self.manifest
        return {
            "store": str(self.path), "format_version": m["format_version"], "kbtool_version": m["kbtool_version"],
            **self.catalog.counts(self.token_limit()),
            "embedding": m["embedding"], "vectors": self.vectors_info(), "chunking": m["chunking"], "bm25": m["bm25"],
            "models": {f"dense:{n}": {**rec, "current": rec.get("indexed_generation") == self.generation()}
                       for n, rec in sorted(m.get("models", {}).items())},
            "analyzer": AnalyzerConfig.from_dict(m["analyzer"]).to_dict(),
            "indexes_current": self.is_indexed(), "last_ingest": m.get("last_ingest"),
            "sources": [{"root": root, **rec} for root, rec in sorted((m.get("sources") or {}).items())],
            "disk_bytes": sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file()),
        }
