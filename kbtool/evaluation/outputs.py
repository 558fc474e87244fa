"""Files a run leaves behind: eval's summary.json, per-question CSV, TREC runs and qrels and HTML
report; calibrate's calibration.json, calibration.png and report.html. Writers only: every number is already
in the report or result they are given.
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
    """calibration.json (everything), calibration.png (trade-off, distributions, weight curves;
    with an answerability model, its ROC curve and reliability diagram) and report.html (the
    calibration's tables with calibration.png embedded: one file to open or send)."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        js = out_dir / "calibration.json"
        data = result.to_dict()
        _write(js, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        png = out_dir / "calibration.png"
        plot_calibration(result, png)
        html = out_dir / "report.html"
        _write(html, render_calibration_html(data, png.read_bytes()))
    except OSError as exc:
        raise InputError(f"{out_dir}: cannot write ({exc.strerror})") from None
    return [js, png, html]


def plot_calibration(result, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a = getattr(result, "answerability", None) or {}
    fitted = bool(a.get("fitted"))
    fig, axes = plt.subplots(1, 5 if fitted else 3, figsize=(25 if fitted else 15, 4.5))
    ax = axes[0]
    table = result.threshold_table
    ax.plot([r["false_refusal"] for r in table], [r["false_answer"] for r in table], marker=".")
    if result.thresholds:
        d = result.thresholds["default"]
        ax.scatter([d["false_refusal"]], [d["false_answer"]], color="red", zorder=3,
                   label=f"chosen: refuse below {d['low_confidence']:.3f}")
        ax.legend()
    ax.set_xlabel("false refusals (answerable refused)")
    ax.set_ylabel("false answers (unanswerable answered)")
    ax.set_title("Refusal trade-off over thresholds")
    ax = axes[1]
    bins = [i / 20 for i in range(21)]
    ax.hist(result.distributions["answerable"], bins=bins, alpha=0.6, label="answerable")
    ax.hist(result.distributions["unanswerable"], bins=bins, alpha=0.6, label="unanswerable")
    probability = fitted or a.get("decided_by") == "P(answerable)"  # a fitted model, or the contract's kept one
    ax.set_xlabel("P(answerable), out of fold" if fitted else "P(answerable)" if probability else "top confidence")
    ax.set_title(f"{'P(answerable)' if probability else 'Confidence'} by question kind")
    ax.legend()
    ax = axes[2]
    curves = result.weight_curves
    if all("profiles" not in c for c in curves.values()):  # dense + bm25: the curve along the dense weight
        for g, curve in curves.items():
            ax.plot(curve["weights"], curve["metric"], marker=".", label=f"{g} (n={curve['count']})")
        ax.set_xlabel("dense weight")
        ax.set_title("Metric vs dense weight, per question type")
    else:  # more retrievers: per type (colour) and retriever (line style), the best metric at each weight
        styles = ["-", "--", ":", "-."]
        for gi, (g, curve) in enumerate(curves.items()):
            for ri, (r, prof) in enumerate(curve["profiles"].items()):
                ax.plot(prof["weights"], prof["metric"], marker=".", color=f"C{gi}", linestyle=styles[ri % len(styles)],
                        label=f"{g} (n={curve['count']}): {r}")
        ax.set_xlabel("weight of the retriever (the others at their best)")
        ax.set_title("Best metric vs each retriever's weight, per question type", fontsize=10)
    ax.set_ylabel(result.objective)
    ax.legend(fontsize=8)
    if fitted:
        ax = axes[3]
        roc = a["roc"]
        ax.plot([p[0] for p in roc], [p[1] for p in roc], marker=".", label="model" + ("" if a["oof"]["auc"] is None else f", AUC {a['oof']['auc']:.3f}"))
        ax.plot([0, 1], [0, 1], color="grey", linestyle=":")
        ax.set_xlabel("unanswerable questions answered (false positive rate)")
        ax.set_ylabel("answerable questions answered (true positive rate)")
        ax.set_title("ROC of P(answerable), out of fold")
        ax.legend(loc="lower right")
        ax = axes[4]
        rel = a["oof"]["reliability"]
        ax.plot([0, 1], [0, 1], color="grey", linestyle=":", label="perfectly calibrated")
        ax.plot([r["predicted"] for r in rel], [r["observed"] for r in rel], marker="o",
                label=f"calibration error {a['oof']['calibration_error']:.3f}")
        for r in rel:
            ax.annotate(str(r["count"]), (r["predicted"], r["observed"]), textcoords="offset points", xytext=(4, -10),
                        fontsize=8)
        ax.set_xlabel("predicted P(answerable), out of fold")
        ax.set_ylabel("share answerable (numbers: questions per bin)")
        ax.set_title("Reliability diagram")
        ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
