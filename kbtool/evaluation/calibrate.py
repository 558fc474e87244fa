"""Calibrate a contract on labelled questions: fusion and per-type weights by cross-validation,
refusal thresholds from answerable and unanswerable questions, with the evidence.

Each question's candidates are gathered once (the expensive part), with its chunk rows. Every
setting is then a contract (built once per setting), and each question is scored under it by the
pipeline's own ``answer`` — rule choice, fusion, dedup, confidence and decision included — so
whatever the pipeline does, calibrate measures: its score of a setting is what ``eval`` measures
on a contract with that setting.

Choosing:
- settings: fusion ``weighted`` (min-max or z-score) or ``rrf`` (k in RRF_KS), each with a vector
  of weights over the store's retrievers (``weight_grid``): with ``dense`` and ``bm25`` alone, a
  dense weight from 0 to 1 in steps of 0.1; with more (``dense:NAME`` models added to the store),
  every point of the simplex in steps of 0.2 (21 points for 3 retrievers, 56 for 4), coarser
  (0.25, then 0.5) where that would exceed ``MAX_GRID`` points. A question belongs to the group
  of the rule the pipeline fuses it with (``rule_applied``: the contract's rule order decides a
  mixed CJK + identifier question). A group (identifier, cjk) with at least ``min_count``
  answerable questions gets its own weights (a rule, appended when the contract has none), a
  smaller one keeps its rule as written, the others share the global weights;
- a rule on BM25 coverage (``when: {bm25_coverage_below: C}``, placed after the type rules: it
  fuses the questions of the shared groups whose best BM25 coverage is below C) at another grid
  point, C in ``COVERAGE_CUTS``: chosen on the same training folds after the fusion, kept only
  when its held-out gain over the same choice without it is significant (p < alpha);
- seeded k-fold cross-validation: each question is scored by the setting chosen on the other
  folds; the held-out mean is compared with the current contract's and the best single retriever's
  (of every retriever of the store, picked as eval picks it: ``compare.best_single``)
  with a paired sign-flip randomisation test; the new setting is adopted only when it is
  significantly better (p < alpha), else the current fusion is kept;
- thresholds, from each question's top confidence under the final fusion (``Answer.confidence``,
  what ``decide`` sees at query time): ``low_confidence`` (refuse below) maximises balanced
  accuracy of refuse-vs-answer, or meets ``max_false_answer`` / ``max_false_refusal``; ``answer``
  is the lowest threshold at which at most 5 % of the questions answered without the notice are
  unanswerable. A
  tier (identifier, cjk) with at least ``MIN_TIER`` questions of each kind gets its own
  thresholds; a question's tier is the one ``Contract.thresholds_for`` picks. Fewer than
  ``MIN_UNANSWERABLE`` unanswerable questions: no thresholds are proposed, and the result says how
  to add some.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable

import numpy as np

from .. import __version__
from ..errors import InputError, UsageError
from . import negatives as neg
from .compare import best_single as best_single_of, sign_flip_p
from ..contract.file import rule_group
from .metrics import parse_metric, score
from .provenance import question_set_record, store_fingerprint
from .questions import DEFAULT_DEPTH
from .thresholds import TYPED, choose_thresholds, evidence_of, heldout_rates, mistakes_of, pick, tradeoff_curves

if TYPE_CHECKING:
    from ..contract import CalibrationRecord
from .units import EvidenceMatcher, level_of, units

RRF_KS = (10, 30, 60, 100)
WEIGHTS = tuple(round(w / 10, 1) for w in range(11))  # the dense weights of the grid of dense + bm25
TWO = ("dense", "bm25")
MAX_GRID = 80  # weight vectors per setting, at most (a coarser step beyond)
GROUPS = (*TYPED, "other")
COVERAGE_CUTS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6)  # cut-offs of a bm25_coverage_below rule calibrate tries


@dataclass(frozen=True)
class Config:
    method: str
    normalization: str = "minmax"
    rrf_k: int = 60

    @property
    def name(self) -> str:
        return f"rrf:{self.rrf_k}" if self.method == "rrf" else f"weighted/{self.normalization}"


CONFIGS = (Config("weighted", "minmax"), Config("weighted", "zscore"), *(Config("rrf", rrf_k=k) for k in RRF_KS))


@dataclass
class CalibrationResult:
    objective: str
    folds: int
    seed: int
    questions: int
    answerable: int
    unanswerable: int
    groups: dict[str, int]
    current: dict
    proposed: dict
    adopted: bool
    heldout: dict
    weight_curves: dict
    thresholds: dict | None
    threshold_table: list[dict]  # every question under one threshold (the trade-off without tiers)
    distributions: dict
    notes: list[str] = field(default_factory=list)
    verification: dict | None = None
    model: dict | None = None  # the answerability model written into decide.model (None: none fitted)
    answerability: dict = field(default_factory=dict)  # its out-of-fold quality, ROC, reliability, rates
    appendix: "CalibrationRecord | None" = None  # what --write records in the contract's calibration
    timings: dict = field(default_factory=dict)
    threshold_curves: dict = field(default_factory=dict)  # per tier, its questions' trade-off (``tradeoff_curves``)

    def to_dict(self) -> dict:
        return {k: (v.to_dict() if k == "appendix" and v is not None else v) for k, v in self.__dict__.items()}

    def calibration(self):
        """What ``--write`` writes into the contract (``contract.file.Calibration``)."""
        return as_calibration(self.adopted, self.proposed, self.thresholds, self.model, self.appendix)


# ---- weight vectors and contracts for settings ----------------------------------------------
def grid_steps(n: int) -> int:
    """Steps of the weight grid over ``n`` retrievers: 10 (0.1) for two, else 5 (0.2), 4 (0.25) or 2
    (0.5), the finest with at most ``MAX_GRID`` points."""
    if n <= 2:
        return 10
    for steps in (5, 4):
        if math.comb(steps + n - 1, n - 1) <= MAX_GRID:
            return steps
    return 2


def weight_grid(retrievers) -> tuple[dict[str, float], ...]:
    """Every weight vector (retriever -> weight, summing to 1) on the simplex grid over
    ``retrievers`` (``store_retrievers`` order: dense, bm25, dense:NAME...). Ordered so that the
    first of tied points is preferred: the least weight on the last added model, ..., then the
    least dense weight (with dense + bm25: the dense weights 0, 0.1, ..., 1 of ``WEIGHTS``)."""
    names = tuple(retrievers)
    n, steps = len(names), grid_steps(len(names))
    if n == 1:
        return ({names[0]: 1.0},)

    def compositions(total: int, parts: int):
        if parts == 1:
            yield (total,)
            return
        for first in range(total + 1):
            for rest in compositions(total - first, parts - 1):
                yield (first, *rest)

    points = sorted(compositions(steps, n), key=lambda c: (*reversed(c[2:]), c[0]))
    return tuple({r: round(c / steps, 4) for r, c in zip(names, point)} for point in points)


def _weights(w):
    """A ``Weights`` of a grid point (retriever -> weight; a float: the dense weight beside bm25)."""
    from ..contract import Weights

    if not isinstance(w, dict):
        w = {"dense": w, "bm25": round(1 - w, 4)}  # as calibrated_text writes them
    return Weights.model_validate({"dense": 0.0, "bm25": 0.0, **w})


def weights_of(contract, types: set[str], retrievers):
    """The ``Weights`` a question of these types is fused with on a store of ``retrievers``: its
    rule's (``Contract.rule_for``, as the pipeline picks it), else fusion.weights."""
    rule = contract.rule_for(types, retrievers)
    return (rule or contract.retrieve.fusion).weights


