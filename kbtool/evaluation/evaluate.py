"""Evaluate retrieval on a labelled question set: every mode side by side, per tag, refusals.

``evaluate()`` returns an ``EvalReport``; ``report.to_dict()`` is the JSON schema documented in
the README. Gates and baselines are in ``compare``, the files (CSV, TREC, HTML) in ``outputs``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Callable, Sequence

from .. import __version__
from ..errors import UsageError
from ..query.retriever import parse_mode
from .compare import best_single, is_single_mode
from .metrics import DEFAULT_METRICS, METRICS, RATE_NEEDS, RATES, distinct, refusal_rates, round6, score  # noqa: F401 (re-exported)
from .questions import DEFAULT_DEPTH, Question, QuestionSet
from .units import EvidenceMatcher, level_of, units

DEFAULT_KS = (1, 3, 5, 10)
DEFAULT_MODES = ("bm25", "dense", "contract")
# Refusal rates, gateable like the ranking metrics (``--fail-under 'contract:false_refusal<=0.1'``).
# A question counts as refused when its decision is ``refuse``; ``low_confidence`` is an answer
# (with a notice). Each rate is None when the set has none of the questions it divides by.
@dataclass
class EvalConfig:
    modes: Sequence[str] = DEFAULT_MODES
    ks: Sequence[int] = DEFAULT_KS
    metrics: Sequence[str] = DEFAULT_METRICS
    level: str = "auto"  # auto | doc | chunk
    depth: int = DEFAULT_DEPTH
    thresholds: dict[str, float] = field(default_factory=dict)
    filters: list[str] | dict = field(default_factory=list)
    contract_names: Sequence[str] = ()  # modes that name a contract (eval --contract a.yaml --contract b.yaml)

    def metric_names(self) -> list[str]:
        return [f"{m}@{k}" for m in self.metrics for k in sorted(set(self.ks))]

    def validate(self) -> None:
        self.modes = list(dict.fromkeys(self.modes))
        self.metrics = list(dict.fromkeys(self.metrics))
        self.ks = sorted(set(self.ks))
        if not self.modes:
            raise UsageError("no modes to evaluate")
        for mode in self.modes:
            if mode not in self.contract_names:
                parse_mode(mode)
        for m in self.metrics:
            if m not in METRICS:
                raise UsageError(f"unknown metric {m!r}: use {', '.join(METRICS)}")
        if not self.ks or min(self.ks) < 1:
            raise UsageError(f"ks {list(self.ks)}: every k must be >= 1")
        if self.level not in ("auto", "doc", "chunk"):
            raise UsageError(f"level {self.level!r}: use auto, doc or chunk")
        if any(not math.isfinite(v) for v in self.thresholds.values()):
            raise UsageError("thresholds: every value must be a finite number")
        unknown = set(self.thresholds) - set(self.modes)
        if unknown:
            raise UsageError(f"thresholds: mode(s) not evaluated: {', '.join(sorted(unknown))}")
        self.depth = max(self.depth, max(self.ks))
        if isinstance(self.filters, dict):
            self.filters = [f"{k}={v}" for k, v in self.filters.items()]


@dataclass
class ModeResult:
    ranking: list[str]
    unit_scores: list[float]
    qrels: dict[str, float]
    top_score: float | None  # the decision value: P(answerable), or without a model the top hit's confidence
    refused: bool
    first_relevant_rank: int | None
    metrics: dict[str, float]
    top_doc: str | None
    decision: str = ""  # answer | low_confidence | refuse: the contract's, or the --threshold's
    signals: dict = field(default_factory=dict)  # the answerability signals decide saw (Answer.signals)
    distinct: dict = field(default_factory=dict)  # "distinct@K" -> distinct documents in the top K hits
    rule: dict | None = None  # the retrieve.rules entry that fused it (Answer.rule)


@dataclass
class QuestionResult:
    question: Question
    level: str
    modes: dict[str, ModeResult]


@dataclass
class EvalReport:
    question_set: QuestionSet
    config: EvalConfig
    results: list[QuestionResult]
    store_info: dict
    source: str = ""
    gates: list = field(default_factory=list)  # compare.Gate, as checked
    baseline: dict | None = None
    calibration: dict | None = None  # the contract's calibration appendix, and warnings, when it has one
    contract: dict | None = None  # the contract in force: {path, version, calibrated, overrides} (set by the CLI)
    decided_by: dict[str, str] = field(default_factory=dict)  # mode -> "P(answerable)" (decide.model) or "confidence"
    created_at: str = field(default_factory=lambda: datetime.now(timezone.utc).replace(microsecond=0).isoformat())

    # ---- aggregates ----------------------------------------------------------------------
    def answerable(self) -> list[QuestionResult]:
        return [r for r in self.results if r.question.answerable]

    def mean(self, mode: str, metric: str, tag: str | None = None) -> float | None:
        rows = [r for r in self.answerable() if tag is None or tag in r.question.tags]
        if not rows:
            return None
        return sum(r.modes[mode].metrics[metric] for r in rows) / len(rows)

    def metrics(self) -> dict[str, dict[str, float | None]]:
        """Mean of each metric over answerable questions (None when there are none)."""
        return {m: {name: round6(self.mean(m, name)) for name in self.config.metric_names()}
                for m in self.config.modes}

    def diversity(self) -> dict[str, dict[str, float | None]]:
        """Per mode, ``distinct@K``: the mean number of distinct documents among each question's
        top K hits, over every question (answerable or not; no judgement needed)."""
        names = [f"distinct@{k}" for k in sorted(set(self.config.ks))]

        def mean(m: str, n: str) -> float | None:
            # results read back from a report written before distinct@K (a --baseline) have none
            got = [r.modes[m].distinct[n] for r in self.results if m in r.modes and n in r.modes[m].distinct]
            return round6(sum(got) / len(got)) if got else None

        return {m: {n: mean(m, n) for n in names} for m in self.config.modes}

    def tags(self) -> list[str]:
        return sorted({t for r in self.results for t in r.question.tags})

    def by_tag(self) -> dict[str, dict]:
        out = {}
        for tag in self.tags():
            rows = [r for r in self.results if tag in r.question.tags]
            answerable = [r for r in rows if r.question.answerable]
            entry: dict = {"count": len(rows), "answerable": len(answerable)}
            if answerable:
                entry["metrics"] = {m: {name: round6(self.mean(m, name, tag)) for name in self.config.metric_names()}
                                    for m in self.config.modes}
            entry["refusal"] = {m: {**(c := self._refusal(m, rows)), **refusal_rates(c)} for m in self.config.modes}
            out[tag] = entry
        return out

    def deltas(self) -> dict[str, dict]:
        """For each fused mode: its value minus the best single retriever's, per metric."""
        singles = [m for m in self.config.modes if is_single_mode(m)]
        fused = [m for m in self.config.modes if m not in singles]
        if not singles or not fused or not self.answerable():
            return {}
        means = self.metrics()
        out = {}
        for f in fused:
            out[f] = {}
            for name in self.config.metric_names():
                best = best_single({s: means[s][name] for s in singles})
                out[f][name] = {"best_single": best, "best_single_value": means[best][name],
                                "value": means[f][name], "delta": round(means[f][name] - means[best][name], 6)}
        return out

    def _refusal(self, mode: str, rows: list[QuestionResult]) -> dict:
        threshold = self.config.thresholds.get(mode)
        unans = [r for r in rows if not r.question.answerable]
        ans = [r for r in rows if r.question.answerable]
        return {
            "threshold": threshold,
            "unanswerable": len(unans),
            "correctly_refused": sum(r.modes[mode].refused for r in unans),
            "answerable": len(ans),
            "wrongly_refused": sum(r.modes[mode].refused for r in ans),
            # the low-confidence tier: answered with the notice (the agent gets the context and the caveat)
            "unanswerable_hedged": sum(r.modes[mode].decision == "low_confidence" for r in unans),
            "answerable_hedged": sum(r.modes[mode].decision == "low_confidence" for r in ans),
        }

    def refusal(self) -> dict[str, dict]:
        return {m: self._refusal(m, self.results) for m in self.config.modes}

    def rate(self, mode: str, name: str, tag: str | None = None) -> float | None:
        """A refusal rate (``RATES``) of a mode, over every question or those with ``tag``; None
        when there is no question of the kind it divides by."""
        if name not in RATES:
            raise UsageError(f"unknown refusal rate {name!r}: use {', '.join(RATES)}")
        rows = [r for r in self.results if tag is None or tag in r.question.tags]
        return refusal_rates(self._refusal(mode, rows))[name]

    def mistakes(self) -> dict[str, dict[str, list[dict]]]:
        """Per mode, the answerable questions refused and the unanswerable ones answered, with what
        was decided and why (confidence, top document, signals)."""
        out = {}
        for mode in self.config.modes:
            wrong_ref, wrong_ans = [], []
            for r in self.results:
                mr = r.modes[mode]
                if r.question.answerable == mr.refused:
                    (wrong_ref if mr.refused else wrong_ans).append({
                        "id": r.question.id, "question": r.question.question, "tags": r.question.tags,
                        "decision": mr.decision, "confidence": mr.top_score, "top_doc": mr.top_doc,
                        "signals": mr.signals})
            out[mode] = {"wrongly_refused": wrong_ref, "wrongly_answered": wrong_ans}
        return out

    def miss_k(self) -> int:
        """The cut-off of ``missed``: 5 (the headline hit_rate@5), else the largest K evaluated."""
        ks = sorted(set(self.config.ks))
        return 5 if 5 in ks else ks[-1]

    def missed(self) -> dict:
        """Per mode, the answerable questions with no relevant result in the top ``miss_k()``: the
        ones hit_rate@K scores 0 (so their count is answerable x (1 - hit_rate@K))."""
        k = self.miss_k()
        out = {}
        for mode in self.config.modes:
            out[mode] = []
            for r in self.answerable():
                mr = r.modes[mode]
                if mr.first_relevant_rank is None or mr.first_relevant_rank > k:
                    out[mode].append({"id": r.question.id, "question": r.question.question, "tags": r.question.tags,
                                      "first_relevant_rank": mr.first_relevant_rank, "top_doc": mr.top_doc})
        return {"k": k, "modes": out}

    def reliability(self) -> dict[str, dict]:
        """Per mode, how well the decision value (``top_score``: P(answerable) from decide.model, or
        the top hit's confidence) predicts that a question is answerable, on this run's questions:
        AUC, Brier score, expected calibration error and the reliability bins (count, mean
        predicted, share answerable). A question with no hit counts as 0. {} without questions."""
        from .answerability import quality

        if not self.results:
            return {}
        y = [int(r.question.answerable) for r in self.results]
        out = {}
        for mode in self.config.modes:
            p = [min(1.0, max(0.0, r.modes[mode].top_score or 0.0)) for r in self.results]
            out[mode] = {"decided_by": self.decided_by.get(mode, "confidence"), "questions": len(y), **quality(y, p)}
        return out

    def to_dict(self) -> dict:
        qs = self.question_set
        return {
            "kbtool_version": __version__,
            "created_at": self.created_at,
            "contract": self.contract,
            "store": self.store_info,
            "question_set": {"name": qs.name, "path": self.source, "questions": len(self.results),
                             "answerable": len(self.answerable()),
                             "unanswerable": len(self.results) - len(self.answerable())},
            "config": {"modes": list(self.config.modes), "ks": sorted(set(self.config.ks)),
                       "metrics": list(self.config.metrics), "level": self.config.level,
                       "depth": self.config.depth, "thresholds": self.config.thresholds,
                       "filters": self.config.filters},
            "metrics": self.metrics(),
            "diversity": self.diversity(),
            "fused_vs_best_single": self.deltas(),
            "by_tag": self.by_tag(),
            "refusal": {m: {**r, **refusal_rates(r)} for m, r in self.refusal().items()},
            "mistakes": self.mistakes(),
            "missed": self.missed(),
            "reliability": self.reliability(),
            "lint": [str(i) for i in qs.issues],
            "gates": [g.to_dict() for g in self.gates],
            "baseline": self.baseline,
            "calibration": self.calibration,
            "per_question": [
                {"id": r.question.id, "question": r.question.question, "tags": r.question.tags,
                 "answerable": r.question.answerable, "level": r.level,
                 "modes": {m: {"first_relevant_rank": mr.first_relevant_rank, "top_score": mr.top_score,
                               "top_doc": mr.top_doc, "refused": mr.refused, "decision": mr.decision,
                               "signals": mr.signals, "rule": mr.rule,
                               "distinct": mr.distinct,
                               "metrics": {k: round(v, 6) for k, v in mr.metrics.items()}}
                           for m, mr in r.modes.items()}}
                for r in self.results
            ],
        }


