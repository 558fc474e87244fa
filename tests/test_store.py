import json

import pytest

from kbtool.store.catalog import MIGRATIONS, connect, migrate
from kbtool.errors import ModelMismatchError, StoreError
from kbtool.index import sync
from kbtool.store import Store
from kbtool.store.manifest import FORMAT_VERSION

from .conftest import write


def test_missing_store_says_how_to_create_one(tmp_path):
    with pytest.raises(StoreError, match="kbtool ingest"):
        Store.open(tmp_path / "nothing")


def test_a_non_store_folder_is_not_taken_over(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "precious.txt").write_text("keep me")
    with pytest.raises(StoreError, match="not a kbtool store"):
        Store.open(tmp_path / "data", create=True)
    assert (tmp_path / "data" / "precious.txt").read_text() == "keep me"


@pytest.mark.parametrize("version,advice", [(FORMAT_VERSION + 1, "upgrade kbtool"), (0, "re-ingest")])
def test_format_version_is_checked(tmp_path, version, advice):
    Store.open(tmp_path / "kb", create=True).close()
    manifest = tmp_path / "kb" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["format_version"] = version
    manifest.write_text(json.dumps(data))
    with pytest.raises(StoreError, match=advice):
        Store.open(tmp_path / "kb")


@pytest.mark.parametrize("damage", [
    lambda m: m["embedding"].pop("model"),
    lambda m: m.__setitem__("embedding", {}),
    lambda m: m.__setitem__("chunking", [254]),
])
def test_a_manifest_without_what_every_store_has_is_a_store_error(tmp_path, damage):
    # not an internal KeyError at the first use (and not a doctor that finds everything ok)
    Store.open(tmp_path / "kb", create=True).close()
    manifest = tmp_path / "kb" / "manifest.json"
    data = json.loads(manifest.read_text())
    damage(data)
    manifest.write_text(json.dumps(data))
    with pytest.raises(StoreError, match="the store is damaged"):
        Store.open(tmp_path / "kb")


def test_manifest_records_model_chunking_and_versions(sample_store):
    m = json.loads((sample_store.path / "manifest.json").read_text())
    assert m["format_version"] == FORMAT_VERSION and m["kbtool_version"]
    assert m["embedding"] == {"model": "sentence-transformers/all-MiniLM-L6-v2", "dim": 384, "max_tokens": 256,
                              "backend": "local", "url": None, "query_prefix": "", "passage_prefix": "",
                              "tokenizer": None, "input_type": False, "normalize": True, "runtime": "onnx"}
    assert m["chunking"]["size"] == 254
    assert m["hnsw"]["space"] == "cosine" and m["hnsw"]["ef_search"] > 10


def test_querying_with_another_model_is_refused_with_the_fix(sample_store):
    with pytest.raises(ModelMismatchError, match="kbtool index --model other-model --rebuild"):
        sample_store.check_model("other-model")
    sample_store.check_model("all-MiniLM-L6-v2")  # an alias of the store's model is fine


def test_migrations_from_blank_and_idempotent(tmp_path):
    conn = connect(tmp_path / "c.sqlite3")
    assert migrate(conn) == len(MIGRATIONS)
    assert migrate(conn) == len(MIGRATIONS)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"documents", "chunks", "embeddings", "state"} <= tables


def test_newer_catalog_schema_is_refused(tmp_path):
    conn = connect(tmp_path / "c.sqlite3")
    conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    with pytest.raises(StoreError, match="upgrade kbtool"):
        migrate(conn)


def test_status_counts(sample_store):
    info = sample_store.status()
    assert info["documents"] == 20 and info["chunks"] > 50  # 12, four Chinese pages in zh/ (q117-q149), four for q150-q160
    assert info["indexes_current"] is True
    assert set(info["documents_by_type"]) == {"md", "html", "pdf", "docx", "csv", "txt"}
    assert info["chunks"] == sample_store.vectors.count() == len(sample_store.bm25().chunk_ids)


def test_stemmer_is_off_by_default_and_a_change_rebuilds_only_bm25(tmp_path, embedder):
    from kbtool.ingestion.pipeline import ingest
    from kbtool.query.retriever import Retriever
    from kbtool.store.analyzer import Analyzer, AnalyzerConfig

    stem = Analyzer(AnalyzerConfig(stemmer="english"))
    assert stem("Running flows TW-E5120 sync.timeout_ms") == [
        "run", "flow", "tw", "e5120", "tw-e5120", "sync", "timeout", "ms", "sync.timeout_ms"]
    assert AnalyzerConfig.from_dict({"lowercase": True, "stopwords": "en", "cjk": "jieba"}).stemmer is None
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.md").write_text("# Pipes\n\nThe pipeline flows nightly through the gateways.\n")
    (tmp_path / "d" / "b.md").write_text("# Other\n\nNothing related here at all.\n")
    (tmp_path / "d" / "c.md").write_text("# Third\n\nA third unrelated document about lunch.\n")
    store = Store.open(tmp_path / "kb", create=True)
    ingest(store, [tmp_path / "d"], embedder=embedder)
    assert store.manifest["analyzer"]["stemmer"] is None
    assert Retriever(store, embedder).search("gateway", mode="bm25") == []
    assert store.set_stemmer("english") and not store.is_indexed()  # status must not claim current
    report = sync(store, embedder)
    assert report.bm25_rebuilt and report.embedded == 0 and store.is_indexed()
    assert Retriever(store, embedder).search("gateway", mode="bm25")[0].doc_id == "a.md"
    assert not store.set_stemmer("english")


