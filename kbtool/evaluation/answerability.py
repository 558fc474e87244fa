"""Fitting the answerability model: P(answerable) from the pipeline's signals, with honest numbers.

``fit(X, y)`` fits a regularised logistic regression (scikit-learn's objective, minimised by scipy
so each coefficient keeps the sign its signal must have; features standardised, class weights
balanced for the usual few unanswerable questions) and a Platt calibration map on
out-of-fold scores, so the probability means what it says at the question set's mix of
answerable and unanswerable questions. Everything reported is out of fold: each question's
probability comes from a model (and a calibration map) fitted without it — nested
cross-validation, so the calibration map never sees the question it calibrates.

The fitted model is written into the contract (``decide.model``) on the signals' own scale:
the standardisation is folded into the coefficients, so applying it needs no scikit-learn
(``kbtool.query.decide.answerability``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

C = 0.3  # inverse L2 strength on standardised features (few unanswerable questions: keep it strong)
# The signals the model is fitted on: those whose weight kept its sign and whose model transferred
# between the two labelled sets (fitted on one, scored on the other: eval_sets/sample.jsonl and
# eval_sets/fastapi-docs.jsonl, mean AUC 0.826 vs 0.805 with all eleven). Every signal is still
# computed and reported (``signal_auc``); a contract's model may weigh any of them.
MODEL_FEATURES = ("relevance", "cosine", "coverage", "absent_top", "named_absent_kb", "named_absent_top",
                  "dense_margin")
# The direction each signal may push P(answerable): a hit more like the question never lowers it,
# a question term the knowledge base lacks never raises it (+1: coefficient >= 0, -1: <= 0, 0:
# free). Without it a model fitted on near misses alone learnt a negative cosine weight, and
# answered questions far from every document ("What is the capital of France?").
SIGNS = {"relevance": 1, "cosine": 1, "coverage": 1, "absent_kb": -1, "absent_top": -1, "named_absent_kb": -1,
         "named_absent_top": -1, "agreement": 1,
         "dense_margin": 1, "bm25_margin": 1, "identifier": 0, "cjk": 0, "terms": 0}
MIN_EACH = 10  # answerable and unanswerable questions a model needs (fewer: no model is fitted)


@dataclass
class Fitted:
    features: list[str]
    coefficients: list[float]
    intercept: float
    slope: float
    offset: float

    def score(self, X: np.ndarray) -> np.ndarray:
        return self.intercept + X @ np.asarray(self.coefficients)

    def probability(self, X: np.ndarray) -> np.ndarray:
        z = np.clip(self.slope * self.score(X) + self.offset, -60, 60)
        return 1.0 / (1.0 + np.exp(-z))

    def to_contract(self, fitted_on: dict) -> dict:
        return {"version": 1, "coefficients": {f: round(c, 6) for f, c in zip(self.features, self.coefficients)},
                "intercept": round(self.intercept, 6),
                "calibration": {"slope": round(self.slope, 6), "offset": round(self.offset, 6)},
                "fitted_on": fitted_on}


def _folds(y: np.ndarray, k: int, seed: int):
    from sklearn.model_selection import StratifiedKFold

    k = max(2, min(k, int(min((y == 0).sum(), (y == 1).sum()))))
    return list(StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(np.zeros(len(y)), y))


def _logistic(X: np.ndarray, y: np.ndarray, signs: Sequence[int] | None = None) -> tuple[np.ndarray, float]:
    """Coefficients and intercept on the features' own scale (standardisation folded in).

    scikit-learn's objective (L2 ``0.5 |w|^2 + C * sum(weight * log loss)``, balanced class
    weights), minimised by scipy's L-BFGS-B so that a coefficient can be held to its sign: +1 at
    least 0, -1 at most 0, 0 free (``SIGNS``). Without signs it is sklearn's LogisticRegression."""
    from scipy.optimize import minimize

    mean = X.mean(axis=0)
    scale = X.std(axis=0)
    scale[scale < 1e-9] = 1.0  # a constant feature (no CJK question in the set) gets no weight
    Z = (X - mean) / scale
    n_pos, n_neg = max(1, int(y.sum())), max(1, int((y == 0).sum()))
    w = np.where(y == 1, len(y) / (2 * n_pos), len(y) / (2 * n_neg))  # class_weight="balanced"

    def objective(p):
        z = p[0] + Z @ p[1:]
        loss = C * float(np.sum(w * (np.logaddexp(0, z) - y * z))) + 0.5 * float(p[1:] @ p[1:])
        g = C * w * (1 / (1 + np.exp(-z)) - y)
        return loss, np.concatenate([[g.sum()], Z.T @ g + p[1:]])

    signs = list(signs) if signs is not None else [0] * X.shape[1]
    bounds = [(None, None)] + [(0, None) if s > 0 else (None, 0) if s < 0 else (None, None) for s in signs]
    r = minimize(objective, np.zeros(X.shape[1] + 1), jac=True, method="L-BFGS-B", bounds=bounds,
                 options={"maxiter": 5000, "gtol": 1e-9})
    coef = r.x[1:] / scale
    return coef, float(r.x[0] - (r.x[1:] * mean / scale).sum())


