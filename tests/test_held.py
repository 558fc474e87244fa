"""The record of what each vector collection holds (kbtool/store/held.py): an unchanged or one-file
sync never lists Chroma; a store without a record lists it once and records it; a record that lies
is caught by its count check or found by doctor and `index --verify`; a SIGKILL at each write around
the record leaves status honest and the next ingest repairs (no ghost, no missing vector)."""

import json
import signal
import sqlite3
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from kbtool.cli import app
from kbtool.index import index
from kbtool.ingestion.pipeline import ingest
from kbtool.store import Store
from kbtool.store.doctor import diagnose
from kbtool.store.vectors import ChromaVectors

from .conftest import ROOT, write

runner = CliRunner()
FILES = {
    "keep.md": "# Keep\n\nThe word marmaladefox lives here.\n",
    "gone.md": "# Gone\n\nThe word quokkatrain lives here.\n",
    "other.md": "# Other\n\nNothing to see in this third file at all.\n",
}


def _store(tmp_path, fake_embedder) -> Store:
    for name, text in FILES.items():
        write(tmp_path / "d" / name, text)
    store = Store.open(tmp_path / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(store, [tmp_path / "d"], embedder=fake_embedder).failed
    return store


def _record(store, name="dense") -> dict:
    return store.catalog.vector_record(name)


def _in_line(path, fake_embedder) -> None:
    """Chroma holds exactly the catalog's chunks, the record says exactly that, doctor is content."""
    store = Store.open(path)
    assert store.is_indexed()
    held = store.vectors.indexed()
    assert held == store.index_targets()  # no ghost, nothing missing or stale
    assert _record(store) == held and store.catalog.vector_record_state("dense")["clean"]
    assert all(f["ok"] for f in diagnose(store)), diagnose(store)


@pytest.fixture
def no_listing(monkeypatch):
    """ChromaVectors.indexed counted; the test says whether it may run."""
    calls = []
    real = ChromaVectors.indexed

    def spy(self):
        calls.append(self.name)
        return real(self)

    monkeypatch.setattr(ChromaVectors, "indexed", spy)
    return calls


def test_an_unchanged_and_a_one_file_sync_never_list_chroma(tmp_path, fake_embedder, no_listing):
    store = _store(tmp_path, fake_embedder)
    assert no_listing == ["chunks"]  # the first ingest had no record yet
    assert _record(store) == store.vectors.indexed()
    no_listing.clear()
    rep = ingest(store, [tmp_path / "d"], embedder=fake_embedder)  # unchanged
    assert rep.index is None or rep.index.upserted == 0
    write(tmp_path / "d" / "keep.md", "# Keep\n\nThe word marmaladefox lives here, and now a badgerlamp.\n")
    (tmp_path / "d" / "gone.md").unlink()
    rep = ingest(store, [tmp_path / "d"], embedder=fake_embedder)  # one file changed, one removed
    assert rep.index.upserted == 1 and rep.index.deleted == 1
    fresh = Store.open(store.path)
    r = index(fresh, embedder=fake_embedder)  # a plain index of a current store
    assert r.upserted == r.deleted == 0
    assert fresh.vectors._client is None  # not even opened: a Chroma client costs a second at start
    assert no_listing == []  # the record answered every time
    _in_line(store.path, fake_embedder)
    index(store, embedder=fake_embedder, rebuild=True)  # drops the collection and its record: listed (empty)
    _in_line(store.path, fake_embedder)


def test_a_store_without_a_record_lists_chroma_once_then_keeps_one(tmp_path, fake_embedder, no_listing):
    store = _store(tmp_path, fake_embedder)
    store.close()
    db = sqlite3.connect(store.path / "catalog.sqlite3")  # as kbtool wrote it before the record
    db.executescript("DROP TABLE vector_record; DROP TABLE vector_record_state;")
    db.close()
    no_listing.clear()
    old = Store.open(store.path)
    assert old.catalog.vector_record_state("dense") is None and old.catalog.vector_record("dense") == {}
    assert old.is_indexed() and old.status()["indexes_current"]
    ingest(old, [tmp_path / "d"], embedder=fake_embedder)
    assert no_listing == ["chunks"]
    ingest(old, [tmp_path / "d"], embedder=fake_embedder)
    assert no_listing == ["chunks"]  # once
    _in_line(store.path, fake_embedder)


def test_a_record_claiming_more_than_chroma_holds_is_not_trusted(tmp_path, fake_embedder, no_listing):
    store = _store(tmp_path, fake_embedder)
    with store.catalog.transaction() as db:  # the record claims a vector Chroma lacks
        db.execute("INSERT INTO vector_record VALUES ('dense', 'keep.md#9', 'x')")
    no_listing.clear()
    index(store, embedder=fake_embedder)
    assert no_listing == ["chunks"]  # its count is not Chroma's: listed, and the record rewritten
    _in_line(store.path, fake_embedder)


def test_a_chroma_database_replaced_behind_the_record_is_listed(tmp_path, fake_embedder, no_listing):
    import shutil

    store = _store(tmp_path, fake_embedder)
    db = store.path / "chroma" / "chroma.sqlite3"
    shutil.copy2(db, db.with_name("copy"))  # a restore from a backup: the same name, another file
    db.with_name("copy").replace(db)
    no_listing.clear()
    index(Store.open(store.path), embedder=fake_embedder)
    assert no_listing == ["chunks"]
    index(Store.open(store.path), embedder=fake_embedder)
    assert no_listing == ["chunks"]  # recorded again, with the new file
    _in_line(store.path, fake_embedder)


def _lie(store) -> tuple[str, str]:
    """Behind the record's back: one chunk's vector deleted from Chroma and a ghost written in its
    place (the count stays); returns (missing chunk, ghost id)."""
    missing = sorted(store.index_targets())[0]
    store.vectors.delete([missing])
    store.vectors.upsert(["ghost.md#0"], np.ones((1, 64), dtype=np.float32), [{"doc_id": "ghost.md", "index_hash": "x"}])
    return missing, "ghost.md#0"


@pytest.mark.parametrize("repair", [["doctor", "--repair"], ["index", "--verify"]])
def test_a_lying_record_is_found_by_doctor_and_repaired_by_verify(tmp_path, fake_embedder, repair, monkeypatch):
    store = _store(tmp_path, fake_embedder)
    missing, ghost = _lie(store)
    index(store, embedder=fake_embedder)  # a plain index trusts the record: nothing to do
    assert ghost in store.vectors.indexed()
    r = runner.invoke(app, ["doctor", "--store", str(store.path), "--json"])
    found = {f["check"]: f for f in json.loads(r.stdout)["findings"]}
    assert r.exit_code == 1 and not found["vectors"]["ok"]
    assert "1 chunk(s) without a vector, 1 vector(s) of chunks the catalog no longer has" in found["vectors"]["detail"]
    r = runner.invoke(app, ["doctor", "--store", str(store.path)])
    assert "kbtool index --verify" in r.stderr
    import kbtool.embed

    monkeypatch.setattr(kbtool.embed, "load_embedder", lambda *a, **k: fake_embedder)  # the store's fake model
    r = runner.invoke(app, [*repair, "--store", str(store.path), "--json"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    report = report["repaired"] if repair[0] == "doctor" else report
    assert report["deleted"] == 1 and report["upserted"] == 1 and report["embedded"] == 0
    assert missing in _record(Store.open(store.path)) and ghost not in _record(Store.open(store.path))
    _in_line(store.path, fake_embedder)


# A real process, killed (SIGKILL) at one write around the record while it ingests a change.
KILL_AT = """
import os, signal, sys
from contextlib import contextmanager
sys.path.insert(0, sys.argv[1])
from tests.conftest import FakeEmbedder
import kbtool.index as index_mod
from kbtool.ingestion.pipeline import ingest
from kbtool.store import Store, catalog, vectors
where, folder, path = sys.argv[2:5]
def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
if where == "before-chroma":  # the record marked dirty, Chroma not written yet
    vectors.ChromaVectors.delete = die
elif where == "mid-chroma":  # Chroma's deletes written, its upserts not
    vectors.ChromaVectors.upsert = die
elif where == "after-chroma":  # Chroma written, the record not rewritten yet
    catalog.Catalog.write_vector_record = die
elif where == "in-record":  # the record's rows written in its transaction, not committed
    real_tx, real_write, inside = catalog.Catalog.transaction, catalog.Catalog.write_vector_record, []
    @contextmanager
    def transaction(self):
        with real_tx(self) as db:
            yield db
            if inside:
                die()
    def write(self, *args, **kwargs):
        inside.append(1)
        real_write(self, *args, **kwargs)
    catalog.Catalog.transaction, catalog.Catalog.write_vector_record = transaction, write
else:  # "after-record": the record clean and new, the manifest not yet saying so
    index_mod._sync_bm25 = die
ingest(Store.open(path), [folder], embedder=FakeEmbedder())
"""


@pytest.mark.slow
@pytest.mark.parametrize("where", ["before-chroma", "mid-chroma", "after-chroma", "in-record", "after-record"])
def test_sigkill_around_the_record_leaves_status_honest_and_the_next_ingest_repairs(tmp_path, fake_embedder, where):
    store = _store(tmp_path, fake_embedder)
    d = tmp_path / "d"
    (d / "gone.md").unlink()
    write(d / "new.md", "# New\n\nThe word zebracompass arrives here.\n")
    proc = subprocess.run([sys.executable, "-c", KILL_AT, str(ROOT), where, str(d), str(store.path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert not Store.open(store.path).is_indexed()
    r = runner.invoke(app, ["status", "--store", str(store.path), "--json"])
    assert json.loads(r.stdout)["indexes_current"] is False
    # The chunk the killed run may have written goes too: a record that missed it would keep a ghost.
    (d / "new.md").unlink()
    write(d / "later.md", "# Later\n\nThe word ibiscompass comes last.\n")
    after = Store.open(store.path)
    assert not ingest(after, [d], embedder=fake_embedder).failed
    _in_line(store.path, fake_embedder)
    held = {c.split("#")[0] for c in Store.open(store.path).vectors.indexed()}
    assert held == {"keep.md", "other.md", "later.md"}
    q = fake_embedder.embed_queries(["zebracompass arrives", "quokkatrain lives"])
    for hits in Store.open(store.path).vectors.search(q, 10):  # Chroma's own search: no ghost
        assert {c.split("#")[0] for c, _ in hits} <= {"keep.md", "other.md", "later.md"}


def test_vectors_are_written_a_batch_at_a_time_from_the_cache(tmp_path, fake_embedder, monkeypatch):
    """A sync reads the vectors back from the embedding cache and writes them a batch at a time
    (memory flat at any store size): batches of 2 give the same index as one write, nothing lost."""
    import kbtool.index as index_mod

    for i in range(7):
        write(tmp_path / "d" / f"f{i}.md", f"# Part {i}\n\nSection {i} of seven, with its own word w{i}x.\n")
    write(tmp_path / "d" / "keep.md", FILES["keep.md"])
    monkeypatch.setattr(index_mod, "_WRITE_BATCH", 2)
    store = Store.open(tmp_path / "kb", create=True, model=fake_embedder.spec)
    report = ingest(store, [tmp_path / "d"], embedder=fake_embedder)
    assert not report.failed and report.index.upserted == len(store.index_targets()) >= 8
    _in_line(tmp_path / "kb", fake_embedder)
    vecs = store.vectors.get(list(store.index_targets()))
    cached = store.chunk_vectors()
    unit = {c: v / np.linalg.norm(v) for c, v in cached.items()}  # Chroma (cosine space) keeps them normalised
    assert set(vecs) == set(cached) and all(np.allclose(vecs[c] / np.linalg.norm(vecs[c]), unit[c], atol=1e-6)
                                            for c in vecs)
    assert store.manifest["embedding"]["dim"] == len(next(iter(vecs.values())))
