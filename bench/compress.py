"""postprocess.compress measured: does the answering sentence survive, how many sources fit the
context block, what the stage costs.

    python bench/compress.py --store /tmp/kb eval_sets/sample.jsonl [--set k=v ...] [--variant NAME=k=v,k=v ...]

Gathers each question's candidates once, then answers them under the contract as it is (off) and
under each variant (``answer``, the code path query/eval/calibrate share), with the context block
built at the contract's ``context.max_tokens``. Per variant:

- ``evidence_in_hits``: share of labelled (question, evidence) pairs whose evidence text is in the
  text of a top-k hit of its document (k = retrieve.top_k). Eval's chunk-level relevance also
  credits a hit whose *span* covers the evidence, so nDCG cannot see compression drop it; this can;
- ``evidence_kept``: of the pairs whose evidence is in an uncompressed top-k hit, the share whose
  compressed hit still holds it;
- ``evidence_in_context``: share of pairs whose evidence reaches the context block;
- ``sources``, ``context_tokens``: mean sources in the block and its mean tokens;
- ``relevant_docs_in_context``: mean labelled-relevant documents among the block's sources (the
  document-level measure Cranfield's qrels allow);
- ``hit_tokens``: mean tokens of a top-k hit's text;
- ``compress_ms_p50`` / ``p95``: the stage's own time (trace timings_ms.compress_ms);
  ``answer_ms_p50``: the whole of ``answer`` after gathering (timings_ms.fuse_decide_ms), context included.
Questions without evidence labels (Cranfield's qrels) count for sources, tokens and time only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kbtool.contract import load_contract  # noqa: E402
from kbtool.evaluation.questions import contains_evidence, load_questions  # noqa: E402
from kbtool.query.context import build_context  # noqa: E402
from kbtool.query.pipeline import answer, gather  # noqa: E402
from kbtool.query.tokens import count_tokens_for  # noqa: E402
from kbtool.query.scope import scope  # noqa: E402
from kbtool.store import Store  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("questions")
    ap.add_argument("--store", required=True)
    ap.add_argument("--set", action="append", default=[], help="contract override for every variant")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=k=v,k=v (default: sentences with the contract's defaults)")
    ap.add_argument("--limit", type=int, default=0)
    args = ap.parse_args()

    store = Store.open(args.store)
    qs = load_questions(args.questions).questions
    if args.limit:
        qs = qs[: args.limit]
    variants = {"off": []}
    for v in args.variant or ["sentences=postprocess.compress.mode=sentences"]:
        name, _, sets = v.partition("=")
        variants[name] = [s for s in sets.split(",") if s]
    contracts = {n: load_contract(None, args.set + s, search=False) for n, s in variants.items()}
    base = contracts["off"]
    sc = scope(store, base)
    t0 = time.perf_counter()
    cands = gather(store, base, [q.question for q in qs], sc=sc)
    gather_s = time.perf_counter() - t0
    counter = count_tokens_for(store)
    k = base.retrieve.top_k
    out = {"store": args.store, "questions": len(qs), "top_k": k, "context_max_tokens": base.context.max_tokens,
           "gather_s": round(gather_s, 2), "variants": {}}
    plain_has: dict = {}
    for name, contract in contracts.items():
        stats = {"pairs": 0, "in_hits": 0, "kept": 0, "kept_of": 0, "in_context": 0, "sources": [], "ctx_tokens": [],
                 "hit_tokens": [], "ms": [], "answer_ms": [], "rel_docs": []}
        for q, c in zip(qs, cands):
            a = answer(store, contract, c, sc=sc, tags=q.tags, count_tokens=counter)
            hits = a.hits[:k]
            _, included = build_context(hits, a.decision, contract.context, counter)
            stats["sources"].append(len(included))
            relevant = {r.doc for r in q.relevant if r.grade > 0}
            stats["rel_docs"].append(len({h.doc_id for h in hits if h.chunk_id in included} & relevant))
            stats["ctx_tokens"].append(counter(a.context))
            stats["hit_tokens"].extend(counter(h.text) for h in hits)
            stats["answer_ms"].append(a.trace["timings_ms"]["fuse_decide_ms"])
            if "compress_ms" in a.trace.get("timings_ms", {}):
                stats["ms"].append(a.trace["timings_ms"]["compress_ms"])
            for n, r in enumerate(q.relevant):
                if not r.evidence:
                    continue
                stats["pairs"] += 1
                has = any(h.doc_id == r.doc and contains_evidence(f"{h.section_path}\n{h.text}", r.evidence) for h in hits)
                stats["in_hits"] += has
                if name == "off":
                    plain_has[(q.id, n)] = has
                elif plain_has.get((q.id, n)):
                    stats["kept_of"] += 1
                    stats["kept"] += has
                stats["in_context"] += contains_evidence(a.context, r.evidence)
        pairs = max(stats["pairs"], 1)
        ms = sorted(stats["ms"])
        out["variants"][name] = {
            "settings": variants[name],
            "evidence_pairs": stats["pairs"],
            "evidence_in_hits": round(stats["in_hits"] / pairs, 4),
            **({"evidence_kept": round(stats["kept"] / max(stats["kept_of"], 1), 4)} if name != "off" else {}),
            "evidence_in_context": round(stats["in_context"] / pairs, 4),
            "sources": round(statistics.mean(stats["sources"]), 2),
            "relevant_docs_in_context": round(statistics.mean(stats["rel_docs"]), 3),
            "context_tokens": round(statistics.mean(stats["ctx_tokens"]), 1),
            "hit_tokens": round(statistics.mean(stats["hit_tokens"]), 1) if stats["hit_tokens"] else 0,
            "answer_ms_p50": round(statistics.median(stats["answer_ms"]), 2),
            **({"compress_ms_p50": round(statistics.median(ms), 3),
                "compress_ms_p95": round(ms[int(0.95 * (len(ms) - 1))], 3)} if ms else {}),
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