def normalised(weights, retrievers) -> dict[str, float]:
    """retriever -> weight (rounded, summing to 1) over ``retrievers`` as the pipeline fuses them,
    0 for one the weights leave out."""
    over = weights.over(retrievers)
    return {r: round(over.get(r, 0.0), 4) for r in retrievers}


def with_setting(contract, cfg: Config, w: dict | float | None = None):
    """``contract`` with ``cfg``'s fusion. With ``w`` (a grid point, retriever -> weight; a float:
    the dense weight beside bm25): the default weights and every rule's at ``w``, so each question
    is fused at ``w`` whichever rule fires; without: the weights as written. Built without
    validation (every value is valid), once per setting."""
    fusion = {"method": cfg.method, "normalization": cfg.normalization, "rrf_k": cfg.rrf_k}
    retrieve = {}
    if w is not None:
        fusion["weights"] = _weights(w)
        retrieve["rules"] = [r.model_copy(update={"weights": _weights(w)}) for r in contract.retrieve.rules]
    retrieve["fusion"] = contract.retrieve.fusion.model_copy(update=fusion)
    return contract.model_copy(update={"retrieve": contract.retrieve.model_copy(update=retrieve)})


def _with_rules(contract, groups) -> "object":
    """``contract`` with a rule appended for each of ``groups`` (as calibrated_text appends them)."""
    from ..contract import Rule

    rules = [*contract.retrieve.rules, *(Rule(when=g, weights=_weights(0.5)) for g in groups)]
    return contract.model_copy(update={"retrieve": contract.retrieve.model_copy(update={"rules": rules})})


def as_calibration(adopted: bool, proposed: dict, thresholds: dict | None = None, model: dict | None = None,
                   record=None):
    """The typed ``Calibration`` the contract's writers take, from calibrate's proposal (``proposed``
    when ``adopted``), thresholds ({"default", "tiers"}), model and appendix."""
    from ..contract import AnswerabilityModel, Calibration, FusionProposal, Thresholds

    as_thresholds = lambda t: Thresholds(answer=t["answer"], low_confidence=t["low_confidence"])  # noqa: E731
    fusion = FusionProposal(proposed["method"], proposed["normalization"], proposed["rrf_k"], proposed["weights"],
                            proposed.get("group_weights") or {}, proposed.get("coverage_rules")) if adopted else None
    return Calibration(
        fusion=fusion, thresholds=as_thresholds(thresholds["default"]) if thresholds else None,
        tiers={n: as_thresholds(t) for n, t in thresholds["tiers"].items()} if thresholds else {},
        model=None if model is None else AnswerabilityModel.model_validate(model), record=record,
        needs_evidence=thresholds.get("needs_evidence") if thresholds else None)


