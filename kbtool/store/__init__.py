"""The store: one directory holding the manifest, the catalog, the vector index and the BM25 index.

``Store`` opens them, holds the writer lock, and is the only way anything is written: documents
and chunks into the catalog (the source of truth, ``catalog.py``), vectors through the
``VectorIndex`` (``vectors.py``), BM25 (``bm25.py``), settings in the manifest (``manifest.py``).
Bringing the indexes in line with the catalog is ``kbtool.index``; chunking is ``kbtool.chunk``.
A Store may be shared by threads: readers run concurrently, one writer at a time.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from .. import __version__
from ..errors import StoreError
from . import manifest as mf
from .bm25 import BM25Index
from .catalog import Catalog
from .chunks import ChunksView
from .documents import DocumentsView
from .engines import open_vectors
from .files import readonly_error, storage_error, writable, write_json
from .filtered import FilteredSearch
from .lock import WriterLock
from .models import ModelsView
from .vectors import VectorIndex

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


class Store(ModelsView, DocumentsView, ChunksView):
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

    def set_sources(self, sources: dict[str, dict]) -> None:
        with self.writing():
            self.manifest["sources"] = sources
            self.save_manifest()

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
