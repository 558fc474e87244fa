"""Documentation folders as people write them: Markdown dialects cleaned, citations by line,
filters people expect. The fixture folder is written by the tests."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kbtool.cli import app
from kbtool.ingestion.markup import MarkupRules, clean_markdown

from .conftest import write

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


GUIDE = """---
title: Handling Errors
tags: [errors, http]
updated: 2024-05-02
weight: 3
---

# Handling Errors { #handling-errors }

You raise an HTTPException to return an error response.

## Install the package {#install}

{* ../../docs_src/app/main.py hl[1] *}

{* ../docs_src/missing.py *}

--8<-- "snippets/note.md"

!!! tip "Use the status module"
    Import the codes from the status module instead of writing numbers.

    It keeps the code readable.

??? note
    Collapsed by default in the site.

/// warning | Technical Details

Starlette raises its own exception class.

///

//// tab | Python 3.10+

The modern syntax uses the pipe operator.

////

:::danger[Careful]
Never return a stack trace to the client.
:::

> [!NOTE]
> GitHub renders this as a callout.

```console
<span style="color: green;">$</span> uvicorn main:app &amp; sleep 1
```

```mermaid
graph TD
  A-->B
  B-->C
  C-->D
  D-->E
  E-->F
  F-->G
  G-->H
  H-->I
  I-->J
  J-->K
```

## Empty section { #empty }

## Last words

