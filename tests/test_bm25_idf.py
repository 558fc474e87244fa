"""BM25 finds a term however many documents hold it: in a one-document store, and in a store where
most documents hold it (Robertson's IDF gave both no weight, so such queries found nothing)."""

import json

import pytest
from typer.testing import CliRunner

from kbtool.cli import app
from kbtool.ingestion.pipeline import ingest
from kbtool.query.retriever import Retriever
from kbtool.store import Store
from kbtool.store.bm25 import BM25Index

from .conftest import write


@pytest.mark.slow
def test_one_document_store_finds_its_identifier(tmp_path):
    write(tmp_path / "docs/lynx.md", "# Lynx\n\nThe LYNX-4242 relay restarts itself after a power cut.\n")
    kb = tmp_path / "kb"
    runner = CliRunner()
    res = runner.invoke(app, ["ingest", str(tmp_path / "docs"), "--store", str(kb), "--quiet"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["query", "LYNX-4242", "--mode", "bm25", "--store", str(kb), "--json"])
    assert res.exit_code == 0, res.output
    hits = json.loads(res.stdout)["hits"]
    assert [h["doc_id"] for h in hits] == ["lynx.md"]
    assert hits[0]["bm25_score"] > 0


@pytest.fixture(scope="module")
def walrus_store(tmp_path_factory, embedder):
    base = tmp_path_factory.mktemp("walrus")
    docs = base / "docs"
    # "walrus protocol" in 3 of 4 documents: twice in a short one, once in a short one, once in a
    # long one; the fourth never mentions it.
    write(docs / "a.md", "# Alpha\n\nThe walrus protocol and the walrus protocol again.\n")
    write(docs / "b.md", "# Beta\n\nEnable the walrus protocol here.\n")
    write(docs / "c.md", "# Gamma\n\nThe walrus protocol is one of many settings that the relay "
          "reads at start, together with ports, timeouts, log levels, proxy hosts, retry counts, "
          "cache sizes, and the folder where it keeps its queue of pending uploads.\n")
    write(docs / "d.md", "# Delta\n\nInvoices are sent on the first day of the month.\n")
    store = Store.open(base / "kb", create=True)
    report = ingest(store, [docs], embedder=embedder)
    assert not report.failed, report.failed
    return store


def test_majority_term_is_found_and_ranked_by_tf_and_length(walrus_store):
    hits = Retriever(walrus_store).search("walrus protocol", mode="bm25", top_k=10)
    assert [h.doc_id for h in hits] == ["a.md", "b.md", "c.md"]
    scores = [h.bm25_score for h in hits]
    assert scores[0] > scores[1] > scores[2] > 0


def test_bm25_coverage_bound_holds_every_common_term(walrus_store):
    """The coverage bound counts every query term a chunk can match, common ones included: the
    best chunk for "walrus protocol" covers it fully."""
    index = walrus_store.bm25()
    terms = walrus_store.analyzer("walrus protocol")
    best = index.search(terms, k=1)[0][1]
    assert index.bound(terms) == pytest.approx(best, rel=1e-5)


def test_a_robertson_manifest_builds_with_a_nonnegative_idf(tmp_path):
    """Stores made before keep ``method: robertson`` in their manifest; their next build uses Lucene's."""
    from kbtool.store.bm25 import effective_params

    assert effective_params({"method": "robertson", "k1": 1.2, "b": 0.75})["method"] == "lucene"
    BM25Index.build(tmp_path / "bm25", ["x#0"], [["only", "document"]], {"method": "robertson", "k1": 1.2, "b": 0.75})
    assert BM25Index.load(tmp_path / "bm25").search(["only"], k=5)[0][0] == "x#0"


def test_a_store_built_with_robertson_is_behind_until_index_rebuilds_bm25_only(tmp_path, embedder):
    """An existing store (manifest ``robertson``, built before) is not claimed current; a plain index
    rebuilds BM25 with Lucene's IDF, re-embeds nothing, and records the method it used."""
    from kbtool.index import index

    write(tmp_path / "d" / "only.md", "# Only\n\nThe code LYNX-4242 is here.\n")
    store = Store.open(tmp_path / "kb", create=True)
    ingest(store, [tmp_path / "d"], embedder=embedder)
    manifest = json.loads((tmp_path / "kb" / "manifest.json").read_text())
    old = {"method": "robertson", "k1": 1.2, "b": 0.75}
    manifest["bm25"] = manifest["bm25_built_with"]["bm25"] = old  # as a store of the previous release
    (tmp_path / "kb" / "manifest.json").write_text(json.dumps(manifest))
    store = Store.open(tmp_path / "kb")
    assert not store.is_indexed()
    report = index(store, embedder=embedder)
    assert report.bm25_rebuilt and report.embedded == 0 and report.upserted == 0
    assert store.is_indexed() and Store.open(tmp_path / "kb").manifest["bm25"]["method"] == "lucene"
    assert store.bm25().search(store.analyzer("LYNX-4242"), 5)[0][0] == "only.md#0"


def test_a_robertson_store_from_before_bm25_built_with_is_behind_too(tmp_path, embedder):
    """A store older still (``robertson`` and no ``bm25_built_with`` record: built with what its
    manifest says) must not be claimed current either; a plain index rebuilds BM25 only."""
    from kbtool.index import index

    write(tmp_path / "d" / "only.md", "# Only\n\nThe code LYNX-4242 is here.\n")
    store = Store.open(tmp_path / "kb", create=True)
    ingest(store, [tmp_path / "d"], embedder=embedder)
    manifest = json.loads((tmp_path / "kb" / "manifest.json").read_text())
    manifest["bm25"] = {"method": "robertson", "k1": 1.2, "b": 0.75}
    del manifest["bm25_built_with"]
    (tmp_path / "kb" / "manifest.json").write_text(json.dumps(manifest))
    store = Store.open(tmp_path / "kb")
    assert not store.is_indexed() and not store.status()["indexes_current"]
    report = index(store, embedder=embedder)
    assert report.bm25_rebuilt and report.embedded == 0 and report.upserted == 0
    assert store.is_indexed() and Store.open(tmp_path / "kb").manifest["bm25_built_with"]["bm25"]["method"] == "lucene"
