"""ingest(): discover files, parse what changed, then chunk (``kbtool.chunk``) and index
(``kbtool.index``). The CLI commands are thin wrappers over these library functions."""

from __future__ import annotations

import codecs
import fnmatch
import json
import os
import stat
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator

from ..chunk import ChunkParams, chunk
from ..document import RESERVED_META, ParsedDocument, check_metadata_keys, fingerprint
from ..errors import EmptyDocumentError, InputError, ParseError, UsageError
from ..index import IndexReport, index
from ..store import Store
from ..store.manifest import now_iso
from .parse import SUPPORTED, beir_document, parse_file, read_file, sha256_bytes
from .sources import Job

# progress(stage, advance, total): stage is "parsing", "chunking" or "embedding" — and, for a file of
# PROGRESS_INSIDE bytes or more, "parsing DOC_ID (MB)" counting its megabytes as they are parsed.
Progress = Callable[[str, int, int], None]
PROGRESS_INSIDE = 4 * 2**20


def _inside_file(progress: Progress | None, doc_id: str, size: int):
    """A parse_file progress(done, total) callback that reports a big file's megabytes, or None."""
    if progress is None or size < PROGRESS_INSIDE:
        return None
    stage, total, said = f"parsing {doc_id} (MB)", max(1, round(size / 2**20)), [0]
    progress(stage, 0, total)

    def update(done: int, of: int) -> None:
        mb = min(total, total * done // of) if of > 0 else total
        if mb > said[0]:
            progress(stage, mb - said[0], total)
            said[0] = mb

    return update


@dataclass
class IngestOptions:
    """How files are ingested. The source options (include ... max_file_size) left None take the
    value the store recorded for that folder (see ``kbtool.ingestion.sources``), else the default."""

    include: list[str] | None = None
    exclude: list[str] | None = None
    format: str | None = None  # auto | beir
    metadata: dict | None = None
    parse_only: bool = False
    keep_missing: bool = False
    encoding: str | None = None
    max_file_size: int | None = None  # bytes, one limit for every type; None: per type (parse.MAX_SIZE_BY_TYPE)
    markup_off: list[str] | None = None  # Markdown clean-up rules switched off
    # where include directives resolve: a folder inside the root, relative to it (or absolute); default the root
    include_root: str | None = None
    meta_from_path: list[str] | None = None  # e.g. "docs/{lang}/**"
    id_prefix: str | None = None  # put before every document id of the root, e.g. "zh/"
    base_url: str | None = None  # the site the root is published under (citations)


@dataclass
class IngestReport:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    failed: list[dict] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    chunks_written: int = 0
    index: IndexReport | None = None
    markup: dict = field(default_factory=dict)  # counts of what Markdown clean-up did
    warnings: list = field(default_factory=list)
    # include directives whose file was not found: {doc_id, include} each (the text lost with them)
    missing_includes: list = field(default_factory=list)
    moved: list = field(default_factory=list)  # {from, to, documents}: roots re-used from a new folder

    def to_dict(self) -> dict:
        d = asdict(self)
        d["counts"] = {k: len(getattr(self, k)) for k in ("added", "updated", "unchanged", "removed", "failed", "skipped")}
        return d


@dataclass
class _Source:
    doc_id: str
    path: Path | None = None
    beir: dict | None = None


def _selected(rel: str, include: list[str], exclude: list[str]) -> bool:
    """Globs match the path relative to the folder given (``*`` also crosses ``/``)."""
    return (not include or any(fnmatch.fnmatch(rel, p) for p in include)) and not any(
        fnmatch.fnmatch(rel, p) for p in exclude)


def discover(walk: Path, base: Path, include: list[str], exclude: list[str], skipped: list[dict],
             unreadable: list[str] | None = None, id_prefix: str = "") -> Iterator[_Source]:
    """Regular files under ``walk`` (resolved), sorted, with ids relative to ``base``; hidden entries
    skipped; a symlink is read only if it resolves to a regular file inside ``walk``. A folder that
    cannot be read is reported in ``skipped`` and its id prefix added to ``unreadable``, so its
    documents are kept, not taken for removed."""

    def onerror(exc: OSError) -> None:
        where = Path(exc.filename) if exc.filename else walk
        rel = where.relative_to(base).as_posix() if where.is_relative_to(base) else str(where)
        skipped.append({"path": rel + "/", "reason": f"unreadable folder ({exc.strerror or exc}): its documents are kept"})
        if unreadable is not None:
            unreadable.append("" if rel == "." else rel + "/")

    for dirpath, dirnames, filenames in os.walk(walk, followlinks=False, onerror=onerror):
        for d in dirnames:
            if not d.startswith(".") and (Path(dirpath) / d).is_symlink():
                rel = (Path(dirpath) / d).relative_to(base).as_posix()
                skipped.append({"path": rel + "/", "reason": "symlinked folder (not followed)"})
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and not (Path(dirpath) / d).is_symlink())
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            full = Path(dirpath) / name
            try:
                str(full).encode("utf-8")
            except UnicodeEncodeError:  # bytes that are not UTF-8 in the name
                shown = os.fsencode(full.relative_to(base)).decode("utf-8", "backslashreplace")
                skipped.append({"path": shown, "reason": "file name is not valid UTF-8: rename the file to ingest it"})
                continue
            rel = full.relative_to(walk).as_posix()
            if not _selected(rel, include, exclude):
                continue
            doc_id = id_prefix + full.relative_to(base).as_posix()
            try:
                target = full.resolve(strict=True)
            except (OSError, RuntimeError):
                skipped.append({"path": doc_id, "reason": "broken symlink or symlink loop"})
                continue
            if not target.is_relative_to(walk):
                skipped.append({"path": doc_id, "reason": "symlink pointing outside the ingest root"})
                continue
            if not stat.S_ISREG(target.stat().st_mode):
                skipped.append({"path": doc_id, "reason": "not a regular file"})
                continue
            if full.suffix.lower() not in SUPPORTED:
                skipped.append({"path": doc_id, "reason": f"unsupported file type {full.suffix or '(none)'}"})
                continue
            yield _Source(doc_id, path=full)


