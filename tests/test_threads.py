"""One Store shared by threads: readers run concurrently while one thread writes, as a server, a
thread pool or a notebook's background task would use it. Real model, real Chroma, real files."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from kbtool.contract import default_contract
from kbtool.ingestion.pipeline import ingest
from kbtool.query.pipeline import retrieve
from kbtool.store import Store

from .conftest import write


def test_queries_from_a_thread_pool_while_another_thread_ingests(tmp_path, embedder):
    folder = tmp_path / "d"
    write(folder / "base.md", "# Base\n\nThe lighthouse keeper logs the amberfinch every morning.\n")
    store = Store.open(tmp_path / "kb", create=True)
    ingest(store, [folder], embedder=embedder)
    contract = default_contract()
    done = threading.Event()
    errors: list[BaseException] = []
    seen_new: set[str] = set()

    def writer() -> None:
        try:
            for i in range(4):
                write(folder / f"new{i}.md", f"# New {i}\n\nThe word copperkettle{i} appears in note {i}.\n")
                ingest(store, [folder], embedder=embedder)  # the same Store object, another thread
            (folder / "new0.md").unlink()
            ingest(store, [folder], embedder=embedder)  # a removal while readers run
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)
        finally:
            done.set()

    def reader(n: int) -> int:
        asked = 0
        while not done.is_set() or asked < 3:
            a = retrieve(store, contract, f"copperkettle{n % 4} amberfinch", embedder=embedder)
            held = set(store.document_ids())
            # never a ghost: every hit is a document the catalog held when the answer was read
            assert all(h.doc_id in held or h.doc_id == "new0.md" for h in a.hits)
            seen_new.update(h.doc_id for h in a.hits if h.doc_id.startswith("new"))
            asked += 1
        return asked

    w = threading.Thread(target=writer)
    w.start()
    with ThreadPoolExecutor(max_workers=4) as pool:
        counts = list(pool.map(reader, range(4)))  # re-raises any reader's exception here
    w.join()
    assert not errors, errors
    assert all(c >= 3 for c in counts)
    assert store.is_indexed() and sorted(store.document_ids()) == ["base.md", "new1.md", "new2.md", "new3.md"]
    final = retrieve(store, contract, "copperkettle0", embedder=embedder, top_k=10)
    assert "new0.md" not in {h.doc_id for h in final.hits}  # removed from both indexes
    hit = retrieve(store, contract, "copperkettle3", embedder=embedder)
    assert hit.hits[0].doc_id == "new3.md"


def test_a_second_writing_thread_waits_for_the_first(tmp_path, embedder):
    store = Store.open(tmp_path / "kb", create=True)
    order: list[str] = []
    inside = threading.Event()

    def first() -> None:
        with store.writing():
            order.append("first in")
            inside.set()
            threading.Event().wait(0.3)
            order.append("first out")

    def second() -> None:
        inside.wait()
        order.append(f"active {store.writer_active()}")  # another thread of this process is writing
        with store.writing():
            order.append("second in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert order == ["first in", "active True", "first out", "second in"]
    assert not store.writer_active()


def _open_catalog_files(path) -> int:
    import os

    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith(str(path))
        except OSError:
            pass
    return n


def test_connections_of_ended_threads_are_closed_and_close_closes_every_one(tmp_path):
    # A server that runs each request in a new thread (ThreadingHTTPServer) must not keep one
    # open catalog connection per request it ever served: the process would run out of files.
    import os

    import pytest

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("counts open files through /proc")
    store = Store.open(tmp_path / "kb", create=True)
    for _ in range(60):
        t = threading.Thread(target=store.generation)
        t.start()
        t.join()
    assert _open_catalog_files(tmp_path / "kb") < 20
    # close() from the main thread closes the connections of threads still alive too
    ready, stop = threading.Event(), threading.Event()

    def reader() -> None:
        store.generation()
        ready.set()
        stop.wait()

    t = threading.Thread(target=reader)
    t.start()
    ready.wait()
    store.generation()
    store.close()
    try:
        assert _open_catalog_files(tmp_path / "kb") == 0
    finally:
        stop.set()
        t.join()


def test_bm25_is_never_none_when_a_writer_thread_reloads_meanwhile(tmp_path, embedder):
    # A writer entering writing() drops the loaded BM25 (another process may have rebuilt it); a
    # reader thread switched out right after loading it must still return an index, not None.
    write(tmp_path / "d" / "a.md", "# A\n\nThe amberfinch nests by the lighthouse.\n")
    store = Store.open(tmp_path / "kb", create=True)
    ingest(store, [tmp_path / "d"], embedder=embedder)
    store._bm25 = None

    def enter() -> None:
        with store.writing():
            pass

    class WriterRunsAfterTheLoad(Store):
        def __setattr__(self, name, value):
            super().__setattr__(name, value)
            if name == "_bm25" and value is not None and threading.current_thread().name != "writer":
                t = threading.Thread(target=enter, name="writer")  # the thread switch, made certain
                t.start()
                t.join()

    store.__class__ = WriterRunsAfterTheLoad
    assert store.bm25() is not None


def test_a_reader_between_the_two_renames_of_a_bm25_swap_still_sees_bm25(tmp_path, embedder):
    """A rebuild renames bm25/ to bm25.old/, then bm25.tmp/ to bm25/: a question asked in between
    once lost its BM25 weight and failed (`retrieve.fusion.weights.bm25: the store has no retriever
    bm25`) — a flaky failure of the thread-pool test above."""
    import shutil

    from kbtool.ingestion.pipeline import ingest
    from kbtool.query.routing import store_retrievers
    from kbtool.store import Store

    write(tmp_path / "docs" / "a.md", "# A\n\nalpha beta gamma\n")
    kb = Store.open(tmp_path / "kb", create=True)
    ingest(kb, [tmp_path / "docs"], embedder=embedder)
    shutil.copytree(kb.path / "bm25", kb.path / "bm25.tmp")
    (kb.path / "bm25").rename(kb.path / "bm25.old")
    assert "bm25" in store_retrievers(kb)
    assert not kb.is_indexed()  # status never claims an index that is not in place


def test_a_reader_sees_bm25_when_a_swap_completes_between_its_looks(tmp_path, monkeypatch):
    """``has_bm25`` looked at ``bm25`` (gone: renamed to ``bm25.old``), then at ``bm25.old`` (gone:
    the writer had renamed ``bm25.tmp`` in and removed the old one) and said the store has no BM25:
    a query fused without it, or its contract failed ('the store has no retriever bm25') — seen in
    the thread-pool test above under load. Here the writer's swap completes right after the first look."""
    from types import SimpleNamespace

    from kbtool.store.bm25 import BM25Index
    from kbtool.store.chunks import ChunksView

    looks = []

    def exists(path):
        looks.append(path.name)
        swapped = len(looks) > 1  # the first look sees the swap's middle, every later one its end
        return path.name == "bm25" and swapped

    monkeypatch.setattr(BM25Index, "exists", staticmethod(exists))
    assert ChunksView.has_bm25(SimpleNamespace(path=tmp_path))
    assert looks[0] == "bm25" and looks[-1] == "bm25"
