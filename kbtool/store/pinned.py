"""A store read at one generation: what a long-lived reader (a server) answers from while another
process writes the next one.

An ingest writes in steps — the catalog first, then every model's vectors, then BM25, then the
manifest — and a reader that reads each part live meanwhile mixes generations (a catalog that lost
a page's old chunks under the old indexes; new BM25 statistics over old vectors). A ``PinnedStore``
holds all of one generation: the catalog as a snapshot (one read transaction, ``SnapshotCatalog``),
the manifest as read, the BM25 index loaded once, and Chroma through a client of its own whose HNSW
indexes are loaded when pinned (``vectors.private_client``). Filtered dense search never lets Chroma
filter (its ``where`` reads its live metadata, ``filtered.py``). ``consistent`` says whether what it
loaded — the manifest, every model's record, BM25 — holds the snapshot's generation; whether
anything moved while it loaded is the caller's to check (``serve.reload`` compares the store's
stamps before and after, and asks whether a writer is at work). Read-only: a write raises
StoreError. ``serve.reload`` swaps a new one in.

With the vectors on a Chroma server the vectors cannot be pinned: a reader sees them as written
(the catalog and BM25 still one generation; a hit the snapshot lacks is dropped, never a ghost).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path

from ..errors import StoreError
from . import Store
from . import manifest as mf
from .bm25 import BM25Index
from .catalog import Catalog, SnapshotCatalog


class PinnedStore(Store):
    """``PinnedStore.pin(path)``; ``close()`` ends its snapshot."""

    pinned = True
    _open_catalog = SnapshotCatalog

    def __init__(self, path: Path, manifest: mf.Manifest):
        self._client_lock = threading.Lock()
        self._client, self._held = None, None
        super().__init__(path, manifest)
        self.consistent = False

    @classmethod
    def pin(cls, path: str | Path) -> "PinnedStore":
        """The store at ``path`` as it is now, loaded whole (BM25, every model's vectors)."""
        path = Path(path)
        Catalog(path / "catalog.sqlite3").close()  # migrated (a snapshot never migrates) and checked readable
        store = cls(path, mf.read(path))
        try:
            store._load()
            store.consistent = store._one_generation()
        except BaseException:
            store.close()
            raise
        return store

    def _chroma_client(self):  # type: ignore[override]
        """One Chroma client for every collection of this view, its own (``vectors.private_client``)."""
        from .vectors import private_client

        with self._client_lock:
            if self._client is None:
                self._client = private_client(self.path / "chroma")
            return self._client

    def _load(self) -> None:
        """BM25 into memory, and every dense index searched once (Chroma loads an HNSW index on its
        first search and keeps it): from here on nothing is read from the index files."""
        import numpy as np

        self._held = BM25Index.current(self.path / "bm25", None) if BM25Index.exists(self.path / "bm25") else None
        if not self.chunk_total():
            return
        for name in self.dense_retrievers():
            one = self.chunk_vectors(self.catalog.first_chunk_ids(1), name=name)
            if one:
                self.vectors_for(name).search(np.stack(list(one.values())), 1)

    def _one_generation(self) -> bool:
        """The manifest, every model's record and the BM25 index loaded say they hold the snapshot's generation."""
        gen = self.catalog.generation()
        m = self.manifest
        held = self._held.loaded_state.get("generation") if self._held is not None else None
        return (m.get("indexed_generation") == gen
                and all(r.get("indexed_generation") == gen for r in m.get("models", {}).values())
                and (held == gen or (gen == 0 and self._held is None))
                and mf.bm25_built_with(m) == self.bm25_spec())

    # ---- one generation, read-only ---------------------------------------------------------
    def _refresh(self) -> None:
        pass  # the manifest as pinned

    def bm25(self) -> BM25Index:
        if self._held is None:
            raise StoreError(f"no BM25 index in {self.path}: run `kbtool index`")
        return self._held

    def has_bm25(self) -> bool:
        return self._held is not None

    def is_indexed(self) -> bool:
        return self.consistent

    @contextmanager
    def writing(self):
        raise StoreError(f"{self.path}: a pinned view of the store is read-only")
        yield  # pragma: no cover

    def close(self) -> None:
        """End the snapshot (a writer's WAL can be checkpointed past it) and stop the view's Chroma client."""
        from .vectors import close_private_client

        super().close()
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            close_private_client(client)
