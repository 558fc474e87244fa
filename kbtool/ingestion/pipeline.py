"""ingest(): discover files, parse what changed, then chunk (``kbtool.chunk``) and index
(``kbtool.index``). The CLI commands are thin wrappers over these library functions."""

from __future__ import annotations

import codecs
import fnmatch
import json
import os
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from ..chunk import ChunkParams, chunk
from ..document import ParsedDocument, check_metadata_keys, fingerprint, path_metadata, path_pattern
from ..errors import EmptyDocumentError, InputError, NoDocumentsError, ParseError, UsageError
from ..index import IndexReport, index
from ..store import Store
from .parse import PARSE_TIMEOUT, PARSER_VERSIONS, SUPPORTED, beir_document, decode_text, parse_file, read_file, sha256_bytes
from .sources import IngestOptions, check_clashes, plan

MIN_KEPT_TEXT = 0.98  # the contract's data.min_kept_text by default
UNSUPPORTED = "unsupported file type"  # a skipped file's reason: UNSUPPORTED + " " + its extension (or "(none)")
REMOVED_PREVIOUS = "its earlier version was removed from the store"
MEASURED = ("md", "txt", "html")  # the types the kept-text guard reads (ingestion/kept.py)

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
    # the kept-text guard after the run: {threshold, measured, below: [{doc_id, path, kept, missing}]}
    kept_text: dict = field(default_factory=dict)
    # the MkDocs sites whose mkdocs.yml was read (ingestion.mkdocs.Site.summary, plus the root)
    mkdocs: list = field(default_factory=list)

    def to_dict(self, unchanged: bool = False) -> dict:
        """The report as JSON data: ``counts`` of every kind; the documents added, updated and removed,
        the failures each with its reason; skipped files grouped by reason (``skipped_by_reason``);
        the unchanged documents by name only with ``unchanged`` (a re-ingest of a large folder would
        list them all)."""
        d = asdict(self)
        d["counts"] = {k: len(getattr(self, k)) for k in ("added", "updated", "unchanged", "removed", "failed", "skipped")}
        d["skipped"] = self.skipped_by_reason()
        if not unchanged:
            del d["unchanged"]
        return d

    def skipped_by_reason(self) -> dict[str, list[str]]:
        """{reason: the paths skipped for it}, reasons in the order first met, e.g. ``{"unsupported
        file type .png": ["img/a.png", ...], "empty file: nothing to index": ["draft.md"]}``. A file
        whose earlier version left the store says so in its reason."""
        grouped: dict[str, list[str]] = {}
        for s in self.skipped:
            reason = s["reason"] + (f" ({REMOVED_PREVIOUS})" if s.get("removed_previous_version") else "")
            grouped.setdefault(reason, []).append(s["path"])
        return grouped


@dataclass
class _Source:
    doc_id: str
    path: Path | None = None
    beir: dict | None = None


def _selected(rel: str, include: list[str], exclude: list[str]) -> bool:
    """Globs match the path relative to the source's root (``*`` also crosses ``/``)."""
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
            rel = full.relative_to(base).as_posix()  # the source's globs: relative to its root
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
                skipped.append({"path": doc_id, "reason": f"{UNSUPPORTED} {full.suffix or '(none)'}"})
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


