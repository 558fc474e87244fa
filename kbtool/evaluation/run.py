"""The eval workflow: what `kbtool eval` does beyond parsing options and rendering, for any caller.

``run_eval`` loads the contracts in force, the question set and its baseline, lints the set against
the store as the caller sees it, evaluates every mode, checks the gates (``--fail-under``, the
recorded gate, significant regressions against the baseline) and writes the report files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ..errors import InputError, UsageError
from .questions import DEFAULT_DEPTH


@dataclass
class EvalRequest:
    """What to evaluate: ``questions`` (kbtool JSONL, a BEIR folder, or a queries file with ``qrels``),
    the modes and cut-offs (None: the defaults), the contract files (several: compared side by side),
    gates, a baseline and where the report files go."""
    questions: Path
    modes: Sequence[str] = ()
    contracts: Sequence[Path] = ()
    overrides: Sequence[str] = ()
    ks: Sequence[int] = ()
    metrics: Sequence[str] = ()
    level: str = "auto"
    depth: int = DEFAULT_DEPTH
    thresholds: dict[str, float] = field(default_factory=dict)
    filters: Sequence[str] = ()
    qrels: Path | None = None
    split: str = "test"
    strict: bool = False
    gates: Sequence[str] = ()
    baseline: Path | None = None
    fail_under_recorded: float | None = None
    principal: str | None = None
    allow: Sequence[str] | None = None
    out_dir: Path | None = None


@dataclass
class EvalRun:
    report: object  # EvalReport
    gates_ok: bool
    regressions: list[str]  # metrics of the primary mode that dropped significantly against the baseline
    files: list[Path]  # report files written (out_dir)


def run_eval(store, request: EvalRequest, *, progress: Callable[[int, int], None] | None = None,
             warn: Callable[[str], None] = lambda message: None) -> EvalRun:
    """Evaluate ``request`` on ``store`` (a Store, or the path of one: opened after the question set
    is read). ``warn(message)`` is told, as they are found, what the caller should know: calibration
    warnings, question-set issues, modes that returned nothing, recorded gates not checked."""
    from .compare import (check_gates, compare_refusals_to_baseline, compare_to_baseline, prepare_gates,
                          read_baseline, read_baseline_refusals, recorded_gate, recorded_gates, significant_regressions)
    from .evaluate import DEFAULT_KS, DEFAULT_MODES, EvalConfig, evaluate
    from .metrics import DEFAULT_METRICS
    from .provenance import calibration_warnings, visible_appendix
    from .questions import lint_questions, load_questions

    r = request
    base, contracts, in_force = contracts_in_force(r.contracts, r.overrides)
    default_modes = ["bm25", "dense", *contracts] if base is None else list(DEFAULT_MODES)
    config = EvalConfig(modes=list(r.modes) or default_modes, ks=list(r.ks) or list(DEFAULT_KS),
                        metrics=list(r.metrics) or list(DEFAULT_METRICS), level=r.level, depth=r.depth,
                        thresholds=dict(r.thresholds), filters=list(r.filters), contract_names=list(contracts))
    config.validate()
    _make_out_dir(r.out_dir)
    baseline_scores = baseline_refusals = None
    if r.baseline:
        try:
            baseline_data = json.loads(r.baseline.read_text(encoding="utf-8"))
            baseline_scores = read_baseline(baseline_data, config.modes)
            baseline_refusals = read_baseline_refusals(baseline_data)
        except (OSError, ValueError) as exc:
            raise InputError(f"baseline {r.baseline}: not readable JSON ({exc})") from None
    qs = load_questions(r.questions, qrels=r.qrels, split=r.split)
    from ..store import Store

    if not isinstance(store, Store):
        store = Store.open(store)
    lint_questions(qs, store, [base] if base is not None else list(contracts.values()), r.principal, r.allow,
                   strict=r.strict)
    gates = prepare_gates(list(r.gates), config, qs)
    if r.fail_under_recorded is not None and (base is None or "contract" not in config.modes):
        raise UsageError("fail_under_recorded needs one contract and the contract mode")
    cal_warnings = calibration_warnings(base, store, qs, r.principal, r.allow) if base is not None else []
    for warning in cal_warnings:
        warn(warning)
    for issue in qs.issues[:20]:
        warn(str(issue))
    if len(qs.issues) > 20:
        warn(f"… and {len(qs.issues) - 20} more (see lint in --json)")
    report = evaluate(store, qs, config, contract=base, contracts=contracts, progress=progress,
                      source=str(r.questions), principal=r.principal, allow=r.allow)
    for mode in config.modes:
        empty = sum(1 for q in report.results if q.modes[mode].top_score is None)
        if empty > len(report.results) / 2:
            warn(f"{mode} returned nothing for {empty} of {len(report.results)} questions: check --filter and "
                 "that the store holds the documents")
    if base is not None and base.calibration:
        report.calibration = {"contract_version": base.contract_version,
                              "appendix": visible_appendix(base.calibration, base, r.principal, r.allow),
                              "warnings": cal_warnings}
    report.contract = in_force
    gates_ok = check_gates(report, gates)
    if r.fail_under_recorded is not None:
        rec = recorded_gate(base, report, r.fail_under_recorded)
        report.gates += recorded_gates(rec)
        for reason in rec["skipped"]:
            warn(f"--fail-under-recorded: not checked: {reason}")
        gates_ok &= rec["passed"]
    regressions = []
    if baseline_scores is not None:
        compare_to_baseline(report, baseline_scores)
        compare_refusals_to_baseline(report, baseline_refusals)
        regressions = significant_regressions(report)
    files = []
    if r.out_dir:
        from .outputs import write_report

        try:
            files = write_report(report, r.out_dir)
        except OSError as exc:
            raise InputError(f"out_dir {r.out_dir}: cannot write ({exc.strerror})") from None
    return EvalRun(report, gates_ok, regressions, files)


def contracts_in_force(paths: Sequence[Path], overrides: Sequence[str]) -> tuple:
    """(base, named, in_force): one contract file (or the one found as query finds it) is ``base``;
    several are ``named`` {file stem: Contract} and compared side by side (``base`` None). ``in_force``
    names them as the report does (``EvalReport.contract``)."""
    from ..contract import find_contract, load_contract

    if len(paths) > 1:
        named: dict = {}
        for path in paths:
            if path.stem in named:
                raise UsageError(f"contracts {path}: two contracts named {path.stem!r}: rename one file")
            named[path.stem] = load_contract(path, list(overrides), search=False)
        return None, named, {"contracts": {n: _contract_info(p, c, overrides) for (n, c), p in zip(named.items(), paths)}}
    path = paths[0] if paths else None
    base = load_contract(path, list(overrides))
    return base, {}, _contract_info(find_contract(path), base, overrides)


def _contract_info(path: Path | None, contract, overrides) -> dict:
    """The contract in force, as eval names it: its file (None: the built-in one), version, the
    date it was calibrated, and the --set overrides on top."""
    date = contract.calibration.date if contract.calibration is not None else None
    return {"path": None if path is None else str(path), "version": contract.contract_version,
            "calibrated": str(date)[:10] if date else None, "overrides": list(overrides or [])}


def _make_out_dir(out_dir: Path | None) -> None:
    if not out_dir:
        return
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"out_dir {out_dir} is a file: give a folder")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"out_dir {out_dir}: cannot create it ({exc.strerror})") from None