def read_beir_corpus(root: Path, failed: list[dict], id_prefix: str = "") -> Iterator[_Source]:
    corpus = root / "corpus.jsonl"
    if not corpus.is_file():
        raise InputError(f"{root} has no corpus.jsonl: format beir expects a BEIR folder")
    seen: set[str] = set()
    with corpus.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError(f"{corpus}:{lineno}: not UTF-8: BEIR corpora are UTF-8 JSON lines") from None
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                doc_id = str(rec["_id"])
            except (ValueError, KeyError, TypeError) as exc:
                raise InputError(f"{corpus}:{lineno}: not a BEIR record with an _id ({exc})") from None
            if doc_id in seen:
                failed.append({"doc_id": doc_id, "path": f"{corpus}:{lineno}", "reason": "duplicate _id"})
                continue
            seen.add(doc_id)
            yield _Source(id_prefix + doc_id, path=corpus, beir={"title": rec.get("title") or "", "text": rec.get("text") or "",
                                                    "hash": sha256_bytes(line.strip().encode("utf-8"))})


def _validate(options: IngestOptions) -> None:
    if options.format not in ("auto", "beir"):
        raise UsageError(f"unknown format {options.format!r}: use auto or beir")
    check_metadata_keys(options.metadata)
    if options.encoding:
        try:
            codecs.lookup(options.encoding)
        except LookupError:
            raise UsageError(f"unknown encoding {options.encoding!r}: e.g. utf-8, latin-1, cp1252, gb18030") from None
    if options.max_file_size is not None and options.max_file_size <= 0:
        raise UsageError("max_file_size must be positive")
    from .markup import MarkupRules

    MarkupRules.parse(options.markup_off)
    for pattern in options.meta_from_path:
        path_pattern(pattern)


