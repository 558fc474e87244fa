"""Incremental ingest against a real store, real Chroma and the real model."""

import os

import pytest

from kbtool.ingestion.pipeline import IngestOptions, ingest
from kbtool.query.retriever import Retriever
from kbtool.store import Store

from .conftest import write

DOC_A = """# Alpha Guide

## Setup

The alpha service listens on port 7311 and stores its data under /var/lib/alpha.

## Limits

Uploads larger than 2 GB are rejected with code ALPHA-413.

## Zebra

The unique marker word here is quuxzebra.
"""
DOC_B = """# Beta Notes

Beta jobs retry three times with exponential backoff before they fail.

## Beta Cleanup

The cleanup task removes temporary files every night at 02:00.
"""
DOC_GONE = """# Gamma

The word flibbertigibbet appears only in this document.
"""


@pytest.fixture
def corpus(tmp_path):
    root = tmp_path / "docs"
    write(root / "a.md", DOC_A)
    write(root / "sub/b.md", DOC_B)
    write(root / "gone.md", DOC_GONE)
    return root


@pytest.fixture
def store(tmp_path):
    return Store.open(tmp_path / "kb", create=True)


def chroma_ids(store):
    return set(store.vectors.indexed())


def test_first_ingest_then_unchanged_rerun_embeds_nothing(corpus, store, embedder):
    first = ingest(store, [corpus], embedder=embedder)
    assert sorted(first.added) == ["a.md", "gone.md", "sub/b.md"]
    assert first.index.embedded == first.index.chunks > 0
    again = ingest(store, [corpus], embedder=embedder)
    assert sorted(again.unchanged) == ["a.md", "gone.md", "sub/b.md"]
    assert again.added == again.updated == again.removed == []
    assert again.index.embedded == 0 and again.index.upserted == 0 and not again.index.bm25_rebuilt


def test_editing_one_file_reembeds_only_its_changed_chunks(corpus, store, embedder):
    ingest(store, [corpus], embedder=embedder)
    a_chunks = store.catalog.db.execute("SELECT COUNT(*) FROM chunks WHERE doc_id='a.md'").fetchone()[0]
    assert a_chunks == 3
    write(corpus / "a.md", DOC_A.replace("2 GB", "4 GB"))
    report = ingest(store, [corpus], embedder=embedder)
    assert report.updated == ["a.md"] and sorted(report.unchanged) == ["gone.md", "sub/b.md"]
    assert report.index.embedded == 1  # only the "Limits" chunk changed
    assert report.index.from_cache == 0
    hits = Retriever(store, embedder).search("ALPHA-413", mode="bm25", top_k=1)
    assert "4 GB" in hits[0].text


def test_deleted_file_leaves_catalog_chroma_and_bm25(corpus, store, embedder):
    ingest(store, [corpus], embedder=embedder)
    assert any(i.startswith("gone.md#") for i in chroma_ids(store))
    os.remove(corpus / "gone.md")
    report = ingest(store, [corpus], embedder=embedder)
    assert report.removed == ["gone.md"]
    assert report.index.deleted >= 1
    assert store.catalog.db.execute("SELECT COUNT(*) FROM chunks WHERE doc_id='gone.md'").fetchone()[0] == 0
    assert store.catalog.db.execute("SELECT COUNT(*) FROM documents WHERE doc_id='gone.md'").fetchone()[0] == 0
    assert not any(i.startswith("gone.md#") for i in chroma_ids(store))
    assert not any(i.startswith("gone.md#") for i in store.bm25().chunk_ids)
    r = Retriever(store, embedder)
    assert r.search("flibbertigibbet", mode="bm25") == []
    assert all(h.doc_id != "gone.md" for m in ("dense", "hybrid") for h in r.search("flibbertigibbet", mode=m))


def test_bad_file_is_reported_and_skipped_not_fatal(corpus, store, embedder):
    (corpus / "broken.pdf").write_bytes(b"%PDF-1.4 garbage")
    (corpus / "empty.txt").write_bytes(b"")
    report = ingest(store, [corpus], embedder=embedder)
    failed = {f["doc_id"]: f["reason"] for f in report.failed}
    assert set(failed) == {"broken.pdf"}  # corrupt: a failure
    assert {"path": "empty.txt", "reason": "empty file: nothing to index"} in report.skipped  # empty: nothing lost
    assert len(report.added) == 3 and report.index.chunks > 0


def test_hidden_unsupported_and_outside_symlinks_are_skipped(corpus, store, embedder, tmp_path):
    write(corpus / ".hidden/secret.md", "# Secret\n\nnot for the store")
    write(corpus / ".dotfile.md", "# Dot\n\nnot for the store")
    (corpus / "image.png").write_bytes(b"\x89PNG")
    outside = write(tmp_path / "outside.md", "# Outside\n\nsecret outside text")
    os.symlink(outside, corpus / "link.md")
    report = ingest(store, [corpus], IngestOptions(parse_only=True), embedder=embedder)
    assert sorted(report.added) == ["a.md", "gone.md", "sub/b.md"]
    reasons = {s["path"]: s["reason"] for s in report.skipped}
    assert "outside" in reasons["link.md"] and "unsupported" in reasons["image.png"]
    texts = " ".join(r[0] for r in store.catalog.db.execute("SELECT text FROM documents"))
    assert "secret" not in texts


def test_include_exclude_and_metadata_filter(corpus, store, embedder):
    report = ingest(store, [corpus], IngestOptions(include=["*.md"], exclude=["sub/*"], metadata={"team": "docs"}),
                    embedder=embedder)
    assert sorted(report.added) == ["a.md", "gone.md"]
    hits = Retriever(store, embedder).search("port", mode="hybrid", filters={"team": "docs"})
    assert hits and all(h.doc_id in ("a.md", "gone.md") for h in hits)


def test_parse_only_then_index_later(corpus, store, embedder):
    from kbtool.errors import StoreError
    from kbtool.chunk import chunk
    from kbtool.index import index

    ingest(store, [corpus], IngestOptions(parse_only=True), embedder=embedder)
    assert store.catalog.db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0] == 0
    with pytest.raises(StoreError, match="kbtool index"):
        Retriever(store, embedder)
    chunk(store, embedder=embedder)
    index(store, embedder=embedder)
    assert Retriever(store, embedder).search("quuxzebra", mode="bm25")[0].doc_id == "a.md"


def test_rechunk_without_reparsing_reuses_cached_embeddings(corpus, store, embedder):
    from kbtool.chunk import ChunkParams
    from kbtool.chunk import chunk
    from kbtool.index import index

    ingest(store, [corpus], embedder=embedder)
    n_before = store.catalog.db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
    chunk(store, ChunkParams(size=24, overlap=4), embedder=embedder)
    n_small = store.catalog.db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
    assert n_small > n_before
    index(store, embedder=embedder)
    chunk(store, ChunkParams(), embedder=embedder)
    report = index(store, embedder=embedder)
    # Back to the old chunking: chunks that differ come from the embedding cache, none is embedded.
    assert report.embedded == 0 and report.from_cache == report.upserted > 0
    assert report.chunks == n_before
    assert set(chroma_ids(store)) == {r[0] for r in store.catalog.db.execute("SELECT chunk_id FROM chunks")}
