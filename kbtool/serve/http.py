"""The HTTP face of a warm ``Service``: ``create_app(service)`` is a FastAPI app whose answers are the
JSON of ``kbtool query --json``. This module is imported only when a server starts (it imports
FastAPI and pydantic).

The routes are functions on one ``APIRouter``; each takes what it needs through ``Depends``: the
service, the app's ``Settings`` (limits, tokens) and the request's ``Caller``. ``guard``, a
middleware, checks every request first — unknown paths too — for its host, origin and token, and
answers every failure as JSON.

Access: ``tokens`` maps a bearer token to the ``Caller`` it stands for. With tokens, every ``/v1/*``
request needs ``Authorization: Bearer TOKEN``; without, every request is ``default_caller``. A
request body can never name a principal or tags to read with (unknown fields are refused), so a
request cannot widen what its token may read.

Limits: a body over ``max_body`` bytes is 413; at most ``max_concurrency`` retrievals run at once
(the rest wait their turn); a request not answered within ``timeout`` seconds (waiting included) is
504. Errors are JSON ``{"error": {"type", "message"}}``, never a traceback.
"""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations at runtime.
import asyncio
import hmac
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Optional
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator
from starlette.concurrency import run_in_threadpool

from .. import __version__
from ..errors import AccessError, ContractError, InputError, KbtoolError, ModelError, StoreError
from ..query.preprocess import clean
from . import LOOPBACK
from .service import Caller, DocumentNotFound, Service

log = logging.getLogger("kbtool.serve")

MAX_BODY = 1_000_000
MAX_BATCH = 100
MAX_DEPTH = 32  # levels of JSON nesting a body may have (a batch needs 4)
_SURROGATE = re.compile("[\ud800-\udfff]")


class HttpError(Exception):
    """An error the app answers with its own status (not a library error)."""

    def __init__(self, status: int, type_: str, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.type, self.headers = status, type_, headers


def load_tokens(path: str | Path, contract) -> dict[str, Caller]:
    """Bearer token -> Caller from a YAML or JSON file ``{TOKEN: {principal: NAME, allow: [TAG]}}``.
    A principal the contract does not define is an error naming it, at startup."""
    import yaml

    class Loader(yaml.SafeLoader):
        """A token written twice is an error, not the last one silently winning (and its access)."""

        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if isinstance(key, str) and key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, "a token is written twice (each token names one caller)", key_node.start_mark)
                seen.add(key) if isinstance(key, str) else None
            return super().construct_mapping(node, deep=deep)

    name = str(path)
    try:
        data = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=Loader)  # JSON is YAML too
    except OSError as exc:
        raise InputError(f"tokens file {name}: cannot read ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:  # its problem and line only: the quoted snippet would show a token
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise InputError(f"tokens file {name}: not valid YAML or JSON{where} "
                         f"({getattr(exc, 'problem', None) or type(exc).__name__})") from None
    if not isinstance(data, dict) or not data:
        raise InputError(f"tokens file {name}: write a mapping TOKEN: {{principal: NAME}} or TOKEN: {{allow: [TAG]}}")
    tokens: dict[str, Caller] = {}
    for i, (token, spec) in enumerate(data.items(), start=1):
        where = f"tokens file {name}, entry {i}"  # never echo a token
        if not isinstance(token, str) or len(token) < 8:
            raise InputError(f"{where}: a token must be a string of at least 8 characters")
        if not all("!" <= ch <= "~" for ch in token):  # a header carries it: no space, no non-ASCII
            raise InputError(f"{where}: a token is printable ASCII without spaces (a request could never send it)")
        if not isinstance(spec, dict) or set(spec) - {"principal", "allow", "name"}:
            raise InputError(f"{where}: write {{principal: NAME}} and/or {{allow: [TAG, ...]}} (and an optional name)")
        principal, allow = spec.get("principal"), spec.get("allow") or []
        if isinstance(allow, str):
            allow = [allow]
        if principal is not None and not isinstance(principal, str):
            raise InputError(f"{where}: principal must be a name")
        if not isinstance(allow, list) or not all(isinstance(t, str) and t for t in allow):
            raise InputError(f"{where}: allow must be a list of tags")
        if principal is None and not allow:
            raise InputError(f"{where}: give a principal or allow tags (a token for everything: allow the tags)")
        if principal is not None and principal not in contract.access.principals:
            known = ", ".join(sorted(contract.access.principals)) or "none defined"
            raise AccessError(f"{where}: unknown principal {principal!r} (access.principals: {known})")
        tokens[token] = Caller(principal=principal, allow=list(allow),
                               name=str(spec.get("name") or principal or f"token{i}"))
    return tokens


# ---- request bodies -----------------------------------------------------------------------------
class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _question(v: str) -> str:
    if not clean(v):
        raise ValueError("the question is empty")
    return v


class Question(_Body):
    question: str = Field(max_length=10_000)
    id: str | int | None = None
    filters: list[str] = Field(default_factory=list, max_length=50)
    tags: list[str] = Field(default_factory=list, max_length=50)
    _q = field_validator("question")(_question)


class RetrieveBody(_Body):
    question: str = Field(max_length=10_000)
    filters: list[str] = Field(default_factory=list, max_length=50)
    tags: list[str] = Field(default_factory=list, max_length=50)
    top_k: int | None = Field(None, ge=1)  # at most the service's max_top_k: see bodies()
    mode: str = Field("contract", max_length=200)
    context: bool = True
    _q = field_validator("question")(_question)


class BatchBody(_Body):
    questions: list[Question] = Field(min_length=1)  # at most max_batch: see bodies()
    top_k: int | None = Field(None, ge=1)
    mode: str = Field("contract", max_length=200)
    context: bool = True


def bodies(max_top_k: int, max_batch: int) -> tuple[type[RetrieveBody], type[BatchBody]]:
    """``RetrieveBody`` and ``BatchBody`` with one app's limits: ``top_k`` up to ``max_top_k``, a
    batch of up to ``max_batch`` questions (a refusal names the limit, as pydantic words it)."""
    top_k = (Optional[int], Field(None, ge=1, le=max_top_k))
    questions = (list[Question], Field(min_length=1, max_length=max_batch))
    return (create_model("RetrieveBody", __base__=RetrieveBody, top_k=top_k),
            create_model("BatchBody", __base__=BatchBody, questions=questions, top_k=top_k))


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors():
        loc = ".".join(_shown(str(p)) for p in e.get("loc", ()) if p != "body") or "body"
        msg = e.get("msg", "invalid").removeprefix("Value error, ")
        if e.get("type") == "extra_forbidden":
            msg = "unknown field (a request cannot set it)"
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)


