"""Big text, Markdown and HTML files parse in bounded time and memory: no per-element language
detection (kbtool never reads it), plain text and Markdown partitioned in pieces with the same
blocks as in one go, progress inside a file. Speed and memory are measured by ``bench/run.py
--only large-files``, not here."""

import random

import pytest

from kbtool.ingestion import parse
from kbtool.ingestion.parse import parse_file

from .conftest import SAMPLE, write

ZH = ["索引", "文档", "查询", "存储", "用户", "权限", "结果", "模型", "问题", "回答"]
WORDS = ("the store index query document reader file folder chunk section table model vector search answer "
         "question team policy budget report process data record value page server access limit time").split()
VERBS = "reads writes builds returns keeps checks sends finds moves holds makes gives takes shows".split()


def prose(n_paras: int, md: bool, seed: int = 0, blank_lines: bool = True) -> str:
    """English paragraphs, wrapped lines, headings, lists, a table and code (Markdown) and
    Chinese lines mixed in: a document langdetect calls mixed."""
    r = random.Random(seed)
    out = ["# Mixed document" if md else "Mixed document"]
    for n in range(n_paras):
        x = r.random()
        if x < 0.15:
            out.append("".join(r.choice(ZH) for _ in range(r.randint(3, 8))) + "。")
        elif x < 0.25:
            level = "#" * r.randint(2, 3) + " " if md else ""
            out.append(f"{level}Section {n} {r.choice(WORDS).title()} {r.choice(WORDS).title()}")
        elif x < 0.3:
            out.append("\n".join(f"- {r.choice(WORDS)} {r.choice(VERBS)} {r.choice(WORDS)}" for _ in range(3)))
        elif md and x < 0.33:
            out.append("| a | b |\n|---|---|\n| " + r.choice(WORDS) + " | " + r.choice(ZH) + " |")
        elif md and x < 0.36:
            out.append("```python\n# not a heading\nx = 1\n\n## still code\n```")
        else:
            words = [r.choice(WORDS) for _ in range(r.randint(12, 40))]
            words.insert(3, r.choice(VERBS))
            text = " ".join(words).capitalize() + "."
            out.append("\n".join(text[i:i + 70] for i in range(0, len(text), 70)) if md else text)
    return ("\n\n" if blank_lines else "\n").join(out) + "\n"


def as_tuples(doc):
    return [(b.kind, b.text, b.section, b.page, b.depth, b.lines, b.anchor) for b in doc.blocks]


@pytest.fixture
def no_detection(monkeypatch):
    """Fail if unstructured runs language detection at all."""
    from unstructured.partition.common import lang

    calls = []

    def spy(*args, **kwargs):
        calls.append(kwargs.get("text", args[0] if args else ""))
        raise AssertionError("language detection called")

    monkeypatch.setattr(lang, "detect_languages", spy)
    return calls


@pytest.mark.parametrize("name,text", [
    ("mixed.txt", prose(60, md=False)),
    ("mixed.md", prose(60, md=True)),
    ("mixed.html", "<html><body><h1>Mixed</h1><p>The store keeps every document it reads.</p>"
                   "<h2>索引</h2><p>索引文档查询存储用户权限。</p><ul><li>one item here</li></ul></body></html>"),
    ("mixed.csv", "name,value\nindex,索引\nstore,存储\n"),
])
def test_no_language_detection_in_any_text_format(tmp_path, no_detection, name, text):
    doc = parse_file(write(tmp_path / name, text), name)
    assert doc.blocks and not no_detection


def test_no_language_detection_for_sample_docx_and_pdf(no_detection):
    for rel in ("policies/refund-policy.docx", "release-notes.pdf"):
        assert parse_file(SAMPLE / rel, rel).blocks
    assert not no_detection


@pytest.mark.parametrize("rel", ["zh/faq.md", "manual/install.md", "support/escalation.txt", "api/reference.html"])
def test_blocks_are_those_unstructured_gave_with_language_detection(monkeypatch, rel):
    """Turning detection off changes no block (it only filled metadata.languages, unused)."""
    now = as_tuples(parse_file(SAMPLE / rel, rel))
    monkeypatch.setattr(parse, "NO_LANGUAGES", None)  # unstructured's default: detect
    monkeypatch.setattr(parse, "PIECE_CHARS", 10**9)  # and in one go
    assert as_tuples(parse_file(SAMPLE / rel, rel)) == now


def test_a_mixed_document_keeps_its_blocks_with_detection_off(tmp_path, monkeypatch):
    path = write(tmp_path / "mixed.md", prose(80, md=True, seed=3))
    now = as_tuples(parse_file(path, "mixed.md"))
    monkeypatch.setattr(parse, "NO_LANGUAGES", None)
    assert as_tuples(parse_file(path, "mixed.md")) == now


@pytest.mark.parametrize("name,text", [
    ("blank-lines.txt", prose(400, md=False, seed=1)),
    ("one-per-line.txt", prose(400, md=False, seed=2, blank_lines=False)),
    ("doc.md", prose(400, md=True, seed=4)),
])
def test_pieces_give_the_blocks_of_one_go(tmp_path, monkeypatch, name, text):
    """Headings, section paths, line numbers, anchors, lists, tables and code are the same whether
    the file is partitioned whole or in pieces."""
    path = write(tmp_path / name, text)
    whole = as_tuples(parse_file(path, name))
    seen = []
    monkeypatch.setattr(parse, "PIECE_CHARS", 2000)
    monkeypatch.setattr(parse, "MARKDOWN_PIECE_CHARS", 2000)
    pieced = parse_file(path, name, progress=lambda done, total: seen.append((done, total)))
    assert len(seen) > 5, "the file should have been cut into pieces"
    assert as_tuples(pieced) == whole
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and seen[-1][0] == seen[-1][1]


