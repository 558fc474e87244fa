"""`kbtool serve` under a hostile client (issue 36): a corpus of 500+ requests generated here —
malformed JSON, wrong types, huge strings, lone surrogates in every string field, JSON nested
10,000 deep, unknown fields, bad Origin/Authorization/Content-Type/Host headers, bad paths and
methods, negative and huge top_k, bad filter syntax, bytes that are not UTF-8 — sent to the real
app (FastAPI's TestClient over a real Service on a small real store, the bundled model). Not one
answer may be a 5xx; every 4xx is JSON ``{"error": {"type", "message"}}``; the server logs no
traceback. The MCP endpoint (its own streamable-HTTP app) gets the JSON-RPC share of the corpus."""

from __future__ import annotations

import json
import logging

import pytest

from .test_serve_http import GUEST, SUPPORT, kb  # noqa: F401 (kb: the small restricted store, a module fixture)

AUTH = {"Authorization": f"Bearer {SUPPORT}"}
JSON = {"Content-Type": "application/json"}
DEEP = 10_000

# strings no field expects: a lone surrogate (high, low, reversed pair), NUL and control characters,
# bidi overrides, a BOM, huge ones, injection-looking ones
HOSTILE_STRINGS = [
    "\ud800", "port \udfff 8443", "\udc00\ud800", "", " ", "\x00", "a\x00b", "\x1b[31mred", "\u202eevil",
    "\ufeffport", "𝕡𝕠𝕣𝕥 🚀", "x" * 20_000, "port " * 3_000, "' OR 1=1 --", "%s%n%x", "../../../etc/passwd",
    "${jndi:ldap://x}", "<script>alert(1)</script>", "null", "\\ud800",
]
# values of the wrong JSON type for any field
WRONG_TYPES = [None, True, 0, -1, 1.5, 2**70, "7", [], [[]], {}, {"a": 1}, [None], [1, 2], ["a", {"b": []}]]
BAD_FILTERS = [
    "", "=", "a", "doc_id", "=x", "doc_id=", "doc_id==x", "doc_id>=", "doc_id!=", "doc_id=a|", "|", "doc_id=|",
    "dir=**/[", "dir=[", "dir=../../**", "dir=/**", "k<v<w", "filetype>3", "filetype<=", "a" * 5_000 + "=b",
    "doc_id=" + "x" * 50_000, "doc_id=\x00", "colour=red", "doc_id=*" * 100, "access=internal", "dir=" + "*" * 1_000,
    "doc_id=\ud800", "\ud800=x", "doc_id\t=x", "DOC_ID=x",
]


def _deep(inner: bytes = b"1", n: int = DEEP, kind: str = "list") -> bytes:
    if kind == "list":
        return b"[" * n + inner + b"]" * n
    return b'{"a":' * n + inner + b"}" * n


