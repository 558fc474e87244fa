"""eval's report.html: the reliability diagram inline, the questions that failed and the
ones that changed against a baseline, with the counts of the terminal and --json."""

import json
import re

from typer.testing import CliRunner

from kbtool.cli import app
from kbtool.evaluation.evaluate import EvalConfig, evaluate
from kbtool.evaluation.questions import load_questions
from kbtool.evaluation.report import render_html

from .conftest import ROOT

SAMPLE_SET = ROOT / "eval_sets" / "sample.jsonl"
runner = CliRunner()
MODES = "bm25,contract"


def _eval(store, *extra):
    return runner.invoke(app, ["eval", str(SAMPLE_SET), "--store", str(store.path), "-q", "--modes", MODES,
                               "--k", "1,5,10", *extra])


def test_report_html_embeds_the_plot_lists_failures_and_changes(sample_store, tmp_path):
    r = _eval(sample_store, "--json", "--out", str(tmp_path / "first"))
    assert r.exit_code == 0, r.output
    first = json.loads(r.stdout)

    # A baseline that differs: two questions scored perfectly before (now worse), two scored 0
    # before (now better), and one answerable question's decision flipped.
    base = json.loads((tmp_path / "first" / "summary.json").read_text())
    answerable = [q for q in base["per_question"] if q["answerable"]]
    imperfect = [q for q in answerable if q["modes"]["contract"]["metrics"]["ndcg@10"] < 1][:2]
    found = [q for q in answerable if q["modes"]["contract"]["metrics"]["ndcg@10"] > 0 and q not in imperfect][:2]
    for q in imperfect:
        q["modes"]["contract"]["metrics"] = {k: 1.0 for k in q["modes"]["contract"]["metrics"]}
    for q in found:
        q["modes"]["contract"]["metrics"] = {k: 0.0 for k in q["modes"]["contract"]["metrics"]}
    flipped = answerable[-1]
    flipped["modes"]["contract"]["refused"] = not flipped["modes"]["contract"]["refused"]
    (tmp_path / "base.json").write_text(json.dumps(base))

    out = tmp_path / "out"
    r = _eval(sample_store, "--json", "--out", str(out), "--baseline", str(tmp_path / "base.json"))
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    html = (out / "report.html").read_text(encoding="utf-8")
    assert data["metrics"] == first["metrics"]

    # The plot is in the file: an inline SVG reliability diagram, no external image.
    assert re.search(r'<svg[^>]*aria-label="Reliability diagram[^"]*"[^>]*class="reliability"', html)
    assert "<circle" in html.split('class="reliability"')[1].split("</svg>")[0]
    assert not re.search(r'<img[^>]+src="(?!data:)', html)
    rel = data["reliability"]["contract"]
    assert rel["questions"] == data["question_set"]["questions"] == sum(b["count"] for b in rel["reliability"])

    # Failed questions, per mode, with the JSON's counts.
    k = data["missed"]["k"]
    assert k == 5
    for mode in ("bm25", "contract"):
        missed = data["missed"]["modes"][mode]
        hit = data["metrics"][mode][f"hit_rate@{k}"]
        assert len(missed) == round(data["question_set"]["answerable"] * (1 - hit))
        assert f"<h3>{mode}: {len(missed)} missed</h3>" in html
        mis = data["mistakes"][mode]
        for key, label in (("wrongly_refused", "answerable questions refused"),
                           ("wrongly_answered", "unanswerable questions answered")):
            if mis[key]:
                assert f"<h3>{mode}: {len(mis[key])} {label}</h3>" in html
        for x in missed + mis["wrongly_refused"] + mis["wrongly_answered"]:
            assert f"<td>{x['id']}</td>" in html

    # Questions that changed against the baseline, with the JSON's counts.
    entry = data["baseline"]["modes"]["contract"]
    assert {q["id"] for q in imperfect} <= set(entry["worse"])
    assert {q["id"] for q in found} <= set(entry["better"])
    ref = entry["refusal"]
    changed = ref["wrongly_refused"]["new"] + ref["wrongly_refused"]["fixed"]
    assert changed == [flipped["id"]]
    assert (f"{len(entry['better'])} better, {len(entry['worse'])} worse on ndcg@10; wrongly refused: "
            f"{len(ref['wrongly_refused']['new'])} new, {len(ref['wrongly_refused']['fixed'])} fixed") in html
    for qid in entry["better"] + entry["worse"] + changed:
        assert f"<td>{qid}</td>" in html

    # The terminal says the same numbers.
    r = _eval(sample_store, "--baseline", str(tmp_path / "base.json"))
    assert r.exit_code == 0, r.output
    term = " ".join(r.stdout.split())
    assert f"{len(entry['better'])} better" in term and f"{len(entry['worse'])} worse" in term
    for mode in ("bm25", "contract"):
        n = len(data["missed"]["modes"][mode])
        if n:
            assert f"{mode}: {n} of {data['question_set']['answerable']} answerable with no relevant result in the top 5" in term
    assert f"{rel['questions']} questions: AUC {rel['auc']:.3f}, calibration error {rel['calibration_error']:.3f}" in term


def test_missed_uses_the_largest_k_without_5_and_the_renderer_only_reads(sample_store, retriever):
    qs = load_questions(SAMPLE_SET)
    report = evaluate(sample_store, qs, EvalConfig(modes=["bm25"], ks=[1, 3], metrics=["hit_rate"]),
                      retriever=retriever)
    data = report.to_dict()
    assert data["missed"]["k"] == 3
    assert len(data["missed"]["modes"]["bm25"]) == round(len(report.answerable()) * (1 - data["metrics"]["bm25"]["hit_rate@3"]))
    # Whatever the JSON says is what the page shows: change the data, the page follows.
    data["missed"]["modes"]["bm25"] = data["missed"]["modes"]["bm25"][:1]
    assert "<h3>bm25: 1 missed</h3>" in render_html(data)
