"""The warm state a server answers with — the store, the contract and the embedding model, loaded
once and shared by every request thread — kept live.

Before a request the state checks (at most every ``check_every`` seconds) whether another process
changed the store (a new catalog generation or a finished index) or the contract file (or the
lexicon it names). A new contract is loaded and swapped in; a broken one is refused — the error is
logged and shown by ``health()`` — and the old one keeps serving.

The store is served one generation at a time (``store.pinned.PinnedStore``: the catalog as a
snapshot, BM25 and every model's vectors loaded): while another process writes the next generation
— catalog, vectors, BM25, manifest, in turn — requests are answered from the one pinned. Once no
writer is at work and every index holds the catalog's generation, a new view is loaded beside the
old one (requests go on meanwhile), checked to be one generation once loaded, and swapped in.
The swap waits for the requests in flight (a few milliseconds) and holds new ones back meanwhile
(``gate.Gate``): no request fails, none sees half a state.
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

        self._live = Store.open(store_path)  # read live: has the store moved on, is a writer at work
        self._live.require_indexed()
        self.store = self._pin()
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
        self.embedder = self._load_embedder(self.store)
        self.swaps = 0
        self._warm_up(self.store, self.embedder)

    def _pin(self):
        """The store as it is now, one generation loaded whole; its stamp (None: not one generation —
        the view is not, a writer is at work, or the store moved while it loaded — so the next check
        pins again)."""
        from ..store.pinned import PinnedStore

        stamp = self._store_state()
        store = PinnedStore.pin(self._live.path)
        whole = store.consistent and not self._live.writer_active() and self._store_state() == stamp
        self._store_stamp = stamp if whole else None
        return store

    def _warm_up(self, store, embedder) -> None:
        """One question through the whole pipeline before the first request: the tokenizers, the
        BM25 index, the word lists and the model's first call are paid for here."""
        from ..query.pipeline import retrieve

        for q in ("warm up the retrieval pipeline", "预热检索"):
            try:
                retrieve(store, self.contract, q, embedder=embedder, top_k=1)
            except Exception:  # e.g. a contract that requires a principal: the first request pays
                break

    # ---- loading -------------------------------------------------------------------------
    def _load_contract(self):
        from ..contract import load_contract

        return load_contract(self.contract_path, self.overrides, search=False)

    def _load_embedder(self, store):
        from ..embed import load_embedder

        embedder = load_embedder(store.embedding_spec())
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
        """What says another process changed the store: the catalog generation, the manifest, BM25."""
        return (self._live.catalog.generation(), self._stamp_of(self._live.path / "manifest.json"),
                self._stamp_of(self._live.path / "bm25" / "state.json"))

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
        """Swap in the store's newest generation once it is whole: no writer at work, every index
        holding the catalog's generation. Loaded beside the one serving (requests go on), checked
        once loaded (a writer that started meanwhile: dropped, tried at the next check)."""
        if self._store_state() == self._store_stamp or self._live.writer_active() or not self._live.is_indexed():
            return
        new = self._pin()
        if self._store_stamp is None:
            new.close()
            return
        model = new.embedding_spec().cache_key
        embedder = self.embedder if model == self.store.embedding_spec().cache_key else self._load_embedder(new)
        self._warm_up(new, embedder)
        with self._gate.swap():
            old, self.store, self.embedder = self.store, new, embedder
            self.swaps += 1
        old.close()  # no request holds it: the swap waited for those in flight
        log.info("store %s changed: generation %s swapped in", new.path, new.generation())

    def freshness_of(self) -> dict:
        """The generation served, and whether it is the newest and all indexed (``indexes_current``)."""
        gen = self.store.generation()
        return {"generation": gen, "indexes_current": self.store.consistent and self._live.is_indexed()
                and self._live.catalog.generation() == gen}

    @contextmanager
    def state(self):
        """(store, contract, embedder) for one request, consistent for its whole length."""
        self._maybe_refresh()
        with self._gate.read():
            yield self.store, self.contract, self.embedder
