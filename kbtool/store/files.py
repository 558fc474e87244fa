"""Atomic file writes (the manifest, the BM25 state record and the writer record share them), and
what a failed write means: a full or read-only file system, or no permission, told apart from damage."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..errors import StoreError, StoreFullError, StoreReadOnlyError


def umask_mode() -> int:
    """The mode a new file gets from the process umask (mkstemp makes 0600 files). Read from
    /proc where it can be: setting the umask to read it back is process-wide, and a thread
    creating a file in between would get mode 0666."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            mask = next(int(line.split()[1], 8) for line in fh if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        mask = os.umask(0)
        os.umask(mask)
    return 0o666 & ~mask


def write_json(path: Path, data: Any) -> None:
    """Write to a uniquely named temporary file, fsync, rename: never a half-written file, and two
    processes never share a temporary name. The file gets the umask's mode, like any other file of
    the store (another user who may read the store can read it)."""
    write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def write_text(path: Path, text: str, errors: str = "strict") -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors=errors) as fh:
            os.fchmod(fh.fileno(), umask_mode())
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def writable(path: Path) -> bool:
    """Whether this process may create files in folder ``path`` (False on a read-only file system)."""
    return os.access(path, os.W_OK)


def _mount_point(path: Path) -> Path:
    path = path.resolve()
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB"


def full_error(path: Path) -> StoreFullError:
    try:
        free = f", {_mb(shutil.disk_usage(path).free)} free"
    except OSError:
        free = ""
    return StoreFullError(f"no space left on {_mount_point(path)} (the file system of {path}{free}): free space "
                          "and re-run the command; nothing was lost (the store's documents are intact; until "
                          "the re-run its indexes may be behind)")


def readonly_error(path: Path, what: str = "writing") -> StoreReadOnlyError:
    try:
        ro_fs = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        ro_fs = False
    if ro_fs:
        return StoreReadOnlyError(f"{path} is on a read-only file system: queries and status work, {what} needs a "
                                  "writable store (remount it read-write, or copy the store folder); nothing was changed")
    try:
        owner = f" (owned by uid {path.stat().st_uid})"
    except OSError:
        owner = ""
    return StoreReadOnlyError(f"permission denied: {path}{owner} is not writable by this user: queries and status work, "
                              f"{what} needs write permission (run it as the store's owner, or copy the store "
                              "folder); nothing was changed")


_FULL = ("database or disk is full", "no space left", "disk quota exceeded")
_READONLY = ("attempt to write a readonly database", "read-only file system", "permission denied",
             "readonly database")
_AMBIGUOUS = ("disk i/o error", "unable to open database file", "error in compaction")


def storage_error(exc: BaseException, path: Path, what: str = "writing") -> StoreError | None:
    """The StoreError a failed read or write of the store in folder ``path`` stands for — a full file
    system, a read-only one, no permission — or None (not one of these: perhaps real damage).
    Recognises OSError, sqlite3 and Chroma errors (by errno, else by SQLite's and the OS's words)."""
    if isinstance(exc, StoreError):
        return exc
    code = getattr(exc, "errno", None)
    text = f"{exc} {exc.__cause__ or ''}".lower()
    if code in (errno.ENOSPC, errno.EDQUOT) or any(w in text for w in _FULL):
        return full_error(path)
    if code in (errno.EROFS, errno.EACCES, errno.EPERM) or any(w in text for w in _READONLY):
        return readonly_error(path, what)
    if any(w in text for w in _AMBIGUOUS):  # SQLite and Chroma say this of a full or read-only disk too
        if not writable(path):
            return readonly_error(path, what)
        try:
            if shutil.disk_usage(path).free < 2**20:
                return full_error(path)
        except OSError:
            pass
    return None
