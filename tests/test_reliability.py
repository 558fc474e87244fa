"""Crashes between the vector writes and the BM25 swap, a failing BM25 build, damaged stores:
the catalog stays the truth, status never claims a stale index is current, a plain `kbtool index`
repairs. The crash is a real SIGKILL of a real kbtool process."""

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from kbtool.cli import app
from kbtool.errors import StoreError, StoreFullError
from kbtool.ingestion.pipeline import ingest
from kbtool.query.retriever import Retriever
from kbtool.index import sync
from kbtool.store import Store
from kbtool.store.bm25 import BM25Index

from .conftest import write

runner = CliRunner()

KILL_AT_BM25_SWAP = """
import os, signal, sys
from kbtool.store import bm25
def die(cls, *args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)  # after Chroma was written, before BM25 is swapped in
bm25.BM25Index.build = classmethod(die)
from kbtool.cli import main
sys.argv = ["kbtool", "ingest", sys.argv[1], "--store", sys.argv[2], "-q"]
main()
"""


STANDARD = {
    "keep.md": "# Keep\n\nThe word marmaladefox lives here.\n",
    "gone.md": "# Gone\n\nThe word quokkatrain lives here.\n",
    "other.md": "# Other\n\nNothing to see in this third file at all.\n",
}


def _store(tmp_path, embedder, files=STANDARD):
    """A real store of these files (folder d/, store kb/)."""
    for name, text in files.items():
        write(tmp_path / "d" / name, text)
    store = Store.open(tmp_path / "kb", create=True)
    ingest(store, [tmp_path / "d"], embedder=embedder)
    return store


def _change(tmp_path):
    (tmp_path / "d" / "gone.md").unlink()
    write(tmp_path / "d" / "new.md", "# New\n\nThe word zebracompass arrives here.\n")


def _assert_consistent(path, embedder):
    store = Store.open(path)
    assert store.is_indexed()
    r = Retriever(store, embedder)
    assert [h.doc_id for h in r.search("zebracompass", mode="bm25")][:1] == ["new.md"]
    assert r.search("quokkatrain", mode="bm25") == []  # no ghost in BM25
    assert all(h.doc_id != "gone.md" for h in r.search("quokkatrain", mode="dense", top_k=10))  # nor in Chroma
    assert {h.doc_id for h in r.search("word lives here", mode="bm25", top_k=10)} >= {"keep.md"}


