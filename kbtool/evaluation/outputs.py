"""Files a run leaves behind: eval's summary.json, per-question CSV, TREC runs and qrels and HTML
report; calibrate's calibration.json, its plots (calibration*.png) and report.html. Writers
only: every number is already in the report or result they are given.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import InputError
from .questions import trec_id, write_trec_qrels
from .report import render_calibration_html, render_html


def write_report(report, out_dir: Path) -> list[Path]:
    """summary.json, per_question.csv, run.<mode>.trec, qrels.trec and report.html."""
    import pandas as pd

    out_dir.mkdir(parents=True, exist_ok=True)
    data = report.to_dict()
    written = []
    summary = out_dir / "summary.json"
    _write(summary, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    written.append(summary)

    rows = []
    for r in report.results:
        for mode, mr in r.modes.items():
            rows.append({"id": r.question.id, "question": r.question.question, "tags": ";".join(r.question.tags),
                         "answerable": r.question.answerable, "level": r.level, "mode": mode,
                         "first_relevant_rank": mr.first_relevant_rank, "top_score": mr.top_score,
                         "top_doc": mr.top_doc, "refused": mr.refused, "decision": mr.decision,
                         **mr.metrics})
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
    _write(html, render_html(data))
    written.append(html)
    return written


def _write(path: Path, text: str) -> None:
    """Atomically (never a 0-byte file left by a failed write); a lone surrogate (from a file name or
    JSON escape) is written as its escape, \\udXXX, which JSON reads back as the same string."""
    from ..store.files import write_text

    write_text(path, text, errors="backslashreplace")


def _safe(mode: str) -> str:
    return re.sub(r"[^\w.-]+", "-", mode)


def write_calibration(result, out_dir) -> list[Path]:
    """calibration.json (everything); one PNG per plot (``calibration_figures``): calibration.png
    (the refusal trade-off per tier, its chosen point on its curve), calibration-scores.png,
    calibration-weights.png and, with an answerability model, calibration-roc.png and
    calibration-reliability.png; and report.html (the calibration's tables with every plot
    embedded: one file to open or send)."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        js = out_dir / "calibration.json"
        data = result.to_dict()
        _write(js, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        pngs, figures = [], []
        for name, title, caption, fig in calibration_figures(data):
            path = out_dir / name
            fig.savefig(path, dpi=DPI)
            pngs.append(path)
            figures.append((name, title, caption, path.read_bytes()))
        html = out_dir / "report.html"
        _write(html, render_calibration_html(data, figures))
    except OSError as exc:
        raise InputError(f"{out_dir}: cannot write ({exc.strerror})") from None
    return [js, *pngs, html]


DPI = 100
SIZE = (9, 5)  # inches: 900 x 500 px at DPI, as report.html shows them (its column is 1180 px)
SMALL = (5.6, 4.6)  # two side by side


def _figure(title: str, size=SIZE):
    """A figure of its own (no pyplot state), fonts readable at 900 px."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=14)
    ax.grid(True, color="#e5e5e5")
    ax.set_axisbelow(True)
    return fig, ax


def _style():
    import matplotlib

    return matplotlib.rc_context({"font.size": 11, "axes.labelsize": 12, "legend.fontsize": 10.5,
                                  "xtick.labelsize": 10.5, "ytick.labelsize": 10.5})


def chosen_point(curve: list[dict], threshold: float) -> dict:
    """The row of a tier's trade-off curve at its chosen refuse-below threshold (``tradeoff_curves``
    puts it there): the marker drawn is a point of the curve drawn."""
    return next(r for r in curve if r["threshold"] == threshold)


def calibration_figures(data: dict) -> list[tuple[str, str, str, object]]:
    """calibrate's plots from its result (``CalibrationResult.to_dict()``, calibration.json), one
    matplotlib figure each: (file name, title, caption, figure)."""
    with _style():
        out = [("calibration.png", *_tradeoff(data)), ("calibration-scores.png", *_scores(data)),
               ("calibration-weights.png", *_weights(data))]
        a = data.get("answerability") or {}
        if a.get("fitted"):
            out += [("calibration-roc.png", *_roc(a)), ("calibration-reliability.png", *_reliability(a))]
    return out


def _percent(ax) -> None:
    from matplotlib.ticker import PercentFormatter

    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))


def _tradeoff(data: dict):
    """False answers against false refusals over refuse-below thresholds: per tier, its own
    questions' curve, and the threshold chosen for it as a point of that curve."""
    title = "Refusal trade-off over refuse-below thresholds, per tier"
    fig, ax = _figure(title, (9, 5.6))
    th = data.get("thresholds")
    curves = data.get("threshold_curves") or {}
    if th and curves:
        for i, (name, curve) in enumerate(curves.items()):
            t = th["default"] if name == "default" else th["tiers"][name]
            who = "all questions" if name == "default" and len(curves) == 1 else f"{name} tier"
            ax.plot([r["false_refusal"] for r in curve], [r["false_answer"] for r in curve], marker=".", color=f"C{i}",
                    label=f"{who} ({t['answerable']} answerable, {t['unanswerable']} unanswerable)")
            p = chosen_point(curve, t["low_confidence"])
            ax.scatter([p["false_refusal"]], [p["false_answer"]], s=120, color=f"C{i}", edgecolors="black",
                       zorder=3, label=f"chosen for the {who}: refuse below {p['threshold']:.3f} "
                                       f"({p['false_refusal']:.1%} false refusals, {p['false_answer']:.1%} false answers)")
        caption = ("Each curve is one tier's own questions under every refuse-below threshold; the large dot on it "
                   "is the threshold calibrate chose for that tier, at the rates the thresholds table reports. A "
                   "question without evidence of absence is never refused, which caps the false refusals.")
        worst = max(r["false_refusal"] for c in curves.values() for r in c)
    else:
        table = data.get("threshold_table") or []
        ax.plot([r["false_refusal"] for r in table], [r["false_answer"] for r in table], marker=".",
                label="all questions (no threshold proposed)")
        caption = "Every question under one refuse-below threshold (0, 0.05, ..., 1); no threshold was proposed."
        worst = max((r["false_refusal"] for r in table), default=1.0)
    ax.set_xlabel("false refusals (answerable questions refused)")
    ax.set_ylabel("false answers (unanswerable questions answered)")
    right = max(0.02, worst) * 1.06  # the curves' own range: often a few percent when evidence is needed to refuse
    ax.set_xlim(-right * 0.04, right)
    ax.set_ylim(-0.03, 1.03)
    _percent(ax)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=1, frameon=False)
    return title, caption, fig


