"""Refusal benchmark: the answerability model on both labelled sets, against the rule it replaced,
and what computing the signals costs a query.

    .venv/bin/python bench/answerability.py     # ~6 min the first time (fetches and ingests the FastAPI docs)

For ``eval_sets/sample.jsonl`` (the sample corpus) and ``eval_sets/fastapi-docs.jsonl`` (FastAPI
0.110.0's docs, fetched by ``bench/docs_set.py``): ``calibrate`` with the built-in contract (the
model's out-of-fold AUC, Brier score, calibration error and refusal rates), ``eval`` of the
built-in contract and of the confidence-threshold rule it replaced (refusals, nDCG@10 per mode),
and the time computing the signals adds to a query (timed inside real queries). Stores live in bench/out/ (not committed);
writes bench/answerability.json and bench/ANSWERABILITY.md (committed).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

OLD_RULE = ["decide.model=null", "decide.thresholds={answer: 0.5, low_confidence: 0.4}",
            "decide.tiers={identifier: {answer: 0.45, low_confidence: 0.35}}"]


def store_for(name: str, folder: Path):
    from kbtool.ingestion.pipeline import ingest
    from kbtool.store import Store

    store = Store.open(HERE / "out" / f"{name}-kb", create=True)
    t = time.perf_counter()
    report = ingest(store, [folder])
    if report.failed:
        sys.exit(f"bench: {name}: {len(report.failed)} file(s) failed to ingest, first: {report.failed[0]}")
    print(f"bench: {name}: ingest {time.perf_counter() - t:.1f} s ({len(report.added)} added, "
          f"{len(report.unchanged)} unchanged)", file=sys.stderr)
    return store


def signal_cost(store, contract, questions: list[str]) -> dict:
    """What the signals cost a query: the time spent in ``term_weights`` (while gathering) and in
    ``signals.compute`` (while answering) per question, timed inside a real query of each
    question (warm: model and word lists loaded); beside it, ``answer()`` and ``gather`` alone."""
    import kbtool.query.candidates as candidates
    import kbtool.query.signals as signals
    from kbtool.query.pipeline import answer, gather
    from kbtool.query.tokens import count_tokens_for
    from kbtool.query.scope import scope

    sc = scope(store, contract)
    counter = count_tokens_for(store)
    spent = {"term_weights": [], "compute": []}

    def timed(fn, key):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[key].append(time.perf_counter() - t)
        return wrapper

    real_compute, real_weights = signals.compute, candidates.term_weights
    for c in gather(store, contract, questions, sc=sc, depth=contract.retrieve.top_k):  # warm: model, word lists
        answer(store, contract, c, sc=sc, count_tokens=counter)
    signals.compute = timed(real_compute, "compute")
    candidates.term_weights = timed(real_weights, "term_weights")
    try:
        gathers, answers = [], []
        for q in questions:  # one question at a time, as `kbtool query` runs them
            t = time.perf_counter()
            c = gather(store, contract, [q], sc=sc, depth=contract.retrieve.top_k)[0]
            gathers.append(time.perf_counter() - t)
            t = time.perf_counter()
            answer(store, contract, c, sc=sc, count_tokens=counter)
            answers.append(time.perf_counter() - t)
    finally:
        signals.compute, candidates.term_weights = real_compute, real_weights
    per_q = np.array(spent["term_weights"]) + np.array(spent["compute"])
    ms = lambda xs: round(1000 * float(np.median(xs)), 3)  # noqa: E731
    return {"signals_p50_ms": ms(per_q), "signals_p95_ms": round(1000 * float(np.percentile(per_q, 95)), 3),
            "term_weights_p50_ms": ms(spent["term_weights"]), "compute_p50_ms": ms(spent["compute"]),
            "gather_p50_ms": ms(gathers), "answer_p50_ms": ms(answers)}


def measure(name: str, store, questions_path: Path) -> dict:
    from kbtool.contract import load_contract
    from kbtool.evaluation.calibrate import calibrate
    from kbtool.evaluation.evaluate import EvalConfig, evaluate
    from kbtool.evaluation.questions import load_questions

    qs = load_questions(questions_path)
    built_in = load_contract(None, search=False)
    t = time.perf_counter()
    r = calibrate(store, qs, built_in, source=str(questions_path.relative_to(ROOT)))
    cal_s = time.perf_counter() - t
    a = r.answerability
    out: dict = {"questions": r.questions, "answerable": r.answerable, "unanswerable": r.unanswerable,
                 "calibrate_s": round(cal_s, 1), "confidence_auc": a["confidence"]["auc"],
                 "signal_auc": a["signal_auc"]}
    if a.get("fitted"):
        out["model_oof"] = {k: a["oof"][k] for k in ("auc", "brier", "calibration_error")}
        out["heldout_thresholds"] = a["heldout_thresholds"]
        out["written_thresholds"] = r.thresholds
    rules = {"built-in model": built_in, "confidence thresholds (before)": load_contract(None, OLD_RULE, search=False)}
    out["eval"] = {}
    for label, c in rules.items():
        rep = evaluate(store, qs, EvalConfig(modes=["bm25", "dense", "hybrid", "contract"], ks=[10], metrics=["ndcg"]),
                       contract=c)
        ref = rep.refusal()["contract"]
        out["eval"][label] = {"ndcg@10": {m: v["ndcg@10"] for m, v in rep.metrics().items()},
                              "refused": f"{ref['correctly_refused']} of {ref['unanswerable']}",
                              "wrongly_refused": f"{ref['wrongly_refused']} of {ref['answerable']}"}
    out["signal_cost"] = signal_cost(store, built_in, [q.question for q in qs.questions])
    print(f"bench: {name}: {json.dumps(out)}", file=sys.stderr)
    return out


def markdown(r: dict) -> str:
    lines = [f"# Refusal benchmark ({r['date']}, {r['machine']})", "",
             "Produced by `.venv/bin/python bench/answerability.py`; numbers from one run. Out of fold: each "
             "question's P(answerable) comes from a model (and calibration map) fitted without it.", "",
             "| | " + " | ".join(r["sets"]) + " |", "| --- |" + " --- |" * len(r["sets"])]
    sets = list(r["sets"].values())

    def row(label, fn):
        lines.append(f"| {label} | " + " | ".join(fn(s) for s in sets) + " |")

    row("questions (answerable + unanswerable)", lambda s: f"{s['answerable']} + {s['unanswerable']}")
    row("AUC, best hit's confidence alone", lambda s: f"{s['confidence_auc']:.3f}")
    row("AUC, P(answerable) (model, out of fold)", lambda s: f"{s['model_oof']['auc']:.3f}")
    row("Brier score / calibration error", lambda s: f"{s['model_oof']['brier']:.3f} / {s['model_oof']['calibration_error']:.3f}")
    row("at the written thresholds: unanswerable refused / answerable refused",
        lambda s: f"{1 - s['written_thresholds']['overall']['false_answer']:.0%} / "
                  f"{s['written_thresholds']['overall']['false_refusal']:.0%}")
    row("threshold held out too: unanswerable refused (95 % CI)",
        lambda s: f"{s['heldout_thresholds']['refusal_rate']:.0%} ({s['heldout_thresholds']['refusal_interval'][0]:.0%}–"
                  f"{s['heldout_thresholds']['refusal_interval'][1]:.0%})")
    row("threshold held out too: answerable refused (95 % CI)",
        lambda s: f"{s['heldout_thresholds']['false_refusal']:.0%} ({s['heldout_thresholds']['false_refusal_interval'][0]:.0%}–"
                  f"{s['heldout_thresholds']['false_refusal_interval'][1]:.0%})")
    for label in ("confidence thresholds (before)", "built-in model"):
        row(f"`eval`, {label}: unanswerable refused / answerable wrongly refused",
            lambda s, label=label: f"{s['eval'][label]['refused']} / {s['eval'][label]['wrongly_refused']}")
    row("nDCG@10 bm25 / dense / hybrid / contract",
        lambda s: " / ".join(f"{v:.3f}" for v in s["eval"]["built-in model"]["ndcg@10"].values()))
    row("calibrate wall", lambda s: f"{s['calibrate_s']} s")
    row("query time in the signals per question, p50 / p95 (term weights + compute)",
        lambda s: f"{s['signal_cost']['signals_p50_ms']:.2f} / {s['signal_cost']['signals_p95_ms']:.2f} ms")
    row("the whole query per question, p50: gather / answer",
        lambda s: f"{s['signal_cost']['gather_p50_ms']:.1f} / {s['signal_cost']['answer_p50_ms']:.1f} ms")
    lines += ["", "Each signal's own AUC (above 0.5: higher on answerable questions):", "",
              "| signal | " + " | ".join(r["sets"]) + " |", "| --- |" + " --- |" * len(r["sets"])]
    for f in sets[0]["signal_auc"]:
        lines.append(f"| {f} | " + " | ".join(f"{s['signal_auc'][f]:.3f}" if s["signal_auc"][f] is not None else "n/a"
                                               for s in sets) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    from run import machine  # bench/run.py

    subprocess.run([sys.executable, str(HERE / "docs_set.py")], check=True)
    results = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "machine": machine(), "sets": {}}
    results["sets"]["sample.jsonl"] = measure("sample", store_for("sample", ROOT / "sample_corpus"),
                                              ROOT / "eval_sets" / "sample.jsonl")
    results["sets"]["fastapi-docs.jsonl"] = measure("fastapi", store_for("fastapi", HERE / "out" / "fastapi-docs"),
                                                    ROOT / "eval_sets" / "fastapi-docs.jsonl")
    (HERE / "answerability.json").write_text(json.dumps(results, indent=2) + "\n")
    (HERE / "ANSWERABILITY.md").write_text(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
