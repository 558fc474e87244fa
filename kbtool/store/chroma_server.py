"""Vectors on a Chroma server (``chroma run``): the engine teams deploy.

A store created with a server URL records it in its manifest (``vectors``: engine, url, tenant,
database, collection prefix); the catalog, BM25 and the embedding cache stay in the store folder.
``ChromaServerVectors`` is ``ChromaVectors`` with another client (``chromadb.HttpClient``): search,
upsert, delete and verify are the one implementation of ``vectors.py``. What differs is here: how
the client is made, what a server's failures mean (a one-line ``StoreError`` naming the URL and
the fix), and that a server needs no per-process cache cleared to see other processes' writes.

Credentials come from the environment only, never the manifest: ``KBTOOL_CHROMA_TOKEN`` (Chroma's
token auth; ``KBTOOL_CHROMA_TOKEN_HEADER`` = ``Authorization`` (default, as a bearer token) or
``X-Chroma-Token``), and chromadb's own ``CHROMA_*`` client settings (``CHROMA_SERVER_HEADERS`` as
a JSON object, ``CHROMA_CLIENT_AUTH_PROVIDER`` / ``CHROMA_CLIENT_AUTH_CREDENTIALS``,
``CHROMA_SERVER_SSL_VERIFY``).
"""

from __future__ import annotations

import json
import os
import re
from typing import Sequence
from urllib.parse import urlsplit

from ..errors import StoreError, UsageError
from .vectors import ChromaVectors, collection_name

ENGINE = "chroma-server"
DEFAULT_TENANT = "default_tenant"  # chromadb.config.DEFAULT_TENANT / DEFAULT_DATABASE (not imported:
DEFAULT_DATABASE = "default_database"  # reading a manifest must not import chromadb)
DEFAULT_PORT = 8000  # `chroma run`'s
TOKEN_ENV = "KBTOOL_CHROMA_TOKEN"
TOKEN_HEADER_ENV = "KBTOOL_CHROMA_TOKEN_HEADER"
# Seconds a request to the server may take (chromadb's client waits forever): a server that accepts
# connections but never answers (hung, a stopped VM behind a proxy) fails the command with one line.
TIMEOUT_ENV = "KBTOOL_CHROMA_TIMEOUT"
DEFAULT_TIMEOUT = 120.0
CONNECT_TIMEOUT = 10.0  # to connect, and for the first heartbeat (at most $KBTOOL_CHROMA_TIMEOUT)
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,198}[A-Za-z0-9])?")


def _redacted(url: str) -> str:
    """``url`` as an error may show it: a user:password, a query (``?token=``) and a fragment hidden."""
    return re.sub(r"[?#].*", "?…", re.sub(r"//[^/?#]*@", "//…@", url), flags=re.S)


def parse_url(url: str) -> tuple[str, str, int, bool]:
    """(normalised URL, host, port, ssl) of ``http[s]://HOST[:PORT]``; UsageError otherwise."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise UsageError(f"chroma url {_redacted(url)!r}: {exc}; write http://HOST:PORT, e.g. http://127.0.0.1:8000") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") \
            or parts.query or parts.fragment or parts.username or parts.password:
        raise UsageError(f"chroma url {_redacted(url)!r}: write http://HOST:PORT (or https://), e.g. http://127.0.0.1:8000 "
                         "(no path; credentials come from $KBTOOL_CHROMA_TOKEN, never the URL)")
    ssl = parts.scheme == "https"
    port = port or (443 if ssl else DEFAULT_PORT)
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{shown}:{port}", host, port, ssl


def _name(value: str, what: str) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise UsageError(f"chroma {what} {value!r}: use letters, digits, '.', '_' and '-' (at most 200), "
                         "starting and ending with a letter or digit")
    return value


def server_record(url: str, tenant: str | None = None, database: str | None = None,
                  collection: str | None = None) -> dict:
    """The manifest's ``vectors`` record of a new store on the server at ``url``. ``collection`` is the
    prefix of the store's collections (``PREFIX-chunks``, ``PREFIX-chunks-NAME`` per added model);
    by default one unique to the store, so stores can share a server, tenant and database."""
    import uuid

    normalised = parse_url(url)[0]
    return {"engine": ENGINE, "url": normalised,
            "tenant": _name(tenant, "tenant") if tenant else DEFAULT_TENANT,
            "database": _name(database, "database") if database else DEFAULT_DATABASE,
            "collection": _name(collection, "collection prefix") if collection else f"kb-{uuid.uuid4().hex[:16]}"}


def check_record(rec, where) -> None:
    """A manifest's ``vectors`` record of a server: url, tenant, database, collection (strings)."""
    lacks = [k for k in ("url", "tenant", "database", "collection") if not isinstance(rec.get(k), str)]
    if lacks:
        raise StoreError(f"{where}: vectors lacks {', '.join(lacks)}: the store's manifest is damaged (the vectors "
                         "are on a Chroma server; write its record back, or re-ingest into a new store)")