def written_contract(contract, adopted: bool, proposed: dict, thresholds: dict | None = None,
                     model: dict | None = None):
    """The contract ``--write`` writes for this proposal, built directly (``calibrated_contract``:
    what ``calibrated_text`` writes, without a YAML round trip)."""
    from ..contract import calibrated_contract

    return calibrated_contract(contract, as_calibration(adopted, proposed, thresholds, model))


# ---- one question under many contracts ------------------------------------------------------
class _Question:
    """One question's candidates and chunk rows, answered under any contract by the pipeline."""

    generated: str | None = None  # a generated negative's kind (``negatives``); None: a real question

    def __init__(self, q, cands, level: str, rows: dict, *, searcher, matcher, depth: int):
        self.q, self.c, self.level, self.rows = q, cands, level, rows
        self.types = set(cands.processed.types)
        self.tags = set(q.tags)
        self.group = "other"
        self._searcher, self._matcher, self._depth = searcher, matcher, depth
        self._near = None  # the candidates' near-duplicate relation, computed on first use
        self._ask = 0  # hits asked for first (see ``metric``)

    def answer(self, contract, top_k: int | None = None):
        from ..query.postprocess import NearDuplicates

        similarity = contract.postprocess.dedup.similarity
        if contract.postprocess.dedup.enabled and (self._near is None or self._near.similarity != similarity):
            self._near = NearDuplicates([row["text"] for row in self.rows.values()], similarity)
        return self._searcher.answer(self.c, contract, tags=self.q.tags, top_k=top_k or self._depth,
                                     explain=False, rows=self.rows, with_trace=False, near=self._near)

    def metric(self, contract, objective: str, k: int) -> float:
        """The objective (a metric at cut-off ``k``) of the contract's answer, as eval scores it.

        Asked for ``k`` hits first: a metric at k reads the first k units only, and the pipeline's
        first hits do not depend on how many are asked for (dedup keeps hits in order), so while
        they give k units the score is eval's at its depth; else the answer at full depth decides.
        A question whose hits collapse into fewer units (chunks of one document) asks for twice as
        many the next time. postprocess.diversity's MMR picks from the contract's own window
        (``diversify(pool=)``), so it keeps this true."""
        ask = max(k, self._ask)
        ranking, _, qrels = units(self.answer(contract, ask).hits, self.q, self.level, self._matcher)
        if len(ranking) < k and ask < self._depth:
            self._ask = min(self._depth, 2 * ask)
            ranking, _, qrels = units(self.answer(contract).hits, self.q, self.level, self._matcher)
        return score(objective, ranking, qrels)


def gathered(store, qs, contract, *, k: int, level: str = "auto", embedder=None, principal=None, allow=None,
             progress=None, sc=None) -> list[_Question]:
    """Every question's candidates (gathered once, as eval gathers them) and chunk rows; ``sc``: under
    this scope (a generated negative's) instead of the caller's."""
    from ..query.pipeline import Searcher
    from ..query.routing import store_retrievers

    questions = qs.questions
    depth = max(k, DEFAULT_DEPTH)  # chunks ranked per question, as eval's depth: documents collapse from them
    searcher = Searcher(store, contract, sc, embedder) if sc is not None else \
        Searcher.of(store, contract, [], principal, allow, embedder)
    cb = (lambda n: progress("retrieving", n, len(questions))) if progress else None
    cands = searcher.gather([q.question for q in questions], depth=depth, retrievers=store_retrievers(store),
                            progress=cb)
    matcher = EvidenceMatcher(store)
    return [_Question(q, c, level_of(q, level), store.chunks_by_id(c.ids), searcher=searcher, matcher=matcher,
                      depth=depth) for q, c in zip(questions, cands)]