def path_pattern(pattern: str):
    """``docs/{lang}/**`` -> a regex with a named group per ``{field}`` (``*`` within a folder,
    ``**`` across folders)."""
    import re

    if not re.search(r"\{[A-Za-z_]\w*\}", pattern):
        raise UsageError(f"meta_from_path {pattern!r}: name at least one field, e.g. 'docs/{{lang}}/**'")
    out, names = "", set()
    for token in re.split(r"(\{[A-Za-z_]\w*\}|\*\*/?|\*)", pattern):
        if not token:
            continue
        if token.startswith("{"):
            name = token[1:-1]
            if name in names or name in RESERVED_META:
                raise UsageError(f"meta_from_path {pattern!r}: field {name!r} is repeated or reserved")
            names.add(name)
            out += f"(?P<{name}>[^/]+)"
        elif token.startswith("**"):
            out += "(?:.*/)?" if token.endswith("/") else ".*"
        elif token == "*":
            out += "[^/]*"
        else:
            out += re.escape(token)
    return re.compile(out + "$")


def path_metadata(doc_id: str, patterns: list[str]) -> dict:
    meta: dict = {}
    for pattern in patterns:
        m = path_pattern(pattern).match(doc_id)
        if m:
            meta.update({k: v for k, v in m.groupdict().items() if v is not None})
    return meta


def ingest(store: Store, paths: list[str | Path] | None = None, options: IngestOptions | None = None, *,
           embedder=None, chunk_params: ChunkParams | None = None, progress: Progress | None = None,
           sources: list | None = None, update_sources: bool = False,
           root_moved: list[tuple[str | Path, str | Path]] | None = None) -> IngestReport:
    """Bring the store in line with the given files or folders, holding the store's writer lock.

    ``paths`` None (or empty) ingests ``sources`` — declared ones, ``(root, IngestOptions, as
    written)`` from ``sources.declared_sources`` — else every source the store recorded. Source
    options not given in ``options`` keep the store's record for that folder; a different value is
    a UsageError unless ``update_sources``. ``root_moved`` pairs (old root, new folder) say a folder
    moved: its documents, chunks and vectors are re-used from the new place (a root whose folder is
    gone is taken as moved when another folder brings the same document ids)."""
    for raw in paths or []:  # every path is checked before anything is written, or any lock is waited for
        if not Path(raw).exists():
            raise UsageError(f"{raw}: no such file or folder")
    for old, new in root_moved or []:
        if not Path(new).is_dir():
            raise UsageError(f"root moved to {new}: no such folder")
    with store.writing():
        return _ingest(store, paths, options, embedder=embedder, chunk_params=chunk_params, progress=progress,
                       sources=sources, update_sources=update_sources, root_moved=root_moved)


