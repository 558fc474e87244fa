"""reStructuredText (Sphinx sources) through docutils. Real pages of a real Sphinx project
(tests/fixtures/sphinx/itsdangerous: ItsDangerous 2.2.0's docs, provenance in its PROVENANCE.md)
and a small hand-written one (tests/fixtures/sphinx/handwritten: html_baseurl in conf.py, Sphinx
roles and directives docutils does not know, includes): what a reader of the built site sees
reaches the blocks, in its section, cited at the lines it is on; URLs come from conf.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kbtool.errors import NoDocumentsError
from kbtool.ingestion.parse import MarkupContext, parse_file

from .conftest import block_at, norm, write

SPHINX = Path(__file__).parent / "fixtures" / "sphinx"
ITS = SPHINX / "itsdangerous"  # docs/ is the Sphinx project; CHANGES.rst and LICENSE.txt beside it
DEMO = SPHINX / "handwritten"  # docs/ is the Sphinx project; src/demo.py beside it
WORD = re.compile(r"[^\W_]+")
LABEL = re.compile(r"^(?:Note|Warning|See also|(?:Added|Changed|Removed) in version \S+|Deprecated since version \S+)"
                   r"(?:: |$)")


def parse(project: Path, page: str, include_root: Path | None = None):
    root = (project / "docs").resolve()
    ctx = MarkupContext(ingest_root=root, include_root=(include_root or root).resolve())
    return parse_file(root / page, page, markup=ctx)


def words_on_their_lines(doc, page_lines: list[str], files: dict[str, list[str]]) -> list[str]:
    """Blocks whose first cited line lacks the first word of their text, or whose last cited line
    lacks the last word (a label such as "Note: " is not in the source; code without its fences)."""
    wrong = []
    for b in doc.blocks:
        text = LABEL.sub("", b.text)
        if b.kind == "code":
            text = "\n".join(text.split("\n")[1:-1])
        words = WORD.findall(text.lower())
        if not words:
            continue
        if b.source:
            lines, (a, z) = files[b.source[0]["path"]], b.source[0]["lines"]
        else:
            lines, (a, z) = page_lines, b.lines
        if words[0] not in WORD.findall(lines[a - 1].lower()) or words[-1] not in WORD.findall(lines[z - 1].lower()):
            wrong.append(f"{doc.doc_id}:{a}-{z} {text[:50]!r}")
    return wrong


# ---- the real Sphinx pages -------------------------------------------------------------------------
HEADINGS = {
    "index.rst": ["ItsDangerous", "ItsDangerous > Installing", "ItsDangerous > Example Use Cases",
                  "ItsDangerous > Table of Contents"],
    "concepts.rst": ["General Concepts", "General Concepts > Serializer vs Signer", "General Concepts > The Secret Key",
                     "General Concepts > The Salt", "General Concepts > Key Rotation",
                     "General Concepts > Digest Method Security"],
    "serializer.rst": ["Serialization Interface", "Serialization Interface > Responding to Failure",
                       "Serialization Interface > Fallback Signers", "Serialization Interface > API"],
}
IDS = {"index.rst": ["itsdangerous", "installing", "example-use-cases", "table-of-contents"],
       "concepts.rst": ["general-concepts", "serializer-vs-signer", "the-secret-key", "the-salt", "key-rotation",
                        "digest-method-security"],
       "serializer.rst": ["serialization-interface", "responding-to-failure", "fallback-signers", "api"]}


@pytest.mark.parametrize("page", sorted(HEADINGS))
def test_sections_nest_as_the_pages_headings_and_anchor_at_sphinx_ids(page):
    from docutils.nodes import make_id

    doc = parse(ITS, page)
    titles = [b for b in doc.blocks if b.kind == "title"]
    assert [" > ".join(b.section) for b in titles] == HEADINGS[page]
    assert [b.depth for b in titles] == [0] + [1] * (len(titles) - 1)
    assert [b.anchor for b in titles] == IDS[page] == [make_id(b.text) for b in titles]
    assert doc.title == HEADINGS[page][0]
    assert all(b.section and " > ".join(b.section) in HEADINGS[page] for b in doc.blocks)


# (page, source line, phrase as a reader sees it, the section path of its block)
TEXT = [
    ("index.rst", 10, "Sometimes you want to send some data to untrusted environments", "ItsDangerous"),
    ("index.rst", 30, "pip install -U itsdangerous", "ItsDangerous > Installing"),
    ("index.rst", 42, "Signed objects can be stored in cookies", "ItsDangerous > Example Use Cases"),
    ("concepts.rst", 21, "Signatures are secured by the `secret_key`.", "General Concepts > The Secret Key"),
    ("concepts.rst", 49, "One way to generate a key is to use `os.urandom`.", "General Concepts > The Secret Key"),
    ("concepts.rst", 123, 'SECRET_KEYS = ["2b9cd98e", "169d7886", "b6af09f5"]', "General Concepts > Key Rotation"),
    ("concepts.rst", 134, "s.loads(t)  # valid even though it was signed with a previous key",
     "General Concepts > Key Rotation"),
    ("serializer.rst", 50, "decoded_payload = None", "Serialization Interface > Responding to Failure"),
    ("serializer.rst", 64, "# the payload (think pickle instead of json!)",
     "Serialization Interface > Responding to Failure"),
    ("serializer.rst", 93, "A tuple of `(signer_class, signer_kwargs)` to instantiate the",
     "Serialization Interface > Fallback Signers"),
]


@pytest.mark.parametrize("page, line, phrase, section", TEXT)
def test_text_is_kept_in_its_section_at_its_source_line(page, line, phrase, section):
    b = block_at(parse(ITS, page), line, phrase)
    assert " > ".join(b.section) == section
    lines = (ITS / "docs" / page).read_text(encoding="utf-8").split("\n")
    first = WORD.findall(norm(b.text if b.kind != "code" else b.text.split("\n", 1)[1]).lower())[0]
    assert first in WORD.findall(lines[b.lines[0] - 1].lower())  # the citation is where the text is


def test_a_code_block_is_kept_whole_with_its_language():
    doc = parse(ITS, "serializer.rst")
    b = block_at(doc, 50, "decoded_payload = None")
    assert b.kind == "code" and b.text.startswith("```python\n") and b.text.endswith("\n```")
    assert "except BadSignature as e:" in b.text and "# the payload (think pickle instead of json!)" in b.text
    assert b.lines == (46, 64)


@pytest.mark.parametrize("page", ["index.rst", "concepts.rst", "serializer.rst", "changes.rst", "license.rst"])
def test_every_block_is_cited_at_lines_holding_its_first_and_last_words(page):
    doc = parse(ITS, page, include_root=ITS)
    files = {name: (ITS / name).read_text(encoding="utf-8").split("\n") for name in ("CHANGES.rst", "LICENSE.txt")}
    assert doc.blocks and all(b.lines for b in doc.blocks)
    assert words_on_their_lines(doc, (ITS / "docs" / page).read_text(encoding="utf-8").split("\n"), files) == []


def test_sphinx_roles_and_directives_keep_their_text():
    doc = parse(ITS, "serializer.rst")
    text = "\n".join(b.text for b in doc.blocks)
    assert "The signer only signs bytes. To sign other types, the\n`Serializer` class provides" in text  # :doc:, :class:
    assert "similar to Python's `json` module" in text  # :mod:
    assert "use `Serializer.loads_unsafe`:" in text  # :meth:`~Serializer.loads_unsafe`
    api = [b for b in doc.blocks if b.section[-1:] == ["API"] and b.kind != "title"]
    assert [(b.kind, b.text) for b in api] == [("text", "Serializer")]  # .. autoclass:: Serializer
    assert "itsdangerous.serializer" not in [b.text for b in doc.blocks]  # .. module:: shows nothing on the site
    index = parse(ITS, "index.rst")
    toc = [b.text for b in index.blocks if b.section[-1:] == ["Table of Contents"] and b.kind == "list"]
    assert toc == ["concepts", "serializer", "signer", "exceptions", "timed", "url_safe", "encoding", "license",
                   "changes"]


def test_unknown_roles_and_directives_of_a_sphinx_page_keep_their_text():
    doc = parse(DEMO, "guide/headers.rst", include_root=DEMO)
    shown = {(b.kind, b.text, b.lines) for b in doc.blocks}
    for expected in [
        ("text", "Every response of `demo.send` carries headers; see Add custom headers\n"
                 "and `demo.Response` for the rest.", (8, 9)),  # :ref: to a label on the page: its title
        ("text", "Pass a mapping to `send`. Bug reports: 42.", (16, 16)),  # an extension's role: its text
        ("text", "send.py", (19, 19)),  # a code block's caption
        ("code", '```python\nfrom demo import send\nsend("report.pdf", headers={"X-Trace": "on"})\n```', (22, 23)),
        ("text", "Note: Header names are case-insensitive.", (25, 25)),
        ("text", "Added in version 2.0: The `headers` argument.", (27, 28)),
        ("text", "send(path, mimetype=None, headers=None)", (30, 30)),  # .. py:function::
        ("text", "Send the file at path.", (32, 32)),
        ("text", "param path: the file to send", (34, 34)),
        ("text", "demo.send_many", (37, 37)),  # .. autofunction::
        ("table", "Header | Max bytes\nCookie | 4096\nReferer | 2048", (43, 46)),
    ]:
        assert expected in shown, expected
    limits = [b for b in doc.blocks if b.section == ["Headers", "Add custom headers", "Limits"]]
    assert limits[0].kind == "title" and limits[0].anchor == "limits"
    index = parse(DEMO, "index.rst")
    assert [(b.kind, b.text) for b in index.blocks[2:]] == [  # a hidden toctree shows nothing
        ("text", "Guides"), ("list", "guide/headers"), ("list", "Installing Demo")]


def test_includes_read_only_under_the_roots_and_cite_the_included_lines(tmp_path):
    inside = parse(ITS, "changes.rst", include_root=ITS)
    assert [" > ".join(b.section) for b in inside.blocks if b.kind == "title"][:3] == [
        "Changes", "Changes > Version 2.2.0", "Changes > Version 2.1.2"]
    first = inside.blocks[1]
    assert (first.text, first.lines, first.source) == ("Version 2.2.0", (4, 4), [{"path": "CHANGES.rst", "lines": [1, 1]}])
    b = block_at(inside, 4, "Drop support for Python 3.7. 372")  # :pr:`372`
    assert b.source == [{"path": "CHANGES.rst", "lines": [6, 6]}]
    assert set(inside.includes) == {str((ITS / "CHANGES.rst").resolve())} and not inside.missing_includes
    licence = parse(ITS, "license.rst", include_root=ITS)
    code = [b for b in licence.blocks if b.kind == "code"]
    assert code[0].text.startswith("```text\nCopyright 2011 Pallets\n") and code[0].lines == (4, 4)
    assert code[0].source == [{"path": "LICENSE.txt", "lines": [1, 28]}]

    # The include root defaults to the folder ingested: ../CHANGES.rst is outside it, never read.
    alone = parse(ITS, "changes.rst")
    assert [b.text for b in alone.blocks] == ["Changes"] and alone.missing_includes == ["../CHANGES.rst"]
    assert parse(ITS, "license.rst").missing_includes == ["../LICENSE.txt"]
    # Nor an absolute path, nor a way out through a literalinclude.
    write(tmp_path / "secret.txt", "the launch code is 0000\n")
    write(tmp_path / "site" / "docs" / "page.rst", "Page\n====\n\n.. include:: ../../secret.txt\n\n"
          f".. literalinclude:: {tmp_path / 'secret.txt'}\n\n.. include:: /etc/hostname\n")
    out = parse(tmp_path / "site", "page.rst")
    assert "launch" not in out.text and [b.text for b in out.blocks] == ["Page"] and len(out.missing_includes) == 3


def test_pyobject_and_nested_includes_cite_the_included_files():
    doc = parse(DEMO, "guide/headers.rst", include_root=DEMO)
    proxy = block_at(doc, 49, "Behind a proxy, set `trust_proxy_headers` so the")
    assert proxy.source == [{"path": "_snippets/proxies.rst", "lines": [1, 2]}]
    code = [b for b in doc.blocks if b.kind == "code"][-1]
    assert code.text.startswith("```python\ndef send(path, mimetype=None, headers=None):") and "send_many" not in code.text
    assert code.source == [{"path": "src/demo.py", "lines": [4, 6]}] and code.lines == (51, 51)


def test_parsing_is_silent_and_never_fails_on_what_docutils_does_not_know(tmp_path, capfd):
    page = write(tmp_path / "docs" / "odd.rst", "Odd\n===\n\n*unclosed emphasis and `unclosed role\n\n"
                 ".. unheard-of:: argument text\n   :option: value\n\n   Content of an unknown directive.\n\n"
                 ":unknown-role:`kept text` and |undefined| substitution.\n\n.. raw:: html\n   :url: http://192.0.2.1/\n\n"
                 ".. csv-table::\n   :file: /etc/passwd\n")
    doc = parse_file(page, "odd.rst", markup=MarkupContext(ingest_root=tmp_path / "docs"))
    text = doc.text
    assert "argument text" in text and "Content of an unknown directive." in text and "kept text" in text
    assert "root:" not in text
    assert capfd.readouterr() == ("", "")


def test_a_leading_field_list_is_metadata_and_a_repeated_title_gets_sphinx_id(tmp_path):
    page = write(tmp_path / "p.rst", ":orphan:\n:tocdepth: 2\n\nUsage\n=====\n\nA\n-\n\nx\n\nA\n-\n\ny\n")
    doc = parse_file(page, "p.rst")
    assert doc.metadata == {"orphan": "", "tocdepth": "2"} and "tocdepth" not in doc.text
    assert [(b.text, b.anchor) for b in doc.blocks if b.kind == "title"] == [("Usage", "usage"), ("A", "a"),
                                                                           ("A", "id1")]


def test_a_line_docutils_will_not_read_is_a_parse_error_naming_it(tmp_path):
    from kbtool.errors import ParseError

    page = write(tmp_path / "wide.rst", "Wide\n====\n\n" + "x" * 100_001 + "\n")
    with pytest.raises(ParseError, match=r"^line 4 has 100001 characters, over the 100000 docutils reads"):
        parse_file(page, "wide.rst")


def test_html_baseurl_is_read_from_conf_py_without_running_it(tmp_path):
    from kbtool.ingestion.rst import sphinx_base_url

    assert sphinx_base_url(DEMO / "docs" / "conf.py") == "https://demo.example.org/en/latest/"  # it ends in SystemExit
    assert sphinx_base_url(ITS / "docs" / "conf.py") is None  # none set
    conf = write(tmp_path / "conf.py", 'import os\nhtml_baseurl = os.environ.get("READTHEDOCS_CANONICAL_URL", "")\n')
    assert sphinx_base_url(conf) is None  # computed: nothing guessed
    write(conf, 'html_baseurl = "https://a.example/"\nhtml_baseurl = "https://b.example/docs/"\n')
    assert sphinx_base_url(conf) == "https://b.example/docs/"
    write(conf, "html_baseurl = 'ftp://x/'\n")
    assert sphinx_base_url(conf) is None


# ---- into a store (the fake embedder: no model) ---------------------------------------------------------
def _store(path: Path, fake_embedder):
    from kbtool.store import Store

    return Store.open(path, create=True, model=fake_embedder.spec)


def test_the_real_sphinx_docs_ingest_into_a_store_with_their_sections_and_lines(tmp_path, fake_embedder):
    from kbtool.ingestion.pipeline import IngestOptions, ingest

    store = _store(tmp_path / "kb", fake_embedder)
    report = ingest(store, [ITS / "docs"], IngestOptions(include_root=str(ITS.resolve())), embedder=fake_embedder)
    assert sorted(report.added) == ["changes.rst", "concepts.rst", "index.rst", "license.rst", "serializer.rst"]
    assert not report.failed and [s["path"] for s in report.skipped] == ["conf.py"]
    assert report.markup == {"includes_resolved": 2}
    listing = store.chunks("concepts.rst")
    assert {c["section_path"] for c in listing} == set(HEADINGS["concepts.rst"][1:])
    texts = store.chunks_by_id([c["chunk_id"] for c in store.chunks()])
    lines = {p: (ITS / "docs" / p).read_text(encoding="utf-8").split("\n") for p in report.added}
    checked = 0
    for c in store.chunks():
        if c["line_source"] or not c["lines"]:
            continue
        words = WORD.findall(texts[c["chunk_id"]]["text"].lower())
        first = next(w for w in words if w != "python" and w != "text")  # a chunk may open with a fence
        assert first in WORD.findall(lines[c["doc_id"]][c["lines"][0] - 1].lower()), c
        assert words[-1] in " ".join(lines[c["doc_id"]][c["lines"][0] - 1:c["lines"][1]]).lower(), c
        checked += 1
    assert checked >= 12
    included = [c for c in store.chunks("changes.rst") if c["line_source"]]
    assert included and all(c["lines"] == [4, 4] and c["line_source"][0]["path"] == "CHANGES.rst" for c in included)


def test_citations_link_to_the_sphinx_page_and_section_of_conf_py_html_baseurl(tmp_path, fake_embedder):
    from kbtool.contract import load_contract
    from kbtool.ingestion.pipeline import IngestOptions, ingest
    from kbtool.query.pipeline import retrieve

    store = _store(tmp_path / "kb", fake_embedder)
    assert not ingest(store, [DEMO], IngestOptions(include_root=str(DEMO.resolve())), embedder=fake_embedder).failed
    record = store.sources()[str(DEMO.resolve())]
    assert record["sphinx"] == {"docs": "https://demo.example.org/en/latest/"}
    from kbtool.cli.status import _source_line

    assert "(https://demo.example.org/en/latest/ from docs/conf.py)" in _source_line({"root": str(DEMO), **record})
    root = str(DEMO.resolve())
    assert store.published(root, "docs/guide/headers.rst") == ("docs/", "https://demo.example.org/en/latest/", None)
    assert store.published(root, "docs/notes.md") == ("", None, None)  # only .rst pages: a MyST page's URL is not guessed
    assert store.published(root, "src/demo.rst") == ("", None, None)  # outside the Sphinx project
    c = load_contract(None, [], search=False)
    hit = next(h for h in retrieve(store, c, "case-insensitive header names", embedder=fake_embedder, top_k=10).hits
               if h.doc_id == "docs/guide/headers.rst" and h.section_path == "Headers > Add custom headers")
    assert hit.url == "https://demo.example.org/en/latest/guide/headers.html#add-custom-headers"
    assert hit.citation.startswith(hit.url)
    given = load_contract(None, ["context.base_url=https://given.example/"], search=False)  # query --base-url
    hit = next(h for h in retrieve(store, given, "case-insensitive header names", embedder=fake_embedder,
                                   top_k=10).hits if h.doc_id == "docs/guide/headers.rst")
    assert hit.url.startswith("https://given.example/docs/guide/headers.html#")
    # A base URL the user gives wins over conf.py's; the Python file beside the docs has no URL of its own.
    store2 = _store(tmp_path / "kb2", fake_embedder)
    ingest(store2, [DEMO / "docs"], IngestOptions(base_url="https://mirror.example/demo/"), embedder=fake_embedder)
    hit = next(h for h in retrieve(store2, c, "case-insensitive header names", embedder=fake_embedder, top_k=10).hits
               if h.doc_id == "guide/headers.rst")
    assert hit.url.startswith("https://mirror.example/demo/guide/headers.html#")


# ---- a folder with nothing supported ---------------------------------------------------------------------
def test_a_folder_with_no_supported_document_is_an_error_that_names_what_it_skipped(tmp_path, fake_embedder):
    from kbtool.ingestion.pipeline import ingest

    for name in ("a.png", "b.png", "c.css", "sub/d.png"):
        write(tmp_path / "site" / name, "x")
    (tmp_path / "empty").mkdir()
    store = _store(tmp_path / "kb", fake_embedder)
    with pytest.raises(NoDocumentsError) as err:
        ingest(store, [tmp_path / "site"], embedder=fake_embedder)
    assert str(err.value) == (f"{tmp_path / 'site'}: no supported document (skipped 3 .png, 1 .css): supported are "
                              ".md, .markdown, .mdx, .rst, .txt, .text, .html, .htm, .pdf, .docx, .csv")
    assert err.value.exit_code == 1
    with pytest.raises(NoDocumentsError, match=r"empty: no supported document \(no file in it\)"):
        ingest(store, [tmp_path / "empty"], embedder=fake_embedder)
    assert store.sources() == {} and store.document_ids() == []  # nothing recorded, nothing written
    # A folder of documents: ingested; again, unchanged: no error; its files gone, `ingest` with no
    # path mirrors the recorded folder (the documents leave the store).
    write(tmp_path / "site" / "page.rst", "Page\n====\n\nText.\n")
    assert ingest(store, [tmp_path / "site"], embedder=fake_embedder).added == ["page.rst"]
    assert ingest(store, [tmp_path / "site"], embedder=fake_embedder).unchanged == ["page.rst"]
    (tmp_path / "site" / "page.rst").unlink()
    assert ingest(store, None, embedder=fake_embedder).removed == ["page.rst"]


def test_the_cli_exits_1_naming_the_skipped_types(tmp_path, fake_embedder):
    from typer.testing import CliRunner

    from kbtool.cli import app

    write(tmp_path / "site" / "logo.png", "x")
    store = _store(tmp_path / "kb", fake_embedder)
    r = CliRunner().invoke(app, ["ingest", str(tmp_path / "site"), "--store", str(store.path), "--parse-only"])
    assert r.exit_code == 1
    assert "no supported document (skipped 1 .png): supported are .md" in r.stderr
    assert "Traceback" not in r.output


def test_an_ingest_that_finds_nothing_leaves_no_new_store_behind(tmp_path, fake_embedder):
    """A new store path and a folder with nothing to ingest: exit 1, and no empty store folder left
    (a later `kbtool status` would call it a store); an existing store is kept as it was."""
    from typer.testing import CliRunner

    from kbtool.cli import app

    write(tmp_path / "site" / "logo.png", "x")
    r = CliRunner().invoke(app, ["ingest", str(tmp_path / "site"), "--store", str(tmp_path / "new-kb"), "--parse-only"])
    assert r.exit_code == 1 and "no supported document" in r.stderr
    assert not (tmp_path / "new-kb").exists()
    store = _store(tmp_path / "kb", fake_embedder)
    r = CliRunner().invoke(app, ["ingest", str(tmp_path / "site"), "--store", str(store.path), "--parse-only"])
    assert r.exit_code == 1 and (store.path / "catalog.sqlite3").exists()
