"""The retrieval contract as an MCP server for agents: ``kbtool serve --mcp stdio|http``.

A thin layer over ``Service`` (``serve/service.py``) with the official ``mcp`` SDK:

* tool ``search`` — question, filters, tags, top_k (the schema is built from the contract and the
  store: the filterable metadata keys, the decide tiers, ``1..max_top_k``) → the context block, the
  citations and the decision with its explanation, as text and as structured content. A refusal
  is a normal result that says so, not an error.
* tool ``read`` — doc_id and an optional line range ``a-b`` → the cited span, each line numbered.
* resources ``kbtool://contract`` (the effective contract, YAML) and ``kbtool://status`` (the
  store's size, freshness and model, JSON).

The server answers as ONE caller (``caller``: the principal and permission tags given on the
command line); no tool takes a principal, so a tool call can never widen what it may read. A
kbtool error (bad filter, unknown document, ...) is a tool error with kbtool's one-line message.

The tool schemas and the instructions are written when the server starts; answers always come
from the current state (``Service`` swaps in a re-ingested store or an edited contract, and checks
tags, filters and top_k itself). ``mcp`` is imported inside the functions only: ``kbtool --help`` stays instant.
"""

# no `from __future__ import annotations`: the tools' annotations are read by the SDK at runtime

import inspect
import json
import sys
from typing import Any

from ..contract.base import QUESTION_TYPES
from . import LOOPBACK
from .service import Caller

SNIPPET_CHARS = 400  # of each hit's text in the citations
READ_DEFAULT_LINES = 400  # `read` without a range: the document's first lines, and says how many there are
TYPE_TIERS = set(QUESTION_TYPES)  # detected question types: a tier of that name applies by itself


# ---- what the caller may see --------------------------------------------------------------------
def _filter_keys(service, caller: Caller) -> list[str]:
    """The metadata keys a filter may name, as ``scope`` accepts them for this caller: the
    contract's filterable ``data.metadata`` and the store's keys (for a restricted caller, only
    keys documents it may read carry)."""
    from ..access import access_tags, known_filter_keys

    with service.state() as (store, contract, _):
        fields = contract.data.metadata
        keys = known_filter_keys(store, contract, access_tags(contract, caller.principal, caller.allow or None))
    return sorted(k for k in keys if k not in fields or fields[k].filterable)


def _status(service, caller: Caller) -> dict:
    """``service.health()``, with the documents and chunks this caller may read."""
    return service.health(caller)


def _instructions(service, caller: Caller, keys: list[str]) -> str:
    st = _status(service, caller)
    fr = st["index"]
    tiers = list(service.contract.decide.tiers)
    lines = [
        f"kbtool knowledge base ({st['store']}): {st['documents']} documents, {st['chunks']} chunks, "
        f"embedding model {st['model']}, contract version {st['contract']['version']}.",
        ("Freshness when the server started: "
         + (f"catalog generation {fr['generation']}, " if fr.get("generation") is not None else "")
         + f"indexes {'current' if fr['indexes_current'] else 'NOT current (run kbtool index)'}"
         + (f", last ingest {fr['last_ingest'] or 'never'}" if fr.get("generation") is not None else "")
         + ". The resource kbtool://status has the current state; the server picks up a re-ingested "
         "store and an edited contract by itself."),
        "",
        "How to use it:",
        "1. Call `search` with the question in natural language first. Answer only from the returned "
        "context and cite the sources as [n] with their citation (path:lines or URL).",
        "2. The decision says how far to trust it: `answer` — the sources answer the question; "
        "`low_confidence` — answer with a caveat; `refuse` — the knowledge base has no answer: say so, "
        "do not guess. The explanation says why (and which words the knowledge base never mentions).",
        "3. To see more around a citation, call `read` with its doc_id and a line range, e.g. a few lines "
        "before line_start to some after line_end (lines are numbered in the result).",
        f"4. Narrow a search with filters KEY=VALUE (or dir=docs/** globs) over the keys: {', '.join(keys)}.",
    ]
    named = [t for t in tiers if t not in TYPE_TIERS]
    if named:
        lines.append(f"5. Tags select a threshold tier for the question: {', '.join(named)}.")
    if caller.principal or caller.allow:
        who = caller.principal or ", ".join(caller.allow)
        lines.append(f"Access: this server answers as {who}; it sees only the documents that caller may read.")
    return "\n".join(lines)


