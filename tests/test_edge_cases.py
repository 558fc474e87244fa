"""Regression tests for bad input and odd layouts: each one crashed, hung or misled once."""

import json
import os

import pytest

from kbtool.errors import InputError, StoreError
from kbtool.ingestion.pipeline import IngestOptions, ingest
from kbtool.query.retriever import Retriever
from kbtool.index import sync
from kbtool.store import Store

from .conftest import write


@pytest.fixture
def store(tmp_path):
    return Store.open(tmp_path / "kb", create=True)


def bm25_docs(store, embedder, query):
    return [h.doc_id for h in Retriever(store, embedder).search(query, mode="bm25", top_k=10)]


def test_broken_links_loops_and_fifos_are_skipped_not_fatal(tmp_path, store, embedder):
    docs = tmp_path / "docs"
    write(docs / "a.md", "# A\n\nalpha bravo charlie\n")
    os.symlink("missing.md", docs / "broken.md")
    os.symlink("loop.md", docs / "loop.md")
    os.mkfifo(docs / "pipe.md")
    write(tmp_path / "elsewhere/secret.md", "# Secret\n\nnot to be read\n")
    os.symlink(tmp_path / "elsewhere", docs / "linked")
    report = ingest(store, [docs], embedder=embedder)
    assert report.added == ["a.md"]
    reasons = {s["path"]: s["reason"] for s in report.skipped}
    assert "broken" in reasons["broken.md"] and "loop" in reasons["loop.md"]
    assert "regular" in reasons["pipe.md"] and "not followed" in reasons["linked/"]


def test_heading_only_documents_are_still_indexed(tmp_path, store, embedder):
    docs = tmp_path / "docs"
    write(docs / "h.md", "# Error code TW-E4031\n")
    write(docs / "codes.txt", "Error codes\n\nTW-E4031 disk full\n\nTW-E5120 storage offline\n")
    write(docs / "other.md", "# Other\n\nSomething else entirely, about bicycles and trains.\n")
    ingest(store, [docs], embedder=embedder)
    assert "codes.txt" in bm25_docs(store, embedder, "TW-E5120")
    assert "h.md" in bm25_docs(store, embedder, "TW-E4031")


def test_a_changed_file_that_no_longer_parses_leaves_the_store(tmp_path, store, embedder):
    docs = tmp_path / "docs"
    write(docs / "a.md", "# A\n\nzebra quokka unique words\n")
    write(docs / "b.md", "# B\n\nsomething different here\n")
    write(docs / "c.md", "# C\n\nand a third document\n")
    ingest(store, [docs], embedder=embedder)
    assert bm25_docs(store, embedder, "quokka") == ["a.md"]
    (docs / "a.md").write_bytes(b"")
    report = ingest(store, [docs], embedder=embedder)
    assert report.skipped[0]["path"] == "a.md" and report.skipped[0]["removed_previous_version"]
    assert bm25_docs(store, embedder, "quokka") == []
    (docs / "a.md").write_bytes(b"%PDF-1.4 garbage")
    (docs / "a.md").rename(docs / "a.pdf")
    write(docs / "a.md", "# A\n\nzebra quokka unique words\n")
    ingest(store, [docs], embedder=embedder)
    (docs / "a.md").write_bytes(b"\x00\x01\x02 binary \xff\xfe")
    report = ingest(store, [docs], embedder=embedder)
    gone = {f["doc_id"]: f for f in report.failed}
    assert "a.pdf" in gone and "removed_previous_version" not in gone["a.pdf"]  # never ingested
    assert bm25_docs(store, embedder, "quokka") == []  # binary a.md: failed or skipped, never served stale


def test_changing_encoding_reparses_an_unchanged_file(tmp_path, store, embedder):
    docs = tmp_path / "docs"
    (docs).mkdir()
    (docs / "m.txt").write_bytes("café crème brûlée\n".encode("utf-8"))
    ingest(store, [docs], IngestOptions(parse_only=True))
    report = ingest(store, [docs], IngestOptions(parse_only=True, encoding="latin-1"), update_sources=True)
    assert report.updated == ["m.txt"]
    text = store.catalog.db.execute("SELECT text FROM documents").fetchone()[0]
    assert "cafÃ©" in text  # what latin-1 makes of those bytes: the user asked for it


def test_utf16_with_bom_is_text(tmp_path):
    from kbtool.ingestion.parse import parse_file

    path = tmp_path / "u16.txt"
    path.write_bytes("Hello from a UTF-16 file with a byte-order mark.\n".encode("utf-16"))
    assert "UTF-16 file" in parse_file(path, "u16.txt").text


def test_model_ids_are_canonical(tmp_path, monkeypatch):
    from kbtool.embed import DEFAULT_MODEL, canonical_model_id

    (tmp_path / "mymodel").mkdir()
    monkeypatch.chdir(tmp_path)
    assert canonical_model_id("./mymodel") == str(tmp_path / "mymodel")
    assert canonical_model_id("all-MiniLM-L6-v2") == DEFAULT_MODEL == canonical_model_id(None)


