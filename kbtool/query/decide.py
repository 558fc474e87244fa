"""Confidence and decisions (the explanation of a decision: ``kbtool.query.explain``).

A hit's **confidence** is in [0, 1] and means the same for every question:

    confidence = w_dense * max(cosine, 0) + w_bm25 * bm25_coverage   (+ w_r * max(cosine_r, 0) per further model)

where ``cosine`` is the embedding similarity of question and chunk (per dense retriever), ``bm25_coverage`` is the
chunk's BM25 score divided by the score of a chunk as good as the best one on *every* query term
(a query term no chunk contains counts as a rare term: it lowers every chunk's coverage), and
the weights are the question's fusion weights (a single retriever uses its own part alone). It
never depends on ranks, so a threshold on it means the same across questions.

The **decision** compares the thresholds with P(answerable) when the contract has an
answerability model (``decide.model``: ``answerability`` applies it to the question's signals,
``kbtool.query.signals``), else with the best hit's confidence. The tiers have jobs: ``refuse``
needs positive evidence that the knowledge base lacks the answer (``absence``: a named thing the top
documents never mention, or nothing near at all); a weak, semantic-only match below the refuse
threshold is ``low_confidence`` — the agent still gets the context, with the caveat.
"""

from __future__ import annotations

import math

DECISIONS = ("answer", "low_confidence", "refuse")


def confidence(values: dict[str, float | None], weights: dict[str, float]) -> float:
    """The weighted mean, over the retrievers with a weight and a value, of each one's value clipped
    to [0, 1]: a dense retriever's cosine, BM25's coverage."""
    parts = [(min(1.0, max(0.0, v)), weights[r]) for r, v in values.items()
             if v is not None and weights.get(r, 0) > 0]
    total = sum(w for _, w in parts)
    return sum(v * w for v, w in parts) / total if total > 0 else 0.0


def answerability(signals: dict[str, float], model) -> float:
    """P(answerable) from the answerability signals with the contract's model (``decide.model``):
    the logistic model's score, through its calibration map (Platt: a logistic of the score)."""
    z = model.intercept + sum(c * float(signals.get(f, 0.0)) for f, c in model.coefficients.items())
    z = model.calibration.slope * z + model.calibration.offset
    if math.isnan(z):  # huge weights can still give inf - inf: an undefined score never answers
        return 0.0
    z = max(-60.0, min(60.0, z))
    return round(1.0 / (1.0 + math.exp(-z)), 4)


def absence(signals: dict[str, float] | None, refuse) -> str | None:
    """The evidence that the knowledge base lacks what the question asks (``decide.refuse``), or None:
    'named' (a named thing the top hits' documents never mention), 'far' (nothing near: the best
    cosine below ``refuse.near``), 'empty' (no term any chunk could hold: '???', 'the a of'). Without ``needs_evidence`` every question has it ('threshold')."""
    if not refuse.needs_evidence or signals is None:
        return "threshold"
    if signals.get("named_absent_top", 0.0) >= refuse.named:
        return "named"
    if signals.get("cosine", 0.0) < refuse.near:
        return "far"
    if signals.get("terms", 1.0) == 0 and signals.get("absent_kb", 0.0) >= 1:
        return "empty"  # no term a chunk could hold ('???', 'the a of')
    return None


def decide(top_confidence: float | None, thresholds, evidence: str | None = "threshold") -> str:
    """answer / low_confidence / refuse. Below ``low_confidence`` a question is refused only with
    ``evidence`` of absence (``absence``); without it, it gets the notice, not a refusal."""
    if top_confidence is None:
        return "refuse"
    if top_confidence < thresholds.low_confidence:
        return "refuse" if evidence else "low_confidence"
    if top_confidence < thresholds.answer:
        return "low_confidence"
    return "answer"
