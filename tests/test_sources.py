"""Sources: the store remembers the folders it was ingested from and their options; a contract may
declare them; a moved folder (a CI cache restored into another checkout) re-uses every document and
vector; two roots with the same file names live side by side under id prefixes; a clash stops."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from kbtool.cli import app

from .conftest import write

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def _docs(root):
    write(root / "en" / "guide" / "install.md", "# Install\n\nRun `pip install acme` to install the Acme client.\n\n"
          "## Timeouts { #timeouts }\n\nThe default request timeout is 30 seconds.\n")
    write(root / "en" / "index.md", "# Acme\n\nAcme syncs files between teams.\n")
    write(root / "zh" / "guide" / "install.md", "# 安装\n\n运行 `pip install acme` 安装 Acme 客户端。\n\n"
          "## 超时\n\n默认请求超时为 30 秒。\n")
    write(root / "zh" / "index.md", "# Acme\n\nAcme 在团队之间同步文件。\n")
    return root


def _report(r):
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _filter_hits(kb, question, flt):
    r = run("query", question, "--store", kb, "--json", "-m", "bm25", "-f", flt)
    assert r.exit_code in (0, 3), r.output
    return json.loads(r.stdout)["hits"]


@pytest.mark.slow
def test_reingest_without_flags_keeps_the_recorded_options(tmp_path):
    docs = _docs(tmp_path / "site")
    kb = tmp_path / "kb"
    rep = _report(run("ingest", docs, "--store", kb, "--meta-from-path", "{lang}/**", "--meta", "team=docs",
                      "--exclude", "zh/*", "--json"))
    assert rep["counts"]["added"] == 2
    # Again without flags, by path and with no path at all: nothing re-parsed, metadata kept.
    for args in ((docs,), ()):
        rep = _report(run("ingest", *args, "--store", kb, "--json"))
        assert rep["counts"] == {"added": 0, "updated": 0, "unchanged": 2, "removed": 0, "failed": 0, "skipped": 0}
        assert rep["index"]["embedded"] == 0 and rep["index"]["upserted"] == 0
    hits = _filter_hits(kb, "request timeout", "lang=en")
    assert hits and all(h["doc_id"].startswith("en/") for h in hits)
    assert _filter_hits(kb, "request timeout", "team=docs")
    status = json.loads(run("status", "--store", kb, "--json").stdout)
    [src] = status["sources"]
    assert src["root"] == str(docs.resolve()) and src["meta_from_path"] == ["{lang}/**"]
    assert src["metadata"] == {"team": "docs"} and src["exclude"] == ["zh/*"]


@pytest.mark.slow
def test_a_flag_that_differs_from_the_record_is_refused_unless_updated(tmp_path):
    docs = _docs(tmp_path / "site")
    kb = tmp_path / "kb"
    _report(run("ingest", docs / "en", "--store", kb, "--meta", "lang=en", "--json"))
    r = run("ingest", docs / "en", "--store", kb, "--meta", "lang=fr")
    assert r.exit_code == 2
    assert "--meta lang=fr differs from what the store recorded for this source (lang=en)" in r.output
    assert "--update-sources" in r.output
    assert _filter_hits(kb, "request timeout", "lang=en")  # nothing changed
    rep = _report(run("ingest", docs / "en", "--store", kb, "--meta", "lang=fr", "--update-sources", "--json"))
    assert rep["counts"]["updated"] == 2 and rep["index"]["embedded"] == 0  # re-parsed; vectors from the cache
    assert _filter_hits(kb, "request timeout", "lang=fr")
    assert not _filter_hits(kb, "request timeout", "lang=en")


@pytest.mark.slow
def test_the_ci_cache_case_reuses_every_vector_and_exits_0(tmp_path, monkeypatch):
    """The store and the docs restored into another checkout folder: the old folder is gone."""
    first = tmp_path / "checkout-1"
    _docs(first / "docs")
    kb = first / ".kb"
    monkeypatch.chdir(first)
    rep = _report(run("ingest", "docs", "--store", kb, "--meta-from-path", "{lang}/**", "--json"))
    n = rep["counts"]["added"]
    second = tmp_path / "checkout-2"
    shutil.copytree(first, second)
    shutil.rmtree(first)
    monkeypatch.chdir(second)
    rep = _report(run("ingest", "docs", "--store", second / ".kb", "--json"))
    assert rep["counts"] == {"added": 0, "updated": 0, "unchanged": n, "removed": 0, "failed": 0, "skipped": 0}
    assert rep["index"]["embedded"] == 0 and rep["index"]["upserted"] == 0 and rep["index"]["deleted"] == 0
    assert rep["moved"] == [{"from": str(first / "docs"), "to": str(second / "docs"), "documents": n}]
    # The recorded options moved with it; citations and --filter work from the new place.
    hits = _filter_hits(second / ".kb", "request timeout", "lang=en")
    assert hits and hits[0]["doc_id"] == "en/guide/install.md"
    status = json.loads(run("status", "--store", second / ".kb", "--json").stdout)
    assert status["indexes_current"] and [s["root"] for s in status["sources"]] == [str(second / "docs")]
    # A file changed in the new checkout is picked up there.
    write(second / "docs" / "en" / "index.md", "# Acme\n\nAcme syncs files between teams and devices.\n")
    rep = _report(run("ingest", "--store", second / ".kb", "--json"))
    assert rep["counts"]["updated"] == 1 and rep["counts"]["unchanged"] == n - 1


@pytest.mark.slow
def test_root_moved_names_a_move_while_the_old_folder_still_exists(tmp_path):
    docs = _docs(tmp_path / "a")
    kb = tmp_path / "kb"
    n = _report(run("ingest", docs, "--store", kb, "--json"))["counts"]["added"]
    copy = tmp_path / "b"
    shutil.copytree(docs, copy)
    r = run("ingest", copy, "--store", kb)  # both exist: a clash, named with the ways out
    assert r.exit_code == 2 and "--root-moved" in r.output and "--id-prefix" in r.output
    rep = _report(run("ingest", copy, "--store", kb, "--root-moved", docs, copy, "--json"))
    assert rep["counts"]["unchanged"] == n and rep["index"]["embedded"] == 0 and rep["index"]["upserted"] == 0
    r = run("ingest", "--store", kb, "--root-moved", tmp_path / "nowhere", copy)
    assert r.exit_code == 2 and "has no documents from there" in r.output


@pytest.mark.slow
def test_a_root_clash_exits_non_zero_and_writes_nothing(tmp_path):
    docs = _docs(tmp_path / "site")
    kb = tmp_path / "kb"
    _report(run("ingest", docs / "en", "--store", kb, "--json"))
    before = json.loads(run("status", "--store", kb, "--json").stdout)
    r = run("ingest", docs / "zh", "--store", kb)
    assert r.exit_code == 2
    assert "2 document id(s) (e.g. 'index.md') already come from" in r.output
    after = json.loads(run("status", "--store", kb, "--json").stdout)
    assert (after["documents"], after["chunks"], after["sources"]) == (before["documents"], before["chunks"], before["sources"])
    hits = _filter_hits(kb, "pip install acme", "doc_id=guide/install.md")
    assert "Acme client" in hits[0]["text"]  # still the English page


@pytest.mark.slow
def test_two_language_roots_declared_in_the_contract(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    _docs(repo / "docs")
    write(repo / "kbtool.yaml", """contract_version: 1