def _lone_surrogate(text: str) -> bool:  # valid JSON ("\\ud800"), not Unicode text: no UTF-8 can carry it
    return not text.isascii() and _SURROGATE.search(text) is not None


def _shown(name: str, limit: int = 60) -> str:
    """A body's key as a message names it: ASCII-safe, at most ``limit`` characters."""
    name = name.encode("utf-8", "backslashreplace").decode("utf-8")
    return name if len(name) <= limit else name[:limit] + "…"


def check_json(raw: Any) -> None:
    """400 for a parsed body nested deeper than ``MAX_DEPTH`` or with a lone surrogate (an unpaired
    escape such as ``\\ud800``) in a key or string, naming where. Iterative: no stack to exhaust."""
    todo: list[tuple[Any, str, int]] = [(raw, "", 1)]
    while todo:
        value, where, depth = todo.pop()
        if depth > MAX_DEPTH:
            raise HttpError(400, "invalid_json", f"the body nests deeper than {MAX_DEPTH} levels (at {where})")
        if isinstance(value, dict):
            todo.extend((v, f"{where}.{_shown(k)}" if where else _shown(k), depth + 1) for k, v in value.items())
            value, where = next((k for k in value if _lone_surrogate(k)), ""), f"a key in {where or 'the body'}"
        elif isinstance(value, list):
            todo.extend((v, f"{where}.{i}" if where else str(i), depth + 1) for i, v in enumerate(value))
        if isinstance(value, str) and _lone_surrogate(value):
            raise HttpError(400, "invalid_json", f"{where}: holds a lone surrogate (an unpaired \\uD800-\\uDFFF "
                            "escape): send valid Unicode text")


