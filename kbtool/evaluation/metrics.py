"""Ranking metrics: pure functions over one ranked list and one question's judgements.

Conventions (identical to trec_eval and ranx, checked in tests/test_metrics.py):
- ``ranking`` is a list of ids, best first, already de-duplicated and tie-broken by (-score, id).
- ``qrels`` maps id -> graded relevance; an id is relevant when its grade >= 1. Unjudged = 0.
- ``k`` cuts the ranking; K larger than the list simply uses the whole list.
- Precision@k divides by k even when fewer than k items were retrieved (trec_eval ``P_k``).

Names follow ranx: ``"hit_rate@5"``, ``"mrr@10"``, ``"ndcg@10"``, ``"recall@10"``,
``"precision@5"``, ``"map@10"``.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

Ranking = Sequence[str]
Qrels = Mapping[str, float]
HEADLINE = ("hit_rate@5", "mrr@10", "ndcg@10")  # the metrics tables and reports lead with


def _relevant(qrels: Qrels) -> set[str]:
    return {d for d, g in qrels.items() if g >= 1}


def hit_rate(ranking: Ranking, qrels: Qrels, k: int) -> float:
    """1 if any relevant id is in the top k, else 0 (ranx ``hit_rate@k``; trec_eval ``success_k``)."""
    rel = _relevant(qrels)
    return 1.0 if any(d in rel for d in ranking[:k]) else 0.0


def mrr(ranking: Ranking, qrels: Qrels, k: int) -> float:
    """1 / rank of the first relevant id within the top k, else 0 (ranx ``mrr@k``; trec_eval ``recip_rank`` cut at k)."""
    rel = _relevant(qrels)
    for i, d in enumerate(ranking[:k], start=1):
        if d in rel:
            return 1.0 / i
    return 0.0


def precision(ranking: Ranking, qrels: Qrels, k: int) -> float:
    """|relevant in top k| / k (trec_eval ``P_k``)."""
    rel = _relevant(qrels)
    return sum(1 for d in ranking[:k] if d in rel) / k


def recall(ranking: Ranking, qrels: Qrels, k: int) -> float:
    """|relevant in top k| / |relevant| (trec_eval ``recall_k``); 0 when nothing is relevant."""
    rel = _relevant(qrels)
    if not rel:
        return 0.0
    return sum(1 for d in ranking[:k] if d in rel) / len(rel)


def average_precision(ranking: Ranking, qrels: Qrels, k: int) -> float:
    """sum over relevant ranks i <= k of precision@i, divided by |relevant| (trec_eval ``map_cut_k``)."""
    rel = _relevant(qrels)
    if not rel:
        return 0.0
    hits, total = 0, 0.0
    for i, d in enumerate(ranking[:k], start=1):
        if d in rel:
            hits += 1
            total += hits / i
    return total / len(rel)


def ndcg(ranking: Ranking, qrels: Qrels, k: int) -> float:
    """DCG@k / IDCG@k with gain = grade and discount log2(rank + 1).

    The ideal ranking orders *all* judged relevant ids by grade (trec_eval ``ndcg_cut_k``;
    ranx ``ndcg@k``, Järvelin & Kekäläinen). 0 when nothing is relevant.
    """
    gains = {d: g for d, g in qrels.items() if g >= 1}
    if not gains:
        return 0.0
    dcg = sum(gains.get(d, 0.0) / math.log2(i + 1) for i, d in enumerate(ranking[:k], start=1))
    ideal = sorted(gains.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 1) for i, g in enumerate(ideal, start=1))
    return dcg / idcg


def distinct(docs: Sequence[str], k: int) -> float:
    """How many distinct documents the top k hits come from (``docs``: each hit's document, best
    first); eval reports its mean over every question as ``distinct@k``. Not a relevance metric:
    it needs no judgement."""
    return float(len(set(docs[:k])))


METRICS: dict[str, Callable[[Ranking, Qrels, int], float]] = {
    "hit_rate": hit_rate,
    "mrr": mrr,
    "ndcg": ndcg,
    "recall": recall,
    "precision": precision,
    "map": average_precision,
}
DEFAULT_METRICS = ("hit_rate", "mrr", "ndcg", "recall", "precision", "map")


def parse_metric(name: str) -> tuple[str, int]:
    """``"ndcg@10"`` -> ("ndcg", 10); raises ValueError naming the valid metrics."""
    base, sep, k = name.partition("@")
    if base not in METRICS or not sep or not k.isdigit() or int(k) < 1:
        raise ValueError(
            f"unknown metric {name!r}: use NAME@K with NAME one of {', '.join(METRICS)} and K >= 1, e.g. ndcg@10"
        )
    return base, int(k)


def score(name: str, ranking: Ranking, qrels: Qrels) -> float:
    base, k = parse_metric(name)
    return METRICS[base](ranking, qrels, k)


# ---- refusal rates (gateable like the ranking metrics: eval --fail-under 'contract:false_refusal<=0.1') ----
RATES = {
    "false_refusal": "answerable questions refused / answerable questions",
    "false_answer": "unanswerable questions not refused / unanswerable questions",
    "correct_refusal": "unanswerable questions refused / unanswerable questions (1 - false_answer)",
}
RATE_NEEDS = {"false_refusal": "answerable", "false_answer": "unanswerable", "correct_refusal": "unanswerable"}


def refusal_rates(counts: dict) -> dict[str, float | None]:
    """``RATES`` from refusal counts {unanswerable, correctly_refused, answerable, wrongly_refused}
    (``EvalReport.refusal()``'s or the contract's ``calibration.recorded.refusal``), rounded to 6."""
    ans, unans = counts.get("answerable") or 0, counts.get("unanswerable") or 0
    fr = counts["wrongly_refused"] / ans if ans else None
    cr = counts["correctly_refused"] / unans if unans else None
    return {"false_refusal": round6(fr), "false_answer": None if cr is None else round6(1 - cr),
            "correct_refusal": round6(cr)}


def round6(v: float | None) -> float | None:
    return None if v is None else round(v, 6)