def _retrieve_bodies() -> list[tuple[str, bytes]]:
    """(label, raw body) for POST /v1/retrieve and /v1/retrieve/batch, each field of each body hit."""
    out: list[tuple[str, bytes]] = []

    def add(label, obj):
        out.append((label, json.dumps(obj).encode()))  # ensure_ascii: a lone surrogate goes as "\ud800"

    base = {"question": "which port does the server listen on"}
    for s in HOSTILE_STRINGS:
        add(f"question={s[:20]!r}", {"question": s})
        add(f"filters=[{s[:20]!r}]", {**base, "filters": [s]})
        add(f"tags=[{s[:20]!r}]", {**base, "tags": [s]})
        add(f"mode={s[:20]!r}", {**base, "mode": s})
        add(f"batch question={s[:20]!r}", {"questions": [{"question": s}]})
        add(f"batch id={s[:20]!r}", {"questions": [{"question": "port", "id": s}]})
        add(f"batch filters=[{s[:20]!r}]", {"questions": [{"question": "port", "filters": [s]}]})
        add(f"batch tags=[{s[:20]!r}]", {"questions": [{"question": "port", "tags": [s]}], "mode": s})
        add(f"unknown key {s[:20]!r}", {**base, s: 1})
    for v in WRONG_TYPES:
        for field in ("question", "filters", "tags", "top_k", "mode", "context"):
            add(f"{field}={v!r:.30}", {**base, field: v})
        for field in ("question", "id", "filters", "tags"):
            add(f"batch {field}={v!r:.30}", {"questions": [{"question": "port", field: v}]})
        add(f"questions={v!r:.30}", {"questions": v})
    for f in BAD_FILTERS:
        add(f"filter {f[:30]!r}", {**base, "filters": [f]})
        add(f"batch filter {f[:30]!r}", {"questions": [{"question": "port", "filters": [f, "doc_id=guide.md"]}]})
    for k in (-(2**63), -1, 0, 51, 10**6, 2**64, 10**30):
        add(f"top_k={k}", {**base, "top_k": k})
        add(f"batch top_k={k}", {"questions": [{"question": "port"}], "top_k": k})
    for widen in ({"principal": "support"}, {"allow": ["internal"]}, {"__proto__": {}}, {"": 1},
                  {f"k{i}": i for i in range(1_000)}):
        add(f"unknown fields {list(widen)[:2]}", {**base, **widen})
    add("101 questions", {"questions": [{"question": "port"}] * 101})
    add("empty batch", {"questions": []})
    add("50 filters of 50", {**base, "filters": ["doc_id=guide.md"] * 51})
    add("10k-item list", {**base, "tags": ["t"] * 10_000})
    raw = [
        b"", b"{", b"}", b"[", b"null", b"true", b"1", b'"question"', b"[1, 2]", b"{'question': 'port'}",
        b'{"question": "port",}', b'{"question": "port"', b'{"question" "port"}', b"nul", b"NaN",
        b'{"question": "port", "top_k": NaN}', b'{"question": "port", "top_k": Infinity}',
        b'{"question": "port", "top_k": -Infinity}', b'{"question": "port", "top_k": 1e400}',
        b'{"question": "port", "top_k": 5.0}', b'{"question": "port", "top_k": 1' + b"0" * 5_000 + b"}",
        b'{"questions": [{"question": "port", "id": 1' + b"0" * 5_000 + b"}]}",
        b'{"question": "port", "question": "logs"}', b'{"question": "\\u12"}', b'{"question": "\\x41"}',
        b'{"question": "a\nb"}', b'{"question": "\x00"}', b"\xef\xbb\xbf{\"question\": \"port\"}",
        '{"question": "port"}'.encode("utf-16"), '{"question": "port"}'.encode("utf-32"),
        b'{"question": "\xff\xfe"}', b'{"question": "caf\xe9"}', b'{"question": "\xc0\xaf"}',
        b'{"question": "\xed\xa0\x80"}', b'{"question": "\xf4\x90\x80\x80"}', b"\xff\xfe\xfd",
        b'{"question": "port"}\x00', b'{"question": "port"} {"question": "logs"}', b" " * 10_000,
        b'{"question": "port", "filters": "doc_id=guide.md"}', b'{"question": "\\ud800\\udc00"}',
        b'{"\\ud800": "port"}', b'{"question": "port", "tags": ["\\udbff"]}',
        _deep(), _deep(kind="dict"), b'{"question": ' + _deep(b'"port"') + b"}",
        b'{"question": "port", "filters": ' + _deep(b'"doc_id=guide.md"') + b"}",
        b'{"questions": ' + _deep(b'{"question": "port"}') + b"}",
        b'{"question": "port", "unknown": ' + _deep(kind="dict") + b"}",
        b'{"question": "port", "x": ' + _deep(n=40) + b"}",  # under the decoder's limit, over the app's
        b'{"question": "port", "x": ' + _deep(n=990) + b"}",
        _deep(n=300_000)[:600_000],  # unclosed, just under the body limit
    ]
    out += [(f"raw {r[:40]!r}", r) for r in raw]
    return out