def _plan(store: Store, paths, options: IngestOptions, declared, update: bool, root_moved) -> tuple[list, list[str]]:
    """(jobs, roots of sources no longer declared). Raises UsageError for option clashes."""
    from . import sources as src

    recorded = store.sources()
    doc_roots = set(store.document_roots())
    moves = {str(Path(o).resolve()) if not str(o).startswith("beir:") else str(o): str(Path(n).resolve())
             for o, n in root_moved or []}
    for old in moves:
        if old not in doc_roots and old not in recorded:
            raise UsageError(f"root moved from {old}: the store has no documents from there (its roots: "
                             f"{', '.join(sorted(doc_roots | set(recorded))) or 'none'})")
    given = {k: getattr(options, k) for k in src.SOURCE_OPTIONS if getattr(options, k) not in (None,)}
    jobs: list = []
    dropped: list[str] = []
    if declared and paths:
        roots = [r for r, _, _ in declared]
        for raw in paths:
            real = Path(raw).resolve()
            if not any(real.is_relative_to(r) for r in roots):
                raise UsageError(f"{raw} is not under a source the contract declares (data.sources): add it there, "
                                 "or ingest it into another store")
    if declared:
        if given:
            k = next(iter(given))
            raise UsageError(f"{src.FLAGS[k]}: the contract declares the sources (data.sources): set "
                             f"{'meta' if k == 'metadata' else k} there")
        by_declared: dict[str, list[str]] = {}
        for root, rec in recorded.items():
            if rec.get("declared"):
                by_declared.setdefault(rec["declared"], []).append(root)
        for root, opts, written in declared:
            key = ("beir:" if opts.format == "beir" else "") + str(root)
            opts = _absolute_include_root(opts, root, f"data.sources root {written!r}")
            job = Job(root, key, src.filled(replace(opts, parse_only=options.parse_only,
                                                  keep_missing=options.keep_missing), None, "", True), written)
            job.moved_from.extend(old for old in by_declared.get(written, []) if old != key)
            if paths:  # a part of a declared source
                for raw in paths:
                    real = Path(raw).resolve()
                    if real.is_relative_to(root):
                        jobs.append(replace(job, path=real, moved_from=list(job.moved_from)))
            else:
                jobs.append(job)
        if not paths:
            keys = {j.root for j in jobs} | {m for j in jobs for m in j.moved_from}
            dropped = sorted(r for r in recorded if r not in keys)
    elif paths:
        for raw in paths:
            real = Path(raw).resolve()
            fmt = given.get("format") or "auto"
            if fmt == "beir":
                key = "beir:" + str(real)
                rec = recorded.get(key)
            else:
                base = _root_for(real, {r for r in doc_roots | set(recorded) if not r.startswith("beir:")})
                key = str(base or (real if real.is_dir() else real.parent))
                rec = recorded.get(key)
                if rec is not None and rec.get("format") == "beir":
                    rec = None
            moved_from = [o for o, n in moves.items() if n == key]
            if not moved_from and real.is_dir() and fmt != "beir":
                moved_from = _moved_here(store, real, (doc_roots | set(recorded)) - {key})
            if rec is None and moved_from:  # a moved folder keeps its options
                rec = recorded.get(moved_from[0])
            opts = src.filled(options, rec, str(raw), update)
            opts = _absolute_include_root(opts, Path(key.removeprefix("beir:")), str(raw))
            jobs.append(Job(real, key, opts, moved_from=moved_from))
    else:
        if given:
            k = next(iter(given))
            raise UsageError(f"{src.FLAGS[k]} needs the folder it applies to: kbtool ingest PATH {src.FLAGS[k]} ...")
        if not recorded:
            raise UsageError("nothing to ingest: name a folder (kbtool ingest PATH), or declare data.sources in "
                             "the contract")
        taken: dict[str, list[str]] = {}  # a gone root whose files another recorded root holds (a move cut short)
        for key in recorded:
            if key not in moves and not Path(key.removeprefix("beir:")).exists():
                for other in sorted(recorded):
                    if other != key and Path(other).is_dir() and _moved_here(store, Path(other), {key}):
                        taken.setdefault(other, []).append(key)
                        break
        gone_taken = {k for ks in taken.values() for k in ks}
        for key, rec in sorted(recorded.items()):
            if key in gone_taken:
                continue
            root = Path(key.removeprefix("beir:"))
            target = Path(moves[key]) if key in moves else root
            if not target.exists():
                raise UsageError(f"{key}: the source folder is gone: ingest it from where it is now "
                                 f"(kbtool ingest NEW_PATH, or --root-moved {key} NEW_PATH)")
            opts = replace(src.from_record(rec, IngestOptions), parse_only=options.parse_only,
                           keep_missing=options.keep_missing)
            new_key = ("beir:" if key.startswith("beir:") else "") + str(target)
            for rel in rec.get("paths") or ["."]:
                p = (target / rel).resolve()
                if p.exists():
                    jobs.append(Job(p, new_key, opts, rec.get("declared"),
                                    ([key] if new_key != key else []) + taken.get(key, [])))
    return jobs, dropped


def _moved_here(store: Store, folder: Path, roots: set[str]) -> list[str]:
    """The root whose folder is gone and whose files (by path relative to it) are mostly in
    ``folder``: the same documents, moved (a CI cache restored into another checkout)."""
    for root in sorted(roots):
        if root.startswith("beir:") or Path(root).exists():
            continue
        rels = [Path(p).relative_to(root) for p in store.document_paths(root) if Path(p).is_relative_to(root)]
        if rels and sum((folder / r).is_file() for r in rels) * 2 >= len(rels):
            return [root]
    return []