The end of the guide.
"""


@pytest.fixture
def docs(tmp_path):
    root = tmp_path / "site"
    write(root / "docs" / "en" / "tutorial" / "errors.md", GUIDE)
    write(root / "docs" / "zh" / "tutorial" / "errors.md",
          "# 处理错误 { #handling-errors }\n\n使用 HTTPException 返回错误响应。\n")
    write(root / "docs" / "en" / "index.md", "---\nupdated: 2023-01-10\n---\n\n# Home\n\nThe landing page of the docs.\n")
    write(root / "docs" / "docs_src" / "app" / "main.py", "from fastapi import HTTPException\nraise HTTPException(404)\n")
    write(root / "docs" / "snippets" / "note.md", "Snippets are pasted in verbatim.\n")
    return root


def test_clean_markdown_of_every_dialect(docs):
    doc = docs / "docs" / "en" / "tutorial" / "errors.md"
    c = clean_markdown(doc.read_text(), doc_path=doc, ingest_root=docs / "docs")
    text = c.text
    assert c.metadata == {"title": "Handling Errors", "tags": "errors, http", "updated": "2024-05-02", "weight": "3"}
    assert c.anchors == [("Handling Errors", "handling-errors"), ("Install the package", "install"), ("Empty section", "empty")]
    assert "{ #" not in text and "{#" not in text and "---" not in text.split("\n")[0]
    # Includes: the code file (as a fenced block) and the snippet pasted; the missing one removed.
    assert "```python\nfrom fastapi import HTTPException" in text and "Snippets are pasted in verbatim." in text
    assert c.stats["includes_resolved"] == 2 and c.stats["includes_missing"] == 1 and "{*" not in text and "8<" not in text
    # Admonitions: the label starts the body's first line; no fence or marker line is left.
    for line in ["Tip: Use the status module: Import the codes from the status module instead of writing numbers.",
                 "Note: Collapsed by default in the site.",
                 "Warning: Technical Details: Starlette raises its own exception class.",
                 "Python 3.10+: The modern syntax uses the pipe operator.",
                 "Danger: Careful: Never return a stack trace to the client.",
                 "Note: GitHub renders this as a callout."]:
        assert line in text.split("\n"), line
    assert "It keeps the code readable." in text.split("\n")  # the rest of the body, dedented
    for marker in ("!!!", "???", "///", "////", ":::", "[!NOTE]"):
        assert marker not in text, marker
    # HTML in code reduced to its text; a long diagram cut short.
    assert "$ uvicorn main:app & sleep 1" in text and "<span" not in text
    assert "A-->B" in text and "J-->K" not in text
    # Every output line knows its source line.
    lines = doc.read_text().split("\n")
    i = text.split("\n").index("The end of the guide.")
    assert lines[c.line_map[i] - 1] == "The end of the guide."


def test_rules_switch_off_one_by_one(docs):
    doc = docs / "docs" / "en" / "tutorial" / "errors.md"
    raw = doc.read_text()
    off = clean_markdown(raw, MarkupRules.parse(["all"]), doc_path=doc, ingest_root=docs / "docs")
    assert off.text == raw and off.metadata == {}
    only_anchors_off = clean_markdown(raw, MarkupRules.parse(["anchors"]), doc_path=doc, ingest_root=docs / "docs")
    assert "{ #handling-errors }" in only_anchors_off.text and "Tip: Use the status module" in only_anchors_off.text
    with pytest.raises(Exception, match="--markup-off 'colors'"):
        MarkupRules.parse(["colors"])


def test_includes_never_read_outside_the_ingest_root(tmp_path):
    write(tmp_path / "secret.txt", "TOP SECRET\n")
    doc = write(tmp_path / "root" / "a.md", '# A\n\n--8<-- "../secret.txt"\n\n{* /etc/hostname *}\n')
    c = clean_markdown(doc.read_text(), doc_path=doc, ingest_root=tmp_path / "root")
    assert "SECRET" not in c.text and c.stats["includes_missing"] == 2


@pytest.mark.slow
def test_ingested_folder_chunks_hold_what_a_person_reads(docs):
    kb = docs.parent / "kb"
    r = run("ingest", docs / "docs", "--store", kb, "--meta-from-path", "{lang}/**", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["markup"]["includes_missing"] == 1 and report["markup"]["admonitions"] == 6
    from kbtool.store import Store

    store = Store.open(kb)
    rows = store.catalog.db.execute("SELECT chunk_id, text, prefix, section_path, line_start, line_end, anchor, meta "
                            "FROM chunks WHERE doc_id='en/tutorial/errors.md' ORDER BY ordinal").fetchall()
    everything = "\n".join(r["prefix"] + "\n" + r["text"] for r in rows)
    for noise in ("{ #", "{#", "!!!", "///", ":::", "[!NOTE]", "{*", "--8<--", "<span", "title: Handling"):
        assert noise not in everything, noise
    assert all(r["text"].strip() and r["text"].strip() != r["section_path"].split(" > ")[-1] for r in rows)
    assert "Empty section" not in [r["text"].strip() for r in rows]  # a prefix-only chunk is dropped
    assert all(r["line_start"] and r["line_end"] >= r["line_start"] for r in rows)
    anchors = {r["section_path"].split(" > ")[-1]: r["anchor"] for r in rows}
    assert anchors["Install the package"] == "install"
    meta = json.loads(rows[0]["meta"])
    assert meta["lang"] == "en" and meta["updated"] == "2024-05-02" and meta["tags"] == "errors, http"
    title = store.catalog.db.execute("SELECT title FROM documents WHERE doc_id='en/tutorial/errors.md'").fetchone()[0]
    assert title == "Handling Errors"
    zh = store.catalog.db.execute("SELECT section_path, anchor FROM chunks WHERE doc_id='zh/tutorial/errors.md'").fetchone()
    assert zh["section_path"] == "处理错误" and zh["anchor"] == "handling-errors"  # no English slug in the text

    # Citations: path:line in --json and the table, URLs with the section anchor for the context.
    r = run("query", "Starlette exception class", "--store", kb, "--json", "-m", "bm25")
    hit = json.loads(r.stdout)["hits"][0]
    source = (docs / "docs" / "en" / "tutorial" / "errors.md").read_text().split("\n")
    assert "Starlette raises its own exception class." in "\n".join(source[hit["line_start"] - 1 : hit["line_end"]])
    assert hit["citation"].split("; includes ")[0] == f"en/tutorial/errors.md:{hit['line_start']}" + (
        f"-{hit['line_end']}" if hit["line_end"] != hit["line_start"] else "")
    # The chunk holds text two includes brought: cited at those files' own lines as well.
    assert hit["line_source"] == [{"path": "docs_src/app/main.py", "lines": [1, 2]},
                                  {"path": "snippets/note.md", "lines": [1, 1]}]
    assert hit["citation"].endswith("; includes docs_src/app/main.py:1-2, snippets/note.md:1")
    r = run("query", "Starlette exception class", "--store", kb, "-m", "bm25", "--context",
            "--base-url", "https://docs.example.com/")
    assert "https://docs.example.com/en/tutorial/errors/#install" in r.stdout

    # Switching a rule off re-parses (recorded in the manifest).
    r = run("ingest", docs / "docs", "--store", kb, "--markup-off", "anchors", "--update-sources", "--json")
    assert json.loads(r.stdout)["counts"]["updated"] == 4
    assert json.loads((kb / "manifest.json").read_text())["markup"]["anchors"] is False


@pytest.mark.slow
def test_filters_people_expect(docs):
    kb = docs.parent / "kb"
    r = run("ingest", docs / "docs", "--store", kb, "--meta-from-path", "{lang}/**", "-q")
    assert r.exit_code == 0, r.output

    def ids(*filters):
        args = ["query", "处理错误 error response landing page", "--store", kb, "--json", "-m", "bm25", "--top-k", "10"]
        for f in filters:
            args += ["--filter", f]
        res = run(*args)
        assert res.exit_code == 0, res.output
        return {h["doc_id"] for h in json.loads(res.stdout)["hits"]}, res.stderr

    assert ids("dir=en/**")[0] == {"en/tutorial/errors.md", "en/index.md"}  # a glob on the folder
    assert ids("lang=zh")[0] == {"zh/tutorial/errors.md"}  # metadata from the path
    assert ids("updated>=2024-01-01")[0] == {"en/tutorial/errors.md"}  # a date comparison
    assert ids("doc_id=en/tutorial/*")[0] == {"en/tutorial/errors.md"}
    got, warning = ids("lang=fr")
    assert got == set() and "matches no document" in warning and "'en'" in warning and "'zh'" in warning


EDGES = """---
version: 1.10
lang: no
access: public
chroma:document: x
---

