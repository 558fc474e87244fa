"""The SQLite catalog: documents, chunks and the embedding cache. Source of truth for the store.

Schema changes are append-only migrations, applied in order and recorded in ``user_version``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

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
]


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=30)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def migrate(conn: sqlite3.Connection) -> int:
    """Apply pending migrations; returns the schema version now in force."""
    from ..errors import StoreError

    current = conn.execute("PRAGMA user_version").fetchone()[0]
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
