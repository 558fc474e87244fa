"""The record of what each vector collection holds, so that a sync which changes nothing (or one
file) never lists the whole collection: at 100k chunks listing Chroma's ids and hashes took 4.6 s
of a 7.1 s unchanged re-ingest.

Per dense retriever (``dense``, ``dense:NAME``): the chunk ids its collection holds and the index
hash each was written with, the collection's identity (engine, collection, model) and the catalog
generation it was written at. It is kept in the catalog (two tables the first writer makes,
``catalog.py``), not in a file beside Chroma: one SQLite transaction writes the rows and the state together (a kill mid-write
rolls back to the state before it), a one-file change writes its few rows instead of rewriting a
6 MB file, and the catalog's own generation is read from the same database.

The record only ever claims what the collection holds. Before any vector write it is marked dirty
(synced to disk first), after the write it is rewritten clean. A sync trusts it only when it is
clean, of the same engine, collection, model and Chroma database file (``chroma/chroma.sqlite3``:
a folder deleted, restored from a backup or copied makes a new file), written at the generation the
manifest says the retriever indexed, and — before a sync writes anything from it — the collection
counts as many vectors as the record lists (a sync with nothing to write never opens Chroma:
importing chromadb and starting its client is a second). Anything else — a kill between the dirty
mark and the clean record, a store written before the record (or since by an older kbtool, which
moves the manifest's generation on), a rebuild, a dropped model — lists
the collection (what ``doctor`` and ``index --verify`` always do) and rewrites the record from it.

A Chroma server's collections are always listed and never recorded: another client (a copy of the
store elsewhere, another tool) may write them, and no local record would see that.
"""

from __future__ import annotations

import json

from .vectors import ChromaVectors, collection_name


def recorded(store, name: str) -> bool:
    """Whether dense retriever ``name``'s collection keeps a record: Chroma embedded only."""
    return type(store.vectors_for(name)) is ChromaVectors


def identity(store, name: str) -> str:
    """What the record is of: the engine, the collection, the model whose vectors it holds, and the
    Chroma database file (its inode: Chroma rewrites the file's time whenever it opens it)."""
    try:
        inode = (store.path / "chroma" / "chroma.sqlite3").stat().st_ino
    except OSError:
        inode = None
    return json.dumps({"engine": "chroma", "collection": collection_name(name), "file": inode,
                       "model": store.embedding_spec(name).cache_key}, sort_keys=True)


def indexed_generation(store, name: str):
    """The catalog generation the manifest says ``name``'s vectors hold (-1 or None: none)."""
    return (store.manifest if name == "dense" else store.model_record(name)).get("indexed_generation")


def trusted(store, name: str) -> dict[str, str] | None:
    """What ``name``'s collection holds by its record, or None when the record may be wrong."""
    if not recorded(store, name):
        return None
    state = store.catalog.vector_record_state(name)
    if (state is None or not state["clean"] or state["identity"] != identity(store, name)
            or state["generation"] != indexed_generation(store, name)):
        return None
    return store.catalog.vector_record(name) if store.vectors_for(name).exists() else None


def read(store, name: str, verify: bool = False) -> tuple[dict[str, str], bool]:
    """(chunk id -> index hash ``name``'s collection holds, whether that is the record's word):
    the record when it can be trusted and ``verify`` is off, else the collection listed."""
    rows = None if verify else trusted(store, name)
    if rows is not None:
        return rows, True
    return store.vectors_for(name).indexed(), False


def confirm(store, name: str, held: dict[str, str]) -> bool:
    """Before a sync writes from the record: whether the collection counts what the record lists
    (a record that claims a vector Chroma lacks, a collection written behind its back)."""
    return store.vectors_for(name).count() == len(held)


def before_write(store, name: str) -> None:
    """A vector write of ``name`` is about to run: its record no longer vouches for the collection."""
    if recorded(store, name):
        store.catalog.mark_vector_record_dirty(name)


def after_write(store, name: str, generation: int, held: dict[str, str], from_record: bool,
                deleted: list[str], upserted: dict[str, str]) -> None:
    """The collection of ``name`` held ``held`` and has lost ``deleted`` and gained ``upserted``
    (id -> index hash), for catalog ``generation``: the record says so, clean. From a record, only
    the change is written; from a listing, the whole record."""
    if not recorded(store, name):
        return
    ident = identity(store, name)
    if not from_record:
        gone = set(deleted)
        rows = {c: h for c, h in held.items() if c not in gone}
        store.catalog.write_vector_record(name, ident, generation, rows={**rows, **upserted})
        return
    state = store.catalog.vector_record_state(name) or {}
    if deleted or upserted or state.get("generation") != generation or not state.get("clean"):
        store.catalog.write_vector_record(name, ident, generation, deleted=deleted, upserted=upserted)


def forget(store, name: str) -> None:
    """Before ``name``'s collection is dropped: no record of it is left to trust."""
    store.catalog.forget_vector_record(name)
