"""Refusal benchmark: the built-in contract's decision on three labelled sets, before -> after, and
what computing the signals costs a query.

    .venv/bin/python bench/answerability.py     # ~10 min the first time (fetches and ingests two docs sets)

Sets: ``eval_sets/sample.jsonl`` (the sample corpus), ``eval_sets/fastapi-docs.jsonl`` (FastAPI
0.110.0's docs) and ``eval_sets/typer-docs.jsonl`` (Typer 0.9.0's docs, fetched by
``bench/docs_set.py --set typer``). The built-in model is fitted on the first two
(``bench/builtin_model.py``); Typer's set is held out: nothing was fitted or chosen on it.

Per set, ``eval`` of the built-in contract before (the 2026-12-01 model and thresholds, every
question below the refuse threshold refused: ``BEFORE``) and after (named-thing signals, the model
refitted, refuse only on evidence of absence): how many answerable, paraphrased and unanswerable
questions are answered, hedged (low_confidence) and refused; nDCG@10 per mode and for paraphrases;
the AUC of P(answerable) — leave-one-set-out for the two fitted sets (the model fitted on the
other set alone), the built-in model itself for Typer's; each signal's AUC; ``calibrate`` on the
set (out-of-fold model, thresholds held out too); and the time computing the signals adds to a
query (timed inside real queries). Stores live in bench/out/ (not committed); writes
bench/answerability.json and bench/ANSWERABILITY.md (committed).
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

# The built-in contract's decision before named things (main at 5731b21, 2026-12-04): the model
# fitted 2026-12-01 on the sample set, its thresholds and identifier tier, refusing below them.
BEFORE = ["decide.model={coefficients: {relevance: 0.0, cosine: 0.0, coverage: 0.903698, absent_kb: -0.198521, "
          "absent_top: -2.266073, dense_margin: 9.454024}, intercept: 0.533757, "
          "calibration: {slope: 0.973155, offset: 0.952431}}",
          "decide.thresholds={answer: 0.9116, low_confidence: 0.6905}",
          "decide.tiers={identifier: {answer: 0.7006, low_confidence: 0.7006}}",
          "decide.refuse.needs_evidence=false",
          # and its fusion: the type rules only (no rule on BM25 coverage yet)
          "retrieve.rules=[{when: identifier, weights: {dense: 0.3, bm25: 0.7}}, "
          "{when: cjk, weights: {dense: 0.0, bm25: 0.3, 'dense:use-m': 0.7}}, {when: cjk, weights: {dense: 0.1, bm25: 0.9}}]"]
FITTED_ON = ("sample", "fastapi-docs")  # the built-in model's sets; the others are held out


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
    spent = {"term_weights": [], "compute": [], "names": []}

    def timed(fn, key):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[key].append(time.perf_counter() - t)
        return wrapper

    real_compute, real_weights, real_where = signals.compute, candidates.term_weights, candidates.where
    for c in gather(store, contract, questions, sc=sc, depth=contract.retrieve.top_k):  # warm: model, word lists
        answer(store, contract, c, sc=sc, count_tokens=counter)
    signals.compute = timed(real_compute, "compute")
    candidates.term_weights = timed(real_weights, "term_weights")
    candidates.where = timed(real_where, "names")
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
        signals.compute, candidates.term_weights, candidates.where = real_compute, real_weights, real_where
    per_q = np.array(spent["term_weights"]) + np.array(spent["compute"]) + np.array(spent["names"])
    ms = lambda xs: round(1000 * float(np.median(xs)), 3)  # noqa: E731
    return {"signals_p50_ms": ms(per_q), "signals_p95_ms": round(1000 * float(np.percentile(per_q, 95)), 3),
            "term_weights_p50_ms": ms(spent["term_weights"]), "compute_p50_ms": ms(spent["compute"]), "names_p50_ms": ms(spent["names"]),
            "gather_p50_ms": ms(gathers), "answer_p50_ms": ms(answers)}


def decisions(report, mode: str = "contract") -> dict:
    """Answered / hedged / refused counts for answerable, paraphrased and unanswerable questions."""
    out = {}
    groups = {"answerable": lambda q: q.answerable, "paraphrase": lambda q: q.answerable and "paraphrase" in q.tags,
              "unanswerable": lambda q: not q.answerable,
              "unanswerable near misses": lambda q: not q.answerable and "near-miss" in q.tags}
    for g, keep in groups.items():
        rows = [r.modes[mode].decision for r in report.results if keep(r.question)]
        out[g] = {"n": len(rows), **{d: sum(x == d for x in rows) for d in ("answer", "low_confidence", "refuse")}}
    return out


def measure(name: str, store, questions_path: Path, others: dict) -> dict:
    """``others``: set name -> (X, y) of the other fitted sets (leave-one-set-out AUC)."""
    from kbtool.contract import load_contract
    from kbtool.evaluation import answerability as am
    from kbtool.evaluation.calibrate import calibrate
    from kbtool.evaluation.evaluate import EvalConfig, evaluate
    from kbtool.evaluation.questions import load_questions

    qs = load_questions(questions_path)
    built_in = load_contract(None, search=False)
    rules = {"before": load_contract(None, BEFORE, search=False), "after": built_in}
    out: dict = {"questions": len(qs.questions), "answerable": sum(q.answerable for q in qs.questions),
                 "fitted_on": name in FITTED_ON, "eval": {}}
    for label, c in rules.items():
        rep = evaluate(store, qs, EvalConfig(modes=["bm25", "dense", "hybrid", "contract"], ks=[10], metrics=["ndcg"]),
                       contract=c)
        out["eval"][label] = {"decisions": decisions(rep),
                              "ndcg@10": {m: v["ndcg@10"] for m, v in rep.metrics().items()},
                              "paraphrase ndcg@10": {m: rep.mean(m, "ndcg@10", "paraphrase") for m in rep.config.modes},
                              "auc": round(am.auc([r.question.answerable for r in rep.results],
                                                  [r.modes["contract"].top_score or 0.0 for r in rep.results]), 4)}
        if label == "after":
            sig = [r.modes["contract"].signals for r in rep.results]
            y = np.array([1 if r.question.answerable else 0 for r in rep.results])
            feats = list(am.MODEL_FEATURES)
            X = np.array([[s.get(f, 0.0) for f in feats] for s in sig])
            out["X"], out["y"] = X, y
            out["signal_auc"] = {f: round(am.auc(y, [s.get(f, 0.0) for s in sig]), 4) for f in sig[0]}
            out["model_auc"] = round(am.auc(y, [r.modes["contract"].top_score or 0.0 for r in rep.results]), 4)
    t = time.perf_counter()
    r = calibrate(store, qs, built_in, source=str(questions_path.relative_to(ROOT)))
    out["calibrate_s"] = round(time.perf_counter() - t, 1)
    a = r.answerability
    if a.get("fitted"):
        out["calibrated"] = {"oof_auc": a["oof"]["auc"], "heldout_thresholds": a["heldout_thresholds"],
                             "written": r.thresholds["overall"]}
    out["signal_cost"] = signal_cost(store, built_in, [q.question for q in qs.questions])
    print(f"bench: {name}: {json.dumps({k: v for k, v in out.items() if k not in ('X', 'y')})}", file=sys.stderr)
    return out


def leave_one_set_out(results: dict) -> None:
    """Each fitted set's AUC under a model fitted on the other fitted set(s) alone."""
    from kbtool.evaluation import answerability as am

    for name, r in results.items():
        rest = [n for n in results if n != name and n in FITTED_ON]
        if name in FITTED_ON and rest:
            m, _, _ = am.fit(list(am.MODEL_FEATURES), np.vstack([results[n]["X"] for n in rest]),
                             np.concatenate([results[n]["y"] for n in rest]))
            r["loso_auc"] = round(am.auc(r["y"], m.probability(r["X"])), 4)
        else:
            r["loso_auc"] = r["model_auc"]  # the built-in model never saw this set
    for r in results.values():
        r.pop("X"), r.pop("y")