def ingest(store: Store, paths: list[str | Path] | None = None, options: IngestOptions | None = None, *,
           embedder=None, chunk_params: ChunkParams | None = None, progress: Progress | bool | None = None,
           sources: list | None = None, update_sources: bool = False,
           root_moved: list[tuple[str | Path, str | Path]] | None = None,
           min_kept_text: float = MIN_KEPT_TEXT) -> IngestReport:
    """Bring the store in line with the given files or folders, holding the store's writer lock.

    ``paths`` None (or empty) ingests ``sources`` — declared ones, ``(root, IngestOptions, as
    written)`` from ``sources.declared_sources`` — else every source the store recorded. Source
    options not given in ``options`` keep the store's record for that folder; a different value is
    a UsageError unless ``update_sources``. ``root_moved`` pairs (old root, new folder) say a folder
    moved: its documents, chunks and vectors are re-used from the new place (a root whose folder is
    gone is taken as moved when another folder brings the same document ids). ``progress``: a
    callback ``(stage, advance, total)``, or True for plain progress lines on standard error.
    ``min_kept_text`` (the contract's ``data.min_kept_text``): the report's ``kept_text`` lists the
    store's documents whose blocks keep less of their visible text (``ingestion.kept``)."""
    from ..progress import resolve

    progress = resolve(progress)
    for raw in paths or []:  # every path is checked before anything is written, or any lock is waited for
        if not Path(raw).exists():
            raise UsageError(f"{raw}: no such file or folder")
    for old, new in root_moved or []:
        if not Path(new).is_dir():
            raise UsageError(f"root moved to {new}: no such folder")
    with store.writing():
        report = _ingest(store, paths, options, embedder=embedder, chunk_params=chunk_params, progress=progress,
                         sources=sources, update_sources=update_sources, root_moved=root_moved)
        report.kept_text = store.kept_below(min_kept_text)
        return report


def _ingest(store: Store, paths, options: IngestOptions | None = None, *, embedder=None,
            chunk_params: ChunkParams | None = None, progress: Progress | None = None, sources=None,
            update_sources: bool = False, root_moved=None) -> IngestReport:
    """Bring the store in line with its sources; see ``ingest``.

    A folder is mirrored: documents whose files are gone leave the store. A path inside a folder
    ingested before keeps that folder as its root, so document ids stay the same.
    """
    options = options or IngestOptions()
    if options.parse_timeout is not None and options.parse_timeout < 0:
        raise UsageError("parse_timeout must be 0 (no limit) or more seconds")
    budget = PARSE_TIMEOUT if options.parse_timeout is None else options.parse_timeout
    jobs, dropped = plan(store, paths, options, sources, update_sources, root_moved)
    for job in jobs:
        _validate(job.options)
    report = IngestReport()
    # Which files each job brings, before anything is written: a clash of ids stops the run here.
    found = [_discover_job(job, report) for job in jobs]
    if paths and not any(items for items, _ in found) and all(j.options.format != "beir" for j in jobs):
        raise NoDocumentsError(nothing_supported(paths, report.skipped, any(j.options.include or j.options.exclude
                                                                             for j in jobs)))
    check_clashes(store, jobs, found)
    sites = _sites(jobs, report)
    recorded = _record_sources(store, jobs, found, sites, report)
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
        gone = _gone(store, job, unreadable, sources_, {j.root for j in jobs})
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
                status = _ingest_one(store, item, root, known, meta_json, opts_json, options, report, progress,
                                     budget, sites.get(root))
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
    # A folder ingested before inside one ingested now: its documents moved into it, so does its record.
    roots_now = store.document_roots()
    absorbed = [r for r in store.manifest.get("sources") or {}
                if r not in roots_now and not r.startswith("beir:") and r not in {j.root for j in jobs} and any(
                    j.root != r and not j.root.startswith("beir:") and Path(r).is_relative_to(j.root) for j in jobs)]
    doc_ids = store.document_ids() if any(j.options.meta_from_path for j in jobs) else []
    for job in jobs:
        for pattern in job.options.meta_from_path:
            if not any(path_pattern(pattern).match(d) for d in doc_ids):
                report.warnings.append(f"meta_from_path {pattern!r} matches no document id (ids look like "
                                       f"{next(iter(doc_ids), 'a/b.md')!r}: relative to the folder ingested)")
    store.record_ingest(None if rules_shown is None else rules_shown.to_dict(), absorbed)
    if options.parse_only:
        return report
    report.chunks_written = chunk(store, chunk_params, embedder=embedder, progress=progress)
    report.index = index(store, embedder=embedder, progress=progress)
    return report


