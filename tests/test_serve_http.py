"""`kbtool serve` over HTTP: a real server process on 127.0.0.1 (one per module) over a real store
and the bundled model, asked with httpx; the cheap cases (limits, timeouts) in process with
FastAPI's TestClient over a stub service."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from kbtool.cli import app

from .conftest import ROOT, public_and_restricted_store, write

PUBLIC = {
    "guide.md": "# Guide\n\n## Ports\n\nThe server listens on port 8443 (setting net.port).\n\n"
                "## Logs\n\nLogs rotate every night at midnight.\n",
    "faq.md": "# FAQ\n\nReset a password from the account page.\n",
    "billing.md": "# Billing\n\nInvoices are sent on the first day of the month.\n",
    "teams.md": "# Teams\n\nAn owner can invite members to a team.\n",
}
SECRET = {"payroll.md": "# Payroll\n\nThe grimbleflax payroll run happens on the 25th of each month.\n"}
CONTRACT = "contract_version: 1\naccess:\n  principals:\n    support: [internal]\n    guest: []\n"
SUPPORT, GUEST = "tok-support-0123456789", "tok-guest-0123456789"


@pytest.fixture(scope="module")
def served(tmp_path_factory, embedder):
    base = tmp_path_factory.mktemp("serve")
    kb = public_and_restricted_store(base, PUBLIC, SECRET, {"access": "internal"}, embedder)
    contract = write(base / "kbtool.yaml", CONTRACT)
    tokens = write(base / "tokens.json", json.dumps({SUPPORT: {"principal": "support"}, GUEST: {"principal": "guest"}}))
    log = open(base / "stderr.txt", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "kbtool", "serve", "--store", str(kb.path), "--contract",
                             str(contract), "--tokens", str(tokens), "--port", "0", "--log-level", "warning"],
                            stdout=subprocess.PIPE, stderr=log, cwd=base, env={**os.environ, "PYTHONPATH": str(ROOT)})
    url = None
    for _ in range(1200):
        text = (base / "stderr.txt").read_text()
        if "kbtool serve: http://" in text:
            url = text.split("kbtool serve: ")[1].split()[0]
            break
        assert proc.poll() is None, text
        time.sleep(0.1)
    assert url, (base / "stderr.txt").read_text()
    yield {"url": url, "kb": kb.path, "contract": contract, "base": base, "proc": proc}
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0  # SIGTERM is a clean stop
    assert proc.stdout.read() == b""  # stdout is for data: the server writes none
    assert "Traceback" not in (base / "stderr.txt").read_text()


def client(served, token=SUPPORT):
    return httpx.Client(base_url=served["url"], headers={"Authorization": f"Bearer {token}"} if token else {},
                        timeout=60)


def query_json(served, question, principal):
    r = CliRunner().invoke(app, ["query", question, "--store", str(served["kb"]), "--contract", str(served["contract"]),
                                 "--principal", principal, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize("question", ["which port does the server listen on", "reset password", "qwxzv plorb"])
def test_answers_equal_kbtool_query_json(served, question):
    with client(served) as c:
        r = c.post("/v1/retrieve", json={"question": question})
    assert r.status_code == 200, r.text
    got, want = r.json(), query_json(served, question, "support")
    assert got["index"]["indexes_current"] is True and got["contract"] == want["contract"]
    assert got["decision"] == want["decision"] and got["confidence"] == want["confidence"]
    assert [(h["chunk_id"], h["score"], h["citation"]) for h in got["hits"]] == \
        [(h["chunk_id"], h["score"], h["citation"]) for h in want["hits"]]
    assert got["context"] == want["context"] and got["explanation"] == want["explanation"]


def test_batch_keeps_order_and_ids(served):
    with client(served) as c:
        r = c.post("/v1/retrieve/batch", json={"questions": [{"question": "reset password", "id": "a"},
                                                             {"question": "port 8443", "id": 2, "filters": ["doc_id=guide.md"]}],
                                               "top_k": 2, "context": False})
    assert r.status_code == 200, r.text
    a, b = r.json()["answers"]
    assert (a["id"], b["id"]) == ("a", 2) and "context" not in a
    assert a["hits"][0]["doc_id"] == "faq.md" and {h["doc_id"] for h in b["hits"]} == {"guide.md"}
    assert len(a["hits"]) <= 2


def test_twenty_concurrent_requests(served):
    codes, questions = [], ["port", "password", "invoices", "team owner", "logs"] * 4

    def ask(q):
        with client(served) as c:
            codes.append(c.post("/v1/retrieve", json={"question": q, "top_k": 3}).status_code)

    threads = [threading.Thread(target=ask, args=(q,)) for q in questions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert codes == [200] * 20


def test_access_follows_the_token_never_the_body(served):
    q = {"question": "grimbleflax payroll run"}
    with client(served, SUPPORT) as c:
        assert "payroll.md" in [h["doc_id"] for h in c.post("/v1/retrieve", json=q).json()["hits"]]
        assert c.get("/v1/documents/payroll.md").status_code == 200
    with client(served, GUEST) as c:
        r = c.post("/v1/retrieve", json=q)
        assert r.status_code == 200 and "payroll.md" not in [h["doc_id"] for h in r.json()["hits"]]
        assert "grimbleflax" not in r.json()["context"]
        r = c.get("/v1/documents/payroll.md")  # as if it did not exist
        assert r.status_code == 404 and r.json()["error"]["message"] == "no document 'payroll.md' in the store"
        for widen in ({"principal": "support"}, {"allow": ["internal"]}):
            r = c.post("/v1/retrieve", json={**q, **widen})
            assert r.status_code == 422 and "unknown field" in r.json()["error"]["message"]
    with client(served, None) as c:
        r = c.post("/v1/retrieve", json=q)
        assert r.status_code == 401 and "Bearer" in r.json()["error"]["message"]
        assert c.get("/healthz").json() == {"status": "ok"}  # alive, nothing about the store
    with client(served, "tok-wrong-0123456789") as c:
        assert c.post("/v1/retrieve", json=q).status_code == 401


@pytest.mark.parametrize("body, status, words", [
    (b"{not json", 400, "not valid JSON"),
    (b"[1, 2]", 400, "JSON object"),
    (b'{"question": "port", "colour": "red"}', 422, "colour: unknown field"),
    (b'{"question": "port", "top_k": 0}', 422, "top_k"),
    (b'{"question": "port", "top_k": 100000}', 422, "less than or equal to 50"),
    (b'{"question": "   "}', 422, "question: the question is empty"),
    (b'{}', 422, "question: Field required"),
    (b'{"question": "port", "mode": "sparse"}', 400, "unknown mode 'sparse'"),
    (b'{"question": "port", "filters": ["colour=red"]}', 400, "known keys"),
    (b'{"question": "' + b"a" * 1_100_000 + b'"}', 413, "over 1000000 bytes"),
])
def test_malformed_requests_are_clear_4xx(served, body, status, words):
    with client(served) as c:
        r = c.post("/v1/retrieve", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status, r.text
    assert words in r.json()["error"]["message"] and "Traceback" not in r.text


def test_document_lines_are_the_cited_span(served):
    with client(served) as c:
        hit = c.post("/v1/retrieve", json={"question": "logs rotate at midnight", "top_k": 1}).json()["hits"][0]
        assert hit["doc_id"] == "guide.md" and hit["line_start"]
        r = c.get(f"/v1/documents/{hit['doc_id']}", params={"lines": f"{hit['line_start']}-{hit['line_end']}"})
        assert r.status_code == 200, r.text
        lines = PUBLIC["guide.md"].split("\n")[hit["line_start"] - 1:hit["line_end"]]
        assert r.json()["text"] == "\n".join(lines) and "midnight" in r.json()["text"]
        assert r.json()["changed_since_ingest"] is False
        assert c.get("/v1/documents/nope.md").status_code == 404
        r = c.get("/v1/documents/guide.md", params={"lines": "x"})
        assert r.status_code == 400 and "write A-B" in r.json()["error"]["message"]


def test_health_contract_and_metrics(served):
    with client(served) as c:
        h = c.get("/healthz").json()
        assert h["status"] == "ok" and h["documents"] == 5 and h["contract"]["version"] == 1
        r = c.get("/v1/contract").json()
        assert r["path"] == str(served["contract"]) and r["contract"]["access"]["principals"]["support"] == ["internal"]
        m = c.get("/metrics")
        assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain")
        assert 'kbtool_requests_total{endpoint="/v1/retrieve",status="200"}' in m.text
        assert 'kbtool_decisions_total{decision=' in m.text and "kbtool_stage_seconds_bucket" in m.text
    with client(served, token=None) as c:  # the operator's counts: a token is needed as for /v1
        assert c.get("/metrics").status_code == 401


def test_host_and_origin_checks(served):
    with client(served) as c:
        r = c.get("/healthz", headers={"Host": "evil.example"})
        assert r.status_code == 403 and "DNS rebinding" in r.json()["error"]["message"]
        assert c.get("/healthz", headers={"Host": "localhost:1234"}).status_code == 200
        assert c.get("/healthz", headers={"Origin": "http://evil.example"}).status_code == 403
        assert c.get("/healthz", headers={"Origin": "http://localhost:3000"}).status_code == 200
        assert c.get("/nothing").status_code == 404 and c.get("/nothing").json()["error"]["type"] == "not_found"


# ---- in process: limits, over a stub service --------------------------------------------------
class Stub:
    """What create_app needs of a Service; retrieve sleeps ``delay`` seconds."""

    max_top_k, overrides, contract_error, swaps = 50, [], None, 0

    def __init__(self, delay=0.0):
        from kbtool.serve.metrics import Metrics

        self.metrics, self.delay, self.running, self.peak = Metrics(), delay, 0, 0
        self.lock = threading.Lock()

    def retrieve(self, question, **kw):
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        time.sleep(self.delay)
        with self.lock:
            self.running -= 1
        if question == "boom":
            raise RuntimeError("secret internals")

        class A:
            def __init__(self, q):
                self.q = q

            def to_dict(self):
                return {"question": self.q, "hits": [], "context": ""}

        return [A(q) for q in question] if isinstance(question, list) else A(question)

    def freshness(self, caller=None):
        return {"generation": 1}

    def contract_source(self, c=None):
        return {"path": None, "version": 1, "calibrated": None}


def test_timeout_concurrency_and_internal_errors():
    from fastapi.testclient import TestClient

    from kbtool.serve.http import create_app

    stub = Stub(delay=0.3)
    c = TestClient(create_app(stub, max_concurrency=2, timeout=5), base_url="http://127.0.0.1")
    c.__enter__()  # one event loop for all requests, as under uvicorn
    codes = []
    threads = [threading.Thread(target=lambda: codes.append(c.post("/v1/retrieve", json={"question": "q"}).status_code))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert codes == [200] * 6 and stub.peak == 2

    slow = TestClient(create_app(Stub(delay=1.0), timeout=0.2), base_url="http://127.0.0.1")
    r = slow.post("/v1/retrieve", json={"question": "q"})
    assert r.status_code == 504 and r.json()["error"]["type"] == "timeout"

    r = TestClient(create_app(Stub()), base_url="http://127.0.0.1").post("/v1/retrieve", json={"question": "boom"})
    assert r.status_code == 500 and "secret internals" not in r.text and "Traceback" not in r.text

    r = c.post("/v1/retrieve/batch", json={"questions": [{"question": "q"}] * 101})
    assert r.status_code == 422 and "questions" in r.json()["error"]["message"]
    c.__exit__(None, None, None)


def test_the_guard_covers_paths_no_route_matches():
    """Host, origin and token are checked before routing: an unknown path or a wrong method under
    /v1 is 401 without a token (not 404/405), and a foreign Host is 403 on any path."""
    from fastapi.testclient import TestClient

    from kbtool.serve.http import create_app
    from kbtool.serve.service import Caller

    c = TestClient(create_app(Stub(), {SUPPORT: Caller(principal="support")}), base_url="http://127.0.0.1")
    for method, path in [("GET", "/v1/nothing"), ("GET", "/v1/retrieve"), ("DELETE", "/v1/contract")]:
        r = c.request(method, path)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", (method, path)
    auth = {"Authorization": f"Bearer {SUPPORT}"}
    assert c.get("/v1/nothing", headers=auth).json()["error"]["type"] == "not_found"
    assert c.get("/v1/retrieve", headers=auth).json()["error"]["type"] == "method_not_allowed"
    r = c.get("/nothing", headers={"Host": "evil.example"})
    assert r.status_code == 403 and r.json()["error"]["type"] == "host"


def test_each_app_has_its_own_limits():
    """The routes are shared by every app; top_k and batch limits are each app's own."""
    from fastapi.testclient import TestClient

    from kbtool.serve.http import create_app

    small = Stub()
    small.max_top_k = 5
    narrow = TestClient(create_app(small, max_batch=2), base_url="http://127.0.0.1")
    wide = TestClient(create_app(Stub()), base_url="http://127.0.0.1")
    r = narrow.post("/v1/retrieve", json={"question": "q", "top_k": 6})
    assert r.status_code == 422 and "less than or equal to 5" in r.json()["error"]["message"]
    assert wide.post("/v1/retrieve", json={"question": "q", "top_k": 6}).status_code == 200
    three = {"questions": [{"question": "q"}] * 3}
    r = narrow.post("/v1/retrieve/batch", json=three)
    assert r.status_code == 422 and "at most 2 items" in r.json()["error"]["message"]
    assert wide.post("/v1/retrieve/batch", json=three).status_code == 200


