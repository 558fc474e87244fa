"""What ingest allows one file: its size by type (``read_file``), the ZIP directory of a DOCX (a zip
bomb is refused before anything is decompressed), the seconds its parsing may take, and the one line
it says when a file fails (``failure_reason``)."""

from __future__ import annotations

import io
import re
from pathlib import Path

from ..errors import ParseError, ParseTimeoutError

SUPPORTED = {
    ".md": "md", ".markdown": "md", ".mdx": "md", ".rst": "rst", ".txt": "txt", ".text": "txt", ".html": "html",
    ".htm": "html", ".pdf": "pdf", ".docx": "docx", ".csv": "csv",
}
# Bytes: larger files are skipped unless ingest's max_file_size (--max-file-size) sets one limit for
# every type. Plain text and Markdown are parsed in pieces (bench: 30 MB of text in 104 s,
# well under the time its chunks take to embed); reStructuredText, HTML, CSV, DOCX and PDF in one go.
MAX_SIZE_BY_TYPE = {"txt": 50 * 2**20, "md": 50 * 2**20, "rst": 10 * 2**20, "html": 20 * 2**20, "pdf": 25 * 2**20,
                    "docx": 20 * 2**20, "csv": 10 * 2**20}
MAX_FILE_SIZE = max(MAX_SIZE_BY_TYPE.values())
# ZIP-based types (DOCX) are checked on the archive's directory before anything is decompressed, so a
# small file holding huge XML (a zip bomb) is refused at once instead of parsed for minutes:
# - the XML the parser reads (every .xml and .rels part), uncompressed, gets the same budget as the
#   file: the type's size limit, or max_file_size. Parsing costs per byte of XML (bench: a 0.6 MB
#   document.xml of 5,000 paragraphs took 9 s), so a limit on the compressed size alone bounds nothing. All the
#   entries together (images and other media too, which are stored compressed already) get twice it;
# - at most MAX_ZIP_ENTRIES entries (a Word document has tens, a few hundred with many pictures);
# - no entry over ZIP_RATIO_MIN_SIZE may expand more than MAX_ZIP_RATIO times: Word's XML deflates
#   about 10-25:1, while repeated bytes reach 1000:1.
# The sizes checked are the archive's own; Python's zipfile (which python-docx reads with) stops at
# the size an entry declares, so a lying entry fails its CRC check rather than expanding further.
ZIP_TYPES = {"docx"}
MAX_ZIP_ENTRIES = 10_000
MAX_ZIP_RATIO = 200
ZIP_RATIO_MIN_SIZE = 2**20


def size_limits_text() -> str:
    """The default limits in words, for help texts: 'md, txt 50 MB; ...'."""
    by_size: dict[int, list[str]] = {}
    for kind, size in MAX_SIZE_BY_TYPE.items():
        by_size.setdefault(size, []).append(kind)
    return "; ".join(f"{', '.join(sorted(k))} {size // 2**20} MB" for size, k in sorted(by_size.items(), reverse=True))


# Seconds one file's parsing may take (ingest's parse_timeout, CLI --parse-timeout; 0: none), so one
# hostile or pathological file cannot hold up the rest of a folder. Bench: 30 MB of plain text parses
# in 104 s; a DOCX at its 20 MB XML limit could take minutes, and is stopped here instead.
PARSE_TIMEOUT = 120.0
class Budget:
    """Stop the parse in the ``with`` block after ``seconds``: SIGALRM raises ParseTimeoutError, and
    again every second after, should a library swallow it. Only in the main thread, on a system with
    setitimer, and when no other interval timer is running; elsewhere (e.g. ``serve --watch``'s
    thread) there is no time budget (the size and ZIP limits still hold)."""

    def __init__(self, seconds: float | None):
        self.seconds, self.expired, self.armed = seconds, False, False

    def error(self) -> ParseTimeoutError:
        return ParseTimeoutError(f"parsing took over {self.seconds:g} s, the time budget per file: stopped; "
                                 "raise it with parse_timeout (CLI: --parse-timeout S, 0: none)")

    def _alarm(self, signum, frame):
        self.expired = True
        raise self.error()

    def __enter__(self):
        import signal
        import threading

        if (self.seconds and self.seconds > 0 and hasattr(signal, "setitimer")
                and threading.current_thread() is threading.main_thread()
                and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)):
            self._old = signal.signal(signal.SIGALRM, self._alarm)
            signal.setitimer(signal.ITIMER_REAL, self.seconds, 1.0)
            self.armed = True
        return self

    def __exit__(self, *exc):
        if self.armed:
            import signal

            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old)
            self.armed = False
        return False


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 / 10 else f"{n / 1024:.0f} KB"