async def read_body(request: Request, model: type[BaseModel], max_body: int):
    """The request body as ``model``: 413 past max_body (declared or streamed), 400 for bad JSON,
    422 for a body the model refuses."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_body:
        raise HttpError(413, "too_large", f"the body is over {max_body} bytes")
    data = bytearray()
    async for piece in request.stream():
        data += piece
        if len(data) > max_body:
            raise HttpError(413, "too_large", f"the body is over {max_body} bytes")
    try:
        raw = json.loads(bytes(data))
    except (ValueError, UnicodeDecodeError) as exc:
        raise HttpError(400, "invalid_json", f"the body is not valid JSON ({exc})") from None
    except RecursionError:  # json's C decoder recurses per level: 10,000 '[' exhaust the stack
        raise HttpError(400, "invalid_json", f"the body nests deeper than {MAX_DEPTH} levels") from None
    if not isinstance(raw, dict):
        raise HttpError(400, "invalid_json", "the body must be a JSON object")
    check_json(raw)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise HttpError(422, "validation", _validation_message(exc)) from None


# ---- what a route depends on --------------------------------------------------------------------
@dataclass
class Settings:
    """What ``create_app`` was given, for the guard and the routes of one app (``app.state.settings``)."""

    tokens: dict[str, Caller]
    default_caller: Caller
    hosts: set[str] | None  # the Host and Origin names served (None: any)
    max_body: int
    timeout: float
    slots: asyncio.Semaphore | None  # one per retrieval running (None: no limit)
    retrieve_body: type[RetrieveBody]
    batch_body: type[BatchBody]


# async: FastAPI would run a plain function in the thread pool, where retrievals may hold every thread
async def get_service(request: Request) -> Service:
    return request.app.state.service


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_caller(request: Request) -> Caller:
    """Who asks: the caller ``guard`` found for the request's token, else the app's default caller."""
    return getattr(request.state, "caller", None) or request.app.state.settings.default_caller


ServiceDep = Annotated[Service, Depends(get_service)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
CallerDep = Annotated[Caller, Depends(get_caller)]


async def retrieve_body(request: Request, settings: SettingsDep) -> RetrieveBody:
    return await read_body(request, settings.retrieve_body, settings.max_body)


async def batch_body(request: Request, settings: SettingsDep) -> BatchBody:
    return await read_body(request, settings.batch_body, settings.max_body)


async def work(settings: Settings, fn: Callable[[], Any], limited: bool = True):
    """Run blocking ``fn`` in the thread pool within a concurrency slot (``limited``) and the
    timeout. A slot stays taken until its thread ends, even past a timeout: the limit is on
    real work."""
    slots, timeout = settings.slots, settings.timeout
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout if timeout else None
    limited = limited and slots is not None
    if limited:
        try:
            await asyncio.wait_for(slots.acquire(), None if deadline is None else max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
            raise HttpError(504, "timeout", f"no answer within {timeout:g} s (the server is busy)") from None
    task = asyncio.ensure_future(run_in_threadpool(fn))
    if limited:
        task.add_done_callback(lambda _: slots.release())
    try:
        return await asyncio.wait_for(asyncio.shield(task), None if deadline is None else max(0.0, deadline - loop.time()))
    except asyncio.TimeoutError:
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # its late error is not "never retrieved"
        raise HttpError(504, "timeout", f"no answer within {timeout:g} s") from None


# ---- errors and the guard every request passes ---------------------------------------------------
def error(status: int, type_: str, message: str, headers: dict | None = None) -> JSONResponse:
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")  # a lone surrogate it quotes: escaped
    return JSONResponse({"error": {"type": type_, "message": message}}, status_code=status, headers=headers)


def error_of(exc: BaseException) -> JSONResponse:
    if isinstance(exc, HttpError):
        return error(exc.status, exc.type, str(exc), exc.headers)
    if isinstance(exc, DocumentNotFound):
        return error(404, "not_found", str(exc))
    if isinstance(exc, AccessError):
        return error(403, "access", str(exc))
    if isinstance(exc, ContractError):
        return error(400, "contract", str(exc))
    if isinstance(exc, InputError):  # UsageError too
        return error(400, "usage", str(exc))
    if isinstance(exc, (StoreError, ModelError)):
        return error(503, "store" if isinstance(exc, StoreError) else "model", str(exc))
    if isinstance(exc, KbtoolError):
        return error(500, "kbtool", str(exc))
    log.exception("internal error")  # the traceback goes to the server's log, never to the client
    return error(500, "internal", f"{type(exc).__name__}: the server failed; its log has the details")


def _endpoint(path: str) -> str:
    """The metrics label of a path: a bounded set, whatever the path."""
    if path.startswith("/v1/documents/"):
        return "/v1/documents"
    if path in ("/v1/retrieve", "/v1/retrieve/batch", "/v1/contract", "/healthz", "/metrics"):
        return path
    return "other"


def _host_of(header: str) -> str:
    """'localhost:8765' -> 'localhost', '[::1]:8765' -> '::1'."""
    header = header.strip().lower()
    if header.startswith("["):
        if "]" not in header:  # '[::1': no host at all
            raise HttpError(400, "host", f"host {header!r} is not a host name (write [::1]:PORT)")
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def check_host(request: Request, hosts: set[str] | None) -> None:
    """403 unless the Host (and a browser's Origin) name this server: DNS rebinding protection."""
    if hosts is None:
        return
    h = _host_of(request.headers.get("host", ""))
    if h not in hosts:
        raise HttpError(403, "host", f"host {h or '(none)'!r} is not served here (DNS rebinding protection)")
    origin = request.headers.get("origin")
    try:
        name = urlsplit(origin).hostname or "" if origin and origin != "null" else None
    except ValueError:  # 'http://[::1': urllib's "Invalid IPv6 URL"
        raise HttpError(400, "origin", f"origin {origin!r} is not a URL (write scheme://host[:port])") from None
    if name is not None and name not in hosts:
        raise HttpError(403, "origin", f"origin {origin!r} is not served here")


def authenticate(request: Request, tokens: dict[str, Caller]) -> Caller | None:
    """The caller the request's bearer token stands for (None: no tokens, or none matched); 401 for
    ``/v1/*`` and ``/metrics`` without a valid token."""
    if not tokens:
        return None
    got = request.headers.get("authorization", "")
    scheme, _, token = got.partition(" ")
    match = None
    if scheme.lower() == "bearer" and token:
        for known, caller in tokens.items():  # compare with every token: the time says nothing
            if hmac.compare_digest(known.encode(), token.strip().encode()):
                match = caller
    # /metrics too: request and decision counts and the store's generation are the operator's
    if match is None and (request.url.path.startswith("/v1/") or request.url.path == "/metrics"):
        raise HttpError(401, "unauthorized", "this server needs Authorization: Bearer TOKEN"
                        if not got else "the bearer token is not valid", headers={"WWW-Authenticate": "Bearer"})
    return match


async def guard(request: Request, call_next):
    """Every request, a route's or not: host and origin checked, the caller found from the token,
    every failure a JSON answer, the answer counted. A middleware, not a router dependency: it
    must cover the paths no route matches (a 404 or 405 must not bypass it)."""
    service, settings = request.app.state.service, request.app.state.settings
    endpoint = _endpoint(request.url.path)
    try:
        check_host(request, settings.hosts)
        request.state.caller = authenticate(request, settings.tokens)
        response = await call_next(request)
    except BaseException as exc:  # noqa: BLE001 - every failure is a JSON answer
        if isinstance(exc, (KeyboardInterrupt, SystemExit, asyncio.CancelledError)):
            raise
        response = error_of(exc)
    service.metrics.count(endpoint, response.status_code)
    return response


async def not_found(request: Request, exc):
    return error(404, "not_found", f"no endpoint {request.method} {request.url.path}")


async def not_allowed(request: Request, exc):
    return error(405, "method_not_allowed", f"{request.method} is not allowed on {request.url.path}")


# ---- the routes ---------------------------------------------------------------------------------
router = APIRouter()


def with_source(service: Service, answer, context: bool) -> dict:
    d = answer.to_dict()
    if not context:
        d.pop("context", None)
    # the contract that answered, not the one in force now (an edit may have been swapped in since)
    d["contract"] = (getattr(answer, "trace", None) or {}).get("contract_source") or service.contract_source()
    return d


@router.post("/v1/retrieve")
async def retrieve(body: Annotated[RetrieveBody, Depends(retrieve_body)], service: ServiceDep,
                   settings: SettingsDep, caller: CallerDep):
    answer = await work(settings, lambda: service.retrieve(body.question, caller=caller, filters=body.filters,
                                                           tags=body.tags, top_k=body.top_k, mode=body.mode))
    return JSONResponse({**with_source(service, answer, body.context), "index": service.freshness(caller)})


def _answer_batch(service: Service, body: BatchBody, caller: Caller) -> list:
    """The batch's answers in its order; questions with the same filters and tags are retrieved together."""
    groups: dict[tuple, list[int]] = {}
    for i, q in enumerate(body.questions):
        groups.setdefault((tuple(q.filters), tuple(q.tags)), []).append(i)
    answers: list = [None] * len(body.questions)
    for (filters, qtags), idx in groups.items():
        got = service.retrieve([body.questions[i].question for i in idx], caller=caller, filters=filters,
                               tags=qtags, top_k=body.top_k, mode=body.mode)
        for i, a in zip(idx, got):
            answers[i] = a
    return answers


@router.post("/v1/retrieve/batch")
async def retrieve_batch(body: Annotated[BatchBody, Depends(batch_body)], service: ServiceDep,
                         settings: SettingsDep, caller: CallerDep):
    answers = await work(settings, lambda: _answer_batch(service, body, caller))
    out = []
    for q, a in zip(body.questions, answers):
        out.append({**({"id": q.id} if q.id is not None else {}), **with_source(service, a, body.context)})
    return JSONResponse({"answers": out, "index": service.freshness(caller)})


@router.get("/v1/documents/{doc_id:path}")
async def document(doc_id: str, service: ServiceDep, settings: SettingsDep, caller: CallerDep,
                   lines: str | None = None):
    return JSONResponse(await work(settings, lambda: service.document_span(doc_id, lines, caller=caller)))


@router.get("/v1/contract")
async def contract(service: ServiceDep, caller: CallerDep):
    c = service.contract
    return JSONResponse({**service.contract_source(c), "overrides": service.overrides,
                         "error": service.contract_error, "contract": service.contract_view(caller, c)})


def _health_of(service: Service, caller: Caller) -> dict:
    try:  # the counts the caller may read, never the whole store's
        return service.health(caller)
    except AccessError:  # the contract requires a principal and none is given: alive or not
        return {"status": service.health()["status"]}


@router.get("/healthz")
async def healthz(request: Request, service: ServiceDep, settings: SettingsDep):
    caller = request.state.caller if settings.tokens else settings.default_caller
    if caller is None:  # no token: alive or not, nothing about the store
        return JSONResponse({"status": (await work(settings, service.health, limited=False))["status"]})
    health = await work(settings, lambda: _health_of(service, caller), limited=False)  # a probe answers while retrievals queue
    return JSONResponse(health, status_code=200)


@router.get("/metrics")
async def metrics(service: ServiceDep):
    extra = {"uptime_seconds": round(service.uptime(), 1), "store_generation": service.store.generation(),
             "swaps_total": service.swaps}
    return PlainTextResponse(service.metrics.text(extra), media_type="text/plain; version=0.0.4")


# ---- the app ------------------------------------------------------------------------------------
def create_app(service: Service, tokens: dict[str, Caller] | None = None, *, default_caller: Caller | None = None,
               max_body: int = MAX_BODY, max_concurrency: int = 8, timeout: float = 30.0, max_batch: int = MAX_BATCH,
               host: str = "127.0.0.1", allowed_hosts: list[str] | None = None) -> FastAPI:
    """The FastAPI app over ``service``. ``host`` is the address the server binds: on a loopback
    address only requests naming a loopback host (and, from a browser, a loopback origin) are
    served — a DNS-rebinding page cannot reach it. ``allowed_hosts`` widens that list."""
    hosts = None
    if host in LOOPBACK or allowed_hosts:
        hosts = set(allowed_hosts or []) | (set(LOOPBACK) if host in LOOPBACK else {host})
    app = FastAPI(title="kbtool", version=__version__, docs_url=None, redoc_url=None, openapi_url=None)
    retrieve_body, batch_body = bodies(service.max_top_k, max_batch)
    app.state.service = service
    app.state.settings = Settings(tokens=dict(tokens or {}), default_caller=default_caller or Caller(), hosts=hosts,
                                  max_body=max_body, timeout=timeout,
                                  slots=asyncio.Semaphore(max_concurrency) if max_concurrency else None,
                                  retrieve_body=retrieve_body, batch_body=batch_body)
    app.middleware("http")(guard)
    app.add_exception_handler(404, not_found)
    app.add_exception_handler(405, not_allowed)
    app.include_router(router)
    return app
