"""Scale-up: stores of 10k, 30k and 100k chunks on this machine (``bench/run.py --only scale``).

The corpus is synthetic and deterministic (seeded): Markdown reports of 20 sections under four
team folders. Each section is a real passage — a Cranfield abstract — under a heading, plus a
reference code (``KB-00042-07``) only that section holds; one report in 50 says ``kind: policy``
in its front matter. The *vectors* of those sections are the real model's vector of the passage
(computed once, ``bench/out/scale/pool-*.npy``) plus seeded Gaussian noise (cosine to the
passage ~0.9), not a fresh encode: embedding 100k chunks with the real model takes ~2 hours on
this machine, so the ingest wall below leaves embedding out and quotes it from the measured
encode speed. Questions are embedded by the real model (query latency includes it).

Per size, in fresh processes (peak RSS per phase): build (parse, chunk, index), an unchanged
re-ingest, a one-file change (one section edited: its chunk embedded, BM25 brought in line),
warm queries per mode, filtered and access-restricted queries, ANN recall@10 against exact
search, ``eval`` of 300 questions, ``calibrate``.
"""

from __future__ import annotations

import json
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out" / "scale"
DATASET = ROOT.parent / "shared" / "datasets" / "cranfield"
SIZES = (10_000, 30_000, 100_000)
SECTIONS = 20
CHUNKS_PER_SECTION = 1.65  # measured: a Cranfield passage under its heading makes 1.65 chunks on average
TEAMS = ("team-a", "team-b", "team-c", "team-d")
NOISE = 0.45  # Gaussian noise (norm ~0.45 against a unit vector): cosine to the passage ~0.91
MARK = re.compile(r"\[P(\d{5})\]")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_now_mb() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024)
    return 0


def pool_passages() -> list[dict]:
    rows = [json.loads(line) for line in (DATASET / "corpus.jsonl").open() if line.strip()]
    return [{"id": r["_id"], "title": (r.get("title") or "").strip(), "text": r["text"].strip()} for r in rows]


def pool_vectors(embedder, passages: list[dict]) -> np.ndarray:
    """The real model's vector of every pool passage (its heading and text), cached by model."""
    key = re.sub(r"[^A-Za-z0-9]+", "-", embedder.spec.cache_key)[-60:]
    path = OUT / f"pool-{key}.npy"
    if path.exists():
        m = np.load(path)
        if len(m) == len(passages):
            return m
    OUT.mkdir(parents=True, exist_ok=True)
    m = embedder.embed([f"{heading(p)}\n{p['text']}" for p in passages]).astype(np.float32)
    np.save(path, m)
    return m


def heading(p: dict) -> str:
    words = (p["title"] or p["text"]).split()
    return " ".join(words[:8]).rstrip(" .,;:")


class PoolEmbedder:
    """The real embedder for questions, token counts and identity; a passage's vector is the pool
    vector of the ``[Pnnnnn]`` passage it holds plus noise seeded by its text (the same text, the
    same vector, so re-ingest and the embedding cache behave as with a real model)."""

    def __init__(self, real, pool: np.ndarray):
        self.real, self.pool = real, pool
        for name in ("spec", "model_id", "runtime", "dim", "max_tokens", "batch_size"):
            if hasattr(real, name):
                setattr(self, name, getattr(real, name))

    def __getattr__(self, name):
        return getattr(self.real, name)

    def count_tokens(self, text: str) -> int:
        return self.real.count_tokens(text)

    def embed(self, texts, progress=None) -> np.ndarray:
        out = np.empty((len(texts), self.pool.shape[1]), dtype=np.float32)
        for i, t in enumerate(texts):
            seed = zlib.crc32(t.encode())
            found = MARK.findall(t)
            base = self.pool[int(found[-1]) % len(self.pool)] if found else self.pool[seed % len(self.pool)]
            noise = np.random.default_rng(seed).standard_normal(self.pool.shape[1]).astype(np.float32)
            v = base + NOISE * noise / np.sqrt(self.pool.shape[1])
            out[i] = v / np.linalg.norm(v)
            if progress:
                progress(1)
        return out

    def embed_queries(self, texts) -> np.ndarray:
        return self.real.embed_queries(texts)

    def for_bulk(self, total: int):
        return self


