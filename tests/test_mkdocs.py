"""A MkDocs site's mkdocs.yml: its site_url is the citations' base URL, its pages' URLs are the ones
MkDocs builds, and headings without an explicit { #id } get the id MkDocs gives them (the toc
extension's slugify, de-duplicated as toc does). Without a mkdocs.yml nothing changes. The oracle
is the real thing: Python-Markdown's toc in-process, `mkdocs build` in the slow test."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kbtool.contract import default_contract
from kbtool.ingestion.mkdocs import PyRef, find_site, load_config
from kbtool.ingestion.parse import MarkupContext, parse_file
from kbtool.ingestion.pipeline import IngestOptions, ingest
from kbtool.query.context import mkdocs_url, url_for
from kbtool.query.pipeline import retrieve
from kbtool.store import Store

from .conftest import write

FIXTURE = Path(__file__).parent / "fixtures" / "mkdocs_site"
PYMDOWN = {"name": "pymdownx.slugs.slugify", "args": [], "kwds": {"case": "lower"}}
PAGE = """# Über uns

Intro.

## Add *custom* `headers` with [links](x.md)

## Add custom headers

## Café &amp; <kbd>crème</kbd> ![badge](b.png)

## Options { #explicit }

### Add custom headers_1

## Add custom headers

## 中文 标题

## Add custom headers { #add-custom-headers_3 }

## Add  custom
headers
=======

text
"""


def _site(tmp_path: Path, config: str, pages: dict[str, str] | None = None) -> Path:
    write(tmp_path / "site" / "mkdocs.yml", config)
    for rel, text in (pages or {"index.md": "# Home\n\nHello.\n"}).items():
        write(tmp_path / "site" / "docs" / rel, text)
    return tmp_path / "site"


def _ids_of(page: Path, rel: str, site: dict | None) -> list:
    doc = parse_file(page, rel, markup=MarkupContext(ingest_root=page.parent, mkdocs=site))
    return [b.anchor for b in doc.blocks if b.kind == "title"]


@pytest.mark.parametrize("slugify,separator,attr_list", [
    ({"name": "markdown.extensions.toc.slugify"}, "-", True),
    ({"name": "markdown.extensions.toc.slugify_unicode"}, "_", True),
    (PYMDOWN, "-", True),
    ({"name": "pymdownx.slugs.slugify", "args": [], "kwds": {"case": "none", "percent_encode": True}}, "-", True),
    ({"name": "markdown.extensions.toc.slugify"}, "-", False),  # without attr_list "{ #id }" is text
])
def test_heading_ids_are_the_ones_python_markdown_gives(tmp_path, slugify, separator, attr_list):
    import markdown

    from kbtool.ingestion.mkdocs import slugifier

    page = write(tmp_path / "page.md", PAGE)
    ours = _ids_of(page, "page.md", {"slugify": slugify, "separator": separator, "attr_list": attr_list})
    html = markdown.markdown(PAGE, extensions=["toc"] + (["attr_list"] if attr_list else []),
                             extension_configs={"toc": {"slugify": slugifier(slugify), "separator": separator}})
    assert ours == re.findall(r"<h\d id=\"([^\"]*)\"", html)
    assert len(set(ours)) == len(ours) == 11


def test_without_a_site_only_explicit_anchors_are_kept(tmp_path):
    page = write(tmp_path / "page.md", PAGE)
    assert [a for a in _ids_of(page, "page.md", None) if a] == ["explicit", "add-custom-headers_3"]


def test_the_config_is_read_without_running_anything_it_names(tmp_path, monkeypatch):
    monkeypatch.setenv("KBTOOL_TEST_SITE_URL", "https://env.example.org/docs")
    write(tmp_path / "base.yml", "site_url: https://base.example.org/\nuse_directory_urls: false\n"
          "markdown_extensions:\n  - attr_list\n")
    config = write(tmp_path / "mkdocs.yml", """INHERIT: base.yml
site_url: !ENV [KBTOOL_TEST_SITE_URL, "https://default.example.org/"]
repo_name: !ENV [KBTOOL_TEST_UNSET_VARIABLE, "fallback"]
hooks: [!relative $config_dir/hooks.py]
markdown_extensions:
  - toc:
      slugify: !!python/name:kbtool_never_imported.slugs.slugify
  - pymdownx.emoji:
      emoji_generator: !!python/object/apply:kbtool_never_imported.make {kwds: {a: 1}}
  - custom: !!python/object:kbtool_never_imported.Thing {x: 1}
