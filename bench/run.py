"""Benchmarks: ingest speed against the raw embedding time, ONNX vs torch, Chroma HNSW recall
against exact search, warm and cold query latency, retrieval quality.

    make bench            # or: .venv/bin/python bench/run.py [--dataset DIR]
    .venv/bin/python bench/run.py --only core          # Cranfield: ingest vs raw encode, recall, eval, warm/cold query
    .venv/bin/python bench/run.py --only large-files   # parse time and peak RSS of big files alone
    .venv/bin/python bench/run.py --only rerank        # rerank stage latency per backend, sample corpus
    .venv/bin/python bench/run.py --only models        # one embedding model against two (use-m added)
    .venv/bin/python bench/run.py --only serve         # kbtool serve: warm latency, requests/s, memory
    .venv/bin/python bench/run.py --only scale         # 10k, 30k, 100k chunks (bench/scale.py; ~40 min)
    .venv/bin/python bench/run.py --only postprocess   # each post-processing option: relevance and added latency

Writes bench/out/ (the store, scratch) and bench/results.json + bench/RESULTS.md (committed).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from common import machine  # noqa: E402
from postprocess import postprocess_bench, postprocess_markdown  # noqa: E402
from chinese import chinese_bench, chinese_markdown  # noqa: E402
from scale import markdown as scale_markdown, scale_bench  # noqa: E402


def ann_recall(store, queries: list[str], embedder, ks=(10, 100)) -> dict:
    """Recall of Chroma's HNSW top-k against exact cosine top-k over the same vectors."""
    rows = list(store.chunk_vectors().items())
    ids = [cid for cid, _ in rows]
    matrix = np.stack([vec for _, vec in rows])
    qv = embedder.embed_queries(queries)
    out = {}
    kmax = max(ks)
    found = [[cid for cid, _ in hits] for hits in store.vectors.search(qv, kmax)]
    exact = np.argsort(-(qv @ matrix.T), axis=1)[:, :kmax]
    for k in ks:
        rec = [len(set(found[i][:k]) & {ids[j] for j in exact[i][:k]}) / k for i in range(len(queries))]
        out[f"recall@{k}"] = round(float(np.mean(rec)), 4)
    return out


def runtime_embedders(embedder, torch_embedder) -> dict:
    """{runtime name: embedder} of the same model: the one kbtool chose and torch (once if the same)."""
    return {embedder.runtime: embedder, "torch": torch_embedder} if embedder.runtime != "torch" else {"torch": embedder}


def raw_encode(runtimes: dict, texts: list[str], times: dict[str, list[float]]) -> dict:
    """Encode ``texts`` once with each runtime, one after the other; appends each one's seconds to
    ``times`` and returns its vectors."""
    vectors = {}
    for name, e in runtimes.items():
        t = time.perf_counter()
        vectors[name] = e.embed(texts)
        times[name].append(time.perf_counter() - t)
    return vectors


def raw_summary(times: dict[str, list[float]], n_texts: int) -> dict:
    """Each runtime's mean raw-encode time (runs before and after the ingest) and the fastest."""
    per = {name: {"s": round(float(np.mean(ts)), 2), "runs_s": [round(t, 2) for t in ts],
                  "chunks_per_s": round(n_texts / float(np.mean(ts)), 1)} for name, ts in times.items()}
    fastest = min(per, key=lambda name: per[name]["s"])
    return {"texts": n_texts, "fastest": fastest, "s": per[fastest]["s"], "runtimes": per}


ZH = ["索引", "文档", "查询", "存储", "用户", "权限", "结果", "模型", "问题", "回答"]
WORDS = ("the store index query document reader file folder chunk section table model vector search answer "
         "question team policy budget report process data record value page server access limit time").split()
VERBS = "reads writes builds returns keeps checks sends finds moves holds makes gives takes shows".split()


def prose(size: int, md: bool, seed: int = 0) -> str:
    """About ``size`` bytes of English paragraphs (wrapped at 70 columns), headings, lists and, one
    paragraph in seven, a Chinese line: a document unstructured's langdetect calls mixed, which
    made it detect every element's language (the slow path of issue 15)."""
    import random

    r = random.Random(seed)
    out, n, total = ["# Large document" if md else "Large document"], 0, 0
    while total < size:
        n += 1
        x = r.random()
        if x < 0.15:
            part = "".join(r.choice(ZH) for _ in range(r.randint(3, 8))) + "。"
        elif x < 0.22:
            part = ("#" * r.randint(2, 3) + " " if md else "") + f"Section {n} {r.choice(WORDS).title()} {r.choice(WORDS).title()}"
        elif x < 0.27:
            part = "\n".join(f"- {r.choice(WORDS)} {r.choice(VERBS)} {r.choice(WORDS)}" for _ in range(3))
        elif md and x < 0.29:
            part = "```python\n# not a heading\nx = 1\n```"
        else:
            words = [r.choice(WORDS) for _ in range(r.randint(12, 40))]
            words.insert(3, r.choice(VERBS))
            text = " ".join(words).capitalize() + "."
            part = "\n".join(text[i:i + 70] for i in range(0, len(text), 70))
        out.append(part)
        total += len(part.encode("utf-8")) + 2
    return "\n\n".join(out) + "\n"


