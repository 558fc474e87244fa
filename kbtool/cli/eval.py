from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from ..errors import EXIT_GATE
from ..evaluation.questions import DEFAULT_DEPTH
from . import app
from ._common import JsonOpt, QuietOpt, SetOpt, StoreOpt, err, handle_errors, out, parse_pairs, print_json

# Library messages name the parameter (``gate 'x': ...``, as a Python caller passes it); here the flag.
def _csv(values: Optional[List[str]]) -> list[str]:
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


@app.command("eval")
@handle_errors
def eval_(
    questions: Annotated[Path, typer.Argument(metavar="QUESTIONS", help="Question set: kbtool JSONL, a BEIR folder, or a queries file with --qrels.")],
    modes: Annotated[Optional[List[str]], typer.Option("--modes", metavar="MODES", help="Modes to compare, comma-separated or repeated [default: bm25,dense,contract]; also hybrid (RRF k=60), rrf:K and weighted:W; with added models dense:NAME, rrf:R1+R2, weighted:R1=W1+R2=W2.")] = None,
    contract: Annotated[Optional[List[Path]], typer.Option("--contract", metavar="FILE", help="Contract file; repeat to compare contracts side by side (each becomes a mode named after its file) [default: as for query].")] = None,
    set_: SetOpt = None,
    k: Annotated[Optional[List[str]], typer.Option("--k", metavar="K,...", help="Cut-offs, comma-separated or repeated [default: 1,3,5,10].")] = None,
    metrics: Annotated[Optional[List[str]], typer.Option("--metrics", metavar="METRICS", help="hit_rate, mrr, ndcg, recall, precision, map (comma-separated) [default: all].")] = None,
    level: Annotated[str, typer.Option("--level", metavar="LEVEL", help="auto (chunk level when evidence is given), doc or chunk.")] = "auto",
    depth: Annotated[int, typer.Option("--depth", metavar="N", min=1, help="Chunks retrieved per question and mode.")] = DEFAULT_DEPTH,
    threshold: Annotated[Optional[List[str]], typer.Option("--threshold", metavar="MODE=VALUE", help="mode=value: refuse when the question's P(answerable) (without a model: the top hit's confidence) is below it, instead of the contract's thresholds (repeatable).")] = None,
    filter_: Annotated[Optional[List[str]], typer.Option("--filter", "-f", metavar="SPEC", help="key=value applied to every question (repeatable).")] = None,
    qrels: Annotated[Optional[Path], typer.Option("--qrels", metavar="FILE", help="Judgements for a queries file: TREC (qid 0 doc grade) or BEIR TSV.")] = None,
    split: Annotated[str, typer.Option("--split", metavar="NAME", help="BEIR qrels split (qrels/NAME.tsv).")] = "test",
    strict: Annotated[bool, typer.Option("--strict", help="Treat question-set warnings (unknown fields, documents not in the store, evidence not found) as errors.")] = False,
    fail_under: Annotated[Optional[List[str]], typer.Option("--fail-under", metavar="GATE", help="Gate [mode:]metric@k[tag]=value (at least), or with <= / >=; metrics also the refusal rates false_refusal, false_answer, correct_refusal, e.g. ndcg@10=0.6, 'hit_rate@5[exact-id]=0.9', 'contract:false_refusal<=0.1' (repeatable; mode defaults to contract). Exit 3 when not met.")] = None,
    baseline: Annotated[Optional[Path], typer.Option("--baseline", metavar="FILE", help="A previous run's --json output or summary.json: deltas, paired randomisation test, better/worse questions; refusal rates before and after, and the questions whose decision flipped.")] = None,
    fail_on_regression: Annotated[bool, typer.Option("--fail-on-regression", help="With --baseline: exit 3 on a significant drop (p < 0.05) of any metric of the primary mode, or a significant rise of its wrongly refused or wrongly answered questions (exact McNemar test on the flipped ones).")] = False,
    principal: Annotated[Optional[str], typer.Option("--principal", metavar="NAME", help="Evaluate as this principal (access.principals), as query does.")] = None,
    allow: Annotated[Optional[List[str]], typer.Option("--allow", metavar="TAG", help="Permission tag held (repeatable), as query does.")] = None,
    fail_under_recorded: Annotated[Optional[float], typer.Option("--fail-under-recorded", metavar="DELTA", min=0, help="Exit 3 when the contract mode falls more than this below any metric recorded by `kbtool calibrate --write`, its false-refusal rate rises more than this above the recorded one, or its correct-refusal rate falls more than this below it.")] = None,
    out_dir: Annotated[Optional[Path], typer.Option("--out", metavar="DIR", help="Write summary.json, per_question.csv, run.MODE.trec, qrels.trec and report.html here.")] = None,
    store: StoreOpt = None,
    all_metrics: Annotated[bool, typer.Option("--all-metrics", help="Show every metric at every cut-off in the tables (default: hit_rate@5, mrr@10, ndcg@10 when --metrics and --k are not given; --json always has all).")] = False,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
):
    """Score retrieval on a labelled question set: every mode side by side, per tag, refusals.

    Exit codes: 0 all gates pass, 3 a gate failed, 1 an error (e.g. a malformed question set).
    """
    from rich.markup import escape

    from ..errors import UsageError
    from ..evaluation.run import EvalRequest, run_eval
    from ._common import progress_bars

    try:
        ks = [int(x) for x in _csv(k)]
    except ValueError:
        raise typer.BadParameter(f"{k}: whole numbers, e.g. 1,3,5,10", param_hint="--k") from None
    thresholds = {}
    for mode, value in parse_pairs(threshold, "--threshold").items():
        try:
            thresholds[mode] = float(value)
        except ValueError:
            raise typer.BadParameter(f"{mode}={value}: the score must be a number", param_hint="--threshold") from None
    if fail_on_regression and not baseline:
        raise UsageError("--fail-on-regression needs --baseline FILE (a previous run's --json or summary.json)")
    request = EvalRequest(questions, _csv(modes), list(contract or []), list(set_ or []), ks, _csv(metrics), level,
                          depth, thresholds, list(filter_ or []), qrels, split, strict, list(fail_under or []), baseline,
                          fail_under_recorded, principal, allow, out_dir)
    warn = lambda message: err.print(f"[yellow]warning[/] {escape(message)}", highlight=False)  # noqa: E731
    with progress_bars(quiet) as bars:
        run = run_eval(store, request, progress=(lambda n, total: bars("questions", n, total)) if bars else None,
                       warn=warn)
    if run.files and not quiet:
        err.print(f"wrote {', '.join(str(f) for f in run.files)}", highlight=False, markup=False)
    if json_:
        print_json(run.report.to_dict())
    else:
        from .eval_render import render

        render(run.report, out, all_metrics=all_metrics or bool(metrics) or bool(k))
    if not run.gates_ok or (fail_on_regression and run.regressions):
        why = [g.spec + f" (got {g.actual})" for g in run.report.gates if not g.passed]
        why += [f"significant regression in {r}" for r in run.regressions] if fail_on_regression else []
        err.print(f"[bold red]Gate failed:[/] {escape('; '.join(why))}", highlight=False)
        raise typer.Exit(EXIT_GATE)
