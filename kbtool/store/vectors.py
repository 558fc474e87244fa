"""The vector index behind a small interface, and its first engine: Chroma embedded.

``VectorIndex`` is all the rest of kbtool asks of a vector engine: upsert, delete, what it holds
(ids and the index hash each was written with), get vectors, search with a document filter,
count, drop. ``ChromaVectors`` (Chroma embedded) and its subclass ``chroma_server.ChromaServerVectors``
(a Chroma server: only the client differs) are the only code of kbtool that imports chromadb;
``open_vectors`` chooses the engine from the manifest.

Every vector is written with explicit embeddings and searched with explicit query embeddings:
Chroma's default embedding function would download a model.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Protocol, Sequence

import numpy as np

COLLECTION = "chunks"
# Chroma's HNSW defaults (search ef 10) lose recall badly; `make bench` measures recall@k of these.
HNSW = {"space": "cosine", "ef_construction": 200, "ef_search": 128, "max_neighbors": 32}
_BATCH = 5000  # Chroma refuses batches over 5461


def index_hash(content_hash: str, meta: str) -> str:
    """What a vector is written with: its text's hash and its metadata (a metadata change rewrites it)."""
    import hashlib

    return hashlib.sha256((content_hash + meta).encode()).hexdigest()[:32]


class VectorIndex(Protocol):
    def exists(self) -> bool: ...
    def count(self) -> int: ...
    def indexed(self) -> dict[str, str]: ...  # chunk_id -> index hash it was written with
    def upsert(self, ids: list[str], vectors: np.ndarray, metadatas: list[dict]) -> None: ...
    def delete(self, ids: list[str]) -> None: ...
    def get(self, ids: list[str]) -> dict[str, np.ndarray]: ...
    def search(self, vectors, depth: int, doc_ids: Sequence[str] | None = None) -> list[list[tuple[str, float]]]: ...
    def drop(self) -> None: ...
    def verify(self, wanted: dict[str, str], dim: int | None) -> dict: ...


def import_chromadb():
    """``chromadb``, whose import reads its ``CHROMA_*`` settings from the environment: one it refuses
    (``CHROMA_SERVER_HEADERS`` not a JSON object of strings) is a StoreError naming the setting,
    never its value (it may hold a token)."""
    try:
        import chromadb
    except ValueError as exc:
        raise settings_error(exc) from None
    return chromadb


def settings_error(exc: ValueError):
    """The StoreError of chromadb settings from the environment it refuses: where and why, no value."""
    from ..errors import StoreError

    errors = getattr(exc, "errors", None)
    if callable(errors):  # pydantic's ValidationError: its text repeats the input (input_value=...)
        why = "; ".join(f"{'.'.join(map(str, e.get('loc', ()))) or 'settings'}: {e.get('msg', '')}" for e in errors())
    else:
        why = " ".join(str(exc).split())[:160]
    return StoreError(f"the Chroma client settings from the environment (CHROMA_*) are invalid: {why}")