def collection_for(rec: dict, retriever: str = "dense") -> str:
    """The server collection of dense retriever ``retriever``: ``PREFIX-chunks`` / ``PREFIX-chunks-NAME``."""
    return f"{rec['collection']}-{collection_name(retriever)}"


def describe(rec: dict, retrievers: Sequence[str] = ("dense",)) -> dict:
    """What status and doctor show of the engine (no credentials: the manifest holds none)."""
    return {"engine": ENGINE, "url": rec["url"], "tenant": rec["tenant"], "database": rec["database"],
            "collections": {r: collection_for(rec, r) for r in retrievers},
            "auth": "token from $" + TOKEN_ENV if os.environ.get(TOKEN_ENV) else None}


def start_hint(rec: dict) -> str:
    _, host, port, _ = parse_url(rec["url"])
    return f"`chroma run --path DIR --host {host} --port {port}`"


def server_error(exc: BaseException, rec: dict) -> StoreError | None:
    """The one-line StoreError a chromadb / httpx failure against the server stands for, or None."""
    import httpx

    if isinstance(exc, StoreError):
        return exc
    url, text = rec["url"], str(exc)
    name = type(exc).__name__
    down = (f"start it ({start_hint(rec)}; `kbtool status` shows the URL the store records), then run the "
            "command again: the catalog and the embedding cache keep what was done")
    if isinstance(exc, httpx.TimeoutException):
        return timeout_error(exc, rec, timeout_of(exc))
    if isinstance(exc, httpx.TransportError) or (isinstance(exc, ValueError) and "Could not connect to a Chroma server" in text):
        why = "connection refused" if isinstance(exc, ValueError) or "refused" in text.lower() else (text or name)
        return StoreError(f"the Chroma server at {url} is not reachable ({why}): {down}")
    if name in ("ChromaAuthError", "AuthorizationError") or any(
            w in text.lower() for w in ("unauthorized", "forbidden", "permission denied", "not authenticated")):
        told = (f"${TOKEN_ENV} was refused" if os.environ.get(TOKEN_ENV)
                else f"it asks for credentials: set ${TOKEN_ENV} (Chroma token auth)")
        return StoreError(f"the Chroma server at {url} refused access ({_short(text) or name}): {told}")
    if name == "NotFoundError" and text.startswith("Tenant"):
        return StoreError(f"the Chroma server at {url} has no tenant {rec['tenant']!r}: create it on the server "
                          "(chromadb's AdminClient.create_tenant), or name an existing tenant")
    if name == "NotFoundError" and text.startswith("Database"):
        return StoreError(f"the Chroma server at {url} has no database {rec['database']!r} in tenant "
                          f"{rec['tenant']!r}: create it on the server (chromadb's AdminClient.create_database), "
                          "or name an existing database")
    if isinstance(exc, ValueError) and "Could not connect to tenant" in text:
        return StoreError(f"the Chroma server at {url} does not let this client read tenant {rec['tenant']!r} "
                          f"(missing, or credentials needed: ${TOKEN_ENV}): check the tenant and the credentials")
    if isinstance(exc, ValueError) and _looks_like_markup(text):  # chromadb raises the HTML page it got
        return not_chroma_error(rec, "an HTML page", "a Chroma request")
    if type(exc) is Exception:  # chromadb's error for an answer that is not Chroma's (another server on the port)
        return StoreError(f"{url} answered a Chroma request with an error ({_short(text)}): is it a Chroma 1.x "
                          f"server? Start one with {start_hint(rec)}")
    return None