data:
  sources:
    - root: docs/en
      base_url: https://acme.example/
      meta: {lang: en}
    - root: docs/zh
      id_prefix: zh
      base_url: https://acme.example/zh/
      meta: {lang: zh}
""")
    monkeypatch.chdir(repo)
    rep = _report(run("ingest", "--store", ".kb", "--json"))
    assert sorted(rep["added"]) == ["guide/install.md", "index.md", "zh/guide/install.md", "zh/index.md"]
    r = run("query", "pip install acme", "--store", ".kb", "--json", "-m", "bm25", "-k", "4")
    cites = {h["doc_id"]: (h["citation"], h["url"]) for h in json.loads(r.stdout)["hits"]}
    assert cites["guide/install.md"][0].startswith("https://acme.example/guide/install/")
    assert cites["zh/guide/install.md"][0] == "https://acme.example/zh/guide/install/"
    r = run("query", "同步文件", "--store", ".kb", "--json", "-m", "bm25", "-k", "1")
    [hit] = json.loads(r.stdout)["hits"]
    assert (hit["doc_id"], hit["citation"], hit["url"]) == ("zh/index.md", "https://acme.example/zh/", "https://acme.example/zh/")
    r = run("query", "默认请求超时", "--store", ".kb", "-m", "bm25", "-f", "lang=zh", "--context")
    assert "Source: https://acme.example/zh/guide/install/ — 安装 > 超时" in r.stdout
    r = run("query", "default request timeout", "--store", ".kb", "-m", "bm25", "-f", "lang=en", "--context")
    assert "Source: https://acme.example/guide/install/#timeouts — Install > Timeouts" in r.stdout
    # Flags for a source the contract declares are refused: the contract is the one place.
    r = run("ingest", "--store", ".kb", "--meta", "lang=fr")
    assert r.exit_code == 2 and "data.sources" in r.output
    # The repository checked out elsewhere (both folders exist): the declared sources move with it.
    other = tmp_path / "elsewhere"
    shutil.copytree(repo, other)
    monkeypatch.chdir(other)
    rep = _report(run("ingest", "--store", ".kb", "--json"))
    assert rep["counts"]["unchanged"] == 4 and rep["index"]["upserted"] == 0 and len(rep["moved"]) == 2
    # A source taken out of the contract leaves the store with its documents.
    write(other / "kbtool.yaml", "contract_version: 1\ndata:\n  sources:\n    - root: docs/en\n"
          "      base_url: https://acme.example/\n      meta: {lang: en}\n")
    rep = _report(run("ingest", "--store", ".kb", "--json"))
    assert sorted(rep["removed"]) == ["zh/guide/install.md", "zh/index.md"] and rep["counts"]["unchanged"] == 2
    assert [s["root"] for s in json.loads(run("status", "--store", ".kb", "--json").stdout)["sources"]] == [
        str(other / "docs" / "en")]


def test_ingest_without_a_path_needs_something_to_ingest(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run("ingest", "--store", tmp_path / "kb")
    assert r.exit_code == 2 and "name a folder" in r.output
    assert not (tmp_path / "kb").exists()  # no empty store left behind
    write(tmp_path / "kbtool.yaml", "contract_version: 1\ndata:\n  sources:\n    - root: missing\n")
    r = run("ingest", "--store", tmp_path / "kb")
    assert r.exit_code == 2 and "data.sources[0].root 'missing' does not exist" in r.output


def test_the_library_reingests_recorded_sources(tmp_path, embedder):
    from kbtool.ingestion.pipeline import IngestOptions, ingest
    from kbtool.store import Store

    docs = _docs(tmp_path / "site")
    kb = Store.open(tmp_path / "kb", create=True)
    ingest(kb, [docs / "zh"], IngestOptions(id_prefix="zh/", metadata={"lang": "zh"}), embedder=embedder)
    report = ingest(kb, embedder=embedder)  # no path: the recorded source, with its options
    assert sorted(report.unchanged) == ["zh/guide/install.md", "zh/index.md"] and not report.added
    assert all(m["lang"] == "zh" for _, _, m in kb.chunk_metadata())


KILL_IN_MOVE = """
import os, signal, sys
from kbtool.store import catalog
original = catalog.Catalog.move_root
def move_root(self, old, new):
    if sys.argv[1] == "after":
        original(self, old, new)
    os.kill(os.getpid(), signal.SIGKILL)
