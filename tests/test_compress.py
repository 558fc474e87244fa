"""postprocess.compress (kbtool.query.compress): each hit keeps the sentences most like the
question and their neighbours, code blocks whole; on a small real store of Markdown files whose
long sections hold the answer in one sentence in the middle."""

import json
import re
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from kbtool.chunk import ChunkParams
from kbtool.cli import app
from kbtool.contract import load_contract
from kbtool.errors import ContractError
from kbtool.ingestion.pipeline import ingest
from kbtool.query.compress import split
from kbtool.query.pipeline import retrieve
from kbtool.store import Store

from .conftest import write


def units(text):
    return [(u.kind, text[u.start:u.end]) for u in split(text)]


# ---- splitting ------------------------------------------------------------------------------
def test_abbreviations_versions_and_file_names_do_not_end_a_sentence():
    text = ("Set a flag, e.g. Verbose in config.yaml before you upgrade to v2.3 of the agent. Then restart it. "
            "Ask Dr. Smith, i.e. The owner! Why? Because etc. is fine.")
    assert [t for _, t in units(text)] == [
        "Set a flag, e.g. Verbose in config.yaml before you upgrade to v2.3 of the agent.", "Then restart it.",
        "Ask Dr. Smith, i.e. The owner!", "Why?", "Because etc. is fine."]


def test_a_period_set_off_by_spaces_ends_a_sentence():
    text = "a wing in a slipstream . an experimental study was made . results follow"
    assert [t for _, t in units(text)] == ["a wing in a slipstream .", "an experimental study was made .", "results follow"]


def test_chinese_sentences():
    text = "同步冲突时会保留两个版本。不会丢失任何修改！真的吗？是的"
    assert [t for _, t in units(text)] == ["同步冲突时会保留两个版本。", "不会丢失任何修改！", "真的吗？", "是的"]


def test_code_tables_headings_and_list_items_with_code_stay_whole():
    text = ("## Setup\n\nInstall it. Then run it.\n\n```bash\nkbtool ingest docs\necho done. Next\n```\n\n"
            "| key | value |\n|---|---|\n| a. B | 2 |\n\n- run `kbtool query`. It prints hits.\n- plain item. Two parts.\n\n"
            "    indented code. Still code\n    more\n\nLast one.")
    assert units(text) == [
        ("heading", "## Setup"), ("sentence", "Install it."), ("sentence", "Then run it."),
        ("code", "```bash\nkbtool ingest docs\necho done. Next\n```"),
        ("table", "| key | value |\n|---|---|\n| a. B | 2 |"),
        ("list", "- run `kbtool query`. It prints hits."), ("sentence", "- plain item."), ("sentence", "Two parts."),
        ("code", "    indented code. Still code\n    more"), ("sentence", "Last one.")]


def test_an_unclosed_fence_runs_to_the_end():
    text = "Before it.\n\n```\ncode. Line\nmore"
    assert units(text) == [("sentence", "Before it."), ("code", "```\ncode. Line\nmore")]


def test_a_longer_fence_is_closed_only_by_a_fence_as_long():
    """Issue 30: a block fenced with four backticks showing a three-backtick example stays one unit
    (it used to end at the inner ``` line and read the rest as prose)."""
    text = "Write it so.\n\n````markdown\n```python\nx = 1. Two\n```\nAfter. More\n````\n\nDone here."
    assert units(text) == [("sentence", "Write it so."),
                           ("code", "````markdown\n```python\nx = 1. Two\n```\nAfter. More\n````"),
                           ("sentence", "Done here.")]
    tildes = "~~~\n```\nstill code. Yes\n~~~\nProse now."
    assert units(tildes) == [("code", "~~~\n```\nstill code. Yes\n~~~"), ("sentence", "Prose now.")]