def test_a_bad_model_creates_no_store(tmp_path):
    from kbtool.errors import ModelError

    with pytest.raises(ModelError):
        Store.open(tmp_path / "kb", create=True, model=str(tmp_path / "no-such-model"))
    assert not (tmp_path / "kb").exists()


def test_store_path_that_is_a_file(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="is a file"):
        Store.open(tmp_path / "file", create=True)


def test_interrupted_rebuild_does_not_look_current(tmp_path, store, embedder):
    write(tmp_path / "docs/a.md", "# A\n\nalpha bravo\n")
    ingest(store, [tmp_path / "docs"], embedder=embedder)

    from kbtool.embed import parse_model

    class Exploding:
        spec = parse_model("openai:http://127.0.0.1:9/v1#other-model")
        model_id, dim, max_tokens, runtime = spec.model, 384, 256, "http"
        count_tokens = staticmethod(embedder.count_tokens)

        def embed(self, texts, progress=None):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sync(store, Exploding(), rebuild=True)
    assert not Store.open(store.path).is_indexed()


def test_nested_roots_keep_document_ids(tmp_path, store, embedder):
    docs = tmp_path / "docs"
    write(docs / "top.md", "# Top\n\ntop level words\n")
    write(docs / "sub/x.md", "# X\n\nnested words here\n")
    write(docs / "sub/y.md", "# Y\n\nmore nested words\n")
    ingest(store, [docs], embedder=embedder)
    # A file or a subfolder of an ingested folder keeps that folder as its root.
    write(docs / "sub/x.md", "# X\n\nnested words changed\n")
    report = ingest(store, [docs / "sub" / "x.md"], embedder=embedder)
    assert report.updated == ["sub/x.md"]
    os.remove(docs / "sub/y.md")
    report = ingest(store, [docs / "sub"], embedder=embedder)
    assert report.removed == ["sub/y.md"] and report.unchanged == ["sub/x.md"]
    ids = {r[0] for r in store.catalog.db.execute("SELECT doc_id FROM documents")}
    assert ids == {"top.md", "sub/x.md"}


def test_a_folder_containing_an_earlier_root_takes_its_documents_over(tmp_path, store, embedder):
    docs = tmp_path / "docs"
    write(docs / "sub/x.md", "# X\n\nnested words here\n")
    write(docs / "top.md", "# Top\n\ntop words\n")
    ingest(store, [docs / "sub"], embedder=embedder)
    report = ingest(store, [docs], embedder=embedder)
    assert sorted(report.added) == ["sub/x.md", "top.md"] and report.removed == ["x.md"]
    assert report.index.embedded == 1  # top.md; x.md's chunk comes from the embedding cache


def test_include_globs_are_anchored_at_the_folder(tmp_path, store):
    docs = tmp_path / "docs"
    write(docs / "api/a.md", "# A\n\nx\n")
    write(docs / "docs/api/b.md", "# B\n\ny\n")
    report = ingest(store, [docs], IngestOptions(include=["api/*"], parse_only=True))
    assert report.added == ["api/a.md"]
    report = ingest(store, [docs], IngestOptions(include=["*.md"], parse_only=True), update_sources=True)
    assert report.added == ["docs/api/b.md"]


def test_parse_only_then_index_chunks_what_is_missing(tmp_path, store, embedder):
    from kbtool.index import index

    write(tmp_path / "docs/a.md", "# A\n\nalpha words\n")
    write(tmp_path / "docs/b.md", "# B\n\nbravo words\n")
    write(tmp_path / "docs/c.md", "# C\n\ncharlie words\n")
    ingest(store, [tmp_path / "docs"], embedder=embedder)
    write(tmp_path / "docs/d.md", "# D\n\ndelta quebec words\n")
    ingest(store, [tmp_path / "docs"], IngestOptions(parse_only=True))
    assert not store.is_indexed()
    index(store, embedder=embedder)
    assert bm25_docs(store, embedder, "quebec") == ["d.md"]


def test_beir_records_with_bad_fields_or_encoding(tmp_path, store, embedder):
    beir = tmp_path / "beir"
    write(beir / "corpus.jsonl", "\n".join([
        json.dumps({"_id": "d1", "title": "T", "text": 5}),
        json.dumps({"_id": "d2", "title": "ok", "text": "fine text"}),
        json.dumps({"_id": "d2", "title": "dup", "text": "again"}),
    ]) + "\n")
    report = ingest(store, [beir], IngestOptions(format="beir", parse_only=True))
    assert report.added == ["d2"]
    assert {f["doc_id"]: f["reason"] for f in report.failed} == {
        "d1": "BEIR record: title and text must be strings", "d2": "duplicate _id"}
    (beir / "corpus.jsonl").write_bytes(b'{"_id": "d9", "text": "caf\xe9"}\n')
    with pytest.raises(InputError, match="corpus.jsonl:1"):
        ingest(store, [beir], IngestOptions(format="beir", parse_only=True))
