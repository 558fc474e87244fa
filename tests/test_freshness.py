"""postprocess.freshness (kbtool.query.freshness): on a small real store (the bundled model), two
policy pages that disagree — the newer wins and the conflict is flagged in the Answer, its JSON and
the context block; an optional time decay; the fact extraction checked by hand."""

import json
import os
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from kbtool.chunk import ChunkParams
from kbtool.cli import app
from kbtool.contract import load_contract
from kbtool.errors import ContractError
from kbtool.evaluation.calibrate import calibrate
from kbtool.evaluation.evaluate import EvalConfig, evaluate
from kbtool.evaluation.questions import load_questions
from kbtool.ingestion.pipeline import ingest
from kbtool.query.freshness import decay, differ, facts, parse_date
from kbtool.query.pipeline import retrieve
from kbtool.store import Store

from .conftest import write

QUESTION = "how long are audit logs kept"
NEW = "---\nupdated: 2024-10-02\n---\n# Audit log retention\n\nAudit logs are kept for 90 days. After that they are deleted from the archive.\n"
OLD = "---\nupdated: 2023-05-10\n---\n# Audit log retention\n\nAudit logs are kept for 30 days. After that they are deleted from the archive.\n"
HOLIDAYS = "# Holidays\n\nThe office is closed on public holidays and for 2 weeks in August.\n"
INVOICES = "# Invoices\n\nInvoices are sent on the first day of every month and are due within 30 days.\n"


def _mtime(path, day: str):
    t = datetime.fromisoformat(day).replace(tzinfo=timezone.utc).timestamp()
    os.utime(path, (t, t))


@pytest.fixture(scope="module")
def kb(tmp_path_factory, embedder):
    base = tmp_path_factory.mktemp("fresh")
    write(base / "docs" / "policies" / "retention.md", NEW)
    write(base / "docs" / "policies" / "retention-old.md", OLD)
    _mtime(write(base / "docs" / "holidays.md", HOLIDAYS), "2022-01-01")
    _mtime(write(base / "docs" / "invoices.md", INVOICES), "2022-01-01")
    lines = [{"id": "q1", "question": QUESTION, "relevant": ["policies/retention.md"]},
             {"id": "q2", "question": "when is the office closed", "relevant": ["holidays.md"]},
             {"id": "q3", "question": "when are invoices due", "relevant": ["invoices.md"]}]
    path = write(base / "q.jsonl", "".join(json.dumps(r) + "\n" for r in lines))
    store = Store.open(base / "kb", create=True)
    assert not ingest(store, [base / "docs"], embedder=embedder).failed
    return store, path


def ask(store, embedder, *sets, question=QUESTION, top_k=None):
    return retrieve(store, load_contract(None, list(sets), search=False), question, embedder=embedder, top_k=top_k)


def test_newer_wins_and_the_conflict_is_flagged(kb, embedder):
    plain = ask(kb[0], embedder)
    docs = [h.doc_id for h in plain.hits]
    assert docs[:2] == ["policies/retention-old.md", "policies/retention.md"]  # the older page ranks first
    got = ask(kb[0], embedder, "postprocess.freshness.prefer=newer")
    assert [h.doc_id for h in got.hits][:2] == ["policies/retention.md", "policies/retention-old.md"]
    assert sorted(h.chunk_id for h in got.hits) == sorted(h.chunk_id for h in plain.hits)  # the older stays, below
    assert [h.rank for h in got.hits] == list(range(1, len(got.hits) + 1))
    want = [{"newer": "policies/retention.md#0", "older": "policies/retention-old.md#0",
             "newer_doc": "policies/retention.md", "older_doc": "policies/retention-old.md",
             "newer_date": "2024-10-02", "older_date": "2023-05-10", "differ": [["90 days", "30 days"]]}]
    assert got.conflicts == want
    assert json.loads(json.dumps(got.to_dict()))["conflicts"] == want
    line = ("Sources differ: [1] policies/retention.md (2024-10-02) vs [2] policies/retention-old.md "
            "(2023-05-10): 90 days / 30 days.\n\n[1] ### Source: policies/retention.md")
    assert line in got.context
    assert got.context.index("Sources differ") < got.context.index("[1] ###")
    fr = got.trace["freshness"]
    assert fr["conflicts"] == want and fr["moved"] == [["policies/retention.md#0", 2, 1], ["policies/retention-old.md#0", 1, 2]]
    assert got.trace["timings_ms"]["freshness_ms"] >= 0 and "ms" not in fr
    # the decision reads the same hits' relevance: unchanged
    assert (got.decision, got.confidence, got.signals) == (plain.decision, plain.confidence, plain.signals)
    # equal runs, equal traces (no time in the record)
    again = ask(kb[0], embedder, "postprocess.freshness.prefer=newer")
    assert again.trace["freshness"] == fr