def test_sigkill_between_vectors_and_bm25_is_detected_and_repaired_by_plain_index(tmp_path, embedder):
    store = _store(tmp_path, embedder)
    _change(tmp_path)
    proc = subprocess.run([sys.executable, "-c", KILL_AT_BM25_SWAP, str(tmp_path / "d"), str(store.path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    after = Store.open(store.path)
    assert not after.is_indexed()  # status must not claim current
    r = runner.invoke(app, ["status", "--store", str(store.path), "--json"])
    assert '"indexes_current": false' in r.stdout
    r = runner.invoke(app, ["index", "--store", str(store.path), "-q", "--json"])
    assert r.exit_code == 0, r.output
    assert '"bm25_rebuilt": true' in r.stdout and '"embedded": 0' in r.stdout  # nothing re-embedded
    _assert_consistent(store.path, embedder)


def test_failing_bm25_build_leaves_the_store_behind_not_wrong(tmp_path, embedder, monkeypatch):
    store = _store(tmp_path, embedder)
    _change(tmp_path)
    real = BM25Index.build.__func__

    def boom(cls, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(BM25Index, "build", classmethod(boom))
    with pytest.raises(StoreFullError, match="no space left .* nothing was lost"):  # said as such, not damage
        ingest(store, [tmp_path / "d"], embedder=embedder)
    assert not Store.open(store.path).is_indexed()
    monkeypatch.setattr(BM25Index, "build", classmethod(real))
    r = runner.invoke(app, ["doctor", "--store", str(store.path), "--json"])
    data = __import__("json").loads(r.stdout)
    assert r.exit_code == 1 and not data["ok"]
    bad = {f["check"] for f in data["findings"] if not f["ok"]}
    assert "bm25" in bad and "status" in bad and "vectors" not in bad  # Chroma was written, BM25 was not
    r = runner.invoke(app, ["doctor", "--store", str(store.path), "--repair", "--json"])
    assert r.exit_code == 0 and __import__("json").loads(r.stdout)["repaired"]["bm25_rebuilt"]
    _assert_consistent(store.path, embedder)


def test_a_deleted_chroma_folder_or_catalog_is_detected_never_wiped(tmp_path, embedder):
    store = _store(tmp_path, embedder)
    store.close()
    shutil.rmtree(tmp_path / "kb" / "chroma")
    again = Store.open(tmp_path / "kb")
    assert not again.is_indexed()
    r = runner.invoke(app, ["doctor", "--store", str(tmp_path / "kb")])
    assert r.exit_code == 1 and "chroma/ is missing" in r.stdout
    report = sync(again, embedder)  # a plain index restores the vectors from the cache
    assert report.embedded == 0 and report.upserted == 3
    assert again.is_indexed()
    again.close()
    os.remove(tmp_path / "kb" / "catalog.sqlite3")
    with pytest.raises(StoreError, match="no catalog"):
        Store.open(tmp_path / "kb")
    r = runner.invoke(app, ["index", "--store", str(tmp_path / "kb")])
    assert r.exit_code == 1 and "damaged" in r.stderr
    assert (tmp_path / "kb" / "chroma").is_dir() and not (tmp_path / "kb" / "catalog.sqlite3").exists()


def test_damaged_files_and_unexpected_failures_are_one_line(tmp_path, embedder, monkeypatch):
    store = _store(tmp_path, embedder)
    store.close()
    (tmp_path / "kb" / "catalog.sqlite3").write_bytes(b"this is not sqlite" * 100)
    for f in ("catalog.sqlite3-wal", "catalog.sqlite3-shm"):
        (tmp_path / "kb" / f).unlink(missing_ok=True)
    r = runner.invoke(app, ["status", "--store", str(tmp_path / "kb")])
    assert r.exit_code == 1 and "damaged" in r.stderr and "Traceback" not in r.output
    (tmp_path / "kb" / "manifest.json").write_text("{not json")
    r = runner.invoke(app, ["query", "x", "--store", str(tmp_path / "kb")])
    assert r.exit_code == 1 and "damaged" in r.stderr and "Traceback" not in r.output
    # a bug anywhere: one line naming the error and how to see the traceback
    import kbtool.cli.status as status_cmd

    monkeypatch.setattr(status_cmd, "open_store", lambda *a, **k: (_ for _ in ()).throw(ZeroDivisionError("boom")))
    r = runner.invoke(app, ["status", "--store", str(tmp_path / "kb")])
    assert r.exit_code == 1 and "Internal error: ZeroDivisionError: boom" in r.stderr and "KBTOOL_DEBUG" in r.stderr


def test_unreadable_subfolder_is_reported_and_its_documents_stay(tmp_path, embedder, monkeypatch):
    write(tmp_path / "d" / "top.md", "# Top\n\nTop level text about harbours.\n")
    write(tmp_path / "d" / "locked" / "inner.md", "# Inner\n\nThe word velvetanchor is inside.\n")
    write(tmp_path / "d" / "locked" / "deeper" / "deep.md", "# Deep\n\nDeeper text about lighthouses.\n")
    store = Store.open(tmp_path / "kb", create=True)
    ingest(store, [tmp_path / "d"], embedder=embedder)
    real_scandir = os.scandir
    locked = str(tmp_path / "d" / "locked")

    def scandir(path="."):  # tests run as root, where chmod 000 does not stop reading
        if str(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    report = ingest(store, [tmp_path / "d"], embedder=embedder)
    assert report.removed == []
    assert any(s["path"] == "locked/" and "unreadable" in s["reason"] for s in report.skipped)
    assert set(store.document_ids()) == {"top.md", "locked/inner.md", "locked/deeper/deep.md"}
    assert Retriever(store, embedder).search("velvetanchor", mode="bm25")[0].doc_id == "locked/inner.md"


def test_a_missing_path_is_refused_before_anything_is_written(tmp_path, embedder):
    write(tmp_path / "good" / "a.md", "# A\n\nalpha beta gamma.\n")
    r = runner.invoke(app, ["ingest", str(tmp_path / "good"), str(tmp_path / "nope"), "--store", str(tmp_path / "kb")])
    assert r.exit_code == 2 and "nope" in r.stderr
    assert not (tmp_path / "kb" / "catalog.sqlite3").exists() or Store.open(tmp_path / "kb").document_ids() == []


CONCURRENT = """
import sys
from kbtool.cli import main
sys.argv = ["kbtool"] + sys.argv[1:]
main()
"""


def test_two_concurrent_writers_one_waits_and_both_finish(tmp_path, embedder):
    for i in range(6):
        write(tmp_path / "a" / f"a{i}.md", f"# A{i}\n\nThe alpha document number {i} mentions lanternfish{i}.\n")
        write(tmp_path / "b" / f"b{i}.md", f"# B{i}\n\nThe beta document number {i} mentions driftwood{i}.\n")
    store = Store.open(tmp_path / "kb", create=True)
    store.close()
    procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT, "ingest", str(tmp_path / d), "--store",
                               str(tmp_path / "kb")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for d in ("a", "b")]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    # (whether the second one had to wait depends on timing; the deterministic case is the next test)
    kb = Store.open(tmp_path / "kb")
    assert kb.is_indexed() and len(kb.document_ids()) == 12
    bm25_ids = set(kb.bm25().chunk_ids)
    chroma_ids = set(kb.vectors.indexed())
    catalog_ids = {cid for cid, _, _ in kb.chunk_metadata()}
    assert bm25_ids == chroma_ids == catalog_ids and len(catalog_ids) == 12
    r = Retriever(kb, embedder)
    assert r.search("lanternfish3", mode="bm25")[0].doc_id == "a3.md"
    assert r.search("driftwood5", mode="bm25")[0].doc_id == "b5.md"


def test_a_writer_that_cannot_wait_fails_cleanly_naming_the_holder(tmp_path):
    from filelock import FileLock

    write(tmp_path / "d" / "a.md", "# A\n\nalpha.\n")
    Store.open(tmp_path / "kb", create=True).close()
    (tmp_path / "kb" / "writer.json").write_text('{"pid": 4242, "since": "2026-12-01T00:00:00+00:00"}')
    with FileLock(str(tmp_path / "kb" / "writer.lock")):
        r = runner.invoke(app, ["ingest", str(tmp_path / "d"), "--store", str(tmp_path / "kb"), "--wait", "0.5"])
    assert r.exit_code == 1 and "pid 4242" in r.stderr and "--wait" in r.stderr


def test_queries_are_served_while_another_process_writes(tmp_path, embedder):
    from filelock import FileLock

    store = _store(tmp_path, embedder)
    with store.catalog.transaction() as db:  # the catalog moved on
        db.execute("UPDATE state SET value = CAST(value AS INTEGER) + 1 WHERE key='generation'")  # as mid-ingest
    assert not store.is_indexed()
    with pytest.raises(StoreError, match="kbtool index"):
        Retriever(store, embedder)  # nobody is writing: a real "behind", reported
    with FileLock(str(tmp_path / "kb" / "writer.lock")):  # another process is writing
        hits = Retriever(Store.open(tmp_path / "kb"), embedder).search("marmaladefox", mode="bm25")
        assert hits[0].doc_id == "keep.md"
        r = runner.invoke(app, ["query", "marmaladefox", "--store", str(tmp_path / "kb"), "--json"])
        assert r.exit_code == 0, r.output


def test_interrupted_embedding_keeps_the_batches_already_paid_for(tmp_path, embedder, monkeypatch):
    import kbtool.index as index_mod

    monkeypatch.setattr(index_mod, "_EMBED_COMMIT", 2)
    for i in range(6):
        write(tmp_path / "d" / f"n{i}.md", f"# N{i}\n\nDocument {i} mentions thistlecrab{i}.\n")
    store = Store.open(tmp_path / "kb", create=True)
    calls = {"n": 0}
    real = embedder.embed

    def flaky(texts, progress=None):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # Ctrl-C in the third batch
        return real(texts, progress=progress)

    monkeypatch.setattr(embedder, "embed", flaky)
    with pytest.raises(KeyboardInterrupt):
        ingest(store, [tmp_path / "d"], embedder=embedder)
    monkeypatch.setattr(embedder, "embed", real)
    report = sync(Store.open(tmp_path / "kb"), embedder)
    assert report.from_cache == 4 and report.embedded == 2  # two batches were kept


def test_escape_sequences_in_documents_never_reach_the_terminal_raw(tmp_path, embedder):
    store = _store(tmp_path, embedder, {
        "evil.md": "# Evil\n\nThe word gremlinbeacon \x1b[2J\x1b]0;pwned\x07 hides a screen clear.\n",
        "ok.md": "# Fine\n\nA harmless second document.\n",
        "ok2.md": "# Fine too\n\nA harmless third document.\n",
    })
    r = runner.invoke(app, ["query", "gremlinbeacon", "--store", str(store.path), "-m", "bm25",
                            "--set", "decide.thresholds={answer: 0, low_confidence: 0}", "--set", "decide.tiers={}"])
    assert r.exit_code == 0, r.output
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout and "\\x1b" in r.stdout


def test_a_non_utf8_file_name_is_reported_and_the_rest_is_ingested(tmp_path, embedder):
    write(tmp_path / "d" / "good.md", "# Good\n\nThe word kestrelpoint is here.\n")
    write(tmp_path / "d" / "good2.md", "# Good two\n\nAnother readable document.\n")
    bad = os.path.join(os.fsencode(tmp_path / "d"), b"caf\xe9-latin1.md")
    with open(bad, "wb") as fh:
        fh.write(b"# Bad name\n\nContent is fine, the name is not.\n")
    r = runner.invoke(app, ["ingest", str(tmp_path / "d"), "--store", str(tmp_path / "kb"), "--json"])
    assert r.exit_code == 0, r.output
    data = __import__("json").loads(r.stdout)
    assert any("not valid UTF-8" in reason and any("caf\\xe9" in p for p in paths)  # {reason: [paths]}
               for reason, paths in data["skipped"].items())
    assert sorted(Store.open(tmp_path / "kb").document_ids()) == ["good.md", "good2.md"]


def test_an_interrupted_chunk_is_completed_by_index_never_mixed(tmp_path, embedder, monkeypatch):
    import kbtool.chunk as chunk_mod
    from kbtool.chunk import ChunkParams
    from kbtool.chunk import chunk
    from kbtool.index import index

    for i in range(4):
        write(tmp_path / "d" / f"c{i}.md", f"# C{i}\n\n" + " ".join(f"word{j}" for j in range(300)) + "\n")
    store = Store.open(tmp_path / "kb", create=True)
    ingest(store, [tmp_path / "d"], embedder=embedder)
    real = chunk_mod.chunk_blocks
    calls = {"n": 0}

    def dies(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(chunk_mod, "chunk_blocks", dies)
    with pytest.raises(KeyboardInterrupt):
        chunk(store, ChunkParams(size=64, overlap=8), embedder=embedder, all_documents=True)
    monkeypatch.setattr(chunk_mod, "chunk_blocks", real)
    assert not Store.open(store.path).is_indexed()
    index(Store.open(store.path), embedder=embedder)
    kb = Store.open(store.path)
    assert kb.is_indexed() and kb.documents_to_chunk(ChunkParams(**kb.manifest["chunking"])) == []
    assert kb.manifest["chunking"]["size"] == 64
    assert max(kb.status()["chunk_tokens_max"], 0) <= 64 * 2  # no document kept its old, larger chunks


def test_a_query_loop_during_a_concurrent_ingest_never_fails_nor_returns_a_ghost(tmp_path, embedder):
    for i in range(8):
        write(tmp_path / "d" / f"old{i}.md", f"# Old {i}\n\nThe old document {i} mentions brasskettle{i}.\n")
    store = Store.open(tmp_path / "kb", create=True)
    ingest(store, [tmp_path / "d"], embedder=embedder)
    for i in range(4):  # half the old documents go, new ones come
        (tmp_path / "d" / f"old{i}.md").unlink()
    for i in range(8):
        write(tmp_path / "d" / f"new{i}.md", f"# New {i}\n\nThe new document {i} mentions copperkettle{i}.\n")
    proc = subprocess.Popen([sys.executable, "-c", CONCURRENT, "ingest", str(tmp_path / "d"), "--store",
                             str(tmp_path / "kb"), "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reader = Store.open(tmp_path / "kb")  # one long-lived reader, as a library user's process
    r = Retriever(reader, embedder)
    rounds = 0
    while proc.poll() is None or rounds < 3:
        live = set(Store.open(tmp_path / "kb").document_ids())
        for q in ("brasskettle0 kettle", "copperkettle5 kettle"):
            for mode in ("bm25", "dense", "contract"):
                hits = r.search(q, mode=mode, top_k=10)  # never raises while the ingest runs
                gone = {h.doc_id for h in hits} - live - {f"new{i}.md" for i in range(8)}
                assert not gone, (mode, gone)  # never a document the catalog no longer holds
        rounds += 1
        if rounds > 400:
            break
    assert proc.wait(timeout=600) == 0, proc.stderr.read()[-2000:]
    hits = Retriever(Store.open(tmp_path / "kb"), embedder).search("copperkettle5", mode="bm25")
    assert hits[0].doc_id == "new5.md"
    assert reader.bm25().search(["copperkettle5"], 5)  # the long-lived reader sees the new BM25


KILL_IN = """
import os, signal, sys
import kbtool.chunk as chunk_mod
import kbtool.index as index_mod
from kbtool.embed.onnx import OnnxEmbedder
from kbtool.embed.st import SentenceTransformerEmbedder
where, calls = sys.argv[1], {"n": 0}
index_mod._EMBED_COMMIT = 2
def count_then_die(real):
    def wrapper(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return wrapper
if where == "embedding":  # killed in the second batch of vectors
    SentenceTransformerEmbedder.embed = count_then_die(SentenceTransformerEmbedder.embed)
    OnnxEmbedder.embed = count_then_die(OnnxEmbedder.embed)
else:  # killed while chunking the second document
    chunk_mod.chunk_blocks = count_then_die(chunk_mod.chunk_blocks)
from kbtool.cli import main
sys.argv = ["kbtool"] + sys.argv[2:]
main()
"""


@pytest.mark.parametrize("where", ["embedding", "chunking"])
def test_sigkill_while_embedding_or_chunking_then_plain_index_is_consistent(tmp_path, embedder, where):
    store = _store(tmp_path, embedder)
    _change(tmp_path)
    write(tmp_path / "d" / "more.md", "# More\n\nThe word ospreylantern too.\n")
    write(tmp_path / "d" / "most.md", "# Most\n\nThe word ibiscompass as well.\n")
    args = (["chunk", "--all", "--size", "64"] if where == "chunking" else ["ingest", str(tmp_path / "d")])
    proc = subprocess.run([sys.executable, "-c", KILL_IN, where, *args, "--store", str(store.path), "-q"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert not Store.open(store.path).is_indexed()
    r = runner.invoke(app, ["ingest", str(tmp_path / "d"), "--store", str(store.path), "-q"]) if where == "embedding" \
        else runner.invoke(app, ["index", "--store", str(store.path), "-q"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["doctor", "--store", str(store.path)])
    assert r.exit_code == 0, r.stdout
    if where == "embedding":
        _assert_consistent(store.path, embedder)
        assert Retriever(Store.open(store.path), embedder).search("ospreylantern", mode="bm25")[0].doc_id == "more.md"
    else:
        assert Store.open(store.path).manifest["chunking"]["size"] == 64


def test_a_damaged_bm25_is_a_one_line_error_that_doctor_names_and_index_rebuilds(tmp_path, embedder):
    _store(tmp_path, embedder)
    (tmp_path / "kb" / "bm25" / "chunk_ids.json").write_text("{not json")
    kb = str(tmp_path / "kb")
    r = runner.invoke(app, ["query", "marmaladefox", "--store", kb, "-m", "bm25"])
    assert r.exit_code == 1 and "damaged" in r.stderr and "kbtool index" in r.stderr and "Internal" not in r.stderr
    r = runner.invoke(app, ["doctor", "--store", kb, "--json"])
    bm25 = next(f for f in json.loads(r.stdout)["findings"] if f["check"] == "bm25")
    assert not bm25["ok"] and "damaged" in bm25["detail"]
    r = runner.invoke(app, ["index", "--store", kb, "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["bm25_rebuilt"] and json.loads(r.stdout)["embedded"] == 0
    r = runner.invoke(app, ["query", "marmaladefox", "--store", kb, "-m", "bm25", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["hits"][0]["doc_id"] == "keep.md"


def test_a_failure_on_taking_the_writer_lock_releases_it(tmp_path, monkeypatch):
    from filelock import FileLock

    import kbtool.store.lock as lock_mod

    store = Store.open(tmp_path / "kb", create=True)

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(lock_mod, "write_json", full_disk)
    with pytest.raises(StoreFullError, match="no space left"):
        with store.writing():
            pass
    monkeypatch.undo()
    probe = FileLock(str(tmp_path / "kb" / "writer.lock"), thread_local=False)
    probe.acquire(timeout=0)  # another process could take it: not left held
    probe.release()
    with store.writing():
        assert not store.writer_active()
