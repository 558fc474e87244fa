"""Bounded parsing (issue 36): a DOCX is checked on its ZIP directory before anything is
decompressed (entry count, uncompressed XML, per-entry ratio), and each file's parse has a time
budget, so one hostile file fails alone, at once, and the rest of the folder is ingested."""

from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from kbtool.errors import ParseError, ParseTimeoutError
from kbtool.ingestion import parse
from kbtool.ingestion.parse import MAX_ZIP_ENTRIES, check_zip, parse_file
from kbtool.ingestion.pipeline import IngestOptions, ingest
from kbtool.store import Store

from .conftest import ROOT, SAMPLE, write


def small_docx(text: str = "The quarterly memo about retrieval budgets.") -> bytes:
    import docx

    d = docx.Document()
    d.add_heading("Memo", 1)
    d.add_paragraph(text)
    out = io.BytesIO()
    d.save(out)
    return out.getvalue()


def docx_with_body(path: Path, body_chunks, base: bytes | None = None) -> Path:
    """A real DOCX (python-docx's parts) whose document.xml body is written from ``body_chunks``,
    streamed, so hundreds of MB of XML never sit in memory."""
    src = zipfile.ZipFile(io.BytesIO(base or small_docx("hello")))
    head, tail = src.read("word/document.xml").decode().split("<w:body>")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for info in src.infolist():
            if info.filename != "word/document.xml":
                zf.writestr(info.filename, src.read(info.filename))
        with zf.open("word/document.xml", "w", force_zip64=True) as w:
            w.write((head + "<w:body>").encode())
            for chunk in body_chunks:
                w.write(chunk)
            w.write(tail.encode())
    return path


def bomb(path: Path, mb: int = 400) -> Path:
    para = b"<w:p><w:r><w:t>" + b"bomb " * 200 + b"</w:t></w:r></w:p>"
    chunk = para * (2**20 // len(para))
    return docx_with_body(path, (chunk for _ in range(mb)))


@pytest.fixture(scope="module")
def bomb_docx(tmp_path_factory) -> Path:
    path = bomb(tmp_path_factory.mktemp("bomb") / "bomb.docx")
    entry = zipfile.ZipFile(path).getinfo("word/document.xml")
    assert entry.file_size > 400 * 10**6 and path.stat().st_size < 1.5 * 2**20  # the 1.4 MB / 400 MB
    return path


def test_a_docx_bomb_is_refused_from_its_directory_in_milliseconds(bomb_docx):
    start = time.perf_counter()
    with pytest.raises(ParseError) as info:
        parse_file(bomb_docx, "bomb.docx")
    took = time.perf_counter() - start
    msg = str(info.value)
    assert "word/document.xml" in msg and "zip bomb" in msg and "\n" not in msg
    assert took < 2, took  # measured: about 10 ms


def test_too_many_entries(tmp_path):
    path = tmp_path / "many.docx"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for i in range(MAX_ZIP_ENTRIES + 1):
            zf.writestr(f"word/media/e{i}.xml", b"")
    start = time.perf_counter()
    with pytest.raises(ParseError, match=rf"{MAX_ZIP_ENTRIES + 1} entries .* over the limit of {MAX_ZIP_ENTRIES}"):
        parse_file(path, "many.docx")
    assert time.perf_counter() - start < 2


def test_xml_over_the_file_size_budget_says_how_to_raise_it(tmp_path):
    # Ordinary (not bomb-like) text: it deflates a few times over, but 1.5 MB of XML is over a 1 MB limit.
    rnd = random.Random(0)
    words = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(3, 9))) for _ in range(5000)]
    body = [f"<w:p><w:r><w:t>{' '.join(rnd.choices(words, k=50))}</w:t></w:r></w:p>".encode() for _ in range(5000)]
    path = docx_with_body(tmp_path / "long.docx", body)
    xml = zipfile.ZipFile(path).getinfo("word/document.xml")
    assert xml.file_size > 1.5 * 2**20 and xml.file_size < 20 * xml.compress_size  # no bomb by ratio
    with pytest.raises(ParseError, match=r"MB of XML uncompressed .* over the limit, 1 MB: .*--max-file-size"):
        parse_file(path, "long.docx", max_bytes=2**20)
    check_zip(path.read_bytes(), "docx", 20 * 2**20)  # within the default DOCX budget: parsed as before


def test_total_uncompressed_counts_media_too(tmp_path):
    path = tmp_path / "media.docx"
    base = zipfile.ZipFile(io.BytesIO(small_docx()))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for info in base.infolist():
            zf.writestr(info.filename, base.read(info.filename))
        zf.writestr("word/media/image1.png", os.urandom(3 * 2**20))
    with pytest.raises(ParseError, match=r"uncompressed .* over the limit, 2 MB \(twice the file size limit\)"):
        check_zip(path.read_bytes(), "docx", 2**20)
    check_zip(path.read_bytes(), "docx", 2 * 2**20)  # images stored as they are: within twice the limit


@pytest.mark.parametrize("data", [b"not a zip at all", b"PK\x03\x04 truncated", b""])
def test_a_docx_that_is_not_a_zip_gets_one_line(tmp_path, data):
    path = tmp_path / "fake.docx"
    path.write_bytes(data or b"hello")
    with pytest.raises(ParseError) as info:
        parse_file(path, "fake.docx")
    assert str(info.value).startswith("not a DOCX file: not a ZIP archive") and "\n" not in str(info.value)


