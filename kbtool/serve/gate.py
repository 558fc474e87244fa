"""The gate between a server's requests and a swap of its warm state: requests read together; a
swap (a new contract, re-opened indexes) waits for the requests in flight and holds new ones back
meanwhile, so no request sees half a state."""

from __future__ import annotations

import threading
from contextlib import contextmanager


class Gate:
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
