"""Rich tables for `kbtool eval` (the JSON is EvalReport.to_dict())."""

from __future__ import annotations

from rich.table import Table

from ..evaluate import HEADLINE, primary_mode


def _f(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def _best(values: list) -> list[str]:
    """Format a row, the best value in bold."""
    known = [v for v in values if v is not None]
    best = max(known) if known else None
    return [f"[bold]{_f(v)}[/]" if v is not None and v == best else _f(v) for v in values]


def render(report, console) -> None:
    data = report.to_dict()
    modes = data["config"]["modes"]
    qs = data["question_set"]
    console.print(f"[bold]{qs['name']}[/]: {qs['questions']} questions ({qs['answerable']} answerable, "
                  f"{qs['unanswerable']} unanswerable), level {data['config']['level']}", highlight=False)

    table = Table(title="Retrieval quality by mode", title_justify="left")
    table.add_column("metric")
    for m in modes:
        table.add_column(m, justify="right")
    deltas = data["fused_vs_best_single"]
    for f in deltas:
        table.add_column(f"Δ {f} vs best single", justify="right")
    for name in report.config.metric_names():
        cells = _best([data["metrics"][m][name] for m in modes])
        for f, per in deltas.items():
            d = per[name]
            color = "green" if d["delta"] > 0 else ("red" if d["delta"] < 0 else "")
            text = f"{d['delta']:+.3f} ({d['best_single']})"
            cells.append(f"[{color}]{text}[/]" if color else text)
        table.add_row(name, *cells)
    console.print(table)

    headline = [n for n in HEADLINE if n in report.config.metric_names()] or report.config.metric_names()[:3]
    if data["by_tag"]:
        tags = Table(title="By question type (tag)", title_justify="left")
        for col in ("tag", "n answerable", "metric", *modes):
            tags.add_column(col, justify="left" if col in ("tag", "metric") else "right")
        for tag, entry in data["by_tag"].items():
            if "metrics" not in entry:
                cells = [f"{r['correctly_refused']}/{r['unanswerable']}" for r in entry["refusal"].values()]
                tags.add_row(tag, str(entry["count"]), "refused", *cells, end_section=True)
                continue
            for i, n in enumerate(headline):
                tags.add_row(tag if i == 0 else "", str(entry["answerable"]) if i == 0 else "", n,
                             *_best([entry["metrics"][m][n] for m in modes]),
                             end_section=i == len(headline) - 1)
        console.print(tags)

    if not qs["unanswerable"] and all(r["threshold"] is None for r in data["refusal"].values()):
        refusal = None
    else:
        refusal = Table(title="Refusals (unanswerable questions)", title_justify="left")
    if refusal is not None:
        for col in ("mode", "threshold", "correctly refused", "wrongly refused (answerable)"):
            refusal.add_column(col, justify="right" if col != "mode" else "left")
        for m, r in data["refusal"].items():
            refusal.add_row(m, "none" if r["threshold"] is None else f"{r['threshold']:g}",
                            f"{r['correctly_refused']} / {r['unanswerable']}",
                            f"{r['wrongly_refused']} / {r['answerable']}")
        console.print(refusal)
    if all(r["threshold"] is None for r in data["refusal"].values()) and qs["unanswerable"]:
        console.print("[dim]No --threshold set: nothing is refused. Top scores per question are in --json / --out "
                      "to choose one.[/]")

    if data["gates"]:
        gates = Table(title="Gates", title_justify="left")
        for col in ("gate", "required", "actual", "result"):
            gates.add_column(col)
        for g in data["gates"]:
            gates.add_row(g["spec"], f"{g['required']:g}", _f(g["actual"]),
                          "[green]pass[/]" if g["passed"] else "[red]FAIL[/]")
        console.print(gates)

    if data["baseline"]:
        b = data["baseline"]
        mode = primary_mode(modes)
        entry = b["modes"].get(mode)
        if entry:
            t = Table(title=f"Against baseline ({mode}, {b['questions_compared']} questions, "
                            f"paired randomisation test, {b['permutations']} permutations)", title_justify="left")
            for col in ("metric", "baseline", "current", "delta", "p"):
                t.add_column(col, justify="right" if col != "metric" else "left")
            for name, v in entry["metrics"].items():
                mark = " *" if v["significant"] else ""
                t.add_row(name, _f(v["baseline"]), _f(v["current"]), f"{v['delta']:+.3f}", f"{v['p_value']:.4f}{mark}")
            console.print(t)
            if "better" in entry:
                console.print(f"{entry['compared_on']}: {len(entry['better'])} better "
                              f"({', '.join(entry['better'][:10])}), {len(entry['worse'])} worse "
                              f"({', '.join(entry['worse'][:10])})", highlight=False)