def timeout_of(exc: BaseException) -> float:
    """The seconds that ran out: the connect limit for a connection never accepted, else the request's."""
    import httpx

    limit = timeout()
    return min(CONNECT_TIMEOUT, limit) if isinstance(exc, httpx.ConnectTimeout) else limit


def timeout_error(exc: BaseException, rec: dict, seconds: float, what: str = "") -> StoreError:
    """The server did not answer within ``seconds`` — the limit that applied, named as it is set."""
    limit = timeout()
    fix = (f" or raise ${TIMEOUT_ENV} (now {limit:g} s)" if seconds >= limit else
           f" (a live server connects and answers a heartbeat within {seconds:g} s, whatever ${TIMEOUT_ENV} says)")
    return StoreError(f"the Chroma server at {rec['url']} did not answer{' ' + what if what else ''} within "
                      f"{seconds:g} s ({type(exc).__name__}): is it hung or overloaded? Restart it "
                      f"({start_hint(rec)}){fix}; the catalog and the embedding cache keep what was done")


def not_chroma_error(rec: dict, got: str, asked: str = "its heartbeat /api/v2/heartbeat") -> StoreError:
    return StoreError(f"{rec['url']} answers, but not as a Chroma server ({asked} gave {got}): "
                      f"is it the URL of another service? Point the store at a Chroma 1.x server (start one with "
                      f"{start_hint(rec)}; `kbtool status` shows the URL the store records)")


def _looks_like_markup(text: str) -> bool:
    head = text.lstrip()[:200].lower()
    return head.startswith("<") and any(w in head for w in ("<!doctype", "<html", "<head", "<body", "<?xml", "<h1"))


def check_heartbeat(response, rec: dict) -> None:
    """StoreError unless ``response`` is a Chroma 1.x heartbeat (JSON ``{"nanosecond heartbeat": N}``),
    or a refusal the client's next request will name (401/403: credentials)."""
    if response.status_code in (401, 403):
        return
    ctype = response.headers.get("content-type", "").split(";")[0].strip() or "no content type"
    got = f"HTTP {response.status_code}, {ctype}"
    try:
        body = response.json()
    except ValueError:
        raise not_chroma_error(rec, got + (", an HTML page" if _looks_like_markup(response.text) else "")) from None
    if response.status_code >= 500 and response.status_code != 501:  # JSON: perhaps Chroma failing; the client says
        return
    if response.status_code != 200 or not isinstance(body, dict) or "nanosecond heartbeat" not in body:
        raise not_chroma_error(rec, got + f": {_short(json.dumps(body))[:80]}")  # 404: a Chroma 0.x, another API


def _short(text: str) -> str:
    return " ".join(text.split())[:160]


def client_settings():
    """chromadb ``Settings`` for a server client, with credentials from the environment (never a file
    of the store; chromadb's ``.env`` file lookup off), and the headers to send."""
    from chromadb.config import Settings

    extra: dict = {}
    token = os.environ.get(TOKEN_ENV)
    if token:
        extra["chroma_client_auth_provider"] = "chromadb.auth.token_authn.TokenAuthClientProvider"
        extra["chroma_client_auth_credentials"] = token
        if os.environ.get(TOKEN_HEADER_ENV):
            extra["chroma_auth_token_transport_header"] = os.environ[TOKEN_HEADER_ENV]
    settings = Settings(_env_file=None, anonymized_telemetry=False, **extra)
    # The URL comes from the store; chromadb refuses a host or port from the environment that differs.
    settings.chroma_server_host, settings.chroma_server_http_port = None, None
    return settings, settings.chroma_server_headers