def _requests() -> list[tuple[str, str, str, dict, bytes | None]]:
    """(label, method, path, headers, body) — the whole HTTP corpus."""
    reqs: list = []
    for label, body in _retrieve_bodies():
        path = "/v1/retrieve/batch" if label.startswith("batch") or b'"questions"' in body[:20] or "questions" in label \
            else "/v1/retrieve"
        reqs.append((label, "POST", path, {**AUTH, **JSON}, body))
        if label.startswith("raw"):  # a raw body to the other endpoint too
            other = "/v1/retrieve" if path.endswith("batch") else "/v1/retrieve/batch"
            reqs.append((label + " (other endpoint)", "POST", other, {**AUTH, **JSON}, body))
    ok = b'{"question": "which port"}'
    headers = {
        "Origin": ["http://[::1", "http://[", "http://]", "http://[::1]]", "http://[zz::1]", "http://[::1]:99999",
                   "http://localhost:abc", "http://localhost:99999", "://", " ", "null", "file://", "http://",
                   "http://evil.example", "http://user:pw@localhost", "http://localhost\\@evil", "javascript:alert(1)",
                   "http://" + "a" * 5_000, "http://127.0.0.1:3000", "http://[::1]:3000", "http://\xe9vil"],
        "Host": ["[::1", "[", "]", ":", "localhost:abc", "localhost:", "evil.example", "", "127.0.0.1:99999999",
                 "[::1]:80", "[zz]", "a" * 5_000, "\xe9vil", "localhost.", "LOCALHOST"],
        "Authorization": ["", "Bearer", "Bearer ", "Bearer  ", "bearer " + SUPPORT, "Basic " + SUPPORT,
                          "Bearer " + SUPPORT * 1_000, "Bearer " + SUPPORT + " extra", "Bearer \xe9\xe9\xe9",
                          "Bearer " + GUEST, SUPPORT, "Bearer\t" + SUPPORT, "Digest x", "Bearer " + "\x7f" * 10],
        "Content-Type": ["text/plain", "application/json; charset=utf-16", "multipart/form-data; boundary=x",
                         "application/x-www-form-urlencoded", "", "application/json; charset=\xe9", "*/*", ";;;",
                         "application/json" + "; a=b" * 500],
        "Content-Length": ["abc", "-5", "99999999999", "1e3", " 12", "0"],
        "Accept": ["text/html", "", "application/xml", "*/*;q=abc"],
    }
    for name, values in headers.items():
        for v in values:
            base = AUTH if name != "Authorization" else {}
            for method, path, body in (("POST", "/v1/retrieve", ok), ("GET", "/healthz", None),
                                       ("GET", "/v1/documents/guide.md", None)):
                reqs.append((f"{name}: {v[:30]!r} {method} {path}", method, path, {**base, **JSON, name: v}, body))
    paths = ["/", "/v1", "/v1/", "/v1/retrieve/", "/v1/retrieve/batch/", "/v1/documents", "/v1/documents/",
             "/v1/documents/%00", "/v1/documents/..%2F..%2Fetc%2Fpasswd", "/v1/documents/../../etc/passwd",
             "/v1/documents/" + "a" * 5_000, "/v1/documents/%ED%A0%80", "/v1/documents/%FF%FE", "/v1/documents/%",
             "/v1/documents/payroll.md", "/v1/documents/guide.md/", "/v1/documents//guide.md", "//v1/retrieve",
             "/v1/retrieve%00", "/healthz/", "/metrics/", "/docs", "/openapi.json", "/mcp", "/%2e%2e/", "/v2/retrieve",
             "/v1/contract?x=\ud800".encode("utf-8", "surrogatepass").decode("latin-1")]
    for p in paths:
        for method in ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
            reqs.append((f"{method} {p[:40]}", method, p, {**AUTH, **JSON}, b"{}" if method != "GET" else None))
    for p in ("/v1/retrieve", "/v1/retrieve/batch", "/v1/contract", "/healthz", "/metrics"):
        for method in ("GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE", "CONNECT", "FOO"):
            reqs.append((f"{method} {p}", method, p, {**AUTH, **JSON}, None))
    for lines in ["0-0", "-1-5", "5-1", "1-99999999999999999999", "9" * 5_000, "a-b", "", "1-", "-", "1--2",
                  "%ff", "1-2-3", "\u0663-\u0665", "1e3-2e3", " 1-2 ", "1_000-2_000", "0x1-0x2", "1.5-2",
                  "100-200", "\ud800", "1-\x00", "NaN-inf", "+1-+2", "1" * 4_000 + "-2"]:
        for doc in ("guide.md", "payroll.md", "nope.md"):
            reqs.append((f"lines={lines[:20]!r} {doc}", "GET", f"/v1/documents/{doc}", AUTH, ("lines", lines)))
    return reqs


