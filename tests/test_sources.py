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
    # both languages' pages in one answer: routing off (an English question is otherwise searched in English pages)
    r = run("query", "pip install acme", "--store", ".kb", "--json", "-m", "bm25", "-k", "4",
            "--set", "retrieve.language.route=off")
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
    # routed by language (the default): the English question is answered from the English pages only
    r = run("query", "pip install acme", "--store", ".kb", "--json", "-m", "bm25", "-k", "4")
    assert {h["doc_id"] for h in json.loads(r.stdout)["hits"]} <= {"guide/install.md", "index.md"}
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


# Review of the sources feature (issue 18): defects found by trying it as a user would, each
# with the real CLI, real files, a real store and the bundled model.
def _status(kb):
    return json.loads(run("status", "--store", kb, "--json").stdout)


def _three_docs(root):
    write(root / "a.md", "# Apples\n\nApples are red fruit that grow on trees.\n")
    write(root / "sub" / "s.md", "# Submarines\n\nSubmarines dive under the sea.\n")
    write(root / "zh" / "z.md", "# Zebras\n\nZebras have black and white stripes.\n")
    return root


def _hits(kb, question):
    r = run("query", question, "--store", kb, "--json", "-m", "bm25", "-k", "10")
    assert r.exit_code in (0, 3), r.output
    return [h["doc_id"] for h in json.loads(r.stdout)["hits"]]


@pytest.mark.slow
def test_ingesting_a_subfolder_does_not_narrow_the_recorded_folder(tmp_path):
    docs = _three_docs(tmp_path / "docs")
    kb = tmp_path / "kb"
    _report(run("ingest", docs, "--store", kb, "--json"))
    _report(run("ingest", docs / "sub", "--store", kb, "--json"))  # one part again, after an edit there
    [src] = _status(kb)["sources"]
    assert src["paths"] == ["."]
    write(docs / "new.md", "# Newts\n\nNewts are small amphibians.\n")
    rep = _report(run("ingest", "--store", kb, "--json"))  # the whole folder, as recorded
    assert rep["added"] == ["new.md"]


@pytest.mark.slow
def test_the_same_id_prefix_or_include_root_given_again_is_not_a_change(tmp_path):
    docs = _three_docs(tmp_path / "docs")
    kb = tmp_path / "kb"
    _report(run("ingest", docs / "zh", "--store", kb, "--id-prefix", "zh", "--json"))
    rep = _report(run("ingest", docs / "zh", "--store", kb, "--id-prefix", "zh", "--json"))
    assert rep["counts"]["unchanged"] == 1
    rep = _report(run("ingest", docs / "zh", "--store", kb, "--id-prefix", "zh\\", "--json"))  # Windows spelling
    assert rep["counts"]["unchanged"] == 1
    kb2 = tmp_path / "kb2"
    _report(run("ingest", docs, "--store", kb2, "--include-root", docs / "sub", "--json"))
    rep = _report(run("ingest", docs, "--store", kb2, "--include-root", docs / "sub", "--json"))
    assert rep["counts"]["unchanged"] == 3


@pytest.mark.slow
def test_changing_the_id_prefix_leaves_no_ghosts(tmp_path):
    docs = _three_docs(tmp_path / "docs")
    kb = tmp_path / "kb"
    _report(run("ingest", docs / "zh", "--store", kb, "--json"))
    rep = _report(run("ingest", docs / "zh", "--store", kb, "--id-prefix", "zh/", "--update-sources", "--json"))
    assert rep["added"] == ["zh/z.md"] and rep["removed"] == ["z.md"]
    assert _status(kb)["documents"] == 1
    assert _hits(kb, "zebras stripes") == ["zh/z.md"]
    assert run("doctor", "--store", kb).exit_code == 0


@pytest.mark.slow
def test_a_nested_root_with_its_own_prefix_survives_its_parent_being_ingested(tmp_path):
    docs = _three_docs(tmp_path / "docs")
    kb = tmp_path / "kb"
    _report(run("ingest", docs / "zh", "--store", kb, "--id-prefix", "zh/", "--json"))
    rep = _report(run("ingest", docs, "--store", kb, "--exclude", "zh/*", "--json"))
    assert not rep["removed"]
    assert "zh/z.md" in _hits(kb, "zebras stripes")
    assert len(_status(kb)["sources"]) == 2
    rep = _report(run("ingest", "--store", kb, "--json"))
    assert rep["counts"]["unchanged"] == 3 and not rep["removed"]


