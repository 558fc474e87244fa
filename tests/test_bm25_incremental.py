"""BM25 delta segments (issue 20): a change of a few documents is written as a delta beside the base
index, and every BM25 number (scores, rankings, bounds, term weights) equals — bit for bit — that
of a store rebuilt from scratch with the same documents, for a restricted caller and a filter too.
Real stores and real ``ingest``; the fake embedder. ``DELTA_MIN_ROWS`` is lowered so that these
small stores take deltas (a store below it is rebuilt whole), and ``DELTA_FRACTION`` raised."""

import json
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbtool.cli import app
from kbtool.contract import load_contract
from kbtool.ingestion.pipeline import IngestOptions, ingest
from kbtool.query.pipeline import retrieve
from kbtool.query.scope import scope
from kbtool.query.signals import term_weights
from kbtool.store import Store, bm25

from .conftest import write

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"public": {"access": "public", "team": "a"}, "shared": {"access": "public", "team": "b"},
           "finance": {"access": "finance", "team": "a"}}
VOCAB = [f"{a}{b}" for a in ("quota", "merge", "proxy", "sync", "agent", "token", "cache", "route", "audit", "ledger")
         for b in ("", "s", "er", "ing", "ed", "al", "ion", "ive", "ure", "ity", "ism", "ous")]
NEWWORD = "xylophonequartz"


def contract(*extra):
    return load_contract(None, ["access.principals={guest: [public], cfo: [finance]}", *extra], search=False)


@pytest.fixture(autouse=True)
def deltas_for_small_stores(monkeypatch):
    monkeypatch.setattr(bm25, "DELTA_MIN_ROWS", 0)
    monkeypatch.setattr(bm25, "DELTA_FRACTION", 0.5)  # ~45 rows: a few rounds of changes stay deltas


def _doc(rng: random.Random, title: str) -> str:
    weights = [1.0 / (i + 1) for i in range(len(VOCAB))]
    paras = [" ".join(rng.choices(VOCAB, weights, k=rng.randint(5, 60))) for _ in range(rng.randint(1, 3))]
    return f"# {title}\n\n" + "\n\n".join(paras) + "\n"


def _files(seed: int = 1, per_folder: int = 14) -> dict[str, dict[str, str]]:
    rng = random.Random(seed)
    return {f: {f"{f}{i:02d}.md": _doc(rng, f"{f} {i}") for i in range(per_folder)} for f in FOLDERS}


def _write_tree(base: Path, files: dict) -> None:
    for folder, docs in files.items():
        shutil.rmtree(base / folder, ignore_errors=True)
        for name, text in docs.items():
            write(base / folder / name, text)


def _ingest(store, base: Path, embedder):
    reports = []
    for folder, meta in FOLDERS.items():
        reports.append(ingest(store, [base / folder], IngestOptions(metadata=meta), embedder=embedder))
        assert not reports[-1].failed
    return reports


def _fresh(tmp_path: Path, files: dict, embedder, name: str) -> Store:
    base = tmp_path / name
    _write_tree(base / "d", files)
    store = Store.open(base / "kb", create=True, model=embedder.spec)
    low, bm25.DELTA_MIN_ROWS = bm25.DELTA_MIN_ROWS, 10**9  # built whole, as a rebuild from scratch
    try:
        _ingest(store, base / "d", embedder)
    finally:
        bm25.DELTA_MIN_ROWS = low
    assert not _delta_name(store)
    return store


def _delta_name(store) -> str | None:
    return bm25.BM25Index.state(store.path / "bm25").get("delta")


QUERIES = [" ".join(random.Random(i).choices(VOCAB, k=random.Random(-i).randint(1, 6))) for i in range(60)] + [
    NEWWORD, f"{NEWWORD} quota", "quota quota ledger", "nothingmatches", "sync cached proxy audit"]
CALLERS = [(None, []), ("guest", []), (None, ["team=a"]), ("guest", ["team=b"]), ("cfo", ["team=a"])]


