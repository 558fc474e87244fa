"""Sources: the folders a store is ingested from, each with the options it is ingested with.

A store remembers its sources (``manifest.sources``: root -> options), so ``kbtool ingest`` run
again without flags keeps them; options given that differ from the record are refused unless the
record is to change (``update_sources``). A contract may declare them instead (``data.sources``,
roots relative to the contract's folder): then ``kbtool ingest`` with no path ingests exactly those,
and a checkout in another folder (a CI cache restored elsewhere) finds its documents again.
"""

from __future__ import annotations

import os

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError

if TYPE_CHECKING:
    from ..store import Store

# The options that belong to a source (recorded, compared); the rest of IngestOptions is per run.
SOURCE_OPTIONS = ("include", "exclude", "format", "metadata", "meta_from_path", "include_root", "id_prefix",
                  "base_url", "encoding", "markup_off", "max_file_size")
DEFAULTS = {"include": [], "exclude": [], "format": "auto", "metadata": {}, "meta_from_path": [],
            "include_root": None, "id_prefix": "", "base_url": None, "encoding": None, "markup_off": [],
            "max_file_size": None}
# How the CLI spells each option, for messages.
FLAGS = {"include": "--include", "exclude": "--exclude", "format": "--format", "metadata": "--meta",
         "meta_from_path": "--meta-from-path", "include_root": "--include-root", "id_prefix": "--id-prefix",
         "base_url": "--base-url", "encoding": "--encoding", "markup_off": "--markup-off",
         "max_file_size": "--max-file-size"}


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
    # seconds one file's parsing may take (per run, not recorded); None: parse.PARSE_TIMEOUT, 0: none
    parse_timeout: float | None = None


@dataclass
class Job:
    """One path to ingest now: under ``root`` (the source it belongs to), with the source's options."""

    path: Path  # the folder or file to walk (resolved)
    root: str  # the source's root: an absolute folder, or beir:FOLDER
    options: IngestOptions  # every source option filled in
    declared: str | None = None  # the root as the contract wrote it
    moved_from: list[str] = field(default_factory=list)  # old roots whose documents now come from here


def record(options, declared: str | None = None, paths: list[str] | None = None) -> dict:
    """The manifest record of a source: its options (include_root relative to the root)."""
    rec = {k: getattr(options, k) for k in SOURCE_OPTIONS}
    if declared is not None:
        rec["declared"] = declared
    rec["paths"] = sorted(set(paths or ["."]))
    return rec


def filled(options, recorded: dict | None, where: str, update: bool):
    """``options`` with every source option not given (None) taken from the record, else the
    default. A given option that differs from the record is a UsageError unless ``update``."""
    recorded = recorded or {}
    differ = []
    values = {}
    for k in SOURCE_OPTIONS:
        given = getattr(options, k)
        old = recorded.get(k, DEFAULTS[k]) if recorded else DEFAULTS[k]
        if k == "id_prefix" and given is not None:  # 'zh' and 'zh/' are the same prefix
            from ..document import normalise_id_prefix

            try:
                given = normalise_id_prefix(given)
            except ValueError as exc:
                raise UsageError(f"{where}: {exc}") from None
        if given is None:
            values[k] = old
        else:
            if recorded and _norm(given) != _norm(old) and not update:
                differ.append((k, given, old))
            values[k] = given
    if differ:
        k, given, old = differ[0]
        more = f" (and {', '.join(FLAGS[d[0]] for d in differ[1:])})" if differ[1:] else ""
        raise UsageError(f"{where}: {FLAGS[k]} {_show(given, k)} differs from what the store recorded for this "
                         f"source ({_show(old, k)}){more}: leave it out to keep the recorded value, or pass "
                         f"--update-sources to change the record (documents are re-parsed as needed)")
    from ..document import normalise_id_prefix

    try:
        values["id_prefix"] = normalise_id_prefix(values["id_prefix"])
    except ValueError as exc:
        raise UsageError(f"{where}: {exc}") from None
    url = values["base_url"]
    if url and not url.startswith(("http://", "https://")):
        raise UsageError(f"{where}: base URL {url!r} must start with http:// or https://")
    return replace(options, **values)


def _norm(v):
    if isinstance(v, list):
        return sorted(v)
    return v