def test_elisions_are_marked_within_and_across_paragraphs():
    from types import SimpleNamespace

    from kbtool.query.compress import compress_text

    text = "One ant. Two bees. Three cats. Four dogs.\n\n```\ncode\n```\n\nFive eels. Six fish."
    got = split(text)
    assert [u.kind for u in got] == ["sentence"] * 4 + ["code", "sentence", "sentence"]
    cfg = SimpleNamespace(max_sentences=2, neighbours=0, max_tokens=100, lead=False)
    scores = [0, 1, 0, 0, 0, 0, 2]
    out, kept = compress_text(text, scores, got, cfg, [3] * len(got))
    assert kept == [1, 6] and out == "… Two bees.\n\n…\n\nSix fish."
    scores = [0, 2, 0, 1, 0, 0, 0]
    out, kept = compress_text(text, scores, got, cfg, [3] * len(got))
    assert kept == [1, 3] and out == "… Two bees. … Four dogs.\n\n…"
    cfg.lead = True
    out, kept = compress_text(text, scores, got, cfg, [3] * len(got))
    assert kept == [0, 1, 3] and out == "One ant. Two bees. … Four dogs.\n\n…"
    out, kept = compress_text(text, [1] * len(got), got, SimpleNamespace(max_sentences=9, neighbours=0, max_tokens=100,
                                                                         lead=False), [3] * len(got))
    assert out is text  # every unit kept: the text itself


# ---- a small real store ---------------------------------------------------------------------
COLOURS = ["amber", "birch", "cedar", "dune", "ember", "fjord", "grove", "heath", "indigo", "juniper"]


def filler(words, offset=0):
    return " ".join(f"The {w} team reviews the weekly {w} report every Monday morning before lunch."
                    for w in words[offset:] + words[:offset])


ANSWER = "To rotate the signing key, run the rotation command and restart every agent within an hour."
BEFORE = "The grove team reviews the weekly grove report every Monday morning before lunch."
AFTER = "The heath team reviews the weekly heath report every Monday morning before lunch."
CODE = "```bash\nkbtool keys rotate --force\nkbtool agent restart --all\n```"
KEYS = ("# Keys\n\n## Rotation\n\n" + filler(COLOURS[:6]) + " " + BEFORE + " " + ANSWER + " " + AFTER + " "
        + filler(COLOURS[8:]) + "\n\n" + CODE + "\n\n" + filler(COLOURS[:4], 2) + "\n")
OTHERS = {f"svc{i}.md": f"# Service {i}\n\n## Notes\n\n" + filler(COLOURS, i) + f" The signing key of service {i} "
          f"lives in the vault under a path of its own. " + filler(COLOURS[:5], i) + "\n" for i in range(1, 5)}
PLAIN = {"billing.md": "# Billing\n\nInvoices are sent on the first day of every month to the account owner.\n",
         "teams.md": "# Teams\n\nAn owner can invite members to a team from the settings page.\n",
         "install.md": "# Install\n\nRun the installer and pick a folder for the library files.\n"}
QUESTION = "How do I rotate the signing key?"


