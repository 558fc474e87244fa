"""Review of `kbtool serve` (issue 19): defects found by an adversarial review, each pinned by a test.
In process with FastAPI's TestClient over a real Service (real store, real bundled model)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .conftest import public_and_restricted_store, write

PUBLIC = {
    "guide.md": "# Guide\n\n## Ports\n\nThe server listens on port 8443 (setting net.port).\n",
    "faq.md": "# FAQ\n\nReset a password from the account page.\n",
}
from .test_serve_http import CONTRACT, GUEST, SECRET, SUPPORT  # noqa: E402 (the same restricted store and tokens)


@pytest.fixture(scope="module")
def kb(tmp_path_factory, embedder):
    base = tmp_path_factory.mktemp("rv19")
    store = public_and_restricted_store(base, PUBLIC, SECRET, {"access": "internal", "project": "zeta"}, embedder)
    store.close()
    contract = write(base / "kbtool.yaml", CONTRACT)
    return {"base": base, "kb": base / "kb", "contract": contract}


@pytest.fixture(scope="module")
def service(kb):
    from kbtool.serve.service import Service

    return Service(kb["kb"], kb["contract"])


@pytest.fixture(scope="module")
def app_client(service):
    from fastapi.testclient import TestClient

    from kbtool.serve.http import create_app
    from kbtool.serve.service import Caller

    tokens = {SUPPORT: Caller(principal="support", name="support"), GUEST: Caller(principal="guest", name="guest")}
    return TestClient(create_app(service, tokens), base_url="http://127.0.0.1")


def _get(c, path, token, **kw):
    return c.get(path, headers={"Authorization": f"Bearer {token}"}, **kw)


def _post(c, path, token, body):
    return c.post(path, headers={"Authorization": f"Bearer {token}"}, json=body)


def test_healthz_counts_only_what_the_token_may_read(app_client, service):
    """/healthz with a restricted token said the whole store's documents and chunks: a guest learnt
    that documents it may not read exist (3 where it may read 2)."""
    guest = _get(app_client, "/healthz", GUEST).json()
    support = _get(app_client, "/healthz", SUPPORT).json()
    assert support["documents"] == 3 and support["status"] == "ok"
    assert guest["documents"] == 2 and guest["chunks"] == 2 and guest["status"] == "ok"
    assert app_client.get("/healthz").json() == {"status": "ok"}  # no token: alive, nothing more


def test_healthz_of_a_server_answering_as_one_principal(service):
    """Without tokens, `kbtool serve --principal guest` answers every request as guest: /healthz too."""
    from fastapi.testclient import TestClient

    from kbtool.serve.http import create_app
    from kbtool.serve.service import Caller

    c = TestClient(create_app(service, default_caller=Caller(principal="guest")), base_url="http://127.0.0.1")
    assert c.get("/healthz").json()["documents"] == 2
    c = TestClient(create_app(service), base_url="http://127.0.0.1")
    assert c.get("/healthz").json()["documents"] == 3


@pytest.mark.parametrize("text", [
    "tok-abcdefgh12: {principal: guest}\ntok-abcdefgh12: {principal: support}\n",
    '{"tok-abcdefgh12": {"principal": "guest"}, "tok-abcdefgh12": {"principal": "support"}}',
])
def test_a_token_written_twice_is_an_error_not_the_last_one_winning(kb, tmp_path, text):
    """PyYAML keeps the last of two equal keys: a token pasted twice silently got the second entry's
    (wider) access."""
    from kbtool.contract import load_contract
    from kbtool.errors import InputError
    from kbtool.serve.http import load_tokens

    f = write(tmp_path / "tokens.yaml", text)
    with pytest.raises(InputError, match="written twice") as e:
        load_tokens(f, load_contract(kb["contract"]))
    assert "tok-abcdefgh12" not in str(e.value)


@pytest.mark.parametrize("text", ["tok-secret-0123456: {principal: guest\n", "tok-secret-0123456: [guest\n"])
def test_a_broken_tokens_file_never_echoes_a_token(kb, tmp_path, text):
    """The YAML error quoted the offending line — the token — into the error on stderr/logs."""
    from kbtool.contract import load_contract
    from kbtool.errors import InputError
    from kbtool.serve.http import load_tokens

    f = write(tmp_path / "tokens.yaml", text)
    with pytest.raises(InputError, match="not valid YAML or JSON") as e:
        load_tokens(f, load_contract(kb["contract"]))
    assert "tok-secret" not in str(e.value) and "line" in str(e.value)


@pytest.mark.parametrize("token", [" tok-abcdefgh12 ", "tok-abc defgh12", "tok-\u00e9bcdefgh12"])
def test_a_token_no_request_can_send_is_refused(kb, tmp_path, token):
    """A token with spaces around it or non-ASCII never matched any request (the header is stripped,
    latin-1): the operator's client was locked out with no word why."""
    from kbtool.contract import load_contract
    from kbtool.errors import InputError
    from kbtool.serve.http import load_tokens

    f = write(tmp_path / "tokens.json", json.dumps({token: {"principal": "guest"}}))
    with pytest.raises(InputError, match="printable ASCII"):
        load_tokens(f, load_contract(kb["contract"]))


def _start(args: list[str], base: Path, ready: str):
    import subprocess
    import sys
    import time

    from .conftest import ROOT

    err = open(base / "stderr.txt", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "kbtool", "serve", *args], stdout=subprocess.PIPE, stderr=err,
                            cwd=base, env={**os.environ, "PYTHONPATH": str(ROOT)})
    for _ in range(1200):
        text = (base / "stderr.txt").read_text()
        if ready in text:
            return proc, text.split(ready)[1].split()[0]
        assert proc.poll() is None, text
        time.sleep(0.1)
    raise AssertionError((base / "stderr.txt").read_text())


