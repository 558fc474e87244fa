"""Read-only, full and shared stores are told apart from damaged ones: a store on a read-only file
system, or owned by another user, answers `status` and `query`; a write says why it cannot be done;
a full file system during ingest or query is one clear line, nothing is lost, and a re-run after
space is freed repairs the store."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbtool.cli import app

from .conftest import ROOT, write

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def docs(tmp_path):
    write(tmp_path / "docs/guide.md", "# Guide\n\n## Ports\n\nThe server listens on port 8443 (setting net.port).\n")
    write(tmp_path / "docs/faq.md", "# FAQ\n\nReset a password from the account page.\n")
    write(tmp_path / "docs/billing.md", "# Billing\n\nInvoices are sent on the first day of the month.\n")
    return tmp_path / "docs"


def _mount(*args) -> bool:
    return os.geteuid() == 0 and subprocess.run(["mount", *map(str, args)], capture_output=True).returncode == 0


@contextmanager
def read_only_view(src: Path, at: Path):
    at.mkdir()
    if not (_mount("--bind", src, at) and _mount("-o", "remount,ro,bind", at)):
        subprocess.run(["umount", str(at)], capture_output=True)
        pytest.skip("needs root and bind mounts to make a read-only file system")
    try:
        yield at
    finally:
        subprocess.run(["umount", "-l", str(at)], check=True)  # lazily: open maps of this process


@contextmanager
def tmpfs(at: Path, size: str):
    at.mkdir()
    if not _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", at):
        pytest.skip("needs root and tmpfs mounts to fill a file system")
    try:
        yield at
    finally:
        subprocess.run(["umount", "-l", str(at)], check=True)  # lazily: open maps of this process


def _hits(r):
    assert r.exit_code == 0, r.output
    return [(h["chunk_id"], round(h["score"], 5)) for h in json.loads(r.stdout)["hits"]]


@pytest.mark.slow
def test_a_store_on_a_read_only_file_system_answers_and_refuses_writes_clearly(docs, tmp_path):
    kb = tmp_path / "kb"
    assert run("ingest", docs, "--store", kb, "-q").exit_code == 0
    expected = _hits(run("query", "which port does the server listen on", "--store", kb, "--json"))
    with read_only_view(kb, tmp_path / "ro") as ro:
        status = run("status", "--store", ro, "--json")
        assert status.exit_code == 0, status.output
        assert json.loads(status.stdout)["indexes_current"] is True
        assert _hits(run("query", "which port does the server listen on", "--store", ro, "--json")) == expected
        assert run("doctor", "--store", ro).exit_code == 0
        for args in (["ingest", docs], ["index"], ["chunk", "--all"]):
            r = run(*args, "--store", ro)
            assert r.exit_code == 1, r.output
            assert "read-only file system" in r.stderr and "damaged" not in r.stderr, r.stderr
            assert "Internal error" not in r.stderr


@pytest.mark.slow
def test_store_files_follow_the_umask(docs, tmp_path):
    from kbtool.store.files import umask_mode

    kb = tmp_path / "kb"
    assert run("ingest", docs, "--store", kb, "-q").exit_code == 0
    for name in ("manifest.json", "writer.json", "bm25/state.json"):
        if (kb / name).exists():
            assert (kb / name).stat().st_mode & 0o777 == umask_mode(), name


def _as_another_user(path: Path) -> str:
    """In a forked child running as nobody (the interpreter lives under /root, which nobody may not
    enter: everything the child needs is imported before the fork)."""
    import fcntl  # noqa: F401  (the lock probe's)

    from kbtool.errors import StoreReadOnlyError
    from kbtool.query.retriever import Retriever
    from kbtool.store import Store

    from .conftest import FakeEmbedder

    read, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            kb = Store.open(path)
            assert kb.status()["indexes_current"] and not kb.writer_active()
            hits = Retriever(kb, FakeEmbedder()).search("which port does the server listen on", mode="hybrid", top_k=3)
            said = f"hits {[h.doc_id for h in hits]}\n"
            try:
                with kb.writing():
                    pass
            except StoreReadOnlyError as exc:
                said += str(exc)
            code = 0
        except BaseException as exc:  # noqa: BLE001
            said = f"child failed: {type(exc).__name__}: {exc}"
        os.write(write_end, said.encode())
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read) as fh:
        said = fh.read()
    _, status = os.waitpid(pid, 0)
    assert status == 0, said
    return said


def test_a_store_owned_by_another_user_is_readable(fake_embedder, docs):
    if os.geteuid() != 0:
        pytest.skip("needs root to run a reader as another user")
    from kbtool.ingestion.pipeline import ingest
    from kbtool.store import Store

    base = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's folders are private to their owner
    try:
        os.chmod(base, 0o755)
        kb = Store.open(base / "kb", create=True, model=fake_embedder.spec)
        assert not ingest(kb, [docs], embedder=fake_embedder).failed
        kb.close()
        said = _as_another_user(base / "kb")
        assert said.startswith("hits ['guide.md'"), said
        assert "permission denied" in said and "not writable by this user" in said, said
    finally:
        import shutil

        shutil.rmtree(base, ignore_errors=True)


def _assert_full_then_repaired(r, docs, kb, n_docs: int, before: int):
    assert r.exit_code == 1, r.output
    assert "no space left" in r.stderr and "nothing was lost" in r.stderr, r.stderr
    assert "Internal error" not in r.stderr and "damaged" not in r.stderr
    status = run("status", "--store", kb, "--json")
    assert status.exit_code == 0, status.output
    st = json.loads(status.stdout)
    assert st["documents"] >= before  # nothing lost
    if st["documents"] != before or st["documents_not_chunked"]:
        assert st["indexes_current"] is False  # honest: behind, never current when stale
    again = run("ingest", docs, "--store", kb, "--json", "-q")
    assert again.exit_code == 0, again.output
    after = json.loads(run("status", "--store", kb, "--json").stdout)
    assert after["indexes_current"] is True and after["documents"] == n_docs
    assert run("doctor", "--store", kb).exit_code == 0


@pytest.mark.slow
@pytest.mark.parametrize("where", ["catalog", "vectors", "bm25"])
def test_a_disk_filling_during_ingest_is_said_and_repaired_by_a_re_run(docs, tmp_path, monkeypatch, where):
    from kbtool.store import bm25 as bm25_mod
    from kbtool.store import catalog as catalog_mod
    from kbtool.store import vectors as vectors_mod

    kb = tmp_path / "kb"
    assert run("ingest", docs, "--store", kb, "-q").exit_code == 0
    write(docs / "teams.md", "# Teams\n\nAn owner can invite members to a team.\n")
    (docs / "faq.md").write_text("# FAQ\n\nReset a password from the settings page.\n")
    if where == "catalog":
        def full(*a, **k):
            raise sqlite3.OperationalError("database or disk is full")
        target = (catalog_mod.Catalog, "replace_chunks")
    elif where == "vectors":
        import chromadb.errors

        def full(*a, **k):
            raise chromadb.errors.InternalError("Error in compaction: No space left on device (os error 28)")
        target = (vectors_mod.ChromaVectors, "upsert")
    else:
        def full(*a, **k):
            raise OSError(errno.ENOSPC, "No space left on device")
        target = (bm25_mod.BM25Index, "build")
    with monkeypatch.context() as m:
        m.setattr(*target, full)
        r = run("ingest", docs, "--store", kb)
    _assert_full_then_repaired(r, docs, kb, 4, 3)


@pytest.mark.slow
def test_a_real_full_file_system_during_ingest_and_query(docs, tmp_path):
    with tmpfs(tmp_path / "small", "300k") as small:
        kb = small / "kb"
        r = run("ingest", docs, "--store", kb)
        assert r.exit_code == 1, r.output
        assert "no space left" in r.stderr and "Internal error" not in r.stderr, r.stderr
        subprocess.run(["mount", "-o", "remount,size=50m", str(small)], check=True)
        again = run("ingest", docs, "--store", kb, "-q")
        assert again.exit_code == 0, again.output
        expected = _hits(run("query", "which port does the server listen on", "--store", kb, "--json"))
        filler = small / "filler"  # now fill it up: a query still answers
        with open(filler, "wb") as fh:
            try:
                while True:
                    fh.write(b"\0" * 65536)
            except OSError:
                pass
        assert _hits(run("query", "which port does the server listen on", "--store", kb, "--json")) == expected
        write(docs / "teams.md", "# Teams\n\nAn owner can invite members to a team.\n")
        r = run("ingest", docs, "--store", kb)
        assert r.exit_code == 1 and "no space left" in r.stderr, r.output
        filler.unlink()
        _assert_full_then_repaired(r, docs, kb, 4, 3)


@pytest.mark.parametrize("manifest, said", [
    ([1, 2], "not a JSON object"),
    ({"format_version": "1"}, 'format_version is "1", not the integer 1'),
])
def test_odd_manifests_are_one_line_store_errors(tmp_path, manifest, said):
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "manifest.json").write_text(json.dumps(manifest))
    sqlite3.connect(kb / "catalog.sqlite3").close()
    r = run("status", "--store", kb)
    assert r.exit_code == 1 and said in r.stderr and "Internal error" not in r.stderr, r.output


def test_a_dangling_symlink_as_store_is_said(tmp_path, docs):
    (tmp_path / "link").symlink_to(tmp_path / "gone")
    for args in (["status"], ["ingest", docs]):
        r = run(*args, "--store", tmp_path / "link")
        assert r.exit_code == 1 and "symbolic link" in r.stderr and "does not exist" in r.stderr, r.output


@pytest.mark.parametrize("exc, said", [
    (OSError(errno.ENOSPC, "No space left on device", "/tmp/out/summary.json"), "no space left on"),
    (sqlite3.OperationalError("database or disk is full"), "no space left on"),
    (PermissionError(errno.EACCES, "Permission denied", "/srv/out/report.html"), "Permission denied: /srv/out/report.html"),
])
def test_the_cli_says_a_full_or_forbidden_disk_met_anywhere_in_one_line(exc, said, capsys):
    import typer

    from kbtool.cli._common import handle_errors

    @handle_errors
    def command():
        raise exc

    with pytest.raises(typer.Exit) as ended:
        command()
    assert ended.value.exit_code == 1
    text = capsys.readouterr().err
    assert said in text and "Internal error" not in text, text


@pytest.mark.slow
def test_real_damage_is_still_called_damage(docs, tmp_path):
    kb = tmp_path / "kb"
    assert run("ingest", docs, "--store", kb, "-q").exit_code == 0
    for name in ("catalog.sqlite3-wal", "catalog.sqlite3-shm"):  # this process's ingest left them open
        (kb / name).unlink(missing_ok=True)
    (kb / "catalog.sqlite3").unlink()
    (kb / "catalog.sqlite3").write_bytes(b"this is not a database, it was overwritten" * 100)
    for args in (["status"], ["query", "port"], ["ingest", docs]):
        r = run(*args, "--store", kb)
        assert r.exit_code == 1, r.output
        assert "not a readable catalog (file is not a database): the store is damaged" in r.stderr, r.stderr
        assert "no space" not in r.stderr and "read-only" not in r.stderr


def test_doctor_on_a_full_disk_names_the_stores_file_system_not_the_working_directorys(fake_embedder, docs, tmp_path,
                                                                                      monkeypatch):
    """Chroma's/SQLite's "database or disk is full" met by doctor was said of the working directory's
    file system (Path.cwd()), wherever the store was."""
    import sqlite3

    from kbtool.ingestion.pipeline import ingest
    from kbtool.store import Store
    from kbtool.store import vectors as vectors_mod

    kb = Store.open(tmp_path / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(kb, [docs], embedder=fake_embedder).failed
    kb.close()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)

    def full(*a, **k):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(vectors_mod.ChromaVectors, "verify", full)
    r = run("doctor", "--store", tmp_path / "kb")
    assert r.exit_code == 1, r.output
    assert f"(the file system of {(tmp_path / 'kb').resolve()}" in r.stderr, r.stderr
    assert str(elsewhere) not in r.stderr and "Internal error" not in r.stderr