@pytest.fixture(scope="module")
def hostile_app(kb):  # noqa: F811
    from fastapi.testclient import TestClient

    from kbtool.serve.http import create_app
    from kbtool.serve.service import Caller, Service

    service = Service(kb["kb"], kb["contract"])
    tokens = {SUPPORT: Caller(principal="support", name="support"), GUEST: Caller(principal="guest", name="guest")}
    with TestClient(create_app(service, tokens), base_url="http://127.0.0.1", raise_server_exceptions=False) as c:
        yield c, service


def _send(c, method, path, headers, body):
    import httpx

    if isinstance(body, tuple):  # a query parameter, sent as its UTF-8 bytes (surrogatepass: as a raw client may)
        key, value = body
        from urllib.parse import quote_from_bytes

        q = quote_from_bytes(value.encode("utf-8", "surrogatepass"))
        return c.request(method, f"{path}?{key}={q}", headers=headers)
    # headers as latin-1 bytes: what a raw client can put on the wire
    raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    req = c.build_request(method, path, content=body)
    req.headers = httpx.Headers([(k, v) for k, v in req.headers.raw
                                 if k.lower() not in {h.lower() for h, _ in raw}] + raw)
    return c.send(req)


def _check(label, method, r, failures):
    if r.status_code >= 500:
        failures.append((label, r.status_code, r.text[:300]))
        return
    if "Traceback" in r.text or 'File "' in r.text:
        failures.append((label, r.status_code, "traceback in the answer: " + r.text[:300]))
    if r.status_code >= 400 and method != "HEAD":
        try:
            err = r.json()["error"]
            assert isinstance(err["type"], str) and isinstance(err["message"], str) and err["message"].strip()
        except Exception as exc:  # noqa: BLE001 - recorded as a failure with the answer
            failures.append((label, r.status_code, f"not a JSON error ({exc!r}): {r.text[:300]}"))


def test_a_hostile_corpus_gets_no_5xx_and_every_4xx_is_a_json_error(hostile_app, caplog):
    c, service = hostile_app
    reqs = _requests()
    assert len(reqs) >= 500, len(reqs)
    failures: list = []
    statuses: dict[int, int] = {}
    with caplog.at_level(logging.DEBUG):
        for label, method, path, headers, body in reqs:
            r = _send(c, method, path, headers, body)
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            _check(label, method, r, failures)
    assert not failures, f"{len(failures)} of {len(reqs)} failed:\n" + "\n".join(map(repr, failures[:40]))
    logged = [rec for rec in caplog.records if rec.exc_info or "Traceback" in rec.getMessage()
              or rec.levelno >= logging.ERROR]
    assert not logged, [(rec.name, rec.getMessage()[:200]) for rec in logged[:10]]
    # the corpus reached every layer: answers, body validation, JSON parsing, access, routing, limits
    assert {200, 400, 401, 403, 404, 405, 413, 422} <= set(statuses), statuses
    # and the server still answers right after it
    r = c.post("/v1/retrieve", headers=AUTH, json={"question": "which port does the server listen on", "top_k": 1})
    assert r.status_code == 200 and r.json()["hits"][0]["doc_id"] == "guide.md"