def test_mcp_http_port_0_names_the_real_port_and_sigterm_exits_0(kb, tmp_path):
    """`--mcp http --port 0` printed http://127.0.0.1:0/mcp (the README: "--port 0 takes a free port
    and prints it"), printed it before listening, and SIGTERM ended the process with 143, not 0."""
    import signal

    import httpx

    proc, url = _start(["--store", str(kb["kb"]), "--mcp", "http", "--port", "0", "--log-level", "warning"],
                       tmp_path, "kbtool MCP server: ")
    try:
        assert ":0/" not in url and url.endswith("/mcp"), url
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        r = httpx.post(url, json=init, headers={"Accept": "application/json, text/event-stream"}, timeout=30)
        assert r.status_code == 200 and "kbtool knowledge base" in r.text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    assert proc.stdout.read() == b""


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


def test_an_answer_names_the_contract_that_answered_not_one_swapped_in_after(app_client, service, monkeypatch):
    """The answer's `contract` was read after the retrieval: a contract edit swapped in between said
    version 2 over thresholds of version 1."""

    real, first = type(service).retrieve, service.contract

    def retrieve_then_swap(self, *a, **kw):
        got = real(self, *a, **kw)
        monkeypatch.setattr(self, "contract", self.contract.model_copy(update={"contract_version": 99}))
        return got

    monkeypatch.setattr(type(service), "retrieve", retrieve_then_swap)
    r = _post(app_client, "/v1/retrieve", SUPPORT, {"question": "which port"})
    assert r.status_code == 200 and r.json()["contract"]["version"] == 1
    monkeypatch.setattr(service, "contract", first)
    r = _post(app_client, "/v1/retrieve/batch", SUPPORT, {"questions": [{"question": "which port"}]})
    assert r.status_code == 200 and r.json()["answers"][0]["contract"]["version"] == 1


def test_lines_past_the_end_are_an_error_not_the_last_line(app_client):
    """lines=100-200 of a 6-line document answered lines [6, 6] (an empty line), as if that was asked."""
    r = _get(app_client, "/v1/documents/guide.md", SUPPORT, params={"lines": "100-200"})
    assert r.status_code == 400 and "has 6 lines" in r.json()["error"]["message"], r.text
    r = _get(app_client, "/v1/documents/guide.md", SUPPORT, params={"lines": "5-200"})
    assert r.status_code == 200 and r.json()["lines"] == [5, 6]


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
        while len(calls) < 3 and time.monotonic() < end:
            time.sleep(0.05)
        assert w._thread.is_alive() and len(calls) >= 3
        assert "watch: FileNotFoundError" in caplog.text and service.watch_error is None  # said, then cleared
    finally:
        w.stop()


def test_the_contract_shows_a_restricted_token_no_other_principal_nor_restricted_source(tmp_path, embedder):
    """/v1/contract (and kbtool://contract) showed every token the whole contract: a guest learnt the
    other principals' tags and the folder of the restricted documents with its access metadata."""
    from fastapi.testclient import TestClient

    from kbtool.serve.http import create_app
    from kbtool.serve.service import Caller, Service

    kb = public_and_restricted_store(tmp_path, PUBLIC, SECRET, {"access": "internal"}, embedder, folder="hr-payroll")
    kb.close()
    contract = write(tmp_path / "kbtool.yaml", CONTRACT + "data:\n  sources:\n    - root: public\n"
                     "    - root: hr-payroll\n      meta: {access: internal}\n")
    service = Service(tmp_path / "kb", contract)
    tokens = {SUPPORT: Caller(principal="support"), GUEST: Caller(principal="guest")}
    c = TestClient(create_app(service, tokens), base_url="http://127.0.0.1")
    guest = _get(c, "/v1/contract", GUEST).json()["contract"]
    assert "hr-payroll" not in json.dumps(guest) and "support" not in guest["access"]["principals"]
    assert [s["root"] for s in guest["data"]["sources"]] == ["public"]
    support = _get(c, "/v1/contract", SUPPORT).json()["contract"]
    assert [s["root"] for s in support["data"]["sources"]] == ["public", "hr-payroll"]
    assert support["access"]["principals"] == {"support": ["internal"]}
    unrestricted = TestClient(create_app(service), base_url="http://127.0.0.1").get("/v1/contract").json()["contract"]
    assert set(unrestricted["access"]["principals"]) == {"support", "guest"}


def test_a_restricted_token_is_not_told_when_the_whole_store_was_last_ingested(app_client, service):
    """restricted_status hides last_ingest from a restricted caller (it describes every document),
    but every answer's `index` and /healthz gave it: a guest saw when restricted documents came in."""
    for token, shown in ((GUEST, False), (SUPPORT, False)):
        r = _post(app_client, "/v1/retrieve", token, {"question": "which port"})
        assert (r.json()["index"]["last_ingest"] is not None) is shown
        assert (_get(app_client, "/healthz", token).json()["index"]["last_ingest"] is not None) is shown
    r = _post(app_client, "/v1/retrieve/batch", GUEST, {"questions": [{"question": "which port"}]})
    assert r.json()["index"]["last_ingest"] is None
    from fastapi.testclient import TestClient

    from kbtool.serve.http import create_app

    open_app = TestClient(create_app(service), base_url="http://127.0.0.1")  # unrestricted: said
    assert open_app.post("/v1/retrieve", json={"question": "which port"}).json()["index"]["last_ingest"]
