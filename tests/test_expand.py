"""postprocess.expand (kbtool.query.expand): a hit's enclosing section or its neighbours within a
token budget, cited over the span returned, on a small real store of Markdown files whose long
section is cut into several chunks."""

import json

import pytest

from kbtool.chunk import ChunkParams
from kbtool.contract import load_contract
from kbtool.errors import ContractError
from kbtool.ingestion.pipeline import ingest
from kbtool.query.pipeline import retrieve
from kbtool.store import Store

from .conftest import write

WORDS = ["amber", "birch", "cedar", "dune", "ember", "fjord"]
# "## Backups" holds six paragraphs: at 40 tokens a chunk, one chunk each.
GUIDE = ("# Guide\n\n## Install\n\nRun the installer and pick a folder for the library files.\n\n## Backups\n\n"
         + "\n\n".join(f"Paragraph {w}: the nightly backup job copies the {w} volume to cold storage and "
                       f"verifies the {w} checksum before it marks the {w} run as complete." for w in WORDS)
         + "\n\n## Restore\n\nPick a snapshot and run the restore command from the console.\n")
OTHER = "# Billing\n\nInvoices are sent on the first day of every month to the account owner.\n"


def build(base, fake_embedder):
    write(base / "docs" / "guide.md", GUIDE)
    write(base / "docs" / "billing.md", OTHER)
    store = Store.open(base / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(store, [base / "docs"], embedder=fake_embedder, chunk_params=ChunkParams(size=40, overlap=0)).failed
    return store


@pytest.fixture(scope="module")
def kb(tmp_path_factory, fake_embedder):
    return build(tmp_path_factory.mktemp("expand"), fake_embedder)


def ask(kb, fake_embedder, question, *sets, top_k=5):
    return retrieve(kb, load_contract(None, list(sets), search=False), question, embedder=fake_embedder, top_k=top_k)


SECTION = ["postprocess.expand.mode=section", "postprocess.expand.max_tokens=1000"]


def test_section_returns_the_whole_section_and_cites_its_lines(kb, fake_embedder):
    plain = ask(kb, fake_embedder, "ember volume checksum")
    assert plain.hits[0].chunk_id == "guide.md#5" and plain.hits[0].citation == "guide.md:17"
    got = ask(kb, fake_embedder, "ember volume checksum", *SECTION)
    top = got.hits[0]
    assert top.chunk_id == "guide.md#5" and top.rank == 1 and top.section_path == "Guide > Backups"
    assert all(f"Paragraph {w}:" in top.text for w in WORDS)
    assert "Install" not in top.text and "Restore" not in top.text and "installer" not in top.text
    assert top.text == GUIDE[GUIDE.index("Paragraph amber"):GUIDE.index("\n\n## Restore")]
    assert (top.line_start, top.line_end, top.citation) == (9, 19, "guide.md:9-19")
    assert GUIDE.splitlines()[8].startswith("Paragraph amber") and GUIDE.splitlines()[18].startswith("Paragraph fjord")
    assert "### Source: guide.md:9-19 — Guide > Backups\nParagraph amber" in got.context
    assert top.confidence == plain.hits[0].confidence  # its own relevance
    exp = got.trace["expand"]
    assert exp["expanded"][0] == ["guide.md#5", "guide.md#1", "guide.md#6", 28, 168]
    assert exp["mode"] == "section" and got.trace["timings_ms"]["expand_ms"] >= 0


def test_hits_of_one_section_become_one_result(kb, fake_embedder):
    q = "nightly backup job copies the volume to cold storage"
    plain = ask(kb, fake_embedder, q)
    backups = [h for h in plain.hits if h.section_path == "Guide > Backups"]
    assert len(backups) >= 2
    got = ask(kb, fake_embedder, q, *SECTION)
    ours = [h for h in got.hits if h.section_path == "Guide > Backups"]
    assert len(ours) == 1 and ours[0].chunk_id == backups[0].chunk_id  # the best rank kept
    assert ours[0].rank == 1 and ours[0].citation == "guide.md:9-19"
    assert [h.rank for h in got.hits] == list(range(1, len(got.hits) + 1))
    merged = got.trace["expand"]["merged"]
    assert {m[0] for m in merged} >= {h.chunk_id for h in backups[1:]}
    assert all(into == backups[0].chunk_id for _, into in merged)
    assert len({h.chunk_id for h in got.hits}) == len(got.hits)
    # the decision reads the hits' own relevance: unchanged
    assert (got.decision, got.confidence, got.signals) == (plain.decision, plain.confidence, plain.signals)


@pytest.mark.parametrize("budget, first, last, lines", [
    (84, "dune", "fjord", (15, 19)),  # 3 chunks of 28 tokens: the one after, then the one before
    (60, "ember", "fjord", (17, 19)),
    (10, "ember", "ember", (17, 17)),  # smaller than the hit itself: the hit alone
])
def test_the_budget_is_respected(kb, fake_embedder, budget, first, last, lines):
    got = ask(kb, fake_embedder, "ember volume checksum", "postprocess.expand.mode=section",
              f"postprocess.expand.max_tokens={budget}")
    top = got.hits[0]
    shown = [w for w in WORDS if f"Paragraph {w}:" in top.text]
    assert (shown[0], shown[-1]) == (first, last)
    assert (top.line_start, top.line_end) == lines
    assert top.citation == "guide.md:" + (f"{lines[0]}-{lines[1]}" if lines[0] != lines[1] else str(lines[0]))
    for _, _, _, before, after in got.trace["expand"]["expanded"]:
        assert before <= after <= budget
    assert len(shown) * 28 <= max(budget, 28)


def test_neighbours_mode(kb, fake_embedder):
    one = ask(kb, fake_embedder, "amber volume checksum", "postprocess.expand.mode=neighbours",
              "postprocess.expand.neighbours=1", "postprocess.expand.max_tokens=1000")
    top = one.hits[0]
    assert top.chunk_id == "guide.md#1"
    # one chunk each side, across the section boundary: Install's paragraph, the heading (as the
    # document's parsed text holds it), amber, birch
    assert top.text.startswith("Run the installer") and "Backups" in top.text
    assert top.text.endswith("marks the birch run as complete.") and "cedar" not in top.text
    assert (top.line_start, top.line_end, top.citation) == (5, 11, "guide.md:5-11")
    two = ask(kb, fake_embedder, "ember volume checksum", "postprocess.expand.mode=neighbours",
              "postprocess.expand.neighbours=2", "postprocess.expand.max_tokens=1000")
    top = two.hits[0]
    assert top.text.startswith("Paragraph cedar") and top.text.endswith("from the console.")
    assert "Paragraph birch" not in top.text and all(f"Paragraph {w}:" in top.text for w in WORDS[2:])
    assert (top.line_start, top.line_end) == (13, 23)
    assert two.trace["expand"]["expanded"][0][1:3] == ["guide.md#3", "guide.md#7"]
    assert not any(h.chunk_id in ("guide.md#3", "guide.md#4", "guide.md#6", "guide.md#7") for h in two.hits[1:])


def test_off_is_identical(kb, fake_embedder):
    for q in ("ember volume checksum", "nightly backup job copies the volume to cold storage", "invoices"):
        plain = ask(kb, fake_embedder, q)
        off = ask(kb, fake_embedder, q, "postprocess.expand.mode=null", "postprocess.expand.max_tokens=20",
                  "postprocess.expand.neighbours=3")
        assert json.dumps(off.to_dict(), sort_keys=True) == json.dumps(plain.to_dict(), sort_keys=True)
        assert "expand" not in plain.trace and "expand" not in off.trace


@pytest.mark.parametrize("setting, key", [
    ("postprocess.expand.mode=paragraph", "postprocess.expand.mode"),
    ("postprocess.expand.max_tokens=0", "postprocess.expand.max_tokens"),
    ("postprocess.expand.neighbours=0", "postprocess.expand.neighbours"),
    ("postprocess.expand.neighbours=two", "postprocess.expand.neighbours"),
    ("postprocess.expand.window=3", "postprocess.expand.window"),
])
def test_bad_settings_are_contract_errors(setting, key):
    with pytest.raises(ContractError, match=key.replace(".", r"\.")):
        load_contract(None, [setting], search=False)


def test_an_expanded_span_never_carries_a_credential_its_neighbour_holds(tmp_path, fake_embedder):
    """postprocess.sensitive scans the hit's own chunk before expansion; the neighbours a span adds
    were never scanned: a fake AWS key in the next paragraph must not reach the hit or the context."""
    key = "AKIA" + "ABCDEFGHIJKLMNOP"
    guide = GUIDE.replace("Paragraph fjord: the nightly", f"Paragraph fjord: key {key} for the nightly")
    write(tmp_path / "docs" / "guide.md", guide)
    write(tmp_path / "docs" / "billing.md", OTHER)
    store = Store.open(tmp_path / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(store, [tmp_path / "docs"], embedder=fake_embedder, chunk_params=ChunkParams(size=40, overlap=0)).failed
    got = ask(store, fake_embedder, "ember volume checksum", *SECTION)
    top = got.hits[0]
    assert top.chunk_id == "guide.md#5" and "Paragraph fjord" in top.text  # the span reached the key's paragraph
    assert key not in top.text and key not in got.context and "[REDACTED:credentials]" in top.text
    assert got.trace["sensitive"]["redacted"].get("credentials", 0) >= 1
    dropped = ask(store, fake_embedder, "ember volume checksum", *SECTION, "postprocess.sensitive.credentials=drop")
    assert key not in dropped.context and all(key not in h.text for h in dropped.hits)


# ---- growth never crosses a chunk the caller may not see --------------------------------------
# Metadata filters and access tags are per document (front matter, --meta, path: every chunk of a
# document carries the same), except a PDF chunk's `page`: a page filter is the one way a caller
# sees part of a document, so the span must stop at the page's edge.
def _no_ms(answer) -> dict:
    out = answer.to_dict(with_trace=True)
    out["trace"].pop("timings_ms", None)
    if "expand" in out["trace"]:
        out["trace"]["expand"].pop("ms", None)
    return out


@pytest.fixture(scope="module")
def pdf_kb(tmp_path_factory, fake_embedder):
    import shutil
    from pathlib import Path

    base = tmp_path_factory.mktemp("expand-pdf")
    (base / "docs").mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "sample_corpus" / "release-notes.pdf", base / "docs")
    store = Store.open(base / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(store, [base / "docs"], embedder=fake_embedder, chunk_params=ChunkParams(size=60, overlap=0)).failed
    return store


@pytest.mark.parametrize("mode", [["postprocess.expand.mode=neighbours", "postprocess.expand.neighbours=3"],
                                  ["postprocess.expand.mode=section"]])
@pytest.mark.parametrize("page", ["2", "3"])
def test_a_page_filter_stops_the_span_at_the_page_edge(pdf_kb, fake_embedder, mode, page):
    spans = pdf_kb.catalog.chunk_spans("release-notes.pdf")
    page_of = {c["chunk_id"]: str(c["page"]) for c in spans}
    order = [c["chunk_id"] for c in spans]
    assert len(set(page_of.values())) >= 3  # chunks of several pages, in one document
    grown = 0
    for q in ("false TW-E2203 error after waking from sleep on macOS 12",  # the last chunk of page 2
              "Released on 2024-07-15",  # the first chunk of page 3
              "conflicted copies heartbeat interval"):
        got = retrieve(pdf_kb, load_contract(None, [*mode, "postprocess.expand.max_tokens=2000"], search=False), q,
                       embedder=fake_embedder, filters=[f"page={page}"], top_k=5)
        assert got.hits and all(page_of[h.chunk_id] == page for h in got.hits)
        for hit_id, first, last, _, _ in got.trace["expand"]["expanded"]:
            inside = order[order.index(first):order.index(last) + 1]
            assert hit_id in inside and {page_of[c] for c in inside} == {page}, (q, inside)
            grown += len(inside) > 1
        text = "\n".join(h.text for h in got.hits) + got.context
        others = [c for c in pdf_kb.chunks_by_id(order).values() if str(c["page"]) != page and len(c["text"]) > 30]
        assert not [c["chunk_id"] for c in others if c["text"] in text], q
    # neighbours' spans did grow, up to the page's edge (this PDF's sections each end on their page)
    assert grown >= 3 or mode == ["postprocess.expand.mode=section"]
    # unfiltered, the same neighbours do cross the page edge (the filter is what stops them)
    got = retrieve(pdf_kb, load_contract(None, ["postprocess.expand.mode=neighbours", "postprocess.expand.neighbours=1",
                                                "postprocess.expand.max_tokens=2000"], search=False),
                   "false TW-E2203 error after waking from sleep on macOS 12", embedder=fake_embedder, top_k=3)
    first, last = got.trace["expand"]["expanded"][0][1:3]
    assert {page_of[first], page_of[last]} == {"2", "3"}


SECRET_GUIDE = GUIDE.replace("# Guide", "# Vault guide").replace("cold storage", "the vault")


@pytest.fixture(scope="module")
def access_kbs(tmp_path_factory, fake_embedder):
    """The guide and billing public, a look-alike guide tagged finance; and a store without it."""
    from kbtool.ingestion.pipeline import IngestOptions

    out = []
    for with_secret in (True, False):
        base = tmp_path_factory.mktemp("expand-access")
        store = build(base, fake_embedder)
        if with_secret:
            write(base / "finance" / "aaa-vault.md", SECRET_GUIDE)  # sorts before guide.md
            write(base / "finance" / "zzz-vault.md", SECRET_GUIDE)
            assert not ingest(store, [base / "finance"], IngestOptions(metadata={"access": "finance"}),
                              embedder=fake_embedder, chunk_params=ChunkParams(size=40, overlap=0)).failed
        out.append(store)
    return out


@pytest.mark.parametrize("mode", [SECTION, ["postprocess.expand.mode=neighbours", "postprocess.expand.neighbours=2",
                                            "postprocess.expand.max_tokens=1000"]])
def test_a_restricted_callers_expanded_answer_equals_the_store_without_the_hidden_documents(access_kbs, fake_embedder, mode):
    full, alone = access_kbs
    sets = ["access.principals={guest: [public], cfo: [finance]}", *mode]
    c = load_contract(None, sets, search=False)
    for q in ("ember volume checksum", "nightly backup job copies the volume to cold storage",
              "backup job copies the volume to the vault", "restore command console", "invoices first day"):
        guest = retrieve(full, c, q, embedder=fake_embedder, principal="guest", top_k=5)
        assert {h.doc_id for h in guest.hits} <= {"guide.md", "billing.md"}
        assert _no_ms(guest) == _no_ms(retrieve(alone, c, q, embedder=fake_embedder, top_k=5)), q
    cfo = retrieve(full, c, "backup job copies the volume to the vault", embedder=fake_embedder, principal="cfo", top_k=5)
    assert {h.doc_id for h in cfo.hits} & {"aaa-vault.md", "zzz-vault.md"}  # the hidden documents are there


def test_neighbours_never_cross_a_document_boundary(access_kbs, fake_embedder):
    """The last chunk of one document and the first of the next (in catalog order) are never one span."""
    full, _ = access_kbs
    c = load_contract(None, ["postprocess.expand.mode=neighbours", "postprocess.expand.neighbours=3",
                             "postprocess.expand.max_tokens=5000"], search=False)
    docs = {d: [x["chunk_id"] for x in full.catalog.chunk_spans(d)] for d in full.document_ids()}
    for q in ("restore command console snapshot", "invoices first day month account owner",
              "run the installer and pick a folder", "paragraph fjord vault checksum", "paragraph amber vault"):
        got = retrieve(full, c, q, embedder=fake_embedder, top_k=6)
        assert got.trace["expand"]["expanded"], q
        for h in got.hits:
            assert h.text in full.document_text(h.doc_id)
        for hit_id, first, last, _, _ in got.trace["expand"]["expanded"]:
            doc = hit_id.rsplit("#", 1)[0]
            assert first in docs[doc] and last in docs[doc], (q, hit_id, first, last)
    billing = retrieve(full, c, "invoices first day month account owner", embedder=fake_embedder, top_k=6)
    top = billing.hits[0]
    assert top.doc_id == "billing.md" and top.text == full.chunks_by_id(["billing.md#0"])["billing.md#0"]["text"]


def test_a_section_across_pages_stops_where_the_allowed_chunks_end():
    """One section over pages 1-3 (a PDF section running on), the caller allowed page 2 only: the
    span is page 2's chunks, never a chunk beyond a hidden one (expand() on the catalog's spans)."""
    from types import SimpleNamespace

    from kbtool.contract import Expand
    from kbtool.query.expand import expand
    from kbtool.query.answer_types import Hit

    parts = ["p1a ", "p1b ", "p2a ", "p2b ", "p2c ", "p3a ", "p3b "]
    text = "".join(parts)
    spans, at = [], 0
    for i, p in enumerate(parts):
        spans.append({"chunk_id": f"d.pdf#{i}", "ordinal": i, "section_path": "Notes", "page": int(p[1]),
                      "char_start": at, "char_end": at + 3, "line_start": None, "line_end": None, "n_tokens": 2})
        at += len(p)
    store = SimpleNamespace(catalog=SimpleNamespace(chunk_spans=lambda d: spans), document_text=lambda d: text)
    allowed = {s["chunk_id"] for s in spans if s["page"] == 2}

    def hit(i):
        return Hit(rank=1, chunk_id=f"d.pdf#{i}", doc_id="d.pdf", title="d", section_path="Notes", page=2,
                   filetype="pdf", char_start=spans[i]["char_start"], char_end=spans[i]["char_end"],
                   text=parts[i].strip(), score=1.0, confidence=0.5)

    for cfg in (Expand(mode="section", max_tokens=100), Expand(mode="neighbours", neighbours=3, max_tokens=100)):
        for i in (2, 3, 4):
            out, trace = expand([hit(i)], store, cfg, allowed=allowed, keep=5)
            assert out[0].text == "p2a p2b p2c" and trace["expanded"][0][1:3] == ["d.pdf#2", "d.pdf#4"]
        out, _ = expand([hit(3)], store, cfg, allowed={"d.pdf#2", "d.pdf#3", "d.pdf#5"}, keep=5)  # #4 hidden
        assert out[0].text == "p2a p2b"  # #5 is allowed but lies beyond the hidden #4
        out, _ = expand([hit(3)], store, cfg, allowed=None, keep=5)
        assert out[0].text == text.strip()


# Review of issue 21 (post-processing after fusion): defects found by an adversarial pass, each
# pinned by a test that failed before its fix.
AWS = "AKIA" + "QX7RZ2MB4TKW9PLD"  # a fake key id, built so this file holds none verbatim

MIXED_WORDS = ["amber", "birch", "cedar", "dune"]
MIXED_GUIDE = ("# Guide\n\n## Backups\n\n"
               + "\n\n".join(f"Paragraph {w}: the nightly backup job copies the {w} volume to cold storage and "
                             f"verifies the {w} checksum before it marks the {w} run as complete." for w in MIXED_WORDS) + "\n")
MIXED_KEYS = ("# Keys\n\n## Backup keys\n\nThe nightly backup job copies the ember volume to cold storage and verifies "
              "the ember checksum before it marks the ember run as complete.\n\n"
              f"The backup job signs in with the key id {AWS} which is rotated by the operations team every quarter "
              "of the calendar year.\n")


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, fake_embedder):
    base = tmp_path_factory.mktemp("r21mixed")
    write(base / "docs" / "guide.md", MIXED_GUIDE)
    write(base / "docs" / "keys.md", MIXED_KEYS)
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
