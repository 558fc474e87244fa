"""The warm state a server answers with — the store, the contract and the embedding model, loaded
once and shared by every request thread — kept live.

Before a request the state checks (at most every ``check_every`` seconds) whether another process
changed the store (a new catalog generation or a finished index) or the contract file (or the
lexicon it names). A new contract is loaded and swapped in; a broken one is refused — the error is
logged and shown by ``health()`` — and the old one keeps serving. A store change re-opens the
vector indexes: Chroma keeps a process's HNSW index in memory, blind to another process's writes,
so without it a server would miss new chunks. The swap waits for the requests in flight (a few
milliseconds) and holds new ones back meanwhile (``gate.Gate``): no request fails, none sees half
a state.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Sequence

from .gate import Gate

log = logging.getLogger("kbtool.serve")


class LiveState:
    """``store``, ``contract`` and ``embedder``, loaded warm and swapped whole when their files
    change; ``state()`` hands a request one consistent generation of them."""

    def __init__(self, store_path: str | Path | None = None, contract_path: str | Path | None = None,
                 overrides: Sequence[str] = (), *, check_every: float = 0.5):
        from ..contract import find_contract
        from ..store import Store

        self.store = Store.open(store_path)
        self.store.require_indexed()
        self.contract_path = find_contract(contract_path)
        self.overrides = list(overrides)
        self.check_every = check_every
        self.contract_error: str | None = None
        self._gate = Gate()
        self._checked = 0.0
        self._check_lock = threading.Lock()
        self._contract_files = [self.contract_path]  # the contract, then the lexicon it names
        stamp = self._contract_stamps()
        self.contract, self.contract_version_loaded_at = self._load_contract(), time.time()
        self._watch_contract_files(self.contract, stamp)
        self._store_stamp = self._store_state()
        self.embedder = self._load_embedder()
        self.swaps = 0
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
        """At most every ``check_every`` seconds, by one request thread (the others go on): an edited
        contract (or lexicon) swapped in, a store another process changed re-opened."""
        now = time.monotonic()
        if now - self._checked < self.check_every or not self._check_lock.acquire(blocking=False):
            return
        try:
            self._checked = now
            self._refresh_contract()
            self._refresh_store()
        finally:
            self._check_lock.release()

    def _refresh_contract(self) -> None:
        contract_stamp = self._contract_stamps()  # the contract file and its lexicon
        if contract_stamp == self._contract_stamp:
            return
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

    def _refresh_store(self) -> None:
        if self._store_state() == self._store_stamp:
            return
        with self._gate.swap():
            model = self.store.embedding_spec().cache_key
            self.store.reopen()
            if self.store.embedding_spec().cache_key != model:
                self.embedder = self._load_embedder()
            self._store_stamp = self._store_state()
            self.swaps += 1
        log.info("store %s changed (generation %s): indexes re-opened", self.store.path, self.store.generation())

    @contextmanager
    def state(self):
        """(store, contract, embedder) for one request, consistent for its whole length."""
        self._maybe_refresh()
        with self._gate.read():
            yield self.store, self.contract, self.embedder
