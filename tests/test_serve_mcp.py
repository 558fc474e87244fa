"""`kbtool serve --mcp`: a real MCP client session (the official SDK's client) against the server
in a subprocess, over stdio and over streamable HTTP, on real stores. Answers must be the ones
``Service.retrieve`` gives; the server answers as one caller that no tool call can widen; a kbtool
error is a tool error with kbtool's one-line message."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp")

import anyio  # noqa: E402
import yaml  # noqa: E402

from kbtool.chunk import ChunkParams  # noqa: E402
from kbtool.contract import load_contract  # noqa: E402
from kbtool.ingestion.pipeline import ingest  # noqa: E402
from kbtool.query.pipeline import retrieve  # noqa: E402
from kbtool.store import Store  # noqa: E402

from .conftest import ROOT, public_and_restricted_store, write  # noqa: E402
from .test_freshness import NEW, OLD  # noqa: E402 (a newer and an older page that conflict)
from .test_serve_http import kb  # noqa: E402, F401 (the restricted store of serve's review tests, a module fixture)

QUESTION = "How do I fix TW-E5120?"
UNANSWERABLE = "what is the airspeed velocity of an unladen swallow"


def _env() -> dict[str, str]:
    env = dict(os.environ)  # the session's HOME/KBTOOL_CACHE_DIR: the subprocess reuses the exported model
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["HF_HUB_OFFLINE"] = "1"
    return env


def _args(store: Path, transport: str = "stdio", port: int = 0, allow: list[str] | None = None) -> list[str]:
    """`kbtool serve --mcp ...`, as an MCP client configuration starts it."""
    return ["-m", "kbtool", "serve", "--mcp", transport, "--store", str(store), "--port", str(port),
            "--log-level", "warning", *[a for tag in allow or [] for a in ("--allow", tag)]]


def _stdio(store: Path, cwd: Path, allow: list[str] | None = None):
    from mcp import StdioServerParameters

    return StdioServerParameters(command=sys.executable, args=_args(store, allow=allow), env=_env(), cwd=str(cwd))


def _session(streams_cm, body):
    """Run ``body(session, init_result)`` in a client session over ``streams_cm``."""
    from mcp import ClientSession

    async def main():
        async with streams_cm as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=60) as session:
                init = await session.initialize()
                return await body(session, init)

    return anyio.run(main)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory, embedder):
    """Part of the sample corpus (Markdown and a PDF), ingested into a real store: the whole one
    (conftest's ``sample_store``) would double this module's time."""
    import shutil

    from kbtool.ingestion.pipeline import ingest
    from kbtool.store import Store

    from .conftest import SAMPLE

    base = tmp_path_factory.mktemp("mcp-sample")
    for name in ("manual/troubleshooting.md", "manual/install.md", "release-notes.pdf"):
        (base / "corpus" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SAMPLE / name, base / "corpus" / name)
    store = Store.open(base / "kb", create=True)
    assert not ingest(store, [base / "corpus"], embedder=embedder).failed
    return store


@pytest.fixture(scope="module")
def service(sample_store):
    from kbtool.serve.service import Service

    return Service(sample_store.path)


@pytest.fixture(scope="module")
def http_server(sample_store, tmp_path_factory):
    """The streamable-HTTP server in a subprocess; started early, it warms up while other tests run."""
    port = _free_port()
    log = (tmp_path_factory.mktemp("mcp-http") / "server.log").open("w")
    proc = subprocess.Popen([sys.executable, *_args(sample_store.path, "http", port)], env=_env(),
                            cwd=str(tmp_path_factory.getbasetemp()), stdout=log, stderr=subprocess.STDOUT)
    yield proc, port
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def _wait_for(proc, port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the MCP HTTP server exited"
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("the MCP HTTP server did not start")


def _same_answer(payload: dict, answer) -> None:
    assert payload["decision"] == answer.decision
    assert [c["chunk_id"] for c in payload["citations"]] == [h.chunk_id for h in answer.hits]
    assert [c["doc_id"] for c in payload["citations"]] == [h.doc_id for h in answer.hits]
    assert [c["citation"] for c in payload["citations"]] == [h.citation for h in answer.hits]
    assert payload["context"] == answer.context
    assert payload["message"] == answer.explanation["message"]


def _text(result) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


# ---- stdio ------------------------------------------------------------------------------------------
def test_stdio_session(sample_store, service, http_server, tmp_path):
    from mcp.client.stdio import stdio_client

    from kbtool.errors import InputError

    expected = service.retrieve(QUESTION, top_k=3)
    refused = service.retrieve(UNANSWERABLE)
    assert expected.decision == "answer" and refused.decision == "refuse"
    with pytest.raises(InputError) as bad:
        service.retrieve(QUESTION, filters=["colour=blue"])
    status = sample_store.status()

    async def body(session, init):
        got = {"instructions": init.instructions}
        got["tools"] = {t.name: t for t in (await session.list_tools()).tools}
        got["search"] = await session.call_tool("search", {"question": QUESTION, "top_k": 3})
        got["refuse"] = await session.call_tool("search", {"question": UNANSWERABLE})
        got["bad_filter"] = await session.call_tool("search", {"question": QUESTION, "filters": ["colour=blue"]})
        got["filtered"] = await session.call_tool("search", {"question": QUESTION, "filters": ["filetype=pdf"]})
        got["top_k"] = await session.call_tool("search", {"question": QUESTION, "top_k": 10_000})
        first = got["search"].structured_content["citations"][0]
        a, b = first["lines"]
        got["read"] = await session.call_tool("read", {"doc_id": first["doc_id"], "lines": f"{a - 2}-{b + 2}"})
        got["read_missing"] = await session.call_tool("read", {"doc_id": "no/such.md"})
        got["read_bad_lines"] = await session.call_tool("read", {"doc_id": first["doc_id"], "lines": "ten"})
        got["resources"] = {str(r.uri) for r in (await session.list_resources()).resources}
        got["contract"] = (await session.read_resource("kbtool://contract")).contents[0].text
        got["status"] = (await session.read_resource("kbtool://status")).contents[0].text
        return got

    got = _session(stdio_client(_stdio(sample_store.path, tmp_path)), body)

    # instructions: the store's size, model, freshness and how to use the tools
    ins = got["instructions"]
    assert f"{status['documents']} documents, {status['chunks']} chunks" in ins
    assert sample_store.embedding_spec().model in ins and "generation" in ins and "last ingest" in ins
    assert "`search`" in ins and "`read`" in ins

    # tools: schemas from the contract; no way to name a principal
    assert set(got["tools"]) == {"search", "read"}
    schema = got["tools"]["search"].input_schema
    assert {"question", "filters", "top_k"} <= set(schema["properties"]) and schema["required"] == ["question"]
    assert "dir=docs/**" in schema["properties"]["filters"]["description"]
    assert "filetype" in schema["properties"]["filters"]["description"]
    top_k = next(s for s in schema["properties"]["top_k"]["anyOf"] if s.get("type") == "integer")
    assert (top_k["minimum"], top_k["maximum"]) == (1, service.max_top_k)
    assert "tags" not in schema["properties"]  # the built-in contract has no tier a tag could select
    for tool in got["tools"].values():
        assert not {"principal", "allow", "caller"} & set(tool.input_schema["properties"])

    # search: the very answer Service.retrieve gives, as text and structured content
    res = got["search"]
    assert not res.is_error
    _same_answer(res.structured_content, expected)
    text = _text(res)
    assert text.startswith("Decision: answer") and expected.context.strip() in text
    assert expected.hits[0].citation in text
    assert res.structured_content["freshness"]["generation"] == sample_store.generation()
    cite = res.structured_content["citations"][0]
    assert cite["rank"] == 1 and cite["lines"] == [expected.hits[0].line_start, expected.hits[0].line_end]
    assert cite["snippet"] and cite["section_path"] == expected.hits[0].section_path

    # a refusal is a normal result that says so
    res = got["refuse"]
    assert not res.is_error
    _same_answer({**res.structured_content, "citations": res.structured_content["nearest"]}, refused)
    assert res.structured_content["citations"] == [] and "Decision: refuse" in _text(res)

    # a bad filter: a tool error with kbtool's own one-line message
    assert got["bad_filter"].is_error and _text(got["bad_filter"]) == str(bad.value)
    assert "\n" not in _text(got["bad_filter"]) and "Traceback" not in _text(got["bad_filter"])
    assert not got["filtered"].is_error
    assert {c["doc_id"] for c in got["filtered"].structured_content["citations"]} <= {"release-notes.pdf"}
    assert got["top_k"].is_error  # beyond max_top_k: the schema refuses it

    # read: the cited span, each line numbered, as Service.document_span gives it
    res = got["read"]
    assert not res.is_error
    span = service.document_span(cite["doc_id"], f"{cite['lines'][0] - 2}-{cite['lines'][1] + 2}")
    assert res.structured_content["text"] == span["text"]
    lines = _text(res).split("\n")[1:]
    first_line = span["text"].split("\n")[0]
    assert lines[0].strip().startswith(f"{cite['lines'][0] - 2} |") and lines[0].endswith(first_line)
    assert got["read_missing"].is_error and _text(got["read_missing"]) == "no document 'no/such.md' in the store"
    assert got["read_bad_lines"].is_error and "write A-B" in _text(got["read_bad_lines"])

    # resources: the effective contract and the status
    assert got["resources"] == {"kbtool://contract", "kbtool://status"}
    assert yaml.safe_load(got["contract"])["retrieve"]["top_k"] == service.contract.retrieve.top_k
    st = json.loads(got["status"])
    assert (st["documents"], st["chunks"]) == (status["documents"], status["chunks"])
    assert st["index"]["indexes_current"] is True and st["model"] == sample_store.embedding_spec().model


# ---- streamable HTTP ----------------------------------------------------------------------------------
def test_http_session(service, http_server):
    import httpx
    from mcp.client.streamable_http import streamable_http_client

    proc, port = http_server
    _wait_for(proc, port)
    expected = service.retrieve(QUESTION)
    url = f"http://127.0.0.1:{port}/mcp"

    async def body(session, init):
        tools = {t.name for t in (await session.list_tools()).tools}
        res = await session.call_tool("search", {"question": QUESTION})
        status = json.loads((await session.read_resource("kbtool://status")).contents[0].text)
        return init, tools, res, status

    init, tools, res, status = _session(streamable_http_client(url), body)
    assert "documents" in init.instructions and tools == {"search", "read"}
    assert not res.is_error
    _same_answer(res.structured_content, expected)
    assert status["status"] == "ok"

    # DNS-rebinding protection: another Host or a foreign Origin is refused
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert httpx.post(url, headers={**headers, "Host": "evil.example"}, content=ping).status_code == 421
    assert httpx.post(url, headers={**headers, "Origin": "http://evil.example"}, content=ping).status_code == 403


# ---- access: the server's caller, never widened -------------------------------------------------------
PUBLIC = {"guide.md": "# Guide\n\n## Doors\n\nThe front door of the office is painted blue.\n"}
SECRET = {"vault.md": "# Vault\n\nThe colour of the vault door is secret: grimbleflax.\n"}


def test_restricted_caller_never_sees_forbidden_documents(tmp_path_factory, embedder, tmp_path):
    from mcp.client.stdio import stdio_client

    from kbtool.serve.service import Caller, Service

    kb = public_and_restricted_store(tmp_path_factory.mktemp("mcp-access"), PUBLIC, SECRET,
                                     {"access": "vault", "project": "x"}, embedder)
    question = "What colour is the vault door?"
    svc = Service(kb.path)
    assert any(h.doc_id == "vault.md" for h in svc.retrieve(question).hits)  # unrestricted, it is found
    expected = svc.retrieve(question, caller=Caller(allow=["staff"]))

    async def body(session, init):
        schema = {t.name: t.input_schema for t in (await session.list_tools()).tools}["search"]
        res = await session.call_tool("search", {"question": question, "top_k": 5})
        # arguments a caller might try to widen access with are not in the schema: ignored or refused
        widened = await session.call_tool("search", {"question": question, "principal": "admin",
                                                     "allow": ["vault"]})
        read = await session.call_tool("read", {"doc_id": "vault.md"})
        by_dir = await session.call_tool("search", {"question": question, "filters": ["project=x"]})
        status = json.loads((await session.read_resource("kbtool://status")).contents[0].text)
        return init, schema, res, widened, read, by_dir, status

    init, schema, res, widened, read, by_dir, status = _session(
        stdio_client(_stdio(kb.path, tmp_path, allow=["staff"])), body)
    for r in (res, widened):
        if r.is_error:
            continue
        seen = r.structured_content["citations"] + r.structured_content["nearest"]
        assert seen and all(c["doc_id"] != "vault.md" for c in seen)
        assert "grimbleflax" not in _text(r)
    assert not res.is_error
    _same_answer({**res.structured_content, "citations": res.structured_content["citations"]
                  or res.structured_content["nearest"]}, expected)
    assert read.is_error and _text(read) == "no document 'vault.md' in the store"
    assert "project" not in schema["properties"]["filters"]["description"]  # a key only forbidden documents carry
    assert by_dir.is_error and "unknown filter key 'project'" in _text(by_dir)
    assert (status["documents"], status["chunks"]) == (1, len(kb.chunks("guide.md")))
    assert "1 documents" in init.instructions


# ---- no server needed ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_importing_the_module_loads_no_sdk():
    code = "import sys, kbtool.serve.mcp; print(sorted({'mcp', 'mcp_types'} & set(sys.modules)))"
    r = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout.strip()) == (0, "[]"), r.stderr


def test_transport_security_names_this_machine_only():
    from kbtool.errors import UsageError
    from kbtool.serve.mcp import run, transport_security

    local = transport_security("127.0.0.1")
    assert local.enable_dns_rebinding_protection
    assert set(local.allowed_hosts) == {"127.0.0.1:*", "localhost:*", "[::1]:*"}
    assert all(o.startswith(("http://127.0.0.1", "http://localhost", "http://[::1]")) for o in local.allowed_origins)
    assert "kb.internal:*" in transport_security("kb.internal").allowed_hosts
    everywhere = transport_security("0.0.0.0")
    assert socket.gethostname() + ":*" in everywhere.allowed_hosts and "0.0.0.0:*" not in everywhere.allowed_hosts
    with pytest.raises(UsageError, match="use stdio or http"):
        run(object(), transport="sse")


# Review of issue 21: the MCP search payload carries Answer.conflicts as the HTTP answer does
# (failed before the fix).
def test_mcp_search_payload_carries_the_conflicts(tmp_path, fake_embedder):
    from kbtool.serve.mcp import answer_payload

    write(tmp_path / "docs" / "retention.md", NEW)
    write(tmp_path / "docs" / "retention-old.md", OLD)
    store = Store.open(tmp_path / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(store, [tmp_path / "docs"], embedder=fake_embedder, chunk_params=ChunkParams(size=60, overlap=0)).failed
    got = retrieve(store, load_contract(None, ["postprocess.freshness.prefer=newer"], search=False),
                   "how long are audit logs kept", embedder=fake_embedder)
    assert got.conflicts  # the pair is found
    assert answer_payload(got).get("conflicts") == got.conflicts


# Review of `kbtool serve` (issue 19): defects found by an adversarial review, each pinned by a test.
# In process with FastAPI's TestClient over a real Service (real store, real bundled model).
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


def test_a_contract_with_tiers_offers_them_as_tags():
    from kbtool.serve.mcp import _search_signature

    with_tiers = _search_signature("filetype", ["identifier", "urgent"], 10)
    assert "tags" in with_tiers.parameters and "urgent" in str(with_tiers.parameters["tags"].annotation)
    assert "tags" not in _search_signature("filetype", [], 10).parameters
