"""Large word tables a Chinese question reads a few dozen entries of, looked up on disk.

A cold Chinese query used to load two whole tables to read a handful of entries: jieba's prefix
dictionary (580k entries, ~0.8 s from its marshal cache) and wordfreq's Chinese frequencies (330k,
~0.5 s with wordfreq's import). ``Lexicon`` keeps such a table in a SQLite file where kbtool caches
jieba's dictionary (``kbtool._env.cache_dir``), written once, atomically, from the full table, and
answers ``get``/``in``/``[]`` with one indexed lookup each. Where a process reads many entries
(``index`` analysing thousands of chunks), it loads the full table after ``FULL_AFTER`` lookups and
answers from memory: the same values either way (tests compare the two on every word of a corpus).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Callable, Iterable

# Lookups after which the whole table is loaded: a query of a few sentences makes ~100-500, a
# document thousands; past this, one load (~1 s) is cheaper than the lookups still to come.
FULL_AFTER = 20_000


class Lexicon:
    """A read-mostly mapping of str -> number kept in ``path`` (SQLite), built by ``build()`` (an
    iterable of (key, value) pairs) when the file is missing or was built under another ``stamp``.
    ``full()`` returns the whole table as a dict (what it loads after ``FULL_AFTER`` lookups)."""

    def __init__(self, path: Path, stamp: str, build: Callable[[], Iterable[tuple[str, float]]],
                 full: Callable[[], dict]):
        self.path, self.stamp, self._build, self._full_loader = Path(path), stamp, build, full
        self._db: sqlite3.Connection | None = None
        self._full: dict | None = None
        self._added: dict = {}  # entries set in this process (jieba's add_word)
        self._lookups = 0
        self._lock = threading.Lock()

    # ---- the mapping jieba and zipf read ------------------------------------------------------
    def get(self, key: str, default=None):
        if key in self._added:
            return self._added[key]
        if self._full is not None:
            return self._full.get(key, default)
        with self._lock:
            self._lookups += 1
            if self._lookups > FULL_AFTER:
                self._full = self._full_loader()
                return self._full.get(key, default)
            row = self._conn().execute("SELECT v FROM t WHERE k=?", (key,)).fetchone()
        return default if row is None else row[0]

    def __contains__(self, key: str) -> bool:
        return self.get(key, _MISSING) is not _MISSING

    def __getitem__(self, key: str):
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __setitem__(self, key: str, value) -> None:
        self._added[key] = value

    def loaded(self) -> dict | None:
        """The whole table as the plain dict it answers from, once loaded and while nothing was set
        in this process (the same answers, without a Python call per lookup); else None."""
        return self._full if self._full is not None and not self._added else None

    # ---- the file ------------------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = self._open() or self._write()
        return self._db

    def _open(self) -> sqlite3.Connection | None:
        if not self.path.is_file():
            return None
        try:
            db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
            if db.execute("SELECT v FROM meta WHERE k='stamp'").fetchone() == (self.stamp,):
                return db
            db.close()
        except sqlite3.Error:
            pass
        return None

    def _write(self) -> sqlite3.Connection:
        """Build the file from the full table (once per stamp); a cache directory that cannot be
        written leaves the table in memory instead."""
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = self._filled(sqlite3.connect(tmp))
            db.execute("CREATE TABLE meta (k TEXT PRIMARY KEY, v)")
            db.execute("INSERT INTO meta VALUES ('stamp', ?)", (self.stamp,))
            db.commit()
            db.close()
            os.replace(tmp, self.path)
        except (OSError, sqlite3.Error):
            try:
                Path(tmp).unlink(missing_ok=True)
            except OSError:
                pass
            return self._filled(sqlite3.connect(":memory:", check_same_thread=False))
        return self._open() or self._filled(sqlite3.connect(":memory:", check_same_thread=False))

    def _filled(self, db: sqlite3.Connection) -> sqlite3.Connection:
        db.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v) WITHOUT ROWID")
        db.executemany("INSERT OR REPLACE INTO t VALUES (?, ?)", self._build())
        return db


_MISSING = object()


def file_stamp(*parts: object) -> str:
    return ":".join(str(p) for p in parts)
