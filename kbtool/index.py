"""Bring every index in line with the catalog: embed what is new (or take it from the embedding
cache), write and delete vectors, bring BM25 in line when what it holds is not the catalog's chunk set
(a delta segment for a small change, else a rebuild).

The catalog is the truth; an index is only ever *behind* it. Vectors are committed to the cache
batch by batch (an interrupted run keeps what it paid for), the vector index is written next,
BM25 is swapped in last and records the catalog state it holds, and only then does the manifest
say the indexes are current: a kill at any point leaves a store that ``status`` calls behind and
the next ``index`` repairs.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from .chunk import chunk, store_params
from .document import embed_text
from .store import held
from .store import manifest as mf
from .store.bm25 import BM25Index

Progress = Callable[[str, int, int], None]  # progress(stage, advance, total)
_EMBED_COMMIT = 256  # vectors per embedding-cache commit
# Vectors read back from the cache and written to the index at a time: a sync's memory does not grow
# with the store's vectors (at 1M chunks, holding them all with their metadata took 5 GB more).
_WRITE_BATCH = 20_000


@dataclass
class IndexReport:
    chunks: int = 0
    embedded: int = 0
    from_cache: int = 0
    upserted: int = 0
    deleted: int = 0
    bm25_rebuilt: bool = False
    bm25_delta: int = 0  # chunks the BM25 delta segment written now holds (0: none written)

    def to_dict(self) -> dict:
        return asdict(self)


def index(store, *, embedder=None, rebuild: bool = False, progress: Progress | bool | None = None,
          models: dict | None = None, verify: bool = False) -> IndexReport:
    """Chunk documents that have no chunks yet (e.g. after ``--parse-only``, or left by an
    interrupted chunking: with the parameters it recorded, never mixed sizes), then sync every index.
    ``models``: loaded embedders of further dense retrievers by name (``dense:NAME``); the others
    are loaded as needed. ``progress``: a callback ``(stage, advance, total)``, or True for plain
    progress lines on standard error. ``verify``: list what each vector collection holds instead of
    trusting its record (``store.held``), and repair what differs (``index --verify``, ``doctor --repair``)."""
    from .embed import load_embedder
    from .progress import resolve

    progress = resolve(progress)

    embedder = embedder or load_embedder(store.embedding_spec())
    with store.writing():
        params = store_params(store)
        if store.documents_to_chunk(params):
            chunk(store, params, embedder=embedder, progress=progress)
        return sync(store, embedder, progress=progress, rebuild=rebuild, models=models, verify=verify)


def repair(store, embedder=None) -> dict:
    """What ``doctor --repair`` does: bring every index in line with the catalog (cached vectors
    re-used, each collection listed, not taken from its record); the catalog's documents are never touched."""
    return index(store, embedder=embedder, verify=True).to_dict()


def sync(store, embedder, progress: Progress | None = None, rebuild: bool = False,
         models: dict | None = None, verify: bool = False) -> IndexReport:
    """Make every vector index and BM25 hold exactly the catalog's chunks, embedding only what is new.
    Call under ``store.writing()``. ``progress("embedding", advance, total)`` as vectors are made
    (``embedding dense:NAME`` for a further model). Each model's index records the generation it
    holds only once its vectors are written: a kill at any point leaves it behind, never current.
    What each collection holds is taken from its record (``store.held``) unless ``verify``."""
    from .embed import load_embedder

    if rebuild:
        # Mark the indexes stale first: an interrupted rebuild must not look current.
        store.mark_stale(embedder.spec)
        store.drop_vectors("dense")
    store.check_model(embedder.spec)
    report = IndexReport()
    generation = store.generation()
    rows = store.chunks_for_index()
    report.chunks = len(rows)
    wanted = store.index_targets(rows)  # from the rows just read: the catalog is not read twice
    job = _Job(rows, wanted, generation, report, progress, rebuild, verify)
    _sync_vectors(store, "dense", embedder, job)
    report.bm25_rebuilt, report.bm25_delta = _sync_bm25(store, rows, wanted, generation, force=bool(rebuild))
    store.mark_indexed(generation)
    for name in store.dense_retrievers()[1:]:
        other = (models or {}).get(name) or load_embedder(store.embedding_spec(name))
        if rebuild:
            store.drop_vectors(name)
        store.check_model(other.spec, name)
        _sync_vectors(store, name, other, job)
        store.mark_indexed(generation, name)
    return report


@dataclass
class _Job:
    """What one sync brings each vector index to: the catalog's chunks at ``generation``."""
    rows: list
    wanted: dict[str, str]  # chunk id -> index hash
    generation: int
    report: IndexReport
    progress: Progress | None
    rebuild: bool
    verify: bool


