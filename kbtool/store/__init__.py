"""The store: one directory holding the manifest, the catalog, the Chroma index and the BM25 index.

Every write goes through ``Store``: documents and chunks into the catalog (the source of truth),
then ``sync_indexes`` makes Chroma and BM25 hold exactly the catalog's chunks.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from .. import __version__
from ..chunk import ChunkParams, chunk_blocks, embed_text
from ..errors import ModelMismatchError, StoreError, UsageError
from ..ingestion.parse import Block, ParsedDocument
from .analyzer import Analyzer, AnalyzerConfig
from .bm25 import BM25Index
from .bm25 import write_json as _write_json
from .catalog import connect, migrate

FORMAT_VERSION = 1
DEFAULT_STORE = ".kb"
COLLECTION = "chunks"
# Chroma's HNSW defaults (ef_search 10) lose recall badly; bench/ann_recall.py measures these.
HNSW = {"space": "cosine", "ef_construction": 200, "ef_search": 128, "max_neighbors": 32}
BM25_PARAMS = {"method": "robertson", "k1": 1.2, "b": 0.75}
RESERVED_META = {"doc_id", "filetype", "dir", "page", "index_hash"}
_CHROMA_BATCH = 5000
_EMBED_COMMIT = 256  # vectors per embedding-cache commit

Progress = Callable[[int], None]


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def default_store_path() -> Path:
    return Path(os.environ.get("KBTOOL_STORE") or DEFAULT_STORE)


@dataclass
class IndexReport:
    chunks: int = 0
    embedded: int = 0
    from_cache: int = 0
    upserted: int = 0
    deleted: int = 0
    bm25_rebuilt: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


class Store:
    """Open with ``Store.open(path)``; ``create=True`` makes a new store if none is there."""

    def __init__(self, path: Path, manifest: dict):
        self.path = path
        self.manifest = manifest
        import sqlite3

        try:
            self.db = connect(path / "catalog.sqlite3")
            migrate(self.db)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{path / 'catalog.sqlite3'} is not a readable catalog ({exc}): the store is damaged; "
                             "re-ingest into a new --store") from None
        self._collection = None
        self._bm25 = None
        self._writer = None
        self.lock_wait: float = 300.0  # seconds a writer waits for another one
        self.on_wait: Callable[[dict], None] | None = None  # told who holds the lock, before waiting

    # ---- opening -------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path | None = None, *, create: bool = False, model=None) -> "Store":
        """``model``: the embedding model of a new store (a name, path, ``openai:URL#name`` or an
        ``EmbeddingSpec``); an existing store keeps its own."""
        path = Path(path) if path else default_store_path()
        manifest_file = path / "manifest.json"
        if path.exists() and not path.is_dir():
            raise StoreError(f"{path} is a file, not a kbtool store: choose another --store")
        if manifest_file.exists() and not (path / "catalog.sqlite3").exists():
            # Never recreate an empty catalog under existing indexes: the next index would wipe them.
            raise StoreError(f"{path} has a manifest but no catalog.sqlite3: the store is damaged "
                             "(its documents cannot be recovered from the indexes); re-ingest into a new --store")
        if not manifest_file.exists():
            if not create:
                raise StoreError(f"no kbtool store at {path}: run `kbtool ingest <folder>` first, or pass --store")
            if path.exists() and any(path.iterdir()):
                raise StoreError(f"{path} exists and is not a kbtool store: choose another --store")
            from ..embed import check_available

            spec = _spec(model)
            check_available(spec)  # fail before anything is written
            path.mkdir(parents=True, exist_ok=True)
            manifest = {
                "format_version": FORMAT_VERSION,
                "kbtool_version": __version__,
                "created_at": now_iso(),
                "embedding": {**spec.to_manifest(), "dim": None, "max_tokens": spec.max_tokens},
                "chunking": None,
                "analyzer": AnalyzerConfig().to_dict(),
                "bm25": dict(BM25_PARAMS),
                "hnsw": dict(HNSW),
                "indexed_generation": -1,
                "last_ingest": None,
            }
            _write_json(manifest_file, manifest)
        else:
            try:
                manifest = json.loads(manifest_file.read_text())
            except (OSError, ValueError) as exc:
                raise StoreError(f"{manifest_file} is unreadable ({exc}): the store is damaged") from exc
        version = manifest.get("format_version")
        if version != FORMAT_VERSION:
            newer = isinstance(version, int) and version > FORMAT_VERSION
            raise StoreError(
                f"store {path} has format {version}, this kbtool reads format {FORMAT_VERSION}: "
                + ("upgrade kbtool" if newer else "re-ingest into a new --store")
            )
        return cls(path, manifest)

    def close(self) -> None:
        self.db.close()

    # ---- one writer at a time ------------------------------------------------------------
    @contextmanager
    def writing(self):
        """Hold the store's writer lock (re-entrant within this Store). A second writer waits up to
        ``lock_wait`` seconds, then fails with StoreError naming the holder. On entry the manifest
        is re-read: another process may have changed the store meanwhile."""
        from filelock import FileLock, Timeout

        if self._writer is None:
            self._writer = FileLock(str(self.path / "writer.lock"))
        first = not self._writer.is_locked
        if first:
            try:
                self._writer.acquire(timeout=0)
            except Timeout:
                holder = self._holder()
                if self.on_wait:
                    self.on_wait(holder)
                try:
                    self._writer.acquire(timeout=self.lock_wait)
                except Timeout:
                    raise StoreError(
                        f"another kbtool process is writing to {self.path} ({_describe(holder)}): "
                        "wait for it to finish, or pass --wait SECONDS") from None
            _write_json(self.path / "writer.json", {"pid": os.getpid(), "since": now_iso()})
            self._reload()
        else:
            self._writer.acquire()
        try:
            yield self
        finally:
            self._writer.release()

    def _holder(self) -> dict:
        try:
            return json.loads((self.path / "writer.json").read_text())
        except (OSError, ValueError):
            return {}

    def _reload(self) -> None:
        try:
            self.manifest = json.loads((self.path / "manifest.json").read_text())
        except (OSError, ValueError) as exc:
            raise StoreError(f"{self.path / 'manifest.json'} is unreadable ({exc}): the store is damaged") from exc
        self._bm25 = None

    def save_manifest(self) -> None:
        self.manifest["kbtool_version"] = __version__
        _write_json(self.path / "manifest.json", self.manifest)

    # ---- model ---------------------------------------------------------------------------
    @property
    def model_id(self) -> str:
        return self.manifest["embedding"]["model"]

    def embedding_spec(self):
        """The ``EmbeddingSpec`` this store's vectors were (or will be) made with."""
        from ..embed import EmbeddingSpec

        return EmbeddingSpec.from_manifest(self.manifest["embedding"])

    def check_model(self, model) -> None:
        """Refuse vectors made another way: a different model (name, path or spec), or, for a
        spec, different query/passage prefixes. An endpoint's URL may change freely."""
        if model is None:
            return
        from ..embed import EmbeddingSpec

        mine = self.embedding_spec()
        if isinstance(model, EmbeddingSpec):
            asked, differs = model, model.identity() != mine.identity()
        else:
            asked = _spec(model)
            differs = asked.model != mine.model
        if differs:
            if asked.model != mine.model:
                what = f"embedding model {mine.model!r}, not {asked.model!r}"
            else:
                mi, ai = mine.identity(), asked.identity()
                what = ", ".join(f"{k} {mi[k]!r}, not {ai[k]!r}" for k in mi if mi[k] != ai[k])
            shown = f"--model {model}" if isinstance(model, str) else asked.cli()
            raise ModelMismatchError(
                f"store {self.path} was built with {what}: query without --model, or rebuild its "
                f"vectors with `kbtool index {shown} --rebuild`"
            )

    def check_dim(self, vectors, where: str = "query") -> None:
        """Vectors of another width than the store's: the endpoint now serves another model."""
        dim = self.manifest["embedding"].get("dim")
        got = int(np.asarray(vectors).shape[1]) if len(vectors) else dim
        if dim and got != dim:
            raise ModelMismatchError(
                f"the embedding model returned {got}-d {where} vectors; store {self.path} holds {dim}-d vectors "
                f"of {self.model_id!r}: point --model at the server of that model, or rebuild with "
                "`kbtool index --model ... --rebuild`"
            )

    def set_stemmer(self, name: str | None) -> bool:
        """Choose the BM25 stemmer ('english', ... or None); True if it changed. The next
        ``sync_indexes`` rebuilds BM25 (vectors are untouched)."""
        from .analyzer import _stemmer

        name = None if name in (None, "", "none") else name
        _stemmer(name)  # unknown names fail here, before anything is written
        with self.writing():
            if self.manifest["analyzer"].get("stemmer") == name:
                return False
            if BM25Index.exists(self.path / "bm25"):
                self.manifest.setdefault("bm25_built_with", self._bm25_spec())
            self.manifest["analyzer"] = {**self.manifest["analyzer"], "stemmer": name}
            self.save_manifest()
            return True

    def _bm25_spec(self) -> dict:
        return {"analyzer": AnalyzerConfig.from_dict(self.manifest["analyzer"]).to_dict(), "bm25": self.manifest["bm25"]}

    @property
    def analyzer(self) -> Analyzer:
        return Analyzer(AnalyzerConfig.from_dict(self.manifest["analyzer"]))

    # ---- state ---------------------------------------------------------------------------
    def generation(self) -> int:
        return int(self.db.execute("SELECT value FROM state WHERE key='generation'").fetchone()[0])

    def _bump(self) -> None:
        self.db.execute("UPDATE state SET value = CAST(value AS INTEGER) + 1 WHERE key='generation'")

    def is_indexed(self) -> bool:
        """Whether both indexes hold the catalog's current state: the last sync finished at this
        generation, BM25 records the same generation inside its own folder, and Chroma's folder is
        there. A sync killed between the vector writes and the BM25 swap is never "current"."""
        gen = self.generation()
        built_with = self.manifest.get("bm25_built_with", self._bm25_spec())
        bm25_dir = self.path / "bm25"
        bm25_gen = BM25Index.state(bm25_dir).get("generation", self.manifest.get("indexed_generation"))
        return (self.manifest.get("indexed_generation") == gen and built_with == self._bm25_spec()
                and BM25Index.exists(bm25_dir) and bm25_gen == gen
                and (gen == 0 or (self.path / "chroma").is_dir()))

    def writer_active(self) -> bool:
        """Whether another process holds the writer lock right now."""
        from filelock import FileLock, Timeout

        if self._writer is not None and self._writer.is_locked:
            return False  # this Store is the writer
        probe = FileLock(str(self.path / "writer.lock"))
        try:
            probe.acquire(timeout=0)
        except Timeout:
            return True
        probe.release()
        return False

    def require_indexed(self) -> None:
        """Readers are served while another process writes: they answer from the indexes as they
        are, and the pipeline drops any hit the catalog no longer holds (never a ghost). Only a
        store left behind with no writer at work is an error."""
        if not self.is_indexed() and not self.writer_active():
            raise StoreError(f"the indexes of {self.path} are behind its catalog: run `kbtool index`")

    # ---- documents -----------------------------------------------------------------------
    def document_hashes(self) -> dict[str, tuple[str, str]]:
        """doc_id -> (root, fingerprint): the fingerprint changes with content, the run's metadata or
        parse options (both stored in ``options``)."""
        rows = self.db.execute("SELECT doc_id, sha256, root, options FROM documents")
        return {r["doc_id"]: (r["root"], fingerprint(r["sha256"], _without(r["options"], "includes"))) for r in rows}

    def document_options(self, doc_id: str) -> dict:
        """The parse options stored with a document (run metadata, markup rules, includes)."""
        row = self.db.execute("SELECT options FROM documents WHERE doc_id=?", (doc_id,)).fetchone()
        try:
            return json.loads(row[0]) if row else {}
        except ValueError:
            return {}

    def put_document(self, doc: ParsedDocument, root: str, metadata: dict | None = None,
                     options: dict | None = None) -> None:
        """Insert or replace a parsed document; its old chunks go and it awaits chunking."""
        meta = json.dumps(metadata or {}, sort_keys=True)
        blocks = json.dumps([b.to_dict() for b in doc.blocks], ensure_ascii=False)
        check_metadata_keys(metadata or {})
        with self._tx():
            self.db.execute("DELETE FROM chunks WHERE doc_id=?", (doc.doc_id,))
            self.db.execute(
                "INSERT OR REPLACE INTO documents (doc_id, root, path, sha256, size, mtime, filetype, title,"
                " metadata, text, blocks, ingested_at, chunked_with, options) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,NULL,?)",
                (doc.doc_id, root, doc.path, doc.sha256, doc.size, doc.mtime, doc.filetype, doc.title,
                 meta, doc.text, blocks, now_iso(), json.dumps(options or {}, sort_keys=True)),
            )
            # A new or changed document leaves the indexes behind until it is chunked and indexed.
            self._bump()

    def remove_documents(self, doc_ids: Iterable[str]) -> int:
        removed = 0
        with self._tx():
            for doc_id in doc_ids:
                removed += self.db.execute("DELETE FROM documents WHERE doc_id=?", (doc_id,)).rowcount
            if removed:
                self._bump()
        return removed

    def documents_to_chunk(self, params: ChunkParams | None = None) -> list[str]:
        """Documents not chunked yet, or (with params) not chunked with these parameters."""
        key = json.dumps(params.to_dict(), sort_keys=True) if params else ""
        rows = self.db.execute(
            "SELECT doc_id FROM documents WHERE chunked_with IS NULL OR (? != '' AND chunked_with != ?)"
            " ORDER BY doc_id", (key, key),
        )
        return [r[0] for r in rows]

    def chunk_documents(self, doc_ids: list[str], params: ChunkParams, count: Callable[[str], int],
                        progress: Progress | None = None) -> int:
        """(Re)chunk documents from their stored blocks; no file is parsed again. The parameters are
        recorded first, so an interrupted run is completed by the next `index` with the same ones."""
        key = json.dumps(params.to_dict(), sort_keys=True)
        if self.manifest.get("chunking") != params.to_dict():
            self.manifest["chunking"] = params.to_dict()
            self.save_manifest()
        total = 0
        for doc_id in doc_ids:
            row = self.db.execute(
                "SELECT title, blocks, filetype, metadata FROM documents WHERE doc_id=?", (doc_id,)
            ).fetchone()
            if row is None:
                continue
            blocks = [Block.from_dict(b) for b in json.loads(row["blocks"])]
            drafts = chunk_blocks(row["title"], blocks, params, count)
            base = {"doc_id": doc_id, "filetype": row["filetype"], "dir": os.path.dirname(doc_id)}
            user = {k: str(v) for k, v in json.loads(row["metadata"]).items()}
            with self._tx():
                self.db.execute("DELETE FROM chunks WHERE doc_id=?", (doc_id,))
                self.db.executemany(
                    "INSERT INTO chunks (chunk_id, doc_id, ordinal, text, prefix, section_path, page,"
                    " char_start, char_end, n_tokens, content_hash, line_start, line_end, anchor, meta)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    [
                        (f"{doc_id}#{d.ordinal}", doc_id, d.ordinal, d.text, d.prefix, d.section_path, d.page,
                         d.char_start, d.char_end, d.n_tokens, d.content_hash, d.line_start, d.line_end, d.anchor,
                         json.dumps({**user, **base, **({"page": str(d.page)} if d.page else {})}, sort_keys=True))
                        for d in drafts
                    ],
                )
                self.db.execute("UPDATE documents SET chunked_with=? WHERE doc_id=?", (key, doc_id))
                self._bump()
            total += len(drafts)
            if progress:
                progress(1)
        self.manifest["chunking"] = params.to_dict()
        self.save_manifest()
        return total

    # ---- indexes -------------------------------------------------------------------------
    def collection(self):
        if self._collection is None:
            from .._env import setup_offline_env

            setup_offline_env()
            import chromadb
            from chromadb.config import Settings

            if not (self.path / "chroma").is_dir():
                # chromadb caches clients per path in the process: a folder deleted under it would
                # still look full. Start from what is on disk.
                from chromadb.api.client import SharedSystemClient

                SharedSystemClient.clear_system_cache()

            self._client = chromadb.PersistentClient(
                path=str(self.path / "chroma"), settings=Settings(anonymized_telemetry=False)
            )
            # embedding_function=None: Chroma's default one downloads a model.
            self._collection = self._client.get_or_create_collection(
                COLLECTION, configuration={"hnsw": dict(self.manifest["hnsw"])}, embedding_function=None
            )
        return self._collection

    def bm25(self) -> "BM25Index":
        # A long-lived Store sees another process's rebuild: reload when the record on disk changed.
        on_disk = BM25Index.state(self.path / "bm25")
        if self._bm25 is not None and on_disk and on_disk != getattr(self, "_bm25_state", None):
            self._bm25 = None
        if self._bm25 is None:
            try:
                self._bm25 = BM25Index.load(self.path / "bm25")
            except StoreError:
                # a writer swaps bm25/ by two renames: a reader can fall between them
                time.sleep(0.2)
                self._bm25 = BM25Index.load(self.path / "bm25")
            self._bm25_state = BM25Index.state(self.path / "bm25")
        return self._bm25

    def sync_indexes(self, embedder, progress: Callable[[str, int, int], None] | None = None,
                     rebuild: bool = False) -> IndexReport:
        """Make Chroma and BM25 hold exactly the catalog's chunks, embedding only what is new.

        ``progress(stage, advance, total)`` is called as vectors are computed.
        """
        if rebuild:
            # Mark the indexes stale first: an interrupted rebuild must not look current.
            self.manifest["indexed_generation"] = -1
            self.manifest["embedding"] = {**embedder.spec.to_manifest(), "dim": None,
                                          "max_tokens": embedder.spec.max_tokens}
            self.save_manifest()
            self._drop_collection()
        self.check_model(embedder.spec)
        key = embedder.spec.cache_key
        report = IndexReport()
        generation = self.generation()
        rows = self.db.execute(
            "SELECT chunk_id, content_hash, prefix, text, meta FROM chunks ORDER BY doc_id, ordinal"
        ).fetchall()
        report.chunks = len(rows)
        col = self.collection()
        existing = self._indexed_hashes(col)
        wanted = {r["chunk_id"]: _index_hash(r["content_hash"], r["meta"]) for r in rows}
        to_delete = [cid for cid in existing if cid not in wanted]
        todo = [r for r in rows if existing.get(r["chunk_id"]) != wanted[r["chunk_id"]]]

        # A rebuild re-embeds everything: what a model name or folder serves may have changed.
        vectors = {} if rebuild else self._cached_vectors(key, {r["content_hash"] for r in todo})
        report.from_cache = sum(1 for r in todo if r["content_hash"] in vectors)
        missing = {}
        for r in todo:
            if r["content_hash"] not in vectors:
                missing.setdefault(r["content_hash"], embed_text(r["prefix"], r["text"]))
        if missing:
            # Shortest first across the whole run: each batch pads little, whatever the commit size.
            hashes = sorted(missing, key=lambda h: len(missing[h]))
            total = len(hashes)
            cb = (lambda n: progress("embedding", n, total)) if progress else None
            if progress:
                progress("embedding", 0, total)  # show the bar while the model loads
            bulk = embedder.for_bulk(total) if hasattr(embedder, "for_bulk") else embedder
            # Committed batch by batch: an interrupted run keeps the vectors it paid for.
            for start in range(0, total, _EMBED_COMMIT):
                part = hashes[start : start + _EMBED_COMMIT]
                fresh = bulk.embed([missing[h] for h in part], progress=cb)
                self.check_dim(fresh, "passage")
                with self._tx():
                    self.db.executemany(
                        "INSERT OR REPLACE INTO embeddings (model, content_hash, vector) VALUES (?,?,?)",
                        [(key, h, fresh[i].astype(np.float32).tobytes()) for i, h in enumerate(part)],
                    )
                vectors.update({h: fresh[i] for i, h in enumerate(part)})
                report.embedded += len(part)

        for start in range(0, len(to_delete), _CHROMA_BATCH):
            col.delete(ids=to_delete[start : start + _CHROMA_BATCH])
        report.deleted = len(to_delete)
        for start in range(0, len(todo), _CHROMA_BATCH):
            batch = todo[start : start + _CHROMA_BATCH]
            col.upsert(
                ids=[r["chunk_id"] for r in batch],
                embeddings=np.stack([vectors[r["content_hash"]] for r in batch]).astype(np.float32),
                metadatas=[{**json.loads(r["meta"]), "index_hash": wanted[r["chunk_id"]]} for r in batch],
            )
        report.upserted = len(todo)

        bm25_dir = self.path / "bm25"
        spec = self._bm25_spec()
        # Stores from before this record existed were built with their manifest's settings.
        built_with = self.manifest.get("bm25_built_with", spec)
        # BM25 is rebuilt whenever what it holds is not the catalog's chunk set: decided from its own
        # record, never from Chroma (a sync killed after the vector writes left Chroma current).
        digest = _digest(wanted, spec)
        if (rebuild or todo or to_delete or not BM25Index.exists(bm25_dir) or built_with != spec
                or BM25Index.state(bm25_dir).get("digest") != digest):
            analyzer = self.analyzer
            BM25Index.build(
                bm25_dir, [r["chunk_id"] for r in rows],
                [analyzer(embed_text(r["prefix"], r["text"])) for r in rows], self.manifest["bm25"],
                state={"generation": generation, "digest": digest},
            )
            self._bm25 = None
            report.bm25_rebuilt = True
        elif BM25Index.state(bm25_dir).get("generation") != generation:
            BM25Index.set_state(bm25_dir, {"generation": generation, "digest": digest})
        self.manifest["bm25_built_with"] = spec

        emb = self.manifest["embedding"]
        emb.update(embedder.spec.to_manifest())  # the same identity (checked); the URL may have moved
        if vectors:
            emb["dim"] = int(next(iter(vectors.values())).shape[0])
        emb["max_tokens"] = embedder.max_tokens
        if report.embedded:
            emb["runtime"] = bulk.runtime
        self.manifest["indexed_generation"] = generation
        self.save_manifest()
        return report

    def _drop_collection(self) -> None:
        self.collection()
        self._client.delete_collection(COLLECTION)
        self._collection = None

    def _indexed_hashes(self, col) -> dict[str, str]:
        out: dict[str, str] = {}
        offset = 0
        while True:
            got = col.get(include=["metadatas"], limit=_CHROMA_BATCH, offset=offset)
            for cid, meta in zip(got["ids"], got["metadatas"]):
                out[cid] = (meta or {}).get("index_hash", "")
            if len(got["ids"]) < _CHROMA_BATCH:
                return out
            offset += _CHROMA_BATCH

    def _cached_vectors(self, model: str, hashes: set[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        items = list(hashes)
        for start in range(0, len(items), 500):
            part = items[start : start + 500]
            q = f"SELECT content_hash, vector FROM embeddings WHERE model=? AND content_hash IN ({','.join('?' * len(part))})"
            for row in self.db.execute(q, [model, *part]):
                out[row[0]] = np.frombuffer(row[1], dtype=np.float32)
        return out

    # ---- reads ---------------------------------------------------------------------------
    def document_ids(self) -> list[str]:
        """Every document in the catalog, sorted."""
        return [r[0] for r in self.db.execute("SELECT doc_id FROM documents ORDER BY doc_id")]

    def document_text(self, doc_id: str) -> str | None:
        """A document's raw text, or None if the store does not hold it."""
        row = self.db.execute("SELECT text FROM documents WHERE doc_id=?", (doc_id,)).fetchone()
        return row[0] if row else None

    def chunk_vectors(self, chunk_ids: list[str] | None = None) -> dict[str, np.ndarray]:
        """chunk_id -> cached vector of the store's model, for these chunks (or every chunk)."""
        q = ("SELECT c.chunk_id, e.vector FROM chunks c"
             " JOIN embeddings e ON e.content_hash = c.content_hash AND e.model = ?")
        key = self.embedding_spec().cache_key
        if chunk_ids is None:
            rows = self.db.execute(q, (key,)).fetchall()
        else:
            rows = []
            for start in range(0, len(chunk_ids), 500):
                part = chunk_ids[start : start + 500]
                rows += self.db.execute(q + f" WHERE c.chunk_id IN ({','.join('?' * len(part))})",
                                        [key, *part]).fetchall()
        return {r[0]: np.frombuffer(r[1], dtype=np.float32) for r in rows}

    def embedding_texts(self) -> list[str]:
        """The distinct texts index embeds (section prefix + chunk text), in catalog order."""
        rows = self.db.execute("SELECT prefix, text FROM chunks ORDER BY doc_id, ordinal")
        return list(dict.fromkeys(embed_text(r[0], r[1]) for r in rows))

    def chunk_metadata(self) -> list[tuple[str, str, dict]]:
        """(chunk_id, doc_id, metadata) of every chunk, read once per catalog generation."""
        gen = self.generation()
        if getattr(self, "_meta_cache", (None,))[0] != gen:
            rows = self.db.execute("SELECT chunk_id, doc_id, meta FROM chunks").fetchall()
            self._meta_cache = (gen, [(r[0], r[1], json.loads(r[2])) for r in rows])
        return self._meta_cache[1]

    def any_chunk_contains(self, phrase: str, chunk_ids: set[str] | None = None) -> bool:
        """Whether the text (or section path) of any chunk, within ``chunk_ids``, holds ``phrase``
        (case-insensitive substring)."""
        needle = phrase.lower()
        rows = self.db.execute(
            "SELECT chunk_id FROM chunks WHERE instr(lower(prefix || ' ' || text), ?) > 0", (needle,))
        return any(chunk_ids is None or r[0] in chunk_ids for r in rows)

    def has_bm25(self) -> bool:
        return BM25Index.exists(self.path / "bm25")

    def dense_search(self, vectors, depth: int, doc_ids: list[str] | None = None) -> list[list[tuple[str, float]]]:
        """Nearest chunks by cosine for each query vector, best first, ties by id; ``doc_ids``
        restricts the search to these documents (inside Chroma, before ranking)."""
        self.check_dim(vectors)
        col = self.collection()
        n = col.count()
        if n == 0 or (doc_ids is not None and not doc_ids):
            return [[] for _ in range(len(vectors))]
        where = None
        if doc_ids is not None:
            where = {"doc_id": {"$in": list(doc_ids)}}
        res = col.query(query_embeddings=vectors, n_results=min(depth, n), where=where, include=["distances"])
        return [sorted(((cid, 1.0 - float(d)) for cid, d in zip(ids, dists)), key=lambda x: (-x[1], x[0]))
                for ids, dists in zip(res["ids"], res["distances"])]

    def chunks_by_id(self, chunk_ids: list[str]) -> dict[str, dict]:
        out = {}
        for start in range(0, len(chunk_ids), 500):
            part = chunk_ids[start : start + 500]
            q = (
                "SELECT c.*, d.title, d.path, d.filetype FROM chunks c JOIN documents d USING (doc_id)"
                f" WHERE c.chunk_id IN ({','.join('?' * len(part))})"
            )
            for row in self.db.execute(q, part):
                out[row["chunk_id"]] = dict(row)
        return out

    def chunk_ids_matching(self, filters: dict[str, str]) -> set[str]:
        clauses = " AND ".join("json_extract(meta, ?) = ?" for _ in filters)
        params: list[str] = []
        for key, value in filters.items():
            params += [f'$."{key}"', value]
        return {r[0] for r in self.db.execute(f"SELECT chunk_id FROM chunks WHERE {clauses}", params)}

    def metadata_keys(self) -> set[str]:
        keys = set(RESERVED_META - {"index_hash"})
        for row in self.db.execute("SELECT DISTINCT metadata FROM documents"):
            keys.update(json.loads(row[0]))
        return keys

    def status(self) -> dict:
        docs = self.db.execute("SELECT COUNT(*), COALESCE(SUM(size),0) FROM documents").fetchone()
        by_type = {r[0]: r[1] for r in self.db.execute(
            "SELECT filetype, COUNT(*) FROM documents GROUP BY filetype ORDER BY filetype")}
        chunks = self.db.execute("SELECT COUNT(*), COALESCE(AVG(n_tokens),0), COALESCE(MAX(n_tokens),0) FROM chunks").fetchone()
        max_tokens = self.manifest["embedding"].get("max_tokens") or 256
        over = self.db.execute("SELECT COUNT(*) FROM chunks WHERE n_tokens > ?", (max_tokens,)).fetchone()[0]
        unchunked = self.db.execute("SELECT COUNT(*) FROM documents WHERE chunked_with IS NULL").fetchone()[0]
        return {
            "store": str(self.path),
            "format_version": self.manifest["format_version"],
            "kbtool_version": self.manifest["kbtool_version"],
            "documents": docs[0],
            "documents_by_type": by_type,
            "source_bytes": docs[1],
            "chunks": chunks[0],
            "chunk_tokens_avg": round(chunks[1], 1),
            "chunk_tokens_max": chunks[2],
            "chunks_over_model_limit": over,
            "documents_not_chunked": unchunked,
            "embedding": self.manifest["embedding"],
            "chunking": self.manifest["chunking"],
            "bm25": self.manifest["bm25"],
            "analyzer": AnalyzerConfig.from_dict(self.manifest["analyzer"]).to_dict(),
            "indexes_current": self.is_indexed(),
            "last_ingest": self.manifest.get("last_ingest"),
            "disk_bytes": sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file()),
        }

    # ---- helpers -------------------------------------------------------------------------
    def _tx(self):
        return _Transaction(self.db)


class _Transaction:
    def __init__(self, db):
        self.db = db

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb):
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")
        return False