def make_corpus(folder: Path, n_chunks: int, passages: list[dict], seed: int = 0) -> dict:
    """Reports of SECTIONS passages until about ``n_chunks`` sections; returns what was written and,
    per pool passage, the reports holding it (for the question set)."""
    rng = np.random.default_rng(seed)
    shutil.rmtree(folder, ignore_errors=True)
    n_docs = math.ceil(n_chunks / (SECTIONS * CHUNKS_PER_SECTION))
    holders: dict[int, list[str]] = {}
    codes: list[tuple[str, str]] = []
    for d in range(n_docs):
        team = TEAMS[d % len(TEAMS)]
        kind = "policy" if d % 50 == 0 else "report"
        doc_id = f"{team}/r{d:05d}.md"
        picks = rng.integers(0, len(passages), SECTIONS)
        lines = ["---", f"kind: {kind}", f"updated: 2024-{1 + d % 12:02d}-{1 + d % 28:02d}", "---", "",
                 f"# Report R-{d:05d}", ""]
        for s, p in enumerate(picks):
            p = int(p)
            code = f"KB-{d:05d}-{s:02d}"
            lines += [f"## {heading(passages[p])} [P{p:05d}]", "", passages[p]["text"], "",
                      f"Reference code {code}.", ""]
            holders.setdefault(p, []).append(doc_id)
            if s == 7:
                codes.append((code, doc_id))
        path = folder / doc_id
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines))
    return {"docs": n_docs, "holders": holders, "codes": codes}


def question_set(path: Path, corpus: dict, passages: list[dict], seed: int = 0) -> int:
    """300 questions: Cranfield's 225 (relevant: the reports holding a passage its qrels name, up
    to 20), 45 reference-code questions (the one report) and 30 codes no report holds."""
    import csv

    qrels: dict[str, list[str]] = {}
    with (DATASET / "qrels" / "test.tsv").open() as f:
        for row in csv.DictReader(f, delimiter="\t"):
            qrels.setdefault(row["query-id"], []).append(row["corpus-id"])
    index_of = {p["id"]: i for i, p in enumerate(passages)}
    rng = np.random.default_rng(seed)
    out = []
    for line in (DATASET / "queries.jsonl").open():
        if not line.strip():
            continue
        q = json.loads(line)
        docs: list[str] = []
        for cid in qrels.get(q["_id"], []):
            docs += corpus["holders"].get(index_of.get(cid, -1), [])
        docs = sorted(set(docs))[:20]
        out.append({"id": q["_id"], "question": q["text"], "tags": ["prose"],
                    "relevant": [{"doc": d, "grade": 1} for d in docs]})
    picks = rng.choice(len(corpus["codes"]), size=min(45, len(corpus["codes"])), replace=False)
    for i in picks:
        code, doc = corpus["codes"][int(i)]
        out.append({"id": f"code-{code}", "question": f"What does reference code {code} say?", "tags": ["exact-id"],
                    "relevant": [{"doc": doc, "grade": 2}]})
    for i in range(30):
        out.append({"id": f"none-{i}", "question": f"What does reference code KB-9{i:04d}-99 say?",
                    "tags": ["exact-id"], "relevant": []})
    path.write_text("\n".join(json.dumps(q) for q in out) + "\n")
    return len(out)


def contract():
    """The built-in contract, with the team folder as the permission tag (``access.key``)."""
    from kbtool.contract import default_contract, validate_contract

    data = default_contract().to_dict()
    data["access"] = {**data.get("access", {}), "key": "team", "principals": {"alice": ["team-a"]}}
    return validate_contract(data, "the scale bench contract")


def _dir_mb(path: Path) -> float:
    return round(sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20, 1)


def _pct(times: list[float]) -> dict:
    return {"p50_ms": round(1000 * float(np.median(times)), 1), "p95_ms": round(1000 * float(np.percentile(times, 95)), 1)}


# ---- workers (one process each, so peak RSS belongs to one phase) --------------------------------
def _embedder():
    from kbtool.embed import load_embedder

    real = load_embedder()
    return PoolEmbedder(real, pool_vectors(real, pool_passages()))


def _options():
    from kbtool.ingestion.pipeline import IngestOptions

    return IngestOptions(meta_from_path=["{team}/**"])