# ---- running ---------------------------------------------------------------------------------
def evaluate(store, qs: QuestionSet, config: EvalConfig | None = None, *, retriever=None, contract=None,
             contracts: dict | None = None, embedder=None, principal: str | None = None,
             allow: Sequence[str] | None = None, progress: Callable[[int, int], None] | None = None,
             source: str = "") -> EvalReport:
    """Run every mode over every question through the contract pipeline and score it.

    Modes are named fusion settings over ``contract`` (see ``kbtool.query.retriever``);
    ``contracts`` ({name: Contract}) adds one mode per named contract, so several contracts are
    compared side by side. A question is refused when the contract decides so (its thresholds, per
    tier), or, for a mode given in ``config.thresholds``, when the top confidence is below that.
    ``retriever`` (a ``Retriever``): evaluate as it searches, with its contract, embedder and
    filters, instead of ``contract``. ``progress(advance, total)``.
    """
    from ..contract import default_contract
    from ..query.pipeline import Searcher
    from ..query.retriever import contract_for_mode

    store.require_indexed()
    contracts = dict(contracts or {})
    filters: list[str] = []
    if retriever is not None:  # evaluate as the retriever searches: its contract, embedder and filters
        if contract is not None:
            raise UsageError("give contract or retriever, not both (the retriever carries its contract)")
        contract, embedder = retriever.contract, embedder or retriever.embedder
        filters = [f"{k}={v}" for k, v in (getattr(retriever.config, "filters", None) or {}).items()]
    base = contract or (next(iter(contracts.values())) if contracts else default_contract())
    # The caller's config is never changed: it may be reused for another run.
    config = replace(config or EvalConfig(), contract_names=list(contracts))
    config.modes = [*config.modes, *(name for name in contracts if name not in config.modes)]
    own = config.filters
    config.filters = filters + ([f"{k}={v}" for k, v in own.items()] if isinstance(own, dict) else list(own))
    named = {m: contracts[m] for m in config.modes if m in contracts}
    plain = [m for m in config.modes if m not in contracts]
    config.validate()
    questions = qs.questions
    texts = [q.question for q in questions]
    total = len(questions) * (1 + len(named))
    cb = (lambda n: progress(n, total)) if progress else None
    # One gathering per distinct contract: candidates are shared by every mode over it.
    groups = [(base, {m: contract_for_mode(base, m) for m in plain})] if plain else []
    groups += [(c, {m: c}) for m, c in named.items()]
    answers: dict[str, list] = {}
    decided_by = {m: "P(answerable)" if c.decide.model is not None else "confidence"
                  for _, variants in groups for m, c in variants.items()}
    for gbase, variants in groups:  # each contract's own filters and access
        searcher = Searcher.of(store, gbase, config.filters, principal, allow, embedder)
        answers.update(searcher.compare(texts, variants, depth=config.depth, progress=cb,
                                        tags=[q.tags for q in questions], top_k=config.depth, explain=False))
    matcher = EvidenceMatcher(store)
    names = config.metric_names()
    results = []
    for i, q in enumerate(questions):
        level = level_of(q, config.level)
        modes = {}
        for mode in config.modes:
            ans = answers[mode][i]
            hits = ans.hits
            ranking, unit_scores, qrels = units(hits, q, level, matcher)
            top = ans.confidence
            decision = _decision(ans, config.thresholds.get(mode))
            refused = decision == "refuse"
            first = next((n for n, u in enumerate(ranking, start=1) if qrels.get(u, 0) >= 1), None)
            modes[mode] = ModeResult(
                ranking, unit_scores, qrels, top, refused, first,
                {n: score(n, ranking, qrels) for n in names} if q.answerable else {},
                hits[0].doc_id if hits else None, decision, dict(getattr(ans, "signals", None) or {}),
                {f"distinct@{k}": distinct([h.doc_id for h in hits], k) for k in config.ks}, getattr(ans, "rule", None),
            )
        results.append(QuestionResult(q, level, modes))
    from ..access import access_tags

    restricted = access_tags(base, principal, allow) is not None
    return EvalReport(qs, config, results, _store_info(store, restricted), source=source, decided_by=decided_by)


def _decision(ans, threshold: float | None) -> str:
    """The answer's decision, or with a threshold of ``config.thresholds`` for its mode, ``decide()``'s
    over the contract's thresholds with that refuse threshold instead: refuse below it (or with no
    hit); above it the contract's own decision stands, its refuse read as answer."""
    if threshold is None:
        return ans.decision
    from ..contract import Thresholds
    from ..query.decide import decide

    # model_construct: a threshold outside [0, 1] (refuse all, or nothing) is the caller's to give.
    th = Thresholds.model_construct(answer=threshold, low_confidence=threshold)
    if decide(ans.confidence if ans.hits else None, th) == "refuse":
        return "refuse"
    return "answer" if ans.decision == "refuse" else ans.decision


def _store_info(store, restricted: bool = False) -> dict:
    """The store a run scored; its catalog generation (which counts every change, hidden documents'
    too) only for an unrestricted caller."""
    return {"path": str(store.path), "model": store.model_id, "chunking": store.manifest.get("chunking"),
            "generation": None if restricted else store.generation()}
