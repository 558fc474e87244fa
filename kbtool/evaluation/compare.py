"""Comparing runs: quality gates (``--fail-under``, ``--fail-under-recorded``), a previous run as
baseline, and the paired sign-flip randomisation test both ``eval --baseline`` and ``calibrate``
use. Functions take an ``EvalReport`` (or its numbers) and never run retrieval.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional, Sequence

from ..errors import InputError, UsageError
from ..query.retriever import is_single
from .metrics import METRICS, RATE_NEEDS, RATES, parse_metric, refusal_rates


def is_single_mode(mode: str) -> bool:
    try:
        return is_single(mode)
    except UsageError:  # a named contract
        return False


def best_single(means: dict[str, float]) -> str:
    """The best single retriever of ``means`` (retriever -> mean metric): the highest mean, a tie
    to the name that sorts last. The one definition of eval's ``fused_vs_best_single`` and
    calibrate's baseline."""
    return max(means, key=lambda s: (means[s], s))



# ---- gates and baselines ---------------------------------------------------------------------
_GATE = re.compile(r"^(?:(?P<mode>[\w.:-]+?):)?(?P<metric>[a-z_]+(?:@\d+)?)(?:\[(?P<tag>[^\]]+)\])?"
                   r"\s*(?P<op><=|>=|=)\s*(?P<value>[0-9.]+)$")
_GATE_HELP = ("write [mode:]metric@k[tag]=value (meaning at least), or with <= / >=, e.g. ndcg@10=0.6, "
              "contract:false_refusal<=0.1, correct_refusal[unanswerable]>=0.8")


@dataclass
class Gate:
    """One quality gate: ``[mode:]metric[tag] op required``; ``actual`` and ``passed`` once
    ``check_gates`` (or ``--fail-under-recorded``) checked it. ``op`` is ``>=`` (at least) unless
    the spec wrote ``<=``."""

    spec: str
    mode: str
    metric: str
    tag: Optional[str]
    required: float
    op: str = ">="
    op_written: bool = False  # the spec gave <= or >= (``=`` means at least)
    actual: Optional[float] = None
    passed: Optional[bool] = None
    recorded: bool = False  # a --fail-under-recorded check: required is the recorded value -/+ DELTA

    def to_dict(self) -> dict:
        """The gate in ``eval --json``'s ``gates`` (keys in the order they were always written)."""
        out = {"spec": self.spec, "mode": self.mode, "metric": self.metric, "tag": self.tag}
        if self.recorded:
            out["op"] = self.op
        out["required"] = self.required
        if self.op_written:
            out["op"] = self.op
        if self.passed is not None:
            out["actual"] = self.actual
            out["op"] = self.op
            out["passed"] = self.passed
        return out


def parse_gate(spec: str, default_mode: str) -> Gate:
    """``[mode:]metric[tag]OP value``: OP ``=`` (at least, for ranking metrics only), ``>=`` or
    ``<=``; metric a ranking metric ``name@k`` or a refusal rate (``evaluate.RATES``). E.g.
    ``ndcg@10=0.6``, ``bm25:hit_rate@5[exact-id]>=0.9``, ``contract:false_refusal<=0.1``.
    The gate carries ``op`` when the spec gives ``<=`` / ``>=``; ``check_gates`` fills in ``>=``."""
    rates = RATES
    m = _GATE.match(spec.strip())
    if not m:
        hint = ": use <= or >= (a gate includes its bound)" if re.search(r"[<>](?!=)", spec) else ""
        raise UsageError(f"gate {spec!r}{hint}: {_GATE_HELP}")
    metric, op = m["metric"], m["op"]
    try:
        value = float(m["value"])
    except ValueError:
        raise UsageError(f"gate {spec!r}: {m['value']!r} is not a number") from None
    if metric in rates:
        if op == "=":
            raise UsageError(f"gate {spec!r}: say which way the rate may go: {metric}<={m['value']} (at most) or "
                             f"{metric}>={m['value']} (at least)")
        if not 0 <= value <= 1:
            raise UsageError(f"gate {spec!r}: {metric} is a share of questions, between 0 and 1")
    else:
        try:
            parse_metric(metric)
        except ValueError:
            base = metric.partition("@")[0]
            if "@" not in metric and base in METRICS:
                raise UsageError(f"gate {spec!r}: {base} needs a cut-off, e.g. {base}@10") from None
            raise UsageError(f"gate {spec!r}: unknown metric {metric!r}: use NAME@K with NAME one of "
                             f"{', '.join(METRICS)}, or a refusal rate: {', '.join(rates)}") from None
        if not 0 <= value <= 1:  # every ranking metric here is a mean of per-question scores in [0, 1]
            raise UsageError(f"gate {spec!r}: {metric} lies between 0 and 1: a gate at {value:g} can never pass")
    return Gate(spec=spec, mode=m["mode"] or default_mode, metric=metric, tag=m["tag"], required=value,
                op=">=" if op == "=" else op, op_written=op != "=")