def _numbers(store, principal, filters):
    """Every BM25 number a caller's questions get: scores of each chunk, top 10, bound, term weights."""
    sc = scope(store, contract(), filters, principal)
    index = store.bm25()
    mask = index.held("mask", sc.allowed) if sc.allowed is not None else None
    scoped = index.held("scoped", sc.visible) if sc.visible is not None else None
    out = []
    for q in QUERIES:
        terms = store.analyzer(q)
        s = index.scores(terms, mask, scoped)
        out.append(({index.chunk_ids[i]: float(s[i]) for i in range(len(s)) if s[i] > 0}, index.top(s, 10),
                    index.bound(terms, mask, scoped), term_weights(index, terms, mask),
                    [index.has_term(t, mask) for t in terms]))
    return out


def _hits(store, embedder, principal, filters):
    answers = retrieve(store, contract(), QUERIES[:20], filters=filters, principal=principal, embedder=embedder, top_k=8)
    return [[(h.chunk_id, h.score, h.confidence, h.bm25_score, h.bm25_coverage, h.bm25_rank) for h in a.hits]
            + [a.confidence, a.decision] for a in answers]


def assert_same(a: Store, b: Store, embedder):
    assert sorted(a.bm25().chunk_ids) == sorted(b.bm25().chunk_ids)
    assert a.is_indexed() and b.is_indexed()
    for principal, filters in CALLERS:
        assert _numbers(a, principal, filters) == _numbers(b, principal, filters), (principal, filters)  # bit for bit
    for principal, filters in CALLERS[:2]:
        assert _hits(a, embedder, principal, filters) == _hits(b, embedder, principal, filters)


def _change(files: dict, step: int) -> dict:
    """Round ``step`` of changes: one document changed (a new word in round 0), one deleted, one added."""
    rng = random.Random(100 + step)
    files = {f: dict(d) for f, d in files.items()}
    changed = sorted(files["public"])[step]
    files["public"][changed] = _doc(rng, "changed") + (f"\nThe {NEWWORD} lives here only.\n" if step == 0 else "")
    del files["finance"][sorted(files["finance"])[step]]
    files["shared"][f"added{step}.md"] = _doc(rng, f"added {step}")
    return files


@pytest.mark.slow
def test_add_change_delete_write_a_delta_equal_to_a_rebuild(tmp_path, fake_embedder):
    files = _files()
    store = _fresh(tmp_path, files, fake_embedder, "a")
    for step in range(3):
        files = _change(files, step)
        _write_tree(tmp_path / "a" / "d", files)
        reports = _ingest(store, tmp_path / "a" / "d", fake_embedder)
        assert not any(r.index.bm25_rebuilt for r in reports)  # no full rebuild: deltas
        assert any(r.index.bm25_delta > 0 for r in reports)  # and the report says a delta was written
        name = _delta_name(store)
        assert name and (store.path / "bm25" / name).is_dir()
        assert len(list((store.path / "bm25").glob("delta-*"))) <= 2  # older deltas are removed
        reference = _fresh(tmp_path, files, fake_embedder, f"ref{step}")
        assert_same(store, reference, fake_embedder)
        # the doctor's view of the rows on disk is the live rows
        assert sorted(bm25.BM25Index.chunk_ids_on_disk(store.path / "bm25")) == sorted(store.index_targets())
    # a word only the changed file holds, in no base vocabulary, is found
    index = store.bm25()
    assert index.delta is not None and NEWWORD not in index.retriever.vocab_dict
    assert index.has_term(NEWWORD) and NEWWORD in index.vocabulary()
    assert [c.split("#")[0] for c, _ in index.search([NEWWORD], 5)] == [sorted(files["public"])[0]]
    hits = retrieve(store, contract(), NEWWORD, embedder=fake_embedder, principal="guest").hits
    assert hits[0].doc_id.endswith(sorted(files["public"])[0])
    r = runner.invoke(app, ["doctor", "--store", str(store.path), "--json"])
    assert r.exit_code == 0, r.stdout