def _absolute_include_root(opts: IngestOptions, root: Path, where: str) -> IngestOptions:
    """include_root relative to the root (as recorded): an absolute one (the CLI's) made relative."""
    if not opts.include_root or opts.format == "beir":
        return opts
    p = Path(opts.include_root)
    real = (p if p.is_absolute() else root / p).resolve()
    folder = root if root.is_dir() else root.parent
    if not real.is_relative_to(folder):
        raise UsageError(f"{where}: include root {opts.include_root} is outside {folder}: kbtool reads nothing "
                         "outside the folder it ingests")
    return replace(opts, include_root=real.relative_to(folder).as_posix())


def _ingest(store: Store, paths, options: IngestOptions | None = None, *, embedder=None,
            chunk_params: ChunkParams | None = None, progress: Progress | None = None, sources=None,
            update_sources: bool = False, root_moved=None) -> IngestReport:
    """Bring the store in line with its sources; see ``ingest``.

    A folder is mirrored: documents whose files are gone leave the store. A path inside a folder
    ingested before keeps that folder as its root, so document ids stay the same.
    """
    from . import sources as src

    options = options or IngestOptions()
    jobs, dropped = _plan(store, paths, options, sources, update_sources, root_moved)
    for job in jobs:
        _validate(job.options)
    report = IngestReport()
    # Which files each job brings, before anything is written: a clash of ids stops the run here.
    found = [_discover_job(job, report) for job in jobs]
    _resolve_clashes(store, jobs, found, report)
    recorded = store.sources()
    for old in {m for j in jobs for m in j.moved_from}:
        new = next(j.root for j in jobs if old in j.moved_from)
        if old != new:
            moved = store.move_root(old, new)
            report.moved.append({"from": old, "to": new, "documents": moved})
            recorded = store.sources()
    for job in jobs:  # the record first: a run killed half-way is re-run with the options it was given
        rec = recorded.get(job.root) or {}
        rel = "." if job.path == Path(job.root.removeprefix("beir:")) or job.path.is_dir() and not rec else None
        if rel is None:
            base = Path(job.root.removeprefix("beir:"))
            rel = job.path.relative_to(base).as_posix() if job.path.is_relative_to(base) else "."
        paths_before = [] if (rec and "." in (rec.get("paths") or [])) else (rec.get("paths") or [])
        recorded[job.root] = src.record(job.options, job.declared, paths_before + [rel])
        if "." in recorded[job.root]["paths"]:
            recorded[job.root]["paths"] = ["."]
    gone_docs: list[str] = []
    if dropped and not options.keep_missing:
        gone_docs = [d for d, (r, _) in store.document_hashes().items() if r in dropped]
        for r in dropped:
            recorded.pop(r, None)
    store.set_sources(recorded)
    if gone_docs:
        store.remove_documents(gone_docs)
        report.removed.extend(sorted(gone_docs))
    from .markup import MarkupRules

    rules_shown = None
    for job, (sources_, unreadable) in zip(jobs, found):
        options = job.options
        gone = _gone(store, job, unreadable)
        rules = MarkupRules.parse(options.markup_off)
        rules_shown = rules_shown or rules
        opts = {"encoding": options.encoding} if options.encoding else {}
        opts["markup"] = sorted(rules.off)  # what the clean-up did is part of a parse: a change re-parses
        if options.include_root and options.include_root != ".":
            opts["include_root"] = options.include_root
        if options.meta_from_path:
            opts["meta_from_path"] = list(options.meta_from_path)
        opts_json = json.dumps(opts, sort_keys=True)
        meta_json = json.dumps(options.metadata, sort_keys=True)
        known = store.document_hashes()
        root = job.root
        seen = set()
        if progress:
            progress("parsing", 0, len(sources_))
        for item in sources_:
            seen.add(item.doc_id)
            try:
                status = _ingest_one(store, item, root, known, meta_json, opts_json, options, report, progress)
            except ParseError as exc:
                empty = isinstance(exc, EmptyDocumentError)
                entry = ({"path": item.doc_id, "reason": f"{exc}: nothing to index"} if empty
                         else {"doc_id": item.doc_id, "path": str(item.path), "reason": str(exc)})
                if item.doc_id in known and known[item.doc_id][0] == root:
                    # Never answer from content that no longer exists.
                    store.remove_documents([item.doc_id])
                    entry["removed_previous_version"] = True
                (report.skipped if empty else report.failed).append(entry)
                status = None
            if status:
                getattr(report, status).append(item.doc_id)
            if progress:
                progress("parsing", 1, len(sources_))
        if not options.keep_missing:
            gone = sorted(set(gone) - seen)
            store.remove_documents(gone)
            report.removed.extend(gone)
    if rules_shown is not None:
        store.manifest["markup"] = rules_shown.to_dict()
    # A folder ingested before inside one ingested now: its documents moved into it, so does its record.
    roots_now = store.document_roots()
    absorbed = [r for r in store.manifest.get("sources") or {}
                if r not in roots_now and not r.startswith("beir:") and any(
                    j.root != r and not j.root.startswith("beir:") and Path(r).is_relative_to(j.root) for j in jobs)]
    for r in absorbed:
        store.manifest["sources"].pop(r)
    doc_ids = store.document_ids()
    for job in jobs:
        for pattern in job.options.meta_from_path:
            if not any(path_pattern(pattern).match(d) for d in doc_ids):
                report.warnings.append(f"meta_from_path {pattern!r} matches no document id (ids look like "
                                       f"{next(iter(doc_ids), 'a/b.md')!r}: relative to the folder ingested)")
    store.manifest["last_ingest"] = now_iso()
    store.save_manifest()
    if options.parse_only:
        return report
    report.chunks_written = chunk(store, chunk_params, embedder=embedder, progress=progress)
    report.index = index(store, embedder=embedder, progress=progress)
    return report


