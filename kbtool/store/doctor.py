"""`kbtool doctor`: does every part of a store hold what the catalog says?

Checks the catalog against Chroma (same chunk ids, same content and metadata hashes, vectors of
the manifest's dimension) and against BM25 (same chunk ids, built from this catalog state and
these settings), and looks for documents waiting to be chunked. Repair is
``kbtool.index.repair`` (the indexes brought in line from the catalog, cached vectors re-used);
a lost catalog cannot be rebuilt from the indexes (Store.open refuses such a store).
"""

from __future__ import annotations

from ..errors import StoreError
from .bm25 import BM25Index
from .manifest import bm25_digest


def diagnose(store) -> list[dict]:
    """[{check, ok, detail}] for a store. A full or read-only file system met on the way (SQLite's
    and Chroma's words for it) is the StoreError naming the store's file system, not damage."""
    from .files import storage_error

    try:
        return _diagnose(store)
    except StoreError:
        raise
    except Exception as exc:
        known = storage_error(exc, store.path, "doctor")
        if known is None:
            raise
        raise known from None


def _diagnose(store) -> list[dict]:
    findings: list[dict] = []

    def add(check: str, ok: bool, detail: str) -> None:
        findings.append({"check": check, "ok": ok, "detail": detail})

    wanted = store.index_targets()
    add("catalog", True, f"{len(store.document_ids())} documents, {len(wanted)} chunks, generation {store.generation()}")
    pending = store.documents_to_chunk()
    add("chunking", not pending, "every document is chunked" if not pending
        else f"{len(pending)} document(s) not chunked yet, e.g. {pending[0]}")

    add("engine", True, engine_line(store.vectors_info()))
    if not store.vectors.exists() and wanted:
        add("vectors", False, "chroma/ is missing: `kbtool index` refills it from the embedding cache")
    else:
        for name in store.dense_retrievers():
            try:
                _vectors(store, name, wanted, add)
            except StoreError as exc:  # a server down, or refusing: a failed check, said in one line
                add("vectors" if name == "dense" else f"vectors {name}", False, str(exc))
                break

    bm25_dir = store.path / "bm25"
    ids = BM25Index.chunk_ids_on_disk(bm25_dir)
    if not BM25Index.exists(bm25_dir):
        add("bm25", not wanted, "no BM25 index" + (": `kbtool index` builds it" if wanted else ""))
    elif ids is None:
        add("bm25", False, "bm25/chunk_ids.json is damaged: `kbtool index` rebuilds BM25")
    else:
        state = BM25Index.state(bm25_dir)
        same_ids = set(ids) == set(wanted)
        current = state.get("digest") in (None, bm25_digest(wanted, store.bm25_spec()))
        add("bm25", same_ids and current, f"{len(ids)} rows match the catalog" if same_ids and current else
            f"BM25 holds {len(set(ids) - set(wanted))} chunk(s) the catalog no longer has and lacks "
            f"{len(set(wanted) - set(ids))}" + ("" if current else "; built from another catalog state or settings"))
    from pathlib import Path

    gone = [r for r in store.sources() if not Path(r.removeprefix("beir:")).exists()]
    if store.sources():
        add("sources", not gone, f"{len(store.sources())} source folder(s) present" if not gone else
            f"{gone[0]} is gone" + (f" (and {len(gone) - 1} more)" if gone[1:] else "")
            + ": `kbtool ingest NEW_PATH` re-uses its documents from where it is now")
    add("status", store.is_indexed(), "indexes current" if store.is_indexed() else "indexes behind the catalog")
    return findings


def _vectors(store, name: str, wanted: dict[str, str], add) -> None:
    """Dense retriever ``name``'s vectors against the catalog, and their width against its record."""
    label = "vectors" if name == "dense" else f"vectors {name}"
    rec = store.model_record(name)
    dim = rec.get("dim")
    v = store.vectors_for(name).verify(wanted, dim)
    ok = not (v["missing"] or v["ghosts"] or v["stale"])
    add(label, ok, f"{v['held']} vectors of {rec['model']} match the catalog" if ok else
        f"{len(v['missing'])} chunk(s) without a vector, {len(v['ghosts'])} vector(s) of chunks the catalog "
        f"no longer has, {len(v['stale'])} out of date")
    if v["held"] and dim:
        add("dimension" if name == "dense" else f"dimension {name}", v["dim"] == dim,
            f"vectors are {v['dim']}-d, the manifest says {dim}-d")


def engine_line(info: dict) -> str:
    """'chroma-server http://127.0.0.1:8000 (tenant ..., database ...), collection kb-...-chunks' or
    'chroma (embedded) in .kb/chroma' — what status and doctor say of the vector engine."""
    if info["engine"] == "chroma":
        return f"chroma (embedded) in {info['path']}"
    return (f"{info['engine']} {info['url']} (tenant {info['tenant']}, database {info['database']}), collection "
            + ", ".join(info["collections"].values()) + (f", {info['auth']}" if info.get("auth") else ""))
