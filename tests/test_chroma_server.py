"""Vectors on a Chroma server (`chroma run`): a real server process, real files, the real bundled
model. A store made with --chroma-url answers exactly as an embedded store of the same files does;
a server that is down or dies mid-ingest is one line and an exit code, and the next run finishes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbtool.cli import app
from kbtool.store import Store

from .conftest import ROOT, SAMPLE, write

runner = CliRunner()
CHROMA = Path(sys.executable).parent / "chroma"
pytestmark = [pytest.mark.skipif(not CHROMA.exists(), reason="the chroma executable is not installed"),
              pytest.mark.slow]  # a real Chroma server process, stores ingested with the model


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ChromaServer:
    """`chroma run --path DIR --host 127.0.0.1 --port N`, started and killed by the tests."""

    def __init__(self, path: Path, port: int):
        self.path, self.port, self.proc = path, port, None
        self.url = f"http://127.0.0.1:{port}"

    def start(self) -> None:
        import httpx

        log = open(self.path.parent / f"chroma-{self.port}.log", "ab")
        self.proc = subprocess.Popen([str(CHROMA), "run", "--path", str(self.path), "--host", "127.0.0.1",
                                      "--port", str(self.port)], stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.path.parent / f"chroma-{self.port}.log").read_text()[-2000:]
            try:
                if httpx.get(f"{self.url}/api/v2/heartbeat", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError("chroma run did not answer its heartbeat within 30 s")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def client(self):
        import chromadb
        from chromadb.config import Settings

        return chromadb.HttpClient(host="127.0.0.1", port=self.port, settings=Settings(anonymized_telemetry=False))

    def collections(self) -> dict[str, int]:
        return {c.name: c.count() for c in self.client().list_collections()}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ChromaServer(tmp_path_factory.mktemp("chroma-server") / "data", free_port())
    srv.start()
    yield srv
    srv.kill()


def copy_cache(src: Store, dst: Store, key: str) -> int:
    """The embedding cache of ``src`` into ``dst`` (the same files give the same content hashes): the
    second store of the same files embeds nothing."""
    hashes = {r[1] for r in src.catalog.chunk_hashes()}
    items = list(src.catalog.cached_vectors(key, hashes).items())
    dst.catalog.cache_vectors(key, items)
    return len(items)


def answer_of(data: dict) -> dict:
    """What must be identical between the engines: hits (ids, scores), decision, confidence."""
    hits = [{k: h[k] for k in ("rank", "chunk_id", "doc_id", "score", "confidence", "dense_score", "dense_rank",
                                "bm25_score", "bm25_rank")} for h in data["hits"]]
    return {"decision": data["decision"], "confidence": data["confidence"], "signals": data["signals"], "hits": hits}


def same_answers(a: dict, b: dict) -> None:
    a, b = answer_of(a), answer_of(b)
    assert [h["chunk_id"] for h in a["hits"]] == [h["chunk_id"] for h in b["hits"]]
    assert (a["decision"], a["confidence"]) == (b["decision"], b["confidence"])
    for ha, hb in zip(a["hits"], b["hits"]):
        for k, v in ha.items():
            if isinstance(v, float):
                assert v == pytest.approx(hb[k], abs=2e-6), (k, ha, hb)  # scores are rounded to 6 places: one step apart
            else:
                assert v == hb[k], (k, ha, hb)


# ---- the sample corpus on both engines: answers and eval ------------------------------------------

@pytest.fixture(scope="module")
def server_sample(server, sample_store, embedder, tmp_path_factory):
    """The sample corpus in a store whose vectors are on the server (cached vectors from the session's
    embedded sample store: nothing is embedded twice)."""
    from kbtool.ingestion.pipeline import ingest

    base = tmp_path_factory.mktemp("server-sample")
    corpus = base / "corpus"
    shutil.copytree(SAMPLE, corpus)
    store = Store.open(base / "kb", create=True, vectors=server.url)
    assert copy_cache(sample_store, store, embedder.spec.cache_key) > 100
    report = ingest(store, [corpus], embedder=embedder)
    assert not report.failed and report.index.embedded == 0 and report.index.from_cache > 100
    return store


def test_sample_store_answers_and_eval_identical(server, server_sample, sample_store):
    info = server_sample.status()
    assert info["indexes_current"] and info["vectors"]["engine"] == "chroma-server"
    assert info["vectors"]["url"] == server.url
    name = info["vectors"]["collections"]["dense"]
    assert name.startswith("kb-") and server.collections()[name] == info["chunks"] == sample_store.status()["chunks"]
    assert not (server_sample.path / "chroma").exists()  # the catalog and BM25 stay local, no Chroma folder

    questions = ["How do I fix error TW-E1042?", "laptop drops off the Wi-Fi", "how long do refunds take",
                 "Is there a dark mode?"]
    for q in questions:
        got = [json.loads(run("query", q, "--store", kb.path, "--json").stdout) for kb in (sample_store, server_sample)]
        same_answers(*got)

    questions_file = ROOT / "eval_sets" / "sample.jsonl"
    evals = []
    for kb in (sample_store, server_sample):
        r = run("eval", questions_file, "--store", kb.path, "--json")
        assert r.exit_code == 0, r.output
        data = json.loads(r.stdout)
        for k in ("created_at", "store"):
            data.pop(k)
        evals.append(data)
    assert evals[0]["question_set"]["questions"] > 100
    assert evals[0]["metrics"]["dense"]["mrr@10"] > 0.3
    assert evals[0] == evals[1]

    r = run("doctor", "--store", server_sample.path, "--json")
    assert r.exit_code == 0, r.output
    checks = {f["check"]: f for f in json.loads(r.stdout)["findings"]}
    assert checks["engine"]["ok"] and server.url in checks["engine"]["detail"] and name in checks["engine"]["detail"]
    assert checks["vectors"]["ok"]


# ---- a small store: metadata filter, access, delete, added models, options --------------------------

PUBLIC = {"guide.md": "# Guide\n\n## Ports\n\nThe server listens on port 8443 (setting net.port).\n",
          "faq.md": "# FAQ\n\nReset a password from the account page; the link expires after one hour.\n",
          "billing.md": "# Billing\n\nInvoices are sent on the first day of the month by email.\n",
          "teams.md": "# Teams\n\nAn owner can invite members to a team and set their roles.\n"}
FINANCE = {"merger.md": "# Merger\n\nThe merger is valued at 42 million euros; the revenue memo stays internal.\n",
           "budget.md": "# Budget\n\nThe travel budget for next year is cut by ten percent.\n"}
QUESTIONS = [("what is the merger worth", []), ("which port does the server use", []),
             ("budget for travel", ["--filter", "access=finance"]),
             ("what is the merger worth", ["--principal", "guest"]),
             ("how do I reset my password", ["--principal", "cfo"])]


@pytest.fixture(scope="module")
def small(server, tmp_path_factory):
    """The same folders in an embedded store and a server store, built with the CLI (finance tagged
    access=finance), and a contract with a guest (public) and a cfo (finance)."""
    base = tmp_path_factory.mktemp("small")
    for name, text in PUBLIC.items():
        write(base / "public" / name, text)
    for name, text in FINANCE.items():
        write(base / "finance" / name, text)
    from kbtool.contract import dump_yaml, load_contract

    contract = write(base / "c.yaml", dump_yaml(load_contract(
        None, ["access.principals={guest: [public], cfo: [finance]}"], search=False)))
    stores = {}
    for engine, extra in (("embedded", []), ("server", ["--chroma-url", server.url, "--chroma-collection", "small"])):
        kb = base / engine
        r = run("ingest", base / "public", "--store", kb, "-q", *extra)
        assert r.exit_code == 0, r.output
        r = run("ingest", base / "finance", "--meta", "access=finance", "--store", kb, "-q", *extra)
        assert r.exit_code == 0, r.output
        stores[engine] = kb
    return base, stores, contract


def test_small_store_filter_and_access_identical(small, server):
    base, stores, contract = small
    assert server.collections()["small-chunks"] == len(PUBLIC) + len(FINANCE)
    for q, extra in QUESTIONS:
        got = []
        for kb in stores.values():
            r = run("query", q, "--store", kb, "--json", "--contract", contract, *extra)
            assert r.exit_code == 0, r.output
            got.append(json.loads(r.stdout))
        same_answers(*got)
        if "guest" in extra:
            assert got[1]["hits"] and all(h["doc_id"] in PUBLIC for h in got[1]["hits"])
        if "--filter" in extra:
            assert got[1]["hits"] and all(h["doc_id"] in FINANCE for h in got[1]["hits"])

    r = run("status", "--store", stores["server"], "--json")
    vectors = json.loads(r.stdout)["vectors"]
    assert vectors == {"engine": "chroma-server", "url": server.url, "tenant": "default_tenant",
                       "database": "default_database", "collections": {"dense": "small-chunks"}, "auth": None}
    r = run("status", "--store", stores["server"])
    assert r.exit_code == 0 and f"chroma-server {server.url}" in r.stdout and "small-chunks" in r.stdout


def test_options_of_an_existing_store(small, server, tmp_path):
    base, stores, _ = small
    other = f"http://127.0.0.1:{free_port()}"
    r = run("ingest", base / "public", "--store", stores["server"], "--chroma-url", other, "-q")
    assert r.exit_code == 2 and server.url in r.stderr and "Traceback" not in r.output
    r = run("index", "--store", stores["server"], "--chroma-collection", "elsewhere", "--chroma-url", server.url)
    assert r.exit_code == 2 and "small" in r.stderr
    r = run("index", "--store", stores["server"], "--chroma-url", server.url + "/", "-q")  # the same server
    assert r.exit_code == 0, r.output
    r = run("ingest", base / "public", "--store", stores["embedded"], "--chroma-url", server.url, "-q")
    assert r.exit_code == 2 and "embedded" in r.stderr
    # a new store on the collection another store holds: refused before anything is written
    r = run("ingest", base / "public", "--store", tmp_path / "twin", "--chroma-url", server.url,
            "--chroma-collection", "small", "-q")
    assert r.exit_code == 2 and "already holds" in r.stderr and not (tmp_path / "twin").exists()


def test_unreachable_server_at_creation(small, tmp_path):
    base, _, _ = small
    port = free_port()
    r = run("ingest", base / "public", "--store", tmp_path / "kb", "--chroma-url", f"http://127.0.0.1:{port}", "-q")
    assert r.exit_code == 1, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "not reachable" in lines[0] and f"http://127.0.0.1:{port}" in lines[0]
    assert f"chroma run --path DIR --host 127.0.0.1 --port {port}" in lines[0] and "Traceback" not in r.output
    assert not (tmp_path / "kb").exists()
    r = run("ingest", base / "public", "--store", tmp_path / "kb", "--chroma-url", "localhost:8000")
    assert r.exit_code == 2 and not (tmp_path / "kb").exists()


def test_added_model_rebuild_and_delete_on_the_server(small, server):
    base, stores, _ = small
    kb = stores["server"]
    r = run("index", "--add-model", "use-m", "--store", kb, "-q")
    assert r.exit_code == 0, r.output
    n = len(PUBLIC) + len(FINANCE)
    assert server.collections()["small-chunks-use-m"] == n
    r = run("doctor", "--store", kb, "--json")
    assert r.exit_code == 0, r.output
    r = run("index", "--drop-model", "use-m", "--store", kb, "-q")
    assert r.exit_code == 0, r.output
    assert "small-chunks-use-m" not in server.collections()

    before = server.client().get_collection("small-chunks").id
    r = run("index", "--rebuild", "--store", kb, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["upserted"] == n
    col = server.client().get_collection("small-chunks")
    assert col.id != before and col.count() == n  # dropped and made again

    # a document deleted: gone from the catalog, the server's collection and BM25 (no ghost)
    (base / "finance" / "budget.md").unlink()
    r = run("ingest", base / "finance", "--meta", "access=finance", "--store", kb, "--json", "-q")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["counts"]["removed"] == 1
    store = Store.open(kb)
    held = store.vectors.indexed()
    assert set(held) == set(store.index_targets()) and not any(c.startswith("budget.md") for c in held)
    assert server.collections()["small-chunks"] == n - 1
    assert not any(c.startswith("budget.md") for c in store.bm25().chunk_ids)
    r = run("doctor", "--store", kb)
    assert r.exit_code == 0, r.output
    r = run("query", "travel budget", "--store", kb, "--json")
    assert r.exit_code == 0 and not any(h["doc_id"] == "budget.md" for h in json.loads(r.stdout)["hits"])


# ---- a server that dies mid-ingest ----------------------------------------------------------------

def test_server_killed_mid_ingest_then_back(tmp_path, embedder):
    srv = ChromaServer(tmp_path / "chroma-data", free_port())
    srv.start()
    try:
        corpus = tmp_path / "corpus"
        for part in ("manual", "api"):
            shutil.copytree(SAMPLE / part, corpus / part)
        kb = tmp_path / "kb"
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               "KBTOOL_DEBUG": ""}
        proc = subprocess.Popen([sys.executable, "-m", "kbtool", "ingest", str(corpus), "--store", str(kb),
                                 "--chroma-url", srv.url], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)
        # The collection appears when the index step first asks the server (before embedding): kill
        # the server then, while the ingest embeds and before it writes a vector.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if any(n.endswith("-chunks") for n in srv.collections()):
                    break
            except Exception:
                pass
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        srv.kill()
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 1, (out, err)
        assert "Traceback" not in err and "Internal error" not in err
        errors = [line for line in err.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and "not reachable" in errors[0] and srv.url in errors[0], err

        r = run("status", "--store", kb, "--json")
        assert r.exit_code == 0 and json.loads(r.stdout)["indexes_current"] is False
        chunks = json.loads(r.stdout)["chunks"]
        assert chunks > 30
        r = run("doctor", "--store", kb, "--json")  # the server down: a failed check, one line
        assert r.exit_code == 1
        vectors = next(f for f in json.loads(r.stdout)["findings"] if f["check"] == "vectors")
        assert not vectors["ok"] and "not reachable" in vectors["detail"] and "\n" not in vectors["detail"]

        srv.start()  # the same path and port
        r = run("ingest", "--store", kb, "--json", "-q")
        assert r.exit_code == 0, r.output
        index = json.loads(r.stdout)["index"]
        assert index["embedded"] == 0 and index["from_cache"] == chunks and index["upserted"] == chunks
        store = Store.open(kb)
        v = store.vectors.verify(store.index_targets(), 384)
        assert v["held"] == chunks and not (v["missing"] or v["ghosts"] or v["stale"]) and v["dim"] == 384
        assert store.is_indexed()
        r = run("doctor", "--store", kb)
        assert r.exit_code == 0, r.output
    finally:
        srv.kill()


def test_refused_credentials_are_one_line_and_never_shown(small, tmp_path, monkeypatch):
    """A server that refuses the token (here a stand-in answering every request as Chroma does a
    refused one: 401 AuthorizationError): one line naming the URL and $KBTOOL_CHROMA_TOKEN, the token
    never printed, no store made."""
    from .conftest import stand_in_http

    seen: list = []
    httpd, url = stand_in_http(401, json.dumps({"error": "AuthorizationError", "message": "Unauthorized"}).encode(),
                               "application/json", seen)
    try:
        base, _, _ = small
        monkeypatch.setenv("KBTOOL_CHROMA_TOKEN", "s3cret-token-42")
        r = run("ingest", base / "public", "--store", tmp_path / "kb", "--chroma-url", url, "-q")
        assert r.exit_code == 1, r.output
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "refused access" in lines[0] and url in lines[0] and "KBTOOL_CHROMA_TOKEN" in lines[0]
        assert "s3cret" not in r.output and not (tmp_path / "kb").exists()
        assert "Bearer s3cret-token-42" in seen  # the token reached the server, as Chroma expects it (the heartbeat goes without)
    finally:
        httpd.shutdown()


def test_a_server_that_never_answers_fails_within_the_timeout(small, tmp_path, monkeypatch):
    """A port that accepts connections and never answers (a hung server): chromadb's client would
    wait forever; kbtool gives up after $KBTOOL_CHROMA_TIMEOUT with one line, and makes no store."""
    import socket
    import time

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)  # accepted by the kernel, never read
    try:
        base, _, _ = small
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        monkeypatch.setenv("KBTOOL_CHROMA_TIMEOUT", "1")
        t = time.monotonic()
        r = run("ingest", base / "public", "--store", tmp_path / "kb", "--chroma-url", url, "-q")
        assert time.monotonic() - t < 20
        assert r.exit_code == 1, r.output
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "did not answer a heartbeat within 1 s" in lines[0] and url in lines[0], lines
        assert "KBTOOL_CHROMA_TIMEOUT" in lines[0] and not (tmp_path / "kb").exists()
        monkeypatch.setenv("KBTOOL_CHROMA_TIMEOUT", "soon")
        r = run("ingest", base / "public", "--store", tmp_path / "kb", "--chroma-url", url, "-q")
        assert r.exit_code == 2 and "KBTOOL_CHROMA_TIMEOUT" in r.stderr and "Traceback" not in r.output
    finally:
        sock.close()
