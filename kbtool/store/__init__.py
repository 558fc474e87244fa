"""The store: one directory holding the manifest, the catalog, the vector index and the BM25 index.

``Store`` opens them, holds the writer lock, and is the only way anything is written: documents
and chunks into the catalog (the source of truth, ``catalog.py``), vectors through the
``VectorIndex`` (``vectors.py``), BM25 (``bm25.py``), settings in the manifest (``manifest.py``).
Bringing the indexes in line with the catalog is ``kbtool.index``; chunking is ``kbtool.chunk``.
A Store may be shared by threads: readers run concurrently, one writer at a time.
"""

from __future__ import annotations

import json
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable

from .. import __version__
from ..document import RESERVED_META, check_metadata_keys, embed_text
from ..errors import StoreError
from . import manifest as mf
from .analyzer import Analyzer, AnalyzerConfig
from .bm25 import BM25Index
from .catalog import Catalog
from .files import readonly_error, storage_error, writable, write_json
from .lock import WriterLock
from .filtered import FilteredSearch
from .engines import describe_vectors, engine_of, open_vectors
from .vectors import VectorIndex, index_hash

DEFAULT_STORE = ".kb"


def default_store_path() -> Path:
    return Path(os.environ.get("KBTOOL_STORE") or DEFAULT_STORE)


def _vectors_record(vectors: str | dict | None) -> dict | None:
    if vectors is None:
        return None
    from .chroma_server import server_record

    if isinstance(vectors, str):
        return server_record(vectors)
    return server_record(vectors["url"], vectors.get("tenant"), vectors.get("database"), vectors.get("collection"))