def check_metadata_keys(metadata: dict) -> None:
    bad = (RESERVED_META & set(metadata)) | {k for k in metadata if str(k).startswith("chroma:")}
    if bad:
        raise UsageError(f"--meta key(s) {', '.join(sorted(bad))} are set by kbtool: choose other names")


def fingerprint(sha256: str, options: str) -> str:
    return f"{sha256}|{options}"


def _without(options_json: str, key: str) -> str:
    try:
        data = json.loads(options_json or "{}")
    except ValueError:
        return options_json
    data.pop(key, None)
    return json.dumps(data, sort_keys=True)


def _describe(holder: dict) -> str:
    if not holder:
        return "holder unknown"
    return f"pid {holder.get('pid')}, writing since {holder.get('since')}"


def _digest(wanted: dict[str, str], spec: dict) -> str:
    """Digest of a chunk set (ids and index hashes) and the BM25 settings."""
    import hashlib

    h = hashlib.sha256(json.dumps(spec, sort_keys=True).encode())
    for cid in sorted(wanted):
        h.update(f"{cid}\0{wanted[cid]}\n".encode())
    return h.hexdigest()


def _index_hash(content_hash: str, meta: str) -> str:
    import hashlib

    return hashlib.sha256((content_hash + meta).encode()).hexdigest()[:32]


def _spec(model):
    from ..embed import EmbeddingSpec, parse_model

    return model if isinstance(model, EmbeddingSpec) else parse_model(model)