# ---- results ------------------------------------------------------------------------------------
def _citation(hit) -> dict:
    text = " ".join(hit.text.split())
    return {"rank": hit.rank, "doc_id": hit.doc_id, "chunk_id": hit.chunk_id, "citation": hit.citation, "url": hit.url or None,
            "title": hit.title, "section_path": hit.section_path,
            "lines": [hit.line_start, hit.line_end] if hit.line_start else None,
            "line_source": hit.line_source,
            "page": hit.page, "confidence": round(hit.confidence, 4),
            "snippet": text if len(text) <= SNIPPET_CHARS else text[:SNIPPET_CHARS].rstrip() + " …"}


def answer_payload(answer, freshness: dict | None = None) -> dict:
    """The structured result of ``search`` for one ``Answer``."""
    cites = [_citation(h) for h in answer.hits]
    refused = answer.decision == "refuse"
    out = {"question": answer.question, "decision": answer.decision,
           "confidence": None if answer.confidence is None else round(answer.confidence, 4),
           "tier": answer.tier, "message": answer.explanation.get("message", ""),
           "explanation": answer.explanation, "context": answer.context,
           # a refusal's hits answer nothing: they are the nearest misses, never sources to cite
           "citations": [] if refused else cites, "nearest": cites if refused else []}
    if answer.filters:
        out["filters"] = answer.filters
    if getattr(answer, "conflicts", None) is not None:  # postprocess.freshness.prefer set: as query --json has it
        out["conflicts"] = answer.conflicts
    if freshness is not None:
        out["freshness"] = freshness
    return out


def answer_text(payload: dict) -> str:
    conf = payload["confidence"]
    head = f"Decision: {payload['decision']}"
    if payload["message"]:
        head += f" — {payload['message']}"
    elif conf is not None:
        head += f" (confidence {conf:.2f})"
    parts = [head, "", payload["context"].rstrip()]
    if payload["citations"]:
        parts += ["", "Citations (read one with `read` doc_id and lines):"]
        for c in payload["citations"]:
            where = f"lines {c['lines'][0]}-{c['lines'][1]}" if c["lines"] else (f"p.{c['page']}" if c["page"] else "")
            parts.append(f"[{c['rank']}] {c['citation']} — {c['section_path'] or c['title']} "
                         f"(doc_id {c['doc_id']}{', ' + where if where else ''}; confidence {c['confidence']:.2f})")
    elif payload["decision"] == "refuse":
        parts += ["", "No source answers this question: say the knowledge base has no answer; do not guess."]
    return "\n".join(parts)


def numbered(span: dict) -> str:
    first, last = span["lines"]
    width = len(str(last))
    body = "\n".join(f"{n:>{width}} | {line}" for n, line in enumerate(span["text"].split("\n"), start=first))
    head = f"{span['doc_id']} — {span['title']}: lines {first}-{last} of {span['total_lines']}"
    notes = []
    if span["source"] == "parsed":
        notes.append("text as parsed at ingest")
    if span["changed_since_ingest"]:
        notes.append("the file changed since it was ingested: line numbers may differ from the citations")
    if last < span["total_lines"]:
        notes.append(f"more: lines {last + 1}-{span['total_lines']}")
    return head + (f" ({'; '.join(notes)})" if notes else "") + "\n" + body


