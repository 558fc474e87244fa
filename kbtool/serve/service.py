"""One warm kbtool behind a server: the store, the contract and the embedding model loaded once and
shared by every request thread; the HTTP app (``serve/http.py``) and the MCP server
(``serve/mcp.py``) are thin layers over it, and answer through ``kbtool.query.pipeline.retrieve``
like ``kbtool query``.

Live state: before a request the service checks (at most every ``check_every`` seconds) whether
another process changed the store (a new catalog generation or a finished index) or the contract
file. A new contract is loaded and swapped in; a broken one is refused — the error is logged and
shown by ``health()`` — and the old one keeps serving. A store change re-opens the vector indexes:
Chroma keeps a process's HNSW index in memory, blind to another process's writes, so without it a
server would miss new chunks. The swap waits for the requests in flight (a few milliseconds) and
holds new ones back meanwhile: no request fails, none sees half a state.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..errors import AccessError, InputError, UsageError

log = logging.getLogger("kbtool.serve")
TEXT_TYPES = {"md", "markdown", "txt", "text", "csv", "html", "htm"}  # a cited span is read from the file


class _Gate:
    """Readers share; a swap waits for the readers in flight and holds new ones back."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._swapping = False

    @contextmanager
    def read(self):
        with self._cond:
            while self._swapping:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def swap(self):
        with self._cond:
            while self._swapping:
                self._cond.wait()
            self._swapping = True
            while self._readers:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._swapping = False
                self._cond.notify_all()


class DocumentNotFound(InputError):
    """No such document in the store, or none the caller may read (HTTP 404)."""


@dataclass
class Caller:
    """Who asks: a principal of the contract (``access.principals``) and/or permission tags. The
    server sets it from the request's bearer token; a request body never does."""

    principal: str | None = None
    allow: list[str] = field(default_factory=list)
    name: str = "anonymous"  # for the trace and metrics


@dataclass
class Metrics:
    """Counters for ``GET /metrics`` (Prometheus text)."""

    requests: dict = field(default_factory=dict)  # (endpoint, status) -> n
    decisions: dict = field(default_factory=dict)  # decision -> n
    latency: dict = field(default_factory=dict)  # stage -> [count, sum seconds, buckets]
    lock: threading.Lock = field(default_factory=threading.Lock)

    BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

    def count(self, endpoint: str, status: int) -> None:
        with self.lock:
            key = (endpoint, status)
            self.requests[key] = self.requests.get(key, 0) + 1

    def decided(self, decision: str) -> None:
        with self.lock:
            self.decisions[decision] = self.decisions.get(decision, 0) + 1

    def observe(self, stage: str, seconds: float) -> None:
        with self.lock:
            rec = self.latency.setdefault(stage, [0, 0.0, [0] * len(self.BUCKETS)])
            rec[0] += 1
            rec[1] += seconds
            for i, b in enumerate(self.BUCKETS):
                if seconds <= b:
                    rec[2][i] += 1

    def text(self, extra: dict[str, float]) -> str:
        lines = ["# HELP kbtool_requests_total Requests by endpoint and HTTP status.",
                 "# TYPE kbtool_requests_total counter"]
        with self.lock:
            for (ep, st), n in sorted(self.requests.items()):
                lines.append(f'kbtool_requests_total{{endpoint="{ep}",status="{st}"}} {n}')
            lines += ["# HELP kbtool_decisions_total Answers by decision (answer, low_confidence, refuse).",
                      "# TYPE kbtool_decisions_total counter"]
            for d, n in sorted(self.decisions.items()):
                lines.append(f'kbtool_decisions_total{{decision="{d}"}} {n}')
            lines += ["# HELP kbtool_stage_seconds Time per stage of a request.",
                      "# TYPE kbtool_stage_seconds histogram"]
            for stage, (n, total, buckets) in sorted(self.latency.items()):
                for b, c in zip(self.BUCKETS, buckets):
                    lines.append(f'kbtool_stage_seconds_bucket{{stage="{stage}",le="{b}"}} {c}')
                lines.append(f'kbtool_stage_seconds_bucket{{stage="{stage}",le="+Inf"}} {n}')
                lines.append(f'kbtool_stage_seconds_sum{{stage="{stage}"}} {total:.6f}')
                lines.append(f'kbtool_stage_seconds_count{{stage="{stage}"}} {n}')
        for name, value in extra.items():
            lines += [f"# TYPE kbtool_{name} gauge", f"kbtool_{name} {value}"]
        return "\n".join(lines) + "\n"