class Search:
    """Every setting scored on every answerable question, and the choice among them.

    ``S[config, point, question]``: the objective with each question fused at that point of
    ``grid`` (weight vectors over ``retrievers``, the store's); ``F[config, question]``: for
    questions of a group that keeps its rule, at the rule's weights."""

    def __init__(self, contract, items: list[_Question], objective: str, min_count: int, progress=None,
                 retrievers: tuple[str, ...] | None = None):
        from ..query.routing import rule_applied, store_retrievers

        if retrievers is None:
            retrievers = store_retrievers(items[0]._searcher.store) if items else TWO
        self.retrievers = tuple(retrievers)
        self.grid = weight_grid(self.retrievers)
        self.items, self.k = items, parse_metric(objective)[1]
        existing = [g for g in TYPED if rule_applied(contract, [[g]], self.retrievers) == [g]]
        extra = [g for g in TYPED if g not in existing]
        while True:  # a group without a rule gets one only with enough questions to tune it
            probe = _with_rules(contract, extra)
            groups = rule_applied(probe, [it.types for it in items], self.retrievers)
            counts = {g: sum(1 for it, gg in zip(items, groups) if gg == g) for g in GROUPS}
            short = [g for g in extra if counts[g] < min_count]
            if not short:
                break
            extra = [g for g in extra if g not in short]
        from ..query.routing import bm25_coverage

        cov = [bm25_coverage(it.c) for it in items]
        # A question a rule on its type *and* its BM25 coverage fuses (built in: a Chinese question BM25
        # barely covers) is a group of its own, '<type>@<cut-off>' (``rule_group``): tuned with enough
        # questions and written into that rule, else scored at the rule as written.
        held = {}
        for i, (it, c) in enumerate(zip(items, cov)):
            rule = contract.rule_for(set(it.types), self.retrievers, c)
            if rule_group(rule) not in (None, *GROUPS):
                groups[i] = rule_group(rule)
                held[groups[i]] = normalised(rule.weights, self.retrievers)
        counts = {g: sum(1 for gg in groups if gg == g) for g in (*GROUPS, *held)}
        for it, g in zip(items, groups):
            it.group = g
        self.counts = counts
        self.groups = np.array(groups)
        self.own = tuple(g for g in (*TYPED, *held) if counts[g] >= min_count and g in (*existing, *extra, *held))
        self.fixed = {g: normalised(weights_of(contract, {g}, self.retrievers), self.retrievers) for g in existing
                      if g not in self.own}
        self.fixed.update({g: w for g, w in held.items() if g not in self.own})
        self.kept_rule = tuple(g for g in held if g not in self.own)  # as written: not in the proposal
        self.shared_groups = [g for g in GROUPS if g not in self.own and g not in self.fixed]
        self.coverage = np.array([np.nan if c is None else c for c in cov], dtype=float)  # NaN: below no cut-off
        self.S = np.zeros((len(CONFIGS), len(self.grid), len(items)))
        self.F = np.full((len(CONFIGS), len(items)), np.nan)
        total, done = len(CONFIGS) * len(self.grid), 0
        for ci, cfg in enumerate(CONFIGS):
            for wi, w in enumerate(self.grid):
                setting = with_setting(contract, cfg, w)
                self.S[ci, wi] = [it.metric(setting, objective, self.k) for it in items]
                done += 1
                if progress:
                    progress("scoring", 1, total)
            as_written = with_setting(contract, cfg)
            for qi, it in enumerate(items):
                if it.group in self.fixed:
                    self.F[ci, qi] = it.metric(as_written, objective, self.k)

    def choose(self, train: np.ndarray) -> tuple[int, dict[str, int]]:
        """Best config and per-group grid point (an index of ``grid``) on the training questions
        (a boolean mask)."""
        groups, best = self.groups, None
        for ci in range(len(CONFIGS)):
            wmap: dict[str, int] = {}
            shared = train & np.isin(groups, self.shared_groups)
            sums = self.S[ci][:, shared].sum(axis=1) if shared.any() else np.zeros(len(self.grid))
            wi = int(np.argmax(sums))  # ties: the first point of the grid (see weight_grid), deterministic
            total_score = sums[wi]
            for g in self.shared_groups:
                wmap[g] = wi
            for g in self.own:
                sums = self.S[ci][:, train & (groups == g)].sum(axis=1)
                wmap[g] = int(np.argmax(sums))
                total_score += sums[wmap[g]]
            fm = train & np.isin(groups, list(self.fixed))
            total_score += float(self.F[ci, fm].sum()) if fm.any() else 0.0
            if best is None or total_score > best[0] + 1e-12:
                best = (total_score, ci, wmap)
        return best[1], best[2]

    def per_question(self, ci: int, wmap: dict[str, int], rule: tuple[float, int] | None = None) -> np.ndarray:
        """Each question's score under config ``ci`` with these group weights, and with a coverage
        rule ``(cut-off, grid point)`` fusing the shared groups' questions below the cut-off."""
        out = np.array([self.F[ci, qi] if g in self.fixed else self.S[ci, wmap[g], qi]
                        for qi, g in enumerate(self.groups)])
        if rule is not None:
            low = self._low(rule[0])
            out[low] = self.S[ci, rule[1], low]
        return out

    def _low(self, cut: float) -> np.ndarray:
        """The questions a coverage rule placed after the type rules fuses: of a shared group (fused
        by fusion.weights), best BM25 coverage below ``cut``."""
        with np.errstate(invalid="ignore"):
            return np.isin(self.groups, self.shared_groups) & (self.coverage < cut)

    def choose_rule(self, ci: int, wmap: dict[str, int], train: np.ndarray) -> tuple[float, int] | None:
        """The coverage rule (cut-off, grid point) that raises the objective most on the training
        questions under config ``ci`` and these group weights; None when none raises it."""
        base, best = self.per_question(ci, wmap), None
        gain = 1e-9
        for cut in COVERAGE_CUTS:
            low = train & self._low(cut)
            if not low.any():
                continue
            sums = self.S[ci][:, low].sum(axis=1) - base[low].sum()
            wi = int(np.argmax(sums))  # ties: the first point of the grid
            if sums[wi] > gain:
                best, gain = (cut, wi), float(sums[wi])
        return best

    def proposal(self, ci: int, wmap: dict[str, int], rule: tuple[float, int] | None = None) -> dict:
        """The proposal: fusion, ``weights`` (retriever -> weight, what an 'other' question gets),
        ``group_weights`` (type -> {retriever -> weight}), over the store's retrievers, and
        ``coverage_rules`` (the rule on BM25 coverage, [{bm25_coverage_below, weights}], or [])."""
        cfg = CONFIGS[ci]
        groups = {g: dict(self.grid[wmap[g]]) for g in self.own}
        groups.update({g: dict(w) for g, w in self.fixed.items() if g not in self.kept_rule})  # too few questions: the contract's rule
        return {"method": cfg.method, "normalization": cfg.normalization, "rrf_k": cfg.rrf_k,
                "weights": dict(self.grid[wmap["other"]]), "group_weights": groups,
                "coverage_rules": [] if rule is None else [{"bm25_coverage_below": rule[0],
                                                            "weights": dict(self.grid[rule[1]])}]}

    def curves(self, ci: int) -> dict:
        """Per group, the mean objective over the grid under config ``ci``. With dense + bm25:
        ``weights`` (dense) and ``metric`` along them; with more retrievers: ``grid`` (the points)
        and ``metric`` along them, and per retriever a profile (``profiles``: at each of its
        weights, the best mean over the points giving it that weight)."""
        out = {}
        for g in GROUPS:
            m = self.groups == g
            if not m.any():
                continue
            metric = [round(float(self.S[ci, wi, m].mean()), 4) for wi in range(len(self.grid))]
            if self.retrievers == TWO:
                out[g] = {"weights": [p["dense"] for p in self.grid], "count": int(m.sum()),
                          "fusion": CONFIGS[ci].name, "metric": metric}
                continue
            profiles = {}
            for r in self.retrievers:
                ws = sorted({p[r] for p in self.grid})
                profiles[r] = {"weights": ws, "metric": [max(v for p, v in zip(self.grid, metric) if p[r] == w)
                                                         for w in ws]}
            out[g] = {"grid": [dict(p) for p in self.grid], "count": int(m.sum()), "fusion": CONFIGS[ci].name,
                      "metric": metric, "profiles": profiles}
        return out


