"""A warm Service takes in what other processes do: an ingest in another process is picked up
while requests keep coming (none fails, no ghost, the new chunks found by the dense retriever too —
Chroma's in-memory index is re-opened), an edited contract is swapped in, a broken edit is refused
while the old contract keeps serving, and --watch re-ingests an edited file."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from .conftest import write
from .test_serve_http import CONTRACT

ROOT = Path(__file__).resolve().parents[1]


def _env():
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _folder(base: Path) -> Path:
    docs = base / "docs"
    write(docs / "a.md", "# Alpha\n\nThe alpha service stores invoices for seven years.\n")
    write(docs / "b.md", "# Beta\n\nThe beta service sends a weekly digest email every Monday.\n")
    write(docs / "c.md", "# Gamma\n\nGamma rotates the signing keys every ninety days.\n")
    return docs


def _store(base: Path, embedder) -> Path:
    from kbtool.ingestion.pipeline import ingest
    from kbtool.store import Store

    docs = _folder(base)
    kb = Store.open(base / "kb", create=True)
    ingest(kb, [docs], embedder=embedder)
    kb.close()
    return base / "kb"


def _until(predicate, timeout: float = 30.0, every: float = 0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = predicate()
        if got:
            return got
        time.sleep(every)
    return predicate()


def test_an_ingest_in_another_process_is_picked_up_with_no_failed_request_and_no_ghost(tmp_path, embedder):
    from kbtool.serve.service import Service

    kb = _store(tmp_path, embedder)
    service = Service(kb, check_every=0.2)
    new_text = "Zorblax lanterns glow violet when the quarterly audit begins."
    before = service.retrieve(new_text, mode="dense", top_k=3)
    assert "new.md" not in [h.doc_id for h in before.hits]
    errors, seen_after = [], []
    done = threading.Event()
    ingested = threading.Event()

    def loop():
        while not done.is_set():
            try:
                for mode in ("contract", "dense", "bm25"):
                    after = ingested.is_set()  # asked after the ingest ended (one asked before may finish after)
                    a = service.retrieve("weekly digest email Monday", mode=mode, top_k=3)
                    if after:
                        seen_after.extend(h.doc_id for h in a.hits)
            except Exception as exc:  # any failed request fails the test
                errors.append(repr(exc))

    threads = [threading.Thread(target=loop) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        docs = tmp_path / "docs"
        write(docs / "new.md", f"# New\n\n{new_text}\n")
        (docs / "b.md").unlink()
        r = subprocess.run([sys.executable, "-m", "kbtool", "ingest", str(docs), "--store", str(kb), "-q"],
                           capture_output=True, text=True, env=_env(), timeout=300)
        assert r.returncode == 0, r.stderr
        time.sleep(0.5)  # the service checks every 0.2 s
        ingested.set()
        found = _until(lambda: [h.doc_id for h in service.retrieve(new_text, mode="dense", top_k=3).hits][:1] == ["new.md"])
        assert found, "the dense retriever never saw the chunk another process indexed"
        time.sleep(0.5)
    finally:
        done.set()
        for t in threads:
            t.join()
    assert not errors, errors[:3]
    assert "b.md" not in seen_after  # the deleted document never came back
    assert service.swaps >= 1
    assert service.freshness()["indexes_current"] and service.health()["documents"] == 3


def test_an_edited_contract_is_swapped_in_and_a_broken_one_keeps_the_old(tmp_path, embedder, caplog):
    from kbtool.serve.service import Service

    kb = _store(tmp_path, embedder)
    contract = write(tmp_path / "kbtool.yaml", "contract_version: 1\nretrieve:\n  top_k: 3\n")
    service = Service(kb, contract, check_every=0.1)
    assert len(service.retrieve("service", mode="dense").hits) == 3
    time.sleep(0.05)
    write(contract, "contract_version: 2\nretrieve:\n  top_k: 1\n")
    assert _until(lambda: len(service.retrieve("service", mode="dense").hits) == 1, timeout=5)
    assert service.health()["contract"]["version"] == 2
    write(contract, "contract_version: 3\nretrieve:\n  top_k: [not a number\n")
    time.sleep(0.3)
    a = service.retrieve("service", mode="dense")  # still served, by version 2
    assert len(a.hits) == 1
    health = service.health()
    assert health["contract"]["version"] == 2 and health["status"] == "degraded"
    assert "not valid YAML" in health["contract"]["error"]
    assert "not reloaded" in caplog.text
    write(contract, "contract_version: 4\nretrieve:\n  top_k: 2\n")
    assert _until(lambda: service.health()["contract"]["version"] == 4, timeout=5)
    assert service.health()["contract"]["error"] is None and len(service.retrieve("service", mode="dense").hits) == 2



def test_an_edited_lexicon_reloads_and_a_broken_one_keeps_the_old(tmp_path, embedder, caplog):
    """postprocess.sensitive.lexicon's file is part of the contract: editing it reloads, a broken
    edit keeps the last good contract serving and is reported as a broken contract edit is."""
    from kbtool.serve.service import Service

    kb = _store(tmp_path, embedder)
    conf = tmp_path / "conf"
    lex = write(conf / "lex.yaml", "categories:\n  a:\n    words: [invoices]\n")
    contract = write(conf / "kbtool.yaml", "contract_version: 1\npostprocess:\n  sensitive:\n    lexicon: lex.yaml\n")
    service = Service(kb, contract, check_every=0.1)

    def alpha() -> str:
        return next(h.text for h in service.retrieve("alpha service invoices seven years", mode="bm25").hits
                    if h.doc_id == "a.md")

    assert "[REDACTED:a] for seven years" in alpha()
    write(lex, "categories:\n  a:\n    words: [seven years]\n")
    assert _until(lambda: "stores invoices for [REDACTED:a]" in alpha(), timeout=5), alpha()
    assert service.health()["contract"] == {"path": str(contract), "version": 1, "error": None}

    write(lex, "categories: [oops\n")
    time.sleep(0.3)
    assert "stores invoices for [REDACTED:a]" in alpha()  # still served, by the last good lexicon
    health = service.health()
    assert health["status"] == "degraded" and health["contract"]["version"] == 1
    assert "postprocess.sensitive.lexicon lex.yaml" in health["contract"]["error"]
    assert "not valid YAML" in health["contract"]["error"] and "not reloaded" in caplog.text
    write(lex, "categories:\n  a:\n    words: [alpha]\n")
    assert _until(lambda: service.health()["contract"]["error"] is None, timeout=5)
    assert "The [REDACTED:a] service stores invoices for seven years" in alpha()

    # the contract names another lexicon, not there yet: refused; creating that file reloads
    write(contract, "contract_version: 2\npostprocess:\n  sensitive:\n    lexicon: other.yaml\n")
    assert _until(lambda: "no such file" in (service.health()["contract"]["error"] or ""), timeout=5)
    assert service.health()["contract"]["version"] == 1 and "[REDACTED:a] service" in alpha()
    write(conf / "other.yaml", "categories:\n  b:\n    words: [invoices]\n")
    assert _until(lambda: service.health()["contract"]["version"] == 2, timeout=5)
    assert service.health()["contract"]["error"] is None and "stores [REDACTED:b] for" in alpha()
    write(lex, "categories:\n  a:\n    words: [years]\n    results: drop\n")  # no longer the contract's
    write(conf / "other.yaml", "categories:\n  b:\n    words: [service]\n")
    assert _until(lambda: "alpha [REDACTED:b] stores invoices" in alpha(), timeout=5), alpha()

def test_watch_reingests_an_edited_file(tmp_path, embedder):
    from kbtool.serve.service import Service
    from kbtool.serve.watch import Watcher

    kb = _store(tmp_path, embedder)
    service = Service(kb, check_every=0.2)
    watcher = Watcher(service, interval=0.2, debounce=0.5).start()
    try:
        write(tmp_path / "docs" / "c.md", "# Gamma\n\nGamma rotates the quuxalot signing keys every ninety days.\n")
        assert _until(lambda: service.freshness().get("sources_changed_at"), timeout=10), "the change was not noticed"
        hit = _until(lambda: [h.doc_id for h in service.retrieve("quuxalot", mode="bm25", top_k=1).hits] == ["c.md"],
                     timeout=120, every=0.5)
        assert hit, f"the edit never reached the index (watch error: {watcher.last_error})"
        assert _until(lambda: "sources_changed_at" not in service.freshness(), timeout=10)
        assert watcher.ingests == 1 and watcher.last_error is None
    finally:
        watcher.stop()


def test_through_http_an_ingest_elsewhere_and_a_watched_edit_reach_the_answers(tmp_path, embedder):
    """The real server (`kbtool serve --watch --port 0`) and a real HTTP client: while 3 threads keep
    asking, another process ingests (a page added, one deleted) — no request fails, the deleted page
    never comes back, the new one is found; then a file edited in the folder reaches the answers by
    --watch alone, and `index.sources_changed_at` says so until it has."""
    import signal

    import httpx

    kb = _store(tmp_path, embedder)
    log = open(tmp_path / "serve.err", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "kbtool", "serve", "--store", str(kb), "--port", "0", "--watch",
                             "--log-level", "warning"], stdout=subprocess.PIPE, stderr=log, cwd=tmp_path, env=_env())
    try:
        url = _until(lambda: (lambda t: t.split("kbtool serve: ")[1].split()[0] if "kbtool serve: http" in t else None)(
            (tmp_path / "serve.err").read_text()), timeout=120)
        assert url, (tmp_path / "serve.err").read_text()
        ask = lambda c, q, mode="contract": c.post("/v1/retrieve", json={"question": q, "mode": mode, "top_k": 3})  # noqa: E731
        errors, seen_after, done, ingested = [], [], threading.Event(), threading.Event()

        def loop():
            with httpx.Client(base_url=url, timeout=60) as c:
                while not done.is_set():
                    after = ingested.is_set()
                    r = ask(c, "weekly digest email Monday")
                    if r.status_code != 200:
                        errors.append((r.status_code, r.text[:200]))
                    elif after:
                        seen_after.extend(h["doc_id"] for h in r.json()["hits"])

        threads = [threading.Thread(target=loop) for _ in range(3)]
        for t in threads:
            t.start()
        docs = tmp_path / "docs"
        new_text = "Zorblax lanterns glow violet when the quarterly audit begins."
        write(docs / "new.md", f"# New\n\n{new_text}\n")
        (docs / "b.md").unlink()
        with httpx.Client(base_url=url, timeout=60) as c:
            g0 = c.get("/healthz").json()["index"]["generation"]
            r = subprocess.run([sys.executable, "-m", "kbtool", "ingest", str(docs), "--store", str(kb), "-q"],
                               capture_output=True, text=True, env=_env(), timeout=300)
            assert r.returncode == 0, r.stderr
            # the old generation answers until the new one is swapped in whole (within a second or so)
            assert _until(lambda: (lambda i: i["generation"] > g0 and i["indexes_current"])(c.get("/healthz").json()["index"]))
            ingested.set()
            assert _until(lambda: [h["doc_id"] for h in ask(c, new_text, "dense").json()["hits"]][:1] == ["new.md"])
            time.sleep(1.0)
            done.set()
            for t in threads:
                t.join()
            assert not errors, errors[:3]
            assert seen_after and "b.md" not in seen_after
            # --watch: an edit in the folder, nobody runs ingest
            write(docs / "c.md", "# Gamma\n\nGamma rotates the quuxalot signing keys every ninety days.\n")
            assert _until(lambda: "sources_changed_at" in ask(c, "signing keys").json()["index"], timeout=20)
            assert _until(lambda: [h["doc_id"] for h in ask(c, "quuxalot", "bm25").json()["hits"]][:1] == ["c.md"],
                          timeout=120, every=0.5), (tmp_path / "serve.err").read_text()[-2000:]
            assert _until(lambda: "sources_changed_at" not in ask(c, "signing keys").json()["index"], timeout=20)
    finally:
        done.set() if "done" in locals() else None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        log.close()
    assert "Traceback" not in (tmp_path / "serve.err").read_text()


# Review of `kbtool serve` (issue 19): defects found by an adversarial review, each pinned by a test.
# In process with FastAPI's TestClient over a real Service (real store, real bundled model).
@pytest.fixture()
def small(tmp_path, embedder):
    from kbtool.ingestion.pipeline import ingest
    from kbtool.serve.service import Service
    from kbtool.store import Store

    write(tmp_path / "docs" / "plan.md", "# Plan\n\nThe roadmap is public.\n")
    write(tmp_path / "docs" / "notes.txt", "Meeting notes are public.\n")
    write(tmp_path / "outside" / "plan.md", "# Outside\n\nzorblat outside the ingest root\n")
    kb = Store.open(tmp_path / "kb", create=True)
    assert not ingest(kb, [tmp_path / "docs"], embedder=embedder).failed
    kb.close()
    contract = write(tmp_path / "kbtool.yaml", CONTRACT)
    return tmp_path, Service(tmp_path / "kb", contract)


def test_a_file_edited_after_ingest_is_never_served_from_disk(small):
    """/v1/documents read the file as it is now: a public document edited to hold secret text (and an
    access tag restricting it) was served to a guest before any ingest decided its access."""
    from kbtool.serve.service import Caller

    base, service = small
    write(base / "docs" / "plan.md", "---\naccess: internal\n---\n# Plan\n\nThe zorblat acquisition closes in May.\n")
    span = service.document_span("plan.md", caller=Caller(principal="guest"))
    assert "zorblat" not in span["text"] and "roadmap is public" in span["text"]
    assert span["changed_since_ingest"] is True and span["source"] == "parsed"


def test_nothing_outside_the_ingest_root_is_read_via_a_swapped_root_or_a_hard_link(small):
    """The check resolved the path against the root as it resolves now: the root folder swapped for a
    symlink to another folder, or a file replaced by a hard link, was read."""
    base, service = small
    (base / "docs").rename(base / "docs.orig")
    (base / "docs").symlink_to(base / "outside", target_is_directory=True)
    span = service.document_span("plan.md")
    assert "zorblat" not in span["text"] and "roadmap is public" in span["text"]
    (base / "docs").unlink()
    (base / "docs.orig").rename(base / "docs")
    (base / "docs" / "notes.txt").unlink()
    os.link(base / "outside" / "plan.md", base / "docs" / "notes.txt")
    span = service.document_span("notes.txt")
    assert "zorblat" not in span["text"] and "Meeting notes are public" in span["text"]


def test_the_watch_survives_an_error_in_one_poll(small, monkeypatch, caplog):
    """One exception in a poll (a file gone between is_file and stat, a manifest mid-write) ended the
    watch thread for good, silently: later edits were never ingested and nothing said so."""
    import time

    import kbtool.serve.watch as watch

    base, service = small
    real, calls = watch.snapshot, []

    def flaky(roots):
        calls.append(1)
        if len(calls) == 2:
            raise FileNotFoundError("docs/gone.md")
        return real(roots)

    monkeypatch.setattr(watch, "snapshot", flaky)
    w = watch.Watcher(service, interval=0.05, debounce=0.1).start()
    try:
        end = time.monotonic() + 5
        while len(calls) < 4 and time.monotonic() < end:  # the third poll passed: its step cleared the error
            time.sleep(0.05)
        assert w._thread.is_alive() and len(calls) >= 3
        assert "watch: FileNotFoundError" in caplog.text and service.watch_error is None  # said, then cleared
    finally:
        w.stop()


def test_an_edit_made_while_the_watch_ingests_is_ingested_too(small):
    """The watch took its snapshot of the files after its ingest: an edit saved while the ingest ran
    (a second file of a `git pull`, an editor saving again) was taken as already seen and never
    ingested (the served answers kept the old text, and said nothing)."""
    import time

    from kbtool.serve.watch import Watcher

    base, service = small
    w = Watcher(service, interval=0.05, debounce=0.1)
    runs = []

    def ingest():  # the ingest of the first change runs; meanwhile a second file is saved
        runs.append(time.monotonic())
        if len(runs) == 1:
            (base / "docs" / "plan.md").write_text("# Plan\n\nA second edit, saved while the ingest ran.\n")
            time.sleep(0.3)

    w._ingest = ingest
    w.start()
    try:
        (base / "docs" / "notes.txt").write_text("Meeting notes, edited.\n")
        end = time.monotonic() + 10
        while len(runs) < 2 and time.monotonic() < end:
            time.sleep(0.05)
        assert len(runs) == 2, "the edit made during the ingest was never ingested"
    finally:
        w.stop()


@pytest.mark.slow  # two real servers in subprocesses
def test_serve_prints_its_ready_line_only_and_requests_with_access_log(tmp_path, embedder):
    """`kbtool serve` says where it listens and nothing else — no uvicorn 'INFO: Started server
    process', no line per request, no 'Shutting down' — unless --access-log asks for a line per
    request. /healthz names every dense retriever and its model (dense:use-m too)."""
    import signal

    import httpx

    from kbtool.ingestion.pipeline import ingest
    from kbtool.store import Store

    store = Store.open(tmp_path / "kb", create=True)
    store.add_model("use-m")
    assert not ingest(store, [_folder(tmp_path)], embedder=embedder).failed
    store.close()
    for extra in ([], ["--access-log"]):
        err_path = tmp_path / f"serve{len(extra)}.err"
        with open(err_path, "w") as log:
            proc = subprocess.Popen([sys.executable, "-m", "kbtool", "serve", "--store", str(tmp_path / "kb"), "--port",
                                     "0", *extra], stdout=subprocess.PIPE, stderr=log, cwd=tmp_path, env=_env())
            try:
                url = _until(lambda: (lambda t: t.split("kbtool serve: ")[1].split()[0] if "kbtool serve: http" in t
                                      else None)(err_path.read_text()), timeout=120)
                assert url, err_path.read_text()
                with httpx.Client(base_url=url, timeout=60) as c:
                    health = c.get("/healthz").json()
                    assert c.post("/v1/retrieve", json={"question": "weekly digest"}).status_code == 200
            finally:
                proc.send_signal(signal.SIGINT)
                assert proc.wait(timeout=60) == 0
        lines = err_path.read_text().splitlines()
        assert lines[0].startswith("kbtool serve: http://127.0.0.1:"), lines
        if not extra:
            assert lines == lines[:1], lines
            assert health["models"] == {"dense": "sentence-transformers/all-MiniLM-L6-v2", "dense:use-m": "use-m"}
            assert "dense:use-m" in health["modes"] and "hybrid" in health["modes"]
        else:
            assert [ln.split(" - ")[1] for ln in lines[1:]] == ['"GET /healthz HTTP/1.1" 200 OK',
                                                              '"POST /v1/retrieve HTTP/1.1" 200 OK'], lines
        assert proc.stdout.read() == b""  # stdout is for data: nothing