@pytest.mark.slow
def test_nested_declared_sources_are_stable_and_a_shared_id_stops_before_writing(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    _three_docs(repo / "docs")
    write(repo / "kbtool.yaml", "contract_version: 1\ndata:\n  sources:\n    - root: docs\n"
          "      exclude: ['zh/*']\n    - root: docs/zh\n      id_prefix: zh/\n")
    monkeypatch.chdir(repo)
    rep = _report(run("ingest", "--store", ".kb", "--json"))
    assert sorted(rep["added"]) == ["a.md", "sub/s.md", "zh/z.md"]
    rep = _report(run("ingest", "--store", ".kb", "--json"))  # again: nothing removed and added back
    assert rep["counts"]["unchanged"] == 3 and not rep["added"] and not rep["removed"]
    write(repo / "kbtool.yaml", "contract_version: 1\ndata:\n  sources:\n    - root: docs\n"
          "    - root: docs/zh\n      id_prefix: zh/\n")  # both bring zh/z.md now
    before = _status(".kb")
    r = run("ingest", "--store", ".kb")
    assert r.exit_code == 2 and "'zh/z.md' also comes from" in r.output
    after = _status(".kb")
    assert (after["documents"], after["sources"]) == (before["documents"], before["sources"])


@pytest.mark.slow
def test_a_beir_folder_ingested_again_by_path_keeps_its_format(tmp_path):
    beir = tmp_path / "beir"
    write(beir / "corpus.jsonl", '{"_id": "d1", "title": "Apples", "text": "Apples are red fruit."}\n'
          '{"_id": "d2", "title": "Otters", "text": "Otters swim in rivers."}\n')
    kb = tmp_path / "kb"
    _report(run("ingest", beir, "--format", "beir", "--store", kb, "--json"))
    rep = _report(run("ingest", beir, "--store", kb, "--json"))
    assert rep["counts"]["unchanged"] == 2 and not rep["skipped"]
    assert [s["format"] for s in _status(kb)["sources"]] == ["beir"]


KILL_IN_REMOVE = """
import os, signal, sys
from kbtool.store import Store
def remove_documents(self, doc_ids):
    os.kill(os.getpid(), signal.SIGKILL)
Store.remove_documents = remove_documents
from kbtool.cli import main
sys.argv = ["kbtool", "ingest", "--store", sys.argv[1], "-q"]
main()
"""


@pytest.mark.slow
def test_a_kill_after_a_source_left_the_contract_leaves_no_ghosts(tmp_path, monkeypatch):
    """SIGKILL between writing the record (the source gone from it) and removing its documents:
    the next run still removes them."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = tmp_path / "repo"
    _three_docs(repo / "docs")
    write(repo / "kbtool.yaml", "contract_version: 1\ndata:\n  sources:\n    - root: docs/sub\n"
          "    - root: docs/zh\n      id_prefix: zh/\n")
    monkeypatch.chdir(repo)
    _report(run("ingest", "--store", ".kb", "--json"))
    write(repo / "kbtool.yaml", "contract_version: 1\ndata:\n  sources:\n    - root: docs/sub\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-c", KILL_IN_REMOVE, ".kb"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == -9, proc.stderr
    rep = _report(run("ingest", "--store", ".kb", "--json"))
    assert rep["removed"] == ["zh/z.md"]
    assert _status(".kb")["documents"] == 1 and _hits(".kb", "zebras stripes") == []


def test_a_bad_option_of_a_declared_source_names_the_contract_field(tmp_path, monkeypatch):
    _three_docs(tmp_path / "docs")
    monkeypatch.chdir(tmp_path)
    for field, value, said in (("markup_off", "[bogus]", "'bogus': use one of"),
                               ("encoding", "nope", "unknown encoding 'nope'"),
                               ("meta", "{doc_id: x}", "doc_id are set by kbtool"),
                               ("meta_from_path", "['nofield']", "name at least one field")):
        write(tmp_path / "kbtool.yaml", f"contract_version: 1\ndata:\n  sources:\n    - root: docs\n"
              f"      {field}: {value}\n")
        r = run("ingest", "--store", tmp_path / "kb")
        assert r.exit_code != 0 and "Traceback" not in r.output
        assert f"kbtool.yaml: data.sources.0.{field}: " in r.output and said in r.output, r.output
        assert "--markup-off" not in r.output
        assert not (tmp_path / "kb").exists()


@pytest.mark.slow
def test_a_subfolder_ingested_again_keeps_its_folders_exclude(tmp_path):
    docs = _three_docs(tmp_path / "docs")
    write(docs / "sub" / "secret.md", "# Secret\n\nThe launch codes are kept in the vault.\n")
    kb = tmp_path / "kb"
    _report(run("ingest", docs, "--store", kb, "--exclude", "sub/secret.md", "--json"))
    rep = _report(run("ingest", docs / "sub", "--store", kb, "--json"))  # the recorded exclude still holds
    assert rep["counts"]["unchanged"] == 1 and not rep["added"] and not rep["removed"]
    assert _hits(kb, "launch codes vault") == []


@pytest.mark.slow
def test_a_recorded_single_file_deleted_since_leaves_the_store(tmp_path):
    docs = _three_docs(tmp_path / "docs")
    kb = tmp_path / "kb"
    _report(run("ingest", docs / "a.md", docs / "zh" / "z.md", "--store", kb, "--json"))
    (docs / "a.md").unlink()
    rep = _report(run("ingest", "--store", kb, "--keep-missing", "--json"))
    assert not rep["removed"] and _status(kb)["documents"] == 2
    rep = _report(run("ingest", "--store", kb, "--json", "-v"))  # -v: the unchanged documents listed too
    assert rep["removed"] == ["a.md"] and rep["unchanged"] == ["z.md"]
    assert _hits(kb, "apples red fruit") == []
    rep = _report(run("ingest", "--store", kb, "--json"))
    assert rep["counts"]["unchanged"] == 1 and not rep["removed"] and not rep["added"]


@pytest.mark.slow
def test_root_moved_applies_to_a_subfolder_of_the_new_place(tmp_path):
    import shutil

    docs = _three_docs(tmp_path / "a")
    kb = tmp_path / "kb"
    _report(run("ingest", docs, "--store", kb, "--meta", "access=team-a", "--json"))
    new = tmp_path / "b"
    shutil.copytree(docs, new)
    rep = _report(run("ingest", new / "sub", "--root-moved", docs, new, "--store", kb, "--json"))
    assert rep["moved"] and rep["moved"][0]["to"] == str(new) and not rep["added"]
    assert rep["counts"]["unchanged"] == 1 and rep["index"]["embedded"] == 0
    status = _status(kb)
    assert status["documents"] == 3
    assert [(s["root"], s["metadata"], s["paths"]) for s in status["sources"]] == [(str(new), {"access": "team-a"}, ["."])]


def _make_old(kb, docs):
    """The store as kbtool wrote it before sources were recorded: no manifest 'sources', the
    include root and included files absolute in each document's options."""
    import sqlite3

    m = json.loads((kb / "manifest.json").read_text())
    m.pop("sources")
    (kb / "manifest.json").write_text(json.dumps(m))
    db = sqlite3.connect(kb / "catalog.sqlite3")
    for doc_id, raw in list(db.execute("SELECT doc_id, options FROM documents")):
        o = json.loads(raw)
        if "include_root" in o:
            o["include_root"] = str(docs / o["include_root"])
        if "includes" in o:
            o["includes"] = {str(docs / k): v for k, v in o["includes"].items()}
        db.execute("UPDATE documents SET options=? WHERE doc_id=?", (json.dumps(o, sort_keys=True), doc_id))
    db.commit()
    db.close()


@pytest.mark.slow
def test_an_old_store_keeps_its_access_metadata_when_ingested_again_without_flags(tmp_path):
    docs = _three_docs(tmp_path / "docs")
    write(docs / "guide.md", "# Guide\n\nThe guide says:\n\n--8<-- \"sub/s.md\"\n")
    kb = tmp_path / "kb"
    _report(run("ingest", docs, "--store", kb, "--meta", "access=staff", "--include-root", docs, "--json"))
    _make_old(kb, docs)
    for args in ((), (docs,)):  # no path: the roots its documents come from; or the folder, without flags
        rep = _report(run("ingest", *args, "--store", kb, "--json"))
        assert rep["counts"]["added"] == 0 and not rep["removed"] and rep["index"]["embedded"] == 0
        r = run("query", "zebras stripes", "--store", kb, "--json", "-m", "bm25", "-f", "access=staff")
        assert [h["doc_id"] for h in json.loads(r.stdout)["hits"]][:1] == ["zh/z.md"]
    [src] = _status(kb)["sources"]
    assert src["metadata"] == {"access": "staff"} and src["include_root"] in (None, ".")


@pytest.mark.slow
def test_a_file_newly_excluded_from_a_declared_source_leaves_the_store(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    _three_docs(repo / "docs")
    monkeypatch.chdir(repo)
    write(repo / "kbtool.yaml", "contract_version: 1\ndata:\n  sources:\n    - root: docs\n")
    _report(run("ingest", "--store", ".kb", "--json"))
    write(repo / "kbtool.yaml", "contract_version: 1\ndata:\n  sources:\n    - root: docs\n      exclude: ['zh/*']\n")
    rep = _report(run("ingest", "--store", ".kb", "--json"))
    assert rep["removed"] == ["zh/z.md"] and rep["counts"]["unchanged"] == 2
    assert _hits(".kb", "zebras stripes") == []
    # the same by flag, without a contract: a narrower --include, recorded with --update-sources
    monkeypatch.chdir(tmp_path)
    kb = tmp_path / "kb"
    _report(run("ingest", repo / "docs", "--store", kb, "--json"))
    rep = _report(run("ingest", repo / "docs", "--store", kb, "--include", "sub/*", "--update-sources", "--json"))
    assert sorted(rep["removed"]) == ["a.md", "zh/z.md"] and _status(kb)["documents"] == 1


@pytest.mark.slow
def test_two_roots_with_the_same_file_names_moved_together_each_find_their_own(tmp_path):
    import shutil

    first = tmp_path / "checkout-1"
    write(first / "docs" / "en" / "docs" / "index.md", "# Home\n\nThe English welcome page.\n")
    write(first / "docs" / "zh" / "docs" / "index.md", "# Home\n\nThe Chinese welcome page, zhongwen.\n")
    kb = tmp_path / "kb"
    _report(run("ingest", first / "docs" / "en" / "docs", "--meta", "lang=en", "--store", kb, "--json"))
    _report(run("ingest", first / "docs" / "zh" / "docs", "--meta", "lang=zh", "--id-prefix", "zh/", "--store", kb,
                "--json"))
    second = tmp_path / "checkout-2"
    shutil.move(first, second)
    for lang in ("zh", "en"):
        rep = _report(run("ingest", second / "docs" / lang / "docs", "--store", kb, "--json"))
        assert rep["moved"][0]["from"] == str(first / "docs" / lang / "docs")
        assert rep["counts"]["unchanged"] == 1 and rep["index"]["embedded"] == 0
    srcs = {s["root"]: (s["metadata"], s["id_prefix"]) for s in _status(kb)["sources"]}
    assert srcs == {str(second / "docs" / "en" / "docs"): ({"lang": "en"}, ""),
                    str(second / "docs" / "zh" / "docs"): ({"lang": "zh"}, "zh/")}


@pytest.mark.slow
def test_a_moved_beir_folder_is_reused_with_root_moved(tmp_path):
    old, new = tmp_path / "b1", tmp_path / "b2"
    write(old / "corpus.jsonl", '{"_id": "d1", "title": "Apples", "text": "Apples are red fruit."}\n'
          '{"_id": "d2", "title": "Otters", "text": "Otters swim in rivers."}\n')
    kb = tmp_path / "kb"
    _report(run("ingest", old, "--format", "beir", "--store", kb, "--json"))
    old.rename(new)
    r = run("ingest", new, "--format", "beir", "--store", kb)
    assert r.exit_code == 2 and f"--root-moved beir:{old} {new}" in r.output
    for moved in (old, f"beir:{old}"):  # the folder, or the root as the message spells it
        rep = _report(run("ingest", new, "--format", "beir", "--root-moved", moved, new, "--store", kb, "--json"))
        assert rep["counts"]["unchanged"] == 2 and rep["index"]["embedded"] == 0
        assert rep["moved"] == [{"from": f"beir:{old}", "to": f"beir:{new}", "documents": 2}]
        new.rename(old)
        _report(run("ingest", "--store", kb, "--root-moved", new, old, "--json"))  # and back, without a path
        old.rename(new)
    assert _status(kb)["documents"] == 2


@pytest.mark.slow
def test_a_folder_and_its_subfolder_in_one_run_are_one_root(tmp_path):
    """`kbtool ingest docs docs/sub` on a new store: one root; sub's files are stored once."""
    from typer.testing import CliRunner

    from kbtool.cli import app

    write(tmp_path / "docs" / "a.md", "# A\n\nalpha text\n")
    write(tmp_path / "docs" / "sub" / "s.md", "# S\n\nsigma text\n")
    r = CliRunner().invoke(app, ["ingest", str(tmp_path / "docs" / "sub"), str(tmp_path / "docs"), "--store",
                                 str(tmp_path / "kb"), "--json"])
    assert r.exit_code == 0, r.output
    import json

    assert sorted(json.loads(r.stdout)["added"]) == ["a.md", "sub/s.md"]
    status = json.loads(CliRunner().invoke(app, ["status", "--store", str(tmp_path / "kb"), "--json"]).stdout)
    assert [s["root"] for s in status["sources"]] == [str(tmp_path / "docs")] and status["documents"] == 2


def test_root_moved_with_declared_sources_and_a_bad_prefix_say_so_before_writing(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from kbtool.cli import app

    write(tmp_path / "docs" / "a.md", "# A\n\nalpha text\n")
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["ingest", "docs", "--id-prefix", "../x", "--store", str(tmp_path / "kb")])
    assert r.exit_code == 2 and "--id-prefix" in r.output and not (tmp_path / "kb").exists()
    write(tmp_path / "kbtool.yaml", "contract_version: 1\ndata:\n  sources:\n    - root: docs\n")
    r = CliRunner().invoke(app, ["ingest", "--store", str(tmp_path / "kb"), "--root-moved", str(tmp_path / "old"),
                                 str(tmp_path / "docs")])
    assert r.exit_code == 2 and "drop --root-moved" in r.output


def test_a_kbtool_yaml_in_the_working_directory_declares_the_sources_of_its_own_store_only(tmp_path, monkeypatch):
    """./kbtool.yaml (found, not named) binds `ingest` into the store beside it, a store built from
    its sources, or a new one built from them; an ingest of other folders into another store is
    not refused by it, and a store built from other folders keeps them. --contract binds any."""
    repo = tmp_path / "repo"
    write(repo / "docs" / "a.md", "# A\n\nalpha text\n")
    write(repo / "notes" / "n.md", "# N\n\nnote text\n")
    write(repo / "kbtool.yaml", "contract_version: 1\ndata:\n  sources:\n    - root: docs\n")
    monkeypatch.chdir(repo)
    monkeypatch.delenv("KBTOOL_CONTRACT", raising=False)
    monkeypatch.delenv("KBTOOL_STORE", raising=False)  # the default store: ./.kb
    model = ["--parse-only", "--model", "openai:http://127.0.0.1:9/v1#fake"]  # parsing only: no model is asked

    def ingest(*args):
        r = run("ingest", *args, *model, "--json")
        return r.exit_code, (json.loads(r.stdout) if r.exit_code == 0 else None), r.stderr

    code, rep, said = ingest(".", "--store", tmp_path / "other", "-i", "*.md")  # the case of the issue
    assert code == 0 and sorted(rep["added"]) == ["docs/a.md", "notes/n.md"]
    assert "kbtool.yaml declares the sources of its own store" in said and "--contract kbtool.yaml" in said
    code, rep, _ = ingest("--store", tmp_path / "other")  # the folders it was built from, not the contract's
    assert code == 0 and rep["counts"]["unchanged"] == 2 and not rep["removed"]
    code, _, said = ingest("notes", "--store", tmp_path / "other", "--contract", "kbtool.yaml")  # named: binds
    assert code == 2 and "is not under a source the contract declares" in said
    code, _, said = ingest("notes")  # the store beside it (.kb): bound
    assert code == 2 and "is not under a source the contract declares" in said and "--contract" in said
    code, rep, said = ingest("--store", tmp_path / "built")  # a new store, no path: built from the contract
    assert code == 0 and rep["added"] == ["a.md"] and "note:" not in said
    code, _, said = ingest("notes", "--store", tmp_path / "built")  # a store built from its sources: bound
    assert code == 2 and "is not under a source the contract declares" in said
