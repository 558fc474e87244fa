"""BM25 analysis speed: chunks/s of ``Analyzer`` over real chunk texts, before and after.

    python bench/analyzer_speed.py [--before /work/main] [--english 20000]

Inputs (written once to bench/out/analyzer_speed/, then read by every worker):
- English: synthetic report sections as ``bench/scale.py`` makes them (a Cranfield passage under its
  heading plus a ``KB-00042-07`` reference code, seeded), as the chunk text ``index`` analyses;
- Chinese: every chunk of the stores bench/out/cmrc-dev-kb and bench/out/fastapi-zh-kb (of this checkout
  or else of ``--before``'s; read through ``Store.open`` / ``chunks_for_index``; Chinese prose, the
  second mixed with English identifiers and code).

Each case runs in a fresh process per code tree (``PYTHONPATH=<tree>``; *before* is ``--before``,
*after* this checkout), back to back on the same input: a warm-up of 300 texts (jieba's dictionary,
the stemmer), then the timed analysis of every text (``Analyzer.many`` where the tree has it, else one
call per text, as ``index`` did). Each worker prints a digest of all tokens: before and after must agree.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out" / "analyzer_speed"
ZH_STORES = ("cmrc-dev-kb", "fastapi-zh-kb")
CASES = {  # case -> (input file, analyzer settings over the defaults)
    "english": ("english.json", {}),
    "english+stemmer": ("english.json", {"stemmer": "english"}),
    "chinese": ("chinese.json", {}),
}


def english_texts(n: int, seed: int = 0) -> list[str]:
    """Section texts as bench/scale.py's ``make_corpus`` writes them, with a section's prefix
    (its heading), as ``embed_text`` joins them for BM25."""
    import numpy as np

    sys.path.insert(0, str(HERE))
    from scale import SECTIONS, heading, pool_passages

    passages = pool_passages()
    rng = np.random.default_rng(seed)
    out: list[str] = []
    d = 0
    while len(out) < n:
        for s, p in enumerate(rng.integers(0, len(passages), SECTIONS)):
            p = int(p)
            out.append(f"Report R-{d:05d} > {heading(passages[p])} [P{p:05d}]\n\n"
                       f"{passages[p]['text']}\n\nReference code KB-{d:05d}-{s:02d}.")
        d += 1
    return out[:n]


def chinese_texts(trees: list[Path]) -> list[str]:
    """Every chunk of the ZH_STORES, found in the first tree's bench/out that holds them."""
    from kbtool.document import embed_text
    from kbtool.store import Store

    texts = []
    for name in ZH_STORES:
        store = Store.open(next((t / "bench" / "out" / name for t in trees if (t / "bench" / "out" / name).is_dir()),
                                ROOT / "bench" / "out" / name))
        texts += [embed_text(r["prefix"], r["text"]) for r in store.chunks_for_index()]
    return texts


def worker(case: str) -> dict:
    from kbtool.store.analyzer import Analyzer, AnalyzerConfig

    name, settings = CASES[case]
    texts = json.loads((OUT / name).read_text("utf-8"))
    analyse_all = lambda a, ts: a.many(ts) if hasattr(a, "many") else [a(t) for t in ts]  # noqa: E731
    analyse_all(Analyzer(AnalyzerConfig(**settings)), texts[:300])  # warm-up: jieba, stemmer
    analyzer = Analyzer(AnalyzerConfig(**settings))  # a fresh one, as ``index`` takes
    start = time.perf_counter()
    tokens = analyse_all(analyzer, texts)
    seconds = time.perf_counter() - start
    digest = hashlib.sha256(json.dumps(tokens, ensure_ascii=False).encode()).hexdigest()[:16]
    return {"case": case, "chunks": len(texts), "s": round(seconds, 3), "chunks_per_s": round(len(texts) / seconds),
            "tokens": sum(map(len, tokens)), "digest": digest}


def run(tree: Path, case: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    got = subprocess.run([sys.executable, __file__, "--worker", case], env=env, cwd=tree,
                         capture_output=True, text=True, check=True)
    return json.loads(got.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="/work/main", help="the code tree to compare against")
    ap.add_argument("--english", type=int, default=20_000, help="English chunks to analyse")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker)))
        return
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "english.json").write_text(json.dumps(english_texts(args.english)), "utf-8")
    (OUT / "chinese.json").write_text(json.dumps(chinese_texts([ROOT, Path(args.before)]), ensure_ascii=False), "utf-8")
    rows = []
    for case in args.cases.split(","):
        before, after = run(Path(args.before), case), run(ROOT, case)
        same = "same tokens" if before["digest"] == after["digest"] else "TOKENS DIFFER"
        rows.append((case, before, after))
        print(f"{case:16} {before['chunks']:6} chunks  before {before['chunks_per_s']:7} chunks/s ({before['s']} s)"
              f"  after {after['chunks_per_s']:7} chunks/s ({after['s']} s)  x{before['s'] / after['s']:.1f}"
              f"  {after['tokens']} tokens, {same}", flush=True)
    if any(b["digest"] != a["digest"] for _, b, a in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