def worker_build(size: int) -> dict:
    from kbtool.chunk import chunk
    from kbtool.index import index
    from kbtool.ingestion.pipeline import IngestOptions, ingest
    from kbtool.store import Store

    emb = _embedder()
    folder, store_dir = OUT / f"corpus-{size}", OUT / f"kb-{size}"
    shutil.rmtree(store_dir, ignore_errors=True)
    store = Store.open(store_dir, create=True)
    t = time.perf_counter()
    rep = ingest(store, [folder], IngestOptions(meta_from_path=["{team}/**"], parse_only=True))
    t_parse = time.perf_counter() - t
    t = time.perf_counter()
    n = chunk(store, embedder=emb)
    t_chunk = time.perf_counter() - t
    t = time.perf_counter()
    idx = index(store, embedder=emb)
    t_index = time.perf_counter() - t
    return {"documents": len(rep.added), "failed": len(rep.failed), "chunks": n, "parse_s": round(t_parse, 1),
            "chunk_s": round(t_chunk, 1), "index_s": round(t_index, 1),
            "wall_s": round(t_parse + t_chunk + t_index, 1), "embedded": idx.embedded,
            "index_timings": getattr(idx, "timings", None), "peak_rss_mb": round(peak_rss_mb()),
            "store_mb": _dir_mb(store_dir),
            "store_parts_mb": {p.name: _dir_mb(p) if p.is_dir() else round(p.stat().st_size / 2**20, 1)
                               for p in store_dir.iterdir()}}


def worker_update(size: int) -> dict:
    from kbtool.ingestion.pipeline import ingest
    from kbtool.store import Store

    emb = _embedder()
    folder, store_dir = OUT / f"corpus-{size}", Path(os.environ.get("SCALE_STORE") or OUT / f"kb-{size}")
    store = Store.open(store_dir)
    t = time.perf_counter()
    rep = ingest(store, [folder], _options(), embedder=emb)
    unchanged = time.perf_counter() - t
    out = {"unchanged_s": round(unchanged, 2), "unchanged_docs": len(rep.unchanged),
           "unchanged_embedded": rep.index.embedded if rep.index else 0}
    target = folder / TEAMS[1] / "r00001.md"
    text = target.read_text()
    target.write_text(text.replace("Reference code KB-00001-03.", "Reference code KB-00001-03, revised."))
    t = time.perf_counter()
    rep = ingest(store, [folder], _options(), embedder=emb)
    out.update(one_file_s=round(time.perf_counter() - t, 2), one_file_updated=len(rep.updated),
               one_file_embedded=rep.index.embedded if rep.index else 0,
               one_file_bm25_rebuilt=bool(rep.index and rep.index.bm25_rebuilt),
               one_file_bm25_delta=rep.index.bm25_delta if rep.index else 0,
               one_file_index_timings=getattr(rep.index, "timings", None))
    target.write_text(text)  # back as it was (the next run starts from the corpus as generated)
    t = time.perf_counter()
    ingest(store, [folder], _options(), embedder=emb)
    out["restore_s"] = round(time.perf_counter() - t, 2)
    out["peak_rss_mb"] = round(peak_rss_mb())
    return out


def worker_query(size: int, calibrate_too: bool = True) -> dict:
    from kbtool.evaluation.evaluate import EvalConfig, evaluate
    from kbtool.evaluation.questions import load_questions
    from kbtool.query.pipeline import retrieve
    from kbtool.query.retriever import contract_for_mode
    from kbtool.store import Store

    emb = _embedder()
    store = Store.open(OUT / f"kb-{size}")
    qs_path = OUT / f"questions-{size}.jsonl"
    qs = load_questions(qs_path)
    questions = [q.question for q in qs.questions]
    c = contract()
    out: dict = {"questions": len(questions)}
    retrieve(store, c, questions[0], embedder=emb)  # warm: model, indexes, metadata
    lat = {}
    for mode in ("bm25", "dense", "contract"):
        mc = c if mode == "contract" else contract_for_mode(c, mode)
        times = []
        for q in questions:
            t = time.perf_counter()
            retrieve(store, mc, q, embedder=emb)
            times.append(time.perf_counter() - t)
        lat[mode] = _pct(times)
    for name, kw in (("filter kind=policy (2%)", {"filters": ["kind=policy"]}),
                     ("filter team=team-b (25%)", {"filters": ["team=team-b"]}),
                     ("access alice (25%)", {"principal": "alice"})):
        retrieve(store, c, questions[0], embedder=emb, **kw)
        times = []
        for q in questions[:100]:
            t = time.perf_counter()
            retrieve(store, c, q, embedder=emb, **kw)
            times.append(time.perf_counter() - t)
        lat[name] = _pct(times)
    out["latency"] = lat
    out["rss_warm_mb"] = rss_now_mb()  # a warm query process (what `kbtool serve` holds), before eval
    out["ann"] = ann_recall(store, emb, questions[:225])
    t = time.perf_counter()
    report = evaluate(store, qs, EvalConfig(modes=["bm25", "dense", "contract"], ks=[10], metrics=["ndcg", "recall"]),
                      contract=c, embedder=emb)
    out["eval_s"] = round(time.perf_counter() - t, 1)
    out["eval"] = report.metrics()
    if calibrate_too:
        from kbtool.evaluation.calibrate import calibrate

        t = time.perf_counter()
        calibrate(store, qs, c, embedder=emb)
        out["calibrate_s"] = round(time.perf_counter() - t, 1)
    out["peak_rss_mb"] = round(peak_rss_mb())
    return out


