"""Context fidelity (issue 18): Markdown code reaches the stored chunks and the context block as
the author wrote it — fences with their language, inline code with its backticks — while BM25
still matches identifiers asked without backticks and citations still point at the right lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbtool.cli import app
from kbtool.ingestion.parse import parse_file
from kbtool.store.analyzer import Analyzer

from .conftest import write

runner = CliRunner()

LONG_CODE = "\n".join(f"    step_{n} = pipeline.add_stage(name='stage_{n}', retries={n})" for n in range(14))
HUGE_CODE = "\n".join(f"    job_{n} = scheduler.every(minutes={n}).run(task_{n}, queue='q{n}')" for n in range(60))
API = f"""# Security API

Intro text about the security module and how scopes are declared.

## Reading scopes {{#reading}}

We use `security_scopes.scopes` to read the scopes a dependency asked for.

```python
def get_user(security_scopes: SecurityScopes):
    return security_scopes.scopes
```

## Installing

Install it first:

    pip install fastapi
    uvicorn main:app

- a list item calling `inline_code()` once
- another item:

    ```bash
    echo from-a-list
    ```

| option | default |
|--------|---------|
| `timeout_ms` | 30 |

Text after <b>bold</b> HTML.

## The `Depends` helper

Scopes are checked again by the security layer for every request.

```python
def build_pipeline(pipeline):
{LONG_CODE}
    return pipeline
```

## Scheduling