catalog.Catalog.move_root = move_root
from kbtool.cli import main
sys.argv = ["kbtool", "ingest", sys.argv[2], "--store", sys.argv[3], "-q"]
main()
"""


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_kill_while_a_root_moves_loses_nothing(tmp_path, when):
    """A real process SIGKILLed just before / just after the catalog re-points a moved folder: the
    next ingest finishes the move, re-uses every vector, and no document is lost or doubled."""
    import os
    import subprocess
    import sys

    docs = _docs(tmp_path / "a")
    kb = tmp_path / "kb"
    n = _report(run("ingest", docs, "--store", kb, "--meta", "team=x", "--json"))["counts"]["added"]
    moved = tmp_path / "b"
    docs.rename(moved)
    env = {**os.environ, "PYTHONPATH": str(__import__("pathlib").Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-c", KILL_IN_MOVE, when, str(moved), str(kb)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr
    for args in ((moved,), ()):  # by path, or (no path) from the record alone
        rep = _report(run("ingest", *args, "--store", kb, "--json"))
        assert rep["counts"]["unchanged"] == n and not rep["counts"]["added"] and not rep["counts"]["removed"]
        assert rep["index"]["embedded"] == 0 and rep["index"]["upserted"] == 0
    status = json.loads(run("status", "--store", kb, "--json").stdout)
    assert status["documents"] == n and status["indexes_current"]
    assert [(s["root"], s["metadata"]) for s in status["sources"]] == [(str(moved), {"team": "x"})]