@pytest.mark.slow
def test_a_delta_past_the_bound_compacts_into_a_full_rebuild(tmp_path, fake_embedder, monkeypatch):
    files = _files(seed=2)
    store = _fresh(tmp_path, files, fake_embedder, "a")
    files = _change(files, 0)
    _write_tree(tmp_path / "a" / "d", files)
    _ingest(store, tmp_path / "a" / "d", fake_embedder)
    assert _delta_name(store)
    monkeypatch.setattr(bm25, "DELTA_FRACTION", 0.001)  # any further change passes the bound
    files = _change(files, 1)
    _write_tree(tmp_path / "a" / "d", files)
    reports = _ingest(store, tmp_path / "a" / "d", fake_embedder)
    assert any(r.index.bm25_rebuilt for r in reports)
    assert not _delta_name(store) and not list((store.path / "bm25").glob("delta-*"))
    assert_same(store, _fresh(tmp_path, files, fake_embedder, "ref"), fake_embedder)
    # --rebuild compacts too, and a store below DELTA_MIN_ROWS rows is always rebuilt whole
    monkeypatch.setattr(bm25, "DELTA_FRACTION", 0.5)
    files = _change(files, 2)
    _write_tree(tmp_path / "a" / "d", files)
    _ingest(store, tmp_path / "a" / "d", fake_embedder)
    assert _delta_name(store)
    from kbtool.index import index

    assert index(store, embedder=fake_embedder, rebuild=True).bm25_rebuilt and not _delta_name(store)
    monkeypatch.setattr(bm25, "DELTA_MIN_ROWS", 10_000)
    files = _change(files, 3)
    _write_tree(tmp_path / "a" / "d", files)
    reports = _ingest(store, tmp_path / "a" / "d", fake_embedder)
    assert any(r.index.bm25_rebuilt for r in reports) and not _delta_name(store)
    assert_same(store, _fresh(tmp_path, files, fake_embedder, "ref2"), fake_embedder)


def test_new_analyzer_settings_rebuild_whole(tmp_path, fake_embedder):
    files = _files(seed=3)
    store = _fresh(tmp_path, files, fake_embedder, "a")
    files = _change(files, 0)
    _write_tree(tmp_path / "a" / "d", files)
    _ingest(store, tmp_path / "a" / "d", fake_embedder)
    assert _delta_name(store)
    assert store.set_stemmer("english") and not store.is_indexed()
    from kbtool.index import sync

    assert sync(store, fake_embedder).bm25_rebuilt and not _delta_name(store) and store.is_indexed()


@pytest.mark.slow
def test_an_index_from_before_segments_loads_and_its_next_change_rebuilds_it(tmp_path, fake_embedder):
    files = _files(seed=4)
    store = _fresh(tmp_path, files, fake_embedder, "a")
    (store.path / "bm25" / bm25.ROWS_FILE).unlink()  # as written before segments: no row hashes, no delta
    state = bm25.BM25Index.state(store.path / "bm25")
    assert set(state) == {"generation", "digest"}
    reopened = Store.open(store.path)
    assert reopened.is_indexed() and reopened.bm25().delta is None and reopened.bm25().search(["quota"], 3)
    files = _change(files, 0)
    _write_tree(tmp_path / "a" / "d", files)
    reports = _ingest(reopened, tmp_path / "a" / "d", fake_embedder)
    assert any(r.index.bm25_rebuilt for r in reports) and (store.path / "bm25" / bm25.ROWS_FILE).exists()
    assert_same(reopened, _fresh(tmp_path, files, fake_embedder, "ref"), fake_embedder)


