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
