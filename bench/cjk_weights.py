"""Fusion weights for Chinese questions chosen on data (issue 32, item 3).

    .venv/bin/python bench/cjk_weights.py [--out FILE]      # stores in bench/out/ (see below)

Each set's candidates are gathered once and answered by the pipeline under the built-in contract
with the ``cjk`` rule's weights (``bm25`` w, ``dense:use-m`` 1 - w) and the ``cjk_identifier``
rule's weights swept over a grid, and under BM25 and each dense retriever alone. nDCG@10 per
question, split by the rule the pipeline applied, as ``kbtool eval`` scores it (documents for
CMRC; documents and evidence chunks for the FastAPI set).

Sets and stores (``kbtool ingest … --add-model use-m``, the built-in contract):

- ``cmrc-trial``: ``eval_sets/cmrc2018/trial`` (1,002 questions), store ``bench/out/cmrc-trial-kb``
  (``--format beir``): the weights are **chosen** on it with ``fastapi-zh``;
- ``fastapi-zh``: ``eval_sets/fastapi-zh.jsonl`` (78 answerable), store ``bench/out/fastapi-zh-kb``;
- ``cmrc-dev``: ``eval_sets/cmrc2018/dev`` (3,219 questions), store ``bench/out/cmrc-dev-kb``:
  **held out**, judged only;
- ``sample-zh``: the sample set's Chinese questions (tag ``zh``), store ``bench/out/sample-zh-kb``:
  held out.
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

GRID = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
SETS = {"cmrc-trial": (ROOT / "eval_sets" / "cmrc2018" / "trial", HERE / "out" / "cmrc-trial-kb", None),
        "fastapi-zh": (ROOT / "eval_sets" / "fastapi-zh.jsonl", HERE / "out" / "fastapi-zh-kb", None),
        "cmrc-dev": (ROOT / "eval_sets" / "cmrc2018" / "dev", HERE / "out" / "cmrc-dev-kb", None),
        "sample-zh": (ROOT / "eval_sets" / "sample.jsonl", HERE / "out" / "sample-zh-kb", "zh")}
FIT = ("cmrc-trial", "fastapi-zh")


def with_weights(base, rule: str, w: float):
    """The contract with the first rule ``when: rule`` fusing bm25 ``w`` and use-m ``1 - w``."""
    from kbtool.contract import validate_contract

    data = base.model_dump(mode="json")
    for r in data["retrieve"]["rules"]:
        if r.get("when") == rule:
            r["weights"] = {"dense": 0.0, "bm25": w, "dense:use-m": round(1 - w, 4)}
            break
    return validate_contract(data)


def adaptive(base, cut: float, low: float, high: float):
    """The contract whose Chinese questions fuse bm25 ``low`` (use-m the rest) below BM25 coverage
    ``cut`` and bm25 ``high`` above it: the coverage rule of issue 29 for the ``cjk`` type."""
    from kbtool.contract import validate_contract

    data = with_weights(base, "cjk", high).model_dump(mode="json")
    rules = data["retrieve"]["rules"]
    at = next(i for i, r in enumerate(rules) if r.get("when") == "cjk")
    rules.insert(at, {"when": {"type": "cjk", "bm25_coverage_below": cut},
                      "weights": {"dense": 0.0, "bm25": low, "dense:use-m": round(1 - low, 4)}})
    return validate_contract(data)


CUTS = (0.2, 0.3, 0.4, 0.5, 0.6)
LOWS = (0.0, 0.2, 0.3, 0.4)
HIGHS = (0.5, 0.6, 0.7, 0.9)


def variants(base, grid: str = "weights") -> dict:
    from kbtool.query.retriever import contract_for_mode

    out = {m: contract_for_mode(base, m) for m in ("bm25", "dense", "dense:use-m")}
    out["contract"] = base
    if grid == "weights":
        for rule in ("cjk", "cjk_identifier"):
            for w in GRID:
                out[f"{rule}:{w}"] = with_weights(base, rule, w)
    else:
        for cut in CUTS:
            for low in LOWS:
                for high in HIGHS:
                    out[f"adaptive:{cut}:{low}:{high}"] = adaptive(base, cut, low, high)
    return out


def one_set(name: str, grid: str = "weights") -> dict:
    from kbtool.contract import default_contract
    from kbtool.evaluation.metrics import score
    from kbtool.evaluation.questions import DEFAULT_DEPTH, load_questions
    from kbtool.evaluation.units import EvidenceMatcher, level_of, units
    from kbtool.query.pipeline import fusion_rule
    from kbtool.query.routing import bm25_coverage, store_retrievers
    from kbtool.store import Store

    qpath, spath, tag = SETS[name]
    store = Store.open(spath)
    qs = [q for q in load_questions(qpath).questions if q.answerable and (tag is None or tag in q.tags)]
    base = default_contract()
    vs = variants(base, grid)
    searcher, cands, rows, gather_s = gathered_once(store, base, [q.question for q in qs], vs)
    matcher = EvidenceMatcher(store)
    available = store_retrievers(store)
    rules = []
    for c in cands:
        got = fusion_rule(base, set(c.processed.types), available, bm25_coverage(c))
        rules.append(str(got["when"]) if got else None)
    levels = ("doc", "chunk") if name in ("fastapi-zh", "sample-zh") else ("doc",)
    ndcg = {lv: {} for lv in levels}
    for vname, contract in vs.items():
        for lv in levels:
            ndcg[lv][vname] = []
        for q, c, r in zip(qs, cands, rows):
            ans = searcher.answer(c, contract, tags=q.tags, top_k=DEFAULT_DEPTH, explain=False, rows=r,
                                  with_trace=False)
            for lv in levels:
                ranking, _, qrels = units(ans.hits, q, level_of(q, lv), matcher)
                ndcg[lv][vname].append(round(score("ndcg@10", ranking, qrels), 6))
    return {"set": name, "questions": len(qs), "gather_s": round(gather_s, 1), "rules": [str(r) for r in rules],
            "ids": [q.id for q in qs], "tags": [list(q.tags) for q in qs],
            "coverage": [None if (v := bm25_coverage(c)) is None else round(v, 4) for c in cands],
            "ndcg": ndcg}


def summary(results: list[dict]) -> dict:
    out = {}
    for res in results:
        rules = np.array(res["rules"])
        for lv, by_variant in res["ndcg"].items():
            key = f"{res['set']}:{lv}"
            out[key] = {"questions": res["questions"],
                        "rule_counts": {r: int((rules == r).sum()) for r in sorted(set(res["rules"]))}}
            for v, vals in by_variant.items():
                vals = np.array(vals)
                out[key][v] = {"all": round(float(vals.mean()), 4),
                               **{r: round(float(vals[rules == r].mean()), 4) for r in ("cjk", "cjk_identifier")
                                  if (rules == r).any()}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=HERE / "out" / "cjk_weights.json")
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--grid", choices=("weights", "adaptive"), default="weights",
                    help="weights: each rule's bm25 weight alone; adaptive: a coverage cut-off for cjk")
    args = ap.parse_args()
    results = []
    for name in args.sets.split(","):
        t = time.perf_counter()
        results.append(one_set(name, args.grid))
        print(f"{name}: {results[-1]['questions']} questions, {time.perf_counter() - t:.0f} s", file=sys.stderr)
    args.out.write_text(json.dumps({"summary": summary(results), "per_question": results}, ensure_ascii=False))
    print(json.dumps(summary(results), indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