class ChromaVectors:
    """Chroma embedded (``PersistentClient``) in ``path``; cosine space, HNSW settings from the manifest.
    Safe across threads: the client is made once, under a lock."""

    def __init__(self, path: Path, hnsw: dict, collection: str = COLLECTION, client: Callable | None = None):
        self.path = path
        self.hnsw = dict(hnsw)
        self.name = collection
        self._make_client = client  # None: chromadb's client of the path, shared in the process
        self._collection = None
        self._client = None
        self._lock = threading.Lock()

    def exists(self) -> bool:
        return self.path.is_dir()

    def _col(self):
        with self._lock:
            if self._collection is None:
                try:
                    self._client = self._connect()
                    self._collection = self._client.get_or_create_collection(
                        self.name, configuration={"hnsw": dict(self.hnsw)}, embedding_function=None)
                except Exception:
                    self._client = None
                    self._failed()
                    raise
            return self._collection

    def _connect(self):
        """The chromadb client: the one thing an engine of this class makes its own way (a server's
        subclass, ``chroma_server.ChromaServerVectors``, makes an ``HttpClient``)."""
        if self._make_client is not None:
            return self._make_client()
        from .._env import setup_offline_env

        setup_offline_env()
        chromadb = import_chromadb()
        from chromadb.config import Settings

        if not self.path.is_dir():
            # chromadb caches clients per path in the process: a folder deleted under it would
            # still look full. Start from what is on disk.
            from chromadb.api.client import SharedSystemClient

            SharedSystemClient.clear_system_cache()
        return chromadb.PersistentClient(path=str(self.path), settings=Settings(anonymized_telemetry=False))

    def _failed(self) -> None:
        """After a failed connect: a client that failed to start (a full disk) stays in chromadb's
        per-path cache, broken: the next try in this process (after space is freed) must start afresh."""
        try:
            from chromadb.api.client import SharedSystemClient
        except ValueError:  # chromadb refused its settings on import (``import_chromadb``): no client was made
            return

        SharedSystemClient.clear_system_cache()

    def _on(self, op: Callable):
        """``op(collection)``. A collection another process dropped and made again (``index
        --rebuild``, ``--drop-model`` then ``--add-model``) is looked up afresh, once: a Store kept
        open (a server) otherwise holds a handle of a collection that no longer exists."""
        try:
            return op(self._col())
        except Exception as exc:
            if type(exc).__name__ != "NotFoundError":
                raise
            with self._lock:
                self._collection = None
            return op(self._col())

    def count(self) -> int:
        return self._on(lambda col: col.count())

    def indexed(self) -> dict[str, str]:
        def read(col) -> dict[str, str]:
            out: dict[str, str] = {}
            offset = 0
            while True:
                got = col.get(include=["metadatas"], limit=_BATCH, offset=offset)
                for cid, meta in zip(got["ids"], got["metadatas"]):
                    out[cid] = (meta or {}).get("index_hash", "")
                if len(got["ids"]) < _BATCH:
                    return out
                offset += _BATCH

        return self._on(read)

    def upsert(self, ids: list[str], vectors: np.ndarray, metadatas: list[dict]) -> None:
        def write(col) -> None:
            for start in range(0, len(ids), _BATCH):
                end = start + _BATCH
                col.upsert(ids=ids[start:end], embeddings=np.asarray(vectors[start:end], dtype=np.float32),
                           metadatas=metadatas[start:end])

        self._on(write)

    def delete(self, ids: list[str]) -> None:
        def remove(col) -> None:
            for start in range(0, len(ids), _BATCH):
                col.delete(ids=ids[start : start + _BATCH])

        self._on(remove)

    def get(self, ids: list[str]) -> dict[str, np.ndarray]:
        got = self._on(lambda col: col.get(ids=list(ids), include=["embeddings"]))
        vecs = got["embeddings"] if got["embeddings"] is not None else []
        return {cid: np.asarray(v, dtype=np.float32) for cid, v in zip(got["ids"], vecs)}

    def search(self, vectors, depth: int, doc_ids: Sequence[str] | None = None) -> list[list[tuple[str, float]]]:
        """Nearest chunks by cosine for each query vector, best first, ties by id; ``doc_ids``
        restricts the search to these documents (inside Chroma, before ranking)."""
        def query(col):
            # No count() first (a round trip, 3 ms of a 30 ms query): chromadb returns what there is
            # when asked for more, and nothing from an empty collection.
            if doc_ids is not None and not doc_ids:
                return [[] for _ in range(len(vectors))]
            where = {"doc_id": {"$in": list(doc_ids)}} if doc_ids is not None else None
            return col.query(query_embeddings=vectors, n_results=depth, where=where, include=["distances"])

        res = self._on(query)
        if isinstance(res, list):
            return res
        return [sorted(((cid, 1.0 - float(d)) for cid, d in zip(ids, dists)), key=lambda x: (-x[1], x[0]))
                for ids, dists in zip(res["ids"], res["distances"])]

    def drop(self) -> None:
        self._col()
        with self._lock:
            try:
                self._client.delete_collection(self.name)
            except Exception:  # never created (an added model not indexed yet)
                if self.name == COLLECTION:
                    raise
            self._collection = None

    def verify(self, wanted: dict[str, str], dim: int | None) -> dict:
        """What the index holds against what it should (chunk_id -> index hash): missing, ghost and
        stale ids, and the width of a stored vector."""
        have = self.indexed()
        out = {
            "held": len(have),
            "missing": [c for c in wanted if c not in have],
            "ghosts": [c for c in have if c not in wanted],
            "stale": [c for c in wanted if c in have and have[c] != wanted[c]],
            "dim": None,
        }
        if have and dim:
            sample = self.get([next(iter(have))])
            out["dim"] = len(next(iter(sample.values()))) if sample else None
        return out