def primary_mode(modes: Sequence[str]) -> str:
    """The mode gates apply to by default: contract if evaluated, else the first fused, else the first."""
    if "contract" in modes:
        return "contract"
    fused = [m for m in modes if not is_single_mode(m)]
    return (fused or list(modes))[0]


def prepare_gates(specs: Sequence[str], config: EvalConfig, qs: QuestionSet) -> list[Gate]:
    """Parse and check every gate spec before anything runs (a typo fails in a second, not after the run)."""

    default = primary_mode(config.modes)
    scorable_tags = {t for q in qs.questions if q.answerable for t in q.tags}
    gates = []
    for spec in specs:
        gate = parse_gate(spec, default)
        if gate.mode not in config.modes:
            raise UsageError(f"gate {spec!r}: mode {gate.mode!r} is not among the modes evaluated")
        tag = gate.tag
        if gate.metric in RATE_NEEDS:
            kind = RATE_NEEDS[gate.metric]
            if not any(q.answerable == (kind == "answerable") and (tag is None or tag in q.tags) for q in qs.questions):
                where = f" with tag {tag!r}" if tag else ""
                how = ' ("relevant": [])' if kind == "unanswerable" else ""
                raise UsageError(f"gate {spec!r}: {gate.metric} is a share of {kind} questions{how} and the "
                                 f"question set has none{where}: add some, or drop the gate")
            gates.append(gate)
            continue
        base, k = parse_metric(gate.metric)
        if base not in config.metrics or k not in config.ks:
            raise UsageError(f"gate {spec!r}: {gate.metric} is not computed (see the metrics and ks evaluated)")
        if tag and tag not in scorable_tags:
            raise UsageError(f"gate {spec!r}: no answerable question has tag {tag!r}")
        gates.append(gate)
    return gates


def _holds(actual: float | None, op: str, required: float) -> bool:
    if actual is None:
        return False
    return actual <= required + 1e-9 if op == "<=" else actual >= required - 1e-9


def check_gates(report: EvalReport, gates: list[Gate]) -> bool:
    ok = True
    for gate in gates:
        if gate.metric in RATES:
            actual = report.rate(gate.mode, gate.metric, gate.tag)
        else:
            actual = report.mean(gate.mode, gate.metric, gate.tag)
        gate.actual = None if actual is None else round(actual, 6)
        gate.passed = _holds(actual, gate.op, gate.required)
        ok &= gate.passed
        report.gates.append(gate)
    return ok


def recorded_gates(rec: dict) -> list[Gate]:
    """``recorded_gate``'s checks as gates of the report."""
    return [Gate(spec=c["spec"], mode="contract", metric=c["metric"], tag=None, required=c["required"], op=c["op"],
                 op_written=True, actual=c["actual"], passed=c["passed"], recorded=True) for c in rec["checks"]]


