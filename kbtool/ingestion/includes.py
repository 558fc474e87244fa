"""Include directives' files: where a path resolves (the page's folder, the folders above it, the
include root), what may be read (only under the ingest root or the declared include root), and
which of the file's lines a directive shows (line ranges, VitePress regions, Snippets sections).
``markup.clean_markdown`` finds the directives; this reads their files."""

from __future__ import annotations

import re
from pathlib import Path

INCLUDE_MAX_BYTES = 256 * 1024


def bases(doc_dir: Path | None, include_root: Path | None, ingest_root: Path) -> list[Path]:
    """Where an include path is tried: the document's folder, each folder above it up to the
    highest of the ingest and include roots holding it, then the include root."""
    tops = [r for r in (include_root, ingest_root) if r is not None]
    out: list[Path] = []
    if doc_dir is not None:
        d = doc_dir.resolve()
        holding = [r for r in tops if d.is_relative_to(r)]
        top = min(holding, key=lambda r: len(r.parts)) if holding else d
        while True:
            out.append(d)
            if d == top or d.parent == d:
                break
            d = d.parent
    return out + [r for r in tops if r not in out]


def read_include(target: str, doc_dir: Path | None, include_root: Path | None, ingest_root: Path | None,
                  excluded=None, missing: list | None = None) -> tuple[Path, str] | None:
    """(path, text) of an included file, only when it lies under the ingest root or the declared
    include root, is not hidden and is not excluded from the ingest (the same rules as the files
    ingest reads). Paths that do not exist (yet) are added to ``missing``, so a later ingest
    notices when they appear."""
    if ingest_root is None:
        return None
    for base in bases(doc_dir, include_root, ingest_root):
        try:
            path = (base / target).resolve()
        except (OSError, ValueError):
            continue
        inside = next((r for r in (ingest_root, include_root) if r is not None and path.is_relative_to(r)), None)
        if inside is None:
            continue
        if not path.is_file():
            if missing is not None:
                missing.append(str(path))
            continue
        rel = path.relative_to(inside)
        if any(part.startswith(".") for part in rel.parts) or (
                inside == ingest_root and excluded and excluded(rel.as_posix())):
            return None
        try:
            if path.stat().st_size > INCLUDE_MAX_BYTES:
                return None
            return path, path.read_text(encoding="utf-8", errors="replace").replace("\r\n", "\n")
        except OSError:
            return None
    return None


def selection(target: str, form: str, options: str = "") -> tuple[str, object]:
    """The file a directive names and which of its lines it shows: ``(first, last)`` (1-based,
    None = open), a list of them, a section name, or None (all)."""
    if form == "curly":  # {* path ln[3:9] hl[2] *}: ln selects, hl only highlights
        m = re.search(r"\bln\[(\d*):?(\d*)", options)
        return target, ((int(m.group(1) or 1), int(m.group(2)) if m.group(2) else None) if m else None)
    m = re.match(r"^(.*?)\[ln:([\d\s,-]+)\]$", target)
    if m:  # mdx_include: "file.py[ln:1-7]", "file.py[ln:3-5,9-12]"
        spans = [tuple(int(x) for x in part.split("-", 1)) for part in m.group(2).replace(" ", "").split(",") if part]
        return m.group(1), [(sp[0], sp[-1]) for sp in spans]
    if "#" in target and form == "comment":  # VitePress: path#region
        target, region = target.split("#", 1)
        return target, region
    m = re.match(r"^(.*?):(\d*):?(\d*)$", target)
    if m and not re.match(r"^[A-Za-z]:[\\/]", target):  # Snippets: "file.py:3:5", "file.py:3"
        return m.group(1), (int(m.group(2) or 1), int(m.group(3)) if m.group(3) else None)
    m = re.match(r"^(.*?):([A-Za-z_][\w-]*)$", target)
    if m and not re.match(r"^[A-Za-z]:[\\/]", target):  # Snippets: "file.md:section"
        return m.group(1), m.group(2)
    return target, None


def select(lines: list[str], which) -> list[tuple[int, str]]:
    """(line number, line) of the selected lines; region and section marker lines are left out."""
    numbered = list(enumerate(lines, start=1))
    if which is None:
        return numbered
    if isinstance(which, (tuple, list)):
        spans = [which] if isinstance(which, tuple) else which
        return [(n, t) for n, t in numbered if any(n >= a and (b is None or n <= b) for a, b in spans)]
    start = re.compile(rf"(?:#region\s+{re.escape(which)}\b|\[start:{re.escape(which)}\])")
    end = re.compile(rf"(?:#endregion\b|\[end:{re.escape(which)}\])")
    out, inside = [], False
    for n, t in numbered:
        if start.search(t):
            inside = True
        elif inside and end.search(t):
            break
        elif inside:
            out.append((n, t))
    return out or numbered