def parse_worker(path: str, before: bool) -> None:
    """In its own process (so peak RSS is this file's): parse one file, print JSON. ``before``:
    unstructured's language detection on and no pieces, as kbtool parsed before issue 15."""
    from kbtool.ingestion import parse

    parse._use_blank_spacy()
    from unstructured.partition.md import partition_md
    from unstructured.partition.text import partition_text

    partition_md(text="# warm\n\nup text.")
    partition_text(text="Warm up text.")
    try:
        from kbtool.markdown import parser  # Markdown's own parser (issue 30)

        parser().parse("# warm\n\nup text.")
    except ImportError:  # a checkout from before it
        pass
    if before:
        parse.NO_LANGUAGES, parse.PIECE_CHARS, parse.MARKDOWN_PIECE_CHARS = None, 10**12, 10**12
    base = _peak_rss_mb()
    t = time.perf_counter()
    doc = parse.parse_file(Path(path), Path(path).name, max_bytes=10**12)
    dt = time.perf_counter() - t
    out = {"parse_s": round(dt, 1), "blocks": len(doc.blocks)}
    try:  # the kept-text guard's measure, as ingest runs it after parsing (issue 30)
        from kbtool.ingestion.kept import measure_document

        t = time.perf_counter()
        kept = measure_document(doc, Path(path).read_text(encoding="utf-8"), Path(path).suffix)
        out.update(kept_s=round(time.perf_counter() - t, 1), kept=None if kept is None else round(kept.share, 4))
    except ImportError:  # a checkout from before it
        pass
    print(json.dumps({**out, "rss_before_parse_mb": round(base), "peak_rss_mb": round(_peak_rss_mb())}))