def test_a_long_lived_reader_sees_each_delta_and_the_rebuild(tmp_path, fake_embedder):
    files = _files(seed=5)
    store = _fresh(tmp_path, files, fake_embedder, "a")
    reader = Store.open(store.path)
    before = reader.bm25()
    files = _change(files, 0)
    _write_tree(tmp_path / "a" / "d", files)
    _ingest(store, tmp_path / "a" / "d", fake_embedder)
    after = reader.bm25()
    assert after is not before and after.delta is not None and after.search([NEWWORD], 3)
    assert reader.bm25() is after  # nothing changed since: no reload
    from kbtool.index import index

    index(store, embedder=fake_embedder, rebuild=True)
    assert reader.bm25().delta is None and reader.bm25().search([NEWWORD], 3)


KILL_IN_DELTA = """
import os, signal, sys
sys.path.insert(0, sys.argv[4])
from tests.conftest import FakeEmbedder
import kbtool.embed
kbtool.embed.load_embedder = lambda *a, **k: FakeEmbedder()
from kbtool.store import bm25
bm25.DELTA_MIN_ROWS, bm25.DELTA_FRACTION = 0, 0.5
where = sys.argv[3]
if where == "writing":  # half the segment's files written, the state record untouched
    def die(self, folder):
        folder.mkdir(parents=True)
        (folder / bm25.SEGMENT_META).write_text('{"base": "x", "chunk')
        os.kill(os.getpid(), signal.SIGKILL)
    bm25.Delta.save = die
elif where == "before_switch":  # the whole segment written, the state record untouched
    real = bm25.Delta.save
    def die(self, folder):
        real(self, folder)
        os.kill(os.getpid(), signal.SIGKILL)
    bm25.Delta.save = die
else:  # the state record names the new delta; the manifest not yet saved
    real = bm25.BM25Index.write_delta.__func__
    def die(cls, *a, **k):
        real(cls, *a, **k)
        os.kill(os.getpid(), signal.SIGKILL)
    bm25.BM25Index.write_delta = classmethod(die)
from kbtool.cli import main
sys.argv = ["kbtool", "ingest", sys.argv[1], "--store", sys.argv[2], "-q", "--meta", "access=public", "--meta", "team=a"]
main()
"""