# Edges

!!! info inline end "Side note"
    Floats beside the text.

=== "Python"

    ```python
    print("tab one")
    ```

=== "Rust"

    Rust goes here.

/// details | Summary
    type: warning
    open: true

Details body.
///

/// note | Empty
///

Next paragraph victor.

> [!TIP]
> ```bash
> echo tip
> ```

## Later {#later}

Setext heading {#setext}
------------------------

Setext body.

## Example {#example-get}

GET returns the item.

## Example {#example-post}

POST creates the item.

```java
List<String> kilo = new ArrayList<String>();
```

```console
<span style="color: green;">$</span> run &lt;x&gt;
```

{* code/app.rb *}
"""


def test_edge_cases_of_the_dialects(tmp_path):
    write(tmp_path / "code" / "app.rb", "# Compute the total\nputs 1 + 1\n")
    doc = write(tmp_path / "edges.md", EDGES)
    c = clean_markdown(doc.read_text(), doc_path=doc, ingest_root=tmp_path)
    lines = c.text.split("\n")
    assert c.metadata == {"version": "1.10", "lang": "no"}  # as written; access and chroma: keys are not a document's
    assert "Info: Side note: Floats beside the text." in lines
    assert "Python:" in lines and '    print("tab one")' not in lines and 'print("tab one")' in lines
    assert "Rust: Rust goes here." in lines
    assert "Summary: Details body." in lines and not any("type: warning" in l or "open: true" in l for l in lines)
    assert "Note: Empty" in lines and "Next paragraph victor." in lines  # an empty block keeps its label apart
    assert "echo tip" in lines and not any(l.startswith(">") for l in lines)  # a fence inside a GitHub alert
    assert "## Later" in lines and "Setext heading" in lines and "{#" not in c.text
    assert ("Example", "example-get") in c.anchors and ("Example", "example-post") in c.anchors
    assert "List<String> kilo = new ArrayList<String>();" in lines  # tags that are code stay
    assert "$ run <x>" in lines
    assert "```" in lines[lines.index("# Compute the total") - 1]  # an included Ruby file is fenced

    # Front matter that is not a mapping is text; a file of front matter only is its title.
    hr = clean_markdown("---\nThis is an intro paragraph juliet2.\n---\n\nBody.\n")
    assert "This is an intro paragraph juliet2." in hr.text and hr.metadata == {}


@pytest.mark.slow
def test_reingest_is_unchanged_and_notices_included_files(tmp_path):
    root = tmp_path / "docs"
    write(root / "a.md", "---\ntitle: Alpha\nupdated: 2024-01-01\n---\n\n# Alpha\n\n--8<-- \"parts/p.md\"\n")
    write(root / "parts" / "p.md", "The included paragraph says zebra.\n")
    write(root / ".secret" / "key.md", "PRIVATE KEY\n")
    write(root / "b.md", '# Beta\n\n--8<-- ".secret/key.md"\n\n--8<-- "drafts/d.md"\n\nBeta text.\n')
    write(root / "drafts" / "d.md", "DRAFT TEXT\n")
    write(root / "only.md", "---\ntitle: Only a title\n---\n")
    kb = tmp_path / "kb"
    args = ["ingest", root, "--store", kb, "--meta-from-path", "{section}/**", "--exclude", "drafts/*", "--json"]
    first = json.loads(run(*args).stdout)
    assert first["counts"]["failed"] == 0 and "only.md" in first["added"]
    again = json.loads(run(*args).stdout)
    assert again["counts"]["unchanged"] == len(first["added"]) and again["counts"]["updated"] == 0
    from kbtool.store import Store

    texts = " ".join(r[0] for r in Store.open(kb).catalog.db.execute("SELECT text FROM chunks"))
    assert "zebra" in texts and "PRIVATE KEY" not in texts and "DRAFT TEXT" not in texts
    write(root / "parts" / "p.md", "The included paragraph now says yak.\n")
    third = json.loads(run(*args).stdout)
    assert set(third["updated"]) == {"a.md", "parts/p.md"}  # the includer too, though its bytes are the same
    texts = " ".join(r[0] for r in Store.open(kb).catalog.db.execute("SELECT text FROM chunks"))
    assert "yak" in texts and "zebra" not in texts


def test_base_url_is_quoted():
    from types import SimpleNamespace

    from kbtool.query.context import url_for

    assert url_for("guides/C# basics.md", "intro", "https://x.org") == "https://x.org/guides/C%23%20basics/#intro"
    assert url_for("index.md", None, "https://x.org/") == "https://x.org/"
    assert url_for("manual/a.pdf", None, "https://x.org") == "https://x.org/manual/a.pdf"
    r = run("query", "x", "--base-url", "docs.example.com", "--store", "/nonexistent")
    assert r.exit_code == 2 and "--base-url" in r.output


@pytest.mark.slow
def test_second_review_cases(tmp_path):
    def clean(text, **kw):
        return clean_markdown(text, **kw).text.split("\n")

    out = clean('!!! note "Empty"\n\nNext paragraph.')
    assert "Note: Empty" in out and "Next paragraph." in out  # a title-only admonition: not glued to the next
    assert "Note: T: Body with a tab." in clean('!!! note "T"\n\tBody with a tab.')
    out = clean("> [!NOTE]\n> ```py\n> code\n\n## Later {#later}\n\n!!! tip\n    tip body")
    assert "## Later" in out and "Tip: tip body" in out  # an unterminated fence ends with its alert
    out = clean("!!! note\n    | a | b |\n    |---|---|\n    | 1 | 2 |")
    assert out[:2] == ["Note:", "| a | b |"]
    assert "```inline``` text" in clean("```inline``` text\n\n## H {#h}") and "## H" in clean("```inline``` text\n\n## H {#h}")
    c = clean_markdown("## The `--flag` option {#flag}\n\ntext\n\n## [Link](http://x) title {#lnk}\n\nmore\n")
    assert ("The --flag option", "flag") in c.anchors and ("Link title", "lnk") in c.anchors
    assert "Intro: with a colon." in clean("---\nIntro: with a colon.\nand: [unclosed\n---\n\nBody.\n")

    # A snippet inside a code fence is pasted verbatim; a missing include is noticed once it exists.
    write(tmp_path / "example.md", "# Title {#t}\n\n!!! note\n    body\n")
    doc = write(tmp_path / "d.md", '# D\n\n```markdown\n--8<-- "example.md"\n```\n\n--8<-- "later.md"\n')
    c = clean_markdown(doc.read_text(), doc_path=doc, ingest_root=tmp_path)
    assert "# Title {#t}" in c.text and "!!! note" in c.text and ("Title", "t") not in c.anchors
    assert c.includes[str((tmp_path / "later.md").resolve())] == ""

    kb = tmp_path / "kb"
    r = run("ingest", tmp_path, "--store", kb, "--json", "--exclude", "kb/*")
    assert r.exit_code == 0, r.output
    write(tmp_path / "later.md", "Later text arrives: quokka.\n")
    r = run("ingest", tmp_path, "--store", kb, "--json", "--exclude", "kb/*")
    assert "d.md" in json.loads(r.stdout)["updated"]


@pytest.mark.slow
def test_anchor_of_a_heading_with_inline_markup_reaches_the_chunk(tmp_path):
    write(tmp_path / "d" / "a.md", "# Top\n\n## The `--flag` option {#flag}\n\nUse the flag wisely, ocelot.\n")
    write(tmp_path / "d" / "b.md", "# Other\n\nNothing here.\n")
    write(tmp_path / "d" / "c.md", "# Third\n\nStill nothing.\n")
    r = run("ingest", tmp_path / "d", "--store", tmp_path / "kb", "-q")
    assert r.exit_code == 0, r.output
    r = run("query", "ocelot", "--store", tmp_path / "kb", "-m", "bm25", "--json")
    assert json.loads(r.stdout)["hits"][0]["anchor"] == "flag"


def test_a_repeated_heading_keeps_the_anchor_written_on_it_and_its_chunks_cite_it(tmp_path):
    # before: anchors went to headings by their text (the second "Options" took "third"), and chunks
    # took the anchor of the last heading with their section path (both "Options" sections: "third")
    from kbtool.chunk import ChunkParams, chunk_blocks
    from kbtool.ingestion.parse import parse_file

    page = write(tmp_path / "p.md", "# T\n\n## Options {#first}\n\nalpha\n\n## Options\n\nbeta\n\n"
                 "## Options {#third}\n\ngamma\n\n## Options\n\ndelta\n")
    doc = parse_file(page, "p.md")
    assert [b.anchor for b in doc.blocks if b.kind == "title"] == [None, "first", None, "third", None]
    chunks = chunk_blocks(doc.title, doc.blocks, ChunkParams(64, 0, 128), lambda t: len(t.split()))
    assert [(c.text, c.anchor) for c in chunks] == [("alpha", "first"), ("beta", None), ("gamma", "third"),
                                                    ("delta", None)]