def _record_sources(store: Store, jobs: list, found: list, sites: dict, report: IngestReport) -> dict:
    """The store's source records as this run leaves them (folders moved first, then each job's options,
    paths, MkDocs site and Sphinx projects); written by the caller, before any document."""
    from . import sources as src

    recorded = store.sources()
    for old in {m for j in jobs for m in j.moved_from}:
        new = next(j.root for j in jobs if old in j.moved_from)
        if old != new:
            moved = store.move_root(old, new)
            report.moved.append({"from": old, "to": new, "documents": moved})
            recorded = store.sources()
    for job, (items, _) in zip(jobs, found):  # the record first: a run killed half-way is re-run as given
        rec = recorded.get(job.root) or {}
        rel = "." if job.path == Path(job.root.removeprefix("beir:")) or job.path.is_dir() and not rec else None
        if rel is None:
            base = Path(job.root.removeprefix("beir:"))
            rel = job.path.relative_to(base).as_posix() if job.path.is_relative_to(base) else "."
        paths_before = rec.get("paths") or []  # a part ingested again never narrows the record
        recorded[job.root] = src.record(job.options, job.declared, paths_before + [rel])
        if sites.get(job.root):  # what was read of its mkdocs.yml: query-time URLs use it
            recorded[job.root]["mkdocs"] = sites[job.root].record()
        if "." in recorded[job.root]["paths"]:
            recorded[job.root]["paths"] = ["."]
        sphinx = _sphinx_sites(job, items, rec.get("sphinx") if rel != "." else None)
        if sphinx:
            recorded[job.root]["sphinx"] = sphinx
    return recorded


def _sites(jobs: list, report: IngestReport) -> dict:
    """root -> the MkDocs site (``ingestion.mkdocs``) whose docs it is or holds, for each folder
    root of the run; what was read goes into the report (once per root)."""
    from .mkdocs import find_site

    sites: dict = {}
    for job in jobs:
        if job.root in sites or job.root.startswith("beir:") or not Path(job.root).is_dir():
            continue
        site, warnings = find_site(Path(job.root))
        sites[job.root] = site
        report.warnings.extend(w for w in warnings if w not in report.warnings)
        if site is not None:
            base = job.options.base_url
            report.mkdocs.append({"root": job.root, **site.summary(
                base, ("data.sources" if job.declared else "--base-url") if base else None)})
    return sites


def _sphinx_sites(job, items: list, before: dict | None) -> dict:
    """The Sphinx projects of the job's ``.rst`` files, {folder: html_baseurl} (``rst.sphinx_sites``),
    over what the record held for the rest of the root (``before``; None: the whole root is walked)."""
    if job.options.format == "beir" or not any(i.path and i.path.suffix.lower() == ".rst" for i in items):
        return dict(before or {})
    from .rst import sphinx_sites

    sites = {**(before or {}), **sphinx_sites(Path(job.root), [i.path for i in items if i.path])}
    return {folder: url for folder, url in sites.items() if url}


def nothing_supported(paths, skipped: list[dict], selected: bool = False) -> str:
    """'docs: no supported document (skipped 12 .png, 3 .css): supported are .md, …' (``selected``:
    include/exclude globs were given)."""
    from collections import Counter

    kinds: Counter = Counter()
    for s in skipped:
        unsupported = s["reason"].startswith("unsupported file type")
        kinds[(Path(s["path"]).suffix.lower() or "(no extension)") if unsupported else "other (see --json)"] += 1
    shown = [f"{n} {kind}" for kind, n in kinds.most_common(6)]
    if len(kinds) > 6:
        shown.append(f"{sum(n for _, n in kinds.most_common()[6:])} more")
    why = ("skipped " + ", ".join(shown) if shown else
           "no file matches the include/exclude globs" if selected else "no file in it")
    return (f"{', '.join(str(p) for p in paths)}: no supported document ({why}): supported are "
            f"{', '.join(SUPPORTED)}")


