"""Where an exact scan of the catalog's vectors stops beating Chroma's HNSW (``SCAN_MAX``).

    python bench/scan_threshold.py STORE [STORE ...] [--rounds 3]

For each store (Chroma embedded), with the search engine forced each way (``kbtool.store.models.
SCAN_MAX`` set to 0 or to a billion in the process): a cold ``kbtool query`` process (5 questions
per round, the two ways alternated; wall median) and warm dense searches in one process (the
store's own ``search_engine`` over 50 embedded questions; p50 ms), plus whether both ways return
the same chunks. A scan's cold cost grows with the vectors it loads from the catalog, Chroma's
with its import (~0.4 s) and its index; a warm scan grows with the store, HNSW barely.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ["how do I add CORS middleware", "What is the default port of the development server?",
             "return a custom status code", "How can I declare optional query parameters?",
             "pressure distribution on a wing at supersonic speed"]
RUN = ("import sys, kbtool.store.models as m; m.SCAN_MAX = int(sys.argv.pop(1)); "
       "from kbtool.cli import main; sys.argv[0] = 'kbtool'; main()")


def cold(store: Path, scan_max: int, question: str) -> tuple[float, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", RUN, str(scan_max), "query", question, "--store", str(store),
                           "--json", "-m", "dense"], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-500:])
    return wall, [h["chunk_id"] for h in json.loads(proc.stdout)["hits"]]


def warm(store_dir: Path) -> dict:
    import kbtool.store.models as models
    from kbtool.embed import load_embedder
    from kbtool.store import Store

    store = Store.open(store_dir)
    emb = load_embedder(store.embedding_spec())
    rows = store.chunks()
    picks = np.random.default_rng(0).choice(len(rows), min(50, len(rows)), replace=False)
    texts = [rows[int(i)]["embedded"][:200] for i in picks]
    vecs = emb.embed_queries(texts)
    out = {}
    for name, limit in (("scan", 10**9), ("hnsw", 0)):
        models.SCAN_MAX = limit
        store.__dict__.pop("_scans", None)
        t = time.perf_counter()
        engine = store.search_engine()  # choosing the scan loads the catalog's vectors
        engine.search(vecs[:1], 10)  # the first search loads Chroma's index
        first = time.perf_counter() - t
        times, found = [], []
        for v in vecs:
            t = time.perf_counter()
            found.append([c for c, _ in engine.search(v[None, :], 10)[0]])
            times.append(time.perf_counter() - t)
        out[name] = {"first_search_ms": round(1000 * first, 1), "p50_ms": round(1000 * float(np.median(times)), 2),
                     "found": found}
    same = sum(a == b for a, b in zip(out["scan"].pop("found"), out["hnsw"].pop("found")))
    out["same_top10"] = f"{same}/{len(vecs)}"
    out["chunks"] = store.chunk_total()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stores", nargs="+", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows = []
    for store in args.stores:
        row = {"store": str(store), **warm(store)}
        cold(store, 0, QUESTIONS[0])  # warm the file cache both ways
        cold(store, 10**9, QUESTIONS[0])
        walls: dict[str, list[float]] = {"scan": [], "hnsw": []}
        same = 0
        for _ in range(args.rounds):
            for q in QUESTIONS:
                a, hits_scan = cold(store, 10**9, q)
                b, hits_hnsw = cold(store, 0, q)
                walls["scan"].append(a)
                walls["hnsw"].append(b)
                same += hits_scan == hits_hnsw
        row["cold_query_s"] = {k: round(statistics.median(v), 3) for k, v in walls.items()}
        row["cold_same_hits"] = f"{same}/{len(walls['scan'])}"
        rows.append(row)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
