"""Self-contained HTML reports (inline CSS, SVG and data: images; no scripts or external files),
laid out for a laptop screen: the primary mode's (the contract's) results first, a table of
contents, wide tables scrolling in their own box, the other modes' question lists folded."""

from __future__ import annotations

import base64
from html import escape

from ..contract import RETRIEVER
from .compare import primary_mode
from .metrics import HEADLINE

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"]

CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;padding:1rem 1.5rem 3rem;
max-width:1180px;color:#222}
h1{font-size:1.6rem;margin:.6rem 0 .3rem}
h2{font-size:1.25rem;margin:1.8rem 0 .5rem;padding-top:.6rem;border-top:1px solid #ddd}
h3{font-size:1.02rem;margin:1rem 0 .35rem}
p{margin:.4rem 0}
.meta{color:#555;font-size:.9rem}
nav.toc{background:#f5f6f8;border:1px solid #e2e4e8;border-radius:6px;padding:.45rem .8rem;margin:.8rem 0 0;
font-size:.9rem}
nav.toc a{margin-right:1rem;white-space:nowrap;color:#1a5fb4;text-decoration:none}
nav.toc a:hover{text-decoration:underline}
.wide{overflow-x:auto;max-width:100%;margin:.35rem 0 1rem}
table{border-collapse:collapse;font-size:13.5px;font-variant-numeric:tabular-nums}
td,th{border:1px solid #d4d4d4;padding:3px 8px;text-align:right;vertical-align:top}
td:first-child,th:first-child{text-align:left;white-space:nowrap}
th{background:#f1f2f4;font-weight:600}
table.tags th{text-align:center}table.tags{font-size:13px}table.tags td,table.tags th{padding:3px 5px}
table.tags td:first-child,table.tags th:first-child{position:sticky;left:0;background:#fff}
table.tags th:first-child{background:#f1f2f4}
table.list td,table.list th{text-align:left}
table.list td:nth-child(2){min-width:14rem}
table.mistakes td:last-child{font-size:12px;color:#555;min-width:22rem}
td.pass{color:#1a7f37}td.fail{color:#c62828;font-weight:600}
details{margin:.25rem 0}
summary{cursor:pointer}
summary h3{display:inline;font-size:1rem;font-weight:500}
details[open] summary h3{font-weight:600}
.charts{display:flex;flex-wrap:wrap;gap:12px}
.legend span{margin-right:1.1rem;white-space:nowrap}.legend .primary{font-weight:600}
.row{display:flex;flex-wrap:wrap;gap:0 28px;align-items:flex-start}
svg{border:1px solid #eee;max-width:100%;height:auto}
svg .t{font-size:14px;font-weight:600}svg .a{font-size:12px;fill:#555}svg .l{font-size:12.5px}svg .g{stroke:#eee}
figure{margin:.5rem 0 1.2rem;max-width:100%}figcaption{color:#555;font-size:.9rem;margin:.2rem 0}
img{max-width:100%;height:auto;border:1px solid #eee}
"""


def _page(title: str, heading: str, intro: str, sections: list[tuple[str, str, str]]) -> str:
    """The page: a heading, an intro, a table of contents and the sections ((id, title, html); a
    section without html is left out)."""
    sections = [(sid, t, html) for sid, t, html in sections if html]
    toc = " ".join(f'<a href="#{sid}">{escape(t)}</a>' for sid, t, _ in sections)
    body = "\n".join(f'<section id="{sid}">{html}</section>' for sid, _, html in sections)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title>
<style>{CSS}</style></head><body>
<h1>{escape(heading)}</h1>
{intro}
<nav class="toc" aria-label="Contents"><b>Contents:</b> {toc}</nav>
{body}
</body></html>
"""


def _line_chart(title: str, ks: list[int], series: dict[str, list[float]]) -> str:
    """Metric@K per mode, one colour per mode (``_legend`` names them); the first series (the
    primary mode) drawn thicker and on top."""
    w, h, pad = 372, 240, 36

    xs = {k: pad + 8 + (w - 2 * pad - 16) * (i / max(1, len(ks) - 1)) for i, k in enumerate(ks)}

    def y(v: float) -> float:
        return h - pad - (h - pad - 34) * v

    parts = [f'<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{escape(title)}">',
             f'<text x="{w / 2}" y="20" text-anchor="middle" class="t">{escape(title)}</text>']
    for v in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line x1="{pad}" x2="{w - pad + 8}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="g"/>'
                     f'<text x="{pad - 5}" y="{y(v) + 4:.1f}" text-anchor="end" class="a">{v:g}</text>')
    for k in ks:
        parts.append(f'<text x="{xs[k]:.1f}" y="{h - pad + 20}" text-anchor="middle" class="a">@{k}</text>')
    for i, (mode, values) in reversed(list(enumerate(series.items()))):  # the first drawn last, on top
        color = COLORS[i % len(COLORS)]
        pts = " ".join(f"{xs[k]:.1f},{y(v):.1f}" for k, v in zip(ks, values))
        parts.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="{3 if i == 0 else 1.6}"/>')
        parts += [f'<circle cx="{xs[k]:.1f}" cy="{y(v):.1f}" r="3" fill="{color}"><title>{escape(mode)} @{k}: {v:.3f}</title></circle>'
                  for k, v in zip(ks, values)]
    parts.append("</svg>")
    return "".join(parts)


def _legend(modes: list[str]) -> str:
    """The charts' colours, once for all of them."""
    return '<p class="legend">' + "".join(
        f'<span style="color:{COLORS[i % len(COLORS)]}"{" class=primary" if i == 0 else ""}>&#9473; {escape(m)}</span>'
        for i, m in enumerate(modes)) + "</p>"


def _table(headers: list[str], rows: list[list], cls: str = "", best: bool = False) -> str:
    """A table in its own horizontally scrolling box; ``best``: each row's highest number (after
    the first cell) in bold; ``cls``: the table's class (``list``: rows of questions)."""
    head = "".join(f"<th>{escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in (_bold_best(row) if best else map(_fmt, row))) + "</tr>"
                   for row in rows)
    attr = f' class="{cls}"' if cls else ""
    return _wide(f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def _wide(table: str) -> str:
    return f'<div class="wide">{table}</div>'


def _bold_best(row: list) -> list[str]:
    nums = [v for v in row[1:] if isinstance(v, float)]
    top = max(nums) if len(nums) > 1 else None
    return [_fmt(row[0])] + [f"<b>{_fmt(v)}</b>" if top is not None and v == top else _fmt(v) for v in row[1:]]


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    return escape("" if v is None else str(v))


def _share(n: int, of: int) -> str:
    return f"{n} / {of}" + (f" ({n / of:.1%})" if of else "")


def render_html(data: dict) -> str:
    modes = data["config"]["modes"]
    primary = primary_mode(modes)
    order = [primary, *[m for m in modes if m != primary]]  # the primary mode (the contract) first everywhere
    ks = data["config"]["ks"]
    metrics = data["metrics"]
    names = [f"{b}@{k}" for b in data["config"]["metrics"] for k in ks]
    headline = [n for n in HEADLINE if n in names] or names[:3]
    qs = data["question_set"]
    intro = (f'<p class="meta">{qs["questions"]} questions ({qs["answerable"]} answerable, {qs["unanswerable"]} '
             f'unanswerable) on store <code>{escape(str(data["store"]["path"]))}</code>, model '
             f'<code>{escape(str(data["store"]["model"]))}</code>; level {escape(data["config"]["level"])}; '
             f'{escape(data["created_at"])}; kbtool {escape(data["kbtool_version"])}.</p>{_contract(data.get("contract"))}')
    sections = [
        ("results", f"{primary} results", _primary(data, primary, headline)),
        ("modes", "Modes compared", _modes(data, order, headline, names)),
        ("tags", "By tag", _tags(data, order, headline)),
        ("refusals", "Refusals", _refusals(data, order)),
        ("mistakes", "Refusal mistakes", _mistakes(data.get("mistakes") or {}, primary)),
        ("missed", "Missed", _missed(data.get("missed"), primary)),
        ("reliability", "Reliability", _reliability(data.get("reliability") or {}, primary)),
        ("calibration", "Calibration", _calibration(data.get("calibration"), metrics.get("contract"))),
        ("baseline", "Baseline", _changed(data.get("baseline"), data["per_question"], primary)),
    ]
    return _page(f"kbtool eval: {qs['name']}", f"kbtool eval: {qs['name']}", intro, sections)


def _primary(data: dict, primary: str, headline: list[str]) -> str:
    """The primary mode's headline metrics beside the best single retriever, its refusals, the
    gates and how many questions it missed."""
    m = data["metrics"][primary]
    per = data["fused_vs_best_single"].get(primary)
    if per:
        table = _table(["metric", primary, "best single retriever", "its value", "difference"],
                       [[n, m[n], per[n]["best_single"], per[n]["best_single_value"], f"{per[n]['delta']:+.3f}"]
                        for n in headline])
    else:
        table = _table(["metric", primary], [[n, m[n]] for n in headline])
    parts = [f"<h2>{escape(primary)}: results</h2>", '<div class="row">', table]
    r = data["refusal"].get(primary)
    if r:
        rows = [["unanswerable questions refused (correct)", _share(r["correctly_refused"], r["unanswerable"])],
                ["answerable questions refused (false refusals)", _share(r["wrongly_refused"], r["answerable"])]]
        if "unanswerable_hedged" in r:
            rows.append(["answered with the low-confidence notice (unanswerable / answerable)",
                         f"{r.get('unanswerable_hedged')} / {r.get('answerable_hedged')}"])
        parts.append(_table(["refusals (threshold: " + ("contract" if r["threshold"] is None else f"{r['threshold']:g}")
                             + ")", primary], rows))
    parts.append("</div>")
    if data["gates"]:
        body = "".join(f"<tr><td>{escape(g['spec'])}</td><td>{escape(g.get('op', '>='))} {g['required']:g}</td>"
                       f"<td>{_fmt(g['actual'])}</td><td class=\"{'pass' if g['passed'] else 'fail'}\">"
                       f"{'pass' if g['passed'] else 'FAIL'}</td></tr>" for g in data["gates"])
        parts.append("<h3>Gates</h3>" + _wide("<table><thead><tr><th>gate</th><th>required</th><th>actual</th>"
                                               f"<th>result</th></tr></thead><tbody>{body}</tbody></table>"))
    notes = []
    missed = (data.get("missed") or {}).get("modes", {}).get(primary)
    if missed is not None:
        notes.append(f'<a href="#missed">{len(missed)} of {data["question_set"]["answerable"]} answerable questions</a> '
                     f'with no relevant result in the top {data["missed"]["k"]}')
    mis = (data.get("mistakes") or {}).get(primary)
    if mis:
        notes.append(f'<a href="#mistakes">{len(mis["wrongly_refused"])} wrongly refused, '
                     f'{len(mis["wrongly_answered"])} wrongly answered</a>')
    rel = (data.get("reliability") or {}).get(primary)
    if rel:
        auc = "-" if rel["auc"] is None else f"{rel['auc']:.3f}"
        notes.append(f'decision value ({escape(rel["decided_by"])}) <a href="#reliability">AUC {auc}, calibration '
                     f'error {rel["calibration_error"]:.3f}</a>')
    if notes:
        parts.append(f"<p>{escape(primary)}: " + "; ".join(notes) + ".</p>")
    return "".join(parts)


def _modes(data: dict, order: list[str], headline: list[str], names: list[str]) -> str:
    metrics, ks = data["metrics"], data["config"]["ks"]
    charts = "".join(
        _line_chart(base, ks, {m: [metrics[m][f"{base}@{k}"] for k in ks] for m in order})
        for base in data["config"]["metrics"]
    ) if data["question_set"]["answerable"] else "<p>No answerable question: nothing to plot.</p>"
    div = data.get("diversity") or {}
    spread = [f"distinct@{k}" for k in ks if all(f"distinct@{k}" in div.get(m, {}) for m in order)]
    top = _table(["metric", *order], [[n, *[metrics[m][n] for m in order]] for n in headline], best=True)
    every = _table(["metric", *order], [[n, *[metrics[m][n] for m in order]] for n in names]
                   + [[f"{n} (distinct documents)", *[div[m][n] for m in order]] for n in spread], best=True)
    fused = data["fused_vs_best_single"]
    deltas = ""
    if fused:
        deltas = "<h3>Fused modes against the best single retriever</h3>" + _table(
            ["metric", *[f"{f} (difference, best single)" for f in fused]],
            [[n, *[f"{per[n]['value']:.3f} ({per[n]['delta']:+.3f}, {per[n]['best_single']})" for per in fused.values()]]
             for n in headline])
    return ("<h2>Modes compared</h2><p>Bold: the best mode of a row.</p>" + top
            + f"<details><summary><h3>Every metric@K ({len(names) + len(spread)} rows)</h3></summary>{every}</details>"
            + deltas + f'<h3>Metric@K by mode</h3>{_legend(order)}<div class="charts">{charts}</div>')


def _tags(data: dict, order: list[str], headline: list[str]) -> str:
    """Per tag: its answerable count and each mode's headline metrics, modes as column groups
    (the primary first); a tag of unanswerable questions only: what each mode refused."""
    if not data["by_tag"]:
        return ""
    short = [n.replace("hit_rate", "hit") for n in headline]
    head = ('<tr><th rowspan="2">tag</th><th rowspan="2">n</th>'
            + "".join(f'<th colspan="{len(headline)}">{escape(m)}</th>' for m in order) + "</tr><tr>"
            + "".join(f"<th>{escape(n)}</th>" for _ in order for n in short) + "</tr>")
    rows = []
    for tag, entry in data["by_tag"].items():
        cells = [f"<td>{escape(tag)}</td><td>{entry.get('answerable', 0)}</td>"]  # n: answerable, as the terminal counts
        for m in order:
            if "metrics" in entry:
                values = [entry["metrics"][m][n] for n in headline]
                best = [max(entry["metrics"][o][n] for o in order) for n in headline]
                cells += [f"<td>{'<b>' if len(order) > 1 and v == b else ''}{v:.3f}{'</b>' if len(order) > 1 and v == b else ''}</td>"
                          for v, b in zip(values, best)]
            else:  # a tag of unanswerable questions only: what each mode refused
                r = entry.get("refusal", {}).get(m) or {}
                cells.append(f'<td colspan="{len(headline)}">{r.get("correctly_refused", 0)}/{r.get("unanswerable", 0)} '
                             "refused</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return ("<h2>By tag</h2><p>n: the tag's answerable questions; bold: the best mode of a tag and metric; a tag of "
            "unanswerable questions shows what each mode refused.</p>"
            + _wide(f'<table class="tags"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'))


def _refusals(data: dict, order: list[str]) -> str:
    if not data["refusal"]:
        return ""
    refusal = data["refusal"]
    rows = [[m, "contract" if r["threshold"] is None else r["threshold"], r["unanswerable"], r["correctly_refused"],
             r["answerable"], r["wrongly_refused"], r.get("correct_refusal"), r.get("false_refusal"),
             r.get("unanswerable_hedged"), r.get("answerable_hedged")]
            for m, r in sorted(refusal.items(), key=lambda mr: order.index(mr[0]) if mr[0] in order else len(order))]
    return "<h2>Refusals</h2>" + _table(
        ["mode", "threshold", "unanswerable", "correctly refused", "answerable", "wrongly refused", "correct_refusal",
         "false_refusal", "low confidence: unanswerable", "low confidence: answerable"], rows)


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


def _first(per_mode: dict, primary: str) -> list[str]:
    return [m for m in per_mode if m == primary] + [m for m in per_mode if m != primary]


def _fold(open_: bool, heading: str, body: str) -> str:
    """The primary mode's list open under its heading; another mode's folded (``<details>``)."""
    if open_:
        return f"<h3>{heading}</h3>{body}"
    return f"<details><summary><h3>{heading}</h3></summary>{body}</details>"


def _mistakes(per_mode: dict, primary: str | None = None) -> str:
    """Per mode, the answerable questions refused and the unanswerable ones answered: the primary
    mode's first and open, the others' folded."""
    parts = []
    for mode in _first(per_mode, primary):
        mis = per_mode[mode]
        for key, label in (("wrongly_refused", "answerable questions refused"),
                           ("wrongly_answered", "unanswerable questions answered")):
            rows = [[x["id"], x["question"], x["decision"], x["confidence"], x["top_doc"], _signals(x["signals"])]
                    for x in mis[key]]
            if rows:
                parts.append(_fold(mode == primary, f"{escape(mode)}: {len(rows)} {label}",
                                   _table(["id", "question", "decision", "confidence", "top document", "signals"],
                                          rows, "list mistakes")))
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
    parts.append('<div class="row">')
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
        if th.get("overall"):
            o = th["overall"]
            rows.append(["all questions", "", "", o["false_answer"], o["false_refusal"]])
        parts.append(_table(["tier", "answer", "refuse below", "false answers", "false refusals"], rows))
    recorded = (app.get("recorded") or {}).get("metrics") or {}
    if recorded and now is None:  # calibrate's own report, or an eval without the contract mode
        parts.append(_table(["metric", "recorded at calibration"], [[m, v] for m, v in recorded.items()]))
    elif recorded:
        parts.append(_table(["metric", "recorded at calibration", "this run (contract)"],
                            [[m, v, now.get(m)] for m, v in recorded.items()]))
    parts.append("</div>")
    return "".join(parts)


def _missed(missed: dict | None, primary: str | None = None) -> str:
    """Per mode, the answerable questions with no relevant result in the top K (``missed``): the
    primary mode's open, the others' folded."""
    if not missed:
        return ""
    k = missed["k"]
    parts = [f"<h2>Answerable questions with no relevant result in the top {k}</h2>"]
    for mode in _first(missed["modes"], primary):
        rows = missed["modes"][mode]
        table = _table(["id", "question", "tags", "first relevant rank", "top document"],
                       [[x["id"], x["question"], ", ".join(x["tags"]), x["first_relevant_rank"], x["top_doc"]]
                        for x in rows], "list") if rows else ""
        heading = f"{escape(mode)}: {len(rows)} missed"
        parts.append(_fold(mode == primary or not rows, heading, table))
    return "".join(parts)


def _changed(baseline: dict | None, per_question: list[dict], primary: str | None = None) -> str:
    """Against ``--baseline``, per mode: the questions better or worse on the compared metric, and
    those newly wrongly refused or answered and those fixed (the primary mode's open)."""
    if not baseline or not baseline.get("modes"):
        return ""
    text = {q["id"]: q["question"] for q in per_question}
    parts = []
    for mode in _first(baseline["modes"], primary):
        entry = baseline["modes"][mode]
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
        heading = f"{escape(mode)}: {'; '.join(counts) or 'nothing compared'}"
        parts.append(_fold(mode == primary or not rows, heading,
                           _table(["id", "question", "change"], rows, "list") if rows else ""))
    compared = baseline.get("questions_compared")
    head = "<h2>Questions that changed against the baseline</h2>"
    if compared is not None:
        head += f"<p>{compared} answerable questions compared.</p>"
    return head + "".join(parts)


def _reliability(rel: dict, primary: str) -> str:
    """The decision value against the share of answerable questions, per mode (``reliability``)."""
    if not rel:
        return ""
    # The primary mode first: the first colour, the top of the legend and the table's first row.
    order = [primary] + [m for m in rel if m != primary] if primary in rel else list(rel)
    table = _table(["mode", "decision value", "questions", "AUC", "Brier", "calibration error"],
                   [[m, rel[m]["decided_by"], rel[m]["questions"], rel[m]["auc"], rel[m]["brier"],
                     rel[m]["calibration_error"]] for m in order])
    chart = _reliability_chart("Reliability diagram: decision value vs share answerable",
                               {m: rel[m]["reliability"] for m in order})
    return ("<h2>Calibration of the decision value (this run)</h2>"
            "<p>Questions binned by their decision value (P(answerable), or without decide.model the top hit's "
            "confidence); each point is a bin's mean value against the share of its questions that are answerable "
            "(hover: the count). On the diagonal, the value means what it says.</p>" + chart + table)


def _reliability_chart(title: str, series: dict[str, list[dict]]) -> str:
    w, h, pad, legend = 640, 420, 56, 150
    side = min(w - 2 * pad - legend, h - 2 * pad)

    def x(v: float) -> float:
        return pad + side * v

    def y(v: float) -> float:
        return h - pad - side * v

    parts = [f'<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{escape(title)}" '
             f'class="reliability">',
             f'<text x="{w / 2}" y="26" text-anchor="middle" class="t">{escape(title)}</text>']
    for v in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line x1="{x(0)}" x2="{x(1)}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="g"/>'
                     f'<text x="{pad - 6}" y="{y(v) + 4:.1f}" text-anchor="end" class="a">{v:g}</text>'
                     f'<text x="{x(v):.1f}" y="{h - pad + 18}" text-anchor="middle" class="a">{v:g}</text>')
    parts.append(f'<line x1="{x(0)}" y1="{y(0)}" x2="{x(1)}" y2="{y(1)}" stroke="#999" stroke-dasharray="3,3"/>')
    parts.append(f'<text x="{x(0.5)}" y="{h - 14}" text-anchor="middle" class="a">decision value (bin mean)</text>')
    parts.append(f'<text x="16" y="{y(0.5)}" text-anchor="middle" class="a" '
                 f'transform="rotate(-90 16 {y(0.5)})">share answerable</text>')
    for i, (mode, bins) in reversed(list(enumerate(series.items()))):  # the first drawn last, on top
        color = COLORS[i % len(COLORS)]
        pts = " ".join(f"{x(b['predicted']):.1f},{y(b['observed']):.1f}" for b in bins)
        if len(bins) > 1:
            parts.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="{3 if i == 0 else 1.6}"/>')
        parts += [f'<circle cx="{x(b["predicted"]):.1f}" cy="{y(b["observed"]):.1f}" r="3.5" fill="{color}">'
                  f'<title>{escape(mode)}: {b["count"]} questions, value {b["predicted"]:.3f}, '
                  f'answerable {b["observed"]:.3f}</title></circle>' for b in bins]
        bold = ' font-weight="600"' if i == 0 else ""
        parts.append(f'<text x="{x(1) + 18}" y="{y(1) + 12 + 18 * i}" class="l" fill="{color}"{bold}>'
                     f"{escape(mode)}</text>")
    parts.append("</svg>")
    return "".join(parts)


def render_calibration_html(data: dict, figures: list[tuple[str, str, str, bytes]]) -> str:
    """calibrate's report.html: what the calibration found (``_calibration``'s tables), its plots
    ((file name, title, caption, PNG bytes), ``outputs.calibration_figures``), each embedded as a
    data: URI so the page stands alone, its notes, and the questions its thresholds decide wrongly
    (folded)."""
    app = data.get("appendix") or {}
    intro = (f'<p class="meta">{data.get("questions")} questions ({data.get("answerable")} answerable, '
             f'{data.get("unanswerable")} unanswerable); objective {escape(str(data.get("objective")))}.</p>')
    plots = "".join(
        f'<figure style="width:{int.from_bytes(png[16:20], "big")}px">'  # the PNG's width (IHDR): captions wrap to it
        f'<img src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}" alt="{escape(title)}">'
        f"<figcaption>{escape(caption)} <code>{escape(name)}</code></figcaption></figure>"
        for name, title, caption, png in figures)
    notes = "".join(f"<li>{escape(str(n))}</li>" for n in data.get("notes") or [])
    mis = (data.get("answerability") or {}).get("mistakes") or {}
    wrong = "".join(
        _fold(False, f"{len(mis[key])} {label}", _table(["id", "question", "value"],
                                                         [[x["id"], x["question"], x["value"]] for x in mis[key]],
                                                         "list"))
        for key, label in (("wrongly_refused", "answerable questions refused"),
                           ("wrongly_answered", "unanswerable questions answered")) if mis.get(key))
    sections = [
        ("proposal", "Proposal", _calibration({"appendix": app}, None, "What calibrate found (the proposal)")),
        ("plots", "Plots", f'<h2>Plots</h2><div class="row">{plots}</div>' if plots else ""),
        ("notes", "Notes", f"<h2>Notes</h2><ul>{notes}</ul>" if notes else ""),
        ("mistakes", "Threshold mistakes",
         "<h2>Questions the thresholds decide wrongly</h2><p>On the values the thresholds were chosen on "
         f"(out of fold with a model).</p>{wrong}" if wrong else ""),
    ]
    return _page("kbtool calibrate", "kbtool calibrate", intro, sections)