def test_prefer_score_keeps_the_order_and_flags(kb, embedder):
    plain = ask(kb[0], embedder)
    got = ask(kb[0], embedder, "postprocess.freshness.prefer=score")
    assert [h.chunk_id for h in got.hits] == [h.chunk_id for h in plain.hits]
    assert [h.score for h in got.hits] == [h.score for h in plain.hits]
    assert got.conflicts and got.conflicts[0]["newer"] == "policies/retention.md#0"
    assert "Sources differ: [2] policies/retention.md (2024-10-02) vs [1] policies/retention-old.md (2023-05-10)" in got.context
    assert got.trace["freshness"]["moved"] == []


def test_off_is_identical(kb, embedder):
    plain = ask(kb[0], embedder)
    off = ask(kb[0], embedder, "postprocess.freshness.prefer=null", "postprocess.freshness.half_life_days=null")
    assert json.dumps(off.to_dict(), sort_keys=True) == json.dumps(plain.to_dict(), sort_keys=True)
    assert "conflicts" not in plain.to_dict() and "freshness" not in plain.trace
    assert "freshness_ms" not in plain.trace["timings_ms"] and "Sources differ" not in plain.context


def test_no_conflict_between_pages_about_different_things(kb, embedder):
    # holidays (2 weeks) and invoices (30 days): both hold a duration, about different things
    for q in ("when is the office closed", "when are invoices due"):
        got = ask(kb[0], embedder, "postprocess.freshness.prefer=newer", question=q)
        plain = ask(kb[0], embedder, question=q)
        assert all({c["newer_doc"], c["older_doc"]} == {"policies/retention.md", "policies/retention-old.md"}
                   for c in got.conflicts)
        assert [h.chunk_id for h in got.hits][:1] == [h.chunk_id for h in plain.hits][:1]


def test_mtime_when_no_front_matter_date(tmp_path, embedder):
    docs = tmp_path / "docs"
    _mtime(write(docs / "limits.md", "# Upload limit\n\nThe upload limit is 5 GB per file for every account.\n"), "2025-03-01")
    _mtime(write(docs / "limits-2021.md", "# Upload limit\n\nThe upload limit is 2 GB per file for every account.\n"), "2021-06-15")
    store = Store.open(tmp_path / "kb", create=True)
    assert not ingest(store, [docs], embedder=embedder).failed
    got = ask(store, embedder, "postprocess.freshness.prefer=newer", question="what is the upload limit per file")
    assert got.hits[0].doc_id == "limits.md"
    assert got.conflicts == [{"newer": "limits.md#0", "older": "limits-2021.md#0", "newer_doc": "limits.md",
                              "older_doc": "limits-2021.md", "newer_date": "2025-03-01", "older_date": "2021-06-15",
                              "differ": [["5 GB", "2 GB"]]}]