def _search_signature(described: str, tiers: list[str], max_k: int) -> inspect.Signature:
    """The signature of the ``search`` tool (the SDK builds its input schema from it): the filter keys
    ``described``, the contract's tiers as the tags a question may carry, ``top_k`` in 1..max_k."""
    from typing import Annotated, List, Literal, Optional

    from mcp_types import CallToolResult
    from pydantic import Field

    P = inspect.Parameter
    params = [
        P("question", P.KEYWORD_ONLY, annotation=Annotated[str, Field(
            min_length=1, description="The question, in natural language (any language the store holds).")]),
        P("filters", P.KEYWORD_ONLY, default=[], annotation=Annotated[List[str], Field(
            description="Restrict the search, each KEY=VALUE (all must match), as `kbtool query --filter`: "
                        "e.g. filetype=md, dir=docs/** (a glob), doc_id=manual/*. Keys: " + described + ".")]),
    ]
    if tiers:
        params.append(P("tags", P.KEYWORD_ONLY, default=[], annotation=Annotated[
            List[Literal[tuple(tiers)]], Field(  # type: ignore[valid-type]
                description="Question tags selecting a threshold tier of the contract (decide.tiers); "
                            "identifier/cjk/other tiers also apply by themselves to such questions.")]))
    params.append(P("top_k", P.KEYWORD_ONLY, default=None, annotation=Annotated[
        Optional[Annotated[int, Field(ge=1, le=max_k)]], Field(
            description=f"Hits returned, 1-{max_k} (default: the contract's retrieve.top_k).")]))
    return inspect.Signature(params, return_annotation=CallToolResult)


# ---- the server ---------------------------------------------------------------------------------
def build_server(service, caller: Caller | None = None):
    """The MCP server (an ``mcp.server.mcpserver.MCPServer``) over ``service``, answering as
    ``caller`` (default: unrestricted, as ``kbtool query`` without --principal/--allow)."""
    from typing import Annotated, Optional

    from mcp.server.mcpserver import MCPServer
    from mcp_types import CallToolResult, TextContent, ToolAnnotations
    from pydantic import Field

    from .. import __version__
    from ..errors import KbtoolError
    from ..access import access_tags

    caller = caller or Caller()
    access_tags(service.contract, caller.principal, caller.allow or None)  # an unknown principal: fail now
    keys = _filter_keys(service, caller)
    contract = service.contract
    fields = contract.data.metadata
    described = ", ".join(f"{k} ({fields[k].type})" if k in fields else k for k in keys)
    tiers = list(contract.decide.tiers)
    max_k = service.max_top_k

    server = MCPServer("kbtool", title="kbtool knowledge base", version=__version__,
                       instructions=_instructions(service, caller, keys), log_level="WARNING")

    def error(exc: Exception) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True)

    # -- search: its signature (and so its input schema) comes from the contract and the store
    def search(**args: Any) -> CallToolResult:
        try:
            answer = service.retrieve(args["question"], caller=caller, filters=args.get("filters") or [],
                                      tags=args.get("tags") or [], top_k=args.get("top_k"))
            payload = answer_payload(answer, service.freshness(caller))
        except KbtoolError as exc:
            return error(exc)
        return CallToolResult(content=[TextContent(type="text", text=answer_text(payload))],
                              structured_content=payload)

    search.__signature__ = _search_signature(described, tiers, max_k)
    search.__annotations__ = {}
    server.add_tool(
        search, name="search", title="Search the knowledge base",
        description=("Search the knowledge base with the retrieval contract; call it first. Returns the "
                     "context block to answer from (cite sources as [n]), the citations (doc_id, "
                     "path:lines or URL, section, confidence, snippet) and the decision (answer, "
                     "low_confidence, refuse) with its explanation. A refusal means the knowledge base "
                     f"has no answer: say so. top_k: hits returned (1-{max_k}; default: the contract's "
                     f"{contract.retrieve.top_k})."),
        annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False))

    def read(doc_id: Annotated[str, Field(description="A document id from a citation (doc_id).")],
             lines: Annotated[Optional[str], Field(
                 description="Line range A-B of the source (e.g. 70-110: around a citation's lines); "
                             f"default: the first {READ_DEFAULT_LINES} lines.")] = None) -> CallToolResult:
        try:
            span = service.document_span(doc_id, lines or f"1-{READ_DEFAULT_LINES}", caller=caller)
        except KbtoolError as exc:
            return error(exc)
        return CallToolResult(content=[TextContent(type="text", text=numbered(span))], structured_content=span)

    server.add_tool(
        read, name="read", title="Read a cited span",
        description=("Read a document of the knowledge base, or the lines A-B of it, each line prefixed "
                     "with its number: to check a citation or see the text around it."),
        annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False))

    @server.resource("kbtool://contract", name="contract", title="The effective retrieval contract",
                     description="The contract the server answers with (YAML), overrides applied.",
                     mime_type="application/yaml")
    def contract_resource() -> str:
        import yaml

        with service.state() as (_, c, _e):
            return yaml.safe_dump(service.contract_view(caller, c), sort_keys=False, allow_unicode=True, width=100)

    @server.resource("kbtool://status", name="status", title="Store status and freshness",
                     description="Documents, chunks, embedding model, index freshness (generation, "
                                 "indexes current, last ingest), contract version (JSON).",
                     mime_type="application/json")
    def status_resource() -> str:
        return json.dumps(_status(service, caller), indent=2, ensure_ascii=False)

    return server


