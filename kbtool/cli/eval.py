from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from ..errors import EXIT_GATE
from . import app
from ._common import JsonOpt, QuietOpt, SetOpt, StoreOpt, err, handle_errors, open_store, out, parse_pairs, print_json

# Library messages name the parameter (``gate 'x': ...``, as a Python caller passes it); here the flag.
def _csv(values: Optional[List[str]]) -> list[str]:
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


@app.command("eval")
@handle_errors
def eval_(
    questions: Annotated[Path, typer.Argument(metavar="QUESTIONS", help="Question set: kbtool JSONL, a BEIR folder, or a queries file with --qrels.")],
    modes: Annotated[Optional[List[str]], typer.Option("--modes", help="Modes to compare, comma-separated or repeated [default: bm25,dense,contract]; also hybrid (RRF k=60), rrf:K and weighted:W; with added models dense:NAME, rrf:R1+R2, weighted:R1=W1+R2=W2.")] = None,
    contract: Annotated[Optional[List[Path]], typer.Option("--contract", help="Contract file; repeat to compare contracts side by side (each becomes a mode named after its file) [default: as for query].")] = None,
    set_: SetOpt = None,
    k: Annotated[Optional[List[str]], typer.Option("--k", help="Cut-offs, comma-separated or repeated [default: 1,3,5,10].")] = None,
    metrics: Annotated[Optional[List[str]], typer.Option("--metrics", help="hit_rate, mrr, ndcg, recall, precision, map (comma-separated) [default: all].")] = None,
    level: Annotated[str, typer.Option("--level", help="auto (chunk level when evidence is given), doc or chunk.")] = "auto",
    depth: Annotated[int, typer.Option("--depth", min=1, help="Chunks retrieved per question and mode.")] = 100,
    threshold: Annotated[Optional[List[str]], typer.Option("--threshold", help="mode=value: refuse when the question's P(answerable) (without a model: the top hit's confidence) is below it, instead of the contract's thresholds (repeatable).")] = None,
    filter_: Annotated[Optional[List[str]], typer.Option("--filter", "-f", help="key=value applied to every question (repeatable).")] = None,
    qrels: Annotated[Optional[Path], typer.Option("--qrels", help="Judgements for a queries file: TREC (qid 0 doc grade) or BEIR TSV.")] = None,
    split: Annotated[str, typer.Option("--split", help="BEIR qrels split (qrels/<split>.tsv).")] = "test",
    strict: Annotated[bool, typer.Option("--strict", help="Treat question-set warnings (unknown fields, documents not in the store, evidence not found) as errors.")] = False,
    fail_under: Annotated[Optional[List[str]], typer.Option("--fail-under", help="Gate [mode:]metric@k[tag]=value (at least), or with <= / >=; metrics also the refusal rates false_refusal, false_answer, correct_refusal, e.g. ndcg@10=0.6, 'hit_rate@5[exact-id]=0.9', 'contract:false_refusal<=0.1' (repeatable; mode defaults to contract). Exit 3 when not met.")] = None,
    baseline: Annotated[Optional[Path], typer.Option("--baseline", help="A previous run's --json output or summary.json: deltas, paired randomisation test, better/worse questions; refusal rates before and after, and the questions whose decision flipped.")] = None,
    fail_on_regression: Annotated[bool, typer.Option("--fail-on-regression", help="With --baseline: exit 3 on a significant drop (p < 0.05) of any metric of the primary mode, or a significant rise of its wrongly refused or wrongly answered questions (exact McNemar test on the flipped ones).")] = False,
    principal: Annotated[Optional[str], typer.Option("--principal", help="Evaluate as this principal (access.principals), as query does.")] = None,
    allow: Annotated[Optional[List[str]], typer.Option("--allow", help="Permission tag held (repeatable), as query does.")] = None,
    fail_under_recorded: Annotated[Optional[float], typer.Option("--fail-under-recorded", min=0, help="Exit 3 when the contract mode falls more than this below any metric recorded by `kbtool calibrate --write`, its false-refusal rate rises more than this above the recorded one, or its correct-refusal rate falls more than this below it.")] = None,
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="Write summary.json, per_question.csv, run.<mode>.trec, qrels.trec and report.html here.")] = None,
    store: StoreOpt = None,
    all_metrics: Annotated[bool, typer.Option("--all-metrics", help="Show every metric at every cut-off in the tables (default: hit_rate@5, mrr@10, ndcg@10 when --metrics and --k are not given; --json always has all).")] = False,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
):
    """Score retrieval on a labelled question set: every mode side by side, per tag, refusals.

    Exit codes: 0 all gates pass, 3 a gate failed, 1 an error (e.g. a malformed question set).
    """
    from rich.markup import escape

    from ..errors import InputError, UsageError
    from ..evaluation.compare import (check_gates, compare_refusals_to_baseline, compare_to_baseline, prepare_gates,
                                      read_baseline, read_baseline_refusals, recorded_gate, recorded_gates,
                                      significant_regressions)
    from ..evaluation.evaluate import DEFAULT_KS, DEFAULT_MODES, EvalConfig, evaluate
    from ..evaluation.metrics import DEFAULT_METRICS
    from ..evaluation.questions import lint_against_store, load_questions

    try:
        ks = [int(x) for x in _csv(k)] or list(DEFAULT_KS)
    except ValueError:
        raise typer.BadParameter(f"{k}: whole numbers, e.g. 1,3,5,10", param_hint="--k") from None
    thresholds = {}
    for mode, value in parse_pairs(threshold, "--threshold").items():
        try:
            thresholds[mode] = float(value)
        except ValueError:
            raise typer.BadParameter(f"{mode}={value}: the score must be a number", param_hint="--threshold") from None
    from ..contract import find_contract, load_contract

    contracts: dict = {}
    if contract and len(contract) > 1:
        for path in contract:
            name = path.stem
            if name in contracts:
                raise UsageError(f"--contract {path}: two contracts named {name!r}: rename one file")
            contracts[name] = load_contract(path, set_ or [], search=False)
        base = None
        in_force = {"contracts": {n: _contract_info(path, c, set_) for (n, c), path in zip(contracts.items(), contract)}}
        default_modes = ["bm25", "dense", *contracts]
    else:
        base = load_contract(contract[0] if contract else None, set_ or [])
        in_force = _contract_info(find_contract(contract[0] if contract else None), base, set_)
        default_modes = list(DEFAULT_MODES)
    config = EvalConfig(modes=_csv(modes) or default_modes, ks=ks, metrics=_csv(metrics) or list(DEFAULT_METRICS),
                        level=level, depth=depth, thresholds=thresholds, filters=list(filter_ or []),
                        contract_names=list(contracts))
    config.validate()
    if fail_on_regression and not baseline:
        raise UsageError("--fail-on-regression needs --baseline FILE (a previous run's --json or summary.json)")
    if out_dir:
        if out_dir.exists() and not out_dir.is_dir():
            raise UsageError(f"--out {out_dir} is a file: give a folder")
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"--out {out_dir}: cannot create it ({exc.strerror})") from None
    baseline_scores = baseline_refusals = None
    if baseline:
        try:
            baseline_data = json.loads(baseline.read_text(encoding="utf-8"))
            baseline_scores = read_baseline(baseline_data, config.modes)
            baseline_refusals = read_baseline_refusals(baseline_data)
        except (OSError, ValueError) as exc:
            raise InputError(f"--baseline {baseline}: not readable JSON ({exc})") from None

    qs = load_questions(questions, qrels=qrels, split=split)
    kb = open_store(store)
    from ..access import visible_documents

    # A restricted caller's lint sees only its documents: any other reads as one the store lacks.
    seen = [visible_documents(kb, c, principal, allow) for c in ([base] if base is not None else contracts.values())]
    seen = [v for v in seen if v is not None]
    lint_against_store(qs, kb, set.intersection(*seen) if seen else None)
    fatal = [i for i in qs.issues if i.fatal or strict]
    if fatal:
        raise InputError(f"{len(fatal)} problem(s) in the question set, first: {fatal[0]}")
    gates = prepare_gates(fail_under or [], config, qs)
    if fail_under_recorded is not None and (base is None or "contract" not in config.modes):
        raise UsageError("--fail-under-recorded needs one contract and the contract mode")
    from ..evaluation.provenance import calibration_warnings, visible_appendix

    for warning in calibration_warnings(base, kb, qs, principal, allow) if base is not None else []:
        err.print(f"[yellow]warning[/] {escape(warning)}", highlight=False)
    for issue in qs.issues[:20]:
        err.print(f"[yellow]warning[/] {escape(str(issue))}", highlight=False)
    if len(qs.issues) > 20:
        err.print(f"[yellow]warning[/] … and {len(qs.issues) - 20} more (see lint in --json)")

    from ._common import progress_bars

    with progress_bars(quiet) as bars:
        progress = (lambda n, total: bars("questions", n, total)) if bars else None
        report = evaluate(kb, qs, config, contract=base, contracts=contracts, progress=progress, source=str(questions),
                          principal=principal, allow=allow)
    for mode in config.modes:
        empty = sum(1 for r in report.results if r.modes[mode].top_score is None)
        if empty > len(report.results) / 2:
            err.print(f"[yellow]warning[/] {escape(mode)} returned nothing for {empty} of {len(report.results)} "
                      "questions: check --filter and that the store holds the documents", highlight=False)
    if base is not None and base.calibration:
        report.calibration = {"contract_version": base.contract_version,
                              "appendix": visible_appendix(base.calibration, base, principal, allow),
                              "warnings": calibration_warnings(base, kb, qs, principal, allow)}
    report.contract = in_force
    gates_ok = check_gates(report, gates)
    if fail_under_recorded is not None:
        rec = recorded_gate(base, report, fail_under_recorded)
        report.gates += recorded_gates(rec)
        for reason in rec["skipped"]:
            err.print(f"[yellow]warning[/] --fail-under-recorded: not checked: {escape(reason)}", highlight=False)
        gates_ok &= rec["passed"]
    regressions = []
    if baseline_scores is not None:
        compare_to_baseline(report, baseline_scores)
        compare_refusals_to_baseline(report, baseline_refusals)
        regressions = significant_regressions(report)
    if out_dir:
        from ..evaluation.outputs import write_report

        try:
            files = write_report(report, out_dir)
        except OSError as exc:
            raise InputError(f"--out {out_dir}: cannot write ({exc.strerror})") from None
        if not quiet:
            err.print(f"wrote {', '.join(str(f) for f in files)}", highlight=False, markup=False)
    if json_:
        print_json(report.to_dict())
    else:
        from .eval_render import render

        render(report, out, all_metrics=all_metrics or bool(metrics) or bool(k))
    if not gates_ok or (fail_on_regression and regressions):
        why = [g.spec + f" (got {g.actual})" for g in report.gates if not g.passed]
        why += [f"significant regression in {r}" for r in regressions] if fail_on_regression else []
        err.print(f"[bold red]Gate failed:[/] {escape('; '.join(why))}", highlight=False)
        raise typer.Exit(EXIT_GATE)


def _contract_info(path: Path | None, contract, overrides) -> dict:
    """The contract in force, as eval names it: its file (None: the built-in one), version, the
    date it was calibrated, and the --set overrides on top."""
    date = contract.calibration.date if contract.calibration is not None else None
    return {"path": None if path is None else str(path), "version": contract.contract_version,
            "calibrated": str(date)[:10] if date else None, "overrides": list(overrides or [])}
