"""ingest → chunk → index as library functions. The CLI commands are thin wrappers over these."""

from __future__ import annotations

import fnmatch
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable, Iterator

from .chunk import ChunkParams
from .errors import InputError, ParseError
from .parse import SUPPORTED, ParsedDocument, beir_document, parse_file, sha256_bytes
from .store import IndexReport, Store, now_iso

# progress(stage, advance, total): stage is "parsing", "chunking" or "embedding".
Progress = Callable[[str, int, int], None]


@dataclass
class IngestOptions:
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    format: str = "auto"  # auto | beir
    metadata: dict = field(default_factory=dict)
    parse_only: bool = False
    keep_missing: bool = False
    encoding: str | None = None
    max_file_size: int = 50 * 2**20


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
    def hit(patterns):
        return any(fnmatch.fnmatch(rel, p) or PurePosixPath(rel).match(p) for p in patterns)

    return (not include or hit(include)) and not hit(exclude)


def discover(root: Path, include: list[str], exclude: list[str], skipped: list[dict]) -> Iterator[_Source]:
    """Files under root, sorted; hidden entries skipped; no link is followed out of root."""
    real_root = root.resolve()
    for dirpath, dirnames, filenames in os.walk(real_root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            full = Path(dirpath) / name
            rel = full.relative_to(real_root).as_posix()
            if not _selected(rel, include, exclude):
                continue
            if full.is_symlink():
                target = full.resolve()
                if not target.is_relative_to(real_root):
                    skipped.append({"path": rel, "reason": "symlink pointing outside the ingest root"})
                    continue
            if full.suffix.lower() not in SUPPORTED:
                skipped.append({"path": rel, "reason": f"unsupported file type {full.suffix or '(none)'}"})
                continue
            yield _Source(rel, path=full)


def read_beir_corpus(root: Path) -> Iterator[_Source]:
    corpus = root / "corpus.jsonl"
    if not corpus.is_file():
        raise InputError(f"{root} has no corpus.jsonl: --format beir expects a BEIR folder")
    with corpus.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                doc_id = str(rec["_id"])
            except (ValueError, KeyError, TypeError) as exc:
                raise InputError(f"{corpus}:{lineno}: not a BEIR record with an _id ({exc})") from exc
            yield _Source(doc_id, path=corpus, beir={"title": rec.get("title") or "", "text": rec.get("text") or "",
                                                    "hash": sha256_bytes(line.strip().encode("utf-8"))})


def ingest(store: Store, paths: list[str | Path], options: IngestOptions | None = None, *, embedder=None,
           chunk_params: ChunkParams | None = None, progress: Progress | None = None) -> IngestReport:
    """Bring the store in line with the given files or folders; see IngestOptions."""
    options = options or IngestOptions()
    report = IngestReport()
    known = store.document_hashes()
    meta_json = json.dumps(options.metadata, sort_keys=True)
    touched: list[str] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise InputError(f"{raw}: no such file or folder")
        if options.format == "beir":
            root = path.resolve()
            sources = list(read_beir_corpus(root))
        elif options.format == "auto":
            if path.is_file():
                root = path.resolve().parent
                sources = [_Source(path.name, path=path.resolve())]
                if path.suffix.lower() not in SUPPORTED:
                    report.skipped.append({"path": str(raw), "reason": f"unsupported file type {path.suffix}"})
                    sources = []
            else:
                root = path.resolve()
                sources = list(discover(root, options.include, options.exclude, report.skipped))
        else:
            raise InputError(f"unknown --format {options.format!r}: use auto or beir")
        seen = set()
        for src in sources:
            if progress:
                progress("parsing", 0, len(sources))
            seen.add(src.doc_id)
            try:
                status = _ingest_one(store, src, root, known, meta_json, options)
            except ParseError as exc:
                report.failed.append({"doc_id": src.doc_id, "path": str(src.path), "reason": str(exc)})
                status = None
            if status:
                getattr(report, status).append(src.doc_id)
                if status != "unchanged":
                    touched.append(src.doc_id)
            if progress:
                progress("parsing", 1, len(sources))
        if path.is_dir() and not options.keep_missing:
            gone = sorted(d for d, (_, r, _) in known.items() if r == str(root) and d not in seen)
            if options.format == "auto":
                gone = [d for d in gone if _selected(d, options.include, options.exclude)]
            store.remove_documents(gone)
            report.removed.extend(gone)
    store.manifest["last_ingest"] = now_iso()
    store.save_manifest()
    if options.parse_only:
        return report
    report.chunks_written = chunk(store, chunk_params, embedder=embedder, progress=progress)
    report.index = index(store, embedder=embedder, progress=progress)
    return report


def _ingest_one(store: Store, src: _Source, root: Path, known: dict, meta_json: str, options: IngestOptions) -> str:
    prev = known.get(src.doc_id)
    if prev and prev[1] != str(root):
        raise ParseError(f"document id {src.doc_id!r} already comes from {prev[1]}: ingest one root per id")
    if src.beir is not None:
        sha = src.beir["hash"]
    else:
        size = src.path.stat().st_size
        if size > options.max_file_size:
            raise ParseError(f"{size} bytes is larger than --max-file-size {options.max_file_size}")
        sha = sha256_bytes(src.path.read_bytes())
    if prev and prev[0] == sha and prev[2] == meta_json:
        return "unchanged"
    if src.beir is not None:
        doc: ParsedDocument = beir_document(src.doc_id, src.beir["title"], src.beir["text"], sha)
        doc.path = str(src.path)
        if not doc.blocks:
            raise ParseError("record has neither title nor text")
    else:
        doc = parse_file(src.path, src.doc_id, encoding=options.encoding, max_bytes=options.max_file_size)
    store.put_document(doc, str(root), json.loads(meta_json))
    return "updated" if prev else "added"


def chunk(store: Store, params: ChunkParams | None = None, *, embedder=None, all_documents: bool = False,
          progress: Progress | None = None) -> int:
    """Chunk every document not yet chunked with these parameters (all of them with all_documents)."""
    embedder = embedder or _embedder_for(store)
    if params is None:
        params = ChunkParams(**store.manifest["chunking"]) if store.manifest.get("chunking") else ChunkParams()
    params = params.resolved(embedder.max_tokens)
    todo = store.documents_to_chunk(params)
    if all_documents:
        todo = [r[0] for r in store.db.execute("SELECT doc_id FROM documents ORDER BY doc_id")]
    cb = (lambda n: progress("chunking", n, len(todo))) if progress else None
    return store.chunk_documents(todo, params, embedder.count_tokens, progress=cb)


def index(store: Store, *, embedder=None, rebuild: bool = False, progress: Progress | None = None) -> IndexReport:
    embedder = embedder or _embedder_for(store)
    return store.sync_indexes(embedder, progress=progress, rebuild=rebuild)


def _embedder_for(store: Store):
    from .embed import load_embedder

    return load_embedder(store.model_id)