def check_zip(data: bytes, filetype: str, limit: int) -> None:
    """Refuse a ZIP-based file (DOCX) that is not an archive, or whose directory says it would expand
    past the limits above (``limit``: the file's size limit); reads no entry's contents."""
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            entries = zf.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, OSError) as exc:
        why = "" if str(exc) == "File is not a zip file" else f" ({exc})"
        raise ParseError(f"not a {filetype.upper()} file: not a ZIP archive{why}") from None
    if len(entries) > MAX_ZIP_ENTRIES:
        raise ParseError(f"{len(entries)} entries in the archive, over the limit of {MAX_ZIP_ENTRIES}: "
                         "not parsed (a zip bomb?)")
    xml = total = 0
    for e in entries:
        if e.file_size > ZIP_RATIO_MIN_SIZE and e.file_size > MAX_ZIP_RATIO * max(e.compress_size, 1):
            raise ParseError(f"{e.filename} expands {e.file_size / max(e.compress_size, 1):.0f}:1 "
                             f"({_mb(e.compress_size)} to {_mb(e.file_size)}), over {MAX_ZIP_RATIO}:1: "
                             "not parsed (a zip bomb?)")
        total += e.file_size
        if e.filename.lower().endswith((".xml", ".rels")):
            xml += e.file_size
    how = "raise it with max_file_size (CLI: --max-file-size MB)"
    if xml > limit:
        raise ParseError(f"{_mb(xml)} of XML uncompressed (from {_mb(len(data))}) is over the limit, "
                         f"{limit / 2**20:g} MB: not parsed; {how}")
    if total > 2 * limit:
        raise ParseError(f"{_mb(total)} uncompressed (from {_mb(len(data))}) is over the limit, "
                         f"{2 * limit / 2**20:g} MB (twice the file size limit): not parsed; {how}")


def size_limit(path: Path, max_bytes: int | None = None) -> int:
    """The size limit for this file: ``max_bytes`` when given, else its type's."""
    if max_bytes is not None:
        return max_bytes
    return MAX_SIZE_BY_TYPE.get(SUPPORTED.get(path.suffix.lower(), ""), MAX_FILE_SIZE)


def read_file(path: Path, max_bytes: int | None = None) -> tuple[bytes, float]:
    """A regular file's bytes and mtime, or ParseError (too large, unreadable, not a regular file).
    ``max_bytes``: one limit for every type (None: the type's, MAX_SIZE_BY_TYPE)."""
    import stat as st

    try:
        info = path.stat()
        if not st.S_ISREG(info.st_mode):
            raise ParseError("not a regular file")
        limit = size_limit(path, max_bytes)
        if info.st_size > limit:
            kind = "the limit set" if max_bytes is not None else f"the limit for {SUPPORTED.get(path.suffix.lower(), 'these')} files"
            raise ParseError(f"{info.st_size / 2**20:.1f} MB ({info.st_size} bytes) is over {kind}, "
                             f"{limit / 2**20:g} MB: raise it with max_file_size (CLI: --max-file-size MB)")
        return path.read_bytes(), info.st_mtime
    except OSError as exc:
        raise ParseError(f"cannot read: {exc.strerror or exc}") from None


_OBJECT_REPR = re.compile(r"(?:file )?'?<[\w.]+ object at 0x[0-9a-fA-F]+>'?")
BINARY_TYPES = ("docx", "pdf")  # a failure to parse them means the file is not what its name says


def failure_reason(filetype: str, exc: Exception) -> str:
    """One clean line for a library's failure to parse a file: its first line, without a Python
    object's repr (python-docx says "file '<_io.BytesIO object at 0x7f…>' is not a Word file") or
    a KeyError's quotes. A DOCX or PDF that does not parse is said not to be one."""
    msg = str(exc).splitlines()[0].strip() if str(exc).strip() else type(exc).__name__
    if isinstance(exc, KeyError) and len(msg) > 1 and msg[0] == msg[-1] and msg[0] in "'\"":
        msg = msg[1:-1]
    msg = _OBJECT_REPR.sub("it", msg)
    if filetype in BINARY_TYPES:
        return f"not a valid {filetype.upper()} file: {msg}"
    return f"could not parse as {filetype}: {msg}"