def read_baseline(data, modes: Sequence[str]) -> dict[str, dict]:
    """A previous run's per-question scores: {question id: {mode: {metric: float}}} for answerable
    questions. Raises InputError when ``data`` is not a kbtool eval JSON or lacks the primary mode."""
    bad = InputError("the baseline is not a kbtool eval JSON (per_question with modes and metrics): "
                     "use the --json output or summary.json of a previous run")
    if not isinstance(data, dict) or not isinstance(data.get("per_question"), list):
        raise bad
    out: dict[str, dict] = {}
    for q in data["per_question"]:
        if not isinstance(q, dict) or not isinstance(q.get("modes"), dict):
            raise bad
        if not q.get("answerable"):
            continue
        scores = {}
        for mode, entry in q["modes"].items():
            metrics = entry.get("metrics") if isinstance(entry, dict) else None
            if not isinstance(metrics, dict) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in metrics.values()):
                raise bad
            scores[mode] = {k: float(v) for k, v in metrics.items()}
        out[str(q.get("id"))] = scores
    primary = primary_mode(modes)
    if not out or not all(primary in v for v in out.values()):
        raise InputError(f"the baseline has no {primary!r} scores to compare with: run it with that mode")
    return out


def _holm(pvalues: dict[str, float]) -> dict[str, float]:
    """Holm-Bonferroni adjusted p-values (step-down, monotone)."""
    order = sorted(pvalues, key=pvalues.get)
    m, running, out = len(order), 0.0, {}
    for i, name in enumerate(order):
        running = max(running, min(1.0, (m - i) * pvalues[name]))
        out[name] = running
    return out


