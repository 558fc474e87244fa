"""Review of the sources feature (issue 18): defects found by trying it as a user would, each
with the real CLI, real files, a real store and the bundled model."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kbtool.cli import app

from .conftest import write

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def _report(r):
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _status(kb):
    return json.loads(run("status", "--store", kb, "--json").stdout)


def _docs(root):
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
    docs = _docs(tmp_path / "docs")
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
    docs = _docs(tmp_path / "docs")
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
    docs = _docs(tmp_path / "docs")
    kb = tmp_path / "kb"
    _report(run("ingest", docs / "zh", "--store", kb, "--json"))
    rep = _report(run("ingest", docs / "zh", "--store", kb, "--id-prefix", "zh/", "--update-sources", "--json"))
    assert rep["added"] == ["zh/z.md"] and rep["removed"] == ["z.md"]
    assert _status(kb)["documents"] == 1
    assert _hits(kb, "zebras stripes") == ["zh/z.md"]
    assert run("doctor", "--store", kb).exit_code == 0


@pytest.mark.slow
def test_a_nested_root_with_its_own_prefix_survives_its_parent_being_ingested(tmp_path):
    docs = _docs(tmp_path / "docs")
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
    _docs(repo / "docs")
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
    _docs(repo / "docs")
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
    _docs(tmp_path / "docs")
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
    docs = _docs(tmp_path / "docs")
    write(docs / "sub" / "secret.md", "# Secret\n\nThe launch codes are kept in the vault.\n")
    kb = tmp_path / "kb"
    _report(run("ingest", docs, "--store", kb, "--exclude", "sub/secret.md", "--json"))
    rep = _report(run("ingest", docs / "sub", "--store", kb, "--json"))  # the recorded exclude still holds
    assert rep["counts"]["unchanged"] == 1 and not rep["added"] and not rep["removed"]
    assert _hits(kb, "launch codes vault") == []


@pytest.mark.slow
def test_a_recorded_single_file_deleted_since_leaves_the_store(tmp_path):
    docs = _docs(tmp_path / "docs")
    kb = tmp_path / "kb"
    _report(run("ingest", docs / "a.md", docs / "zh" / "z.md", "--store", kb, "--json"))
    (docs / "a.md").unlink()
    rep = _report(run("ingest", "--store", kb, "--keep-missing", "--json"))
    assert not rep["removed"] and _status(kb)["documents"] == 2
    rep = _report(run("ingest", "--store", kb, "--json"))
    assert rep["removed"] == ["a.md"] and rep["unchanged"] == ["z.md"]
    assert _hits(kb, "apples red fruit") == []
    rep = _report(run("ingest", "--store", kb, "--json"))
    assert rep["counts"]["unchanged"] == 1 and not rep["removed"] and not rep["added"]


@pytest.mark.slow
def test_root_moved_applies_to_a_subfolder_of_the_new_place(tmp_path):
    import shutil

    docs = _docs(tmp_path / "a")
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
    docs = _docs(tmp_path / "docs")
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
    _docs(repo / "docs")
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
