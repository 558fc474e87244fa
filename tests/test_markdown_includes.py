"""Include directives of every common syntax: the included text reaches the blocks, the chunks and
the context block, cited at the included file's own lines; the include root may lie outside the
ingested folder, within its repository, and nowhere else."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kbtool.ingestion.parse import MarkupContext, parse_file

APP = "import os\n\ndef handler(event):\n    return os.environ['ZORBLAX_TOKEN']\n\nprint('done')\n"
PART = "## Shared part\n\nThe quuxalot part explains rotation.\n\n#region keys\nKeys rotate nightly.\n#endregion keys\n"


@pytest.fixture
def repo(tmp_path):
    """A repository: docs/ is what is ingested, src/ (outside it) holds what the pages include."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "docs" / "guide").mkdir(parents=True)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text(APP, encoding="utf-8")
    (tmp_path / "src" / "part.md").write_text(PART, encoding="utf-8")
    return tmp_path


def parse(repo: Path, body: str):
    page = repo / "docs" / "guide" / "page.md"
    page.write_text("# Page\n\nIntro line.\n\n" + body + "\n\nAfter.\n", encoding="utf-8")
    ctx = MarkupContext(ingest_root=(repo / "docs").resolve(), include_root=repo.resolve())
    return parse_file(page, "guide/page.md", markup=ctx)


def included(doc, phrase: str):
    found = [b for b in doc.blocks if phrase in b.text]
    assert found, [b.text for b in doc.blocks]
    return found[0]


# (directive as written on the page, a phrase of the included text, the file's lines cited)
SYNTAXES = [
    ("{* ../../src/app.py *}", "def handler(event):", [1, 6]),  # FastAPI, resolved from a folder above
    ("{* ../../src/app.py ln[3:4] hl[4] *}", "def handler(event):", [3, 4]),
    ("```python\n{!../src/app.py!}\n```", "return os.environ", [1, 6]),  # markdown-include, from the docs folder
    ("```python\n    {!> ../src/app.py!}\n```", "    def handler(event):", [1, 6]),  # mdx_include: the directive's indent
    ("```python\n{!> ../src/app.py[ln:3-4]!}\n```", "def handler(event):", [3, 4]),  # mdx_include line range
    ("```python\n--8<-- \"src/app.py\"\n```", "print('done')", [1, 6]),  # PyMdown Snippets, from the repository
    ("```python\n--8<-- \"src/app.py:3:4\"\n```", "def handler(event):", [3, 4]),
    ("<!--@include: ../../src/app.py{3,4}-->", "def handler(event):", [3, 4]),  # VitePress
    ("<!--@include: ../../src/part.md#keys-->", "Keys rotate nightly.", [6, 6]),
    ("<!-- include: ../../src/part.md -->", "The quuxalot part explains rotation.", [3, 3]),
    ("{% include-markdown \"../../src/part.md\" %}", "The quuxalot part explains rotation.", [3, 3]),
    ("{% include \"../../src/app.py\" %}", "ZORBLAX_TOKEN", [1, 6]),
]


@pytest.mark.parametrize("directive,phrase,lines", SYNTAXES, ids=[s[0].split("\n")[-2 if "\n" in s[0] else 0][:24]
                                                                   for s in SYNTAXES])
def test_each_include_syntax_brings_the_text_cited_at_the_included_lines(repo, directive, phrase, lines):
    doc = parse(repo, directive)
    block = included(doc, phrase)
    assert block.source == [{"path": "src/" + ("part.md" if "part" in directive else "app.py"), "lines": lines}]
    text = "\n".join(b.text for b in doc.blocks)
    assert "include" not in text and "{*" not in text and "{!" not in text and "8<" not in text
    assert included(doc, "Intro line.").source is None and included(doc, "After.").lines[0] > 5
    if any(mark in directive for mark in ("ln[3:4]", ":3:4", "{3,4}", "[ln:3-4]")):
        assert "import os" not in text and "print('done')" not in text


def test_included_code_stays_code_and_included_markdown_is_parsed(repo):
    doc = parse(repo, "{* ../../src/app.py *}\n\n<!--@include: ../../src/part.md-->")
    code = included(doc, "def handler")
    assert code.kind == "code" and code.text.startswith("```python\n")
    heading = included(doc, "Shared part")
    assert heading.kind == "title" and heading.source == [{"path": "src/part.md", "lines": [1, 1]}]
    body = included(doc, "quuxalot")
    assert body.section == ["Page", "Shared part"] and body.lines == (7, 7)  # the directive's own line


def test_nothing_outside_the_ingest_and_include_roots_is_read(repo, tmp_path_factory):
    secret = tmp_path_factory.mktemp("elsewhere") / "secret.py"
    secret.write_text("SECRET_VALUE = 1\n", encoding="utf-8")
    page = repo / "docs" / "page.md"
    page.write_text(f"# Page\n\n{{!{secret}!}}\n\n{{* ../src/app.py *}}\n", encoding="utf-8")
    only_docs = MarkupContext(ingest_root=(repo / "docs").resolve())
    doc = parse_file(page, "page.md", markup=only_docs)
    text = " ".join(b.text for b in doc.blocks)
    assert "SECRET_VALUE" not in text and "handler" not in text  # src/ is outside docs/, no include root
    assert sorted(doc.missing_includes) == sorted([str(secret), "../src/app.py"])


def _kb(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "kbtool", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


def test_ingest_with_an_include_root_in_the_repository_cites_the_included_file(repo, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("stores")  # outside the repository
    (repo / "docs" / "guide" / "setup.md").write_text(
        "# Setup\n\nThe handler reads its token from the environment:\n\n```python\n{!../src/app.py!}\n```\n",
        encoding="utf-8")
    kb = tmp_path / "kb"
    r = _kb("ingest", str(repo / "docs"), "--include-root", str(repo), "--store", str(kb), "-q")
    assert r.returncode == 0, r.stderr
    chunks = json.loads(_kb("chunks", "guide/setup.md", "--store", str(kb), "--json").stdout)
    code = [c for c in chunks if "ZORBLAX_TOKEN" in c["embedded"]]
    assert code and code[0]["line_source"] == [{"path": "src/app.py", "lines": [1, 6]}]
    r = _kb("query", "which environment variable holds the handler token", "--store", str(kb), "--json")
    out = json.loads(r.stdout)
    hit = out["hits"][0]
    assert hit["doc_id"] == "guide/setup.md" and hit["line_source"] == [{"path": "src/app.py", "lines": [1, 6]}]
    assert "ZORBLAX_TOKEN" in out["context"] and "includes src/app.py:1-6" in out["context"]

    # An include root outside the repository: refused, nothing read.
    outside = tmp_path_factory.mktemp("outside")
    r = _kb("ingest", str(repo / "docs"), "--include-root", str(outside), "--store", str(tmp_path / "kb2"))
    assert r.returncode == 2 and "outside its repository" in r.stderr and "Traceback" not in r.stderr