@pytest.mark.parametrize("rel", ["zh/faq.md", "manual/install.md", "manual/troubleshooting.md",
                                 "manual/agent-behaviour.md", "billing/orders.md", "support/escalation.txt"])
def test_pieces_give_the_blocks_of_one_go_on_the_sample_corpus(monkeypatch, rel):
    whole = as_tuples(parse_file(SAMPLE / rel, rel))
    monkeypatch.setattr(parse, "PIECE_CHARS", 200)
    monkeypatch.setattr(parse, "MARKDOWN_PIECE_CHARS", 200)
    assert as_tuples(parse_file(SAMPLE / rel, rel)) == whole


def test_markdown_is_never_cut_inside_a_code_fence():
    lines = ["# A", "", "```", "", "# in code", "```", "", "# B", "text"]
    assert parse._markdown_cuts(lines, 1) == [7]
    assert parse._markdown_cuts(["# A", "x", "# B"], 1) == []  # no blank line before: not cut


def test_text_is_cut_inside_a_blank_line():
    text = "aaaa\nbbbb\n\ncccc\n\ndddd\n"
    cuts = parse._text_cuts(text, 4)
    assert parse._text_cuts("a\nb\nc\n", 1, per_line=True) == [2, 4]
    assert cuts and all(text[c - 1] == "\n" for c in cuts)
    assert "".join(text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])) == text


def test_ingest_reports_progress_inside_a_big_file(tmp_path, monkeypatch):
    from kbtool.ingestion import pipeline
    from kbtool.ingestion.pipeline import IngestOptions, ingest
    from kbtool.store import Store

    root = tmp_path / "docs"
    big = write(root / "big.txt", prose(300, md=False, seed=5))
    write(root / "small.md", "# Small\n\nA small file reports no progress of its own.\n")
    write(root / "page.html", "<h1>Page</h1>" + "<p>The store keeps every document it reads.</p>" * 200)
    monkeypatch.setattr(pipeline, "PROGRESS_INSIDE", 8000)
    monkeypatch.setattr(parse, "PIECE_CHARS", 2000)
    calls = []
    store = Store.open(tmp_path / "kb", create=True)
    report = ingest(store, [root], IngestOptions(parse_only=True), progress=lambda *a: calls.append(a))
    assert sorted(report.added) == ["big.txt", "page.html", "small.md"]
    inside = [c for c in calls if c[0] == "parsing big.txt (MB)"]
    total = max(1, round(big.stat().st_size / 2**20))
    assert inside[0] == ("parsing big.txt (MB)", 0, total) and sum(a for _, a, _ in inside) == total
    html = [c for c in calls if c[0] == "parsing page.html (MB)"]
    assert html[0][1] == 0 and sum(a for _, a, _ in html) == html[0][2]  # one go: finished after it
    assert not any("small.md" in c[0] for c in calls)
    files = [c for c in calls if c[0] == "parsing"]
    assert files[0] == ("parsing", 0, 3) and sum(a for _, a, _ in files) == 3


def test_each_type_has_its_own_size_limit_and_the_option_sets_one_for_all(tmp_path, monkeypatch):
    from kbtool.errors import ParseError

    monkeypatch.setitem(parse.MAX_SIZE_BY_TYPE, "html", 1000)
    body = "<h1>Page</h1>" + "<p>The store keeps every document it reads.</p>" * 60
    html = write(tmp_path / "page.html", body)
    txt = write(tmp_path / "page.txt", body)
    with pytest.raises(ParseError) as exc:
        parse_file(html, "page.html")
    assert "limit for html files" in str(exc.value) and "--max-file-size" in str(exc.value)
    assert "\n" not in str(exc.value)
    assert parse_file(txt, "page.txt").blocks  # text's limit is higher
    assert parse_file(html, "page.html", max_bytes=10**6).blocks  # one limit for every type
    with pytest.raises(ParseError, match="over the limit set, 0.00095"):
        parse_file(txt, "page.txt", max_bytes=1000)


def test_ingest_reports_a_file_over_its_type_s_limit(tmp_path, monkeypatch):
    from kbtool.ingestion.pipeline import IngestOptions, ingest
    from kbtool.store import Store

    monkeypatch.setitem(parse.MAX_SIZE_BY_TYPE, "csv", 10)
    root = tmp_path / "docs"
    write(root / "a.md", "# A\n\nThe store keeps every document it reads.\n")
    write(root / "t.csv", "name,value\nindex,one\nstore,two\n")
    store = Store.open(tmp_path / "kb", create=True)
    report = ingest(store, [root], IngestOptions(parse_only=True))
    assert report.added == ["a.md"]
    assert [f["doc_id"] for f in report.failed] == ["t.csv"] and "--max-file-size" in report.failed[0]["reason"]
    report = ingest(store, [root], IngestOptions(parse_only=True, max_file_size=10**6), update_sources=True)
    assert report.added == ["t.csv"] and not report.failed
