"""Calibrate's thresholds: the refuse and answer thresholds per tier, chosen on each question's
P(answerable) (or confidence) and its evidence of absence (``kbtool.query.decide.absence``), and
the rates they give, counted with the pipeline's own ``decide``.

The refuse tier refuses only a question with evidence of absence; its threshold is chosen over
those (a question without evidence is ``UNREFUSABLE``) for a false-refusal target
(``decide.refuse.max_false_refusal``, 5 %), a false-answer target, or balanced accuracy. The
answer threshold sits at or above it: the lowest at which at most 5 % of plainly answered
questions are unanswerable.
"""

from __future__ import annotations

import numpy as np

MIN_UNANSWERABLE = 5
MIN_TIER = 5
FEW_TIER = (20, 10)  # a tier from fewer answerable / unanswerable questions than these is written with a warning
TYPED = ("cjk_identifier", "identifier", "cjk")  # groups that may get a rule (and a tier) of their own, in this order


def with_tiers(contract, tiers: dict):
    return contract.model_copy(update={"decide": contract.decide.model_copy(update={"tiers": dict(tiers)})})

def rates(ans, unans, t: float) -> tuple[float, float]:
    """(false answer rate: unanswerable not refused, false refusal rate: answerable refused) when
    the pipeline's ``decide`` refuses below ``t``. A value of ``UNREFUSABLE`` is a question without
    evidence of absence (``decide.absence``), which no threshold refuses."""
    from ..contract import Thresholds
    from ..query.decide import decide

    th = Thresholds(answer=1.0, low_confidence=t)
    refused = lambda c: c != UNREFUSABLE and decide(c, th) == "refuse"  # noqa: E731
    fa = float(np.mean([not refused(c) for c in unans])) if len(unans) else 0.0
    fr = float(np.mean([refused(c) for c in ans])) if len(ans) else 0.0
    return fa, fr


UNREFUSABLE = float("inf")  # pick's value for a question decide never refuses (no evidence of absence)


def refusable(values, evidence) -> list:
    """Values as the refuse tier sees them: ``UNREFUSABLE`` where there is no evidence of absence."""
    return [c if e else UNREFUSABLE for c, e in zip(values, evidence)]


def pick(ans, unans, max_fa, max_fr) -> tuple[float, float, float, bool]:
    """(refuse-below threshold, false answer rate, false refusal rate, target met); ``ans`` and
    ``unans`` are top confidences (None: nothing retrieved)."""
    cands = sorted({0.0, *(round(float(c), 4) for c in (*ans, *unans) if c is not None and c != UNREFUSABLE), 1.0})
    # a threshold just above each observed value separates it; use midpoints between neighbours
    points = [round((a + b) / 2, 4) for a, b in zip(cands, cands[1:])] or [0.5]
    scored = []
    for t in points:
        fa, fr = rates(ans, unans, t)
        scored.append((t, fa, fr))
    if max_fa is not None:
        ok = [s for s in scored if s[1] <= max_fa]
        return (*min(ok, key=lambda s: (s[2], s[0])), True) if ok else (*max(scored, key=lambda s: s[0]), False)
    if max_fr is not None:
        ok = [s for s in scored if s[2] <= max_fr]
        return (*min(ok, key=lambda s: (s[1], -s[0])), True) if ok else (*min(scored, key=lambda s: s[0]), False)
    # balanced accuracy = ((1 - fa) + (1 - fr)) / 2; ties: the lower threshold (fewer refusals)
    return (*max(scored, key=lambda s: ((1 - s[1]) + (1 - s[2]), -s[0])), True)


def answer_threshold(low: float, ans, unans, share: float = 0.05) -> float:
    """The lowest threshold at or above ``low`` at which at most ``share`` of the questions answered
    without the notice (at or above it) are unanswerable: an answer given plainly is wrong at most
    that often, at the question set's mix. None values (nothing retrieved) are never answered."""
    ans = [float(c) for c in ans if c is not None]
    unans = [float(c) for c in unans if c is not None]
    if not unans:
        return round(low, 4)
    for t in sorted({low, *(c for c in (*ans, *unans) if c >= low)}):
        a = sum(1 for c in ans if c >= t)
        u = sum(1 for c in unans if c >= t)
        if a + u and u <= share * (a + u) + 1e-12:
            return round(t, 4)
    return round(min(1.0, max(low, max(unans) + 1e-4)), 4)