ISSUE_36 = [
    ("surrogate in a filter", b'{"question": "port", "filters": ["doc_id=\\ud800"]}', "filters.0: holds a lone surrogate"),
    ("surrogate in the question", b'{"question": "port \\ud800"}', "question: holds a lone surrogate"),
    ("surrogate in a batch id", b'{"questions": [{"question": "port", "id": "\\ud800"}]}',
     "questions.0.id: holds a lone surrogate"),
    ("surrogate in a key", b'{"question": "port", "\\udfff": 1}', "a key in the body: holds a lone surrogate"),
    ("10,000 deep", b'{"question": ' + _deep(b'"port"') + b"}", "nests deeper than 32 levels"),
    ("40 deep", b'{"question": "port", "x": ' + _deep(n=40) + b"}", "nests deeper than 32 levels"),
]


@pytest.mark.parametrize("label, body, words", ISSUE_36, ids=[case[0] for case in ISSUE_36])
def test_the_500s_of_issue_36_are_400_naming_the_field(hostile_app, label, body, words):
    """Each of these was a 500 (UnicodeEncodeError writing the answer; RecursionError in the decoder)."""
    c, _ = hostile_app
    path = "/v1/retrieve/batch" if b'"questions"' in body else "/v1/retrieve"
    r = c.post(path, content=body, headers={**AUTH, **JSON})
    assert r.status_code == 400, r.text
    assert words in r.json()["error"]["message"] and r.json()["error"]["type"] == "invalid_json"