def test_decay_reorders_as_computed_by_hand(kb, embedder):
    plain = ask(kb[0], embedder)
    score = {h.doc_id: h.score for h in plain.hits}
    got = ask(kb[0], embedder, "postprocess.freshness.half_life_days=365", "postprocess.freshness.as_of=2024-10-02")
    # retention.md: 0 days old, factor 1; retention-old.md: 511 days, 0.5 ** (511 / 365) = 0.3789
    assert (datetime(2024, 10, 2) - datetime(2023, 5, 10)).days == 511
    want = {"policies/retention.md": score["policies/retention.md"],
            "policies/retention-old.md": score["policies/retention-old.md"] * 0.5 ** (511 / 365)}
    assert [h.doc_id for h in got.hits][:2] == ["policies/retention.md", "policies/retention-old.md"]
    for h in got.hits[:2]:
        assert h.score == pytest.approx(want[h.doc_id], abs=2e-6)
    dec = got.trace["freshness"]["decay"]
    assert dec["as_of"] == "2024-10-02" and dec["half_life_days"] == 365
    assert got.conflicts is None and "conflicts" not in got.to_dict()  # prefer null: no conflict check
    # as_of null: the newest candidate's date (2024-10-02 here): the same order and scores
    same = ask(kb[0], embedder, "postprocess.freshness.half_life_days=365")
    assert same.trace["freshness"]["decay"]["as_of"] == "2024-10-02"
    assert [(h.chunk_id, h.score) for h in same.hits] == [(h.chunk_id, h.score) for h in got.hits]


def test_decay_by_hand():
    class Cfg:
        as_of, half_life_days = "2024-01-11", 10.0

    dates = {"a": (parse_date("2024-01-01"), "updated"), "b": (parse_date("2024-01-11"), "mtime"), "c": (None, None)}
    fused = [("a#0", 1.0), ("b#0", 0.6), ("c#0", 0.55), ("a#1", -1.0)]
    got, rec = decay(fused, lambda c: c.split("#")[0], dates, Cfg)
    # a: 10 days old -> x 0.5; b: 0 days -> x 1; c: undated, as it is; a negative score divided
    assert got == [("b#0", 0.6), ("c#0", 0.55), ("a#0", 0.5), ("a#1", -2.0)]
    assert rec == {"as_of": "2024-01-11", "half_life_days": 10.0, "decayed": 2,
                   "moved": [["b#0", 2, 1], ["c#0", 3, 2], ["a#0", 1, 3]]}


@pytest.mark.parametrize("setting, field", [
    ("prefer=newest", "prefer"), ("similarity=1.5", "similarity"), ("similarity=0", "similarity"),
    ("half_life_days=0", "half_life_days"), ("half_life_days=-3", "half_life_days"),
    ("as_of=2024-13-01", "as_of"), ("as_of=yesterday", "as_of"), ('date_fields=[""]', "date_fields"),
    ("window=3", "window"),
])
def test_bad_setting_is_a_one_line_contract_error(setting, field):
    with pytest.raises(ContractError, match=rf"postprocess\.freshness\.{field}") as err:
        load_contract(None, [f"postprocess.freshness.{setting}"], search=False)
    assert "\n" not in str(err.value)


