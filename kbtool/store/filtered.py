"""Dense search restricted to the chunks a filter or access allows, fast at 100k chunks.

Chroma's ``where`` filter costs 130–240 ms per query on 100k vectors whatever it selects (2 % or
25 % of the chunks, a ``$in`` of 20 or 500 documents, an equality on one field), against 5–7 ms
for an unfiltered query (measured here with chromadb 1.5.9; ``bench/scale.py``): it reads the
metadata of the collection to build the allowed set on every query. So on a large store:

- a filter allowing few chunks (``EXACT_MAX``) is searched exactly over those chunks' vectors —
  the embedding cache's copy of what the engine holds — loaded once per filter and catalog
  generation and held (``BYTE_BUDGET`` over all filters, least recently used dropped first);
- a filter allowing many is an unfiltered ANN search deep enough that ``depth`` allowed chunks are
  expected among the results (depth x chunks / allowed x ``OVERSAMPLE``), then filtered; a
  question for which fewer survive is searched exactly.

A small store (``NATIVE_MAX`` chunks) lets the engine filter, as before: there it costs a few
milliseconds (the cost grows with the store: ~20 ms more than unfiltered at 10k chunks), and its
scores are the engine's own.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict

import numpy as np

NATIVE_MAX = 2_000
EXACT_MAX = 20_000
OVERSAMPLE = 1.5
BYTE_BUDGET = 300 * 2**20  # 200k vectors of 384 dimensions, 50k of 1536


class FilteredSearch:
    """One per Store: the vectors held for exact filtered search, by (generation, retriever, filter)."""

    def __init__(self):
        self._held: OrderedDict = OrderedDict()  # key -> (allowed set, ids, matrix)
        self._lock = threading.Lock()
        self._epoch = 0  # + 1 per clear(): vectors loaded before a clear are not held after it
        self.stats = {"native": 0, "exact": 0, "oversampled": 0, "fallback": 0}

    def clear(self) -> None:
        with self._lock:
            self._held.clear()
            self._epoch += 1

    def search(self, store, engine, name: str, vectors, depth: int, allowed: set[str], allowed_docs,
               extra: int) -> list[list[tuple[str, float]]]:
        vectors = np.asarray(vectors, dtype=np.float32)
        if not allowed:
            return [[] for _ in range(len(vectors))]
        total = store.chunk_total()
        if total <= NATIVE_MAX or not hasattr(engine, "search"):
            self.stats["native"] += 1
            if getattr(store, "pinned", False):  # a server's view of one generation (``pinned.py``): Chroma's
                # ``where`` reads its live metadata, which a writer may have moved on; every chunk, the same scores
                return [[x for x in lst if x[0] in allowed][:depth + extra] for lst in engine.search(vectors, total, None)]
            return engine.search(vectors, depth + extra, allowed_docs)
        if len(allowed) <= EXACT_MAX:
            self.stats["exact"] += 1
            return self._exact(store, engine, name, vectors, depth, allowed)
        k = min(total, math.ceil(depth * total / len(allowed) * OVERSAMPLE))
        found = engine.search(vectors, k, None)
        out, redo = [], []
        for i, lst in enumerate(found):
            kept = [x for x in lst if x[0] in allowed][:depth]
            if len(kept) < min(depth, len(allowed)) and len(lst) >= k:
                redo.append(i)
            out.append(kept)
        self.stats["oversampled"] += 1
        if redo:
            self.stats["fallback"] += len(redo)
            again = self._exact(store, engine, name, vectors[redo], depth, allowed)
            for i, lst in zip(redo, again):
                out[i] = lst
        return out

    def _matrix(self, store, engine, name: str, allowed: set[str]):
        key = (store.generation(), name, id(allowed))
        with self._lock:
            got = self._held.get(key)
            if got is not None and got[0] is allowed:
                self._held.move_to_end(key)
                return got[1], got[2]
            epoch = self._epoch
        ids = sorted(allowed)
        vecs = store.chunk_vectors(ids, name=name)
        missing = [c for c in ids if c not in vecs]
        if missing:  # not in the embedding cache: the engine's own copy
            vecs.update(engine.get(missing))
        ids = [c for c in ids if c in vecs]
        m = np.stack([vecs[c] for c in ids]).astype(np.float32) if ids else np.zeros((0, 1), np.float32)
        if len(m):
            m /= np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
        with self._lock:
            if self._epoch != epoch:  # vectors were written meanwhile (a writer thread): use, don't hold
                return ids, m
            self._held[key] = (allowed, ids, m)
            while sum(v[2].nbytes for v in self._held.values()) > BYTE_BUDGET and len(self._held) > 1:
                self._held.popitem(last=False)
        return ids, m

    def _exact(self, store, engine, name: str, vectors: np.ndarray, depth: int,
               allowed: set[str]) -> list[list[tuple[str, float]]]:
        ids, m = self._matrix(store, engine, name, allowed)
        if not ids:
            return [[] for _ in range(len(vectors))]
        q = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        # einsum, not BLAS: one thread, no wait for BLAS threads on a busy 2-core machine (12 ms
        # for 25k rows under load, where einsum takes 2 ms; 0.1 ms for 2k rows either way)
        scores = np.einsum("qd,nd->qn", q, m)
        out = []
        for row in scores:
            n = min(depth, len(ids))
            if n < len(ids):  # the n best, and every chunk tied with the last of them: ties go by id
                best = np.flatnonzero(row >= row[np.argpartition(-row, n - 1)[n - 1]])
            else:
                best = np.arange(len(ids))
            out.append(sorted(((ids[j], float(row[j])) for j in best), key=lambda x: (-x[1], x[0]))[:n])
        return out