def test_normal_docx_still_parses(tmp_path):
    path = tmp_path / "memo.docx"
    path.write_bytes(small_docx())
    assert "retrieval budgets" in parse_file(path, "memo.docx").text
    doc = parse_file(SAMPLE / "policies/refund-policy.docx", "policies/refund-policy.docx", timeout=60)
    assert any(b.kind == "table" for b in doc.blocks)


def _folder(tmp_path: Path, bomb_docx: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "bomb.docx").write_bytes(bomb_docx.read_bytes())
    write(folder / "guide.md", "# Guide\n\nThe retrieval guide explains the quokka budget.\n")
    (folder / "memo.docx").write_bytes(small_docx())
    return folder


def _run_ingest(folder: Path, store: Path, *extra: str):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "kbtool", "ingest", str(folder), "--store", str(store), *extra],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    return proc, time.perf_counter() - start


def _check_bomb_run(proc, wall, folder, most=10):
    assert proc.returncode == 1, proc.stderr  # a failed file exits 1, as any other
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if "bomb.docx" in ln]
    assert len(lines) == 1 and lines[0].startswith("failed bomb.docx: word/document.xml expands"), proc.stderr
    assert wall < most, wall  # the whole run, imports and the two other files included


def test_ingest_fails_the_bomb_alone_and_goes_on(tmp_path, bomb_docx):
    folder = _folder(tmp_path, bomb_docx)
    proc, wall = _run_ingest(folder, tmp_path / "kb", "--parse-only")
    _check_bomb_run(proc, wall, folder)
    proc, _ = _run_ingest(folder, tmp_path / "kb", "--parse-only", "--json", "-v", "--allow-failures", "1")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [f["doc_id"] for f in report["failed"]] == ["bomb.docx"]
    assert sorted(report["unchanged"]) == ["guide.md", "memo.docx"]


@pytest.mark.slow  # a full ingest loads the embedding model (in the subprocess)
def test_full_ingest_with_a_bomb_indexes_the_other_files(tmp_path, bomb_docx):
    folder = _folder(tmp_path, bomb_docx)
    proc, wall = _run_ingest(folder, tmp_path / "kb")
    _check_bomb_run(proc, wall, folder, most=120)  # the session's first model load exports it to ONNX
    assert "2 added" in proc.stdout and "2 chunks" in proc.stdout, proc.stdout


# The time budget: a parse that never ends (a stand-in for a pathological file) is stopped.

def _endless(swallow: bool, seconds: float = 1e9):
    def partition(filetype, data, name, *args, **kwargs):
        if not name.startswith("slow"):
            return real(filetype, data, name, *args, **kwargs)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                time.sleep(0.01)
            except Exception:  # a library that catches everything
                if not swallow:
                    raise
        return real(filetype, data, name, *args, **kwargs)

    real = parse._partition
    return partition


@pytest.mark.parametrize("swallow", [False, True])
def test_a_parse_past_its_time_budget_is_stopped(tmp_path, monkeypatch, swallow):
    monkeypatch.setattr(parse, "_partition", _endless(swallow, 3 if swallow else 1e9))
    path = write(tmp_path / "slow.txt", "words that parse slowly\n")
    before = signal.getsignal(signal.SIGALRM)
    start = time.perf_counter()
    with pytest.raises(ParseTimeoutError, match=r"parsing took over 0.5 s, the time budget per file: .*--parse-timeout"):
        parse_file(path, "slow.txt", timeout=0.5)
    assert time.perf_counter() - start < 5
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0) and signal.getsignal(signal.SIGALRM) is before
    assert "words" in parse_file(write(tmp_path / "fast.txt", "words\n"), "fast.txt", timeout=0.5).text


def test_ingest_goes_on_after_a_file_over_its_time_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(parse, "_partition", _endless(False))
    docs = tmp_path / "docs"
    write(docs / "slow.md", "# Slow\n\nnever done\n")
    write(docs / "fine.md", "# Fine\n\nthe quokka budget\n")
    store = Store.open(tmp_path / "kb", create=True)
    start = time.perf_counter()
    report = ingest(store, [docs], IngestOptions(parse_only=True, parse_timeout=1))
    assert time.perf_counter() - start < 10
    assert report.added == ["fine.md"]
    assert [f["doc_id"] for f in report.failed] == ["slow.md"] and "time budget" in report.failed[0]["reason"]


def _declare_size(path: Path, name: str, size: int) -> None:
    """Rewrite the uncompressed size an archive declares for ``name`` (local header and directory)."""
    import struct

    b, raw = bytearray(path.read_bytes()), name.encode()
    for sig, size_at, name_len_at, name_at in ((b"PK\x03\x04", 22, 26, 30), (b"PK\x01\x02", 24, 28, 46)):
        at = b.find(sig)
        while at >= 0:
            n = struct.unpack_from("<H", b, at + name_len_at)[0]
            if b[at + name_at:at + name_at + n] == raw:
                struct.pack_into("<I", b, at + size_at, size)
            at = b.find(sig, at + 4)
    path.write_bytes(bytes(b))


def test_an_entry_that_lies_about_its_size_is_not_expanded_past_it(tmp_path):
    path = bomb(tmp_path / "liar.docx", mb=30)
    _declare_size(path, "word/document.xml", 1000)
    assert zipfile.ZipFile(path).getinfo("word/document.xml").file_size == 1000  # passes the directory check
    start = time.perf_counter()
    with pytest.raises(ParseError, match="Bad CRC-32"):  # zipfile stops at the declared size
        parse_file(path, "liar.docx")
    assert time.perf_counter() - start < 30
