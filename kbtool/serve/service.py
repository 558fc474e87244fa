"""One warm kbtool behind a server: the store, the contract and the embedding model loaded once and
shared by every request thread; the HTTP app (``serve/http.py``) and the MCP server
(``serve/mcp.py``) are thin layers over it, and answer through ``kbtool.query.pipeline.retrieve``
like ``kbtool query``.

Live state (``reload.LiveState``): a re-ingested store or an edited contract is swapped in between
requests, and each request answers from one generation of them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..errors import AccessError, InputError, UsageError
from .metrics import Metrics
from .reload import LiveState

TEXT_TYPES = {"md", "markdown", "txt", "text", "csv", "html", "htm"}  # a cited span is read from the file


class DocumentNotFound(InputError):
    """No such document in the store, or none the caller may read (HTTP 404)."""


@dataclass
class Caller:
    """Who asks: a principal of the contract (``access.principals``) and/or permission tags. The
    server sets it from the request's bearer token; a request body never does."""

    principal: str | None = None
    allow: list[str] = field(default_factory=list)
    name: str = "anonymous"  # for the trace and metrics


class Service(LiveState):
    """``Service(store_path, contract_path)``: warm state for a server (``LiveState``) and the
    requests it answers, counted in ``metrics``. Thread-safe."""

    def __init__(self, store_path: str | Path | None = None, contract_path: str | Path | None = None,
                 overrides: Sequence[str] = (), *, check_every: float = 0.5, max_top_k: int = 50):
        self.max_top_k = max_top_k
        self.metrics = Metrics()
        self.started = time.time()
        self.sources_changed: float | None = None  # set by --watch: when source files changed, not yet ingested
        self.watch_error: str | None = None
        super().__init__(store_path, contract_path, overrides, check_every=check_every)

    # ---- requests ------------------------------------------------------------------------
    def retrieve(self, questions: str | list[str], *, caller: Caller | None = None, filters: Sequence[str] = (),
                 tags: Sequence[str] = (), top_k: int | None = None, mode: str = "contract"):
        """``Answer`` (or a list) exactly as ``kbtool query`` gives it, plus the index freshness."""
        from ..query.pipeline import retrieve
        from ..query.retriever import contract_for_mode

        caller = caller or Caller()
        if top_k is not None and not 1 <= top_k <= self.max_top_k:
            raise UsageError(f"top_k must be between 1 and {self.max_top_k}")
        t0 = time.perf_counter()
        with self.state() as (store, contract, embedder):
            c = contract_for_mode(contract, mode)
            got = retrieve(store, c, questions, filters=list(filters), principal=caller.principal,
                           allow=caller.allow or None, tags=list(tags), top_k=top_k, embedder=embedder)
            source = self.contract_source(contract)
        for a in ([got] if not isinstance(got, list) else got):
            a.trace["contract_source"] = source  # which contract answered: a swap may follow at once
        self.metrics.observe("retrieve", time.perf_counter() - t0)
        for a in ([got] if not isinstance(got, list) else got):
            self.metrics.decided(a.decision)
            for stage, ms in (a.trace.get("timings_ms") or {}).items():  # dense_ms, bm25_ms, fuse_decide_ms, ...
                self.metrics.observe(stage.removesuffix("_ms"), ms / 1000)
        return got

    def freshness(self, caller: Caller | None = None) -> dict:
        """How current the answers are: the catalog generation the indexes hold, whether they hold
        the newest one, when the store was last ingested, whether a writer is at work; for a
        restricted ``caller`` only whether the indexes are current (the rest is others' activity)."""
        served = self.freshness_of()
        restricted = caller is not None and bool(caller.principal or caller.allow or self.contract.access.require_principal)
        if restricted:  # whether its answers are current; nothing of others' write activity
            return {"generation": None, "indexes_current": served["indexes_current"], "last_ingest": None,
                    "writer_active": None}
        out = {**served, "last_ingest": self.store.manifest.get("last_ingest"), "writer_active": self._live.writer_active()}
        if self.sources_changed:  # --watch saw files change that are not in the index yet
            out["sources_changed_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.sources_changed))
        if self.watch_error:
            out["watch_error"] = self.watch_error
        return out

    def document_span(self, doc_id: str, lines: str | None = None, *, caller: Caller | None = None) -> dict:
        """The text of a document (a cited span ``a-b`` of its source lines), for a caller allowed to
        read it. Read from the ingested file, inside its root, when it holds what was ingested;
        else (``changed_since_ingest``) the text as parsed at ingest."""
        from ..access import visible_documents

        caller = caller or Caller()
        with self.state() as (store, contract, _):
            allowed = visible_documents(store, contract, caller.principal, caller.allow or None)
            info = store.document_info(doc_id)
            if info is None or (allowed is not None and doc_id not in allowed):
                raise DocumentNotFound(f"no document {doc_id!r} in the store")  # never say it exists to one who may not read it
        first, last = _line_range(lines)
        path = Path(info["path"])
        root = Path(info["root"]) if not str(info["root"]).startswith("beir:") else None
        text, changed = None, None
        if (root is not None and info["filetype"] in TEXT_TYPES and path.is_file()
                and path.resolve().is_relative_to(root.resolve())):
            import hashlib

            data = path.read_bytes()
            changed = hashlib.sha256(data).hexdigest() != info["sha256"]
            if not changed:  # the bytes ingest read, access decided on: never what a path holds since
                text = data.decode("utf-8", errors="replace").replace("\r\n", "\n")  # (an edit not vetted by
                # ingest — new text, a new access tag —, a root or file swapped for a link, a hard link)
        if text is None:  # a PDF/DOCX/BEIR record, a file gone or changed since ingest: the parsed text
            text, changed = info["text"], changed or None
            source = "parsed"
        else:
            source = "file"
        # The same rules as every answer (postprocess.sensitive), over the whole text with its line
        # breaks: a secret spread over lines is one secret, and the line numbers stay the file's.
        withheld = None
        rules = contract.postprocess.sensitive.rules()
        if rules.active:
            from ..sensitive import redact_lines

            text, withheld, _ = redact_lines(text, rules)
        all_lines = text.split("\n")
        if first is not None and first > len(all_lines):  # not the last line instead, as if asked for
            raise UsageError(f"lines {lines!r}: {doc_id} has {len(all_lines)} lines")
        last = min(last or len(all_lines), len(all_lines))
        first = max(1, min(first or 1, last))
        out = {"doc_id": doc_id, "lines": [first, last], "total_lines": len(all_lines), "source": source,
               "changed_since_ingest": changed, "title": info["title"],
               "text": "\n".join(all_lines[first - 1:last])}
        if withheld is not None:  # a category that drops results: its document's text is not shown either
            out.update(text="", withheld=withheld)
        return out

    def contract_source(self, contract=None) -> dict:
        """Which contract is in force, as ``kbtool query --json`` says it: {"path" (None: the
        built-in one), "version", "calibrated" (the date `kbtool calibrate --write` recorded)}."""
        from ..contract import contract_source

        return contract_source(self.contract_path, contract or self.contract)

    def contract_view(self, caller: Caller | None = None, contract=None) -> dict:
        """The contract in force as ``caller`` may see it: for a restricted caller, only its own
        principal under ``access.principals`` and only the ``data.sources`` whose metadata it may
        read — the others' folders and tags say which restricted documents exist."""
        from ..access import access_tags, visibility

        c = contract or self.contract
        out = c.to_dict()
        caller = caller or Caller()
        tags = access_tags(c, caller.principal, caller.allow or None)
        if tags is not None:
            visible = visibility(c, tags)
            out["access"]["principals"] = {p: t for p, t in out["access"]["principals"].items() if p == caller.principal}
            out["data"]["sources"] = [src for src in out["data"]["sources"] if visible(src.get("meta") or {})]
        return out

    def uptime(self) -> float:
        return time.time() - self.started

    def health(self, caller: Caller | None = None) -> dict:
        """The server's state. With a ``caller``, the documents and chunks that caller may read (and
        its tags): a restricted caller never learns how many documents it may not read."""
        from ..access import restricted_status
        from .. import __version__

        with self.state() as (store, contract, _):
            if caller is None:
                status = store.status()
            else:
                status = restricted_status(store, contract, caller.principal, caller.allow or None)
        fresh = self.freshness(caller)
        return {"status": "ok" if fresh["indexes_current"] and not self.contract_error else "degraded",
                "store": str(store.path), "documents": status["documents"], "chunks": status["chunks"],
                "index": fresh, "contract": {
                    "path": None if self.contract_path is None else str(self.contract_path),
                    "version": contract.contract_version, "error": self.contract_error},
                "model": store.embedding_spec().model,
                # every dense retriever (a mode of its own) and its model, e.g. dense:use-m -> use-m
                "models": {name: store.embedding_spec(name).model for name in store.dense_retrievers()},
                "modes": ["contract", "hybrid", "bm25", *store.dense_retrievers()],
                "uptime_s": round(time.time() - self.started, 1),
                **({} if status.get("access") is not None else {"swaps": self.swaps}), "kbtool_version": __version__,
                **({"access": status["access"]} if status.get("access") is not None else {})}


def _line_range(lines: str | None) -> tuple[int | None, int | None]:
    if not lines:
        return None, None
    a, sep, b = lines.partition("-")
    try:
        first = int(a)
        last = int(b) if sep else first
    except ValueError:
        raise UsageError(f"lines {lines!r}: write A-B, e.g. 12-30") from None
    if first < 1 or last < first:
        raise UsageError(f"lines {lines!r}: A-B with 1 <= A <= B")
    return first, last


__all__ = ["Service", "Caller", "AccessError", "DocumentNotFound"]