def _sync_vectors(store, name: str, embedder, job: _Job) -> bool:
    """Bring dense retriever ``name``'s vector index in line with the catalog's chunks (chunk id ->
    index hash), embedding what neither it nor the embedding cache holds; what it holds is its record's
    word (``store.held``) unless ``job.verify``, and the record follows every write. Records the model's
    width, limit and runtime. True if anything was written or deleted."""
    rows, wanted, report, progress, rebuild = job.rows, job.wanted, job.report, job.progress, job.rebuild
    index_ = store.vectors_for(name)
    existing, from_record = held.read(store, name, job.verify)
    to_delete, todo = _diff(existing, rows, wanted)
    if from_record and (to_delete or todo) and not held.confirm(store, name, existing):
        existing, from_record = held.read(store, name, verify=True)  # the record was wrong: list
        to_delete, todo = _diff(existing, rows, wanted)
    # A rebuild re-embeds everything: what a model name or folder serves may have changed.
    key = embedder.spec.cache_key
    cached = set() if rebuild else store.cached_hashes(key, {r["content_hash"] for r in todo})
    report.from_cache += sum(1 for r in todo if r["content_hash"] in cached)
    stage = "embedding" if name == "dense" else f"embedding {name}"
    embedded_before = report.embedded
    bulk = _embed_missing(store, name, embedder, todo, cached, report, progress, stage)
    if todo or to_delete:
        held.before_write(store, name)  # dirty until the record below: a kill in between lists the collection
    if to_delete:  # nothing to delete opens no Chroma client (a second: chromadb's import and start)
        index_.delete(to_delete)
    report.deleted += len(to_delete)
    dim = None
    for start in range(0, len(todo), _WRITE_BATCH):  # every vector is in the cache now: read a batch, write it
        part = todo[start : start + _WRITE_BATCH]
        vectors = store.cached_vectors(key, {r["content_hash"] for r in part})
        index_.upsert([r["chunk_id"] for r in part],
                      np.stack([vectors[r["content_hash"]] for r in part]).astype(np.float32),
                      [{**json.loads(r["meta"]), "index_hash": wanted[r["chunk_id"]]} for r in part])
        dim = dim or int(next(iter(vectors.values())).shape[0])
        del vectors
    report.upserted += len(todo)
    held.after_write(store, name, job.generation, existing, from_record, to_delete,
                     {r["chunk_id"]: wanted[r["chunk_id"]] for r in todo})
    emb = embedder.spec.to_manifest()  # the same identity (checked); the URL may have moved
    if dim is not None:
        emb["dim"] = dim
    elif store.model_record(name).get("dim") is None and existing:  # a rebuild killed after forgetting the width: the index has it
        kept = [c for c in existing if c in wanted][:1]
        sample = index_.get(kept) if kept else {}
        if sample:
            emb["dim"] = int(len(next(iter(sample.values()))))
    emb["max_tokens"] = embedder.max_tokens
    if report.embedded > embedded_before:
        emb["runtime"] = bulk.runtime
    store.record_embedding(name, emb)
    return bool(todo or to_delete)


def _diff(existing: dict[str, str], rows, wanted: dict[str, str]) -> tuple[list[str], list]:
    """(ids to delete, rows to write) that bring an index holding ``existing`` to ``wanted``."""
    return ([cid for cid in existing if cid not in wanted],
            [r for r in rows if existing.get(r["chunk_id"]) != wanted[r["chunk_id"]]])


def _embed_missing(store, name: str, embedder, todo, cached: set, report: IndexReport, progress,
                   stage: str = "embedding"):
    """Embed the texts of ``todo`` whose hash is not in ``cached`` (shortest first: batches pad little)
    into the embedding cache, batch by batch (nothing is kept in memory); returns the embedder that
    ran (its runtime is recorded)."""
    missing: dict[str, dict] = {}
    for r in todo:
        if r["content_hash"] not in cached:
            missing.setdefault(r["content_hash"], r)
    if not missing:
        return embedder
    hashes = sorted(missing, key=lambda h: len(missing[h]["prefix"] or "") + len(missing[h]["text"]))
    total = len(hashes)
    cb = (lambda n: progress(stage, n, total)) if progress else None
    if progress:
        progress(stage, 0, total)  # show the bar while the model loads
    bulk = embedder.for_bulk(total) if hasattr(embedder, "for_bulk") else embedder
    for start in range(0, total, _EMBED_COMMIT):
        part = hashes[start : start + _EMBED_COMMIT]
        fresh = bulk.embed([embed_text(missing[h]["prefix"], missing[h]["text"]) for h in part], progress=cb)
        store.check_dim(fresh, "passage", name=name)
        store.cache_vectors(embedder.spec.cache_key, [(h, fresh[i]) for i, h in enumerate(part)])
        report.embedded += len(part)
    return bulk