class CatalogVectors:
    """The read-only engine of a store this process cannot write (a read-only file system, another
    user's store: Chroma cannot open its database there): exact cosine search over the vectors the
    catalog's embedding cache holds for the store's chunks — the very vectors ``index`` wrote to
    Chroma. Loaded once per catalog generation; any write raises StoreReadOnlyError."""

    def __init__(self, path: Path, catalog, cache_key, on_write):
        self.path, self._catalog, self._key, self._on_write = path, catalog, cache_key, on_write
        self._loaded: tuple = (None, [], [], np.zeros((0, 0), dtype=np.float32))
        self._lock = threading.Lock()

    def _matrix(self):
        gen = self._catalog.generation()
        with self._lock:
            if self._loaded[0] != gen:
                vecs = self._catalog.chunk_vectors(self._key())
                docs = {cid: doc for cid, doc, _meta in self._catalog.chunk_metadata()}
                ids = sorted(vecs)
                m = np.stack([vecs[c] for c in ids]).astype(np.float32) if ids else np.zeros((0, 0), np.float32)
                if len(m):
                    m /= np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
                self._loaded = (gen, ids, [docs.get(c) for c in ids], m)
            return self._loaded[1:]

    def exists(self) -> bool:
        return self.path.is_dir()

    def count(self) -> int:
        return len(self._matrix()[0])

    def indexed(self) -> dict[str, str]:
        have = set(self._matrix()[0])
        return {r[0]: index_hash(r[1], r[2]) for r in self._catalog.chunk_hashes() if r[0] in have}

    def get(self, ids: list[str]) -> dict[str, np.ndarray]:
        vecs = self._catalog.chunk_vectors(self._key(), list(ids))
        return {c: np.asarray(v, dtype=np.float32) for c, v in vecs.items()}

    def search(self, vectors, depth: int, doc_ids: Sequence[str] | None = None) -> list[list[tuple[str, float]]]:
        ids, docs, m = self._matrix()
        if doc_ids is None:
            keep, searched = np.arange(len(ids)), m
        else:  # the rows of the permitted documents, taken once
            wanted = set(doc_ids)
            keep = np.array([i for i, d in enumerate(docs) if d in wanted], dtype=int)
            searched = m[keep] if len(keep) else m
        out = []
        for q in np.asarray(vectors, dtype=np.float32):
            if not len(keep):
                out.append([])
                continue
            scores = searched @ (q / max(float(np.linalg.norm(q)), 1e-12))
            out.append(sorted(((ids[keep[i]], float(scores[i])) for i in _top(scores, depth)),
                              key=lambda x: (-x[1], x[0])))
        return out

    def verify(self, wanted: dict[str, str], dim: int | None) -> dict:
        return ChromaVectors.verify(self, wanted, dim)  # type: ignore[arg-type]

    def upsert(self, ids, vectors, metadatas) -> None:
        raise self._on_write()

    def delete(self, ids) -> None:
        if ids:
            raise self._on_write()

    def drop(self) -> None:
        raise self._on_write()


def _top(scores: np.ndarray, depth: int) -> np.ndarray:
    """Rows of the ``depth`` best scores, best first, ties by row (as a stable sort of all of them,
    without sorting all of them: every row tied with the depth-th score is kept until the sort)."""
    if len(scores) > depth:
        part = np.argpartition(-scores, depth - 1)[:depth]
        rows = np.flatnonzero(scores >= scores[part].min())
    else:
        rows = np.arange(len(scores))
    return rows[np.lexsort((rows, -scores[rows]))][:depth]


_CLIENTS = threading.Lock()


def private_client(path: Path):
    """A Chroma embedded client of ``path`` of its own: its HNSW indexes loaded when first searched and
    kept, blind to later writes — never shared with (nor replaced by) another client of the path in
    this process, as chromadb's clients otherwise are. A server's view of one generation
    (``pinned.PinnedStore``) searches with it while a newer one is loaded beside it."""
    from .._env import setup_offline_env

    setup_offline_env()
    chromadb = import_chromadb()
    from chromadb.api.client import SharedSystemClient
    from chromadb.config import Settings

    with _CLIENTS:  # chromadb shares a client per path through this cache: made with it empty, left empty
        SharedSystemClient.clear_system_cache()
        try:
            client = chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False))
            # its system, for close_private_client (the client finds it through the cache, emptied now)
            client.kbtool_system = next(iter(SharedSystemClient._identifier_to_system.values()), None)
            return client
        finally:
            SharedSystemClient.clear_system_cache()


def close_private_client(client) -> None:
    """Stop what a ``private_client`` started (its database connections, its loaded indexes): chromadb's
    ``close()`` stops a system through the shared cache, which never held this one. A server swapping
    views held ~3.5 MB more per swap without it."""
    system = getattr(client, "kbtool_system", None)
    if system is not None:
        try:
            system.stop()
        except Exception:  # noqa: BLE001 - stopping is best effort: the view is gone either way
            pass


def collection_name(retriever: str) -> str:
    """The Chroma collection of a dense retriever: ``chunks`` for the store's model (``dense``),
    ``chunks-NAME`` for a model added as ``dense:NAME``."""
    return COLLECTION if retriever == "dense" else f"{COLLECTION}-{retriever.removeprefix('dense:')}"