def _pct(n: int, d: int) -> str:
    return f"{n} of {d} ({n / d:.0%})" if d else "–"


def markdown(r: dict) -> str:
    lines = [f"# Refusal benchmark ({r['date']}, {r['machine']})", "",
             "Produced by `.venv/bin/python bench/answerability.py`; numbers from one run. *Before*: the built-in "
             "contract at 5731b21 (model of 2026-12-01, every question below the refuse threshold refused, type rules only). *After*: "
             "fusion rules on BM25 coverage (`bench/FUSION_RULES.md`), named-thing signals, the model refitted on sample + fastapi-docs (`bench/builtin_model.py`), refuse "
             "only on evidence of absence (`decide.refuse`). **typer-docs was held out**: nothing was fitted or "
             "chosen on it. AUC of P(answerable), leave-one-set-out: for sample and fastapi-docs the model fitted "
             "on the other set alone; for typer-docs the built-in model.", "",
             "| | " + " | ".join(r["sets"]) + " |", "| --- |" + " --- |" * len(r["sets"])]
    sets = list(r["sets"].values())

    def row(label, fn):
        lines.append(f"| {label} | " + " | ".join(fn(s) for s in sets) + " |")

    row("questions (answerable + unanswerable)", lambda s: f"{s['answerable']} + {s['questions'] - s['answerable']}")
    row("the built-in model was fitted on it", lambda s: "yes" if s["fitted_on"] else "**no (held out)**")
    for when in ("before", "after"):
        d = lambda s, when=when: s["eval"][when]["decisions"]  # noqa: E731
        row(f"{when}: unanswerable refused", lambda s, d=d: _pct(d(s)["unanswerable"]["refuse"], d(s)["unanswerable"]["n"]))
        row(f"{when}: unanswerable near misses (tag `near-miss`), refused",
            lambda s, d=d: _pct(d(s)["unanswerable near misses"]["refuse"], d(s)["unanswerable near misses"]["n"]))
        row(f"{when}: unanswerable answered plainly", lambda s, d=d: _pct(d(s)["unanswerable"]["answer"], d(s)["unanswerable"]["n"]))
        row(f"{when}: answerable refused", lambda s, d=d: _pct(d(s)["answerable"]["refuse"], d(s)["answerable"]["n"]))
        row(f"{when}: answerable hedged (low_confidence)",
            lambda s, d=d: _pct(d(s)["answerable"]["low_confidence"], d(s)["answerable"]["n"]))
        row(f"{when}: paraphrased answerable refused", lambda s, d=d: _pct(d(s)["paraphrase"]["refuse"], d(s)["paraphrase"]["n"]))
    row("AUC of P(answerable) before (the old model: fitted on sample)", lambda s: f"{s['eval']['before']['auc']:.3f}")
    row("AUC of P(answerable) after, leave-one-set-out", lambda s: f"{s['loso_auc']:.3f}")
    row("calibrate on the set: out-of-fold AUC", lambda s: f"{s['calibrated']['oof_auc']:.3f}" if "calibrated" in s else "–")
    row("calibrate on the set, threshold held out too: unanswerable / answerable refused",
        lambda s: f"{s['calibrated']['heldout_thresholds']['refusal_rate']:.0%} / "
                  f"{s['calibrated']['heldout_thresholds']['false_refusal']:.0%}" if "calibrated" in s else "–")
    row("nDCG@10 bm25 / dense / hybrid / contract",
        lambda s: " / ".join(f"{v:.3f}" for v in s["eval"]["after"]["ndcg@10"].values()))
    row("paraphrase nDCG@10 bm25 / dense / hybrid / contract",
        lambda s: " / ".join("–" if v is None else f"{v:.3f}" for v in s["eval"]["after"]["paraphrase ndcg@10"].values()))
    row("calibrate wall", lambda s: f"{s['calibrate_s']} s")
    row("query time in the signals per question, p50 / p95 (term weights + names + compute)",
        lambda s: f"{s['signal_cost']['signals_p50_ms']:.2f} / {s['signal_cost']['signals_p95_ms']:.2f} ms")
    row("of which named things (`names.where`), p50", lambda s: f"{s['signal_cost']['names_p50_ms']:.2f} ms")
    row("the whole query per question, p50: gather / answer",
        lambda s: f"{s['signal_cost']['gather_p50_ms']:.1f} / {s['signal_cost']['answer_p50_ms']:.1f} ms")
    lines += ["", "Each signal's own AUC under the built-in contract (above 0.5: higher on answerable questions):", "",
              "| signal | " + " | ".join(r["sets"]) + " |", "| --- |" + " --- |" * len(r["sets"])]
    for f in sets[0]["signal_auc"]:
        lines.append(f"| {f} | " + " | ".join(f"{s['signal_auc'][f]:.3f}" if s["signal_auc"].get(f) is not None else "n/a"
                                               for s in sets) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    from run import machine  # bench/run.py

    for name in ("fastapi", "typer"):
        subprocess.run([sys.executable, str(HERE / "docs_set.py"), "--set", name], check=True)
    results = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "machine": machine(), "sets": {}}
    sets = {"sample": ("sample", ROOT / "sample_corpus", "sample.jsonl"),
            "fastapi-docs": ("fastapi", HERE / "out" / "fastapi-docs", "fastapi-docs.jsonl"),
            "typer-docs": ("typer", HERE / "out" / "typer-docs", "typer-docs.jsonl")}
    for label, (name, folder, qs) in sets.items():
        results["sets"][label] = measure(label, store_for(name, folder), ROOT / "eval_sets" / qs, {})
    leave_one_set_out(results["sets"])
    (HERE / "answerability.json").write_text(json.dumps(results, indent=2) + "\n")
    (HERE / "ANSWERABILITY.md").write_text(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