def _show(v, key: str = "") -> str:
    if key == "max_file_size" and isinstance(v, int):
        return f"{v / 2**20:g}"  # the flag is in MB
    if v in (None, "", [], {}):
        return "none"
    if isinstance(v, dict):
        return ",".join(f"{k}={x}" for k, x in sorted(v.items()))
    if isinstance(v, list):
        return ",".join(map(str, v))
    return str(v)


def from_record(rec: dict) -> IngestOptions:
    """IngestOptions of a recorded source (per-run options at their defaults)."""
    return IngestOptions(**{k: rec.get(k, DEFAULTS[k]) for k in SOURCE_OPTIONS})


def declared_sources(contract, contract_path: Path | None) -> list[tuple[Path, IngestOptions, str]]:
    """(root resolved against the contract's folder, IngestOptions, root as written) per declared source."""
    base = contract_path.resolve().parent if contract_path is not None else Path.cwd()
    out = []
    for i, s in enumerate(contract.data.sources):
        root = Path(s.root).expanduser()
        root = (root if root.is_absolute() else base / root).resolve()
        if not root.exists():
            raise UsageError(f"{contract_path or 'contract'}: data.sources[{i}].root {s.root!r} does not exist "
                             f"(resolved against {base}: {root})")
        opts = IngestOptions(
            include=list(s.include), exclude=list(s.exclude), format=s.format, metadata=dict(s.meta),
            meta_from_path=list(s.meta_from_path), include_root=s.include_root, id_prefix=s.id_prefix,
            base_url=s.base_url, encoding=s.encoding, markup_off=list(s.markup_off),
            max_file_size=None if s.max_file_size_mb is None else int(s.max_file_size_mb * 2**20))
        out.append((root, opts, s.root))
    return out


def binds(contract, contract_path: Path, store: Path | None, paths=()) -> bool:
    """Whether a contract found in the working directory (``./kbtool.yaml``, not named by
    ``--contract`` or $KBTOOL_CONTRACT) declares the sources of ``store`` (None: the default one):
    the store beside it (``.kb`` in its folder), a store built from a contract's ``data.sources``,
    or a store that records no source yet, built now from them (no path given, or only paths under
    a declared root). Any other store was built from folders named on the command line: the
    contract's sources are not its, and an ingest into it does not apply them."""
    from ..errors import StoreError
    from ..store import DEFAULT_STORE, default_store_path
    from ..store import manifest as store_manifest

    home = contract_path.resolve().parent
    where = Path(store or default_store_path())
    if where.resolve() == (home / DEFAULT_STORE).resolve():
        return True
    if (where / "manifest.json").is_file():
        try:
            recorded = store_manifest.read(where).get("sources") or {}
        except StoreError:
            return True  # opening the store says what is wrong with it
        if recorded:
            return any(rec.get("declared") for rec in recorded.values())
    roots = [(home / Path(s.root).expanduser()).resolve() for s in contract.data.sources]
    return all(any(Path(raw).resolve().is_relative_to(root) for root in roots) for raw in paths)