def test_query_json_on_the_cli(kb):
    store, _ = kb
    r = CliRunner().invoke(app, ["query", QUESTION, "--store", str(store.path), "--json",
                                 "--set", "postprocess.freshness.prefer=newer"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["hits"][0]["doc_id"] == "policies/retention.md"
    assert data["conflicts"][0]["differ"] == [["90 days", "30 days"]]
    assert "Sources differ: [1] policies/retention.md (2024-10-02)" in data["context"]
    plain = json.loads(CliRunner().invoke(app, ["query", QUESTION, "--store", str(store.path), "--json"]).stdout)
    assert "conflicts" not in plain
    table = CliRunner().invoke(app, ["query", QUESTION, "--store", str(store.path),
                                     "--set", "postprocess.freshness.prefer=newer"])
    assert table.exit_code == 0, table.output
    assert ("sources differ: #1 policies/retention.md (2024-10-02) vs #2 policies/retention-old.md (2023-05-10): "
            "90 days / 30 days") in table.stdout


def test_eval_and_calibrate_run_with_the_stage_on(kb, embedder):
    store, path = kb
    qs = load_questions(path)
    on = load_contract(None, ["postprocess.freshness.prefer=newer"], search=False)
    cfg = EvalConfig(modes=["contract"], ks=[1, 5])
    plain = evaluate(store, qs, cfg, contract=load_contract(None, [], search=False), embedder=embedder).to_dict()
    fresh = evaluate(store, qs, cfg, contract=on, embedder=embedder).to_dict()
    assert plain["per_question"][0]["modes"]["contract"]["metrics"]["hit_rate@1"] == 0.0
    assert fresh["per_question"][0]["modes"]["contract"]["metrics"]["hit_rate@1"] == 1.0
    result = calibrate(store, qs, on, embedder=embedder, min_count=1, folds=2)
    assert result.to_dict()


# ---- the facts, by hand ----------------------------------------------------------------------
FACTS = [
    ("Audit logs are kept for 90 days.", {"duration": {7776000.0: "90 days"}}),
    ("kept 3 months", {"duration": {7776000.0: "3 months"}}),
    ("a 30-day trial, 200 ms latency, timeout 5s", {"duration": {2592000.0: "30-day", 0.2: "200 ms", 5.0: "5s"}}),
    ("Upgrade to v2.3 by October 2, 2024", {"version": {"2.3": "v2.3"}, "date": {"2024-10-02": "October 2, 2024"}}),
    ("release 2.3.1 on 2 Oct 2024; the 2024-10 plan", {"version": {"2.3.1": "release 2.3.1"},
                                                        "date": {"2024-10-02": "2 Oct 2024", "2024-10": "2024-10"}}),
    ("Quota 5 GB, 20% off, $10 a seat, 100 users", {"size": {5e9: "5 GB"}, "percent": {20.0: "20%"},
                                                     "money:usd": {10.0: "$10"}, "count:user": {100.0: "100 users"}}),
    ("There are 12 chapters and 3 and 4", {"count:chapter": {12.0: "12 chapters"}}),
    ("IP 10.0.0.1 and 1,000 requests", {"count:request": {1000.0: "1,000 requests"}}),
    ("Step 1: run it. 2 more. In 2019 we moved.", {}),  # bare numbers and years are no facts
]


@pytest.mark.parametrize("text, want", FACTS)
def test_facts_by_hand(text, want):
    assert facts(text) == want


@pytest.mark.parametrize("a, b, want", [
    ("kept for 90 days", "kept for 30 days", [["90 days", "30 days"]]),
    ("kept for 90 days", "kept for 3 months", []),  # one duration written two ways
    ("kept for 90 days, 7 days grace", "kept for 7 days", []),  # one saying less is no conflict
    ("kept for 90 days, 7 days grace", "kept for 30 days, 7 days grace", [["90 days", "30 days"]]),
    ("closed for 2 weeks", "5 GB per file", []),  # different kinds
    ("runs v2.3", "runs version 2.4", [["v2.3", "version 2.4"]]),
    ("due 2024-10-02", "due October 2, 2024", []),
    ("3 replicas", "5 users", []),
])
def test_differ_by_hand(a, b, want):
    assert differ(facts(a), facts(b)) == want


@pytest.mark.parametrize("value, want", [
    ("2024-10-02", "2024-10-02"), ("2024-10-02T23:30:00+02:00", "2024-10-02"), ("2024-10", "2024-10-01"),
    ("October 2, 2024", "2024-10-02"), ("2 Oct 2024", "2024-10-02"), ("soon", None), ("", None), (None, None),
])
def test_parse_date_by_hand(value, want):
    got = parse_date(value)
    assert (got.date().isoformat() if got else None) == want


def test_context_line_stays_within_the_budget(kb, embedder):
    from kbtool.query.context import build_context
    from kbtool.query.tokens import count_tokens_for

    got = ask(kb[0], embedder, "postprocess.freshness.prefer=newer")
    count = count_tokens_for(kb[0])
    cfg = load_contract(None, [], search=False).context
    full, ids = build_context(got.hits, got.decision, cfg, count, conflicts=got.conflicts)
    assert "Sources differ" in full and len(ids) == len(got.hits)
    line = full[full.index("Sources differ"):full.index("\n\n", full.index("Sources differ")) + 2]
    seen = set()
    for budget in range(count(full) - 1, 45, -1):  # every budget (45: the header and notice take 29): within it, a line only for sources in it
        small = cfg.model_copy(update={"max_tokens": budget})
        block, ids = build_context(got.hits, got.decision, small, count, conflicts=got.conflicts)
        assert count(block) <= budget
        both = {"policies/retention.md#0", "policies/retention-old.md#0"} <= set(ids)
        if line in block:
            assert both
        else:  # no room for the line and both sources: the block without it
            assert "Sources differ" not in block and block == build_context(got.hits, got.decision, small, count)[0]
        seen.add(line in block)
    assert seen == {True, False}


def test_date_fields_without_mtime_leave_an_undated_document_undated(tmp_path, embedder):
    """A checkout's files all carry its day as mtime: listed without ``mtime``, only real dates count,
    so a page with a front matter date is not outranked by an undated copy dated 'today'."""
    docs = tmp_path / "docs"
    write(docs / "limits.md", "---\nupdated: 2025-03-01\n---\n# Upload limit\n\nThe upload limit is 5 GB per file for every account.\n")
    _mtime(write(docs / "limits-copy.md", "# Upload limit\n\nThe upload limit is 2 GB per file for every account.\n"), "2026-01-01")
    store = Store.open(tmp_path / "kb", create=True)
    assert not ingest(store, [docs], embedder=embedder).failed
    q = "what is the upload limit per file"
    with_mtime = ask(store, embedder, "postprocess.freshness.prefer=newer", question=q)
    assert with_mtime.conflicts[0]["newer_doc"] == "limits-copy.md" and with_mtime.conflicts[0]["newer_date"] == "2026-01-01"
    dated = ask(store, embedder, "postprocess.freshness.prefer=newer",
                "postprocess.freshness.date_fields=[updated, last_modified, date]", question=q)
    c = dated.conflicts[0]
    assert (c["older_date"], c["newer_date"]) in ((None, "2025-03-01"), ("2025-03-01", None))
    assert {c["newer_doc"], c["older_doc"]} == {"limits.md", "limits-copy.md"}
    assert dated.trace["freshness"] is not None


# Review of issue 21 (post-processing after fusion): defects found by an adversarial pass, each
# pinned by a test that failed before its fix.
def _day(s: str) -> tuple:
    return (datetime.fromisoformat(s).replace(tzinfo=timezone.utc), "updated")


def test_decay_of_a_negative_score_with_a_tiny_half_life_does_not_divide_by_zero():
    # z-score fusion gives negative scores; 0.5 ** (age / half_life) underflows to 0.0 for an old
    # document under a short half-life (1 day, 3 years: 0.5 ** 1095): no ZeroDivisionError, finite
    # scores (JSON has no Infinity), older still lower.
    dates = {"new": _day("2024-01-01"), "old": _day("2021-01-01"), "older": _day("2020-01-01")}
    cfg = SimpleNamespace(as_of=None, half_life_days=1.0)
    got, rec = decay([("new#0", 0.5), ("old#0", -0.3), ("older#0", -0.2)], lambda c: c.split("#")[0], dates, cfg)
    assert [c for c, _ in got][0] == "new#0"
    assert all(abs(s) < float("inf") for _, s in got)
    json.dumps(got, allow_nan=False)


def test_facts_one_version_written_with_or_without_trailing_zeros_is_no_conflict():
    from kbtool.query.freshness import differ, facts

    # "version 2" and "version 2.0" are one version; the sample corpus's release notes (3.2 … 3.5)
    # against the install guide's 3.5.0 were flagged "Sources differ"
    assert differ(facts("Requires version 2 or later."), facts("Requires version 2.0 or later.")) == []
    assert differ(facts("Release 3.4 and Release 3.5 are out."), facts("Tidewater Sync 3.5.0 installs.")) == []
    assert differ(facts("Requires version 2.1."), facts("Requires version 2.10.")) == [["version 2.1", "version 2.10"]]


def test_facts_a_negative_number_keeps_its_sign():
    from kbtool.query.freshness import differ, facts

    assert differ(facts("The fee changed by -5% this year."), facts("The fee changed by 5% this year.")) == [["-5%", "5%"]]
    assert differ(facts("Set the offset to -10 degrees."), facts("Set the offset to 10 degrees.")) == [["-10 degrees", "10 degrees"]]
    # a range or a compound word is no sign
    assert facts("between 5-10% of uploads")["percent"] == {10.0: "10%"}
    assert facts("a 90-day window")["duration"] == {7776000.0: "90-day"}


NEWP = ("---\nupdated: 2024-10-02\n---\n# Audit log retention\n\n## Retention\n\nAudit logs are kept for 90 days. "
        "After that the audit logs are deleted from the archive.\n")
OLDP = ("---\nupdated: 2023-05-10\n---\n# Audit log retention\n\n## Retention\n\nAudit logs retention: the audit logs "
        "are kept in the archive and deleted from the archive after that.\n\n"
        "Audit logs are kept for 30 days. After that the audit logs are deleted.\n")


def test_a_conflict_whose_hit_expansion_merged_is_still_flagged(tmp_path, fake_embedder):
    # the conflict (new.md#0 90 days / old.md#2 30 days) is found; expansion returns both texts, in
    # new.md#1's and old.md#0's spans, merging the conflict's own hits: the flag was dropped
    write(tmp_path / "docs" / "new.md", NEWP)
    write(tmp_path / "docs" / "old.md", OLDP)
    store = Store.open(tmp_path / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(store, [tmp_path / "docs"], embedder=fake_embedder, chunk_params=ChunkParams(size=20, overlap=0)).failed
    sets = ["postprocess.freshness.prefer=newer", "postprocess.expand.mode=section"]
    got = retrieve(store, load_contract(None, sets, search=False), "how long are audit logs kept in the archive",
                   embedder=fake_embedder)
    assert got.trace["freshness"]["conflicts"]  # found before expansion
    shown = {h.chunk_id: h.text for h in got.hits}
    assert any("90 days" in t for t in shown.values()) and any("30 days" in t for t in shown.values())
    assert len(got.conflicts) == 1
    c = got.conflicts[0]
    assert "90 days" in shown[c["newer"]] and "30 days" in shown[c["older"]]
    assert "Sources differ: " in got.context and "90 days / 30 days" in got.context


def test_as_of_before_a_candidate_date_changes_the_order_as_documented():
    # ages never go below 0: a document dated after as_of is not decayed at all, so the order is the
    # same for any as_of on or after the newest candidate's date, not "for any as_of" (the contract
    # said so); the contract's description now says which
    from kbtool.contract import Freshness

    dates = {"a": _day("2024-06-01"), "b": _day("2024-01-01")}
    items = [("b#0", 1.0), ("a#0", 0.9)]
    doc = lambda c: c.split("#")[0]  # noqa: E731
    late = [c for c, _ in decay(items, doc, dates, SimpleNamespace(as_of="2025-01-01", half_life_days=100))[0]]
    none = [c for c, _ in decay(items, doc, dates, SimpleNamespace(as_of=None, half_life_days=100))[0]]
    early = [c for c, _ in decay(items, doc, dates, SimpleNamespace(as_of="2024-01-01", half_life_days=100))[0]]
    assert late == none == ["a#0", "b#0"] and early == ["b#0", "a#0"]
    text = Freshness.model_fields["as_of"].description
    assert "for any as_of:" not in text and "as_of on or after the newest" in text


def test_half_life_days_must_be_finite():
    # inf was accepted and written to the JSONL trace as `Infinity`, which is not JSON
    from kbtool.errors import ContractError

    with pytest.raises(ContractError, match=r"postprocess\.freshness\.half_life_days"):
        load_contract(None, ["postprocess.freshness.half_life_days=inf"], search=False)
    assert load_contract(None, ["postprocess.freshness.half_life_days=1e6"], search=False).postprocess.freshness.half_life_days == 1e6


@pytest.mark.parametrize("given", ["20241002", "2024-10-02"])
def test_as_of_reads_as_a_date_and_is_kept_as_yyyy_mm_dd(given):
    # YAML reads --set as_of=20241002 as an int: "must be a valid string" (the date check passed it)
    c = load_contract(None, [f"postprocess.freshness.as_of={given}"], search=False)
    assert c.postprocess.freshness.as_of == "2024-10-02"
