"""Review of issue 21 (post-processing after fusion): defects found by an adversarial pass, each
pinned by a test that failed before its fix."""

import json
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from kbtool.chunk import ChunkParams
from kbtool.contract import load_contract
from kbtool.ingestion.pipeline import ingest
from kbtool.query.freshness import decay
from kbtool.query.pipeline import retrieve
from kbtool.store import Store

from .conftest import write

AWS = "AKIA" + "QX7RZ2MB4TKW9PLD"  # a fake key id, built so this file holds none verbatim


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


WORDS = ["amber", "birch", "cedar", "dune"]
GUIDE = ("# Guide\n\n## Backups\n\n"
         + "\n\n".join(f"Paragraph {w}: the nightly backup job copies the {w} volume to cold storage and "
                       f"verifies the {w} checksum before it marks the {w} run as complete." for w in WORDS) + "\n")
KEYS = ("# Keys\n\n## Backup keys\n\nThe nightly backup job copies the ember volume to cold storage and verifies "
        "the ember checksum before it marks the ember run as complete.\n\n"
        f"The backup job signs in with the key id {AWS} which is rotated by the operations team every quarter "
        "of the calendar year.\n")


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, fake_embedder):
    base = tmp_path_factory.mktemp("r21mixed")
    write(base / "docs" / "guide.md", GUIDE)
    write(base / "docs" / "keys.md", KEYS)
    store = Store.open(base / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(store, [base / "docs"], embedder=fake_embedder, chunk_params=ChunkParams(size=40, overlap=0)).failed
    return store


def test_expand_with_a_dropping_span_keeps_ranks_consecutive(mixed, fake_embedder):
    # Expansion merges guide.md's hits into one; keys.md's hit grows over a chunk holding a key id
    # (credentials: drop), so the pipeline puts back the hit's own chunk: with the rank it had
    # before the merge, not its place in the list returned.
    q = "paragraph amber birch cedar dune nightly backup volume checksum"
    sets = ["postprocess.expand.mode=section", "postprocess.expand.max_tokens=1000",
            "postprocess.sensitive.credentials=drop"]
    got = retrieve(mixed, load_contract(None, sets, search=False), q, embedder=fake_embedder, top_k=5)
    ids = [h.chunk_id for h in got.hits]
    assert any(c.startswith("keys.md") for c in ids) and AWS not in json.dumps(got.to_dict())
    assert [h.rank for h in got.hits] == list(range(1, len(got.hits) + 1)), [(h.rank, h.chunk_id) for h in got.hits]


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


def test_equal_runs_give_equal_traces_with_diversity_and_expand_on(mixed, fake_embedder):
    # timings belong in timings_ms (as sensitive_ms, compress_ms, freshness_ms do): the records of
    # postprocess.diversity and postprocess.expand held an "ms" of their own
    sets = ["postprocess.diversity.mmr_lambda=0.5", "postprocess.expand.mode=neighbours"]
    runs = []
    for _ in range(2):
        got = retrieve(mixed, load_contract(None, sets, search=False), "nightly backup volume checksum",
                       embedder=fake_embedder)
        d = got.to_dict(with_trace=True)
        assert d["trace"]["timings_ms"]["diversity_ms"] >= 0 and d["trace"]["timings_ms"]["expand_ms"] >= 0
        d["trace"].pop("timings_ms")
        runs.append(d)
    assert "ms" not in runs[0]["trace"]["diversity"] and "ms" not in runs[0]["trace"]["expand"]
    assert runs[0] == runs[1]


@pytest.fixture(scope="module")
def many(tmp_path_factory, fake_embedder):
    """Eight documents of eight short paragraphs each (one chunk a paragraph): 64 chunks."""
    base = tmp_path_factory.mktemp("r21many")
    words = ["backup", "restore", "volume", "checksum", "archive", "snapshot", "replica", "schedule"]
    for d in range(8):
        paras = [f"Paragraph {d}-{p}: the {words[(d + p) % 8]} job copies the {words[(d * p) % 8]} data and checks "
                 f"the {words[(d + 2 * p) % 8]} before the {words[p % 8]} run of team {d} is complete."
                 for p in range(8)]
        write(base / "docs" / f"doc{d}.md", f"# Doc {d}\n\n" + "\n\n".join(paras) + "\n")
    store = Store.open(base / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(store, [base / "docs"], embedder=fake_embedder, chunk_params=ChunkParams(size=40, overlap=0)).failed
    return store


@pytest.mark.parametrize("setting", ["postprocess.diversity.mmr_lambda=0.5", "postprocess.diversity.mmr_lambda=0.2"])
def test_mmr_picks_the_same_top_k_whatever_top_k_the_caller_asks(many, fake_embedder, setting):
    # MMR scaled relevance over, and picked from, a window of the caller's top_k + 20: eval (which
    # asks for 100) and calibrate ranked other hits than `kbtool query` for the same contract
    c = load_contract(None, [setting], search=False)
    for q in ["backup volume checksum", "restore snapshot archive", "replica schedule team",
              "checksum before the run is complete"]:
        small = retrieve(many, c, q, embedder=fake_embedder)
        large = retrieve(many, c, q, embedder=fake_embedder, top_k=60)
        assert [h.chunk_id for h in large.hits][:len(small.hits)] == [h.chunk_id for h in small.hits], q
        assert (small.decision, small.confidence) == (large.decision, large.confidence)


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


def test_a_restricted_answer_with_every_stage_on_equals_the_answer_without_the_hidden_page(tmp_path, fake_embedder):
    # the hidden page is the newest (the decay's as_of when null) and disagrees (a conflict): a
    # caller who may not read it gets the answer of a store without it, trace and all
    from kbtool.ingestion.pipeline import IngestOptions

    page = ("---\nupdated: {d}\n---\n# Audit log retention\n\nAudit logs are kept for {n} days. After that they are "
            "deleted from the archive.\n")

    def build(base, hidden):
        write(base / "pub" / "a.md", page.format(d="2023-05-10", n=30))
        write(base / "pub" / "b.md", page.format(d="2022-05-10", n=60) + "\nAudit log exports run nightly.\n")
        write(base / "pub" / "c.md", "---\nupdated: 2021-01-01\n---\n# Exports\n\nAudit log exports run for 7 days.\n")
        store = Store.open(base / "kb", create=True, model=fake_embedder.spec)
        assert not ingest(store, [base / "pub"], embedder=fake_embedder).failed
        if hidden:
            write(base / "sec" / "s.md", page.format(d="2025-10-02", n=90))
            assert not ingest(store, [base / "sec"], IngestOptions(metadata={"access": "staff"}), embedder=fake_embedder).failed
        return store

    both, public = build(tmp_path / "both", True), build(tmp_path / "public", False)
    sets = ["postprocess.freshness.prefer=newer", "postprocess.freshness.half_life_days=30",
            "postprocess.compress.mode=sentences", "postprocess.compress.min_tokens=0",
            "postprocess.expand.mode=neighbours", "postprocess.diversity.mmr_lambda=0.5",
            "postprocess.sensitive.credentials=drop"]
    c = load_contract(None, sets, search=False)
    runs = []
    for store in (both, public):
        got = retrieve(store, c, "how long are audit logs kept", embedder=fake_embedder, allow=["public"])
        d = got.to_dict(with_trace=True)
        d["trace"].pop("timings_ms")
        runs.append(d)
    assert runs[0]["trace"]["freshness"]["decay"]["as_of"] == "2023-05-10"
    assert runs[0] == runs[1]


KEYS2 = ("# Keys\n\n## Backup keys\n\nThe nightly backup job copies the ember volume to cold storage every night at two.\n\n"
         "The nightly backup job verifies the ember checksum before it marks the ember run complete.\n\n"
         f"The operations team signs in with the key id {AWS} which is rotated every quarter of the year.\n")


def test_expansion_never_grows_over_a_chunk_the_sensitive_rules_drop(tmp_path, fake_embedder):
    # keys.md#0 grew over #1 and #2 (a key id: credentials=drop), so it went back to its own chunk,
    # and keys.md#1, merged into that span, was lost: neither returned nor shown
    write(tmp_path / "docs" / "keys.md", KEYS2)
    write(tmp_path / "docs" / "other.md", "# Other\n\nInvoices are sent on the first day of every month.\n")
    store = Store.open(tmp_path / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(store, [tmp_path / "docs"], embedder=fake_embedder, chunk_params=ChunkParams(size=25, overlap=0)).failed
    sets = ["postprocess.expand.mode=section", "postprocess.sensitive.credentials=drop"]
    got = retrieve(store, load_contract(None, sets, search=False), "nightly backup job ember volume checksum",
                   embedder=fake_embedder)
    text = "\n".join(h.text for h in got.hits)
    assert "copies the ember volume" in text and "verifies the ember checksum" in text
    assert AWS not in json.dumps(got.to_dict(with_trace=True)) and AWS not in got.context
    assert got.hits[0].chunk_id == "keys.md#0" and got.hits[0].char_end > got.hits[0].char_start
    assert got.trace["expand"]["expanded"][0][:3] == ["keys.md#0", "keys.md#0", "keys.md#1"]
