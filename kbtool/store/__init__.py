"""The store: one directory holding the manifest, the catalog, the vector index and the BM25 index.

``Store`` opens them, holds the writer lock, and is the only way anything is written: documents
and chunks into the catalog (the source of truth, ``catalog.py``), vectors through the
``VectorIndex`` (``vectors.py``), BM25 (``bm25.py``), settings in the manifest (``manifest.py``).
Here: open, the writer lock, and every manifest write; what ``Store`` reads (and the catalog writes
it passes on) is in ``models.py``, ``documents.py`` and ``chunks.py``, whose views it inherits.
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
from . import held
from . import manifest as mf
from .bm25 import BM25Index, effective_params
from .catalog import Catalog
from .chunks import ChunksView
from .documents import DocumentsView
from .engines import open_vectors, vectors_record
from .files import readonly_error, storage_error, writable, write_json
from .filtered import FilteredSearch
from .lock import WriterLock
from .models import ModelsView, check_addition, check_new_model, check_vectors
from .vectors import VectorIndex

DEFAULT_STORE = ".kb"


def default_store_path() -> Path:
    return Path(os.environ.get("KBTOOL_STORE") or DEFAULT_STORE)


class Store(ModelsView, DocumentsView, ChunksView):
    """Open with ``Store.open(path)``; ``create=True`` makes a new store if none is there."""

    _open_catalog, _chroma_client = Catalog, None  # a PinnedStore's (``pinned.py``): a snapshot, its own client

    def __init__(self, path: Path, manifest: mf.Manifest):
        self.path, self.manifest, self._stamp = path, manifest, None
        self.catalog = self._open_catalog(path / "catalog.sqlite3")
        self.vectors: VectorIndex = open_vectors(path, manifest, self.catalog, lambda: self.embedding_spec().cache_key,
                                                 client=self._chroma_client)
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
        an existing store keeps what its manifest records: ``vectors`` naming another is a UsageError."""
        path = Path(path) if path else default_store_path()
        if not mf.check_folder(path, create):
            mf.create(path, model, __version__, vectors_record(vectors))
        store = cls(path, mf.read(path))
        check_vectors(store, {"url": vectors} if isinstance(vectors, str) else vectors)
        return store

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
                self.__dict__.pop("_scans", None)  # another process indexed: scans reload (models.search_engine)

    def save_manifest(self) -> None:
        self.manifest["kbtool_version"] = __version__
        write_json(self.path / "manifest.json", self.manifest)
        self._filtered.clear()  # vectors were written (index, --rebuild, a model added or dropped): held ones may be stale
        self.__dict__.pop("_scans", None)

    def writer_active(self) -> bool:
        """Whether another process, or another thread of this one, holds the writer lock."""
        return self._lock.held_elsewhere()

    def add_model(self, model, name: str | None = None) -> str:
        """Record a further embedding model (name, path, ``use-m``, ``openai:URL#name`` or spec) as dense
        retriever ``dense:NAME``; its vectors are made by the next ``index``. Returns the retriever name.
        A model new to the store must embed a text first (``models.check_new_model``)."""
        spec, name = check_new_model(self, model, name)
        with self.writing():
            models = self.manifest.setdefault("models", {})
            if check_addition(self, spec, name):  # the same model under the same name: nothing to do
                return f"dense:{name}"
            # A collection left by a crash between a drop's manifest write and its collection drop
            # holds another model's vectors under the same hashes: never reuse it. (No chroma/: nothing
            # left over; opening Chroma would make an empty one, taken for the store's vectors.)
            if self._vectors_made() and (self._on_server() or writable(self.path / "chroma")):
                held.forget(self, f"dense:{name}")
                open_vectors(self.path, self.manifest, retriever=f"dense:{name}").drop()
            models[name] = {**mf.embedding_record(spec), "indexed_generation": -1}
            self.save_manifest()
        return f"dense:{name}"

    def suggest_multilingual(self, at_least: float = 0.1) -> float | None:
        """``cjk_share()`` when it is ``at_least``, said once per store: the manifest remembers it was said."""
        share = self.cjk_share()
        if share is None or share < at_least:
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
            held.forget(self, f"dense:{name}")
            if self._vectors_made():  # else no vectors to drop: opening Chroma would make an empty chroma/
                vectors.drop()
        return True

    def set_stemmer(self, name: str | None) -> bool:
        """Choose the BM25 stemmer ('english', ... or None); True if it changed. Next index rebuilds BM25."""
        from .analyzer import stemmer

        name = None if name in (None, "", "none") else name
        stemmer(name)  # unknown names fail here, before anything is written
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

    def record_ingest(self, markup: dict | None, absorbed: list[str]) -> None:
        """An ingest ran: its Markdown rules, the records of folders ``absorbed`` by one ingested dropped, its time."""
        if markup is not None:
            self.manifest["markup"] = markup
        for root in absorbed:
            self.manifest["sources"].pop(root)
        self.manifest["last_ingest"] = mf.now_iso()
        self.save_manifest()

    def record_chunking(self, params: dict) -> None:
        """The chunking parameters in use (``ChunkParams.to_dict()``), saved before any chunk is written."""
        if self.manifest.get("chunking") != params:
            self.manifest["chunking"] = params
            self.save_manifest()

    # ---- what index writes: stale first, current last ---------------------------------------
    def mark_stale(self, spec) -> None:
        """Before a rebuild with ``spec``: no index is current (an interrupted rebuild must not look
        current), and no model's width is known (a name may now serve another model)."""
        self.manifest["indexed_generation"] = -1
        self.manifest["embedding"] = mf.embedding_record(spec)
        for rec in self.manifest.get("models", {}).values():
            rec["indexed_generation"] = -1
            rec["dim"] = None
        self.save_manifest()

    def drop_vectors(self, name: str = "dense") -> None:
        """Drop dense retriever ``name``'s collection (a rebuild), its record first (``held``)."""
        held.forget(self, name)
        self.vectors_for(name).drop()

    def mark_indexed(self, generation: int, name: str = "dense") -> None:
        """Dense retriever ``name`` (``dense``: with BM25) holds catalog ``generation``; saved."""
        (self.manifest if name == "dense" else self.model_record(name))["indexed_generation"] = generation
        self.save_manifest()

    def record_embedding(self, name: str, fields: dict) -> None:
        """What embedding with ``name``'s model showed (URL, width, limit, runtime); saved by ``mark_indexed``."""
        self.model_record(name).update(fields)

    def record_bm25(self, built_with: dict | None = None) -> dict:
        """Without ``built_with``: the BM25 parameters move to the current ones (a robertson store to
        Lucene's IDF); returns what the index on disk was built with. With it: the index holds that."""
        if built_with is not None:
            self.manifest["bm25_built_with"] = built_with
            return built_with
        before = mf.bm25_built_with(self.manifest)
        self.manifest["bm25"] = effective_params(self.manifest["bm25"])
        return before