def _discover_job(job, report: IngestReport) -> tuple[list, list[str] | None]:
    """(the job's sources, id prefixes of folders that could not be read — None for a single file)."""
    options, path = job.options, job.path
    prefix_id = options.id_prefix or ""
    if options.format == "beir":
        return list(read_beir_corpus(path, report.failed, prefix_id)), []
    base = Path(job.root)
    if not path.exists():  # a part of a source recorded before, deleted since
        return [], []
    if path.is_file():
        if path.suffix.lower() not in SUPPORTED:
            report.skipped.append({"path": str(path), "reason": f"{UNSUPPORTED} {path.suffix or '(none)'}"})
            return [], None
        return [_Source(prefix_id + path.relative_to(base).as_posix(), path=path)], None
    unreadable: list[str] = []
    items = list(discover(path, base, options.include, options.exclude, report.skipped, unreadable, prefix_id))
    return items, unreadable


def _gone(store: Store, job, unreadable: list[str] | None, items: list | None = None,
          active: set[str] = frozenset()) -> list[str]:
    """Ids of documents the job's folder held before (it mirrors them): those it no longer brings go,
    so do those ingested under another id prefix of the same root. A root nested in the folder and
    ingested before loses the documents whose files the folder now brings (or that are gone) —
    unless it is itself ingested in this run (a source of its own)."""
    if unreadable is None:  # a single file
        return []
    options, path = job.options, job.path
    known = store.document_hashes()
    prefix_id = options.id_prefix or ""
    if options.format == "beir":
        return [d for d, (r, _) in known.items() if r == job.root]
    base = Path(job.root)
    if not path.exists():  # a recorded file or folder deleted since: its documents go
        files = store.document_files()
        return [d for d, (r, _) in known.items() if r == job.root and files.get(d)
                and (Path(files[d]) == path or Path(files[d]).is_relative_to(path))]
    prefix = prefix_id + ("" if path == base else path.relative_to(base).as_posix() + "/")
    brought = {str(i.path) for i in items or []}
    files = store.document_files()

    def taken_over(d: str, r: str) -> bool:  # a document of an old nested root
        return (r not in active and not r.startswith("beir:") and Path(r).is_relative_to(path)
                and (files.get(d) in brought or not Path(files.get(d) or r).is_file()))

    return [d for d, (r, _) in known.items()
            if ((r == job.root and d.startswith(prefix) and _selected(d[len(prefix_id):], options.include, options.exclude))
                or (r == job.root and not d.startswith(prefix_id))  # ingested under the prefix the root had before
                # outside the source's selection (its include/exclude changed): the store mirrors the source
                or (r == job.root and not _selected(d[len(prefix_id):], options.include, options.exclude))
                or (r != job.root and taken_over(d, r)))
            and not any(d.startswith(prefix_id + u) for u in unreadable)]


def _ingest_one(store: Store, src: _Source, root: str, known: dict, meta_json: str, opts_json: str,
                options: IngestOptions, report: IngestReport | None = None, progress: Progress | None = None,
                timeout: float | None = None, site=None) -> str:
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
    parser = PARSER_VERSIONS.get(SUPPORTED.get(src.path.suffix.lower(), "")) if src.beir is None else None
    # a MkDocs page: its slugify, separator, attr_list and nav title are parse options too (a change re-parses)
    page = site.parse_options(src.path.relative_to(root).as_posix()) if site is not None and src.beir is None else None
    stored_opts = json.dumps({**json.loads(opts_json), "meta": json.loads(meta_json),
                              **({"parser": parser} if parser else {}), **({"mkdocs": page} if page else {})},
                             sort_keys=True)
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
                                              lambda rel: any(fnmatch.fnmatch(rel, p) for p in options.exclude), page),
                         progress=inside, timeout=timeout)
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
    store.put_document(doc, root, metadata, stored, kept=_kept(doc, data, src, options))
    return "updated" if prev else "added"


def _kept(doc: ParsedDocument, data: bytes | None, src: _Source, options: IngestOptions):
    """The kept-text measure of a parsed file (None: a BEIR record, or a type not measured)."""
    if data is None or src.path is None or doc.filetype not in MEASURED:
        return None  # a PDF or DOCX is never decoded as text
    from .kept import measure_document

    try:
        source = decode_text(data, src.doc_id, options.encoding)
    except ParseError:
        return None
    return measure_document(doc, source, src.path.suffix)


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
