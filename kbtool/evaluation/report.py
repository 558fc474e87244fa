"""A self-contained HTML report (inline CSS and SVG, no scripts or external files)."""

from __future__ import annotations

import base64
from html import escape

from ..contract import RETRIEVER
from .compare import primary_mode
from .metrics import HEADLINE

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"]


def _line_chart(title: str, ks: list[int], series: dict[str, list[float]]) -> str:
    w, h, pad = 420, 200, 36
    legend = 110  # room on the right for mode names
    xs = {k: pad + (w - 2 * pad - legend) * (i / max(1, len(ks) - 1)) for i, k in enumerate(ks)}

    def y(v: float) -> float:
        return h - pad - (h - 2 * pad) * v

    parts = [f'<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{escape(title)}">',
             f'<text x="{w / 2}" y="16" text-anchor="middle" class="t">{escape(title)}</text>']
    for v in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line x1="{pad}" x2="{w - pad - legend}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="g"/>'
                     f'<text x="{pad - 4}" y="{y(v) + 4:.1f}" text-anchor="end" class="a">{v:g}</text>')
    for k in ks:
        parts.append(f'<text x="{xs[k]:.1f}" y="{h - pad + 14}" text-anchor="middle" class="a">@{k}</text>')
    for i, (mode, values) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        pts = " ".join(f"{xs[k]:.1f},{y(v):.1f}" for k, v in zip(ks, values))
        parts.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"/>')
        parts += [f'<circle cx="{xs[k]:.1f}" cy="{y(v):.1f}" r="3" fill="{color}"><title>{escape(mode)} @{k}: {v:.3f}</title></circle>'
                  for k, v in zip(ks, values)]
        parts.append(f'<text x="{w - legend - pad + 8}" y="{30 + 12 * i}" class="l" fill="{color}">{escape(mode)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(headers: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    return escape("" if v is None else str(v))


def render_html(data: dict) -> str:
    modes = data["config"]["modes"]
    ks = data["config"]["ks"]
    metrics = data["metrics"]
    charts = "".join(
        _line_chart(base, ks, {m: [metrics[m][f"{base}@{k}"] for k in ks] for m in modes})
        for base in data["config"]["metrics"]
    ) if data["question_set"]["answerable"] else "<p>No answerable question: nothing to plot.</p>"
    names = [f"{b}@{k}" for b in data["config"]["metrics"] for k in ks]
    div = data.get("diversity") or {}
    spread = [f"distinct@{k}" for k in ks if all(f"distinct@{k}" in div.get(m, {}) for m in modes)]
    summary = _table(["metric", *modes], [[n, *[metrics[m][n] for m in modes]] for n in names]
                     + [[f"{n} (distinct documents)", *[div[m][n] for m in modes]] for n in spread])
    headline = [n for n in HEADLINE if n in names] or names[:3]
    tag_rows = []
    for tag, entry in data["by_tag"].items():
        row = [tag, entry.get("answerable", 0)]  # n = answerable questions, as the terminal counts them
        for m in modes:
            if "metrics" in entry:
                row += [entry["metrics"][m][n] for n in headline]
            else:  # a tag of unanswerable questions only: what each mode refused
                r = entry.get("refusal", {}).get(m) or {}
                row += [f"{r.get('correctly_refused', 0)}/{r.get('unanswerable', 0)} refused"] + [""] * (len(headline) - 1)
        tag_rows.append(row)
    tags = _table(["tag", "n (answerable)", *[f"{m} {n}" for m in modes for n in headline]], tag_rows)
    refusal = _table(["mode", "threshold", "unanswerable", "correctly refused", "answerable", "wrongly refused",
                      "correct_refusal", "false_refusal", "low confidence: unanswerable", "low confidence: answerable"],
                     [[m, "contract" if r["threshold"] is None else r["threshold"], r["unanswerable"], r["correctly_refused"], r["answerable"],
                       r["wrongly_refused"], r.get("correct_refusal"), r.get("false_refusal"),
                       r.get("unanswerable_hedged"), r.get("answerable_hedged")]
                      for m, r in data["refusal"].items()])
    mistakes = _mistakes(data.get("mistakes") or {})
    deltas = ""
    for fused, per in data["fused_vs_best_single"].items():
        deltas += f"<h3>{escape(fused)} vs the best single retriever</h3>" + _table(
            ["metric", "best single", "its value", fused, "delta"],
            [[n, per[n]["best_single"], per[n]["best_single_value"], per[n]["value"], per[n]["delta"]]
             for n in headline])
    gates = ""
    if data["gates"]:
        gates = "<h2>Gates</h2>" + _table(["gate", "required", "actual", "passed"],
                                           [[g["spec"], f"{g.get('op', '>=')} {g['required']:g}", g["actual"], g["passed"]]
                                            for g in data["gates"]])
    qs = data["question_set"]
    calibration = _calibration(data.get("calibration"), data["metrics"].get("contract"))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kbtool eval: {escape(qs['name'])}</title>
<style>
body{{font-family:system-ui,sans-serif;margin:2rem;max-width:1100px;color:#222}}
table{{border-collapse:collapse;margin:0.5rem 0 1.5rem}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}
td:first-child,th:first-child{{text-align:left}}th{{background:#f3f3f3}}
svg{{margin:0 12px 12px 0;border:1px solid #eee}}.t{{font-size:13px;font-weight:bold}}.a{{font-size:10px;fill:#555}}
.l{{font-size:10px}}.g{{stroke:#eee}}
</style></head><body>
<h1>kbtool eval: {escape(qs['name'])}</h1>
<p>{qs['questions']} questions ({qs['answerable']} answerable, {qs['unanswerable']} unanswerable) on store
<code>{escape(str(data['store']['path']))}</code>, model <code>{escape(str(data['store']['model']))}</code>;
level {escape(data['config']['level'])}; {escape(data['created_at'])}; kbtool {escape(data['kbtool_version'])}.</p>
{_contract(data.get("contract"))}
<h2>Metric@K by mode</h2><div>{charts}</div>
<h2>Summary</h2>{summary}{deltas}
<h2>By tag</h2>{tags}
<h2>Refusals</h2>{refusal}
{mistakes}
{gates}
{calibration}
{_reliability(data.get("reliability") or {}, primary_mode(modes))}
{_missed(data.get("missed"))}
{_changed(data.get("baseline"), data["per_question"])}
</body></html>
"""


def contract_line(info: dict | None) -> str | None:
    """'contract: kbtool.yaml (version 3, calibrated 2026-12-01)'; 'contract: built-in (version 1)'."""
    if not info:
        return None
    if "contracts" in info:
        return "contracts: " + "; ".join(f"{name} = {contract_line(c)[len('contract: '):]}"
                                         for name, c in info["contracts"].items())
    what = [f"version {info['version']}"] + ([f"calibrated {info['calibrated']}"] if info.get("calibrated") else [])
    line = f"contract: {info['path'] or 'built-in'} ({', '.join(what)})"
    if info.get("overrides"):
        line += " with --set " + " ".join(info["overrides"])
    return line


def _contract(info: dict | None) -> str:
    if not info:
        return ""
    return f"<p>{escape(contract_line(info))}</p>"


def _signals(signals: dict) -> str:
    return ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in signals.items())


def _mistakes(per_mode: dict) -> str:
    """Per mode, the answerable questions refused and the unanswerable ones answered."""
    parts = []
    for mode, mis in per_mode.items():
        for key, label in (("wrongly_refused", "answerable questions refused"),
                           ("wrongly_answered", "unanswerable questions answered")):
            rows = [[x["id"], x["question"], x["decision"], x["confidence"], x["top_doc"], _signals(x["signals"])]
                    for x in mis[key]]
            if rows:
                parts.append(f"<h3>{escape(mode)}: {len(rows)} {label}</h3>"
                             + _table(["id", "question", "decision", "confidence", "top document", "signals"], rows))
    if not parts:
        return ""
    return "<h2>Refusal mistakes</h2>" + "".join(parts)


def _calibration(cal: dict | None, now: dict | None, title: str | None = None) -> str:
    """The contract's calibration: what it was tuned on, held-out results, thresholds and their
    rates, and the recorded metrics beside this run's."""
    if not cal:
        return ""
    app = cal.get("appendix") or {}
    h = app.get("heldout") or {}
    qs = app.get("question_set") or {}
    heading = title or f"Calibration (contract_version {cal.get('contract_version')})"
    parts = [f"<h2>{escape(heading)}</h2>",
             f"<p>Calibrated {escape(str(app.get('date')))} with kbtool {escape(str(app.get('kbtool_version')))} on "
             f"<code>{escape(str(qs.get('path')))}</code> ({qs.get('questions')} questions), objective "
             f"{escape(str(app.get('objective')))}, {app.get('folds')}-fold cross-validation, seed {app.get('seed')}; "
             f"new fusion {'adopted' if app.get('adopted') else 'not adopted (kept the current one)'}.</p>"]
    for w in cal.get("warnings") or []:
        parts.append(f"<p><b>Warning:</b> {escape(w)}</p>")
    if h:
        parts.append(_table(["held-out " + str(app.get("objective")), "value"],
                            [["chosen by cross-validation", h.get("chosen")], ["contract before", h.get("current")],
                             [f"best single ({h.get('best_single_name')})", h.get("best_single")],
                             *([f"{name} alone", h[name]] for name in h if RETRIEVER.match(name)),
                             ["p-value (paired sign-flip)", h.get("p_value")]]))
    th = app.get("thresholds")
    if th:
        rows = [[name, t["answer"], t["low_confidence"], t["false_answer"], t["false_refusal"]]
                for name, t in {"default": th["default"], **th.get("tiers", {})}.items()]
        parts.append(_table(["tier", "answer", "refuse below", "false answers", "false refusals"], rows))
    recorded = (app.get("recorded") or {}).get("metrics") or {}
    if recorded and now is None:  # calibrate's own report, or an eval without the contract mode
        parts.append(_table(["metric", "recorded at calibration"], [[m, v] for m, v in recorded.items()]))
    elif recorded:
        parts.append(_table(["metric", "recorded at calibration", "this run (contract)"],
                            [[m, v, now.get(m)] for m, v in recorded.items()]))
    return "".join(parts)


def _missed(missed: dict | None) -> str:
    """Per mode, the answerable questions with no relevant result in the top K (``missed``)."""
    if not missed:
        return ""
    k = missed["k"]
    parts = [f"<h2>Answerable questions with no relevant result in the top {k}</h2>"]
    for mode, rows in missed["modes"].items():
        parts.append(f"<h3>{escape(mode)}: {len(rows)} missed</h3>")
        if rows:
            parts.append(_table(["id", "question", "tags", "first relevant rank", "top document"],
                                [[x["id"], x["question"], ", ".join(x["tags"]), x["first_relevant_rank"], x["top_doc"]]
                                 for x in rows]))
    return "".join(parts)


def _changed(baseline: dict | None, per_question: list[dict]) -> str:
    """Against ``--baseline``, per mode: the questions better or worse on the compared metric, and
    those newly wrongly refused or answered and those fixed."""
    if not baseline or not baseline.get("modes"):
        return ""
    text = {q["id"]: q["question"] for q in per_question}
    parts = []
    for mode, entry in baseline["modes"].items():
        rows = []
        metric = entry.get("compared_on")
        for key, label in (("worse", f"worse on {metric}"), ("better", f"better on {metric}")):
            rows += [[qid, text.get(qid, ""), label] for qid in entry.get(key) or []]
        ref = entry.get("refusal") or {}
        for kind, label in (("wrongly_refused", "wrongly refused"), ("wrongly_answered", "wrongly answered")):
            v = ref.get(kind) or {}
            rows += [[qid, text.get(qid, ""), f"newly {label}"] for qid in v.get("new") or []]
            rows += [[qid, text.get(qid, ""), f"no longer {label}"] for qid in v.get("fixed") or []]
        counts = []
        if metric:
            counts.append(f"{len(entry.get('better') or [])} better, {len(entry.get('worse') or [])} worse on {escape(metric)}")
        for kind, label in (("wrongly_refused", "wrongly refused"), ("wrongly_answered", "wrongly answered")):
            if kind in ref:
                counts.append(f"{label}: {len(ref[kind]['new'])} new, {len(ref[kind]['fixed'])} fixed")
        parts.append(f"<h3>{escape(mode)}: {'; '.join(counts) or 'nothing compared'}</h3>")
        if rows:
            parts.append(_table(["id", "question", "change"], rows))
    compared = baseline.get("questions_compared")
    head = "<h2>Questions that changed against the baseline</h2>"
    if compared is not None:
        head += f"<p>{compared} answerable questions compared.</p>"
    return head + "".join(parts)


def _reliability(rel: dict, primary: str) -> str:
    """The decision value against the share of answerable questions, per mode (``reliability``)."""
    if not rel:
        return ""
    table = _table(["mode", "decision value", "questions", "AUC", "Brier", "calibration error"],
                   [[m, r["decided_by"], r["questions"], r["auc"], r["brier"], r["calibration_error"]]
                    for m, r in rel.items()])
    # The primary mode first: the first colour and the top of the legend.
    order = [primary] + [m for m in rel if m != primary] if primary in rel else list(rel)
    chart = _reliability_chart("Reliability diagram: decision value vs share answerable",
                               {m: rel[m]["reliability"] for m in order})
    return ("<h2>Calibration of the decision value (this run)</h2>"
            "<p>Questions binned by their decision value (P(answerable), or without decide.model the top hit's "
            "confidence); each point is a bin's mean value against the share of its questions that are answerable "
            "(hover: the count). On the diagonal, the value means what it says.</p>" + chart + table)


def _reliability_chart(title: str, series: dict[str, list[dict]]) -> str:
    w, h, pad, legend = 420, 260, 40, 110
    side = min(w - 2 * pad - legend, h - 2 * pad)

    def x(v: float) -> float:
        return pad + side * v

    def y(v: float) -> float:
        return h - pad - side * v

    parts = [f'<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{escape(title)}" '
             f'class="reliability">',
             f'<text x="{w / 2}" y="16" text-anchor="middle" class="t">{escape(title)}</text>']
    for v in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line x1="{x(0)}" x2="{x(1)}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="g"/>'
                     f'<text x="{pad - 4}" y="{y(v) + 4:.1f}" text-anchor="end" class="a">{v:g}</text>'
                     f'<text x="{x(v):.1f}" y="{h - pad + 14}" text-anchor="middle" class="a">{v:g}</text>')
    parts.append(f'<line x1="{x(0)}" y1="{y(0)}" x2="{x(1)}" y2="{y(1)}" stroke="#999" stroke-dasharray="3,3"/>')
    parts.append(f'<text x="{x(0.5)}" y="{h - 8}" text-anchor="middle" class="a">decision value (bin mean)</text>')
    parts.append(f'<text x="12" y="{y(0.5)}" text-anchor="middle" class="a" '
                 f'transform="rotate(-90 12 {y(0.5)})">share answerable</text>')
    for i, (mode, bins) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        pts = " ".join(f"{x(b['predicted']):.1f},{y(b['observed']):.1f}" for b in bins)
        if len(bins) > 1:
            parts.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"/>')
        parts += [f'<circle cx="{x(b["predicted"]):.1f}" cy="{y(b["observed"]):.1f}" r="3" fill="{color}">'
                  f'<title>{escape(mode)}: {b["count"]} questions, value {b["predicted"]:.3f}, '
                  f'answerable {b["observed"]:.3f}</title></circle>' for b in bins]
        parts.append(f'<text x="{x(1) + 10}" y="{30 + 12 * i}" class="l" fill="{color}">{escape(mode)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def render_calibration_html(data: dict, png: bytes) -> str:
    """calibrate's report.html: what the calibration found (``_calibration``'s tables) and
    calibration.png embedded as a data: URI, so the page stands alone."""
    app = data.get("appendix") or {}
    src = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    notes = "".join(f"<li>{escape(str(n))}</li>" for n in data.get("notes") or [])
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kbtool calibrate</title>
<style>
body{{font-family:system-ui,sans-serif;margin:2rem;color:#222}}
table{{border-collapse:collapse;margin:0.5rem 0 1.5rem}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}
td:first-child,th:first-child{{text-align:left}}th{{background:#f3f3f3}}img{{max-width:100%}}
</style></head><body>
<h1>kbtool calibrate</h1>
<p>{data.get("questions")} questions ({data.get("answerable")} answerable, {data.get("unanswerable")} unanswerable).</p>
{_calibration({"appendix": app}, None, "What calibrate found (the proposal)")}
{f"<ul>{notes}</ul>" if notes else ""}
<h2>calibration.png</h2>
<img src="{src}" alt="Refusal trade-off, P(answerable) by question kind, metric vs fusion weights; with a model, its ROC curve and reliability diagram">
</body></html>
"""