def tiers_of(contract, items, notes: list[str]) -> dict[int, str]:
    """Each question's tier, as ``thresholds_for`` picks it on a contract whose tiers are the typed
    groups with at least MIN_TIER answerable and unanswerable questions (what will be written)."""
    from ..contract import Thresholds

    names = list(TYPED)
    while True:
        probe = with_tiers(contract, {n: Thresholds() for n in names})
        tier = {id(it): probe.thresholds_for(it.types, it.tags)[0] for it in items}
        small = []
        for n in names:
            a = sum(1 for it in items if tier[id(it)] == n and it.q.answerable)
            u = sum(1 for it in items if tier[id(it)] == n and not it.q.answerable)
            if a < MIN_TIER or u < MIN_TIER:
                small.append(n)
                if a or u:
                    notes.append(f"{n}: {a} answerable / {u} unanswerable question(s): fewer than {MIN_TIER} of "
                                 "each, so no tier of its own (the default thresholds apply)")
        if not small:
            return tier
        names = [n for n in names if n not in small]


def choose_thresholds(contract, items, conf, max_fa, max_fr, evidence: dict):
    """Thresholds per tier, the trade-off table and notes; rates are counted with ``decide`` under
    the tiers ``thresholds_for`` picks on the contract as it will be written. ``evidence``: each
    question's evidence of absence (``decide.absence``); a question without it is never refused,
    so the refuse threshold is chosen over those with it. Without a target the refuse tier aims at
    ``decide.refuse.max_false_refusal`` of the answerable questions."""
    notes = []
    if max_fa is None and max_fr is None:
        max_fr = contract.decide.refuse.max_false_refusal
    ref = lambda its: refusable([conf[id(it)] for it in its], [evidence[id(it)] for it in its])  # noqa: E731
    all_ans = ref([it for it in items if it.q.answerable])
    all_unans = ref([it for it in items if not it.q.answerable])
    table = []
    for t in sorted({round(x / 20, 2) for x in range(21)}):
        fa, fr = rates(all_ans, all_unans, t)
        table.append({"threshold": t, "false_answer": round(fa, 4), "false_refusal": round(fr, 4)})
    if len(all_unans) < MIN_UNANSWERABLE:
        notes.append(f"{len(all_unans)} unanswerable question(s), fewer than {MIN_UNANSWERABLE}: no refusal threshold is "
                     "proposed. Add questions the knowledge base cannot answer, with \"relevant\": [], e.g. "
                     '{"id": "u1", "question": "How do I pay with PayPal?", "relevant": []}')
        return None, table, notes

    def tier_thresholds(members, name):
        a = [conf[id(it)] for it in members if it.q.answerable]
        u = [conf[id(it)] for it in members if not it.q.answerable]
        ans_items, unans_items = [it for it in members if it.q.answerable], [it for it in members if not it.q.answerable]
        low, fa, fr, met = pick(ref(ans_items), ref(unans_items), max_fa, max_fr)
        if not met:
            notes.append(f"{name}: the target cannot be met on these questions; the closest threshold is used "
                         f"(false answers {fa:.0%}, false refusals {fr:.0%})")
        if name != "default" and (len(a) < FEW_TIER[0] or len(u) < FEW_TIER[1]):
            notes.append(f"{name}: tier thresholds from {len(a)} answerable and {len(u)} unanswerable question(s) "
                         f"only — each rate moves by {1 / max(1, min(len(a), len(u))):.0%} per question; label more "
                         "of this type, or drop the tier from decide.tiers to use the default thresholds")
        return {"answer": answer_threshold(low, a, u), "low_confidence": round(low, 4), "false_answer": round(fa, 4),
                "false_refusal": round(fr, 4), "answerable": len(a), "unanswerable": len(u)}

    tier = tiers_of(contract, items, notes)
    names = [n for n in TYPED if n in tier.values()]
    tiers = {n: tier_thresholds([it for it in items if tier[id(it)] == n], n) for n in names}
    default = tier_thresholds([it for it in items if tier[id(it)] == "default"], "default")
    # rates over every question, each decided under the thresholds the written contract gives it
    refused = refused_as_written(contract, items, conf, {"default": default, "tiers": tiers}, evidence)
    fa = [not refused[id(it)] for it in items if not it.q.answerable]
    fr = [refused[id(it)] for it in items if it.q.answerable]
    overall = {"false_answer": round(float(np.mean(fa)), 4) if fa else 0.0, "answerable": len(fr),
               "false_refusal": round(float(np.mean(fr)), 4) if fr else 0.0, "unanswerable": len(fa)}
    notes.append("threshold rates are measured on the questions the thresholds were chosen on (with a model: on "
                 "out-of-fold probabilities; answerability.heldout_thresholds also holds out the threshold choice)")
    return ({"default": default, "tiers": tiers, "overall": overall,
             "needs_evidence": contract.decide.refuse.needs_evidence}, table, notes)