def _scores(data: dict):
    a = data.get("answerability") or {}
    fitted = bool(a.get("fitted"))
    probability = fitted or a.get("decided_by") == "P(answerable)"  # a fitted model, or the contract's kept one
    value = "P(answerable)" if probability else "top confidence"
    title = f"{value} of answerable and unanswerable questions"
    fig, ax = _figure(title)
    bins = [i / 20 for i in range(21)]
    dist = data["distributions"]
    ax.hist(dist["answerable"], bins=bins, alpha=0.6, label=f"answerable ({len(dist['answerable'])})")
    ax.hist(dist["unanswerable"], bins=bins, alpha=0.6, label=f"unanswerable ({len(dist['unanswerable'])})")
    th = data.get("thresholds")
    if th:
        for i, (name, t) in enumerate([("default", th["default"]), *th["tiers"].items()]):
            ax.axvline(t["low_confidence"], color=f"C{i + 2}", linestyle="--",
                       label=f"refuse below, {name} tier: {t['low_confidence']:.3f}")
    ax.set_xlabel(f"{value}, out of fold" if fitted else value)
    ax.set_ylabel("questions")
    ax.set_xlim(0, 1)
    ax.legend(loc="upper left")
    return title, "Questions binned by the value the thresholds compare; dashed: each tier's refuse-below threshold.", fig


def _weights(data: dict):
    curves = data.get("weight_curves") or {}
    objective = data.get("objective")
    if all("profiles" not in c for c in curves.values()):  # dense + bm25: the curve along the dense weight
        title = f"{objective} vs dense weight, per question type"
        fig, ax = _figure(title)
        for g, curve in curves.items():
            ax.plot(curve["weights"], curve["metric"], marker=".", label=f"{g} (n={curve['count']})")
        ax.set_xlabel("dense weight (bm25: 1 - dense)")
        caption = "Each question type's objective as the dense weight goes from 0 (bm25 alone) to 1."
    else:  # more retrievers: per type (colour) and retriever (line style), the best metric at each weight
        title = f"Best {objective} vs each retriever's weight, per question type"
        fig, ax = _figure(title)
        styles = ["-", "--", ":", "-."]
        for gi, (g, curve) in enumerate(curves.items()):
            for ri, (r, prof) in enumerate(curve["profiles"].items()):
                ax.plot(prof["weights"], prof["metric"], marker=".", color=f"C{gi}",
                        linestyle=styles[ri % len(styles)], label=f"{g} (n={curve['count']}): {r}")
        ax.set_xlabel("weight of the retriever (the others at their best)")
        caption = ("Colour: question type; line style: retriever. Each point is the best objective with that "
                   "retriever at that weight, the others' weights chosen at their best.")
    ax.set_ylabel(objective)
    if curves:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=9.5)
    return title, caption, fig


def _roc(a: dict):
    title = "ROC of P(answerable), out of fold"
    fig, ax = _figure(title, SMALL)
    roc = a["roc"]
    auc = a["oof"]["auc"]
    ax.plot([p[0] for p in roc], [p[1] for p in roc], marker=".", label="model" + ("" if auc is None else f", AUC {auc:.3f}"))
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":", label="chance")
    ax.set_xlabel("unanswerable questions answered (false positive rate)")
    ax.set_ylabel("answerable questions answered (true positive rate)")
    ax.legend(loc="lower right")
    return title, "Each question scored by a model fitted without it.", fig


def _reliability(a: dict):
    title = "Reliability of P(answerable), out of fold"
    fig, ax = _figure(title, SMALL)
    rel = a["oof"]["reliability"]
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":", label="perfectly calibrated")
    ax.plot([r["predicted"] for r in rel], [r["observed"] for r in rel], marker="o",
            label=f"calibration error {a['oof']['calibration_error']:.3f}")
    for r in rel:
        ax.annotate(str(r["count"]), (r["predicted"], r["observed"]), textcoords="offset points", xytext=(5, -12),
                    fontsize=9.5)
    ax.set_xlabel("predicted P(answerable)")
    ax.set_ylabel("share answerable")
    ax.legend(loc="lower right")
    return title, "Questions binned by predicted P(answerable); numbers: questions per bin.", fig