class Service:
    """``Service(store_path, contract_path)``: warm state for a server. Thread-safe."""

    def __init__(self, store_path: str | Path | None = None, contract_path: str | Path | None = None,
                 overrides: Sequence[str] = (), *, check_every: float = 0.5, max_top_k: int = 50):
        from ..contract import find_contract
        from ..store import Store

        self.store = Store.open(store_path)
        self.store.require_indexed()
        self.contract_path = find_contract(contract_path)
        self.overrides = list(overrides)
        self.check_every = check_every
        self.max_top_k = max_top_k
        self.metrics = Metrics()
        self.started = time.time()
        self.contract_error: str | None = None
        self._gate = _Gate()
        self._checked = 0.0
        self._check_lock = threading.Lock()
        self._contract_files = [self.contract_path]  # the contract, then the lexicon it names
        stamp = self._contract_stamps()
        self.contract, self.contract_version_loaded_at = self._load_contract(), time.time()
        self._watch_contract_files(self.contract, stamp)
        self._store_stamp = self._store_state()
        self.embedder = self._load_embedder()
        self.swaps = 0
        self.sources_changed: float | None = None  # set by --watch: when source files changed, not yet ingested
        self.watch_error: str | None = None
        self._warm_up()

    def _warm_up(self) -> None:
        """One question through the whole pipeline before the first request: the tokenizers, the
        BM25 index, the word lists and the model's first call are paid for here."""
        from ..query.pipeline import retrieve

        for q in ("warm up the retrieval pipeline", "预热检索"):
            try:
                retrieve(self.store, self.contract, q, embedder=self.embedder, top_k=1)
            except Exception:  # e.g. a contract that requires a principal: the first request pays
                break

    # ---- loading -------------------------------------------------------------------------
    def _load_contract(self):
        from ..contract import load_contract

        return load_contract(self.contract_path, self.overrides, search=False)

    def _load_embedder(self):
        from ..embed import load_embedder

        embedder = load_embedder(self.store.embedding_spec())
        embedder.embed_queries(["warm up"])  # the model's first call is slow: pay it before the first request
        return embedder

    def _contract_stamps(self) -> tuple:
        return tuple(self._stamp_of(p) for p in self._contract_files)

    def _watch_contract_files(self, contract, stamp: tuple | None) -> None:
        """Watch the contract file and the lexicon ``contract`` names (``None``: a load failed; the
        lexicon the file names now is watched too, so fixing the file it points to reloads):
        editing either reloads the contract. ``stamp``: the stamps taken before that load (a file
        edited while it loaded is then seen as changed)."""
        files = [self.contract_path, *self._contract_files[1:2]]
        lexicon = contract.postprocess.sensitive.lexicon if contract is not None else self._lexicon_named()
        if lexicon:
            files[1:] = [Path(lexicon)]
        elif contract is not None:
            files = files[:1]
        if files != self._contract_files or stamp is None:
            self._contract_files, stamp = files, self._contract_stamps()
        self._contract_stamp = stamp

    def _lexicon_named(self) -> str | None:
        """The lexicon file the contract file (with --set overrides) names, absolute; best effort:
        a file that is no YAML mapping names none."""
        import yaml

        from ..contract import apply_override, lexicon_path

        try:
            data = yaml.safe_load(self.contract_path.read_text(encoding="utf-8")) if self.contract_path else {}
            data = data if isinstance(data, dict) else {}
            for item in self.overrides:
                apply_override(data, item)
            name = ((data.get("postprocess") or {}).get("sensitive") or {}).get("lexicon")
        except Exception:  # noqa: BLE001 - the load's own error is what the service reports
            return None
        if not isinstance(name, str) or not name:
            return None
        return lexicon_path(name, self.contract_path)

    @staticmethod
    def _stamp_of(path: Path | None):
        if path is None:
            return None
        try:
            st = os.stat(path)
            return (st.st_mtime_ns, st.st_size)
        except OSError:
            return ("missing",)

    def _store_state(self):
        """What says another process changed the store: the catalog generation and the manifest."""
        return (self.store.generation(), self._stamp_of(self.store.path / "manifest.json"),
                self._stamp_of(self.store.path / "bm25" / "state.json"))

    # ---- live state ----------------------------------------------------------------------
    def _maybe_refresh(self) -> None:
        now = time.monotonic()
        if now - self._checked < self.check_every or not self._check_lock.acquire(blocking=False):
            return
        try:
            self._checked = now
            contract_stamp = self._contract_stamps()  # the contract file and its lexicon
            if contract_stamp != self._contract_stamp:
                self._contract_stamp = contract_stamp
                try:
                    new = self._load_contract()
                except Exception as exc:  # a broken edit: keep serving the old contract, say so
                    self.contract_error = str(exc)
                    log.error("contract %s not reloaded, the previous one keeps serving: %s", self.contract_path, exc)
                    self._watch_contract_files(None, contract_stamp)
                else:
                    with self._gate.swap():
                        self.contract, self.contract_error = new, None
                        self.contract_version_loaded_at = time.time()
                    self._watch_contract_files(new, contract_stamp)
                    log.info("contract %s reloaded (version %s)", self.contract_path, new.contract_version)
            state = self._store_state()
            if state != self._store_stamp:
                with self._gate.swap():
                    model = self.store.embedding_spec().cache_key
                    self.store.reopen()
                    if self.store.embedding_spec().cache_key != model:
                        self.embedder = self._load_embedder()
                    self._store_stamp = self._store_state()
                    self.swaps += 1
                log.info("store %s changed (generation %s): indexes re-opened", self.store.path, self.store.generation())
        finally:
            self._check_lock.release()

    @contextmanager
    def state(self):
        """(store, contract, embedder) for one request, consistent for its whole length."""
        self._maybe_refresh()
        with self._gate.read():
            yield self.store, self.contract, self.embedder

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
        the newest one, when the store was last ingested (None for a restricted ``caller``: it
        describes the whole store, as ``restricted_status`` has it)."""
        s = self.store
        restricted = caller is not None and bool(caller.principal or caller.allow or self.contract.access.require_principal)
        out = {"generation": s.generation(), "indexes_current": s.is_indexed(),
               "last_ingest": None if restricted else s.manifest.get("last_ingest"), "writer_active": s.writer_active()}
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
        all_lines = text.split("\n")
        if first is not None and first > len(all_lines):  # not the last line instead, as if asked for
            raise UsageError(f"lines {lines!r}: {doc_id} has {len(all_lines)} lines")
        last = min(last or len(all_lines), len(all_lines))
        first = max(1, min(first or 1, last))
        return {"doc_id": doc_id, "lines": [first, last], "total_lines": len(all_lines), "source": source,
                "changed_since_ingest": changed, "title": info["title"],
                "text": "\n".join(all_lines[first - 1:last])}

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
        return {"status": "ok" if status["indexes_current"] and not self.contract_error else "degraded",
                "store": str(store.path), "documents": status["documents"], "chunks": status["chunks"],
                "index": self.freshness(caller), "contract": {
                    "path": None if self.contract_path is None else str(self.contract_path),
                    "version": contract.contract_version, "error": self.contract_error},
                "model": store.embedding_spec().model, "uptime_s": round(time.time() - self.started, 1),
                "swaps": self.swaps, "kbtool_version": __version__,
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