def connect(rec: dict):
    """An ``HttpClient`` for the record's server, tenant and database; StoreError if it cannot be had."""
    from .._env import setup_offline_env

    setup_offline_env()
    from .vectors import import_chromadb, settings_error

    chromadb = import_chromadb()
    _, host, port, ssl = parse_url(rec["url"])
    try:
        settings, headers = client_settings()
    except ValueError as exc:  # a setting from the environment chromadb refuses (never echoes a token)
        raise settings_error(exc) from None
    import httpx

    limit = timeout()
    beat = min(CONNECT_TIMEOUT, limit)
    try:
        # The client's constructor already asks the server (tenant, database) with no timeout: a
        # heartbeat with one first, so a server that never answers — or is not Chroma — fails here.
        try:
            check_heartbeat(httpx.get(rec["url"].rstrip("/") + "/api/v2/heartbeat", timeout=beat, headers=headers or {},
                                      verify=settings.chroma_server_ssl_verify
                                      if settings.chroma_server_ssl_verify is not None else True), rec)
        except httpx.TimeoutException as exc:
            raise timeout_error(exc, rec, beat, "a heartbeat") from None
        client = chromadb.HttpClient(host=host, port=port, ssl=ssl, headers=headers, settings=settings,
                                     tenant=rec["tenant"], database=rec["database"])
    except Exception as exc:
        known = server_error(exc, rec)
        if known is None:
            raise
        raise known from None
    session = getattr(getattr(client, "_server", None), "_session", None)
    if isinstance(session, httpx.Client):  # chromadb 1.x: an httpx.Client made with timeout=None
        session.timeout = httpx.Timeout(limit, connect=beat)
    return client


def timeout() -> float:
    try:
        value = float(os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT)
    except ValueError:
        raise UsageError(f"${TIMEOUT_ENV}={os.environ.get(TIMEOUT_ENV)!r} is not a number of seconds") from None
    if not 0 < value < 1e6:  # nan, inf: httpx fails on them (ValueError, OverflowError)
        raise UsageError(f"${TIMEOUT_ENV} must be a positive number of seconds (below 1000000)")
    return value


def check_new(rec: dict) -> None:
    """Before a store is created on the server: it answers, and the store's collection is free (a
    collection holding vectors is another store's — the new one would take them for its own)."""
    client = connect(rec)
    name = collection_for(rec)
    try:
        count = client.get_collection(name).count()
    except Exception as exc:
        if type(exc).__name__ == "NotFoundError" and str(exc).startswith("Collection"):
            return
        raise (server_error(exc, rec) or exc) from None
    if count:
        raise UsageError(f"collection {name!r} on the Chroma server at {rec['url']} already holds {count} vectors "
                         "(another store's?): choose another collection prefix, or drop it on the server")


class ChromaServerVectors(ChromaVectors):
    """The collection of one dense retriever on a Chroma server. Behaves as ``ChromaVectors`` (the
    same methods, the same code); a failure to reach or use the server is a one-line StoreError."""

    def __init__(self, rec: dict, hnsw: dict, retriever: str = "dense"):
        super().__init__(None, hnsw, collection_for(rec, retriever))  # type: ignore[arg-type]
        self.rec = dict(rec)

    def exists(self) -> bool:
        """True: the server is the truth and is asked when used (status stays offline; doctor asks)."""
        return True

    def _connect(self):
        if self._client is not None:  # a server client stays good (a dropped collection is looked up afresh)
            return self._client
        return connect(self.rec)

    def _failed(self) -> None:
        pass  # HttpClients share no per-path cache (each gets its own system)

    def _on(self, op):
        try:
            return super()._on(op)
        except Exception as exc:
            known = server_error(exc, self.rec)
            if known is None:
                raise
            raise known from None

    def drop(self) -> None:
        """Delete the collection on the server (none there: nothing to do)."""
        try:
            with self._lock:
                client = self._client = self._connect()
                try:
                    client.delete_collection(self.name)
                except Exception as exc:
                    if type(exc).__name__ != "NotFoundError" or not str(exc).startswith("Collection"):
                        raise
                self._collection = None
        except Exception as exc:
            known = server_error(exc, self.rec)
            if known is None:
                raise
            raise known from None