""")
    data = load_config(config)
    assert data["site_url"] == "https://env.example.org/docs" and data["repo_name"] == "fallback"
    assert data["use_directory_urls"] is False  # from INHERIT; its markdown_extensions replaced, as MkDocs does
    assert data["markdown_extensions"][0]["toc"]["slugify"] == PyRef("kbtool_never_imported.slugs.slugify")
    emoji = data["markdown_extensions"][1]["pymdownx.emoji"]["emoji_generator"]
    assert emoji == PyRef("kbtool_never_imported.make", True, (), (("a", 1),))
    assert data["hooks"] == ["$config_dir/hooks.py"] and data["markdown_extensions"][2]["custom"] == {"x": 1}
    write(tmp_path / "docs" / "index.md", "# Home\n")
    site, warnings = find_site(tmp_path / "docs")
    assert not warnings and site.site_url == "https://env.example.org/docs/" and not site.use_directory_urls
    assert not site.slugs and "is not one kbtool calls" in site.notes[0]
    assert site.parse_options("index.md")["slugify"] is None  # no ids made up: explicit anchors only
    assert not any(m.startswith("kbtool_never_imported") for m in sys.modules)


def test_without_pymdown_extensions_a_note_says_so_and_no_id_is_made_up(tmp_path, monkeypatch):
    from kbtool.ingestion import mkdocs

    for name in ("pymdownx", "pymdownx.slugs"):
        monkeypatch.setitem(sys.modules, name, None)  # importing it raises ImportError
    monkeypatch.setattr(mkdocs, "_slugifier", mkdocs._slugifier.__wrapped__)  # nothing cached
    site = _site(tmp_path, (FIXTURE / "mkdocs.yml").read_text(), {"index.md": "# Home\n\n## A { #a }\n\n## B\n"})
    found, _ = find_site(site / "docs")
    assert found.notes == ["slugify pymdownx.slugs.slugify: pymdown-extensions is not installed here (pip install "
                           "pymdown-extensions): headings without an explicit { #id } get no anchor"]
    options = found.parse_options("index.md")
    assert options["slugify"] is None and found.summary(None, None)["slugify"] is None
    assert _ids_of(site / "docs" / "index.md", "index.md", options) == [None, "a", None]


def test_which_mkdocs_yml_applies_to_a_folder(tmp_path):
    site = _site(tmp_path, "site_url: https://x.org/\n", {"index.md": "# Home\n", "guide/a.md": "# A\n"})
    for root, docs_dir, root_in_docs in ((site / "docs", ".", ""), (site / "docs" / "guide", ".", "guide"),
                                         (site, "docs", "")):
        found, warnings = find_site(root)
        assert found is not None and not warnings
        assert (found.record()["docs_dir"], found.record()["root_in_docs"]) == (docs_dir, root_in_docs)
    write(site / "other" / "b.md", "# B\n")
    assert find_site(site / "other") == (None, [])  # docs_dir is docs/, not this folder
    write(tmp_path / "custom" / "mkdocs.yaml", "docs_dir: pages\n")
    write(tmp_path / "custom" / "pages" / "p.md", "# P\n")
    assert find_site(tmp_path / "custom" / "pages")[0].docs_dir == (tmp_path / "custom" / "pages").resolve()
    write(tmp_path / "broken" / "mkdocs.yml", "site_url: [unclosed\n")
    write(tmp_path / "broken" / "docs" / "p.md", "# P\n")
    found, warnings = find_site(tmp_path / "broken" / "docs")
    assert found is None and "mkdocs.yml: not valid YAML (line 2)" in warnings[0] and "fix it" in warnings[0]


def test_page_urls_are_the_ones_mkdocs_builds():
    dirs = {"docs_dir": ".", "root_in_docs": "", "use_directory_urls": True}
    assert mkdocs_url("index.md", dirs) == ""
    assert mkdocs_url("a/b.md", dirs) == "a/b/"
    assert mkdocs_url("a/index.md", dirs) == "a/"
    assert mkdocs_url("a/README.md", dirs) == "a/"
    assert mkdocs_url("img/C# plot.png", dirs) == "img/C%23%20plot.png"  # copied as it is
    flat = {**dirs, "use_directory_urls": False}
    assert [mkdocs_url(p, flat) for p in ("index.md", "a/b.md", "a/index.md")] == ["index.html", "a/b.html", "a/index.html"]
    held = {**dirs, "docs_dir": "docs"}  # the folder ingested holds mkdocs.yml: only docs/ is the site
    assert mkdocs_url("docs/a.md", held) == "a/" and mkdocs_url("README.md", held) is None
    assert mkdocs_url("b.md", {**dirs, "root_in_docs": "guide"}) == "guide/b/"
    assert url_for("a/b.md", "über-uns", "https://x.org/site/", dirs) == "https://x.org/site/a/b/#%C3%BCber-uns"
    assert url_for("README.md", "x", "https://x.org/", held) == ""  # not published by the site: no URL made up
    hidden = {**dirs, "unpublished": [".*", "/templates/", "_incoming/", "*.tmp.md"]}  # exclude_docs
    assert [mkdocs_url(p, hidden) for p in ("_incoming/a.md", "x/b.tmp.md", "templates/t.md", "a/templates/t.md")] == [
        None, None, None, "a/templates/t/"]


def _store(path: Path, fake_embedder) -> Store:
    return Store.open(path, create=True, model=fake_embedder.spec)


def _anchors(store: Store) -> dict[str, set]:
    out: dict[str, set] = {}
    for doc_id, anchor in store.catalog.db.execute("SELECT doc_id, anchor FROM chunks"):
        out.setdefault(doc_id, set()).add(anchor)
    return out


def _hit(store: Store, question: str, fake_embedder):
    return retrieve(store, default_contract(), question, embedder=fake_embedder).hits[0]


def test_without_a_mkdocs_yml_ingest_is_as_before(tmp_path, fake_embedder):
    docs = tmp_path / "docs"
    shutil.copytree(FIXTURE / "docs", docs)
    kb = _store(tmp_path / "kb", fake_embedder)
    report = ingest(kb, [docs], embedder=fake_embedder)
    assert report.mkdocs == [] and "mkdocs_ids" not in report.markup
    assert "mkdocs" not in kb.sources()[str(docs.resolve())]
    assert not any("mkdocs" in kb.document_options(d) for d in kb.document_ids())
    assert set().union(*_anchors(kb).values()) == {None, "reqs"}  # the one explicit { #reqs }
    assert kb.document_info("guide/cheatsheet.md")["title"] == "cheatsheet"
    hit = _hit(kb, "X-Lanternfish header set_header", fake_embedder)
    assert hit.url == "" and hit.citation.startswith("guide/headers.md:")


def test_a_mkdocs_site_gives_urls_and_heading_ids_and_a_changed_config_reparses(tmp_path, fake_embedder):
    site = tmp_path / "site"
    shutil.copytree(FIXTURE, site)
    kb = _store(tmp_path / "kb", fake_embedder)
    report = ingest(kb, [site / "docs"], embedder=fake_embedder)
    [seen] = report.mkdocs
    assert (seen["site_url"], seen["base_url_from"], seen["slugify"]) == (
        "https://docs.example.com/fixture/", "mkdocs.yml", "pymdownx.slugs.slugify(case=lower)")
    assert report.markup["mkdocs_ids"] == 19 and report.markup["anchors"] == 1
    anchors = _anchors(kb)
    assert {"add-custom-headers", "add-custom-headers_1", "überblick-der-köpfe", "中文-说明"} <= anchors["guide/headers.md"]
    assert {"reqs", "options", "options_1", "options_2", "options_3"} <= anchors["install.md"]
    assert kb.document_info("guide/cheatsheet.md")["title"] == "Cheat sheet"  # the nav's: the page has no # title
    hit = _hit(kb, "duskmantle header replaces", fake_embedder)
    assert hit.citation == hit.url == "https://docs.example.com/fixture/guide/headers/#add-custom-headers_1"
    hit = _hit(kb, "tiny site bramblewick plugin", fake_embedder)
    assert hit.url == "https://docs.example.com/fixture/#welcome-to-fixture-docs"
    hit = _hit(kb, "hollowmere feature not released", fake_embedder)
    assert hit.doc_id == "drafts/wip.md" and hit.citation == "drafts/wip.md:3"  # exclude_docs: not on the site

    config = (site / "mkdocs.yml").read_text()
    (site / "mkdocs.yml").write_text(config.replace("https://docs.example.com/fixture/", "https://new.example.com/"))
    again = ingest(kb, [site / "docs"], embedder=fake_embedder)
    assert not again.updated and len(again.unchanged) == 5  # the URL is read at query time
    assert _hit(kb, "duskmantle header replaces", fake_embedder).url.startswith("https://new.example.com/guide/headers/#")
    (site / "mkdocs.yml").write_text(config.replace("case: lower", "case: none"))
    again = ingest(kb, [site / "docs"], embedder=fake_embedder)
    assert len(again.updated) == 5  # another slugify: every page is parsed again
    assert "Überblick-der-Köpfe" in _anchors(kb)["guide/headers.md"]


def test_a_base_url_given_wins_over_site_url_and_a_folder_holding_mkdocs_yml_cites_only_its_pages(tmp_path, fake_embedder):
    site = tmp_path / "site"
    shutil.copytree(FIXTURE, site)
    write(site / "README.md", "# Fixture repository\n\nThe repository's readme mentions the gravelpit tool.\n")
    kb = _store(tmp_path / "kb", fake_embedder)
    report = ingest(kb, [site], IngestOptions(base_url="https://mirror.example.net/"), embedder=fake_embedder)
    assert report.mkdocs[0]["base_url_from"] == "--base-url" and report.mkdocs[0]["base_url"] == "https://mirror.example.net/"
    assert _hit(kb, "duskmantle header replaces", fake_embedder).url == (
        "https://mirror.example.net/guide/headers/#add-custom-headers_1")  # docs/ is the site's root
    readme = _hit(kb, "gravelpit tool readme", fake_embedder)
    assert readme.doc_id == "README.md" and readme.url == "" and readme.citation == "README.md:3"  # not on the site
    assert "mkdocs" not in kb.document_options("README.md") and readme.anchor is None


def _build(tmp_path: Path) -> Path:
    out = tmp_path / "built"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(FIXTURE / "mkdocs.yml"),
                           "-d", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.slow
def test_every_anchor_and_page_url_exists_in_the_site_mkdocs_builds(tmp_path, fake_embedder):
    pytest.importorskip("mkdocs")
    built = _build(tmp_path)
    kb = _store(tmp_path / "kb", fake_embedder)
    ingest(kb, [FIXTURE / "docs"], embedder=fake_embedder)
    _, base, site = kb.published(str((FIXTURE / "docs").resolve()))
    assert base == "https://docs.example.com/fixture/"
    anchors = _anchors(kb)
    assert len(anchors) == 5 and sum(len(a - {None}) for a in anchors.values()) == 20  # every heading
    for doc_id, ids in anchors.items():
        url = url_for(doc_id, None, base, site)
        if doc_id == "drafts/wip.md":  # exclude_docs: the build leaves it out, so kbtool gives it no URL
            assert url == "" and not (built / "drafts").exists()
            continue
        assert url.startswith(base)
        path = url[len(base):]
        page = built / (path + "index.html" if path.endswith("/") or not path else path)
        assert page.is_file(), (doc_id, url)
        built_ids = re.findall(r"<h[1-6] id=\"([^\"]*)\"", page.read_text(encoding="utf-8"))
        assert ids - {None} <= set(built_ids), (doc_id, ids - set(built_ids))
        # every heading, in order, as the page's recorded parse options make them
        assert _ids_of(FIXTURE / "docs" / doc_id, doc_id, kb.document_options(doc_id)["mkdocs"]) == built_ids


@pytest.mark.slow
def test_the_cli_cites_the_site_without_a_base_url(tmp_path):
    def kbtool(*args):
        proc = subprocess.run([sys.executable, "-m", "kbtool", *map(str, args)], capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    out = kbtool("ingest", FIXTURE / "docs", "--store", tmp_path / "kb")
    assert (f"mkdocs.yml: site_url https://docs.example.com/fixture/, slugify pymdownx.slugs.slugify(case=lower), "
            f"4 nav titles ({(FIXTURE / 'mkdocs.yml').resolve()})") in out
    assert out.count("mkdocs.yml:") == 1
    report = json.loads(kbtool("ingest", FIXTURE / "docs", "--store", tmp_path / "kb", "--json"))
    assert report["mkdocs"][0]["slugify"] == "pymdownx.slugs.slugify(case=lower)"
    hits = json.loads(kbtool("query", "How do I add custom headers with set_header?", "--store", tmp_path / "kb",
                             "--json"))["hits"]
    assert hits[0]["citation"] == "https://docs.example.com/fixture/guide/headers/#add-custom-headers"
