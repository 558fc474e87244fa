"""Query-adaptive fusion: a ``retrieve.rules`` entry on BM25 coverage, measured on three sets.

    .venv/bin/python bench/fusion_rules.py SAMPLE_STORE FASTAPI_STORE CRANFIELD_STORE [--out FILE]

For eval_sets/sample.jsonl, eval_sets/fastapi-docs.jsonl and the Cranfield collection
(a folder of queries.jsonl + qrels/), each question's candidates are gathered once and answered
by the pipeline under: ``bm25``, ``dense``, the built-in contract without a coverage rule
(``before``), and the built-in contract with a coverage rule for every cut-off and dense weight
of the grid, placed last (after the type rules: it fuses only questions no type rule takes) or
first (every question type). nDCG@10 (documents, as ``kbtool eval`` scores it) overall and per
tag, and each question's BM25 coverage, are written as JSON (stdout, or ``--out``). The stores
are only read (copy shared ones first: opening a store may touch its files).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from common import gathered_once  # noqa: E402

CUTS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)
DENSE = (0.8, 0.9, 1.0)
SETS = {"sample": ROOT / "eval_sets" / "sample.jsonl", "fastapi-docs": ROOT / "eval_sets" / "fastapi-docs.jsonl",
        "cranfield": Path("/work/shared/datasets/cranfield")}


def without_coverage_rules(contract):
    rules = [r for r in contract.retrieve.rules if not r.signals]
    return contract.model_copy(update={"retrieve": contract.retrieve.model_copy(update={"rules": rules})})


def with_rule(base, cut: float, dense: float, where: str):
    from kbtool.contract import validate_contract

    data = base.model_dump(mode="json")
    rule = {"when": {"bm25_coverage_below": cut}, "weights": {"dense": dense, "bm25": round(1 - dense, 4)}}
    rules = data["retrieve"]["rules"]
    data["retrieve"]["rules"] = [rule, *rules] if where == "first" else [*rules, rule]
    return validate_contract(data)


def variants(base):
    from kbtool.query.retriever import contract_for_mode

    out = {"bm25": contract_for_mode(base, "bm25"), "dense": contract_for_mode(base, "dense"), "before": base}
    for where in ("last", "first"):
        for cut in CUTS:
            for dense in DENSE:
                out[f"{where}:{cut}:{dense}"] = with_rule(base, cut, dense, where)
    return out


def one_set(name: str, store_path: Path, questions: Path) -> dict:
    from kbtool.contract import default_contract
    from kbtool.evaluation.metrics import score
    from kbtool.evaluation.questions import DEFAULT_DEPTH, load_questions
    from kbtool.evaluation.units import EvidenceMatcher, level_of, units
    from kbtool.query.routing import bm25_coverage
    from kbtool.store import Store

    store = Store.open(store_path)
    qs = load_questions(questions)
    answerable = [q for q in qs.questions if q.answerable]
    base = without_coverage_rules(default_contract())
    vs = variants(base)
    searcher, cands, rows, t_gather = gathered_once(store, base, [q.question for q in answerable], vs)
    matcher = EvidenceMatcher(store)
    ndcg: dict[str, list[float]] = {}
    spent: dict[str, float] = {}
    for vname, contract in vs.items():
        t = time.perf_counter()
        got = []
        for q, c, r in zip(answerable, cands, rows):
            ans = searcher.answer(c, contract, tags=q.tags, top_k=DEFAULT_DEPTH, explain=False, rows=r,
                                  with_trace=False)
            ranking, _, qrels = units(ans.hits, q, level_of(q, "auto"), matcher)
            got.append(round(score("ndcg@10", ranking, qrels), 6))
        ndcg[vname] = got
        spent[vname] = time.perf_counter() - t
    return {"set": name, "questions": len(answerable), "gather_s": round(t_gather, 1),
            "ids": [q.id for q in answerable], "tags": [list(q.tags) for q in answerable],
            "types": [list(c.processed.types) for c in cands],
            "coverage": [bm25_coverage(c) for c in cands], "ndcg": ndcg,
            "answer_s": {k: round(v, 2) for k, v in spent.items()}}


def timing(store_path: Path, questions: Path, repeats: int = 5) -> dict:
    """What the rule adds to a query: ``answer()`` (fusion to decision) per question with the
    built-in contract and with it minus its coverage rules, interleaved, p50 over every run; and
    the rule choice alone (``bm25_coverage`` + ``rule_for``)."""
    from kbtool.contract import default_contract
    from kbtool.evaluation.questions import load_questions
    from kbtool.query.pipeline import Searcher
    from kbtool.query.routing import bm25_coverage, store_retrievers
    from kbtool.store import Store

    store = Store.open(store_path)
    texts = [q.question for q in load_questions(questions).questions]
    after = default_contract()
    before = without_coverage_rules(after)
    searcher = Searcher.of(store, after)
    cands = searcher.gather(texts)  # what a query gathers for each question
    times: dict[str, list[float]] = {"before": [], "after": [], "rule_choice": []}
    available = store_retrievers(store)
    for _ in range(repeats):
        for c in cands:
            for name, contract in (("before", before), ("after", after)):
                t = time.perf_counter()
                searcher.answer(c, contract)
                times[name].append(time.perf_counter() - t)
            t = time.perf_counter()
            after.rule_for(set(c.processed.types), available, bm25_coverage(c))
            times["rule_choice"].append(time.perf_counter() - t)
    return {k: round(float(np.median(v)) * 1000, 4) for k, v in times.items()} | {"runs": len(times["after"])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("stores", nargs=3, type=Path, help="sample, fastapi-docs and Cranfield stores")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--timing", action="store_true", help="only time the rule on the sample store (ms, p50)")
    args = ap.parse_args()
    if args.timing:
        print(json.dumps(timing(args.stores[0], SETS["sample"])))
        return
    out = [one_set(name, store, qpath) for (name, qpath), store in zip(SETS.items(), args.stores)]
    text = json.dumps(out)
    if args.out:
        args.out.write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