@pytest.fixture(scope="module")
def kb(tmp_path_factory, fake_embedder):
    base = tmp_path_factory.mktemp("compress")
    for name, text in {"keys.md": KEYS, **OTHERS, **PLAIN}.items():
        write(base / "docs" / name, text)
    store = Store.open(base / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(store, [base / "docs"], embedder=fake_embedder, chunk_params=ChunkParams(size=400, overlap=0)).failed
    return store


def ask(kb, fake_embedder, question, *sets, top_k=5):
    return retrieve(kb, load_contract(None, list(sets), search=False), question, embedder=fake_embedder, top_k=top_k)


ON = ["postprocess.compress.mode=sentences"]


def test_keeps_the_answering_sentence_its_neighbours_and_the_code_block_whole(kb, fake_embedder):
    plain = ask(kb, fake_embedder, QUESTION)
    got = ask(kb, fake_embedder, QUESTION, *ON)
    top = next(h for h in got.hits if h.doc_id == "keys.md")
    own = next(h for h in plain.hits if h.doc_id == "keys.md")
    assert ANSWER in own.text and BEFORE in own.text
    assert f"{BEFORE} {ANSWER} {AFTER}" in top.text  # the sentence and one neighbour each side, in order
    assert CODE in top.text  # the code block whole
    assert top.text.startswith("The amber team")  # the lead: the section's first sentence
    assert "birch report" not in top.text and "dune report" not in top.text  # unrelated sentences dropped
    assert "weekly amber report every Monday morning before lunch. … The grove team" in top.text
    assert len(top.text) < len(own.text) / 2
    # the span and citation are the hit's own; the decision read the hits' own chunks
    assert (top.char_start, top.char_end, top.line_start, top.line_end, top.citation) == (
        own.char_start, own.char_end, own.line_start, own.line_end, own.citation)
    assert [h.chunk_id for h in got.hits] == [h.chunk_id for h in plain.hits]
    assert (got.decision, got.confidence, got.signals) == (plain.decision, plain.confidence, plain.signals)
    rec = {r[0]: r for r in got.trace["compress"]["compressed"]}[top.chunk_id]
    assert rec[2] < rec[1] and rec[3] < rec[4]  # tokens before/after, units kept/total
    assert got.trace["timings_ms"]["compress_ms"] >= 0 and "ms" not in got.trace["compress"]
    assert ANSWER in got.context and "birch report" not in got.context.split("keys.md")[1].split("### Source")[0]
    nolead = ask(kb, fake_embedder, QUESTION, *ON, "postprocess.compress.lead=false")
    top = next(h for h in nolead.hits if h.doc_id == "keys.md")
    assert top.text.startswith("… The grove team") and "amber report" not in top.text


def test_equal_runs_give_equal_traces(kb, fake_embedder):
    a, b = (ask(kb, fake_embedder, QUESTION, *ON) for _ in range(2))
    assert a.trace["compress"] == b.trace["compress"]
    assert json.dumps(a.to_dict(), sort_keys=True) == json.dumps(b.to_dict(), sort_keys=True)


def test_more_sources_fit_the_same_context_budget(kb, fake_embedder):
    budget = ["context.max_tokens=600"]
    plain = ask(kb, fake_embedder, QUESTION, *budget, top_k=8)
    got = ask(kb, fake_embedder, QUESTION, *budget, *ON, top_k=8)
    n_plain, n_got = plain.context.count("### Source"), got.context.count("### Source")
    assert n_plain == 1 and n_got >= 4, (n_plain, n_got)
    services = [h for h in plain.hits if h.doc_id.startswith("svc")]
    assert len(services) >= 2
    for h in got.hits:  # every service's answer sentence survives
        assert ("signing key" in h.text) == h.doc_id.startswith(("svc", "keys"))


def test_short_hits_and_budgets(kb, fake_embedder):
    whole = ask(kb, fake_embedder, QUESTION, *ON, "postprocess.compress.min_tokens=100000")
    plain = ask(kb, fake_embedder, QUESTION)
    assert [h.text for h in whole.hits] == [h.text for h in plain.hits]
    tight = ask(kb, fake_embedder, QUESTION, *ON, "postprocess.compress.max_tokens=5")
    top = next(h for h in tight.hits if h.doc_id == "keys.md")
    assert ANSWER in top.text and BEFORE not in top.text  # the best sentence alone, though over the budget
    none = ask(kb, fake_embedder, QUESTION, *ON, "postprocess.compress.neighbours=0",
               "postprocess.compress.max_sentences=1")
    top = next(h for h in none.hits if h.doc_id == "keys.md")
    assert ANSWER in top.text and BEFORE not in top.text and AFTER not in top.text and CODE not in top.text


def test_off_is_identical(kb, fake_embedder):
    for q in (QUESTION, "invoices", "weekly amber report"):
        plain = ask(kb, fake_embedder, q)
        off = ask(kb, fake_embedder, q, "postprocess.compress.mode=null", "postprocess.compress.max_tokens=5",
                  "postprocess.compress.neighbours=3")
        assert json.dumps(off.to_dict(with_trace=True), sort_keys=True, default=str) == json.dumps(
            plain.to_dict(with_trace=True), sort_keys=True, default=str).replace(
            json.dumps(plain.trace["timings_ms"], sort_keys=True), json.dumps(off.trace["timings_ms"], sort_keys=True))
        assert json.dumps(off.to_dict(), sort_keys=True) == json.dumps(plain.to_dict(), sort_keys=True)
        assert "compress" not in plain.trace and "compress_ms" not in off.trace["timings_ms"]


def test_with_expand_it_compresses_the_expanded_section(kb, fake_embedder):
    got = ask(kb, fake_embedder, QUESTION, *ON, "postprocess.expand.mode=section", "postprocess.expand.max_tokens=2000")
    top = next(h for h in got.hits if h.doc_id == "keys.md")
    assert ANSWER in top.text and CODE in top.text and "birch report" not in top.text
    assert "expand" in got.trace and "compress" in got.trace


@pytest.mark.parametrize("setting, key", [
    ("postprocess.compress.mode=words", "postprocess.compress.mode"),
    ("postprocess.compress.max_sentences=0", "postprocess.compress.max_sentences"),
    ("postprocess.compress.neighbours=-1", "postprocess.compress.neighbours"),
    ("postprocess.compress.max_tokens=0", "postprocess.compress.max_tokens"),
    ("postprocess.compress.min_tokens=-5", "postprocess.compress.min_tokens"),
    ("postprocess.compress.ratio=0.5", "postprocess.compress.ratio"),
])
def test_bad_settings_are_one_line_contract_errors(setting, key):
    with pytest.raises(ContractError, match=key.replace(".", r"\.")) as err:
        load_contract(None, [setting], search=False)
    assert "\n" not in str(err.value)


def test_the_cli_shows_it(kb):
    runner = CliRunner()
    args = ["query", QUESTION, "--store", str(kb.path), "-m", "bm25", "--set", "postprocess.compress.mode=sentences"]
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    hits = json.loads(r.stdout)["hits"]
    top = next(h for h in hits if h["doc_id"] == "keys.md")
    assert ANSWER in top["text"] and CODE in top["text"] and "birch report" not in top["text"]
    r = runner.invoke(app, [*args, "--context"])
    assert r.exit_code == 0, r.output
    assert ANSWER in r.stdout and re.search(r"keys\.md", r.stdout)
    plain = runner.invoke(app, ["query", QUESTION, "--store", str(kb.path), "-m", "bm25", "--context"])
    assert len(r.stdout) < len(plain.stdout)


@pytest.mark.slow
def test_calibrate_runs_with_the_stage_on(kb, fake_embedder, tmp_path):
    """calibrate answers through the same ``answer``: with compression on it still runs, and ranks
    as without (compression rewrites a hit's text, never the order)."""
    from kbtool.evaluation.calibrate import calibrate
    from kbtool.evaluation.questions import load_questions

    items = [(QUESTION, "keys.md", "restart every agent")] + [
        (f"Where does the signing key of service {i} live?", f"svc{i}.md", f"The signing key of service {i}")
        for i in range(1, 5)] + [
        ("When are invoices sent?", "billing.md", "first day of every month"),
        ("Who can invite members to a team?", "teams.md", "invite members"),
        ("Where do I pick a folder for the library files?", "install.md", "pick a folder")]
    lines = [json.dumps({"id": f"c{n}", "question": q, "relevant": [{"doc": d, "evidence": e, "grade": 2}]})
             for n, (q, d, e) in enumerate(items)]
    qs = load_questions(write(tmp_path / "q.jsonl", "\n".join(lines) + "\n"))
    off = calibrate(kb, qs, load_contract(None, [], search=False), embedder=fake_embedder, folds=2)
    on = calibrate(kb, qs, load_contract(None, ON, search=False), embedder=fake_embedder, folds=2)
    assert on.heldout == off.heldout


# Review of issue 21 (post-processing after fusion): defects found by an adversarial pass, each
# pinned by a test that failed before its fix.
def test_compress_a_text_whose_only_match_is_a_heading_is_returned_whole():
    # seeds never take a heading and lead is off: nothing kept, and compress_text read kept[0]
    from kbtool.query.compress import compress_text, split

    text = "## Retention\n\nLogs are kept for a while. They are deleted later.\n\n## Other\n\nNothing here at all."
    units = split(text)
    assert [u.kind for u in units] == ["heading", "sentence", "sentence", "heading", "sentence"]
    scores = [1.0, 0, 0, 0, 0]
    cfg = SimpleNamespace(max_sentences=2, neighbours=1, max_tokens=256, lead=False)
    got, kept = compress_text(text, scores, units, cfg, [5] * len(units))
    assert got == text
