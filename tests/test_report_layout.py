"""report.html laid out for a laptop screen: the contract's results first, a table of contents,
every table in a box that scrolls sideways, the other modes' question lists folded; calibrate's
plots one figure each, each tier's chosen threshold a point of its own curve; and, in a real
browser (chromium, when installed), no page wider than a 1280 px window."""

import json
import re
import shutil
import subprocess
from types import SimpleNamespace as NS

import pytest

from kbtool.contract import default_contract, load_contract
from kbtool.evaluation.evaluate import EvalConfig, evaluate
from kbtool.evaluation.outputs import calibration_figures, chosen_point
from kbtool.evaluation.questions import load_questions
from kbtool.evaluation.report import render_html
from kbtool.evaluation.thresholds import choose_thresholds, tradeoff_curves
from kbtool.ingestion.pipeline import ingest
from kbtool.store import Store

from .conftest import write

TOPICS = ["the agent stops syncing after a network timeout", "a refund is available within seven days",
          "storage quota is full and uploads fail", "the proxy replaces the TLS certificate",
          "two people edited the same file and a conflict copy was kept", "the license key was rejected"]
MODES = ["bm25", "dense", "hybrid", "rrf:60", "weighted:0.3", "weighted:0.7", "contract"]


@pytest.fixture(scope="module")
def report_data(tmp_path_factory, fake_embedder):
    """eval's JSON on a small store (the fake embedder), seven modes: a By tag table wider than
    the page, and refusal mistakes of the contract and of another mode."""
    base = tmp_path_factory.mktemp("layout")
    rows = []
    for i, topic in enumerate(TOPICS):
        code = f"TW-E{1000 + i}"
        write(base / "docs" / f"doc{i}.md", f"# Error {code}\n\nError {code} means {topic}. Restart the agent and "
                                            f"try again; if {code} stays, contact support.\n")
        rows.append({"id": f"id{i}", "question": f"What does {code} mean?", "relevant": [f"doc{i}.md"],
                     "tags": ["exact-id"]})
        rows.append({"id": f"p{i}", "question": f"why does it say {topic.split(' ', 2)[2]}?",
                     "relevant": [f"doc{i}.md"], "tags": ["paraphrase", "a-tag-name-long-enough-not-to-wrap"]})
    for i, q in enumerate(["How do I pay with PayPal?", "Is there a dark mode?", "Where is the office in Oslo?",
                           "Can I print invoices in Klingon?", "What does TW-E9999 mean?"]):
        rows.append({"id": f"u{i}", "question": q, "relevant": [], "tags": ["unanswerable"]})
    path = write(base / "q.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    store = Store.open(base / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(store, [base / "docs"], embedder=fake_embedder).failed
    # thresholds that make mistakes: the contract refuses an answerable question, dense answers an unanswerable one
    contract = load_contract(None, ["decide.refuse.needs_evidence=false", "decide.thresholds.low_confidence=0.9",
                                    "decide.thresholds.answer=0.95"], search=False)
    report = evaluate(store, load_questions(path), EvalConfig(modes=MODES, ks=[1, 5, 10], thresholds={"dense": 0.5}),
                      contract=contract, embedder=fake_embedder)
    return report.to_dict()


def _sections(html: str) -> list[tuple[str, str]]:
    return re.findall(r'<section id="([^"]+)">(.*?)</section>', html, flags=re.S)


def test_the_contracts_results_come_first_and_every_section_is_in_the_contents(report_data):
    html = render_html(report_data)
    sections = _sections(html)
    assert sections[0][0] == "results" and sections[0][1].startswith("<h2>contract: results</h2>")
    toc = re.search(r'<nav class="toc".*?</nav>', html, flags=re.S).group(0)
    assert re.findall(r'href="#([^"]+)"', toc) == [sid for sid, _ in sections]  # in page order, none missing
    # the contract's column first in the tables of every mode, its row first in the refusals
    modes = dict(sections)["modes"]
    assert re.search(r"<thead><tr><th>metric</th><th>contract</th><th>bm25</th>", modes)
    assert re.search(r"<tbody><tr><td>contract</td>", dict(sections)["refusals"])
    assert re.search(r'<th colspan="3">contract</th><th colspan="3">bm25</th>', dict(sections)["tags"])
    # self-contained: inline CSS, no script, no external file
    assert "<style>" in html and "<script" not in html and "<link" not in html
    assert not re.search(r'\bsrc="(?!data:)', html)


def test_every_table_scrolls_in_its_own_box(report_data):
    html = render_html(report_data)
    assert html.count("<table") >= 6
    assert html.count("<table") == len(re.findall(r'<div class="wide"><table[ >]', html))
    assert ".wide{overflow-x:auto" in html


def test_the_other_modes_mistakes_are_folded_after_the_contracts(report_data):
    data = report_data
    html = render_html(data)
    mistakes = dict(_sections(html))["mistakes"]
    headings = re.findall(r"(<details><summary>)?<h3>(\S+): (\d+) (answerable|unanswerable)", mistakes)
    listed = [(mode, bool(folded)) for folded, mode, _, _ in headings]
    others = [m for m in data["mistakes"] if m != "contract"
              and (data["mistakes"][m]["wrongly_refused"] or data["mistakes"][m]["wrongly_answered"])]
    assert others, "no other mode made a mistake: nothing would be folded"
    assert listed[0] == ("contract", False)  # the contract's list first, open
    assert all(folded == (mode != "contract") for mode, folded in listed)
    first_other = next(i for i, (mode, _) in enumerate(listed) if mode != "contract")
    assert all(mode != "contract" for mode, _ in listed[first_other:])
    assert {mode for mode, _ in listed} == {"contract", *others}
    # the same holds for the questions each mode missed
    missed = dict(_sections(html))["missed"]
    for mode in MODES:
        rows = data["missed"]["modes"][mode]
        h = f"<h3>{mode}: {len(rows)} missed</h3>"
        assert h in missed and (f"<details><summary>{h}" in missed) == (mode != "contract" and bool(rows))


def _tiered_questions():
    """Hand-made P(answerable) values: an identifier tier and a default tier with their own spread."""
    items = []
    for i in range(12):  # identifier: answerable high, unanswerable low, one of each overlapping
        items.append(NS(q=NS(answerable=True, id=f"ia{i}"), types={"identifier"}, tags=[]))
    for i in range(6):
        items.append(NS(q=NS(answerable=False, id=f"iu{i}"), types={"identifier"}, tags=[]))
    for i in range(30):
        items.append(NS(q=NS(answerable=True, id=f"oa{i}"), types={"other"}, tags=[]))
    for i in range(10):
        items.append(NS(q=NS(answerable=False, id=f"ou{i}"), types={"other"}, tags=[]))
    conf, evidence = {}, {}
    for k, it in enumerate(items):
        spread = (k * 37 % 100) / 100
        conf[id(it)] = round(0.55 + 0.45 * spread if it.q.answerable else 0.05 + 0.6 * spread, 4)
        evidence[id(it)] = "named" if k % 7 else None  # some questions without evidence: never refused
    return items, conf, evidence


def test_each_tiers_chosen_point_is_a_point_of_its_own_curve():
    from matplotlib.collections import PathCollection

    items, conf, evidence = _tiered_questions()
    contract = default_contract()
    thresholds, table, _ = choose_thresholds(contract, items, conf, None, None, evidence)
    assert thresholds["tiers"], "the identifier tier is expected to get thresholds of its own"
    curves = tradeoff_curves(contract, items, conf, thresholds, evidence)
    assert list(curves) == ["default", *thresholds["tiers"]]
    for name, curve in curves.items():
        t = thresholds["default"] if name == "default" else thresholds["tiers"][name]
        p = chosen_point(curve, t["low_confidence"])
        assert (p["false_refusal"], p["false_answer"]) == (t["false_refusal"], t["false_answer"])  # the table's rates
    # the default tier's chosen rates are not on the all-questions curve: why each tier has its own
    d = thresholds["default"]
    assert (d["false_refusal"], d["false_answer"]) not in {(r["false_refusal"], r["false_answer"]) for r in table}

    data = {"thresholds": thresholds, "threshold_curves": curves, "threshold_table": table, "objective": "ndcg@10",
            "distributions": {"answerable": [0.9], "unanswerable": [0.1]}, "answerability": {"fitted": False},
            "weight_curves": {"other": {"weights": [0, 0.5, 1], "metric": [0.5, 0.7, 0.6], "count": 30}}}
    figures = calibration_figures(data)
    assert [f[0] for f in figures] == ["calibration.png", "calibration-scores.png", "calibration-weights.png"]
    ax = figures[0][3].axes[0]
    lines = [ln.get_xydata().tolist() for ln in ax.get_lines()]
    dots = [c.get_offsets().tolist()[0] for c in ax.collections if isinstance(c, PathCollection)]
    assert len(lines) == len(dots) == len(curves)
    for line, dot, (name, curve) in zip(lines, dots, curves.items()):
        assert dot in line  # drawn on the curve drawn in the same colour
        assert line == [[r["false_refusal"], r["false_answer"]] for r in curve]
    for _, _, _, fig in figures:
        w, h = fig.get_size_inches() * fig.dpi
        assert 500 <= w <= 1000 and 400 <= h <= 600  # sized for the page, not a 2,500 px strip


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


# the page's width, and the widest table box's content width and box width
MEASURE = ("<script>const boxes=[...document.querySelectorAll('.wide')].sort((a,b)=>b.scrollWidth-a.scrollWidth);"
           "document.body.insertAdjacentHTML('beforeend','<pre id=\"measured\">'+document.documentElement.scrollWidth"
           "+' '+boxes[0].scrollWidth+' '+boxes[0].clientWidth+'</pre>')</script>")


@pytest.mark.slow
@pytest.mark.skipif(_chromium() is None, reason="no chromium binary (apt-get install chromium)")
def test_report_html_has_no_horizontal_overflow_at_1280_px(report_data, tmp_path):
    """At a 1280 px window the page is no wider than the window, while its widest table (seven
    modes by tag) is wider than its box: the box scrolls, the page does not."""
    page = tmp_path / "report.html"
    page.write_text(render_html(report_data).replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    out = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync",
                          f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,900", "--dump-dom",
                          page.as_uri()], capture_output=True, text=True, timeout=180)
    found = re.search(r'<pre id="measured">(\d+) (\d+) (\d+)</pre>', out.stdout)
    assert found, out.stderr[-2000:]
    page_width, table_width, box_width = map(int, found.groups())
    assert page_width <= 1280
    assert table_width > box_width and box_width <= 1180  # the By tag table scrolls in its box
