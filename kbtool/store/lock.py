"""The store's writer lock: one writer at a time, across processes (a file lock) and across the
threads of one process (a re-entrant lock), with who holds it recorded in ``writer.json``."""

from __future__ import annotations

import json
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from ..errors import StoreError
from .files import write_json
from .manifest import now_iso


class WriterLock:
    def __init__(self, folder: Path):
        self.folder = folder
        self.wait: float = 300.0  # seconds a writer waits for another one
        self.on_wait: Callable[[dict], None] | None = None  # told who holds the lock, before waiting
        self._file = None
        self._thread = threading.RLock()
        self._depth, self._owner = 0, None

    @contextmanager
    def hold(self, on_first: Callable[[], None]):
        """Held for the ``with`` body; re-entrant within a thread. ``on_first`` runs once the lock
        is first taken (the store re-reads its manifest there)."""
        from filelock import FileLock, Timeout

        if not self._thread.acquire(timeout=self.wait):
            raise StoreError(f"another thread of this process is writing to {self.folder}: try again when it is done")
        try:
            if self._depth == 0:
                self._file = self._file or FileLock(str(self.folder / "writer.lock"), thread_local=False)
                try:
                    self._file.acquire(timeout=0)
                except Timeout:
                    holder = self.holder()
                    if self.on_wait:
                        self.on_wait(holder)
                    try:
                        self._file.acquire(timeout=self.wait)
                    except Timeout:
                        raise StoreError(
                            f"another kbtool process is writing to {self.folder} ({_describe(holder)}): "
                            "wait for it to finish, or pass --wait SECONDS") from None
                try:  # a failure here (a full disk, a damaged manifest) must not keep the lock held
                    write_json(self.folder / "writer.json", {"pid": os.getpid(), "since": now_iso()})
                    on_first()
                except BaseException:
                    self._file.release()
                    raise
            self._depth, self._owner = self._depth + 1, threading.get_ident()
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self._owner = None
                    self._file.release()
        finally:
            self._thread.release()

    @contextmanager
    def idle(self):
        """Yields whether no thread of this process is inside ``hold`` (the calling one included);
        while it is true, none can enter: a reader may refresh what a writer would change."""
        if not self._thread.acquire(blocking=False):
            yield False
            return
        try:
            yield self._depth == 0
        finally:
            self._thread.release()

    def holder(self) -> dict:
        try:
            return json.loads((self.folder / "writer.json").read_text())
        except (OSError, ValueError):
            return {}

    def held_elsewhere(self) -> bool:
        """Whether another process, or another thread of this one, holds the lock right now."""
        from filelock import FileLock, Timeout

        if self._depth:
            return self._owner != threading.get_ident()
        if not os.access(self.folder / "writer.lock", os.W_OK):
            return _locked_read_only(self.folder / "writer.lock")  # a read-only store, another user's
        probe = FileLock(str(self.folder / "writer.lock"), thread_local=False)
        try:
            probe.acquire(timeout=0)
        except Timeout:
            return True
        probe.release()
        return False


def _locked_read_only(file: Path) -> bool:
    """Whether a process holds the lock file, probed through a read-only descriptor (flock works there)."""
    import fcntl

    try:
        fd = os.open(file, os.O_RDONLY)
    except OSError:
        return False  # no lock file: nobody ever wrote here
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _describe(holder: dict) -> str:
    if not holder:
        return "holder unknown"
    return f"pid {holder.get('pid')}, writing since {holder.get('since')}"
