"""``kbtool serve --watch``: re-ingest the store's sources when their files change.

A thread polls the files under each source the store recorded (``kbtool status`` lists them; a
contract's ``data.sources`` when it declares them) every ``interval`` seconds. After a change it
waits until the files have been quiet for ``debounce`` seconds (an editor saving, a ``git pull``),
then runs ``kbtool ingest`` in a child process — which takes the store's writer lock like any
other writer, so it waits for (and never races) another ingest. The service notices the new
generation and swaps it in between requests; until then ``freshness()`` says the sources changed.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

log = logging.getLogger("kbtool.serve")


def snapshot(roots: list[Path]) -> dict[str, tuple[int, int]]:
    """path -> (mtime_ns, size) of the visible files under ``roots``."""
    out: dict[str, tuple[int, int]] = {}
    for root in roots:
        if root.is_file():
            st = root.stat()
            out[str(root)] = (st.st_mtime_ns, st.st_size)
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for name in filenames:
                if name.startswith("."):
                    continue
                p = os.path.join(dirpath, name)
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                out[p] = (st.st_mtime_ns, st.st_size)
    return out


class Watcher:
    """``Watcher(service).start()``; ``stop()`` ends it (an ingest running is let finish)."""

    def __init__(self, service, *, interval: float = 1.0, debounce: float = 2.0, contract: str | None = None):
        self.service = service
        self.interval, self.debounce = interval, debounce
        self.contract = contract
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kbtool-watch", daemon=True)
        self.ingests = 0
        self.last_error: str | None = None

    def roots(self) -> list[Path]:
        if self.contract:
            from ..contract import load_contract
            from ..ingestion.sources import declared_sources

            try:
                declared = declared_sources(load_contract(self.contract), Path(self.contract))
            except Exception as exc:  # a broken contract: the service says so; watch what the store recorded
                log.warning("watch: contract %s: %s", self.contract, exc)
                declared = []
            if declared:
                return [root for root, _, _ in declared]
        return [Path(r.removeprefix("beir:")) for r in self.service.store.sources()]

    def start(self) -> "Watcher":
        roots = self.roots()
        if not roots:
            from ..errors import UsageError

            raise UsageError("--watch: the store records no source folder (ingest one first, or declare "
                             "data.sources in the contract)")
        self._seen = snapshot(roots)  # before start() returns: a change right after it is seen
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        self._state, poll_error = (self._seen, None), None
        while not self._stop.wait(self.interval):
            try:
                self._step()
            except Exception as exc:  # a file gone mid-walk, a manifest being written, ...: the watch goes on
                log.error("watch: %s: %s", type(exc).__name__, exc)
                self.last_error = self.service.watch_error = poll_error = f"{type(exc).__name__}: {exc}"
            else:
                if poll_error is not None and self.service.watch_error == poll_error:  # it passed
                    self.last_error = self.service.watch_error = None
                poll_error = None

    def _step(self) -> None:
        seen, changed_at = self._state
        now = snapshot(self.roots())
        if now != seen:
            self._state = (now, time.monotonic())
            self.service.sources_changed = self.service.sources_changed or time.time()
            return  # still changing: wait for quiet
        if changed_at is not None and time.monotonic() - changed_at >= self.debounce:
            # The files as they were when the ingest started: an edit made while it runs differs
            # from them, so the next step sees it (a snapshot taken after would swallow it).
            self._state = (seen, None)
            self._ingest()

    def _ingest(self) -> None:
        started = time.time()
        cmd = [sys.executable, "-m", "kbtool", "ingest", "--store", str(self.service.store.path), "-q", "--json"]
        if self.contract:
            cmd += ["--contract", str(self.contract)]
        log.info("watch: sources changed, running %s", " ".join(cmd[2:]))
        proc = subprocess.run(cmd, capture_output=True, text=True)
        self.ingests += 1
        if proc.returncode in (0, 1):  # 1: some files failed (named in the log); the rest is in
            if self.service.sources_changed and self.service.sources_changed <= started:
                self.service.sources_changed = None
            self.last_error = None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["failed"])[-1]
        else:
            self.last_error = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        if self.last_error:
            log.error("watch: ingest: %s", self.last_error)
        self.service.watch_error = self.last_error