def _peak_rss_mb() -> float:
    """This process's peak RSS since its exec (VmHWM). Not ``getrusage``'s ru_maxrss: Linux keeps
    that across execve, so a worker started by a big parent (make bench, with the model loaded)
    reported the parent's 2 GB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def large_files(results: dict) -> dict:
    """Parse time and peak RSS of a generated 30 MB text file and a 5 MB Markdown file (bench/out/,
    not committed), each in a fresh process; and how long embedding the text file's chunks would
    take at this machine's speed, estimated from its token count and a timed sample of chunks."""
    out_dir = HERE / "out"
    out_dir.mkdir(exist_ok=True)
    r: dict = {}
    for name, size, md in (("large-30mb.txt", 30 * 2**20, False), ("large-5mb.md", 5 * 2**20, True)):
        path = out_dir / name
        if not path.exists() or abs(path.stat().st_size - size) > 2**20:
            path.write_text(prose(size, md), encoding="utf-8")
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--parse-worker", str(path)],
                              capture_output=True, text=True, check=True, cwd=ROOT)
        r[name] = {"mb": round(path.stat().st_size / 2**20, 1), **json.loads(proc.stdout.strip().splitlines()[-1])}
        r[name]["mb_per_s"] = round(r[name]["mb"] / max(r[name]["parse_s"], 0.05), 2)
        print(f"bench: {name}: {r[name]}", file=sys.stderr)

    from kbtool.chunk import ChunkParams
    from kbtool.embed import load_embedder

    embedder = load_embedder()
    params = ChunkParams().resolved(embedder.max_tokens)
    text = (out_dir / "large-30mb.txt").read_text(encoding="utf-8")
    tokens = sum(embedder.count_tokens(text[i:i + 100_000]) for i in range(0, len(text), 100_000))
    chunks = tokens // (params.size - params.overlap) + 1
    words = text.split()
    sample = [" ".join(words[i:i + params.size * 2 // 3]) for i in range(0, 256 * params.size, params.size)][:256]
    embedder.embed(sample[:8])
    t = time.perf_counter()
    embedder.embed(sample)
    rate = len(sample) / (time.perf_counter() - t)
    r["embed_estimate_30mb"] = {"tokens": tokens, "chunks": chunks, "chunk_tokens": params.size,
                                "chunks_per_s": round(rate, 1), "embed_s": round(chunks / rate)}
    r["parse_share_of_embed_30mb"] = round(r["large-30mb.txt"]["parse_s"] / (chunks / rate), 3)
    results["large_files"] = r
    return r


def large_files_markdown(r: dict) -> list[str]:
    if not r:
        return []
    e = r["embed_estimate_30mb"]
    return [
        "",
        "Large files (`bench/run.py --only large-files`; generated English prose with headings, lists and "
        "a Chinese line in seven, so langdetect calls it mixed; each file parsed in a fresh process):",
        "",
        "| file | MB | parse | MB/s | blocks | kept-text guard | peak RSS (after imports) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *[f"| {name} | {v['mb']} | {v['parse_s']} s | {v['mb_per_s']} | {v['blocks']} | "
          + (f"{v['kept_s']} s ({v['kept']:.0%} kept)" if v.get("kept_s") is not None else "–")
          + f" | {v['peak_rss_mb']} MB ({v['rss_before_parse_mb']} MB) |" for name, v in r.items() if name.startswith("large-")],
        f"| embedding the 30 MB file's chunks (estimate) | {e['tokens']} tokens, ~{e['chunks']} chunks of "
        f"{e['chunk_tokens']} tokens at {e['chunks_per_s']} chunks/s | ~{e['embed_s']} s | | | |",
        "",
        f"Parsing the 30 MB text file takes {100 * r['parse_share_of_embed_30mb']:.0f} % of the time embedding its "
        "chunks takes.",
    ]


# ---- rerank (postprocess.rerank) ------------------------------------------------------------
class _OverlapServer:
    """A scripted TEI-shaped rerank server on localhost: scores a text by the question words it holds."""

    def __enter__(self):
        import re
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        def words(t):
            return set(re.findall(r"\w+", t.lower()))

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                q = words(body["query"])
                out = json.dumps([{"index": i, "score": float(len(q & words(t)))}
                                  for i, t in enumerate(body["texts"])]).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def tiny_cross_encoder(folder: Path) -> Path:
    """The test suite's tiny cross-encoder (tests/test_rerank.py): a seeded 1-layer, 32-wide BERT with
    one label and the bundled MiniLM's tokenizer. Random weights: a latency fixture, not a reranker."""
    if (folder / "config.json").exists():
        return folder
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    from kbtool.embed import DEFAULT_MODEL, resolve_model_path

    src = resolve_model_path(DEFAULT_MODEL)
    vocab = sum(1 for _ in (src / "vocab.txt").open(encoding="utf-8"))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512, num_labels=1, initializer_range=0.5)
    BertForSequenceClassification(config).save_pretrained(folder)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (src / name).exists():
            shutil.copy(src / name, folder / name)
    return folder


def rerank_bench(results: dict) -> dict:
    """Latency of the rerank stage (top_n 20) per query on the sample corpus, per backend: the
    stage's own time inside ``pipeline.answer`` (trace ``rerank.ms``: rows, texts, scoring), with
    an empty rerank cache for every query; candidates gathered once beforehand. Each backend is
    loaded and warmed on one query before timing."""
    from kbtool.contract import load_contract
    from kbtool.embed import load_embedder
    from kbtool.evaluation.questions import load_questions
    from kbtool.ingestion.pipeline import ingest
    from kbtool.query.pipeline import answer, gather
    from kbtool.query.scope import scope
    from kbtool.store import Store

    out_dir = HERE / "out"
    out_dir.mkdir(exist_ok=True)
    store_dir = out_dir / "sample-kb"
    if not (store_dir / "manifest.json").exists():
        shutil.rmtree(store_dir, ignore_errors=True)
        ingest(Store.open(store_dir, create=True), [ROOT / "sample_corpus"], embedder=load_embedder())
    store = Store.open(store_dir)
    questions = [q.question for q in load_questions(ROOT / "eval_sets" / "sample.jsonl").questions]
    base = load_contract(None, [], search=False)
    cands = gather(store, base, questions, sc=scope(store, base))
    ce = tiny_cross_encoder(out_dir / "tiny-cross-encoder")
    r: dict = {"questions": len(questions), "top_n": 20, "corpus": "sample_corpus", "backends": {}}
    with _OverlapServer() as server:
        backends = {
            "http (scripted TEI server on localhost)": [f"postprocess.rerank.url={server.url}"],
            "cross-encoder (tiny 1-layer test model)": [f"postprocess.rerank.model={ce}"],
            "dense (the store's all-MiniLM-L6-v2)": ["postprocess.rerank.model=dense"],
        }
        backends["cross-encoder (tiny 1-layer test model), torch 1 thread"] = backends[
            "cross-encoder (tiny 1-layer test model)"]
        for name, extra in backends.items():
            kind = name.split()[0]
            threads = None
            if name.endswith("1 thread"):
                import torch

                threads = torch.get_num_threads()
                torch.set_num_threads(1)
            contract = load_contract(None, [f"postprocess.rerank.backend={kind}", "postprocess.rerank.top_n=20",
                                            *extra], search=False)
            t = time.perf_counter()
            answer(store, contract, cands[0], sc=scope(store, contract))  # load and warm
            load_s = time.perf_counter() - t
            times = []
            for c in cands:
                c.rerank_cache.clear()
                a = answer(store, contract, c, sc=scope(store, contract))
                times.append(a.trace["rerank"]["ms"])
            r["backends"][name] = {"p50_ms": round(float(np.median(times)), 1),
                                   "p95_ms": round(float(np.percentile(times, 95)), 1),
                                   "first_query_s": round(load_s, 2)}
            print(f"bench: rerank {name}: {r['backends'][name]}", file=sys.stderr)
            if threads is not None:
                torch.set_num_threads(threads)
    r["load_average_1m_after"] = round(__import__("os").getloadavg()[0], 2)  # the machine is shared: torch threads wait
    results["rerank"] = r
    return r


def rerank_markdown(r: dict) -> list[str]:
    if not r:
        return []
    return [
        "",
        f"Rerank stage (`bench/run.py --only rerank`; `postprocess.rerank.top_n` {r['top_n']}, the "
        f"{r['questions']} questions of eval_sets/sample.jsonl on {r['corpus']}; the stage's own time inside "
        "`pipeline.answer`, no cache; the first query loads the backend):",
        "",
        "| backend | p50 | p95 | first query (load) |",
        "| --- | --- | --- | --- |",
        *[f"| {name} | {v['p50_ms']} ms | {v['p95_ms']} ms | {v['first_query_s']} s |"
          for name, v in r["backends"].items()],
        "",
        f"Load average after the run: {r.get('load_average_1m_after')} on {machine()} (torch's two threads "
        "slow down badly when other processes hold the cores). The tiny cross-encoder has random weights (a test "
        "fixture): its time is a floor; a real MS MARCO MiniLM-L6 cross-encoder (6 layers, 384 wide) costs far "
        "more per pair on this CPU.",
    ]


# ---- several models in one store (dense + dense:use-m) ---------------------------------------
def models_bench(results: dict, runs: int = 3) -> dict:
    """One model against two on the sample corpus: ingest wall time of a fresh store (CLI, one
    process each), warm query latency per question through ``retrieve`` (Chinese questions run
    dense:use-m too, English ones do not), and a cold ``kbtool query`` process for an English and a
    Chinese question (median of ``runs``)."""
    import statistics
    import subprocess

    from kbtool.contract import default_contract
    from kbtool.evaluation.questions import load_questions
    from kbtool.query.pipeline import retrieve
    from kbtool.store import Store
    from kbtool.store.analyzer import CJK

    kbtool = [sys.executable, "-m", "kbtool"]
    out_dir = HERE / "out"
    out_dir.mkdir(exist_ok=True)
    r: dict = {"corpus": "sample_corpus", "machine": machine(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
               "ingest_s": {}, "query_ms": {}, "cold_query_s": {}}
    stores = {"one model": (out_dir / "models-1-kb", []), "two models": (out_dir / "models-2-kb", ["--add-model", "use-m"])}
    for name, (path, extra) in stores.items():
        times = []
        for _ in range(2):
            shutil.rmtree(path, ignore_errors=True)
            t = time.perf_counter()
            subprocess.run([*kbtool, "ingest", str(ROOT / "sample_corpus"), "--store", str(path), "-q", *extra],
                           check=True, cwd=ROOT)
            times.append(time.perf_counter() - t)
        r["ingest_s"][name] = round(min(times), 2)
        print(f"bench: models ingest {name}: {times}", file=sys.stderr)
    questions = [q.question for q in load_questions(ROOT / "eval_sets" / "sample.jsonl").questions]
    contract = default_contract()
    for name, (path, _) in stores.items():
        store = Store.open(path)
        retrieve(store, contract, questions[:2] + [q for q in questions if CJK.search(q)][:1])  # load the models
        per = {"en": [], "zh": []}
        for q in questions:
            t = time.perf_counter()
            retrieve(store, contract, q)
            per["zh" if CJK.search(q) else "en"].append((time.perf_counter() - t) * 1000)
        r["query_ms"][name] = {lang: {"n": len(v), "p50": round(statistics.median(v), 1),
                                      "p95": round(sorted(v)[int(0.95 * (len(v) - 1))], 1)} for lang, v in per.items()}
    ask = {"en": "What causes error TW-E5120 and how do I fix it?", "zh": "两个人同时改了同一个文件会怎样？"}
    for name, (path, _) in stores.items():
        r["cold_query_s"][name] = {}
        for lang, q in ask.items():
            times = []
            for _ in range(runs):
                t = time.perf_counter()
                subprocess.run([*kbtool, "query", q, "--store", str(path)], check=True, cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                times.append(time.perf_counter() - t)
            r["cold_query_s"][name][lang] = round(statistics.median(times), 2)
    r["load_average_1m_after"] = round(__import__("os").getloadavg()[0], 2)
    results["models"] = r
    return r


def models_markdown(r: dict) -> list[str]:
    if not r:
        return []
    q = r["query_ms"]
    return [
        "",
        f"One embedding model against two (`bench/run.py --only models`; {r['corpus']}, {r['date']}, "
        f"load average {r.get('load_average_1m_after')} after the run): the second model is `use-m` "
        "(`ingest --add-model use-m`); Chinese questions run it, English ones do not.",
        "",
        "| store | ingest (fresh) | warm query p50 / p95, English | warm query p50 / p95, Chinese | cold `kbtool query`, English / Chinese |",
        "| --- | --- | --- | --- | --- |",
        *[f"| {name} | {r['ingest_s'][name]} s | {q[name]['en']['p50']} / {q[name]['en']['p95']} ms | "
          f"{q[name]['zh']['p50']} / {q[name]['zh']['p95']} ms | {r['cold_query_s'][name]['en']} / "
          f"{r['cold_query_s'][name]['zh']} s |" for name in r["ingest_s"]],
    ]


def serve_bench(results: dict, seconds: float = 10.0) -> dict:
    """`kbtool serve` warm: a real server process per store (the sample corpus and Cranfield, built
    by the main bench), HTTP requests from this process. Per store: p50/p95 of sequential
    ``POST /v1/retrieve`` (the contract, questions of the store's set), requests/s with 4 client
    threads for ``seconds``, the server's resident memory (VmRSS) and peak (VmHWM); and the same
    questions through ``Service.retrieve`` in-process (no HTTP) for the share of the transport."""
    import re
    import statistics
    import subprocess
    import threading

    import httpx

    from kbtool.evaluation.questions import load_questions

    out_dir = HERE / "out"
    sample_kb = out_dir / "sample-kb"
    if not (sample_kb / "manifest.json").exists():
        subprocess.run([sys.executable, "-m", "kbtool", "ingest", str(ROOT / "sample_corpus"), "--store", str(sample_kb),
                        "-q"], check=True, cwd=ROOT)
    dataset = ROOT.parent / "shared" / "datasets" / "cranfield"
    sets = {"sample": (sample_kb, [q.question for q in load_questions(ROOT / "eval_sets" / "sample.jsonl").questions])}
    if (out_dir / "cranfield-kb" / "manifest.json").exists() and (dataset / "queries.jsonl").exists():
        cq = [json.loads(line)["text"] for line in (dataset / "queries.jsonl").read_text().splitlines() if line.strip()]
        sets["cranfield"] = (out_dir / "cranfield-kb", cq[:150])
    scale_kb = out_dir / "scale" / "kb-100000"  # the largest store of bench/scale.py, if built
    if (scale_kb / "manifest.json").exists() and (out_dir / "scale" / "questions-100000.jsonl").exists():
        sets["scale-100k"] = (scale_kb, [q.question for q in load_questions(out_dir / "scale" / "questions-100000.jsonl").questions][:150])
    r: dict = {"machine": machine(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "stores": {}}
    for name, (store, questions) in sets.items():
        proc = subprocess.Popen([sys.executable, "-m", "kbtool", "serve", "--store", str(store), "--port", "0"],
                                cwd=ROOT, stderr=subprocess.PIPE, text=True)
        try:
            url = None
            t0 = time.perf_counter()
            for line in proc.stderr:
                m = re.search(r"(http://127\.0\.0\.1:\d+)", line)
                if m:
                    url = m.group(1)
                    break
            if url is None:
                raise RuntimeError(f"kbtool serve did not start for {store}")
            startup = time.perf_counter() - t0
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            with httpx.Client(base_url=url, timeout=60) as client:
                for q in questions[:3]:
                    client.post("/v1/retrieve", json={"question": q}).raise_for_status()
                lat = []
                for q in questions:
                    t = time.perf_counter()
                    client.post("/v1/retrieve", json={"question": q}).raise_for_status()
                    lat.append((time.perf_counter() - t) * 1000)
            done, stop, errors = [0], threading.Event(), []

            def worker(i: int) -> None:
                with httpx.Client(base_url=url, timeout=60) as c:
                    k = i
                    while not stop.is_set():
                        resp = c.post("/v1/retrieve", json={"question": questions[k % len(questions)]})
                        if resp.status_code != 200:
                            errors.append(resp.status_code)
                        done[0] += 1
                        k += 4

            threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
            t = time.perf_counter()
            for th in threads:
                th.start()
            time.sleep(seconds)
            stop.set()
            for th in threads:
                th.join()
            rps = done[0] / (time.perf_counter() - t)
            status = Path(f"/proc/{proc.pid}/status").read_text()
            mem = {k: round(int(re.search(rf"{k}:\s+(\d+)", status).group(1)) / 1024) for k in ("VmRSS", "VmHWM")}
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        from kbtool.serve.service import Service

        service = Service(store)
        inproc = []
        for q in questions:
            t = time.perf_counter()
            service.retrieve(q)
            inproc.append((time.perf_counter() - t) * 1000)
        service.store.close()
        q95 = lambda xs: statistics.quantiles(xs, n=20)[18]  # noqa: E731
        r["stores"][name] = {
            "questions": len(questions), "startup_s": round(startup, 2),
            "http_p50_ms": round(statistics.median(lat), 1), "http_p95_ms": round(q95(lat), 1),
            "inprocess_p50_ms": round(statistics.median(inproc), 1), "inprocess_p95_ms": round(q95(inproc), 1),
            "requests_per_s_4_clients": round(rps, 1), "errors": len(errors),
            "rss_mb": mem["VmRSS"], "peak_rss_mb": mem["VmHWM"]}
        from kbtool.store import Store

        r["stores"][name]["chunks"] = Store.open(store).status()["chunks"]
        print(f"bench: serve {name}: {r['stores'][name]}", file=sys.stderr)
    results["serve"] = r
    return r


def scale_and_serve(results: dict) -> dict:
    """bench/scale.py's stores of 10k, 30k and 100k chunks, then `kbtool serve` on each store of
    the bench, the 100k one included."""
    r = scale_bench(results)
    serve_bench(results)
    return r


def serve_markdown(r: dict) -> list[str]:
    if not r:
        return []
    lines = ["", f"`kbtool serve` warm (`bench/run.py --only serve`; {r['date']}, {r['machine']}; the built-in "
             "contract, one HTTP request per question, sequential; then 4 client threads for 10 s):", "",
             "| store | chunks | p50 / p95 HTTP | p50 / p95 in-process | requests/s (4 clients) | server RSS / peak | startup |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, v in r["stores"].items():
        lines.append(f"| {name} | {v['chunks']} | {v['http_p50_ms']} / {v['http_p95_ms']} ms | {v['inprocess_p50_ms']} / "
                     f"{v['inprocess_p95_ms']} ms | {v['requests_per_s_4_clients']} | {v['rss_mb']} / {v['peak_rss_mb']} MB "
                     f"| {v['startup_s']} s |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default=str(ROOT.parent / "shared" / "datasets" / "cranfield"))
    ap.add_argument("--only", choices=["core", "large-files", "rerank", "models", "serve", "scale", "postprocess", "chinese"], help="run one part alone, merged into the results (core: the Cranfield ingest against the raw encode, HNSW recall, eval, warm and cold query)")
    ap.add_argument("--parse-worker", help=argparse.SUPPRESS)
    ap.add_argument("--before", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.parse_worker:
        parse_worker(args.parse_worker, args.before)
        return
    if args.only and args.only != "core":
        part, key = {"large-files": (large_files, "large_files"), "rerank": (rerank_bench, "rerank"),
                     "models": (models_bench, "models"), "serve": (serve_bench, "serve"),
                     "scale": (scale_and_serve, "scale"),
                     "postprocess": (postprocess_bench, "postprocess"), "chinese": (chinese_bench, "chinese")}[args.only]
        results = json.loads((HERE / "results.json").read_text()) if (HERE / "results.json").exists() else {}
        part(results)
        (HERE / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
        write_markdown(results)
        print(json.dumps(results[key], indent=2))
        return
    dataset = Path(args.dataset)
    if not (dataset / "corpus.jsonl").exists():
        sys.exit(f"bench: {dataset} has no corpus.jsonl (pass --dataset)")

    from kbtool.embed import load_embedder
    from kbtool.ingestion.pipeline import IngestOptions, ingest
    from kbtool.query.retriever import Retriever
    from kbtool.store import Store

    out_dir = HERE / "out"
    store_dir = out_dir / "cranfield-kb"
    shutil.rmtree(store_dir, ignore_errors=True)
    out_dir.mkdir(exist_ok=True)
    results: dict = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "machine": machine(),
                     "dataset": dataset.name}

    t = time.perf_counter()
    embedder = load_embedder()
    embedder.embed(["warm up"])
    results["model_load_s"] = round(time.perf_counter() - t, 2)
    results["runtime"] = embedder.runtime

    # The chunk texts exactly as index embeds them, from a scratch store (parse + chunk only).
    from kbtool.chunk import chunk
    from kbtool.index import index
    shutil.rmtree(out_dir / "scratch-kb", ignore_errors=True)
    scratch = Store.open(out_dir / "scratch-kb", create=True)
    ingest(scratch, [dataset], IngestOptions(format="beir", parse_only=True))
    chunk(scratch, embedder=embedder)
    texts = scratch.embedding_texts()
    # The raw encode of every text by each runtime of the model (alternated, before the ingest and
    # again after it): the ingest is quoted against the fastest, whichever runtime it chose.
    from kbtool.embed.st import SentenceTransformerEmbedder

    torch_e = SentenceTransformerEmbedder(embedder.spec)
    torch_e.embed(["warm up"])
    runtimes = runtime_embedders(embedder, torch_e)
    raw_times = {name: [] for name in runtimes}
    raw = raw_encode(runtimes, texts, raw_times)[embedder.runtime]

    # ONNX against torch on the same texts: speed and the largest deviation of any vector.
    sample = texts[:: max(1, len(texts) // 400)]
    speed = {"onnx": [], "torch": []}
    for _ in range(3):  # alternated, so drift in the machine's speed hits both alike
        for name, e in (("onnx", embedder), ("torch", torch_e)):
            t = time.perf_counter()
            vecs = e.embed(sample)
            speed[name].append(len(sample) / (time.perf_counter() - t))
            if name == "torch":
                tv = vecs
    idx_of = {tx: i for i, tx in enumerate(texts)}
    ov = raw[[idx_of[tx] for tx in sample]]
    cos = (tv * ov).sum(1)
    results["onnx_vs_torch"] = {
        "texts": len(sample), "torch_chunks_per_s": round(float(np.median(speed["torch"])), 1),
        "onnx_chunks_per_s": round(float(np.median(speed["onnx"])), 1),
        "batch_sizes": {"onnx": embedder.batch_size, "torch": torch_e.batch_size},
        "min_cosine": round(float(cos.min()), 7), "max_deviation": float(f"{float(1 - cos.min()):.2e}"),
    }

    # The real thing: a fresh store, ingest + index, each stage timed; wall = their sum.
    store = Store.open(store_dir, create=True)
    t = time.perf_counter()
    report = ingest(store, [dataset], IngestOptions(format="beir", parse_only=True))
    t_parse = time.perf_counter() - t
    t = time.perf_counter()
    n_chunks = chunk(store, embedder=embedder)
    t_chunk = time.perf_counter() - t
    t = time.perf_counter()
    idx = index(store, embedder=embedder)
    t_index = time.perf_counter() - t
    wall = t_parse + t_chunk + t_index
    # The raw encodes again, right after: this machine's speed drifts by ~10 % between minutes, so
    # the ratio uses the mean of the runs before and after the ingest.
    raw_encode(runtimes, texts, raw_times)
    del torch_e, runtimes
    results["raw_encode"] = raw_summary(raw_times, len(texts))
    t_raw = results["raw_encode"]["s"]
    results["ingest"] = {
        "documents": len(report.added), "failed": len(report.failed), "chunks": n_chunks,
        "parse_s": round(t_parse, 2), "chunk_s": round(t_chunk, 2), "index_s": round(t_index, 2),
        "wall_s": round(wall, 2), "embedded": idx.embedded,
        "chunks_per_s_ingest": round(n_chunks / wall, 1),
        "ratio_to_raw_encode": round(wall / t_raw, 3),  # against the fastest runtime's raw encode
        "ratio_to_raw_encode_by_runtime": {name: round(wall / r["s"], 3)
                                           for name, r in results["raw_encode"]["runtimes"].items()},
    }
    t = time.perf_counter()
    again = ingest(store, [dataset], IngestOptions(format="beir"), embedder=embedder)
    results["ingest"]["unchanged_rerun_s"] = round(time.perf_counter() - t, 2)
    results["ingest"]["unchanged_rerun_embedded"] = again.index.embedded

    queries = [json.loads(l)["text"] for l in (dataset / "queries.jsonl").open() if l.strip()]
    results["hnsw"] = {"params": store.manifest["hnsw"], **ann_recall(store, queries, embedder)}

    retriever = Retriever(store, embedder)
    from kbtool.evaluation.evaluate import EvalConfig, evaluate
    from kbtool.evaluation.questions import load_questions

    t = time.perf_counter()
    modes = ["bm25", "dense", "hybrid", "contract", "weighted:0.5"]
    report = evaluate(store, load_questions(dataset), EvalConfig(modes=modes, ks=[10, 100], metrics=["ndcg", "recall", "mrr"]),
                      retriever=retriever)
    results["eval_s"] = round(time.perf_counter() - t, 2)
    results["eval"] = report.metrics()
    lat = {}
    for mode in ("bm25", "dense", "hybrid"):
        times = []
        for q in queries:
            t = time.perf_counter()
            retriever.search(q, mode=mode, top_k=10)
            times.append(time.perf_counter() - t)
        lat[mode] = {"p50_ms": round(1000 * float(np.median(times)), 1),
                     "p95_ms": round(1000 * float(np.percentile(times, 95)), 1)}
    results["query_latency_warm"] = lat

    kbtool = Path(sys.executable).with_name("kbtool")
    cold = {}
    for mode in ("contract", "bm25"):
        times = []
        for q in queries[:5]:
            t = time.perf_counter()
            subprocess.run([str(kbtool), "query", q, "--store", str(store_dir), "--json", "-m", mode], check=True,
                           capture_output=True)
            times.append(time.perf_counter() - t)
        cold[mode] = {"median_s": round(float(np.median(times)), 2), "max_s": round(max(times), 2)}
    results["query_cold_cli"] = cold
    times = []
    for _ in range(5):
        t = time.perf_counter()
        subprocess.run([str(kbtool), "--help"], check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    results["help_cli_s"] = round(float(np.median(times)), 2)
    results["query_cold_imports_ms"] = import_costs(kbtool, queries[0], store_dir)
    if args.only == "core":  # the other parts' results stay as the last full run left them
        earlier = json.loads((HERE / "results.json").read_text()) if (HERE / "results.json").exists() else {}
        results = {**earlier, **results}
    else:
        large_files(results)
        rerank_bench(results)
        postprocess_bench(results)
        models_bench(results)
        scale_and_serve(results)

    (HERE / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    write_markdown(results)
    print(json.dumps(results, indent=2))


def import_costs(kbtool: Path, query: str, store_dir: Path) -> dict:
    """Cumulative import time of the heavy top-level packages in a cold query (python -X importtime)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "kbtool", "query", query, "--store",
                           str(store_dir), "--json"], capture_output=True, text=True, check=True)
    costs = {}
    for line in proc.stderr.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[2] and not parts[2].startswith(" ") and "." not in parts[2]:
            try:
                costs[parts[2]] = round(int(parts[1]) / 1000, 1)
            except ValueError:
                pass
    keep = ["kbtool", "typer", "rich", "numpy", "pydantic", "yaml", "chromadb", "bm25s", "onnxruntime",
            "tokenizers", "jieba", "torch", "sentence_transformers", "wordfreq", "detect_secrets", "requests", "tqdm"]
    # A package the query never imports is listed as 0 (that is the point of the lazy imports).
    return {k: costs.get(k, 0.0) for k in keep}


def write_markdown(r: dict) -> None:
    i, h, lat, raw, ot = r["ingest"], r["hnsw"], r["query_latency_warm"], r["raw_encode"], r["onnx_vs_torch"]
    cold = r["query_cold_cli"]
    lines = [
        f"# Benchmark results ({r['date']}, {r['machine']})",
        "",
        f"Produced by `make bench` (`bench/run.py`) on `{r['dataset']}`; numbers from one run.",
        "",
        "| what | value |", "| --- | --- |",
        f"| documents / chunks | {i['documents']} / {i['chunks']} ({i['failed']} empty records failed) |",
        f"| parse / chunk / index (embed + Chroma + BM25) | {i['parse_s']} s / {i['chunk_s']} s / {i['index_s']} s |",
        f"| ingest + index wall ({r['runtime']}) vs the fastest raw encode of the same {raw['texts']} texts "
        f"({raw['fastest']}) | {i['wall_s']} s vs {raw['s']} s: **ratio {i['ratio_to_raw_encode']}** "
        f"({i['chunks_per_s_ingest']} chunks/s) |",
        *[f"| raw encode, {name} (mean of runs before and after the ingest) | {v['s']} s "
          f"({', '.join(f'{t} s' for t in v['runs_s'])}; {v['chunks_per_s']} chunks/s): ingest ratio "
          f"{i['ratio_to_raw_encode_by_runtime'][name]} |" for name, v in raw["runtimes"].items()],
        f"| ONNX vs torch, {ot['texts']} chunk texts, median of 3 alternated runs | {ot['onnx_chunks_per_s']} vs "
        f"{ot['torch_chunks_per_s']} chunks/s; "
        f"min cosine {ot['min_cosine']} (max deviation {ot['max_deviation']}) |",
        f"| unchanged re-ingest | {i['unchanged_rerun_s']} s, {i['unchanged_rerun_embedded']} embedded |",
        f"| Chroma HNSW {h['params']} | recall@10 {h['recall@10']}, recall@100 {h['recall@100']} vs exact cosine |",
        *[f"| warm query, {m} | p50 {v['p50_ms']} ms, p95 {v['p95_ms']} ms |" for m, v in lat.items()],
        *[f"| cold `kbtool query -m {m}` process (5 questions) | median {v['median_s']} s, max {v['max_s']} s |"
          for m, v in cold.items()],
        f"| `kbtool --help` (median of 5) | {r['help_cli_s']} s |",
        "| imports of a cold query (ms, cumulative; 0: not imported) | "
        + ", ".join(f"{k} {v}" for k, v in r["query_cold_imports_ms"].items()) + " |",
        f"| model load + first embedding | {r['model_load_s']} s |",
        "",
        f"Retrieval quality on {r['dataset']} (`kbtool eval`, document level, qrels/test.tsv, "
        f"{r['eval_s']} s for all modes):",
        "",
        "| mode | nDCG@10 | recall@100 | MRR@10 |",
        "| --- | --- | --- | --- |",
        *[f"| {m} | {v['ndcg@10']:.3f} | {v['recall@100']:.3f} | {v['mrr@10']:.3f} |" for m, v in r["eval"].items()],
        *large_files_markdown(r.get("large_files", {})),
        *rerank_markdown(r.get("rerank", {})),
        *postprocess_markdown(r.get("postprocess", {})),
        *models_markdown(r.get("models", {})),
        *chinese_markdown(r.get("chinese", {})),
        *serve_markdown(r.get("serve", {})),
        *(scale_markdown(r["scale"]) if r.get("scale") else []),
    ]
    (HERE / "RESULTS.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