def ann_recall(store, emb, questions: list[str], k: int = 10) -> dict:
    """Chroma's HNSW top-k against exact cosine top-k over the very vectors it holds."""
    vecs = store.chunk_vectors()
    ids = list(vecs)
    matrix = np.stack([vecs[c] for c in ids]).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    qv = emb.embed_queries(questions)
    found = [[cid for cid, _ in hits] for hits in store.vectors.search(qv, k)]
    exact = np.argsort(-(qv @ matrix.T), axis=1)[:, :k]
    rec = [len(set(found[i][:k]) & {ids[j] for j in exact[i]}) / k for i in range(len(questions))]
    return {f"recall@{k}": round(float(np.mean(rec)), 4), "min": round(float(np.min(rec)), 2),
            "questions": len(questions), "params": store.manifest["hnsw"]}


WORKERS = {"build": worker_build, "update": worker_update, "query": worker_query}


def _run_worker(kind: str, size: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(Path(__file__)), "--worker", kind, str(size)], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"scale worker {kind} {size} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def scale_bench(results: dict, sizes=SIZES) -> dict:
    from datetime import datetime, timezone

    sys.path.insert(0, str(HERE))
    from common import machine  # noqa: E402

    from kbtool.embed import load_embedder

    OUT.mkdir(parents=True, exist_ok=True)
    passages = pool_passages()
    real = load_embedder()
    pool_vectors(real, passages)
    sample = [f"{heading(p)}\n{p['text']}" for p in passages[:64]]
    real.embed(sample[:4])
    t = time.perf_counter()
    real.embed(sample)
    encode_rate = len(sample) / (time.perf_counter() - t)
    kept = {k: v for k, v in (results.get("scale") or {}).get("sizes", {}).items()
            if not any(abs(int(k) - s) < 0.3 * s for s in sizes)}  # sizes not run again stay
    r = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "machine": machine(),
         "vectors": f"pool of {len(passages)} real passage vectors + seeded noise {NOISE}",
         "encode_chunks_per_s": round(encode_rate, 1), "sizes": kept}
    for size in sizes:
        corpus = make_corpus(OUT / f"corpus-{size}", size, passages)
        question_set(OUT / f"questions-{size}.jsonl", corpus, passages)
        row = {"build": _run_worker("build", size)}
        row["build"]["embed_s_real_model_est"] = round(row["build"]["chunks"] / encode_rate)
        print(f"scale {size}: build {row['build']['wall_s']} s, {row['build']['chunks']} chunks", file=sys.stderr)
        row["update"] = _run_worker("update", size)
        row["query"] = _run_worker("query", size)
        print(f"scale {size}: {json.dumps(row['query']['latency'])}", file=sys.stderr)
        r["sizes"][str(row["build"]["chunks"])] = row
        results["scale"] = r
        (HERE / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    plot(r)
    results["scale"] = r
    return r


def plot(r: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(r["sizes"].items(), key=lambda kv: int(kv[0]))
    n = [int(k) for k, _ in rows]
    fig, ax = plt.subplots(2, 2, figsize=(11, 8))
    a = ax[0][0]
    for mode in ("bm25", "dense", "contract"):
        a.plot(n, [v["query"]["latency"][mode]["p50_ms"] for _, v in rows], "o-", label=f"{mode} p50")
    a.plot(n, [v["query"]["latency"]["contract"]["p95_ms"] for _, v in rows], "o--", label="contract p95")
    for name in [k for k in rows[0][1]["query"]["latency"] if k.startswith(("filter", "access"))]:
        a.plot(n, [v["query"]["latency"][name]["p50_ms"] for _, v in rows], "x:", label=f"{name} p50")
    a.set_title("warm query latency (ms)")
    a.legend(fontsize=7)
    a = ax[0][1]
    a.plot(n, [v["build"]["wall_s"] for _, v in rows], "o-", label="build (parse+chunk+index, vectors given)")
    a.plot(n, [v["build"]["embed_s_real_model_est"] for _, v in rows], "o--", label="embedding, real model (est.)")
    a.plot(n, [v["update"]["unchanged_s"] for _, v in rows], "o-", label="unchanged re-ingest")
    a.plot(n, [v["update"]["one_file_s"] for _, v in rows], "o-", label="one file changed")
    a.plot(n, [v["query"]["eval_s"] for _, v in rows], "o-", label="eval, 300 questions x 3 modes")
    if "calibrate_s" in rows[0][1]["query"]:
        a.plot(n, [v["query"]["calibrate_s"] for _, v in rows], "o-", label="calibrate")
    a.set_yscale("log")
    a.set_title("wall (s)")
    a.legend(fontsize=7)
    a = ax[1][0]
    a.plot(n, [v["build"]["peak_rss_mb"] for _, v in rows], "o-", label="build")
    a.plot(n, [v["query"]["peak_rss_mb"] for _, v in rows], "o-", label="queries+eval+calibrate")
    a.plot(n, [v["build"]["store_mb"] for _, v in rows], "o--", label="store on disk")
    a.set_title("memory / disk (MB)")
    a.legend(fontsize=7)
    a = ax[1][1]
    a.plot(n, [v["query"]["ann"]["recall@10"] for _, v in rows], "o-", label="HNSW recall@10 vs exact")
    a.set_ylim(0.8, 1.0)
    a.set_title("ANN recall@10")
    a.legend(fontsize=7)
    for a in ax.flat:
        a.set_xlabel("chunks")
        a.set_xscale("log")
        a.set_xticks(n, [f"{x / 1000:.0f}k" for x in n])
        a.minorticks_off()
        a.grid(alpha=0.3)
    fig.suptitle(f"kbtool at scale — {r['machine']}, {r['date']}")
    fig.tight_layout()
    fig.savefig(HERE / "scale.png", dpi=90)


def markdown(r: dict) -> list[str]:
    lines = ["", f"Scale (`bench/run.py --only scale`; {r['date']}, {r['machine']}; synthetic reports of Cranfield "
             f"passages, {r['vectors']}; ingest wall without embedding, which the real model would add at "
             f"{r['encode_chunks_per_s']} chunks/s; plot: `bench/scale.png`):", "",
             "| chunks | build s | embed s (est.) | peak RSS MB | store MB | unchanged re-ingest s | one file s | "
             "bm25 p50/p95 | dense p50/p95 | contract p50/p95 | filter 2% p50 | filter 25% p50 | access 25% p50 | "
             "ANN recall@10 | eval s | calibrate s | warm query RSS MB |",
             "|" + "---|" * 17]
    for k, v in sorted(r["sizes"].items(), key=lambda kv: int(kv[0])):
        b, u, q = v["build"], v["update"], v["query"]
        lat = q["latency"]
        f = lambda m: f"{lat[m]['p50_ms']}/{lat[m]['p95_ms']}"  # noqa: E731
        keys = [x for x in lat if x.startswith(("filter", "access"))]
        lines.append(f"| {int(k):,} | {b['wall_s']} | {b['embed_s_real_model_est']} | {b['peak_rss_mb']} | {b['store_mb']} | "
                     f"{u['unchanged_s']} | {u['one_file_s']} | {f('bm25')} | {f('dense')} | {f('contract')} | "
                     + " | ".join(str(lat[x]["p50_ms"]) for x in keys)
                     + f" | {q['ann']['recall@10']} | {q['eval_s']} | {q.get('calibrate_s', '-')} | {q.get('rss_warm_mb', '-')} |")
    return lines


def query_again(results: dict, sizes) -> None:
    """Only the query worker again for stores already built (on a quieter machine)."""
    r = results["scale"]
    for size in sizes:
        key = next(k for k in r["sizes"] if abs(int(k) - size) < 0.3 * size)
        r["sizes"][key]["query"] = _run_worker("query", size)
        print(f"scale {size}: {json.dumps(r['sizes'][key]['query']['latency'])}", file=sys.stderr)
    plot(r)
    (HERE / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--query-again":
        res = json.loads((HERE / "results.json").read_text())
        query_again(res, tuple(int(x) for x in sys.argv[2].split(",")))
        print("\n".join(markdown(res["scale"])))
    elif len(sys.argv) >= 4 and sys.argv[1] == "--worker":
        result = WORKERS[sys.argv[2]](int(sys.argv[3]))
        print(json.dumps(result))
    else:
        sizes = tuple(int(x) for x in sys.argv[1].split(",")) if len(sys.argv) > 1 else SIZES
        res = json.loads((HERE / "results.json").read_text()) if (HERE / "results.json").exists() else {}
        scale_bench(res, sizes)
        print("\n".join(markdown(res["scale"])))
