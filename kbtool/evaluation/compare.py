"""Comparing runs: quality gates (``--fail-under``, ``--fail-under-recorded``), a previous run as
baseline, and the paired sign-flip randomisation test both ``eval --baseline`` and ``calibrate``
use. Functions take an ``EvalReport`` (or its numbers) and never run retrieval.
"""

from __future__ import annotations

import re
from typing import Sequence

from ..errors import InputError, UsageError
from ..query.retriever import is_single
from .metrics import parse_metric


def is_single_mode(mode: str) -> bool:
    try:
        return is_single(mode)
    except UsageError:  # a named contract
        return False



# ---- gates and baselines ---------------------------------------------------------------------
_GATE = re.compile(r"^(?:(?P<mode>[\w.:-]+?):)?(?P<metric>[a-z_]+@\d+)(?:\[(?P<tag>[^\]]+)\])?=(?P<value>[0-9.]+)$")


def parse_gate(spec: str, default_mode: str) -> dict:
    """``[mode:]metric@k[tag]=value`` e.g. ``ndcg@10=0.6``, ``bm25:hit_rate@5[exact-id]=0.9``."""
    m = _GATE.match(spec.strip())
    if not m:
        raise UsageError(f"gate {spec!r}: write [mode:]metric@k[tag]=value, e.g. ndcg@10=0.6")
    try:
        parse_metric(m["metric"])
        value = float(m["value"])
    except ValueError as exc:
        raise UsageError(f"gate {spec!r}: {exc}") from None
    return {"spec": spec, "mode": m["mode"] or default_mode, "metric": m["metric"], "tag": m["tag"],
            "required": value}


def primary_mode(modes: Sequence[str]) -> str:
    """The mode gates apply to by default: contract if evaluated, else the first fused, else the first."""
    if "contract" in modes:
        return "contract"
    fused = [m for m in modes if not is_single_mode(m)]
    return (fused or list(modes))[0]


def prepare_gates(specs: Sequence[str], config: EvalConfig, qs: QuestionSet) -> list[dict]:
    """Parse and check every gate spec before anything runs (a typo fails in a second, not after the run)."""
    default = primary_mode(config.modes)
    scorable_tags = {t for q in qs.questions if q.answerable for t in q.tags}
    gates = []
    for spec in specs:
        gate = parse_gate(spec, default)
        if gate["mode"] not in config.modes:
            raise UsageError(f"gate {spec!r}: mode {gate['mode']!r} is not among the modes evaluated")
        base, k = parse_metric(gate["metric"])
        if base not in config.metrics or k not in config.ks:
            raise UsageError(f"gate {spec!r}: {gate['metric']} is not computed (see the metrics and ks evaluated)")
        if gate["tag"] and gate["tag"] not in scorable_tags:
            raise UsageError(f"gate {spec!r}: no answerable question has tag {gate['tag']!r}")
        gates.append(gate)
    return gates


def check_gates(report: EvalReport, gates: list[dict]) -> bool:
    ok = True
    for gate in gates:
        actual = report.mean(gate["mode"], gate["metric"], gate["tag"])
        gate["actual"] = None if actual is None else round(actual, 6)
        gate["passed"] = actual is not None and actual >= gate["required"]
        ok &= gate["passed"]
        report.gates.append(gate)
    return ok


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


def significant_regressions(report: EvalReport) -> list[str]:
    if not report.baseline:
        return []
    mode = primary_mode(report.config.modes)
    entry = report.baseline["modes"].get(mode, {})
    return [f"{mode}:{name}" for name, v in entry.get("metrics", {}).items() if v["significant"] and v["delta"] < 0]


def recorded_gate(contract, report: EvalReport, delta: float) -> dict:
    """--fail-under-recorded: the contract mode must stay within ``delta`` of every metric recorded
    at calibration that this run computed."""
    cal = contract.calibration or {}
    recorded = (cal.get("recorded") or {}).get("metrics") or {}
    if not recorded:
        raise UsageError("recorded gate: the contract has no recorded metrics: calibrate it first (`kbtool calibrate --write`)")
    checks = []
    for name, value in recorded.items():
        actual = report.mean("contract", name) if name in report.config.metric_names() else None
        if actual is None:
            continue
        checks.append({"metric": name, "recorded": value, "actual": round(actual, 6),
                       "passed": actual >= value - delta - 1e-9})
    if not checks:
        raise UsageError("recorded gate: none of the recorded metrics "
                         f"({', '.join(recorded)}) is computed: add them to the metrics and ks evaluated")
    return {"delta": delta, "checks": checks, "passed": all(c["passed"] for c in checks)}