@pytest.mark.slow
@pytest.mark.parametrize("where", ["writing", "before_switch", "after_switch"])
def test_sigkill_while_writing_a_delta_leaves_status_truthful_and_the_next_ingest_right(tmp_path, fake_embedder, where):
    files = _files(seed=6)
    store = _fresh(tmp_path, files, fake_embedder, "a")
    state = bm25.BM25Index.state(store.path / "bm25")
    files = _change(files, 0)
    _write_tree(tmp_path / "a" / "d", files)
    proc = subprocess.run([sys.executable, "-c", KILL_IN_DELTA, str(tmp_path / "a" / "d" / "public"), str(store.path),
                           where, str(ROOT)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    after = Store.open(store.path)
    assert not after.is_indexed()  # status never calls a stale index current
    r = runner.invoke(app, ["status", "--store", str(store.path), "--json"])
    assert json.loads(r.stdout)["indexes_current"] is False
    if where == "after_switch":
        assert _delta_name(after)  # the new delta is in place; the manifest is behind
    else:
        assert bm25.BM25Index.state(store.path / "bm25") == state  # the old record, naming the old index
        assert list((store.path / "bm25").glob("delta-*"))  # the half-written folder, never named
    # readers keep working meanwhile: the index on disk loads
    assert after.bm25().search(["quota"], 3)
    _ingest(after, tmp_path / "a" / "d", fake_embedder)
    assert after.is_indexed() and _delta_name(after)
    assert len(list((store.path / "bm25").glob("delta-*"))) <= 2
    assert_same(after, _fresh(tmp_path, files, fake_embedder, "ref"), fake_embedder)


def test_a_full_build_from_raw_postings_equals_bm25s_own_indexing(tmp_path):
    """``BM25Index.build`` computes bm25s's stored scores from the vectorised raw postings: the
    arrays equal bm25s's own per-document indexing bit for bit (empty and one-token rows too)."""
    import numpy as np

    from kbtool.store.bm25 import BM25Index, _bm25s

    rng = random.Random(11)
    docs = [rng.choices(VOCAB[: rng.randint(2, len(VOCAB))], k=rng.randint(0, 80)) for _ in range(300)]
    docs += [[], ["solo"], ["twice", "twice"]]
    BM25Index.build(tmp_path / "ours", [f"c{i}" for i in range(len(docs))], docs, {})
    ours = BM25Index.load(tmp_path / "ours").retriever
    theirs = _bm25s().BM25(k1=1.2, b=0.75, method="lucene")
    theirs.index(docs, show_progress=False)
    assert set(ours.vocab_dict) == set(theirs.vocab_dict)
    for t in (t for t in theirs.vocab_dict if t):  # ("": bm25s's empty token, no column of its own there)
        i, j = ours.vocab_dict[t], theirs.vocab_dict[t]
        for key in ("data", "indices"):
            a = ours.scores[key][ours.scores["indptr"][i]: ours.scores["indptr"][i + 1]]
            b = theirs.scores[key][theirs.scores["indptr"][j]: theirs.scores["indptr"][j + 1]]
            assert a.dtype == b.dtype and np.array_equal(a, b), (t, key)
    for _ in range(50):
        q = rng.sample([t for t in theirs.vocab_dict if t], rng.randint(1, 5))
        assert np.array_equal(ours.get_scores([ours.vocab_dict[t] for t in q]),
                              theirs.get_scores([theirs.vocab_dict[t] for t in q]))


def test_a_reader_racing_a_switch_retries_with_the_new_record(tmp_path, fake_embedder, monkeypatch):
    """A reader that read the state record just before a writer switched twice (its delta removed)
    or rebuilt whole (its delta belongs to another base) never loads a mismatched pair: the load
    fails and ``current`` retries once with the record on disk."""
    files = _files(seed=7)
    store = _fresh(tmp_path, files, fake_embedder, "a")
    bm25_dir = store.path / "bm25"
    files = _change(files, 0)
    _write_tree(tmp_path / "a" / "d", files)
    _ingest(store, tmp_path / "a" / "d", fake_embedder)
    stale = bm25.BM25Index.state(bm25_dir)
    for step in (1, 2):
        files = _change(files, step)
        _write_tree(tmp_path / "a" / "d", files)
        _ingest(store, tmp_path / "a" / "d", fake_embedder)
    assert not (bm25_dir / stale["delta"]).exists()  # removed: two switches since
    with pytest.raises(Exception, match="damaged"):
        bm25.BM25Index.load(bm25_dir, stale)
    real_state = bm25.BM25Index.state
    calls = []

    def first_stale(path):
        calls.append(path)
        return stale if len(calls) == 1 else real_state(path)

    monkeypatch.setattr(bm25.BM25Index, "state", staticmethod(first_stale))
    index = bm25.BM25Index.current(bm25_dir, None)
    assert index.loaded_state == real_state(bm25_dir) and sorted(index.chunk_ids) == sorted(store.index_targets())
    monkeypatch.undo()
    # a delta record read before a full rebuild swapped another base in
    monkeypatch.setattr(bm25, "DELTA_MIN_ROWS", 0)
    monkeypatch.setattr(bm25, "DELTA_FRACTION", 0.5)
    before = bm25.BM25Index.state(bm25_dir)
    delta_copy = tmp_path / "kept-delta"
    shutil.copytree(bm25_dir / before["delta"], delta_copy)
    from kbtool.index import index as run_index

    run_index(store, embedder=fake_embedder, rebuild=True)
    shutil.copytree(delta_copy, bm25_dir / before["delta"])  # as if still readable in the new base
    with pytest.raises(Exception, match="another base"):
        bm25.BM25Index.load(bm25_dir, before)
