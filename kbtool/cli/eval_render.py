"""Rich tables for `kbtool eval` (the JSON is EvalReport.to_dict())."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from ..evaluation.compare import primary_mode
from ..evaluation.metrics import HEADLINE
from ..evaluation.report import contract_line


def _f(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def _best(values: list) -> list[str]:
    """Format a row, the best value in bold."""
    known = [v for v in values if v is not None]
    best = max(known) if known else None
    return [f"[bold]{_f(v)}[/]" if v is not None and v == best else _f(v) for v in values]


def _ids(ids: list[str], n: int = 8) -> str:
    return ", ".join(ids[:n]) + (f" and {len(ids) - n} more" if len(ids) > n else "")


def render(report, console, all_metrics: bool = True) -> None:
    """``all_metrics`` False: the tables show the headline metrics (``HEADLINE``) only."""
    data = report.to_dict()
    names = report.config.metric_names()
    shown = names if all_metrics else [n for n in names if n in HEADLINE] or names
    headline = [n for n in HEADLINE if n in names] or names[:3]
    _header(data, console)
    _modes(data, console, shown)
    _fused(data, console, shown)
    _tags(data, console, headline)
    _refusals(data, console)
    _missed(data, console)
    _gates(data, console)
    _baseline(data, console)


def _header(data: dict, console) -> None:
    qs = data["question_set"]
    line = contract_line(data.get("contract"))
    if line:
        console.print(escape(line), highlight=False)
    console.print(f"[bold]{escape(qs['name'])}[/]: {qs['questions']} questions ({qs['answerable']} answerable, "
                  f"{qs['unanswerable']} unanswerable), level {data['config']['level']}", highlight=False)


def _modes(data: dict, console, shown: list[str]) -> None:
    modes = data["config"]["modes"]
    table = Table(title="Retrieval quality by mode", title_justify="left")
    table.add_column("metric", no_wrap=True)
    for m in modes:
        table.add_column(escape(m), justify="right", no_wrap=True)
    for name in shown:
        table.add_row(name, *_best([data["metrics"][m][name] for m in modes]))
    div = f"distinct@{max(data['config']['ks'])}"  # distinct documents in the top K: spread, not relevance
    if data.get("diversity") and all(div in data["diversity"].get(m, {}) for m in modes):
        table.add_row(f"{div} (docs)", *[_f(data["diversity"][m][div]) for m in modes])
    console.print(table)


def _fused(data: dict, console, shown: list[str]) -> None:
    deltas = data["fused_vs_best_single"]
    if deltas:
        t = Table(title="Fused mode minus the best single retriever (which one, in brackets)", title_justify="left")
        t.add_column("metric", no_wrap=True)
        for f in deltas:
            t.add_column(escape(f), justify="right", no_wrap=True)
        for name in shown:
            cells = []
            for per in deltas.values():
                d = per[name]
                color = "green" if d["delta"] > 0 else ("red" if d["delta"] < 0 else "")
                text = f"{d['delta']:+.3f} ({escape(d['best_single'])})"
                cells.append(f"[{color}]{text}[/]" if color else text)
            t.add_row(name, *cells)
        console.print(t)


def _tags(data: dict, console, headline: list[str]) -> None:
    modes = data["config"]["modes"]
    if data["by_tag"]:
        tags = Table(title="By question type (tag; n = answerable questions)", title_justify="left")
        tags.add_column("tag", min_width=10, overflow="fold")
        tags.add_column("n", justify="right", no_wrap=True)
        tags.add_column("metric", no_wrap=True)
        for m in modes:
            tags.add_column(escape(m), justify="right", no_wrap=True)
        for tag, entry in data["by_tag"].items():
            if "metrics" not in entry:
                cells = [f"{r['correctly_refused']}/{r['unanswerable']}" for r in entry["refusal"].values()]
                tags.add_row(escape(tag), "0", "refused", *cells, end_section=True)
                continue
            for i, n in enumerate(headline):
                tags.add_row(escape(tag) if i == 0 else "", str(entry["answerable"]) if i == 0 else "", n,
                             *_best([entry["metrics"][m][n] for m in modes]),
                             end_section=i == len(headline) - 1)
        console.print(tags)


def _refusals(data: dict, console) -> None:
    qs = data["question_set"]
    if qs["unanswerable"] or data["refusal"]:
        refusal = Table(title="Refusals (unanswerable questions)", title_justify="left")
        for col in ("mode", "threshold", "correctly refused", "wrongly refused (answerable)", "correct_refusal",
                    "false_refusal", "low confidence (unanswerable / answerable)"):
            refusal.add_column(col, justify="right" if col != "mode" else "left")
        for m, r in data["refusal"].items():
            refusal.add_row(escape(m), "contract" if r["threshold"] is None else f"{r['threshold']:g}",
                            f"{r['correctly_refused']} / {r['unanswerable']}",
                            f"{r['wrongly_refused']} / {r['answerable']}", _f(r["correct_refusal"]),
                            _f(r["false_refusal"]),
                            f"{r.get('unanswerable_hedged', 0)} / {r.get('answerable_hedged', 0)}")
        console.print(refusal)
        for m, mis in data["mistakes"].items():
            parts = [f"{label}: {_ids([x['id'] for x in mis[key]])}"
                     for key, label in (("wrongly_refused", "wrongly refused"), ("wrongly_answered", "wrongly answered"))
                     if mis[key]]
            if parts:
                console.print(f"{escape(m)}: {escape('; '.join(parts))}", highlight=False)
        console.print("[dim]threshold 'contract': the contract's decide.thresholds (and tiers) on P(answerable) "
                      "from decide.model (without one: the top hit's confidence); each mistake's value, top document "
                      "and signals are in --json / --out.[/]")


def _missed(data: dict, console) -> None:
    qs, modes = data["question_set"], data["config"]["modes"]
    missed = data.get("missed")
    if missed and qs["answerable"]:
        for m, rows in missed["modes"].items():
            if rows:
                console.print(f"{escape(m)}: {len(rows)} of {qs['answerable']} answerable with no relevant result in "
                              f"the top {missed['k']}: {escape(_ids([x['id'] for x in rows]))}", highlight=False)
    rel = (data.get("reliability") or {}).get(primary_mode(modes))
    if rel:
        auc = "-" if rel["auc"] is None else f"{rel['auc']:.3f}"
        console.print(f"[dim]{escape(primary_mode(modes))}'s decision value ({escape(rel['decided_by'])}) against "
                      f"answerable, {rel['questions']} questions: AUC {auc}, calibration error "
                      f"{rel['calibration_error']:.3f} (reliability bins in --json and report.html)[/]", highlight=False)


def _gates(data: dict, console) -> None:
    if data["gates"]:
        gates = Table(title="Gates", title_justify="left")
        for col in ("gate", "required", "actual", "result"):
            gates.add_column(col)
        for g in data["gates"]:
            gates.add_row(escape(g["spec"]), f"{g.get('op', '>=')} {g['required']:g}", _f(g["actual"]),
                          "[green]pass[/]" if g["passed"] else "[red]FAIL[/]")
        console.print(gates)


def _baseline(data: dict, console) -> None:
    modes = data["config"]["modes"]
    if data["baseline"]:
        b = data["baseline"]
        mode = primary_mode(modes)
        entry = b["modes"].get(mode)
        if entry and entry.get("metrics"):
            t = Table(title=f"Against the baseline ({escape(mode)}, {b['questions_compared']} questions; paired "
                            f"randomisation test, {b['permutations']} permutations; * = significant after Holm)",
                      title_justify="left")
            for col in ("metric", "baseline", "current", "delta", "p", "p (Holm)"):
                t.add_column(col, justify="right" if col != "metric" else "left", no_wrap=col == "metric")
            for name, v in entry["metrics"].items():
                mark = " *" if v["significant"] else ""
                t.add_row(name, _f(v["baseline"]), _f(v["current"]), f"{v['delta']:+.3f}", f"{v['p_value']:.4f}",
                          f"{v['p_holm']:.4f}{mark}")
            console.print(t)
        if entry and "better" in entry:
            console.print(f"{entry['compared_on']}: {len(entry['better'])} better "
                          f"({escape(', '.join(entry['better'][:10]))}), {len(entry['worse'])} worse "
                          f"({escape(', '.join(entry['worse'][:10]))})", highlight=False)
        ref = (entry or {}).get("refusal")
        if ref:
            rates = [f"{n} {ref[n]['baseline']:.3f} -> {ref[n]['current']:.3f} ({ref[n]['delta']:+.3f})"
                     for n in ("false_refusal", "correct_refusal") if n in ref]
            console.print(f"refusals against the baseline ({escape(mode)}): {', '.join(rates)}", highlight=False)
            for kind, label in (("wrongly_refused", "wrongly refused"), ("wrongly_answered", "wrongly answered")):
                v = ref[kind]
                if v["new"] or v["fixed"]:
                    flag = " [red]regression[/]" if v["regression"] else ""
                    console.print(f"  {label}: {len(v['new'])} new ({escape(_ids(v['new']))}), {len(v['fixed'])} fixed "
                                  f"({escape(_ids(v['fixed']))}); McNemar p (Holm) {v['p_holm']:.4f}{flag}",
                                  highlight=False)
