"""Evaluate retrieval on a labelled question set: every mode side by side, per tag, refusals,
CI gates and a paired significance test against a baseline.

``evaluate()`` returns an ``EvalReport``; ``report.to_dict()`` is the JSON schema documented in
the README, and ``write_outputs()`` writes it with a per-question CSV, TREC runs and HTML.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Sequence

from .. import __version__
from ..errors import InputError, UsageError
from ..query.pipeline import Hit
from ..query.retriever import is_single, parse_mode
from .metrics import DEFAULT_METRICS, METRICS, parse_metric, score
from .questions import Question, QuestionSet, contains_evidence, evidence_regex, trec_id, write_trec_qrels

DEFAULT_KS = (1, 3, 5, 10)
DEFAULT_MODES = ("bm25", "dense", "contract")
HEADLINE = ("hit_rate@5", "mrr@10", "ndcg@10")


@dataclass
class EvalConfig:
    modes: Sequence[str] = DEFAULT_MODES
    ks: Sequence[int] = DEFAULT_KS
    metrics: Sequence[str] = DEFAULT_METRICS
    level: str = "auto"  # auto | doc | chunk
    depth: int = 100
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
            raise UsageError("--k values must be >= 1")
        if self.level not in ("auto", "doc", "chunk"):
            raise UsageError(f"--level {self.level!r}: use auto, doc or chunk")
        if any(not math.isfinite(v) for v in self.thresholds.values()):
            raise UsageError("--threshold values must be finite numbers")
        unknown = set(self.thresholds) - set(self.modes)
        if unknown:
            raise UsageError(f"--threshold for mode(s) not evaluated: {', '.join(sorted(unknown))}")
        self.depth = max(self.depth, max(self.ks))
        if isinstance(self.filters, dict):
            self.filters = [f"{k}={v}" for k, v in self.filters.items()]


@dataclass
class ModeResult:
    ranking: list[str]
    unit_scores: list[float]
    qrels: dict[str, float]
    top_score: float | None  # the top hit's confidence
    refused: bool
    first_relevant_rank: int | None
    metrics: dict[str, float]
    top_doc: str | None


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
    gates: list[dict] = field(default_factory=list)
    baseline: dict | None = None
    calibration: dict | None = None  # the contract's calibration appendix, and warnings, when it has one
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
        return {m: {name: _round(self.mean(m, name)) for name in self.config.metric_names()}
                for m in self.config.modes}

    def tags(self) -> list[str]:
        return sorted({t for r in self.results for t in r.question.tags})

    def by_tag(self) -> dict[str, dict]:
        out = {}
        for tag in self.tags():
            rows = [r for r in self.results if tag in r.question.tags]
            answerable = [r for r in rows if r.question.answerable]
            entry: dict = {"count": len(rows), "answerable": len(answerable)}
            if answerable:
                entry["metrics"] = {m: {name: _round(self.mean(m, name, tag)) for name in self.config.metric_names()}
                                    for m in self.config.modes}
            entry["refusal"] = {m: self._refusal(m, rows) for m in self.config.modes}
            out[tag] = entry
        return out

    def deltas(self) -> dict[str, dict]:
        """For each fused mode: its value minus the best single retriever's, per metric."""
        singles = [m for m in self.config.modes if _single(m)]
        fused = [m for m in self.config.modes if m not in singles]
        if not singles or not fused or not self.answerable():
            return {}
        means = self.metrics()
        out = {}
        for f in fused:
            out[f] = {}
            for name in self.config.metric_names():
                best = max(singles, key=lambda s: (means[s][name], s))
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
        }

    def refusal(self) -> dict[str, dict]:
        return {m: self._refusal(m, self.results) for m in self.config.modes}

    def to_dict(self) -> dict:
        qs = self.question_set
        return {
            "kbtool_version": __version__,
            "created_at": self.created_at,
            "store": self.store_info,
            "question_set": {"name": qs.name, "path": self.source, "questions": len(self.results),
                             "answerable": len(self.answerable()),
                             "unanswerable": len(self.results) - len(self.answerable())},
            "config": {"modes": list(self.config.modes), "ks": sorted(set(self.config.ks)),
                       "metrics": list(self.config.metrics), "level": self.config.level,
                       "depth": self.config.depth, "thresholds": self.config.thresholds,
                       "filters": self.config.filters},
            "metrics": self.metrics(),
            "fused_vs_best_single": self.deltas(),
            "by_tag": self.by_tag(),
            "refusal": self.refusal(),
            "lint": [str(i) for i in qs.issues],
            "gates": self.gates,
            "baseline": self.baseline,
            "calibration": self.calibration,
            "per_question": [
                {"id": r.question.id, "question": r.question.question, "tags": r.question.tags,
                 "answerable": r.question.answerable, "level": r.level,
                 "modes": {m: {"first_relevant_rank": mr.first_relevant_rank, "top_score": mr.top_score,
                               "top_doc": mr.top_doc, "refused": mr.refused,
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
    ``progress(advance, total)``.
    """
    from ..contract import default_contract
    from ..query.pipeline import answer, gather, scope
    from ..query.retriever import contract_for_mode

    config = config or EvalConfig()
    store.require_indexed()
    contracts = dict(contracts or {})
    base = contract or (next(iter(contracts.values())) if contracts else default_contract())
    config.contract_names = list(contracts)
    for name in contracts:
        if name not in config.modes:
            config.modes = [*config.modes, name]
    named = {m: contracts[m] for m in config.modes if m in contracts}
    plain = [m for m in config.modes if m not in contracts]
    for m in plain:
        parse_mode(m)
    config.validate()
    embedder = embedder or getattr(retriever, "embedder", None)
    questions = qs.questions
    texts = [q.question for q in questions]
    total = len(questions) * (1 + len(named))
    cb = (lambda n: progress(n, total)) if progress else None
    # One gathering per distinct contract: candidates are shared by every mode over it.
    groups = [(base, {m: contract_for_mode(base, m) for m in plain})] if plain else []
    groups += [(c, {m: c}) for m, c in named.items()]
    answers: dict[str, list] = {}
    for gbase, variants in groups:
        sc = scope(store, gbase, config.filters, principal, allow)  # each contract's own filters and access
        cands = gather(store, gbase, texts, sc=sc, embedder=embedder, depth=config.depth,
                       retrievers=("dense", "bm25"), progress=cb)
        for mode, variant in variants.items():
            answers[mode] = [answer(store, variant, c, sc=sc, tags=q.tags, top_k=config.depth, explain=False)
                             for c, q in zip(cands, questions)]
    matcher = _EvidenceMatcher(store)
    names = config.metric_names()
    results = []
    for i, q in enumerate(questions):
        level = config.level
        if level == "auto":
            level = "chunk" if any(r.evidence or r.section for r in q.relevant) else "doc"
        modes = {}
        for mode in config.modes:
            ans = answers[mode][i]
            hits = ans.hits
            if level == "doc":
                ranking, unit_scores, qrels = _doc_units(hits, q)
            else:
                ranking, unit_scores, qrels = _chunk_units(hits, q, matcher)
            top = ans.confidence
            threshold = config.thresholds.get(mode)
            if threshold is not None:
                refused = not hits or top < threshold
            else:
                refused = ans.decision == "refuse"
            first = next((n for n, u in enumerate(ranking, start=1) if qrels.get(u, 0) >= 1), None)
            modes[mode] = ModeResult(
                ranking, unit_scores, qrels, top, refused, first,
                {n: score(n, ranking, qrels) for n in names} if q.answerable else {},
                hits[0].doc_id if hits else None,
            )
        results.append(QuestionResult(q, level, modes))
    return EvalReport(qs, config, results, _store_info(store), source=source)


def _single(mode: str) -> bool:
    try:
        return is_single(mode)
    except UsageError:  # a named contract
        return False


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 6)


def _store_info(store) -> dict:
    return {"path": str(store.path), "model": store.model_id, "chunking": store.manifest.get("chunking"),
            "generation": store.generation()}


def _doc_units(hits: list[Hit], q: Question):
    """Collapse chunks to documents at the rank of each document's first chunk."""
    ranking, scores, seen = [], [], set()
    for h in hits:
        if h.doc_id not in seen:
            seen.add(h.doc_id)
            ranking.append(h.doc_id)
            scores.append(h.score)
    qrels: dict[str, float] = {}
    for r in q.relevant:
        qrels[r.doc] = max(qrels.get(r.doc, 0.0), r.grade)
    return ranking, scores, qrels


def _chunk_units(hits: list[Hit], q: Question, matcher: "_EvidenceMatcher"):
    """Each relevant entry is one unit, credited at the first chunk that holds it. A chunk that
    holds several entries credits each of them, at consecutive ranks."""
    items = [(f"{r.doc}::{n}", r) for n, r in enumerate(q.relevant)]
    qrels = {uid: r.grade for uid, r in items}
    ranking, scores, matched = [], [], set()
    for h in hits:
        units = [uid for uid, r in items if uid not in matched and r.doc == h.doc_id and matcher.matches(h, r)]
        matched.update(units)
        for unit in units or [h.chunk_id]:
            ranking.append(unit)
            scores.append(h.score)
    return ranking, scores, qrels


class _EvidenceMatcher:
    """A chunk holds a piece of evidence when it contains it, or its span covers most of it."""

    def __init__(self, store):
        self.store = store
        self._spans: dict[tuple[str, str], tuple[int, int] | None] = {}

    def span(self, doc: str, evidence: str) -> tuple[int, int] | None:
        key = (doc, evidence)
        if key not in self._spans:
            text = self.store.document_text(doc)
            pattern = evidence_regex(evidence)
            m = pattern.search(text) if text is not None and pattern else None
            self._spans[key] = m.span() if m else None
        return self._spans[key]

    def matches(self, hit: Hit, r) -> bool:
        if r.section and not contains_evidence(hit.section_path, r.section):
            return False
        if not r.evidence:
            return True
        if contains_evidence(f"{hit.section_path}\n{hit.text}", r.evidence):  # headings are indexed too
            return True
        span = self.span(r.doc, r.evidence)
        if span is None:
            return False
        overlap = min(span[1], hit.char_end) - max(span[0], hit.char_start)
        return overlap >= (span[1] - span[0]) / 2


# ---- gates and baselines ---------------------------------------------------------------------
_GATE = re.compile(r"^(?:(?P<mode>[\w.:-]+?):)?(?P<metric>[a-z_]+@\d+)(?:\[(?P<tag>[^\]]+)\])?=(?P<value>[0-9.]+)$")


def parse_gate(spec: str, default_mode: str) -> dict:
    """``[mode:]metric@k[tag]=value`` e.g. ``ndcg@10=0.6``, ``bm25:hit_rate@5[exact-id]=0.9``."""
    m = _GATE.match(spec.strip())
    if not m:
        raise UsageError(f"--fail-under {spec!r}: write [mode:]metric@k[tag]=value, e.g. ndcg@10=0.6")
    try:
        parse_metric(m["metric"])
        value = float(m["value"])
    except ValueError as exc:
        raise UsageError(f"--fail-under {spec!r}: {exc}") from None
    return {"spec": spec, "mode": m["mode"] or default_mode, "metric": m["metric"], "tag": m["tag"],
            "required": value}


def primary_mode(modes: Sequence[str]) -> str:
    """The mode gates apply to by default: contract if evaluated, else the first fused, else the first."""
    if "contract" in modes:
        return "contract"
    fused = [m for m in modes if not _single(m)]
    return (fused or list(modes))[0]


def prepare_gates(specs: Sequence[str], config: EvalConfig, qs: QuestionSet) -> list[dict]:
    """Parse and check every --fail-under before anything runs (a typo fails in a second, not after the run)."""
    default = primary_mode(config.modes)
    scorable_tags = {t for q in qs.questions if q.answerable for t in q.tags}
    gates = []
    for spec in specs:
        gate = parse_gate(spec, default)
        if gate["mode"] not in config.modes:
            raise UsageError(f"--fail-under {spec!r}: mode {gate['mode']!r} is not among --modes")
        base, k = parse_metric(gate["metric"])
        if base not in config.metrics or k not in config.ks:
            raise UsageError(f"--fail-under {spec!r}: {gate['metric']} is not computed (see --metrics and --k)")
        if gate["tag"] and gate["tag"] not in scorable_tags:
            raise UsageError(f"--fail-under {spec!r}: no answerable question has tag {gate['tag']!r}")
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


# ---- files -----------------------------------------------------------------------------------
def write_outputs(report: EvalReport, out_dir: Path) -> list[Path]:
    """summary.json, per_question.csv, run.<mode>.trec, qrels.trec and report.html."""
    import pandas as pd

    from .report import render_html

    out_dir.mkdir(parents=True, exist_ok=True)
    data = report.to_dict()
    written = []
    summary = out_dir / "summary.json"
    summary.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    written.append(summary)

    rows = []
    for r in report.results:
        for mode, mr in r.modes.items():
            rows.append({"id": r.question.id, "question": r.question.question, "tags": ";".join(r.question.tags),
                         "answerable": r.question.answerable, "level": r.level, "mode": mode,
                         "first_relevant_rank": mr.first_relevant_rank, "top_score": mr.top_score,
                         "top_doc": mr.top_doc, "refused": mr.refused, **mr.metrics})
    csv_path = out_dir / "per_question.csv"
    pd.DataFrame(rows).to_csv(csv_path, index=False)
    written.append(csv_path)

    qrels = {r.question.id: next(iter(r.modes.values())).qrels for r in report.answerable()}
    qrels_path = out_dir / "qrels.trec"
    write_trec_qrels(qrels_path, qrels)
    written.append(qrels_path)
    for mode in report.config.modes:
        path = out_dir / f"run.{_safe(mode)}.trec"
        with path.open("w", encoding="utf-8") as fh:
            # Answerable questions only, like qrels.trec, so TREC tools see the same query set.
            for r in report.answerable():
                mr = r.modes[mode]
                qid = trec_id(r.question.id)
                for rank, (unit, s) in enumerate(zip(mr.ranking, mr.unit_scores), start=1):
                    # Strictly decreasing scores, so any tool re-sorting by score keeps our order.
                    fh.write(f"{qid} Q0 {trec_id(unit)} {rank} {s - rank * 1e-9:.12f} kbtool-{_safe(mode)}\n")
        written.append(path)
    html = out_dir / "report.html"
    html.write_text(render_html(data), encoding="utf-8")
    written.append(html)
    return written


def _safe(mode: str) -> str:
    return re.sub(r"[^\w.-]+", "-", mode)


def calibration_warnings(contract, store, qs) -> list[str]:
    """Why the contract's calibration may not hold for this store or question set (empty: it does)."""
    from .calibrate import question_set_sha256, store_fingerprint

    cal = contract.calibration
    if not cal:
        return []
    out = []
    recorded_qs = (cal.get("question_set") or {}).get("sha256")
    if recorded_qs and recorded_qs != question_set_sha256(qs):
        out.append("the question set differs from the one the contract was calibrated on "
                   f"({(cal.get('question_set') or {}).get('path') or 'unknown'}): recalibrate with `kbtool calibrate`")
    then, now = cal.get("store") or {}, store_fingerprint(store)
    changed = [k for k in ("model", "chunking", "analyzer", "documents", "chunks") if k in then and then[k] != now[k]]
    if changed:
        out.append(f"the store changed since calibration ({', '.join(changed)}): recalibrate with `kbtool calibrate`")
    return out


def recorded_gate(contract, report: EvalReport, delta: float) -> dict:
    """--fail-under-recorded: the contract mode must stay within ``delta`` of every metric recorded
    at calibration that this run computed."""
    cal = contract.calibration or {}
    recorded = (cal.get("recorded") or {}).get("metrics") or {}
    if not recorded:
        raise UsageError("--fail-under-recorded: the contract has no recorded metrics: run `kbtool calibrate --write` first")
    checks = []
    for name, value in recorded.items():
        actual = report.mean("contract", name) if name in report.config.metric_names() else None
        if actual is None:
            continue
        checks.append({"metric": name, "recorded": value, "actual": round(actual, 6),
                       "passed": actual >= value - delta - 1e-9})
    if not checks:
        raise UsageError("--fail-under-recorded: none of the recorded metrics "
                         f"({', '.join(recorded)}) is computed: check --metrics and --k")
    return {"delta": delta, "checks": checks, "passed": all(c["passed"] for c in checks)}