def compare_to_baseline(report: EvalReport, baseline: dict[str, dict], *, metric: str = "ndcg@10",
                        alpha: float = 0.05, permutations: int = 10000, seed: int = 0) -> dict:
    """Per-metric deltas with a paired randomisation (sign-flip) test on per-question scores.

    ``baseline`` comes from ``read_baseline``. p-values are two-sided; ``significant`` uses the
    Holm-adjusted p-value across the metrics of a mode, so many metrics do not inflate false alarms.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    cur = {r.question.id: r for r in report.answerable()}
    common = [qid for qid in cur if qid in baseline]
    if not common:
        raise InputError("the baseline shares no answerable question ids with this question set")
    out: dict = {"questions_compared": len(common), "alpha": alpha, "permutations": permutations, "seed": seed,
                 "correction": "holm", "modes": {}}
    signs = rng.choice([-1.0, 1.0], size=(permutations, len(common)))
    for mode in report.config.modes:
        if not all(mode in baseline[q] for q in common):
            continue
        per_metric, pvals, diffs_by_metric = {}, {}, {}
        for name in report.config.metric_names():
            if not all(name in baseline[q][mode] for q in common):
                continue
            b = np.array([baseline[q][mode][name] for q in common])
            # The baseline went through JSON at 6 decimals: compare like with like.
            c = np.array([round(cur[q].modes[mode].metrics[name], 6) for q in common])
            d = np.where(np.abs(c - b) < 1e-9, 0.0, c - b)
            pvals[name] = sign_flip_p(d, signs)
            diffs_by_metric[name] = dict(zip(common, d))
            per_metric[name] = {"baseline": round(float(b.mean()), 6), "current": round(float(c.mean()), 6),
                                "delta": round(float(d.mean()), 6), "p_value": round(pvals[name], 4)}
        for name, p_adj in _holm(pvals).items():
            per_metric[name]["p_holm"] = round(p_adj, 4)
            per_metric[name]["significant"] = p_adj < alpha
        entry = {"metrics": per_metric}
        if metric in diffs_by_metric:
            diffs = diffs_by_metric[metric]
            entry["compared_on"] = metric
            entry["better"] = sorted((q for q, v in diffs.items() if v > 0), key=lambda q: (-diffs[q], q))
            entry["worse"] = sorted((q for q, v in diffs.items() if v < 0), key=lambda q: (diffs[q], q))
        out["modes"][mode] = entry
    report.baseline = out
    return out


def sign_flip_p(d, signs) -> float:
    """Two-sided p-value of mean(d) under random sign flips (rows of ``signs``, each ±1 per
    question); 1.0 when every difference is zero."""
    import numpy as np

    if not d.any():
        return 1.0
    observed = abs(d.mean())
    return float(((np.abs((signs * d).mean(axis=1)) >= observed - 1e-12).sum() + 1) / (len(signs) + 1))


def read_baseline_refusals(data) -> dict[str, dict]:
    """A previous run's decisions: {question id: {"answerable": bool, "refused": {mode: bool}}} for
    every question (answerable or not) whose modes record ``refused``. ``data`` is the JSON
    ``read_baseline`` accepted."""
    out: dict[str, dict] = {}
    for q in data.get("per_question") or []:
        if not isinstance(q, dict) or not isinstance(q.get("modes"), dict):
            continue
        refused = {m: e["refused"] for m, e in q["modes"].items()
                   if isinstance(e, dict) and isinstance(e.get("refused"), bool)}
        if refused:
            out[str(q.get("id"))] = {"answerable": bool(q.get("answerable")), "refused": refused}
    return out


def mcnemar_p(new: int, fixed: int) -> float:
    """One-sided exact McNemar test: the probability of at least ``new`` of the ``new + fixed``
    flipped questions flipping the bad way if either way were equally likely (binomial, p = 1/2);
    1.0 when nothing flipped."""
    n = new + fixed
    if n == 0:
        return 1.0
    return sum(math.comb(n, i) for i in range(new, n + 1)) / 2 ** n


def compare_refusals_to_baseline(report: EvalReport, baseline: dict[str, dict], *, alpha: float = 0.05) -> dict:
    """Refusals against a previous run (``read_baseline_refusals``), per mode: false_refusal and
    correct_refusal before and after, and the questions whose decision flipped. A kind of mistake
    (wrongly refused, wrongly answered) *regressed* when more questions newly made it than stopped
    making it and the one-sided exact McNemar p-value (``mcnemar_p``), Holm-adjusted over the two
    kinds, is below ``alpha``. Questions relabelled between the runs (answerable in one only) are
    left out. Adds ``refusal`` to each mode of ``report.baseline``; returns {mode: that entry}."""
    if report.baseline is None:
        report.baseline = {"modes": {}}
    out = {}
    for mode in report.config.modes:
        rows = [r for r in report.results if r.question.id in baseline
                and mode in baseline[r.question.id]["refused"]
                and baseline[r.question.id]["answerable"] == r.question.answerable]
        if not rows:
            continue
        before = {r.question.id: baseline[r.question.id]["refused"][mode] for r in rows}
        ans = [r for r in rows if r.question.answerable]
        unans = [r for r in rows if not r.question.answerable]
        entry: dict = {"answerable_compared": len(ans), "unanswerable_compared": len(unans), "alpha": alpha,
                       "test": "exact McNemar, one-sided, Holm over the two kinds"}
        for name, group in (("false_refusal", ans), ("correct_refusal", unans)):
            if group:
                b = sum(before[r.question.id] for r in group) / len(group)
                c = sum(r.modes[mode].refused for r in group) / len(group)
                entry[name] = {"baseline": round(b, 6), "current": round(c, 6), "delta": round(c - b, 6)}
        kinds = {}
        for kind, group, now_wrong in (("wrongly_refused", ans, lambda r: r.modes[mode].refused),
                                       ("wrongly_answered", unans, lambda r: not r.modes[mode].refused)):
            new = sorted(r.question.id for r in group if now_wrong(r) and not _was_wrong(before[r.question.id], r))
            fixed = sorted(r.question.id for r in group if not now_wrong(r) and _was_wrong(before[r.question.id], r))
            kinds[kind] = {"new": new, "fixed": fixed}
        raw = {k: mcnemar_p(len(v["new"]), len(v["fixed"])) for k, v in kinds.items()}
        holm = _holm(raw)
        for kind, v in kinds.items():
            v["p_value"], v["p_holm"] = round(raw[kind], 4), round(holm[kind], 4)
            v["regression"] = len(v["new"]) > len(v["fixed"]) and holm[kind] < alpha
        entry.update(kinds)
        report.baseline["modes"].setdefault(mode, {})["refusal"] = entry
        out[mode] = entry
    return out


def _was_wrong(refused_before: bool, r) -> bool:
    """Whether the baseline's decision on this question was a mistake."""
    return refused_before if r.question.answerable else not refused_before