def test_tokens_file_is_checked_at_startup(tmp_path):
    from kbtool.contract import load_contract
    from kbtool.errors import AccessError, InputError
    from kbtool.serve.http import load_tokens

    contract = load_contract(write(tmp_path / "c.yaml", CONTRACT), search=False)
    ok = load_tokens(write(tmp_path / "t.yaml", f"{SUPPORT}: {{principal: support}}\n{GUEST}: {{allow: [x]}}\n"), contract)
    assert ok[SUPPORT].principal == "support" and ok[GUEST].allow == ["x"]
    with pytest.raises(AccessError, match="unknown principal 'admin'"):
        load_tokens(write(tmp_path / "bad.json", json.dumps({SUPPORT: {"principal": "admin"}})), contract)
    with pytest.raises(InputError, match="principal: NAME"):
        load_tokens(write(tmp_path / "list.yaml", "- a\n"), contract)
    r = CliRunner().invoke(app, ["serve", "--contract", str(tmp_path / "c.yaml"), "--tokens", str(tmp_path / "bad.json")])
    assert r.exit_code == 1 and "unknown principal 'admin'" in r.stderr and SUPPORT not in r.stderr


def test_mcp_stdio_hands_the_warm_service_over_and_keeps_stdout_clean(served, monkeypatch):
    """`--mcp stdio` calls kbtool.serve.mcp.run(service, "stdio", ...): a stub stands in for it."""
    import types

    import kbtool.serve

    calls = []
    stub = types.ModuleType("kbtool.serve.mcp")
    stub.run = lambda service, transport="stdio", host="127.0.0.1", port=8765, caller=None, **_: calls.append(
        (type(service).__name__, transport, caller.principal, service.health()["documents"]))
    monkeypatch.setitem(sys.modules, "kbtool.serve.mcp", stub)
    monkeypatch.setattr(kbtool.serve, "mcp", stub, raising=False)
    r = CliRunner().invoke(app, ["serve", "--mcp", "stdio", "--store", str(served["kb"]), "--contract",
                                 str(served["contract"]), "--principal", "guest"])
    assert r.exit_code == 0, r.output
    assert calls == [("Service", "stdio", "guest", 5)] and r.stdout == ""


# Review of `kbtool serve` (issue 19): defects found by an adversarial review, each pinned by a test.
# In process with FastAPI's TestClient over a real Service (real store, real bundled model).
GUIDE_FAQ = {
    "guide.md": "# Guide\n\n## Ports\n\nThe server listens on port 8443 (setting net.port).\n",
    "faq.md": "# FAQ\n\nReset a password from the account page.\n",
}


@pytest.fixture(scope="module")
def kb(tmp_path_factory, embedder):
    base = tmp_path_factory.mktemp("rv19")
    store = public_and_restricted_store(base, GUIDE_FAQ, SECRET, {"access": "internal", "project": "zeta"}, embedder)
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


def test_the_contract_shows_a_restricted_token_no_other_principal_nor_restricted_source(tmp_path, embedder):
    """/v1/contract (and kbtool://contract) showed every token the whole contract: a guest learnt the
    other principals' tags and the folder of the restricted documents with its access metadata."""
    from fastapi.testclient import TestClient

    from kbtool.serve.http import create_app
    from kbtool.serve.service import Caller, Service

    kb = public_and_restricted_store(tmp_path, GUIDE_FAQ, SECRET, {"access": "internal"}, embedder, folder="hr-payroll")
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
