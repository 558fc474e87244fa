"""The SQLite catalog: documents, chunks and the embedding cache. Source of truth for the store,
and the only module of kbtool that runs SQL.

Schema changes are append-only migrations, applied in order and recorded in ``user_version``.
``Catalog`` hands each thread its own connection (SQLite connections are not shared between
threads); WAL lets readers go on while one writer commits.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from ..document import fingerprint
from ..errors import StoreError
from .files import storage_error

_IN_BATCH = 500  # ids per `IN (...)` query

MIGRATIONS: list[tuple[str, str]] = [
    (
        "0001_initial",
        """
        CREATE TABLE documents (
            doc_id TEXT PRIMARY KEY,
            root TEXT NOT NULL,
            path TEXT NOT NULL,
            sha256 TEXT NOT NULL,
            size INTEGER,
            mtime REAL,
            filetype TEXT NOT NULL,
            title TEXT NOT NULL,
            metadata TEXT NOT NULL DEFAULT '{}',
            text TEXT NOT NULL,
            blocks TEXT NOT NULL,
            ingested_at TEXT NOT NULL,
            chunked_with TEXT
        );
        CREATE TABLE chunks (
            chunk_id TEXT PRIMARY KEY,
            doc_id TEXT NOT NULL REFERENCES documents(doc_id) ON DELETE CASCADE,
            ordinal INTEGER NOT NULL,
            text TEXT NOT NULL,
            prefix TEXT NOT NULL,
            section_path TEXT NOT NULL,
            page INTEGER,
            char_start INTEGER NOT NULL,
            char_end INTEGER NOT NULL,
            n_tokens INTEGER NOT NULL,
            content_hash TEXT NOT NULL,
            meta TEXT NOT NULL
        );
        CREATE INDEX chunks_by_doc ON chunks(doc_id, ordinal);
        CREATE TABLE embeddings (
            model TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            vector BLOB NOT NULL,
            PRIMARY KEY (model, content_hash)
        );
        CREATE TABLE state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO state VALUES ('generation', '0');
        """,
    ),
    (
        "0002_parse_options",
        # Parse options (e.g. --encoding) are part of what makes a document "unchanged".
        "ALTER TABLE documents ADD COLUMN options TEXT NOT NULL DEFAULT '{}'",
    ),
    (
        "0003_citations",
        # Source lines of a chunk (text formats) and the anchor of its section, for citations.
        "ALTER TABLE chunks ADD COLUMN line_start INTEGER;"
        "ALTER TABLE chunks ADD COLUMN line_end INTEGER;"
        "ALTER TABLE chunks ADD COLUMN anchor TEXT",
    ),
    (
        "0004_line_source",
        # The included files (and their lines) a chunk's text came from, as JSON, for citations.
        "ALTER TABLE chunks ADD COLUMN line_source TEXT",
    ),
    (
        "0005_kept_text",
        # The kept-text guard (ingestion/kept.py): the share of the source's visible words its blocks
        # keep, and the words most missing (JSON list); NULL: not measured (PDF, DOCX, CSV, BEIR).
        "ALTER TABLE documents ADD COLUMN kept REAL;"
        "ALTER TABLE documents ADD COLUMN kept_missing TEXT",
    ),
]


# What each vector collection holds (``held.py``): its chunk ids and the index hash each was written
# with, and one state row per dense retriever: the collection's identity, the catalog generation it
# was written at, and whether it is clean (dirty: a vector write may have run). Not a migration: only
# a writer reads or writes them, so the first writer makes them; a migration would be written on
# open, and a read-only store made by an older kbtool could no longer be opened (read nor queried).
_RECORD_TABLES = """
    CREATE TABLE IF NOT EXISTS vector_record (
        retriever TEXT NOT NULL,
        chunk_id TEXT NOT NULL,
        index_hash TEXT NOT NULL,
        PRIMARY KEY (retriever, chunk_id)
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS vector_record_state (
        retriever TEXT PRIMARY KEY,
        identity TEXT NOT NULL,
        generation INTEGER NOT NULL,
        clean INTEGER NOT NULL
    )
"""


def connect(path: Path) -> sqlite3.Connection:
    """A connection that writes nothing on open: WAL is switched on only for a catalog not yet in WAL
    (a new one). A catalog that cannot be opened for writing (a read-only file system, another
    user's store) is opened read-only; one whose folder cannot hold the WAL index (``-shm``) of a
    reader either, as immutable, unless a ``-wal`` file holds changes the catalog lacks."""
    first = None
    for query in ("", "?mode=ro", "?mode=ro&immutable=1"):
        if query.endswith("immutable=1") and _wal_pending(path):
            raise StoreError(f"{path}-wal holds changes not yet in the catalog, and {path.parent} cannot be "
                             "written: open the store once where it can be written (any kbtool command), then "
                             "read it read-only")
        # Used by one thread only; check_same_thread=False lets Catalog.close() (any thread) close it.
        conn = sqlite3.connect(path.absolute().as_uri() + query, uri=True, isolation_level=None, timeout=30,
                               check_same_thread=False)
        try:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            break
        except sqlite3.OperationalError as exc:
            conn.close()
            if "unable to open" not in str(exc) and "readonly" not in str(exc) and "i/o error" not in str(exc):
                raise
            first = first or exc
    else:
        raise first
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA foreign_keys = ON")
    if not query and mode != "wal":
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    # Reads of a large catalog (a query's chunks and cached vectors, 100 random rows of a 500 MB
    # file at 100k chunks) from memory-mapped pages (shared, the OS's page cache) and an 8 MB page
    # cache per connection (a server opens one per request thread): 2x faster there.
    conn.execute("PRAGMA mmap_size = 268435456")
    conn.execute("PRAGMA cache_size = -8192")
    return conn


def _wal_pending(path: Path) -> bool:
    wal = path.with_name(path.name + "-wal")
    return wal.exists() and wal.stat().st_size > 0


def migrate(conn: sqlite3.Connection) -> int:
    """Apply pending migrations; returns the schema version now in force."""
    current = conn.execute("PRAGMA user_version").fetchone()[0]
    if current == len(MIGRATIONS):
        return current  # nothing to write: a reader of a read-only store never tries
    if current > len(MIGRATIONS):
        raise StoreError(
            f"catalog schema {current} is newer than this kbtool knows ({len(MIGRATIONS)}): upgrade kbtool"
        )
    for number, (_name, sql) in enumerate(MIGRATIONS[current:], start=current + 1):
        conn.execute("BEGIN")
        try:
            for statement in sql.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return len(MIGRATIONS)


def _without(options_json: str, key: str) -> str:
    try:
        data = json.loads(options_json or "{}")
    except ValueError:
        return options_json
    data.pop(key, None)
    return json.dumps(data, sort_keys=True)


def _batches(items: list, size: int = _IN_BATCH) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _marks(n: int) -> str:
    return ",".join("?" * n)


class Catalog:
    """Every read and write of the catalog. Opened (and migrated) once; each thread then gets its
    own connection on first use. The connection of a thread that has ended is closed when another
    thread opens one (a server with a thread per request keeps no file per request it served)."""

    def __init__(self, path: Path):
        self.path = path
        self._local = threading.local()
        self._all: dict[threading.Thread, sqlite3.Connection] = {}
        self._guard = threading.Lock()
        try:
            migrate(self.db)
        except (sqlite3.DatabaseError, OSError) as exc:
            self.close()
            known = storage_error(exc, path.parent, "upgrading its catalog")
            if known:
                raise known from None
            raise StoreError(f"{path} is not a readable catalog ({exc}): the store is damaged; "
                             "re-ingest into a new store") from None

    @property
    def db(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path)
            self._local.conn = conn
            with self._guard:
                for thread in [t for t in self._all if not t.is_alive()]:
                    self._all.pop(thread).close()
                self._all[threading.current_thread()] = conn
        return conn

    def close(self) -> None:
        """Close the connection of every thread; a thread that reads afterwards opens a new one."""
        with self._guard:
            for conn in self._all.values():
                conn.close()
            self._all.clear()
        self._local = threading.local()

    @contextmanager
    def transaction(self):
        """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on an exception."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    # ---- state ---------------------------------------------------------------------------
    def generation(self) -> int:
        return int(self.db.execute("SELECT value FROM state WHERE key='generation'").fetchone()[0])

    def _bump(self, db) -> None:
        db.execute("UPDATE state SET value = CAST(value AS INTEGER) + 1 WHERE key='generation'")

    # ---- documents -----------------------------------------------------------------------
    def document_hashes(self) -> dict[str, tuple[str, str]]:
        """doc_id -> (root, fingerprint of its bytes and parse options, without the includes)."""
        rows = self.db.execute("SELECT doc_id, sha256, root, options FROM documents")
        return {r["doc_id"]: (r["root"], fingerprint(r["sha256"], _without(r["options"], "includes"))) for r in rows}

    def document_options(self, doc_id: str) -> dict:
        row = self.db.execute("SELECT options FROM documents WHERE doc_id=?", (doc_id,)).fetchone()
        try:
            return json.loads(row[0]) if row else {}
        except ValueError:
            return {}

    def put_document(self, doc, root: str, metadata: str, blocks: str, options: str, now: str,
                     kept: float | None = None, kept_missing: str | None = None) -> None:
        """Insert or replace a document; its old chunks go and it awaits chunking (generation + 1) —
        unless it was re-parsed to the same title, metadata and blocks (a parser upgrade that does
        not change it, a touched file): then only its record is updated and its chunks stay."""
        with self.transaction() as db:
            row = db.execute("SELECT title, metadata, blocks, root, chunked_with FROM documents WHERE doc_id=?",
                             (doc.doc_id,)).fetchone()
            if row is not None and row["chunked_with"] is not None and (row["title"], row["metadata"], row["blocks"],
                                                                         row["root"]) == (doc.title, metadata, blocks, root):
                db.execute("UPDATE documents SET path=?, sha256=?, size=?, mtime=?, filetype=?, ingested_at=?, options=?,"
                           " kept=?, kept_missing=? WHERE doc_id=?", (doc.path, doc.sha256, doc.size, doc.mtime,
                                                                     doc.filetype, now, options, kept, kept_missing,
                                                                     doc.doc_id))
                return
            db.execute("DELETE FROM chunks WHERE doc_id=?", (doc.doc_id,))
            db.execute(
                "INSERT OR REPLACE INTO documents (doc_id, root, path, sha256, size, mtime, filetype, title,"
                " metadata, text, blocks, ingested_at, chunked_with, options, kept, kept_missing)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,NULL,?,?,?)",
                (doc.doc_id, root, doc.path, doc.sha256, doc.size, doc.mtime, doc.filetype, doc.title,
                 metadata, doc.text, blocks, now, options, kept, kept_missing),
            )
            self._bump(db)

    def move_root(self, old: str, new: str) -> int:
        """Documents of root ``old`` now come from ``new`` (ids, content, chunks and vectors stay)."""
        with self.transaction() as db:
            n = db.execute("UPDATE documents SET root=?, path=? || substr(path, ?) WHERE root=? AND"
                           " substr(path, 1, ?) = ?", (new, new.removeprefix("beir:"), len(old.removeprefix("beir:")) + 1,
                                                        old, len(old.removeprefix("beir:")), old.removeprefix("beir:"))).rowcount
            n += db.execute("UPDATE documents SET root=? WHERE root=?", (new, old)).rowcount
            if n:
                self._bump(db)
        return n

    def document_paths(self, root: str) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT path FROM documents WHERE root=?", (root,))]

    def document_files(self) -> dict[str, str]:
        """doc_id -> the path of the file it was ingested from."""
        return {r[0]: r[1] for r in self.db.execute("SELECT doc_id, path FROM documents")}

    def document_roots(self) -> dict[str, int]:
        """root -> number of documents."""
        return {r[0]: r[1] for r in self.db.execute("SELECT root, count(*) FROM documents GROUP BY root")}

    def root_of(self) -> dict[str, str]:
        """doc_id -> its root."""
        return {r[0]: r[1] for r in self.db.execute("SELECT doc_id, root FROM documents")}

    def remove_documents(self, doc_ids: Iterable[str]) -> int:
        removed = 0
        with self.transaction() as db:
            for doc_id in doc_ids:
                removed += db.execute("DELETE FROM documents WHERE doc_id=?", (doc_id,)).rowcount
            if removed:
                self._bump(db)
        return removed

    def documents_to_chunk(self, key: str) -> list[str]:
        """Documents not chunked yet, or (with a non-empty key) chunked with other parameters."""
        rows = self.db.execute(
            "SELECT doc_id FROM documents WHERE chunked_with IS NULL OR (? != '' AND chunked_with != ?)"
            " ORDER BY doc_id", (key, key),
        )
        return [r[0] for r in rows]

    def document_for_chunking(self, doc_id: str) -> dict | None:
        row = self.db.execute(
            "SELECT title, blocks, filetype, metadata FROM documents WHERE doc_id=?", (doc_id,)).fetchone()
        return None if row is None else {"title": row["title"], "blocks": json.loads(row["blocks"]),
                                         "filetype": row["filetype"], "metadata": json.loads(row["metadata"])}

    def replace_chunks(self, doc_id: str, rows: list[tuple], key: str) -> None:
        """A document's chunks, all at once, recorded as chunked with ``key``."""
        with self.transaction() as db:
            db.execute("DELETE FROM chunks WHERE doc_id=?", (doc_id,))
            db.executemany(
                "INSERT INTO chunks (chunk_id, doc_id, ordinal, text, prefix, section_path, page,"
                " char_start, char_end, n_tokens, content_hash, line_start, line_end, anchor, line_source, meta)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
            db.execute("UPDATE documents SET chunked_with=? WHERE doc_id=?", (key, doc_id))
            self._bump(db)

    def document_ids(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT doc_id FROM documents ORDER BY doc_id")]

    def document_info(self, doc_id: str) -> dict | None:
        row = self.db.execute("SELECT doc_id, root, path, sha256, title, filetype, text FROM documents WHERE doc_id=?",
                              (doc_id,)).fetchone()
        return dict(row) if row else None

    def kept_below(self, threshold: float) -> list[dict]:
        """Documents whose kept-text share is below ``threshold``, lowest first: {doc_id, path, kept, missing}."""
        rows = self.db.execute("SELECT doc_id, path, kept, kept_missing FROM documents WHERE kept IS NOT NULL"
                               " AND kept < ? ORDER BY kept, doc_id", (threshold,))
        return [{"doc_id": r[0], "path": r[1], "kept": round(r[2], 4), "missing": json.loads(r[3] or "[]")} for r in rows]

    def kept_measured(self) -> int:
        """How many documents carry a kept-text share."""
        return int(self.db.execute("SELECT COUNT(*) FROM documents WHERE kept IS NOT NULL").fetchone()[0])

    def document_slice(self, doc_id: str, start: int, length: int) -> str | None:
        """``text[start:start + length]`` of a document, cut by SQLite (the whole text is not read)."""
        row = self.db.execute("SELECT substr(text, ?, ?) FROM documents WHERE doc_id=?",
                              (start + 1, length, doc_id)).fetchone()
        return row[0] if row else None

    def document_text(self, doc_id: str) -> str | None:
        row = self.db.execute("SELECT text FROM documents WHERE doc_id=?", (doc_id,)).fetchone()
        return row[0] if row else None

    def metadata_keys(self) -> set[str]:
        keys: set[str] = set()
        for row in self.db.execute("SELECT DISTINCT metadata FROM documents"):
            keys.update(json.loads(row[0]))
        return keys

    # ---- chunks --------------------------------------------------------------------------
    def chunks_for_index(self) -> list[sqlite3.Row]:
        """(chunk_id, content_hash, prefix, text, meta) of every chunk, in catalog order."""
        return self.db.execute(
            "SELECT chunk_id, content_hash, prefix, text, meta FROM chunks ORDER BY doc_id, ordinal").fetchall()

    def chunk_hashes(self) -> list[sqlite3.Row]:
        """(chunk_id, content_hash, meta) of every chunk."""
        return self.db.execute("SELECT chunk_id, content_hash, meta FROM chunks").fetchall()

    def chunk_texts(self) -> list[tuple[str, str]]:
        """(prefix, text) of every chunk, in catalog order."""
        return [(r[0], r[1]) for r in self.db.execute("SELECT prefix, text FROM chunks ORDER BY doc_id, ordinal")]

    def chunk_metadata(self) -> list[tuple[str, str, dict]]:
        return [(r[0], r[1], json.loads(r[2])) for r in self.db.execute("SELECT chunk_id, doc_id, meta FROM chunks")]

    def metadata_groups(self) -> list[tuple[str, dict, list[str]]]:
        """(doc_id, metadata, chunk ids) per distinct (document, metadata) pair, in catalog order."""
        groups: dict[tuple[str, str], list[str]] = {}
        for cid, doc, meta in self.db.execute("SELECT chunk_id, doc_id, meta FROM chunks"):
            groups.setdefault((doc, meta), []).append(cid)
        return [(doc, json.loads(meta), ids) for (doc, meta), ids in groups.items()]

    def first_chunk_ids(self, n: int) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT chunk_id FROM chunks ORDER BY chunk_id LIMIT ?", (n,))]

    def chunk_total(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])

    def chunks_containing(self, needle: str) -> list[str]:
        """Ids of chunks whose section prefix or text holds ``needle`` (lower case)."""
        rows = self.db.execute(
            "SELECT chunk_id FROM chunks WHERE instr(lower(prefix || ' ' || text), ?) > 0", (needle,))
        return [r[0] for r in rows]

    def chunk_listing(self, doc_id: str | None = None, over: int | None = None) -> list[dict]:
        """Chunks in catalog order with what `kbtool chunks` shows: of one document, or (``over``)
        those whose embedded text has more than ``over`` model tokens."""
        where, args = [], []
        if doc_id is not None:
            where.append("doc_id = ?")
            args.append(doc_id)
        if over is not None:
            where.append("n_tokens > ?")
            args.append(over)
        q = ("SELECT chunk_id, doc_id, ordinal, section_path, page, line_start, line_end, line_source, n_tokens,"
             " char_start, prefix, text "
             "FROM chunks" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY doc_id, ordinal")
        return [dict(r) for r in self.db.execute(q, args)]

    def chunk_spans(self, doc_id: str) -> list[dict]:
        """One document's chunks in order, without their text: where each lies (chars, lines), its
        section and token count (postprocess.expand grows a hit over these)."""
        return [dict(r) for r in self.db.execute(
            "SELECT chunk_id, ordinal, section_path, page, char_start, char_end, line_start, line_end, line_source,"
            " n_tokens"
            " FROM chunks WHERE doc_id=? ORDER BY ordinal", (doc_id,))]

    def document_dating(self, doc_ids: list[str]) -> dict[str, tuple[dict, float | None]]:
        """doc_id -> (its metadata, its file's mtime), for these documents (postprocess.freshness)."""
        out = {}
        for part in _batches(list(doc_ids)):
            q = f"SELECT doc_id, metadata, mtime FROM documents WHERE doc_id IN ({_marks(len(part))})"
            for row in self.db.execute(q, part):
                out[row[0]] = (json.loads(row[1] or "{}"), row[2])
        return out

    def chunks_by_id(self, chunk_ids: list[str]) -> dict[str, dict]:
        out = {}
        for part in _batches(chunk_ids):
            q = ("SELECT c.*, d.title, d.path, d.filetype, d.root FROM chunks c JOIN documents d USING (doc_id)"
                 f" WHERE c.chunk_id IN ({_marks(len(part))})")
            for row in self.db.execute(q, part):
                out[row["chunk_id"]] = dict(row)
        return out

    # ---- embedding cache -----------------------------------------------------------------
    def cached_vectors(self, key: str, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """content_hash -> vector cached for the model ``key``."""
        out: dict[str, np.ndarray] = {}
        for part in _batches(list(hashes)):
            q = f"SELECT content_hash, vector FROM embeddings WHERE model=? AND content_hash IN ({_marks(len(part))})"
            for row in self.db.execute(q, [key, *part]):
                out[row[0]] = np.frombuffer(row[1], dtype=np.float32)
        return out

    def cached_hashes(self, key: str, hashes: Iterable[str]) -> set[str]:
        """The content hashes of ``hashes`` the cache holds a vector of for the model ``key``."""
        out: set[str] = set()
        for part in _batches(list(hashes)):
            q = f"SELECT content_hash FROM embeddings WHERE model=? AND content_hash IN ({_marks(len(part))})"
            out.update(row[0] for row in self.db.execute(q, [key, *part]))
        return out

    def cache_vectors(self, key: str, items: list[tuple[str, np.ndarray]]) -> None:
        with self.transaction() as db:
            db.executemany("INSERT OR REPLACE INTO embeddings (model, content_hash, vector) VALUES (?,?,?)",
                           [(key, h, v.astype(np.float32).tobytes()) for h, v in items])

    def chunk_vectors(self, key: str, chunk_ids: list[str] | None = None) -> dict[str, np.ndarray]:
        """chunk_id -> cached vector of the model ``key``, for these chunks (or every chunk)."""
        q = ("SELECT c.chunk_id, e.vector FROM chunks c"
             " JOIN embeddings e ON e.content_hash = c.content_hash AND e.model = ?")
        if chunk_ids is None:
            rows = self.db.execute(q, (key,)).fetchall()
        else:
            rows = []
            for part in _batches(chunk_ids):
                rows += self.db.execute(q + f" WHERE c.chunk_id IN ({_marks(len(part))})", [key, *part]).fetchall()
        return {r[0]: np.frombuffer(r[1], dtype=np.float32) for r in rows}

    # ---- the record of what each vector collection holds (held.py) -----------------------
    def _record_read(self, sql: str, retriever: str) -> list:
        try:
            return self.db.execute(sql, (retriever,)).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):  # no writer has kept a record in this catalog yet
                return []
            raise

    def _record_tables(self, db) -> None:
        for statement in _RECORD_TABLES.split(";"):
            db.execute(statement)

    def vector_record_state(self, retriever: str) -> dict | None:
        """{identity, generation, clean} of dense retriever ``retriever``'s record, None if it has none."""
        rows = self._record_read("SELECT identity, generation, clean FROM vector_record_state WHERE retriever=?",
                                 retriever)
        return {"identity": rows[0][0], "generation": rows[0][1], "clean": bool(rows[0][2])} if rows else None

    def vector_record(self, retriever: str) -> dict[str, str]:
        """chunk_id -> index hash the record of ``retriever`` lists."""
        return dict(self._record_read("SELECT chunk_id, index_hash FROM vector_record WHERE retriever=?", retriever))

    def mark_vector_record_dirty(self, retriever: str) -> None:
        """Before a vector write: the record of ``retriever`` no longer vouches for its collection. Synced
        to disk before the write (SQLite's ``synchronous=FULL`` for this commit)."""
        db = self.db
        db.execute("PRAGMA synchronous = FULL")
        try:
            with self.transaction() as tx:
                self._record_tables(tx)
                tx.execute("UPDATE vector_record_state SET clean = 0 WHERE retriever=?", (retriever,))
        finally:
            db.execute("PRAGMA synchronous = NORMAL")

    def write_vector_record(self, retriever: str, identity: str, generation: int, *, rows: dict[str, str] | None = None,
                            deleted: Iterable[str] = (), upserted: dict[str, str] | None = None) -> None:
        """In one transaction: the record of ``retriever`` becomes ``rows`` (all of it), or loses
        ``deleted`` and gains ``upserted``; it is clean, written at ``generation``."""
        with self.transaction() as db:
            self._record_tables(db)
            if rows is not None:
                db.execute("DELETE FROM vector_record WHERE retriever=?", (retriever,))
                upserted = rows
            db.executemany("DELETE FROM vector_record WHERE retriever=? AND chunk_id=?",
                           ((retriever, c) for c in deleted))
            db.executemany("INSERT OR REPLACE INTO vector_record (retriever, chunk_id, index_hash) VALUES (?,?,?)",
                           ((retriever, c, h) for c, h in (upserted or {}).items()))
            db.execute("INSERT OR REPLACE INTO vector_record_state (retriever, identity, generation, clean)"
                       " VALUES (?,?,?,1)", (retriever, identity, generation))

    def forget_vector_record(self, retriever: str) -> None:
        """The record of ``retriever`` is gone (its collection is being dropped)."""
        with self.transaction() as db:
            self._record_tables(db)
            db.execute("DELETE FROM vector_record_state WHERE retriever=?", (retriever,))
            db.execute("DELETE FROM vector_record WHERE retriever=?", (retriever,))

    # ---- status --------------------------------------------------------------------------
    def counts(self, max_tokens: int) -> dict:
        db = self.db
        docs = db.execute("SELECT COUNT(*), COALESCE(SUM(size),0) FROM documents").fetchone()
        by_type = {r[0]: r[1] for r in db.execute(
            "SELECT filetype, COUNT(*) FROM documents GROUP BY filetype ORDER BY filetype")}
        chunks = db.execute(
            "SELECT COUNT(*), COALESCE(AVG(n_tokens),0), COALESCE(MAX(n_tokens),0) FROM chunks").fetchone()
        return {
            "documents": docs[0],
            "documents_by_type": by_type,
            "source_bytes": docs[1],
            "chunks": chunks[0],
            "chunk_tokens_avg": round(chunks[1], 1),
            "chunk_tokens_max": chunks[2],
            "chunks_over_model_limit": db.execute("SELECT COUNT(*) FROM chunks WHERE n_tokens > ?",
                                                  (max_tokens,)).fetchone()[0],
            "documents_not_chunked": db.execute(
                "SELECT COUNT(*) FROM documents WHERE chunked_with IS NULL").fetchone()[0],
        }


class _Rows:
    """A statement's rows, read whole: what a snapshot's readers get back from ``execute``."""

    def __init__(self, rows: list):
        self._rows = rows

    def fetchone(self):
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list:
        return self._rows

    def __iter__(self):
        return iter(self._rows)


class _Shared:
    """One connection in one read transaction, shared by threads: each statement runs under a lock
    and is read whole before the next starts."""

    def __init__(self, conn: sqlite3.Connection):
        self._conn, self._lock = conn, threading.Lock()

    def execute(self, sql: str, params=()) -> _Rows:
        with self._lock:
            if self._conn is None:
                raise StoreError("this view of the catalog was closed (a server swapped in a newer generation): ask again")
            return _Rows(self._conn.execute(sql, params).fetchall())

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()  # ends the read transaction: the writer's WAL can be checkpointed past it
                self._conn = None


class SnapshotCatalog(Catalog):
    """The catalog as it was at one moment, for every thread: one read transaction (WAL keeps its
    snapshot while writers commit) on one connection. A long-lived reader (a server) answers each
    request from the generation its indexes hold while another process writes the next one; it is
    never migrated (the live ``Catalog`` opened first did that) and never written."""

    def __init__(self, path: Path):
        self.path = path
        conn = connect(path)
        conn.execute("BEGIN")
        # the snapshot is taken by the first read of the transaction, not by BEGIN
        self.pinned_generation = int(conn.execute("SELECT value FROM state WHERE key='generation'").fetchone()[0])
        self._shared = _Shared(conn)

    @property
    def db(self):  # type: ignore[override]
        return self._shared

    def close(self) -> None:
        self._shared.close()

    def generation(self) -> int:
        return self.pinned_generation

    @contextmanager
    def transaction(self):
        raise StoreError(f"{self.path}: a snapshot of the catalog is read-only")
        yield  # pragma: no cover
