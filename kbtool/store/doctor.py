"""`kbtool doctor`: does every part of a store hold what the catalog says?

Checks the catalog against Chroma (same chunk ids, same content and metadata hashes, vectors of
the manifest's dimension) and against BM25 (same chunk ids, built from this catalog state and
these settings), and looks for documents waiting to be chunked. ``repair`` brings the indexes in
line from the catalog (re-using cached vectors); it never deletes the catalog's documents, and a
lost catalog cannot be rebuilt from the indexes (Store.open refuses such a store).
"""

from __future__ import annotations

import json

from .bm25 import BM25Index


def diagnose(store) -> list[dict]:
    """[{check, ok, detail}] for a store."""
    from . import _digest, _index_hash

    findings: list[dict] = []

    def add(check: str, ok: bool, detail: str) -> None:
        findings.append({"check": check, "ok": ok, "detail": detail})

    rows = store.db.execute("SELECT chunk_id, content_hash, meta FROM chunks").fetchall()
    wanted = {r[0]: _index_hash(r[1], r[2]) for r in rows}
    add("catalog", True, f"{len(store.document_ids())} documents, {len(wanted)} chunks, generation {store.generation()}")
    pending = store.documents_to_chunk()
    add("chunking", not pending, "every document is chunked" if not pending
        else f"{len(pending)} document(s) not chunked yet, e.g. {pending[0]}")

    if not (store.path / "chroma").is_dir() and wanted:
        add("vectors", False, "chroma/ is missing: `kbtool index` refills it from the embedding cache")
    else:
        col = store.collection()
        have = store._indexed_hashes(col)
        missing = [c for c in wanted if c not in have]
        ghosts = [c for c in have if c not in wanted]
        stale = [c for c in wanted if c in have and have[c] != wanted[c]]
        ok = not (missing or ghosts or stale)
        add("vectors", ok, f"{len(have)} vectors match the catalog" if ok else
            f"{len(missing)} chunk(s) without a vector, {len(ghosts)} vector(s) of chunks the catalog no longer has, "
            f"{len(stale)} out of date")
        dim = store.manifest["embedding"].get("dim")
        if have and dim:
            got = col.get(ids=[next(iter(have))], include=["embeddings"])["embeddings"]
            size = len(got[0]) if got is not None and len(got) else None
            add("dimension", size == dim, f"vectors are {size}-d, the manifest says {dim}-d")

    bm25_dir = store.path / "bm25"
    if not BM25Index.exists(bm25_dir):
        add("bm25", not wanted, "no BM25 index" + (": `kbtool index` builds it" if wanted else ""))
    else:
        ids = json.loads((bm25_dir / "chunk_ids.json").read_text())
        state = BM25Index.state(bm25_dir)
        same_ids = set(ids) == set(wanted)
        current = state.get("digest") in (None, _digest(wanted, store._bm25_spec()))
        add("bm25", same_ids and current, f"{len(ids)} rows match the catalog" if same_ids and current else
            f"BM25 holds {len(set(ids) - set(wanted))} chunk(s) the catalog no longer has and lacks "
            f"{len(set(wanted) - set(ids))}" + ("" if current else "; built from another catalog state or settings"))
    add("status", store.is_indexed(), "indexes current" if store.is_indexed() else "indexes behind the catalog")
    return findings


def repair(store, embedder) -> dict:
    """Bring both indexes in line with the catalog (under the writer lock)."""
    from ..ingestion.pipeline import index

    return index(store, embedder=embedder).to_dict()