def calibrate(store, qs, contract, *, objective: str = "ndcg@10", folds: int = 5, seed: int = 0,
              alpha: float = 0.05, min_count: int = 10, max_false_answer: float | None = None,
              max_false_refusal: float | None = None, level: str = "auto", embedder=None,
              principal: str | None = None, allow=None, negatives: str = "auto",
              progress: Callable[[str, int, int], None] | None = None, source: str = "") -> CalibrationResult:
    """Tune ``contract`` on question set ``qs``; returns the proposal and its evidence. ``negatives``
    (``negatives.MODES``): which generated unanswerable questions join the model fit and the
    threshold choice (auto: both kinds when fewer than 20 are hand-written); none is in a rate."""
    from ..query.retriever import contract_for_mode

    try:
        base, k = parse_metric(objective)
    except ValueError as exc:
        raise UsageError(f"objective {objective!r}: {exc}") from None
    if folds < 2:
        raise UsageError(f"folds {folds}: must be at least 2")
    if max_false_answer is not None and max_false_refusal is not None:
        raise UsageError("max_false_answer and max_false_refusal: give one of them, not both")
    questions = qs.questions
    answerable = [q for q in questions if q.answerable]
    try:
        kinds = neg.kinds_for(negatives, len(questions) - len(answerable))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if len(answerable) < folds:
        raise InputError(f"{len(answerable)} answerable question(s): calibration needs at least {folds} "
                         "(one per fold); add labelled questions")
    t0 = time.perf_counter()
    items = gathered(store, qs, contract, k=k, level=level, embedder=embedder, principal=principal, allow=allow,
                     progress=progress)
    ans_items = [it for it in items if it.q.answerable]
    gen, skipped = [], {}
    if kinds:
        from ..query.scope import scope

        gen, skipped = neg.generated(store, qs, scope(store, contract, [], principal, allow), kinds, seed=seed,
                                     gather=lambda sub, sc: gathered(store, sub, contract, k=k, level=level,
                                                                     embedder=embedder, sc=sc))
    t1 = time.perf_counter()

    search = Search(contract, ans_items, objective, min_count, progress)
    counts = search.counts
    # The current contract and every single retriever of the store, exactly as eval's modes run them.
    current_scores = np.array([it.metric(contract, objective, k) for it in ans_items])
    singles = {m: np.array([it.metric(contract_for_mode(contract, m), objective, k) for it in ans_items])
               for m in search.retrievers}
    best_single = best_single_of({m: float(s.mean()) for m, s in singles.items()})

    rng = np.random.default_rng(seed)
    fold_of = rng.permutation(len(ans_items)) % folds
    heldout, plain = np.zeros(len(ans_items)), np.zeros(len(ans_items))  # with / without a coverage rule
    for f in range(folds):
        test = fold_of == f
        ci, wmap = search.choose(~test)
        plain[test] = search.per_question(ci, wmap)[test]
        heldout[test] = search.per_question(ci, wmap, search.choose_rule(ci, wmap, ~test))[test]
    everyone = np.ones(len(ans_items), dtype=bool)
    ci, wmap = search.choose(everyone)
    chosen_cfg = CONFIGS[ci]
    rule = search.choose_rule(ci, wmap, everyone)
    rule_p = _paired_p(heldout, plain, seed=seed)
    rule_gain, with_rule = float(heldout.mean() - plain.mean()), float(heldout.mean())
    notes = []
    if rule is not None and not (rule_gain > 0 and rule_p < alpha):
        notes.append(f"no bm25_coverage_below rule: held-out {objective} {heldout.mean():.4f} with one vs "
                     f"{plain.mean():.4f} without (p = {rule_p:.3f}, needs p < {alpha} and a gain)")
        rule, heldout = None, plain
    elif rule is None:
        heldout = plain
    p_value = _paired_p(heldout, current_scores, seed=seed)
    gain = float(heldout.mean() - current_scores.mean())
    adopted = gain > 0 and p_value < alpha
    if not adopted:
        notes.append(f"kept the current fusion: held-out {objective} {heldout.mean():.4f} vs current "
                     f"{current_scores.mean():.4f} (p = {p_value:.3f}, needs p < {alpha} and a gain)")
    for g in TYPED:
        if 0 < counts[g] < min_count:
            notes.append(f"{g}: {counts[g]} answerable question(s), fewer than {min_count}: no weight of its own "
                         + ("is tuned (the contract's rule is kept)" if g in search.fixed else "(it shares the global one)"))

    current = _current_fusion(contract, search.retrievers)
    proposed = search.proposal(ci, wmap, rule) if adopted else current
    # The answerability model, fitted on the signals under the fusion that will be written; the
    # thresholds from each question's out-of-fold P(answerable) (without a model: its confidence).
    final = written_contract(contract, adopted, proposed) if adopted else contract
    if max_false_answer is None and max_false_refusal is None:  # the refuse tier's job: few false refusals
        max_false_refusal = contract.decide.refuse.max_false_refusal
    model, conf, answerability = _answerability(final, items, folds=folds, seed=seed, source=source, qs=qs,
                                                max_fa=max_false_answer, max_fr=max_false_refusal, gen=gen)
    notes += answerability.pop("notes")
    if model is not None:
        final = final.model_copy(update={"decide": final.decide.model_copy(update={"model": model})})
    evidence = evidence_of(final, [*items, *gen], answerability["signals"])
    thresholds, table, tnotes = choose_thresholds(final, [*items, *gen], conf, max_false_answer, max_false_refusal,
                                                  evidence)
    notes += tnotes
    if gen and thresholds:  # chosen with the generated negatives; every rate counted on the real questions
        thresholds, table = neg.real_rates(final, items, gen, conf, thresholds, evidence)
    answerability["generated"] = neg.report(final, gen, conf, thresholds, evidence, mode=negatives, skipped=skipped)
    if gen:
        notes.append(f"{len(gen)} generated unanswerable question(s) ("
                     + ", ".join(f"{k} {v['questions']}" for k, v in answerability["generated"]["kinds"].items())
                     + ") joined the model fit and the threshold choice; every rate reported is on the "
                       f"{len(items)} real questions (answerability.generated has theirs)")
    held = answerability.pop("refused", None)
    if model is not None and thresholds and held is not None:
        y_held, refused_held = held
        refused_held = refused_held & np.array([evidence[id(it)] is not None for it in items])
        answerability["heldout_thresholds"] = heldout_rates(y_held, refused_held)
    curves_by_tier = tradeoff_curves(final, items, conf, thresholds, evidence) if thresholds else {}
    if thresholds:
        answerability["mistakes"] = mistakes_of(final, items, conf, thresholds, answerability.pop("signals"), evidence)
    else:
        answerability.pop("signals")
    final_cfg = Config(proposed["method"], proposed["normalization"], proposed["rrf_k"])
    curve_cfg = final_cfg if final_cfg in CONFIGS else chosen_cfg
    curves = search.curves(CONFIGS.index(curve_cfg))
    dist = {"answerable": sorted(round(conf[id(it)] or 0.0, 4) for it in items if it.q.answerable),
            "unanswerable": sorted(round(conf[id(it)] or 0.0, 4) for it in items if not it.q.answerable)}
    result = CalibrationResult(
        objective=objective, folds=folds, seed=seed, questions=len(items), answerable=len(ans_items),
        unanswerable=len(items) - len(ans_items), groups=counts,
        current={**current, objective: round(float(current_scores.mean()), 4)},
        proposed=proposed, adopted=adopted,
        heldout={"chosen": round(float(heldout.mean()), 4), "current": round(float(current_scores.mean()), 4),
                 "best_single": round(float(singles[best_single].mean()), 4), "best_single_name": best_single,
                 **{m: round(float(s.mean()), 4) for m, s in singles.items()},  # each retriever alone
                 "gain": round(gain, 4), "p_value": round(p_value, 4), "alpha": alpha,
                 "chosen_in_sample": round(float(search.per_question(ci, wmap, rule).mean()), 4),
                 # the coverage rule's own test: the same choice with and without it, held out
                 "coverage_rule": {"with": round(with_rule, 4), "without": round(float(plain.mean()), 4),
                                   "gain": round(rule_gain, 4), "p_value": round(rule_p, 4)}},
        weight_curves=curves, thresholds=thresholds, threshold_table=table, threshold_curves=curves_by_tier,
        distributions=dist, notes=notes,
        model=None if model is None else model.model_dump(mode="json"), answerability=answerability,
    )
    t2 = time.perf_counter()
    result.appendix = _appendix(result, store, qs, source, store_fingerprint(store, contract, principal, allow))
    # The full pipeline with the calibrated contract, retrieving again, on the whole set: the
    # numbers `eval --fail-under-recorded` holds CI to.
    from ..contract import Recorded
    from .evaluate import EvalConfig, evaluate

    new = written_contract(contract, adopted, proposed, thresholds, result.model)
    report = evaluate(store, qs, EvalConfig(modes=["contract"], ks=sorted({k, 5, 10}),
                                            metrics=sorted({base, "ndcg", "mrr", "hit_rate"})),
                      contract=new, embedder=embedder, principal=principal, allow=allow)
    recorded = {n: v for n, v in report.metrics()["contract"].items() if v is not None}
    refusal = report.refusal()["contract"]
    result.verification = {"metrics": recorded, "refusal": refusal}
    result.timings = {"retrieval_s": round(t1 - t0, 2), "search_s": round(t2 - t1, 2),
                      "verification_s": round(time.perf_counter() - t2, 2)}
    result.appendix.recorded = Recorded(metrics=recorded, refusal={k: refusal[k] for k in (
        "unanswerable", "correctly_refused", "answerable", "wrongly_refused")})
    return result


