from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from . import app
from ._common import JsonOpt, QuietOpt, SetOpt, StoreOpt, err, handle_errors, open_store, out, print_json, progress_bars


@app.command()
@handle_errors
def calibrate(
    questions: Annotated[Path, typer.Argument(metavar="QUESTIONS", help="Labelled question set (as for eval), with unanswerable questions for the model (10+) and thresholds (5+).")],
    contract: Annotated[Optional[Path], typer.Option("--contract", metavar="FILE", help="Contract to calibrate and (with --write) update [default: $KBTOOL_CONTRACT, else ./kbtool.yaml, else the built-in one, written to ./kbtool.yaml].")] = None,
    set_: SetOpt = None,
    objective: Annotated[str, typer.Option("--objective", metavar="METRIC", help="Metric to maximise, e.g. ndcg@10, mrr@10, hit_rate@5.")] = "ndcg@10",
    folds: Annotated[int, typer.Option("--folds", metavar="N", min=2, help="Cross-validation folds.")] = 5,
    seed: Annotated[int, typer.Option("--seed", metavar="N", help="Seed of the fold split and the significance test.")] = 0,
    min_count: Annotated[int, typer.Option("--min-count", metavar="N", min=1, help="Answerable questions a type (identifier, cjk) needs for weights of its own.")] = 10,
    max_false_answer: Annotated[Optional[float], typer.Option("--max-false-answer", metavar="RATE", min=0, max=1, help="Choose the refuse threshold so at most this share of unanswerable questions is answered.")] = None,
    max_false_refusal: Annotated[Optional[float], typer.Option("--max-false-refusal", metavar="RATE", min=0, max=1, help="Choose the refuse threshold so at most this share of answerable questions is refused.")] = None,
    negatives: Annotated[str, typer.Option("--negatives", metavar="KIND", help="Generated unanswerable questions for the model fit and thresholds (never in a reported rate): auto (when fewer than 20 are written), none, leave-out (answerable questions without their labelled documents), name-swap (a named thing swapped for one the knowledge base never mentions), all.")] = "auto",
    write: Annotated[bool, typer.Option("--write", help="Write the proposal into the contract file (bumps contract_version, records the calibration).")] = False,
    out_dir: Annotated[Optional[Path], typer.Option("--out", metavar="DIR", help="Write calibration.json, one PNG per plot (calibration.png: the refusal trade-off per tier) and report.html (everything on one page) here.")] = None,
    principal: Annotated[Optional[str], typer.Option("--principal", metavar="NAME", help="Calibrate as this principal (access.principals), as query does.")] = None,
    allow: Annotated[Optional[List[str]], typer.Option("--allow", metavar="TAG", help="Permission tag held (repeatable), as query does.")] = None,
    qrels: Annotated[Optional[Path], typer.Option("--qrels", metavar="FILE", help="Judgements for a queries file (as for eval).")] = None,
    split: Annotated[str, typer.Option("--split", metavar="NAME", help="BEIR qrels split.")] = "test",
    store: StoreOpt = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Print the proposed contract as a unified diff (by default: a line per section that changes).")] = False,
):
    """Tune fusion weights (per question type) by cross-validation, fit the answerability model
    (P(answerable) from the pipeline's signals, out of fold) and choose refusal thresholds on
    labelled questions; print the change as a diff, --write it into the contract."""
    import difflib

    from ..contract import CONTRACT_FILE, calibrated_text, dump_yaml, find_contract, load_contract
    from ..errors import InputError, StoreError, UsageError
    from ..evaluation.calibrate import calibrate as run
    from ..evaluation.questions import lint_questions, load_questions

    from ..evaluation.metrics import parse_metric

    try:
        parse_metric(objective)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--objective") from None
    if max_false_answer is not None and max_false_refusal is not None:
        raise typer.BadParameter("give one of --max-false-answer and --max-false-refusal", param_hint="--max-false-answer")
    from ..evaluation.negatives import MODES

    if negatives not in MODES:
        raise typer.BadParameter(f"{negatives!r}: use one of {', '.join(MODES)}", param_hint="--negatives")
    if out_dir and out_dir.exists() and not out_dir.is_dir():
        raise typer.BadParameter(f"{out_dir} is a file: give a folder", param_hint="--out")
    if write and set_:
        raise UsageError("--write with --set: the overrides would not be in the written file; edit the contract instead")
    path = find_contract(contract)
    c = load_contract(path, set_ or [], search=False)
    qs = load_questions(questions, qrels=qrels, split=split)
    kb = open_store(store)
    lint_questions(qs, kb, [c], principal, allow)  # as the caller sees the store
    generation = kb.generation()
    with progress_bars(quiet) as bars:
        result = run(kb, qs, c, objective=objective, folds=folds, seed=seed, min_count=min_count,
                     max_false_answer=max_false_answer, max_false_refusal=max_false_refusal, progress=bars,
                     source=str(questions), principal=principal, allow=allow, negatives=negatives)
    target = path or Path(CONTRACT_FILE)
    old = path.read_text(encoding="utf-8") if path else None
    new = calibrated_text(old, c, result.calibration(), where=target)
    diff = "".join(difflib.unified_diff((old or dump_yaml(c)).splitlines(True), new.splitlines(True),
                                        fromfile=str(path or "(built-in contract)"), tofile=str(target)))
    if out_dir:
        from ..evaluation.outputs import write_calibration

        try:
            files = write_calibration(result, out_dir)
        except InputError as exc:
            raise InputError(f"--out {exc}") from None
        if not quiet:
            err.print(f"wrote {', '.join(str(f) for f in files)}", highlight=False, markup=False)
    if write and (kb.writer_active() or not kb.is_indexed() or kb.generation() != generation):
        raise StoreError(f"{kb.path} was being written (an ingest or index) while calibrating, or its indexes are "
                         f"behind: {target} not written; run calibrate --write again once the store is current")
    if write:
        try:
            target.write_text(new, encoding="utf-8")
        except OSError as exc:
            raise InputError(f"{target}: cannot write ({exc.strerror})") from None
    if json_:
        print_json({**result.to_dict(), "diff": diff, "written": str(target) if write else None})
        return
    from .calibrate_render import print_change, render

    render(result, out)
    print_change(out, old or dump_yaml(c), new, diff, path or "the built-in contract", target, verbose)
    if write:
        if not quiet:
            err.print(f"wrote {target} (contract_version {result_version(new)})", highlight=False, markup=False)
    elif not quiet:
        err.print(f"not written: run again with --write to update {target}", highlight=False, markup=False)


def result_version(text: str) -> int:
    import yaml

    return int(yaml.safe_load(text)["contract_version"])