def _discover_job(job, report: IngestReport) -> tuple[list, list[str] | None]:
    """(the job's sources, id prefixes of folders that could not be read — None for a single file)."""
    options, path = job.options, job.path
    prefix_id = options.id_prefix or ""
    if options.format == "beir":
        return list(read_beir_corpus(path, report.failed, prefix_id)), []
    base = Path(job.root)
    if path.is_file():
        if path.suffix.lower() not in SUPPORTED:
            report.skipped.append({"path": str(path), "reason": f"unsupported file type {path.suffix}"})
            return [], None
        return [_Source(prefix_id + path.relative_to(base).as_posix(), path=path)], None
    unreadable: list[str] = []
    items = list(discover(path, base, options.include, options.exclude, report.skipped, unreadable, prefix_id))
    return items, unreadable


def _gone(store: Store, job, unreadable: list[str] | None) -> list[str]:
    """Ids of documents the job's folder held before (it mirrors them): those it no longer brings go."""
    if unreadable is None:  # a single file
        return []
    options, path = job.options, job.path
    known = store.document_hashes()
    prefix_id = options.id_prefix or ""
    if options.format == "beir":
        return [d for d, (r, _) in known.items() if r == job.root]
    base = Path(job.root)
    prefix = prefix_id + ("" if path == base else path.relative_to(base).as_posix() + "/")
    return [d for d, (r, _) in known.items()
            if ((r == job.root and d.startswith(prefix) and _selected(d[len(prefix):], options.include, options.exclude))
                or (r != job.root and not r.startswith("beir:") and Path(r).is_relative_to(path)))  # an old nested root
            and not any(d.startswith(prefix_id + u) for u in unreadable)]


def _resolve_clashes(store: Store, jobs: list, found: list, report: IngestReport) -> None:
    """Ids a job brings that another root (not nested in it, not moved to it) already holds: a
    UsageError naming the ways out, before anything is written."""
    known = store.document_hashes()
    for job, (items, _) in zip(jobs, found):
        others: dict[str, list[str]] = {}
        for item in items:
            prev = known.get(item.doc_id)
            if prev is None or prev[0] == job.root or prev[0] in job.moved_from:
                continue
            r = prev[0]
            if not r.startswith("beir:") and not job.root.startswith("beir:") and Path(r).is_relative_to(Path(job.root)):
                continue  # a nested root ingested before: its files move into this one
            others.setdefault(r, []).append(item.doc_id)
        for r, ids in others.items():
            raise UsageError(
                f"{job.path}: {len(ids)} document id(s) (e.g. {ids[0]!r}) already come from {r}: give this folder "
                f"its own id prefix (--id-prefix NAME/, or data.sources[].id_prefix), or if {r} moved here, "
                f"--root-moved {r} {job.path}")


