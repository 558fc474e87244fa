"""BM25 segments at scale (issue 20): a synthetic 100k-chunk store of Cranfield abstracts (each copy
given unique reference codes), timed through ``kbtool.index._sync_bm25``: a full build, a
one-document change (20 chunks replaced), and query time (p50) with and without a delta.

    PYTHONPATH=. python bench/bm25_incremental.py [N] [OUT_DIR]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CRANFIELD = Path("/work/shared/datasets/cranfield/corpus.jsonl")


class FakeStore:
    """What ``_sync_bm25`` reads of a store: its folder, manifest, BM25 settings and analyzer."""

    def __init__(self, path: Path):
        from kbtool.store import manifest as mf

        self.path = path
        self.manifest = {"bm25": dict(mf.DEFAULT_PARAMS),
                         "analyzer": {"lowercase": True, "stopwords": "en", "cjk": "jieba", "stemmer": None}}
        self.manifest["bm25_built_with"] = mf.bm25_spec(self.manifest)

    def bm25_spec(self):
        from kbtool.store import manifest as mf

        return mf.bm25_spec(self.manifest)

    def record_bm25(self, built_with=None):  # the manifest write _sync_bm25 makes, as the store makes it
        from kbtool.store import Store

        return Store.record_bm25(self, built_with)

    @property
    def analyzer(self):
        from kbtool.store.analyzer import Analyzer, AnalyzerConfig

        return Analyzer(AnalyzerConfig.from_dict(self.manifest["analyzer"]))


def corpus(n: int) -> list[dict]:
    docs = [json.loads(line) for line in CRANFIELD.read_text().splitlines()]
    rows = []
    for i in range(n):
        d = docs[i % len(docs)]
        rows.append({"chunk_id": f"c{i:06d}", "prefix": d["title"], "content_hash": f"h{i}",
                     "text": f"{d['text']} reference code ref-{i:06d} batch b{i // 20:05d}"})
    return rows


def main() -> None:
    from kbtool.index import _sync_bm25
    from kbtool.store.bm25 import BM25Index

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp())
    store = FakeStore(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = corpus(n)
    wanted = {r["chunk_id"]: r["content_hash"] for r in rows}
    t = time.perf_counter()
    _sync_bm25(store, rows, wanted, 1, force=True)
    print(f"full build of {n} rows: {time.perf_counter() - t:.2f} s")
    if "--parts" in sys.argv:  # the build's parts: analyzer, bm25s, raw postings
        from kbtool.document import embed_text
        from kbtool.store.bm25 import _bm25s, _raw_postings

        t = time.perf_counter()
        tokens = [store.analyzer(embed_text(r["prefix"], r["text"])) for r in rows]
        print(f"  analyzer: {time.perf_counter() - t:.2f} s")
        t = time.perf_counter()
        r = _bm25s().BM25(k1=1.2, b=0.75, method="lucene")
        r.index(tokens, show_progress=False)
        print(f"  bm25s index: {time.perf_counter() - t:.2f} s")
        t = time.perf_counter()
        _raw_postings(r.vocab_dict, tokens)
        print(f"  raw postings: {time.perf_counter() - t:.2f} s")

    questions = [json.loads(line)["title"] for line in CRANFIELD.read_text().splitlines()[:100]]

    def query_p50(label):
        t0 = time.perf_counter()
        index = BM25Index.current(out / "bm25", None)
        index.has_raw()
        print(f"load {label}: {time.perf_counter() - t0:.3f} s")
        an = store.analyzer
        times = []
        for q in questions:
            t0 = time.perf_counter()
            index.top(index.scores(an(q)), 20)
            times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for q in questions:
            index.top(index.scores(an(q)), 20)
        warm = (time.perf_counter() - t0) / len(questions)
        print(f"query {label}: p50 {np.median(times) * 1000:.2f} ms (first pass), warm mean {warm * 1000:.2f} ms")

    query_p50("without a delta")
    # one document changed: its 20 chunks get new text (a new word only they hold)
    for step in range(3):
        for r in rows[100 * step : 100 * step + 20]:
            r["text"] += f" zyxword{step}"
            r["content_hash"] += "x"
        wanted = {r["chunk_id"]: r["content_hash"] for r in rows}
        t = time.perf_counter()
        rebuilt = _sync_bm25(store, rows, wanted, 2 + step, force=False)
        print(f"one-document change #{step + 1} (20 chunks): {time.perf_counter() - t:.3f} s (rebuilt={rebuilt})")
    query_p50("with a delta")



def real_store(path: str, questions: str) -> None:
    """On a COPY of a real store (``bench/scale.py``'s kb-100000): a forced full BM25 build, one
    document's chunks changed in the rows handed to ``_sync_bm25`` (the catalog is not touched),
    and query times (p50 over the questions; unfiltered, and with a filter) without and with the
    delta. ``PYTHONPATH=. python bench/bm25_incremental.py --store COPY QUESTIONS.jsonl``"""
    from kbtool.index import _sync_bm25
    from kbtool.store import Store

    store = Store.open(path)
    qs = [json.loads(line).get("question") or json.loads(line).get("text") for line in
          Path(questions).read_text().splitlines()[:100]]
    with store.writing():
        gen = store.generation()
        t = time.perf_counter()
        rows = [dict(r) for r in store.catalog.chunks_for_index()]
        wanted = store.index_targets()
        print(f"catalog rows + targets ({len(rows)} chunks): {time.perf_counter() - t:.2f} s")
        t = time.perf_counter()
        _sync_bm25(store, rows, wanted, gen, force=True)
        print(f"full BM25 build: {time.perf_counter() - t:.2f} s")
        _queries(store, qs, "base only")
        doc = rows[len(rows) // 2]["chunk_id"].split("#")[0]
        for step in range(3):
            changed = [r for r in rows if r["chunk_id"].split("#")[0] == doc][:20]
            for r in changed:
                r["text"] = r["text"] + f" zyxword{step}"
                wanted[r["chunk_id"]] += "x"
            t = time.perf_counter()
            rebuilt = _sync_bm25(store, rows, wanted, gen, force=False)
            print(f"one-document change #{step + 1} ({len(changed)} chunks of {doc}): "
                  f"{time.perf_counter() - t:.3f} s (rebuilt={rebuilt})")
        store.save_manifest()
    _queries(store, qs, "with a delta")


def _queries(store, qs, label):
    from kbtool.store.bm25 import BM25Index

    t = time.perf_counter()
    index = BM25Index.current(store.path / "bm25", None)
    print(f"load {label}: {time.perf_counter() - t:.3f} s (delta rows: "
          f"{0 if getattr(index, 'delta', None) is None else len(index.delta.chunk_ids)})")
    allowed = {c for c in index.chunk_ids[::3]}  # a filter allowing a third of the chunks
    mask, scoped = index.mask(allowed), index.scoped(index.mask(allowed))
    for name, m, sc in (("unfiltered", None, None), ("filtered+scoped", mask, scoped)):
        times = []
        for q in qs:
            t0 = time.perf_counter()
            index.top(index.scores(store.analyzer(q), m, sc), 20)
            times.append(time.perf_counter() - t0)
        print(f"  query {label}, {name}: p50 {np.median(times) * 1000:.2f} ms, p90 {np.quantile(times, 0.9) * 1000:.2f} ms")


if __name__ == "__main__" and "--store" in sys.argv:
    real_store(sys.argv[sys.argv.index("--store") + 1], sys.argv[sys.argv.index("--store") + 2])
    sys.exit(0)


if __name__ == "__main__":
    main()
