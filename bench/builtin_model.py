"""Fit the built-in answerability model and thresholds, and judge them leave-one-set-out.

    .venv/bin/python bench/builtin_model.py          # needs bench/out/{sample,fastapi}-kb (bench/answerability.py builds them)

The built-in model (``kbtool/contract/schema.py: _default_model``) is fitted on every labelled set the
project has — eval_sets/sample.jsonl and eval_sets/fastapi-docs.jsonl — with the signals the
built-in contract computes (the built-in fusion, no model), by the same fit as ``kbtool calibrate``
(``kbtool.evaluation.answerability.fit``). The thresholds are chosen by calibrate's rule
(``kbtool.evaluation.thresholds``) on the pooled out-of-fold P(answerable): the refuse threshold
for at most ``decide.refuse.max_false_refusal`` false refusals among the questions with evidence
of absence, the answer threshold where at most 5 % of plain answers are unanswerable.

Leave-one-set-out: the model fitted on the other set alone scores each set (AUC), so the number
quoted for a set comes from a model that never saw it. Prints the contract's coefficients and
thresholds, and writes bench/builtin_model.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

SETS = {"sample": ("sample-kb", "eval_sets/sample.jsonl"), "fastapi-docs": ("fastapi-kb", "eval_sets/fastapi-docs.jsonl")}


def signals_of(store_path: Path, questions: Path) -> list[tuple[bool, dict]]:
    """(answerable, signals) per question under the built-in contract without a model."""
    from kbtool import Store
    from kbtool.contract import load_contract
    from kbtool.evaluation.evaluate import EvalConfig, evaluate
    from kbtool.evaluation.questions import load_questions

    plain = load_contract(None, ["decide.model=null"], search=False)
    rep = evaluate(Store.open(store_path), load_questions(questions),
                   EvalConfig(modes=["contract"], ks=[10], metrics=["ndcg"]), contract=plain)
    return [(r.question.answerable, r.modes["contract"].signals) for r in rep.results]


def main() -> None:
    from kbtool.contract import Refuse
    from kbtool.evaluation import answerability as am
    from kbtool.evaluation.thresholds import answer_threshold, pick, refusable
    from kbtool.query.decide import absence

    feats = list(am.MODEL_FEATURES)
    data = {name: signals_of(HERE / "out" / store, ROOT / qs) for name, (store, qs) in SETS.items()}
    X = {n: np.array([[s.get(f, 0.0) for f in feats] for _, s in rows]) for n, rows in data.items()}
    y = {n: np.array([1 if a else 0 for a, _ in rows]) for n, rows in data.items()}
    out: dict = {"features": feats, "leave_one_set_out_auc": {}}
    for held in SETS:
        rest = [n for n in SETS if n != held]
        m, _, _ = am.fit(feats, np.vstack([X[n] for n in rest]), np.concatenate([y[n] for n in rest]))
        out["leave_one_set_out_auc"][held] = round(am.auc(y[held], m.probability(X[held])), 4)
    Xa, ya = np.vstack(list(X.values())), np.concatenate(list(y.values()))
    fitted, oof, _ = am.fit(feats, Xa, ya)
    sig = [s for rows in data.values() for _, s in rows]
    ev = [absence(s, Refuse()) for s in sig]
    a = [i for i, t in enumerate(ya) if t]
    u = [i for i, t in enumerate(ya) if not t]
    low, fa, fr, _ = pick(refusable(oof[a], [ev[i] for i in a]), refusable(oof[u], [ev[i] for i in u]),
                          None, Refuse().max_false_refusal)
    out["model"] = fitted.to_contract({"questions": len(ya), "answerable": int(ya.sum()),
                                       "unanswerable": int((ya == 0).sum()),
                                       "oof": {k: am.quality(ya, oof)[k] for k in ("auc", "brier", "calibration_error")}})
    out["thresholds"] = {"low_confidence": round(low, 4), "answer": answer_threshold(low, oof[a], oof[u]),
                         "false_answer": round(fa, 4), "false_refusal": round(fr, 4)}
    (HERE / "builtin_model.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