def _platt(scores: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(slope, offset) of the logistic map from a score to P(answerable), unweighted: the set's mix."""
    from sklearn.linear_model import LogisticRegression

    if len(set(y.tolist())) < 2:
        return 1.0, 0.0
    m = LogisticRegression(C=1e4, max_iter=5000).fit(scores.reshape(-1, 1), y)
    return float(m.coef_[0][0]), float(m.intercept_[0])


def _oof_scores(X, y, folds, signs) -> np.ndarray:
    out = np.zeros(len(y))
    for train, test in folds:
        coef, b = _logistic(X[train], y[train], signs)
        out[test] = b + X[test] @ coef
    return out


def fit(features: list[str], X: np.ndarray, y: np.ndarray, *, folds: int = 5, seed: int = 0,
        pick: Callable[[np.ndarray, np.ndarray], float] | None = None,
        blend: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None) -> tuple[Fitted, np.ndarray, np.ndarray | None]:
    """The model fitted on every question, each question's out-of-fold probability, and with
    ``pick`` (answerable probabilities, unanswerable probabilities -> refuse-below threshold) which
    questions are refused when the threshold, too, is chosen without them: in each outer fold it is
    picked on the training questions' inner out-of-fold probabilities, which never saw the fold.
    ``blend(z, rows)``: the calibrated score of those rows as it will be used (shrinkage toward a
    prior model, ``negatives.blended``); the returned ``Fitted`` is the model before it."""
    X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=int)
    signs = [SIGNS.get(f, 0) for f in features]
    outer = _folds(y, folds, seed)
    oof = np.zeros(len(y))
    refused = np.zeros(len(y), dtype=bool) if pick is not None else None
    sigmoid = lambda z: 1.0 / (1.0 + np.exp(-np.clip(z, -60, 60)))  # noqa: E731
    blend = blend or (lambda z, rows: z)
    for train, test in outer:
        inner = _folds(y[train], folds, seed + 1)
        inner_scores = _oof_scores(X[train], y[train], inner, signs)
        slope, offset = _platt(inner_scores, y[train])
        coef, b = _logistic(X[train], y[train], signs)
        oof[test] = sigmoid(blend(slope * (b + X[test] @ coef) + offset, test))
        if pick is not None:
            p_train = sigmoid(blend(slope * inner_scores + offset, train))
            refused[test] = oof[test] < pick(p_train[y[train] == 1], p_train[y[train] == 0])
    slope, offset = _platt(_oof_scores(X, y, outer, signs), y)
    coef, b = _logistic(X, y, signs)
    return Fitted(list(features), [float(c) for c in coef], b, slope, offset), oof, refused


# ---- quality of probabilities -----------------------------------------------------------------
def auc(y, p) -> float | None:
    """Area under the ROC curve: the chance an answerable question scores above an unanswerable
    one (ties count half). None without both kinds."""
    y, p = np.asarray(y), np.asarray(p, dtype=float)
    pos, neg = p[y == 1], p[y == 0]
    if not len(pos) or not len(neg):
        return None
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def brier(y, p) -> float:
    y, p = np.asarray(y, dtype=float), np.asarray(p, dtype=float)
    return float(np.mean((p - y) ** 2))


def reliability(y, p, bins: int = 10) -> list[dict]:
    """Equal-width bins of predicted probability: count, mean prediction, share answerable."""
    y, p = np.asarray(y, dtype=float), np.asarray(p, dtype=float)
    out = []
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        m = (p >= lo) & ((p < hi) if b < bins - 1 else (p <= hi))
        if m.any():
            out.append({"low": lo, "high": hi, "count": int(m.sum()), "predicted": round(float(p[m].mean()), 4),
                        "observed": round(float(y[m].mean()), 4)})
    return out


def calibration_error(y, p, bins: int = 10) -> float:
    """Expected calibration error: the count-weighted mean |observed - predicted| over the bins."""
    rows = reliability(y, p, bins)
    n = sum(r["count"] for r in rows)
    return float(sum(r["count"] * abs(r["observed"] - r["predicted"]) for r in rows) / n) if n else 0.0


def roc_points(y, p) -> list[tuple[float, float]]:
    """(false positive rate, true positive rate) at every threshold, answerable = positive."""
    y, p = np.asarray(y), np.asarray(p, dtype=float)
    pos, neg = max(1, int((y == 1).sum())), max(1, int((y == 0).sum()))
    points = [(0.0, 0.0)]
    for t in sorted(set(p.tolist()), reverse=True):
        points.append((float(((p >= t) & (y == 0)).sum() / neg), float(((p >= t) & (y == 1)).sum() / pos)))
    points.append((1.0, 1.0))
    return points


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """95 % Wilson score interval of a rate (None for n = 0)."""
    if n == 0:
        return None
    phat = successes / n
    denom = 1 + z * z / n
    centre = (phat + z * z / (2 * n)) / denom
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / denom
    return round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)


def quality(y, p) -> dict:
    """AUC, Brier score, calibration error and the reliability bins of probabilities ``p``."""
    a = auc(y, p)
    return {"auc": None if a is None else round(a, 4), "brier": round(brier(y, p), 4),
            "calibration_error": round(calibration_error(y, p), 4), "reliability": reliability(y, p)}