class Store:
    """Open with ``Store.open(path)``; ``create=True`` makes a new store if none is there."""

    def __init__(self, path: Path, manifest: mf.Manifest):
        self.path, self.manifest, self._stamp = path, manifest, None
        self.catalog = Catalog(path / "catalog.sqlite3")
        self.vectors: VectorIndex = open_vectors(path, manifest, self.catalog, lambda: self.embedding_spec().cache_key)
        self._extra_vectors: dict[str, VectorIndex] = {}
        self._bm25: BM25Index | None = None
        self._bm25_lock = threading.Lock()
        self._meta_cache: tuple = (None, [])
        self._groups_cache: tuple = (None, [])
        self._memo: tuple = (None, {})
        self._memo_lock = threading.Lock()
        self._filtered = FilteredSearch()
        self._lock = WriterLock(path)
        self.lock_wait: float = 300.0  # seconds a writer waits for another one
        self.on_wait: Callable[[dict], None] | None = None  # told who holds the lock, before waiting

    @classmethod
    def open(cls, path: str | Path | None = None, *, create: bool = False, model=None,
             vectors: str | dict | None = None) -> "Store":
        """``model``: a new store's embedding model (name, path, ``openai:URL#name``, EmbeddingSpec).
        ``vectors``: where a new store keeps its vectors: None (Chroma embedded, in the store folder), a
        Chroma server's URL, or ``{"url", "tenant", "database", "collection"}`` (see ``chroma_server``);
        an existing store keeps what its manifest records (``vectors_differ`` compares)."""
        path = Path(path) if path else default_store_path()
        if not mf.check_folder(path, create):
            mf.create(path, model, __version__, _vectors_record(vectors))
        return cls(path, mf.read(path))

    def close(self) -> None:
        self.catalog.close()

    # ---- one writer at a time ------------------------------------------------------------
    @contextmanager
    def writing(self):
        """Hold the store's writer lock (re-entrant within a thread). Another writer — a process or
        a thread — waits up to ``lock_wait`` seconds, then StoreError names the holder. On entry
        the manifest is re-read: another process may have changed the store meanwhile. A full or
        read-only file system, or no permission, is a StoreFullError / StoreReadOnlyError."""
        if not writable(self.path):
            raise readonly_error(self.path)
        self._lock.wait, self._lock.on_wait = self.lock_wait, self.on_wait
        try:
            with self._lock.hold(self._reload):
                yield self
        except Exception as exc:
            if (known := storage_error(exc, self.path)) in (None, exc):
                raise
            raise known from None

    def _reload(self) -> None:
        self.manifest = mf.read(self.path)
        self._bm25 = None

    def _refresh(self) -> None:
        """Re-read a manifest another writer replaced, unless a thread of this Store is writing."""
        with self._lock.idle() as idle:
            if idle and self._stamp != (now := mf.stamp(self.path)):
                self.manifest, self._stamp = mf.read(self.path), now

    def save_manifest(self) -> None:
        self.manifest["kbtool_version"] = __version__
        write_json(self.path / "manifest.json", self.manifest)
        self._filtered.clear()  # vectors were written (index, --rebuild, a model added or dropped): held ones may be stale

    def writer_active(self) -> bool:
        """Whether another process, or another thread of this one, holds the writer lock."""
        return self._lock.held_elsewhere()

    # ---- settings ------------------------------------------------------------------------
    @property
    def model_id(self) -> str:
        return self.manifest["embedding"]["model"]

    def embedding_spec(self, name: str = "dense"):
        """The ``EmbeddingSpec`` the vectors of dense retriever ``name`` were (or will be) made with:
        ``dense`` (the store's model) or ``dense:NAME`` (a model added by ``index --add-model``)."""
        from ..embed import EmbeddingSpec

        return EmbeddingSpec.from_manifest(self.model_record(name))

    def model_record(self, name: str = "dense") -> dict:
        """The manifest record of dense retriever ``name``; StoreError if the store has no such model."""
        if name == "dense":
            return self.manifest["embedding"]
        rec = self.manifest.get("models", {}).get(name.removeprefix("dense:"))
        if rec is None or not name.startswith("dense:"):
            have = ", ".join(self.dense_retrievers())
            raise StoreError(f"store {self.path} has no embedding model {name!r} (it has: {have}): add one with "
                             f"`kbtool index --add-model MODEL`")
        return rec

    def dense_retrievers(self) -> list[str]:
        """The names of the store's dense retrievers: ``dense``, then ``dense:NAME`` per added model."""
        return ["dense"] + [f"dense:{n}" for n in sorted(self.manifest.get("models", {}))]

    def check_model(self, model, name: str = "dense") -> None:
        mf.check_model({"embedding": self.model_record(name)}, model, self.path)

    def check_dim(self, vectors, where: str = "query", name: str = "dense") -> None:
        mf.check_dim({"embedding": self.model_record(name)}, vectors, self.path, where,
                     *(() if name == "dense" else ("`kbtool index --rebuild` (re-embeds every model)",)))

    # ---- further embedding models (dense:NAME) -------------------------------------------
    def vectors_for(self, name: str = "dense") -> VectorIndex:
        """The vector index of dense retriever ``name`` (its own Chroma collection)."""
        if name == "dense":
            return self.vectors
        self.model_record(name)  # StoreError for a model the store does not have
        if name not in self._extra_vectors:
            self._extra_vectors[name] = open_vectors(self.path, self.manifest, self.catalog,
                                                     lambda: self.embedding_spec(name).cache_key, retriever=name)
        return self._extra_vectors[name]

    def add_model(self, model, name: str | None = None) -> str:
        """Record a further embedding model (name, path, ``use-m``, ``openai:URL#name`` or spec) as dense
        retriever ``dense:NAME``; its vectors are made by the next ``index``. Returns the retriever name."""
        from ..embed import check_available

        spec = mf.spec_of(model)
        name = mf.model_slug(name or mf.default_model_name(spec))
        check_available(spec)  # fail before anything is written
        with self.writing():
            models = self.manifest.setdefault("models", {})
            if spec.model == self.model_id:
                raise StoreError(f"{spec.model} is already the store's model (retriever dense): nothing to add")
            for other, rec in models.items():
                if rec["model"] == spec.model and other != name:
                    raise StoreError(f"{spec.model} is already in store {self.path} as dense:{other}")
            if name in models:
                if models[name]["model"] != spec.model:
                    raise StoreError(f"dense:{name} is {models[name]['model']}, not {spec.model}: drop it first "
                                     f"(`kbtool index --drop-model {name}`) or choose another name")
                return f"dense:{name}"
            # A collection left by a crash between a drop's manifest write and its collection drop
            # holds another model's vectors under the same hashes: never reuse it.
            # (No chroma/: nothing left over; opening Chroma would make an empty one, which the
            # store would take for its vectors.)
            if self._vectors_made() and (self._on_server() or writable(self.path / "chroma")):
                open_vectors(self.path, self.manifest, retriever=f"dense:{name}").drop()
            models[name] = {**mf.embedding_record(spec), "indexed_generation": -1}
            self.save_manifest()
        return f"dense:{name}"

    def _on_server(self) -> bool:
        return engine_of(self.manifest) != "chroma"

    def _vectors_made(self) -> bool:
        """Whether the vector engine may hold collections: a server, or ``chroma/`` on disk."""
        return self._on_server() or (self.path / "chroma").is_dir()

    def vectors_info(self) -> dict:
        """Where the vectors are: engine, path or URL, tenant, database, each retriever's collection
        (never credentials)."""
        return describe_vectors(self.path, self.manifest, self.dense_retrievers())

    def suggest_multilingual(self, at_least: float = 0.1) -> float | None:
        """The share of chunks holding CJK text, when it is ``at_least`` and the store has no model that
        reads it (an added model, or a primary model other than the bundled English one) — said once
        per store: the manifest remembers it was said. None otherwise."""
        from ..embed import DEFAULT_MODEL
        from .analyzer import CJK

        m = self.manifest
        if m.get("models") or m["embedding"]["model"] != DEFAULT_MODEL or m.get("said_multilingual"):
            return None
        texts = [t for _, t in self.catalog.chunk_texts()]
        share = sum(1 for t in texts if CJK.search(t)) / len(texts) if texts else 0.0
        if share < at_least:
            return None
        with self.writing():
            self.manifest["said_multilingual"] = True
            self.save_manifest()
        return share

    def drop_model(self, name: str) -> bool:
        """Remove dense retriever ``dense:NAME`` and its vectors; False if the store has no such model.
        The manifest forgets it first: a kill before the collection is dropped leaves no index that
        counts (``add_model`` drops a leftover collection of the same name)."""
        name = name.removeprefix("dense:")
        with self.writing():
            models = self.manifest.get("models", {})
            if name not in models:
                return False
            vectors = self.vectors_for(f"dense:{name}")
            del models[name]
            self.save_manifest()
            self._extra_vectors.pop(f"dense:{name}", None)
            if self._vectors_made():  # else no vectors to drop: opening Chroma would make an empty chroma/
                vectors.drop()
        return True

    def set_stemmer(self, name: str | None) -> bool:
        """Choose the BM25 stemmer ('english', ... or None); True if it changed. Next index rebuilds BM25."""
        from .analyzer import _stemmer

        name = None if name in (None, "", "none") else name
        _stemmer(name)  # unknown names fail here, before anything is written
        with self.writing():
            if self.manifest["analyzer"].get("stemmer") == name:
                return False
            if BM25Index.exists(self.path / "bm25"):
                self.manifest["bm25_built_with"] = mf.bm25_built_with(self.manifest)
            self.manifest["analyzer"] = {**self.manifest["analyzer"], "stemmer": name}
            self.save_manifest()
            return True

    def bm25_spec(self) -> dict:
        return mf.bm25_spec(self.manifest)

    @property
    def analyzer(self) -> Analyzer:
        return Analyzer(AnalyzerConfig.from_dict(self.manifest["analyzer"]))

    # ---- state ---------------------------------------------------------------------------
    def generation(self) -> int:
        return self.catalog.generation()

    def index_targets(self) -> dict[str, str]:
        """chunk_id -> index hash of every catalog chunk: what both indexes must hold."""
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

    # ---- documents -----------------------------------------------------------------------
    def document_hashes(self) -> dict[str, tuple[str, str]]:
        """doc_id -> (root, fingerprint of content, run metadata and parse options)."""
        return self.catalog.document_hashes()

    def document_options(self, doc_id: str) -> dict:
        """The parse options stored with a document (run metadata, markup rules, includes)."""
        return self.catalog.document_options(doc_id)

    def put_document(self, doc, root: str, metadata: dict | None = None, options: dict | None = None) -> None:
        """Insert or replace a parsed document; its old chunks go and it awaits chunking."""
        check_metadata_keys(metadata or {})
        self.catalog.put_document(doc, root, json.dumps(metadata or {}, sort_keys=True),
                                  json.dumps([b.to_dict() for b in doc.blocks], ensure_ascii=False),
                                  json.dumps(options or {}, sort_keys=True), mf.now_iso())

    def move_root(self, old: str, new: str) -> int:
        """Documents ingested from folder ``old`` now come from ``new`` (the same files moved): ids,
        chunks and vectors are kept, the source record follows. Returns how many documents moved."""
        with self.writing():
            sources = self.manifest.setdefault("sources", {})
            if old in sources:  # the record first: a kill before the catalog moves leaves both, and the next run moves again
                sources[new] = {**sources[old], **({"root": new} if "root" in sources[old] else {})}
                self.save_manifest()
            n = self.catalog.move_root(old, new)
            sources.pop(old, None)
            self.save_manifest()
            return n

    def document_roots(self) -> dict[str, int]:
        """Ingest root (absolute folder, or ``beir:FOLDER``) -> number of documents from it."""
        return self.catalog.document_roots()

    def document_paths(self, root: str) -> list[str]:
        """The file paths of the documents ingested from ``root``."""
        return self.catalog.document_paths(root)

    def document_files(self) -> dict[str, str]:
        """doc_id -> the path of the file it was ingested from."""
        return self.catalog.document_files()

    def sources(self) -> dict[str, dict]:
        """The folders this store was ingested from, with the options each was ingested with
        (``ingest`` records them; an ingest without a path ingests them again)."""
        self._refresh()
        return dict(self.manifest.get("sources") or {})

    def set_sources(self, sources: dict[str, dict]) -> None:
        with self.writing():
            self.manifest["sources"] = sources
            self.save_manifest()

    def published(self, root: str | None) -> tuple[str, str | None]:
        """(id prefix, base URL) of the source a document of ``root`` comes from."""
        rec = (self.manifest.get("sources") or {}).get(root or "") or {}
        return rec.get("id_prefix") or "", rec.get("base_url")

    def remove_documents(self, doc_ids: Iterable[str]) -> int:  # how many were there
        return self.catalog.remove_documents(doc_ids)

    def document_for_chunking(self, doc_id: str) -> dict | None:
        """title, blocks, filetype and metadata of a document, as chunking needs them."""
        return self.catalog.document_for_chunking(doc_id)

    def replace_chunks(self, doc_id: str, rows: list[tuple], params) -> None:
        """A document's new chunk rows (catalog column order), recorded as chunked with ``params``."""
        self.catalog.replace_chunks(doc_id, rows, json.dumps(params.to_dict(), sort_keys=True))

    def documents_to_chunk(self, params=None) -> list[str]:
        """Documents not chunked yet, or (with ``ChunkParams``) not chunked with these parameters."""
        return self.catalog.documents_to_chunk(json.dumps(params.to_dict(), sort_keys=True) if params else "")

    def document_ids(self) -> list[str]:  # sorted
        return self.catalog.document_ids()

    def document_info(self, doc_id: str) -> dict | None:
        """doc_id, root, path, sha256, title, filetype and parsed text of a document, or None."""
        return self.catalog.document_info(doc_id)

    def reopen(self) -> None:
        """Take in what other processes wrote: manifest, BM25 and every vector index read afresh.
        For a long-lived Store (a server), between requests (see ``kbtool.serve.service``)."""
        self.manifest, self._stamp = mf.read(self.path), mf.stamp(self.path)
        with self._bm25_lock:
            self._bm25 = None
        self.vectors.reopen()
        self._filtered.clear()
        for v in self._extra_vectors.values():
            v.reopen()
        self._extra_vectors.clear()

    def document_text(self, doc_id: str) -> str | None:  # None: the store does not hold it
        return self.catalog.document_text(doc_id)

    def metadata_keys(self) -> set[str]:
        """Every metadata key of the store's documents (a filter on another key is an error). Read
        once per catalog generation: every filtered query asks (2 ms of SQL on 1,400 documents)."""
        gen = self.generation()
        cached = getattr(self, "_keys_cache", None)
        if cached is None or cached[0] != gen:
            cached = self._keys_cache = (gen, frozenset((RESERVED_META - {"index_hash"}) | self.catalog.metadata_keys()))
        return set(cached[1])

    # ---- chunks and vectors --------------------------------------------------------------
    def document_dating(self, doc_ids: list[str]) -> dict[str, tuple[dict, float | None]]:
        """doc_id -> (metadata, file mtime) of these documents: what their dates are read from."""
        return self.catalog.document_dating(doc_ids)

    def chunks_by_id(self, chunk_ids: list[str]) -> dict[str, dict]:
        return self.catalog.chunks_by_id(chunk_ids)

    def token_limit(self) -> int:
        """The store's model's token limit (256 until the first index records it): chunks longer are
        cut by the model."""
        return self.manifest["embedding"].get("max_tokens") or 256

    def chunks(self, doc_id: str | None = None, over_limit: bool = False) -> list[dict]:
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
        return [{"chunk_id": r["chunk_id"], "doc_id": r["doc_id"], "n": r["ordinal"], "section_path": r["section_path"],
                 "page": r["page"], "lines": [r["line_start"], r["line_end"]] if r["line_start"] else None,
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
        engine = self.vectors_for(name)
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
        return BM25Index.exists(d) or (BM25Index.exists(d.with_name("bm25.old"))
                                       and BM25Index.exists(d.with_name("bm25.tmp")))
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