def _sync_bm25(store, rows, wanted: dict[str, str], generation: int, force: bool) -> tuple[bool, int]:
    """Bring BM25 in line with the catalog's chunk set whenever what it holds is not that set —
    decided from its own record, never from the vector index (a sync killed after the vector
    writes left that current). A change small against the base is written as a delta segment
    (the analyzer runs on the new and changed chunks only); a large one, ``force`` (``--rebuild``)
    or new settings rebuild it whole. Returns (rebuilt whole, rows of a delta written now)."""
    bm25_dir = store.path / "bm25"
    built_with = store.record_bm25()  # what is on disk; the manifest's bm25 moves on (robertson: Lucene's IDF)
    spec = store.bm25_spec()
    digest = mf.bm25_digest(wanted, spec)
    state = BM25Index.state(bm25_dir)
    on_disk = BM25Index.chunk_ids_on_disk(bm25_dir)
    record = {"generation": generation, "digest": digest}
    if not (force or on_disk is None or built_with != spec or state.get("digest") != digest):
        if state.get("generation") != generation:
            BM25Index.set_state(bm25_dir, {**state, **record})  # the delta it names, if any, stays
        store.record_bm25(spec)
        return False, 0
    delta = None if force or on_disk is None or built_with != spec else _bm25_delta(store, bm25_dir, rows, wanted, state)
    if delta is not None:
        BM25Index.write_delta(bm25_dir, delta, record)
        store.record_bm25(spec)
        return False, len(delta.chunk_ids)
    analyzer = store.analyzer
    BM25Index.build(bm25_dir, [r["chunk_id"] for r in rows],
                    analyzer.many(embed_text(r["prefix"], r["text"]) for r in rows), store.manifest["bm25"],
                    state=record, hashes=[wanted[r["chunk_id"]] for r in rows])
    store.record_bm25(spec)
    return True, 0


def _bm25_delta(store, bm25_dir, rows, wanted: dict[str, str], state: dict):
    """The delta segment that brings the base on disk to ``wanted``: its rows are every wanted chunk
    the base does not hold with the same index hash (taken from the delta before when it holds
    them, else analysed now), its dead rows the base rows not wanted as they are. None when the
    base cannot take one (built before row hashes, too small) or the change passes the bound
    (``bm25.DELTA_FRACTION`` of the base rows): then BM25 is rebuilt whole (compaction)."""
    from .store import bm25

    base = BM25Index.base_rows(bm25_dir)
    try:
        base_ids = json.loads((bm25_dir / "chunk_ids.json").read_text())
    except (OSError, ValueError):
        return None
    if (base is None or len(base["hashes"]) != len(base_ids) or len(base_ids) < bm25.DELTA_MIN_ROWS
            or not (bm25_dir / bm25.RAW_FILE).exists()):
        return None
    old = None
    if state.get("delta"):
        try:
            old = bm25.Delta.load(bm25_dir / state["delta"])
        except Exception:  # noqa: BLE001 - a damaged delta: rebuild
            return None
        if old.base != base["id"]:
            return None
    alive = np.fromiter((wanted.get(c) == h for c, h in zip(base_ids, base["hashes"])), dtype=bool, count=len(base_ids))
    dead = np.flatnonzero(~alive)
    held = {c for c, a in zip(base_ids, alive.tolist()) if a}
    todo = [r for r in rows if r["chunk_id"] not in held]
    limit = bm25.DELTA_FRACTION * len(base_ids)
    if len(todo) > limit or len(dead) > limit or not (held or todo):
        return None
    parts, ids, hashes = [], [], []
    if old is not None:
        keep = np.fromiter((wanted.get(c) == h and c not in held for c, h in zip(old.chunk_ids, old.hashes)),
                           dtype=bool, count=len(old.chunk_ids))
        parts.append((old.terms, bm25._select_rows(old.raw, keep)))
        ids = [c for c, k in zip(old.chunk_ids, keep.tolist()) if k]
        hashes = [wanted[c] for c in ids]
    kept = set(ids)
    new = [r for r in todo if r["chunk_id"] not in kept]
    analyzer = store.analyzer
    parts.append(bm25._terms_and_postings(analyzer.many(embed_text(r["prefix"], r["text"]) for r in new)))
    terms, raw = bm25._merge_segments(parts)
    return bm25.Delta(base["id"], ids + [r["chunk_id"] for r in new], hashes + [wanted[r["chunk_id"]] for r in new],
                      terms, raw, dead)