def tradeoff_curves(contract, items, conf, thresholds: dict, evidence: dict) -> dict[str, list[dict]]:
    """Per tier (default first, then ``thresholds["tiers"]``), the false answer and false refusal
    rates of its own questions over refuse-below thresholds: every 0.05, the midpoints ``pick``
    chooses among and the tier's chosen ``low_confidence``, so the chosen point is a point of its
    tier's curve (counted by the same ``rates``). A tier's questions are those ``thresholds_for``
    gives it on the contract as written; ``items``: the real questions the rates are reported on."""
    from ..contract import Thresholds

    written = with_tiers(contract, {n: Thresholds() for n in thresholds["tiers"]})
    tier = {id(it): written.thresholds_for(it.types, it.tags)[0] for it in items}
    curves = {}
    for name, chosen in [("default", thresholds["default"]), *thresholds["tiers"].items()]:
        members = [it for it in items if tier[id(it)] == name]
        ans = refusable([conf[id(it)] for it in members if it.q.answerable],
                        [evidence[id(it)] for it in members if it.q.answerable])
        unans = refusable([conf[id(it)] for it in members if not it.q.answerable],
                          [evidence[id(it)] for it in members if not it.q.answerable])
        seen = sorted({0.0, 1.0, *(round(float(c), 4) for c in (*ans, *unans) if c is not None and c != UNREFUSABLE)})
        points = {round(x / 20, 2) for x in range(21)} | {round((a + b) / 2, 4) for a, b in zip(seen, seen[1:])}
        curve = []
        for t in sorted(points | {chosen["low_confidence"]}):
            fa, fr = rates(ans, unans, t)
            curve.append({"threshold": t, "false_answer": round(fa, 4), "false_refusal": round(fr, 4)})
        curves[name] = curve
    return curves


def evidence_of(contract, items, signals: dict) -> dict[int, str | None]:
    """Each question's evidence of absence under ``contract.decide.refuse`` (``decide.absence``)."""
    from ..query.decide import absence

    return {id(it): absence(signals[id(it)], contract.decide.refuse) for it in items}


def refused_as_written(contract, items, conf, thresholds: dict, evidence: dict) -> dict[int, bool]:
    """Whether ``decide`` refuses each question (by ``id``) under the thresholds and tiers
    calibrate will write ({"default": {...}, "tiers": {name: {...}}}), the tier as
    ``thresholds_for`` picks it."""
    from ..contract import Thresholds
    from ..query.decide import decide

    as_thresholds = lambda t: Thresholds(answer=t["answer"], low_confidence=t["low_confidence"])  # noqa: E731
    written = with_tiers(contract, {n: as_thresholds(t) for n, t in thresholds["tiers"].items()})
    written = written.model_copy(update={"decide": written.decide.model_copy(
        update={"thresholds": as_thresholds(thresholds["default"])})})
    return {id(it): decide(conf[id(it)], written.thresholds_for(it.types, it.tags)[1], evidence[id(it)]) == "refuse"
            for it in items}


def mistakes_of(contract, items, conf, thresholds: dict, signals: dict, evidence: dict) -> dict:
    """Questions the written thresholds decide wrongly (refused answerable, answered unanswerable),
    on the values they were chosen on (out-of-fold P(answerable) with a model), with their signals."""
    refused_of = refused_as_written(contract, items, conf, thresholds, evidence)
    out: dict = {"wrongly_refused": [], "wrongly_answered": []}
    for it in items:
        refused = refused_of[id(it)]
        if refused == it.q.answerable:
            kind = "wrongly_refused" if refused else "wrongly_answered"
            out[kind].append({"id": it.q.id, "question": it.q.question, "value": conf[id(it)],
                              "signals": signals[id(it)]})
    return out


def heldout_rates(y: np.ndarray, refused: np.ndarray) -> dict:
    """Refusal rates when the refuse threshold, too, is chosen without the question it decides
    (``answerability.fit`` with ``pick``: one threshold per outer fold for every question), with
    95 % Wilson intervals."""
    from . import answerability as am

    un, ans = refused[y == 0], refused[y == 1]
    return {"correctly_refused": int(un.sum()), "unanswerable": int(len(un)),
            "refusal_rate": round(float(un.mean()), 4) if len(un) else None,
            "refusal_interval": am.wilson(int(un.sum()), int(len(un))),
            "wrongly_refused": int(ans.sum()), "answerable": int(len(ans)),
            "false_refusal": round(float(ans.mean()), 4) if len(ans) else None,
            "false_refusal_interval": am.wilson(int(ans.sum()), int(len(ans)))}