def test_a_long_lived_reader_is_current_after_another_writer_ingests(tmp_path, embedder):
    # A server keeps one Store open while `kbtool ingest` (another process, here another Store)
    # adds a document: once that writer is done, the reader must answer, not call itself behind.
    from kbtool.contract import default_contract
    from kbtool.ingestion.pipeline import ingest
    from kbtool.query.pipeline import retrieve

    from .conftest import write

    write(tmp_path / "d" / "a.md", "# A\n\nThe amberfinch nests by the lighthouse.\n")
    ingest(Store.open(tmp_path / "kb", create=True), [tmp_path / "d"], embedder=embedder)
    reader = Store.open(tmp_path / "kb")
    assert retrieve(reader, default_contract(), "amberfinch", embedder=embedder).hits
    write(tmp_path / "d" / "b.md", "# B\n\nThe copperkettle boils on the stove.\n")
    ingest(Store.open(tmp_path / "kb"), [tmp_path / "d"], embedder=embedder)
    assert reader.is_indexed() and reader.status()["indexes_current"] and reader.status()["documents"] == 2
    hits = retrieve(reader, default_contract(), "copperkettle", embedder=embedder).hits
    assert hits[0].doc_id == "b.md"


# Review of issue 20 (large-store filtered search, memoised scopes, refusal explanations at
# scale): regressions found by probing, each on a real store (fake embedder for logic).
def test_a_chroma_url_with_credentials_is_refused_without_showing_them(tmp_path):
    """--chroma-url http://user:password@host or ?token=...: refused (credentials come from the
    environment), and the refusal, printed to a terminal or a CI log, must not repeat them."""
    from typer.testing import CliRunner

    from kbtool.cli import app

    write(tmp_path / "c" / "a.md", "# A\n\nhello\n")
    for url in ("http://admin:hunter2@127.0.0.1:1", "http://127.0.0.1:1/?token=hunter2",
                "http://admin:hunter2@127.0.0.1:99999", "http://127.0.0.1:1/#hunter2"):
        r = CliRunner().invoke(app, ["ingest", str(tmp_path / "c"), "--store", str(tmp_path / "kb"), "--chroma-url", url])
        assert r.exit_code == 2, r.output
        assert "--chroma-url" in r.output and "hunter2" not in r.output, r.output
        assert not (tmp_path / "kb").exists()


@pytest.mark.slow
@pytest.mark.parametrize("value", ["nan", "inf", "1e400"])
def test_a_chroma_timeout_that_is_no_number_of_seconds_is_refused(value, tmp_path, monkeypatch):
    """$KBTOOL_CHROMA_TIMEOUT=nan or inf passed the check (not <= 0) and reached httpx: against a live
    server, ValueError 'Invalid value NaN' / OverflowError 'timestamp out of range' instead of one line."""
    from typer.testing import CliRunner

    from kbtool.cli import app
    from kbtool.errors import UsageError
    from kbtool.store.chroma_server import timeout

    monkeypatch.setenv("KBTOOL_CHROMA_TIMEOUT", value)
    with pytest.raises(UsageError, match="KBTOOL_CHROMA_TIMEOUT"):
        timeout()
    write(tmp_path / "c" / "a.md", "# A\n\nhello\n")
    r = CliRunner().invoke(app, ["ingest", str(tmp_path / "c"), "--store", str(tmp_path / "kb"),
                                 "--chroma-url", "http://127.0.0.1:1"])
    assert r.exit_code == 2 and "KBTOOL_CHROMA_TIMEOUT" in r.output, r.output


@pytest.mark.slow
@pytest.mark.parametrize("server", [True, False])
def test_a_malformed_chroma_headers_setting_is_one_line_without_its_token(server, tmp_path):
    """$CHROMA_SERVER_HEADERS (how the README says to send a server credentials) that chromadb
    refuses: chromadb's import raised pydantic's ValidationError, printed as an 'Internal error'
    whose text repeats the value — the bearer token. One line naming the setting instead. A
    subprocess: chromadb reads the setting once, on import."""
    import os
    import subprocess
    import sys

    from .conftest import ROOT

    write(tmp_path / "c" / "a.md", "# A\n\nhello\n")
    env = {**os.environ, "CHROMA_SERVER_HEADERS": '{"Authorization": "Bearer s3cret-token-77"',
           "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "kbtool", "ingest", str(tmp_path / "c"), "--store", str(tmp_path / "kb")]
    if server:
        args += ["--chroma-url", "http://127.0.0.1:1"]
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "s3cret-token-77" not in out and "Internal error" not in out, out
    assert "CHROMA_" in out and "chroma_server_headers" in out, out