def test_a_malformed_origin_is_400_not_500(hostile_app):
    """urllib's 'Invalid IPv6 URL' (ValueError) from the Origin check was a 500."""
    c, _ = hostile_app
    r = c.get("/healthz", headers={"Origin": "http://[::1"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "origin"
    assert "not a URL" in r.json()["error"]["message"]
    assert c.get("/healthz", headers={"Origin": "http://[::1]:3000"}).status_code == 200


def test_a_malformed_host_is_400_not_read_as_another(hostile_app):
    """'Host: [::1' (no closing bracket) was read as '::1' and answered."""
    c, _ = hostile_app
    r = c.get("/healthz", headers={"Host": "[::1"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "host" and "not a host name" in r.json()["error"]["message"]
    assert c.get("/healthz", headers={"Host": "[::1]:8765"}).status_code == 200


# ---- MCP over streamable HTTP: its own app (`kbtool serve --mcp http`) ------------------------------
def _rpc(method: str, params=None, id_=7) -> dict:
    return {"jsonrpc": "2.0", "id": id_, "method": method, **({"params": params} if params is not None else {})}


def _mcp_bodies() -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for s in HOSTILE_STRINGS[:12]:
        for name, args in (("search", {"question": s}), ("search", {"question": "port", "filters": [s]}),
                           ("read", {"doc_id": s}), ("read", {"doc_id": "guide.md", "lines": s})):
            out.append((f"{name} {list(args)[-1]}={s[:20]!r}",
                        json.dumps(_rpc("tools/call", {"name": name, "arguments": args})).encode()))
        out.append((f"id={s[:20]!r}", json.dumps(_rpc("ping", id_=s)).encode()))
        out.append((f"resource {s[:20]!r}", json.dumps(_rpc("resources/read", {"uri": "kbtool://" + s})).encode()))
    for v in WRONG_TYPES:
        out.append((f"search question={v!r:.30}",
                    json.dumps(_rpc("tools/call", {"name": "search", "arguments": {"question": v}})).encode()))
        out.append((f"search top_k={v!r:.30}", json.dumps(_rpc("tools/call", {"name": "search", "arguments": {
            "question": "port", "top_k": v}})).encode()))
        out.append((f"params={v!r:.30}", json.dumps(_rpc("tools/call", v)).encode()))
    for f in BAD_FILTERS[:15]:
        out.append((f"filter {f[:30]!r}", json.dumps(_rpc("tools/call", {"name": "search", "arguments": {
            "question": "port", "filters": [f]}})).encode()))
    out += [(f"raw {r[:30]!r}", r) for r in (
        b"", b"{", b"[]", b"null", b"\xff\xfe", b'{"jsonrpc": "2.0"}', b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}',
        json.dumps(_rpc("nope")).encode(), json.dumps(_rpc("tools/call", {"name": "nope", "arguments": {}})).encode(),
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": ' + _deep() + b"}", _deep(kind="dict"),
        b'{"jsonrpc": "2.0", "id": 1' + b"0" * 5_000 + b', "method": "ping"}',
        json.dumps([_rpc("ping", id_=i) for i in range(50)]).encode())]
    return out


def _mcp_check(label, r, failures):
    """No 5xx, no traceback; a 4xx is JSON-RPC JSON with an error message (the SDK's plain-text
    answers of its transport checks too)."""
    if r.status_code >= 500 or "Traceback" in r.text:
        failures.append((label, r.status_code, r.text[:300]))
    elif r.status_code >= 400:
        try:
            assert r.json()["error"]["message"].strip()
        except Exception as exc:  # noqa: BLE001 - recorded with the answer
            failures.append((label, r.status_code, f"not a JSON error ({exc!r}): {r.text[:300]}"))


def test_the_mcp_endpoint_gets_no_5xx_from_a_hostile_client(kb, caplog):  # noqa: F811
    from starlette.testclient import TestClient

    from kbtool.serve.mcp import build_server, json_errors, transport_security
    from kbtool.serve.service import Service

    service = Service(kb["kb"], kb["contract"])
    app = json_errors(build_server(service).streamable_http_app(  # as `kbtool serve --mcp http` serves it
        streamable_http_path="/mcp", host="127.0.0.1", transport_security=transport_security("127.0.0.1")))
    head = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    failures: list = []
    sent = 0
    with caplog.at_level(logging.DEBUG), \
            TestClient(app, base_url="http://127.0.0.1:8765", raise_server_exceptions=False) as c:
        init = _rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                   "clientInfo": {"name": "hostile", "version": "1"}}, id_=1)
        r = c.post("/mcp", json=init, headers=head)
        assert r.status_code == 200, r.text
        session = {**head, "mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
        c.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        for label, body in _mcp_bodies():
            r = c.post("/mcp", content=body, headers=session)
            sent += 1
            _mcp_check(label, r, failures)
        for name, value in (("Origin", "http://[::1"), ("Origin", "http://evil.example"), ("Host", "[::1"),
                            ("Host", "evil.example"), ("Content-Type", "text/plain"), ("Accept", "text/html"),
                            ("mcp-session-id", "nope"), ("mcp-session-id", ""), ("mcp-protocol-version", "1999-01-01")):
            # not GET (a valid one opens the SSE stream, which never ends) nor DELETE (it ends the session)
            for method in ("POST", "PUT", "PATCH"):
                r = c.request(method, "/mcp", content=json.dumps(_rpc("ping")).encode(), headers={**session, name: value})
                sent += 1
                _mcp_check(f"{method} {name}: {value}", r, failures)
        for method, headers in (("GET", {**session, "Accept": "text/html"}), ("DELETE", {**session, "mcp-session-id": "nope"}),
                                ("GET", {**session, "Origin": "http://[::1"}), ("DELETE", {**session, "Host": "[::1"})):
            r = c.request(method, "/mcp", headers=headers)
            sent += 1
            _mcp_check(f"{method} {headers}", r, failures)
        r = c.post("/mcp", json=_rpc("tools/call", {"name": "search", "arguments": {"question": "which port"}}),
                   headers=session)
        assert r.status_code == 200 and "guide.md" in r.text  # still answering
    assert sent >= 100 and not failures, failures[:20]
    logged = [rec for rec in caplog.records if rec.exc_info or "Traceback" in rec.getMessage()]
    assert not logged, [(rec.name, rec.getMessage()[:200]) for rec in logged[:10]]