def _current_fusion(contract, retrievers=TWO) -> dict:
    """The contract's fusion as a proposal: what an 'other' question gets, and each type's rule,
    normalised over the store's ``retrievers``."""
    from ..query.routing import rule_applied

    f = contract.retrieve.fusion
    return {"method": f.method, "normalization": f.normalization, "rrf_k": f.rrf_k,
            "weights": normalised(weights_of(contract, {"other"}, retrievers), retrievers),
            "group_weights": {g: normalised(weights_of(contract, {g}, retrievers), retrievers) for g in TYPED
                              if rule_applied(contract, [[g]], retrievers) == [g]},
            "coverage_rules": [{"bm25_coverage_below": r.when.bm25_coverage_below,
                                "weights": normalised(r.weights, retrievers)}
                               for r in contract.retrieve.rules if r.signals and r.type is None]}


def _paired_p(a: np.ndarray, b: np.ndarray, *, seed: int, permutations: int = 10000) -> float:
    """Two-sided paired sign-flip randomisation test of mean(a - b): the test of `eval --baseline`."""
    d = a - b
    d = np.where(np.abs(d) < 1e-12, 0.0, d)
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=(permutations, len(d)))
    return sign_flip_p(d, signs)


def _answerability(contract, items, *, folds: int, seed: int, source: str, qs, max_fa=None, max_fr=None, gen=()):
    """(model or None, each question's P(answerable) out of fold or its confidence, report).

    With at least ``MIN_EACH`` answerable and unanswerable questions (``gen``, generated
    negatives, count among the unanswerable) a model is fitted on the signals the pipeline
    computes under ``contract``; else the contract's own model (or, without one, the best hit's
    confidence) decides, and a note says how to get a model. Fitted on few, it is shrunk toward
    the built-in model (``negatives.shrink_weight``). Everything reported is on ``items`` alone."""
    from ..contract import FEATURES, AnswerabilityModel, default_contract
    from . import answerability as am

    plain = contract.model_copy(update={"decide": contract.decide.model_copy(update={"model": None})})
    every = [*items, *gen]
    answers = [it.answer(plain) for it in every]
    y = np.array([1 if it.q.answerable else 0 for it in every])
    X = np.array([[a.signals.get(f, 0.0) for f in FEATURES] for a in answers])
    real = np.arange(len(every)) < len(items)
    yr = y[real]
    report: dict = {"features": list(FEATURES), "notes": [], "signals": {id(it): a.signals for it, a in zip(every, answers)},
                    "signal_auc": {f: _round(am.auc(yr, X[real, i])) for i, f in enumerate(FEATURES)},
                    "confidence": am.quality(yr, [a.confidence or 0.0 for a in answers[:len(items)]])}
    n_ans, n_un = int(y.sum()), int((y == 0).sum())
    if min(n_ans, n_un) < am.MIN_EACH:
        report["fitted"] = False
        keep = contract.decide.model is not None
        report["decided_by"] = "P(answerable)" if keep else "confidence"  # what the thresholds compare
        report["notes"].append(
            f"{n_un} unanswerable" + (f" ({len(gen)} generated)" if len(gen) else "")
            + f" and {n_ans} answerable question(s): an answerability model needs at least "
            f"{am.MIN_EACH} of each, so none is fitted"
            + (" (the contract's model is kept)" if keep else " (thresholds apply to the best hit's confidence)")
            + ". Good unanswerable questions name what the knowledge base does not cover (another product, a "
              "service or a feature it never mentions) and near misses (a detail a covered section does not give).")
        # without a model the answers above are the contract's own: no second pass
        conf = {id(it): (it.answer(contract) if keep else a).confidence for it, a in zip(every, answers)}
        return None, conf, report
    cols = [FEATURES.index(f) for f in am.MODEL_FEATURES]
    chosen = lambda a, u: pick(a.tolist(), u.tolist(), max_fa, max_fr)[0]  # noqa: E731 (as the written threshold)
    w, prior = neg.shrink_weight(n_un, len(y)), default_contract().decide.model
    shift = neg.mix_shift(n_ans, n_un, int((yr == 0).sum())) if len(gen) else 0.0  # P at the real mix
    blend = (lambda z, rows: z + shift) if shift else None  # noqa: E731
    if w is not None and prior is not None:  # few questions: the built-in model's logit weighs (1 - w)
        prior_z = np.array([neg.logit(prior, a.signals) for a in answers])
        blend = lambda z, rows: w * (z + shift) + (1 - w) * prior_z[rows]  # noqa: E731
    fitted, oof, refused = am.fit(list(am.MODEL_FEATURES), X[:, cols], y, folds=folds, seed=seed, pick=chosen,
                                  blend=blend)
    report["refused"] = (yr, refused[real])
    report["fitted"] = True
    report["decided_by"] = "P(answerable)"
    report["oof"] = am.quality(yr, oof[real])
    report["roc"] = [[round(a, 4), round(b, 4)] for a, b in am.roc_points(yr, oof[real])]
    fitted_on = {"question_set": qs.name, "source": source, "questions": len(items), "answerable": n_ans,
                 "unanswerable": int((yr == 0).sum()), "folds": folds, "seed": seed,
                 "date": datetime.now(timezone.utc).date().isoformat(),
                 "oof": {k: report["oof"][k] for k in ("auc", "brier", "calibration_error")}}
    if len(gen):
        fitted_on["generated"] = dict(sorted(Counter(it.generated for it in gen).items()))
    if shift:
        fitted_on["mix_shift"] = round(shift, 4)
        report["notes"].append(f"P(answerable) is fitted on {n_ans} answerable and {n_un} unanswerable questions, "
                               f"generated ones included, and shifted ({shift:+.2f} in logit) to mean what it says at "
                               + ("this set's mix" if (yr == 0).sum() >= neg.MIN_REAL
                                  else f"{neg.ANSWERABLE_SHARE:.0%} answerable questions (the built-in model's mix)"))
    if w is not None and prior is not None:
        fitted_on["shrinkage"] = report["shrinkage"] = {"weight": round(w, 4), "n0": neg.SHRINK_N0,
                                                        "toward": "the built-in model"}
    raw = fitted.to_contract(fitted_on)
    raw["calibration"]["offset"] = round(raw["calibration"]["offset"] + shift, 6)
    if w is not None and prior is not None:
        raw = neg.blended(raw, prior, w)
        report["notes"].append(
            f"the model is fitted on {n_un} unanswerable and {len(y)} questions in all (fewer than "
            f"{neg.SHRINK_UNANSWERABLE} / {neg.SHRINK_TOTAL}): shrunk toward the built-in model, its logit weighing "
            f"{w:.2f} = {n_un}/({n_un}+{neg.SHRINK_N0}) against the built-in's {1 - w:.2f} (out-of-fold numbers included)")
    model = AnswerabilityModel.model_validate(raw)
    report["coefficients"] = dict(model.coefficients)
    return model, {id(it): round(float(p), 4) for it, p in zip(every, oof)}, report


def _round(x):
    return None if x is None else round(float(x), 4)


def _appendix(result: CalibrationResult, store, qs, source: str, fingerprint: dict):
    from ..contract import CalibrationRecord

    return CalibrationRecord(**{
        "date": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        "kbtool_version": __version__,
        "question_set": question_set_record(qs, source),
        "store": fingerprint,  # counts as the calibrating caller sees the store
        "objective": result.objective, "folds": result.folds, "seed": result.seed,
        "heldout": result.heldout, "adopted": result.adopted,
        "thresholds": result.thresholds,
        "answerability": {"fitted": result.answerability.get("fitted"),
                          **({"oof": {k: result.answerability["oof"][k] for k in ("auc", "brier", "calibration_error")},
                              "heldout_thresholds": result.answerability.get("heldout_thresholds")}
                             if result.answerability.get("fitted") else {})},
    })