def significant_regressions(report: EvalReport) -> list[str]:
    """The primary mode's ranking metrics that dropped significantly, and its kinds of refusal
    mistake that rose significantly (``compare_refusals_to_baseline``)."""
    if not report.baseline:
        return []
    mode = primary_mode(report.config.modes)
    entry = report.baseline["modes"].get(mode, {})
    out = [f"{mode}:{name}" for name, v in entry.get("metrics", {}).items() if v["significant"] and v["delta"] < 0]
    for kind in ("wrongly_refused", "wrongly_answered"):
        v = (entry.get("refusal") or {}).get(kind)
        if v and v["regression"]:
            out.append(f"{mode}:{kind} ({len(v['new'])} new: {', '.join(v['new'][:10])}; {len(v['fixed'])} fixed; "
                       f"p = {v['p_holm']:g})")
    return out


def recorded_gate(contract, report: EvalReport, delta: float) -> dict:
    """--fail-under-recorded: the contract mode must stay within ``delta`` of what calibration
    recorded: no metric more than ``delta`` below its recorded value, the false-refusal rate no
    more than ``delta`` above the recorded one, the correct-refusal rate no more than ``delta``
    below it (rates from ``calibration.recorded.refusal``'s counts). Returns {delta, checks
    [{spec, metric, op, recorded, required, actual, passed}], skipped [reasons], passed}."""

    rec = contract.calibration.recorded if contract.calibration is not None else None
    recorded = (rec.metrics if rec is not None else None) or {}
    refusal = (rec.refusal if rec is not None else None) or {}
    if not recorded and not refusal:
        raise UsageError("recorded gate: the contract has no recorded metrics: calibrate it first (`kbtool calibrate --write`)")
    checks, skipped = [], []

    def check(name, op, value, actual):
        required = value - delta if op == ">=" else value + delta
        # calibrate records numbers rounded to 6 decimals: compare this run's at the same rounding
        # (81/84 = 0.96428571 is the recorded 0.964286, not below it)
        checks.append({"spec": f"contract:{name}{op}recorded{'-' if op == '>=' else '+'}{delta:g}", "metric": name,
                       "op": op, "recorded": value, "required": round(required, 6),
                       "actual": round(actual, 6), "passed": _holds(round(actual, 6), op, required)})

    for name, value in recorded.items():
        actual = report.mean("contract", name) if name in report.config.metric_names() else None
        if actual is not None:
            check(name, ">=", value, actual)
    if recorded and not checks:
        raise UsageError("recorded gate: none of the recorded metrics "
                         f"({', '.join(recorded)}) is computed: add them to the metrics and ks evaluated")
    if not refusal:
        skipped.append("refusals: the contract records no refusal counts: calibrate it again to hold refusals too")
    else:
        try:
            rates = refusal_rates(refusal)
        except (KeyError, TypeError):
            raise UsageError("recorded gate: calibration.recorded.refusal is not {unanswerable, correctly_refused, "
                             "answerable, wrongly_refused} counts: calibrate it again") from None
        for name, op, kind in (("false_refusal", "<=", "answerable"), ("correct_refusal", ">=", "unanswerable")):
            actual = report.rate("contract", name)
            if rates[name] is None:
                skipped.append(f"{name}: calibration recorded no {kind} question")
            elif actual is None:
                skipped.append(f"{name}: this question set has no {kind} question")
            else:
                check(name, op, rates[name], actual)
    return {"delta": delta, "checks": checks, "skipped": skipped, "passed": all(c["passed"] for c in checks)}