def transport_security(host: str):
    """DNS-rebinding protection: Host and Origin must name this machine (and ``host``)."""
    from mcp.server.transport_security import TransportSecuritySettings

    hosts = [f"[{name}]:*" if ":" in name else f"{name}:*" for name in LOOPBACK]
    origins = [f"http://{h}" for h in hosts]
    names = []
    if host in ("0.0.0.0", "::", ""):  # every interface: this machine's names
        import socket

        names = [socket.gethostname(), socket.getfqdn()]
    elif host not in LOOPBACK:
        names = [host]
    for name in dict.fromkeys(n for n in names if n):
        name = f"[{name}]" if ":" in name else name
        hosts.append(f"{name}:*")
        origins += [f"http://{name}:*", f"https://{name}:*"]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=origins)


def json_errors(app):
    """``app`` (the SDK's streamable-HTTP app) with every 4xx/5xx answered as JSON-RPC JSON
    ``{"jsonrpc", "id": null, "error": {"code", "message"}}``: the SDK's transport checks answer
    plain text ("Invalid Origin header"), its own JSON-RPC errors pass unchanged."""

    async def wrapped(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        held: dict = {}

        async def relay(message):
            if message["type"] == "http.response.start" and message["status"] >= 400:
                ctype = dict(message.get("headers") or []).get(b"content-type", b"")
                if not ctype.startswith(b"application/json"):
                    held.update(start=message, body=b"")
                    return
            if "start" in held and message["type"] == "http.response.body":
                held["body"] += message.get("body", b"")
                if message.get("more_body"):
                    return
                start, text = held.pop("start"), held["body"].decode("utf-8", "replace").strip()
                body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
                    "code": -32600, "message": text or f"HTTP {start['status']}"}}).encode()
                headers = [(k, v) for k, v in start.get("headers") or [] if k not in (b"content-type", b"content-length")]
                await send({**start, "headers": headers + [(b"content-type", b"application/json"),
                                                           (b"content-length", str(len(body)).encode())]})
                return await send({"type": "http.response.body", "body": body})
            await send(message)

        return await app(scope, receive, relay)

    return wrapped


def run(service, transport: str = "stdio", host: str = "127.0.0.1", port: int = 8765,
        caller: Caller | None = None, log_level: str = "warning", access_log: bool = False) -> None:
    """Serve until interrupted: ``stdio`` (an MCP client starts this process) or ``http``
    (streamable HTTP at ``http://HOST:PORT/mcp``; port 0: a free one, named in the ready line on
    stderr; SIGTERM stops it gracefully)."""
    import anyio

    from ..errors import UsageError
    from .server import listen, run_uvicorn

    if transport not in ("stdio", "http"):
        raise UsageError(f"MCP transport {transport!r}: use stdio or http")
    server = build_server(service, caller)
    if transport == "stdio":
        anyio.run(server.run_stdio_async)
        return
    app = json_errors(server.streamable_http_app(streamable_http_path="/mcp", transport_security=transport_security(host),
                                                 host=host))
    sock, bound = listen(host, port)
    print(f"kbtool MCP server: http://{host if ':' not in host else f'[{host}]'}:{bound}/mcp "
          f"(store {service.store.path})", file=sys.stderr, flush=True)
    run_uvicorn(app, sock, log_level, lifespan="on", access_log=access_log)  # the session manager runs in the app's lifespan


__all__ = ["build_server", "run", "answer_payload", "json_errors"]