def plan(store: Store, paths, options: IngestOptions, declared, update: bool, root_moved) -> tuple[list, list[str]]:
    """(jobs, roots of sources no longer declared). Raises UsageError for option clashes."""
    recorded = store.sources()
    doc_roots = set(store.document_roots())
    for root in doc_roots - set(recorded):  # a store from before sources were recorded
        rec = _legacy_record(store, root)
        if rec is not None:
            recorded[root] = rec
    if declared and root_moved:
        raise UsageError("--root-moved: the contract declares the sources (data.sources): a declared root that "
                         "moved is found by its entry; drop --root-moved")
    moves = {}
    for o, n in root_moved or []:
        beir = str(o).startswith("beir:")
        old = str(Path(str(o).removeprefix("beir:")).resolve())
        if not beir and old not in doc_roots | set(recorded) and "beir:" + old in doc_roots | set(recorded):
            beir = True  # a BEIR folder named by its folder
        moves[("beir:" if beir else "") + old] = ("beir:" if beir else "") + str(Path(n).resolve())
    for old in moves:
        if old not in doc_roots and old not in recorded:
            raise UsageError(f"root moved from {old}: the store has no documents from there (its roots: "
                             f"{', '.join(sorted(doc_roots | set(recorded))) or 'none'})")
    given = {k: getattr(options, k) for k in SOURCE_OPTIONS if getattr(options, k) not in (None,)}
    jobs: list = []
    dropped: list[str] = []
    if declared and paths:
        roots = [r for r, _, _ in declared]
        for raw in paths:
            real = Path(raw).resolve()
            if not any(real.is_relative_to(r) for r in roots):
                raise UsageError(f"{raw} is not under a source the contract declares (data.sources): add it there, "
                                 "or ingest it into another store (a kbtool.yaml found in the working directory "
                                 "declares the sources of its own store only; a contract named by --contract "
                                 "or $KBTOOL_CONTRACT, of any)")
    if declared:
        if given:
            k = next(iter(given))
            raise UsageError(f"{FLAGS[k]}: the contract declares the sources (data.sources): set "
                             f"{'meta' if k == 'metadata' else k} there")
        by_declared: dict[str, list[str]] = {}
        for root, rec in recorded.items():
            if rec.get("declared"):
                by_declared.setdefault(rec["declared"], []).append(root)
        for root, opts, written in declared:
            key = ("beir:" if opts.format == "beir" else "") + str(root)
            opts = _absolute_include_root(opts, root, f"data.sources root {written!r}")
            job = Job(root, key, filled(replace(opts, parse_only=options.parse_only,
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
            # a root with documents but no record is dropped too (a run killed after the record was written)
            dropped = sorted(r for r in set(recorded) | doc_roots if r not in keys)
    elif paths:
        earlier: set[str] = set()  # folders of this run: `ingest docs docs/sub` is one root, not two
        for raw in sorted(paths, key=lambda p: len(Path(p).resolve().parts)):
            real = Path(raw).resolve()
            fmt = given.get("format") or ("beir" if "beir:" + str(real) in recorded else "auto")
            if fmt == "beir":
                key = "beir:" + str(real)
                rec = recorded.get(key)
            else:
                base = _root_for(real, {r for r in doc_roots | set(recorded) | set(moves.values()) | earlier
                                        if not r.startswith("beir:")})
                key = str(base or (real if real.is_dir() else real.parent))
                rec = recorded.get(key)
                if rec is not None and rec.get("format") == "beir":
                    rec = None
            moved_from = [o for o, n in moves.items() if n == key]
            if not moved_from and real.is_dir() and fmt != "beir":
                moved_from = _moved_here(store, real, (doc_roots | set(recorded)) - {key})
            if rec is None and moved_from:  # a moved folder keeps its options
                rec = recorded.get(moved_from[0])
            here = Path(key.removeprefix("beir:"))
            # a given include root is compared with the record as recorded: relative to the root
            opts = filled(_absolute_include_root(replace(options, format=fmt), here, str(raw)), rec, str(raw), update)
            opts = _absolute_include_root(opts, here, str(raw))
            jobs.append(Job(real, key, opts, moved_from=moved_from))
            if fmt != "beir" and real.is_dir():
                earlier.add(key)
    else:
        if given:
            k = next(iter(given))
            raise UsageError(f"{FLAGS[k]} needs the folder it applies to: kbtool ingest PATH {FLAGS[k]} ...")
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
            target = Path(moves[key].removeprefix("beir:")) if key in moves else root
            if not target.exists():
                raise UsageError(f"{key}: the source folder is gone: ingest it from where it is now "
                                 f"(kbtool ingest NEW_PATH, or --root-moved {key} NEW_PATH)")
            opts = replace(from_record(rec), parse_only=options.parse_only,
                           keep_missing=options.keep_missing)
            new_key = ("beir:" if key.startswith("beir:") else "") + str(target)
            for rel in rec.get("paths") or ["."]:
                p = (target / rel).resolve()
                # a recorded file or folder deleted since is a job too: its documents go (pipeline._gone)
                jobs.append(Job(p, new_key, opts, rec.get("declared"),
                                ([key] if new_key != key else []) + taken.get(key, [])))
    return jobs, dropped


def _legacy_record(store: Store, root: str) -> dict | None:
    """The record of a root ingested before stores recorded their sources, from the options its
    documents were parsed with (their --meta above all), when all of them agree; else None."""
    import json

    seen = set()
    for doc_id, (r, _) in store.document_hashes().items():
        if r == root:
            o = store.document_options(doc_id)
            seen.add(json.dumps({k: o.get(k) for k in ("meta", "encoding", "markup", "meta_from_path", "include_root")},
                                sort_keys=True))
    if len(seen) != 1:
        return None
    o = json.loads(seen.pop())
    inc = o["include_root"]
    if inc and Path(inc).is_absolute() and Path(inc).is_relative_to(root):
        inc = Path(inc).relative_to(root).as_posix()
    return {**DEFAULTS, "format": "beir" if root.startswith("beir:") else "auto", "metadata": o["meta"] or {},
            "encoding": o["encoding"], "markup_off": o["markup"] or [], "meta_from_path": o["meta_from_path"] or [],
            "include_root": inc, "paths": ["."]}


def _moved_here(store: Store, folder: Path, roots: set[str]) -> list[str]:
    """The root whose folder is gone and whose files (by path relative to it) are mostly in
    ``folder``: the same documents, moved (a CI cache restored into another checkout)."""
    best, best_key = None, None
    for root in sorted(roots):
        if root.startswith("beir:") or Path(root).exists():
            continue
        rels = [Path(p).relative_to(root) for p in store.document_paths(root) if Path(p).is_relative_to(root)]
        found = sum((folder / r).is_file() for r in rels)
        if rels and found * 2 >= len(rels):
            # Several gone roots with the same file names (docs/en/docs, docs/zh/docs moved together):
            # the one whose path ends like this folder's, then the one with more files found.
            tail = 0
            for a, b in zip(reversed(Path(root).parts), reversed(folder.parts)):
                if a != b:
                    break
                tail += 1
            key = (tail, found / len(rels))
            if best_key is None or key > best_key:
                best, best_key = root, key
    return [best] if best else []


def _absolute_include_root(opts: IngestOptions, root: Path, where: str) -> IngestOptions:
    """include_root relative to the root (as recorded): an absolute one (the CLI's) made relative."""
    if not opts.include_root or opts.format == "beir":
        return opts
    p = Path(opts.include_root)
    real = (p if p.is_absolute() else root / p).resolve()
    folder = root if root.is_dir() else root.parent
    if not real.is_dir():
        raise UsageError(f"{where}: include root {opts.include_root} is not a folder: name the folder include "
                         "directives resolve against")
    if not real.is_relative_to(folder):
        repo = repository_of(folder)
        if repo is None or not real.is_relative_to(repo):
            raise UsageError(f"{where}: include root {opts.include_root} is outside {folder}"
                             + (f" and outside its repository {repo}" if repo else " (not in a git repository)")
                             + ": kbtool reads outside the folder it ingests only within the same repository")
    return replace(opts, include_root=os.path.relpath(real, folder).replace(os.sep, "/"))


def repository_of(folder: Path) -> Path | None:
    """The git work tree a folder lies in (the nearest folder above holding ``.git``), or None."""
    for d in (folder.resolve(), *folder.resolve().parents):
        if (d / ".git").exists():
            return d
    return None


def check_clashes(store: Store, jobs: list, found: list) -> None:
    """Ids a job brings that another root (not nested in it, not moved to it) already holds: a
    UsageError naming the ways out, before anything is written."""
    known = store.document_hashes()
    run: dict[str, Job] = {}  # id -> the job of this run that brings it
    for job, (items, _) in zip(jobs, found):
        others: dict[str, list[str]] = {}
        for item in items:
            first = run.setdefault(item.doc_id, job)
            if first.root != job.root:
                where = lambda j: f"data.sources root {j.declared!r}" if j.declared else str(j.path)  # noqa: E731
                raise UsageError(
                    f"{where(job)}: document id {item.doc_id!r} also comes from {where(first)} (the same id from two "
                    f"sources): give one of them its own id prefix, or exclude the nested folder from the other")
            prev = known.get(item.doc_id)
            if prev is None or prev[0] == job.root or prev[0] in job.moved_from:
                continue
            r = prev[0]
            if not r.startswith("beir:") and not job.root.startswith("beir:") and Path(r).is_relative_to(Path(job.root)):
                continue  # a nested root ingested before: its files move into this one
            others.setdefault(r, []).append(item.doc_id)
        for r, ids in others.items():
            if job.declared:
                raise UsageError(
                    f"data.sources root {job.declared!r}: {len(ids)} document id(s) (e.g. {ids[0]!r}) already come "
                    f"from {r}: give this source its own id_prefix in the contract")
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

