"""Which vector engine a store uses, from its manifest: Chroma embedded (``vectors.py``) or a Chroma
server (``chroma_server.py``). Apart from both, so neither imports the other's chooser."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .chroma_server import ChromaServerVectors, check_record, describe
from .vectors import CatalogVectors, ChromaVectors, VectorIndex, collection_name

ENGINES = ("chroma", "chroma-server")  # the manifest's vectors.engine (no record: chroma, embedded)


def engine_of(manifest: dict) -> str:
    """The store's vector engine: ``chroma`` (embedded, in ``chroma/``; a store without a ``vectors``
    record) or ``chroma-server``; StoreError for one this kbtool does not know."""
    from ..errors import StoreError

    rec = manifest.get("vectors") or {}
    engine = rec.get("engine", "chroma") if isinstance(rec, dict) else None
    if engine not in ENGINES:
        raise StoreError(f"the store keeps its vectors in engine {engine!r}, which this kbtool does not know "
                         f"(it knows {', '.join(ENGINES)}): upgrade kbtool")
    if engine == "chroma-server":
        check_record(rec, "manifest.json")
    return engine


def describe_vectors(store_path: Path, manifest: dict, retrievers: Sequence[str] = ("dense",)) -> dict:
    """Where the store's vectors are (never credentials): engine, path or URL, tenant, database,
    and the collection of each dense retriever."""
    if engine_of(manifest) == "chroma-server":
        return describe(manifest["vectors"], retrievers)
    return {"engine": "chroma", "path": str(store_path / "chroma"),
            "collections": {r: collection_name(r) for r in retrievers}}


def open_vectors(store_path: Path, manifest: dict, catalog=None, cache_key=None,
                 retriever: str = "dense", client=None) -> VectorIndex:
    """The vector index of dense retriever ``retriever`` of the store in ``store_path``, as the
    manifest's engine says: a collection on a Chroma server (``chroma_server.py``), or of Chroma
    embedded in ``chroma/`` — or, where this process cannot write the store (Chroma opens its
    database for writing), ``CatalogVectors`` over the catalog's cached vectors of that model.
    ``client``: what makes the Chroma embedded client (None: chromadb's, shared per path in the process)."""
    from .files import readonly_error, writable

    if engine_of(manifest) == "chroma-server":
        return ChromaServerVectors(manifest["vectors"], manifest["hnsw"], retriever)
    chroma = store_path / "chroma"
    if catalog is not None and not writable(chroma if chroma.is_dir() else store_path):
        return CatalogVectors(chroma, catalog, cache_key, lambda: readonly_error(store_path, "writing vectors"))
    return ChromaVectors(chroma, manifest["hnsw"], collection_name(retriever), client)


def vectors_record(vectors: str | dict | None) -> dict | None:
    """The manifest's record of where a new store keeps its vectors (None: Chroma embedded), from a
    Chroma server's URL or ``{"url", "tenant", "database", "collection"}``."""
    if vectors is None:
        return None
    from .chroma_server import server_record

    if isinstance(vectors, str):
        return server_record(vectors)
    return server_record(vectors["url"], vectors.get("tenant"), vectors.get("database"), vectors.get("collection"))