```python
def schedule(scheduler):
{HUGE_CODE}
```
"""


def _lines_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.split("\n"), start=1) if needle in line)


def test_parsed_markdown_keeps_code_marks_and_line_numbers(tmp_path):
    path = write(tmp_path / "api.md", API)
    blocks = parse_file(path, "api.md").blocks
    by_start = {b.text.split("\n")[0]: b for b in blocks}
    fenced = next(b for b in blocks if b.kind == "code" and "get_user" in b.text)
    assert fenced.text == ("```python\ndef get_user(security_scopes: SecurityScopes):\n"
                           "    return security_scopes.scopes\n```")
    # The citation covers the fences: from "```python" to the closing "```".
    assert fenced.lines == (_lines_of(API, "```python"), _lines_of(API, "return security_scopes") + 1)
    assert "We use `security_scopes.scopes` to read the scopes a dependency asked for." in by_start
    indented = next(b for b in blocks if b.kind == "code" and "pip install" in b.text)
    assert indented.text == "```\npip install fastapi\nuvicorn main:app\n```"
    assert indented.lines == (_lines_of(API, "pip install"), _lines_of(API, "uvicorn"))
    in_list = next(b for b in blocks if "from-a-list" in b.text)
    assert in_list.kind == "code" and in_list.text == "```bash\necho from-a-list\n```"
    assert in_list.lines == (_lines_of(API, "```bash"), _lines_of(API, "echo from-a-list") + 1)
    assert "a list item calling `inline_code()` once" in by_start
    table = next(b for b in blocks if b.kind == "table")
    assert table.text == "option | default\n`timeout_ms` | 30"
    assert "Text after bold HTML." in by_start  # markup noise still goes
    heading = next(b for b in blocks if b.kind == "title" and "Depends" in b.text)
    assert heading.text == "The Depends helper"  # section paths stay plain labels
    assert next(b for b in blocks if b.kind == "title" and "Reading" in b.text).anchor == "reading"


def test_code_marks_survive_attrs_tildes_quotes_and_double_backticks(tmp_path):
    path = write(tmp_path / "x.md", '# X\n\nUse ``a`b`` here.\n\n~~~{.js title="x.js"}\nconst a = 1 < 2 && b;\n~~~\n\n'
                                    '```python hl_lines="1"\nprint(1)\n```\n\n> ```sh\n> ls -la\n> ```\n')
    blocks = parse_file(path, "x.md").blocks
    assert [b.text for b in blocks[1:]] == ["Use ``a`b`` here.", "~~~js\nconst a = 1 < 2 && b;\n~~~",
                                            "```python\nprint(1)\n```", "```sh\nls -la\n```"]
    assert [b.lines for b in blocks[2:]] == [(5, 7), (9, 11), (13, 15)]


def test_an_indented_block_showing_a_fence_stays_one_code_block(tmp_path):
    path = write(tmp_path / "t.md", "# T\n\nShow Markdown:\n\n    ```python\n    x = 1\n    ```\n\nafter\n\n"
                                    "1. step one\n   continues here\n\n    ```console\n    $ pip install kbtool\n    ```\n")
    blocks = parse_file(path, "t.md").blocks
    assert [(b.kind, b.text, b.lines) for b in blocks if b.kind == "code"] == [
        ("code", "````\n```python\nx = 1\n```\n````", (5, 7)),
        ("code", "```console\n$ pip install kbtool\n```", (14, 16))]


def test_html_files_are_left_as_they_are(tmp_path):
    path = write(tmp_path / "p.html", "<html><body><h1>P</h1><p>We use <code>a.b</code> here.</p>"
                                      "<pre><code>x = 1</code></pre></body></html>")
    texts = [b.text for b in parse_file(path, "p.html").blocks]
    assert "We use a.b here." in texts and "x = 1" in texts


def test_analyzer_reads_code_marks_as_the_plain_words():
    a = Analyzer()
    assert a("We use `security_scopes.scopes` here") == a("We use security_scopes.scopes here")
    assert "security_scopes.scopes" in a("`security_scopes.scopes`")
    assert a("```python") == ["python"] and a("```") == [] and a("~~~") == []


def _ingest(folder: Path, kb: Path, *extra: str) -> dict:
    r = runner.invoke(app, ["ingest", str(folder), "--store", str(kb), "--json", *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.slow
def test_store_and_context_block_keep_the_markdown(tmp_path):
    docs = tmp_path / "docs"
    write(docs / "api.md", API)
    write(docs / "other.md", "# Other\n\nScopes and security are discussed elsewhere too, with no code.\n")
    kb = tmp_path / "kb"
    _ingest(docs, kb)
    from kbtool.store import Store

    store = Store.open(kb)
    rows = store.catalog.db.execute("SELECT text, section_path, line_start, line_end, n_tokens FROM chunks "
                                    "WHERE doc_id='api.md' ORDER BY ordinal").fetchall()
    texts = [r["text"] for r in rows]
    reading = next(r for r in rows if r["section_path"].endswith("Reading scopes"))
    assert "We use `security_scopes.scopes` to read" in reading["text"]
    assert "```python\ndef get_user(security_scopes: SecurityScopes):\n    return security_scopes.scopes\n```" in reading["text"]
    assert (reading["line_start"], reading["line_end"]) == (_lines_of(API, "We use"), _lines_of(API, "return security_scopes") + 1)
    assert any("```\npip install fastapi\nuvicorn main:app\n```" in t for t in texts)
    # A code block over the chunk size (254 tokens) but within hard_max stays whole, fences and all.
    long = [r for r in rows if "build_pipeline" in r["text"]]
    assert len(long) == 1 and long[0]["text"].startswith("```python\n") and long[0]["text"].endswith("\n```")
    assert "step_13 = pipeline.add_stage" in long[0]["text"] and 254 < long[0]["n_tokens"] <= 508
    assert (long[0]["line_start"], long[0]["line_end"]) == (_lines_of(API, "def build_pipeline") - 1,
                                                            _lines_of(API, "return pipeline") + 1)
    # One over hard_max is split by lines, every piece in the block's fences and within the size.
    huge = [r for r in rows if r["section_path"].endswith("Scheduling")]
    assert len(huge) > 1 and all(r["text"].startswith("```python\n") and r["text"].endswith("\n```") for r in huge)
    assert all(r["n_tokens"] <= 254 for r in huge) and "job_59 = scheduler" in huge[-1]["text"]
    assert huge[-1]["line_end"] == len(API.rstrip("\n").split("\n"))

    # The identifier asked without backticks still finds its chunk first with BM25 ...
    r = runner.invoke(app, ["query", "what is security_scopes.scopes", "--store", str(kb), "-m", "bm25", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["hits"][0]["section_path"].endswith("Reading scopes")
    # ... and the context block an agent reads holds the code as written.
    r = runner.invoke(app, ["query", "what is security_scopes.scopes", "--store", str(kb), "-m", "bm25", "--context"])
    assert r.exit_code == 0, r.output
    assert "We use `security_scopes.scopes` to read" in r.stdout
    assert "```python\ndef get_user(security_scopes: SecurityScopes):" in r.stdout
    assert f"api.md:{_lines_of(API, 'We use')}-{_lines_of(API, 'return security_scopes') + 1}" in r.stdout


@pytest.mark.slow
def test_a_store_parsed_before_reparses_and_keeps_vectors_of_unchanged_chunks(tmp_path, monkeypatch):
    import kbtool.markdown as markdown
    import kbtool.ingestion.pipeline as pipeline

    docs = tmp_path / "docs"
    write(docs / "api.md", API)
    write(docs / "notes.md", "# Notes\n\nPlain prose, no code at all, so its chunk text does not change.\n")
    write(docs / "readme.txt", "Plain text is parsed as before.\n")
    kb = tmp_path / "kb"
    # The store as the previous release wrote it: code rendered as plain text, no parser version.
    with monkeypatch.context() as m:
        plain = markdown.inline_text
        m.setattr(markdown, "inline_text", lambda token, heading=False: plain(token, heading=True))
        m.setattr(markdown, "_fenced", lambda token: token.content.rstrip("\n"))
        m.setattr(pipeline, "PARSER_VERSIONS", {})
        _ingest(docs, kb)
    from kbtool.store import Store

    old = Store.open(kb).catalog.db.execute("SELECT text FROM chunks WHERE doc_id='api.md'").fetchall()
    assert not any("`" in r["text"] for r in old)
    notes_rows = "SELECT rowid, chunk_id FROM chunks WHERE doc_id='notes.md'"
    notes_before = [tuple(r) for r in Store.open(kb).catalog.db.execute(notes_rows)]

    report = _ingest(docs, kb, "-v")  # -v: the unchanged documents by name too
    assert sorted(report["updated"]) == ["api.md", "notes.md"] and report["unchanged"] == ["readme.txt"]
    new = Store.open(kb).catalog.db.execute("SELECT text FROM chunks WHERE doc_id='api.md'").fetchall()
    assert any("`security_scopes.scopes`" in r["text"] for r in new)
    assert any("```python" in r["text"] for r in new)
    # Only chunks whose text changed are embedded again (notes.md's and api.md's intro keep theirs).
    assert report["index"]["embedded"] == sum("`" in r["text"] for r in new) < len(new)
    # A document whose blocks the new parser gives unchanged is not even re-chunked: its rows stay.
    assert [tuple(r) for r in Store.open(kb).catalog.db.execute(notes_rows)] == notes_before
    assert _ingest(docs, kb)["counts"]["unchanged"] == 3  # and the next run has nothing to do