def _root_for(path: Path, roots: set[str]) -> Path | None:
    """The longest existing ingest root that contains ``path`` (or is it)."""
    best = None
    for r in roots:
        rp = Path(r)
        if path.is_relative_to(rp) and (best is None or len(rp.parts) > len(best.parts)):
            best = rp
    return best


def _ingest_one(store: Store, src: _Source, root: str, known: dict, meta_json: str, opts_json: str,
                options: IngestOptions, report: IngestReport | None = None, progress: Progress | None = None) -> str:
    prev = known.get(src.doc_id)
    if prev and prev[0] != root:
        if not Path(prev[0]).is_relative_to(Path(root)):
            raise ParseError(f"document id {src.doc_id!r} already comes from {prev[0]}: ingest one root per id")
        prev = None  # the same file was ingested before from a nested root: it moves to this one
    if src.beir is not None:
        sha = src.beir["hash"]
        data = mtime = None
    else:
        data, mtime = read_file(src.path, options.max_file_size)
        sha = sha256_bytes(data)
    # The run's --meta and parse options are stored with the document: the same file, metadata and
    # options is unchanged — unless a file it includes changed.
    stored_opts = json.dumps({**json.loads(opts_json), "meta": json.loads(meta_json)}, sort_keys=True)
    if prev and prev[1] == fingerprint(sha, stored_opts) and not _includes_changed(store, src.doc_id, root):
        return "unchanged"
    if src.beir is not None:
        doc: ParsedDocument = beir_document(src.doc_id, src.beir["title"], src.beir["text"], sha)
        doc.path = str(src.path)
        if not doc.blocks:
            raise EmptyDocumentError("record has neither title nor text")
    else:
        from .markup import MarkupRules
        from .parse import MarkupContext

        ingest_root = Path(root)
        include_root = (ingest_root / options.include_root).resolve() if options.include_root else ingest_root
        inside = _inside_file(progress, src.doc_id, len(data))
        doc = parse_file(src.path, src.doc_id, encoding=options.encoding, max_bytes=options.max_file_size,
                         data=data, mtime=mtime,
                         markup=MarkupContext(MarkupRules.parse(options.markup_off), ingest_root, include_root,
                                              lambda rel: any(fnmatch.fnmatch(rel, p) for p in options.exclude)),
                         progress=inside)
        if inside:
            inside(1, 1)  # formats parsed in one go (HTML, PDF, DOCX) finish their bar here
        if report is not None:
            for k, v in doc.markup_stats.items():
                report.markup[k] = report.markup.get(k, 0) + v
            report.missing_includes.extend({"doc_id": src.doc_id, "include": t} for t in doc.missing_includes)
    # The document's own metadata (front matter), then the path's, then the run's --meta win.
    metadata = {**doc.metadata, **path_metadata(src.doc_id, options.meta_from_path), **json.loads(meta_json)}
    stored = json.loads(stored_opts)
    if doc.includes:  # relative to the root: a moved folder finds them again
        stored["includes"] = {(Path(p).relative_to(root).as_posix() if Path(p).is_relative_to(root) else p): sha
                              for p, sha in doc.includes.items()}
    store.put_document(doc, root, metadata, stored)
    return "updated" if prev else "added"


def _includes_changed(store: Store, doc_id: str, root: str) -> bool:
    """Whether a file this document included is gone or different since it was parsed."""
    import hashlib

    for rel, sha in store.document_options(doc_id).get("includes", {}).items():
        path = Path(root) / rel  # an absolute path (stores before 0.x) stays as it is
        if sha == "":  # missing when parsed: changed once it exists
            if Path(path).is_file():
                return True
            continue
        try:
            body = Path(path).read_text(encoding="utf-8", errors="replace").replace("\r\n", "\n")
        except OSError:
            return True
        if hashlib.sha256(body.encode("utf-8")).hexdigest() != sha:
            return True
    return False
