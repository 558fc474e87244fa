"""Real pages from real site generators (tests/fixtures/markdown_sites, provenance in its
PROVENANCE.md, facts checked by hand in expected/FACTS.md): what a reader sees reaches the blocks,
in the right section, cited at the right source lines."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from kbtool.ingestion.parse import MarkupContext, parse_file

from .conftest import block_at

SITES = Path(__file__).parent / "fixtures" / "markdown_sites"
# The folder each generator's pages are ingested from, and where its includes resolve.
ROOTS = {"vitepress": ("vitepress", None), "docusaurus": ("docusaurus", None), "github": ("github", None),
         "mkdocs": ("mkdocs/docs/en/docs", "mkdocs"), "mkdocs-snippets": ("mkdocs-snippets", "mkdocs-snippets")}
PAGES = sorted(p.relative_to(SITES).as_posix() for p in SITES.rglob("*.md*")
               if p.suffix in (".md", ".mdx") and not p.relative_to(SITES).parts[0] == "expected"
               and p.name != "PROVENANCE.md")


def parse(page: str):
    site = page.split("/")[0]
    root, include = ROOTS[site]
    root = (SITES / root).resolve()
    path = SITES / page
    ctx = MarkupContext(ingest_root=root, include_root=(SITES / include).resolve() if include else None)
    return parse_file(path, path.resolve().relative_to(root).as_posix(), markup=ctx)


# (page, source line, phrase as rendered, the section path of its block or None)
TEXT = [
    ("vitepress/src/guide/built-ins/keep-alive.md", 7, "<KeepAlive> is a built-in component that allows us", None),
    ("vitepress/src/guide/built-ins/keep-alive.md", 77, "will automatically infer its", None),
    ("vitepress/src/guide/built-ins/keep-alive.md", 82, "We can limit the maximum number of component instances",
     "KeepAlive > Max Cached Instances"),
    ("vitepress/src/guide/built-ins/keep-alive.md", 111, "</script>", None),
    ("vitepress/src/guide/built-ins/keep-alive.md", 138, "Both hooks work for not only the root component cached by",
     None),
    ("vitepress/src/guide/built-ins/keep-alive.md", 143, "API reference", "KeepAlive > Lifecycle of Cached Instance"),
    ("vitepress/src/guide/essentials/reactivity-fundamentals.md", 8, "You can toggle between the API styles", None),
    ("vitepress/src/guide/essentials/reactivity-fundamentals.md", 42, "Vue uses a",
     "Reactivity Fundamentals > Declaring Reactive State *"),
    ("vitepress/src/guide/essentials/reactivity-fundamentals.md", 101,
     "For the rest of the guide, we will be primarily using SFC",
     "Reactivity Fundamentals > Declaring Reactive State ** > <script setup> **"),
    ("vitepress/src/guide/essentials/reactivity-fundamentals.md", 114,
     "The reactivity system is discussed in more details in the", None),
    ("vitepress/src/guide/essentials/reactivity-fundamentals.md", 172, "In Vue, state is deeply reactive by default.",
     "Reactivity Fundamentals > Declaring Methods * > Deep Reactivity"),
    ("vitepress/src/guide/essentials/reactivity-fundamentals.md", 198,
     "Refs can hold any value type, including deeply nested objects", None),
    ("vitepress/src/api/sfc-script-setup.md", 3,
     "is a compile-time syntactic sugar for using Composition API inside Single-File Components", "<script setup>"),
    ("vitepress/src/api/sfc-script-setup.md", 12, "To opt-in to the syntax, add the", "<script setup> > Basic Syntax"),
    ("vitepress/src/api/sfc-script-setup.md", 16, "console.log('hello script setup')", None),
    ("vitepress/src/api/sfc-script-setup.md", 99, "it can cause a de-synchronization between parent and child components",
     None),
    ("vitepress/src/api/sfc-script-setup.md", 144, "in the same component is limited to the scenarios described above",
     "<script setup> > Usage alongside normal <script>"),
    ("vitepress/src/api/sfc-script-setup.md", 164, "must be used in combination with", "<script setup> > Top-level await"),
    ("vitepress/src/style-guide/rules-essential.md", 3,
     "These rules help prevent errors, so learn and abide by them at all costs.", None),
    ("vitepress/src/style-guide/rules-essential.md", 37,
     "In committed code, prop definitions should always be as detailed as possible",
     "Priority A Rules: Essential > Use detailed prop definitions"),
    ("vitepress/src/style-guide/rules-essential.md", 40, "have two advantages:", None),
    ("vitepress/src/style-guide/rules-essential.md", 43,
     "In development, Vue will warn you if a component is ever provided incorrectly formatted props", None),
    ("vitepress/src/style-guide/rules-essential.md", 52, "// This is only OK when prototyping", None),
    ("mkdocs/docs/en/docs/tutorial/metadata.md", 12, "A short summary of the API.", None),
    ("mkdocs/docs/en/docs/tutorial/metadata.md", 16, "The identifying name of the contact person/organization.", None),
    ("mkdocs/docs/en/docs/tutorial/metadata.md", 27, "field and it will be rendered in the output.", None),
    ("mkdocs/docs/en/docs/tutorial/metadata.md", 101, "would go after",
     "Metadata and Docs URLs > Metadata for tags > Order of tags"),
    ("mkdocs/docs/en/docs/tutorial/metadata.md", 115, "If you want to disable the OpenAPI schema completely you can set",
     "Metadata and Docs URLs > OpenAPI URL"),
    ("mkdocs/docs/en/docs/tutorial/body.md", 12, "To send data, you should use one of:", None),
    ("mkdocs/docs/en/docs/tutorial/body.md", 52, "when a model attribute has a default value, it is not required.", None),
    ("mkdocs/docs/en/docs/tutorial/body.md", 103, "UIs", None),
    ("mkdocs/docs/en/docs/tutorial/body.md", 207, "FastAPI will know that the value of",
     "Request Body > Request body + path + query parameters"),
    ("mkdocs/docs/en/docs/tutorial/first-steps.md", 11, "which provides a lot of features", None),
    ("mkdocs/docs/en/docs/tutorial/first-steps.md", 40, "Running in development mode, for production use:", None),
    ("mkdocs/docs/en/docs/tutorial/first-steps.md", 75, "is a class that inherits directly from", None),
    ("mkdocs/docs/en/docs/tutorial/first-steps.md", 99, "This is a Python function.",
     "First Steps > Recap, step by step > Step 4: define the path operation function"),
    ("mkdocs-snippets/docs/guide/widgets.md", 12, "Every widget runs in its own asyncio task.", "Widgets > What is a widget?"),
    ("mkdocs-snippets/docs/guide/widgets.md", 115, "You can disable scoped CSS by setting the class var",
     "Widgets > Static widget > Default CSS > Scoped CSS"),
    ("docusaurus/website/docs/deployment/index.mdx", 29, "The following parameters are required in",
     "Deployment > Configuration"),
    ("docusaurus/website/docs/deployment/index.mdx", 33, "URL for your site. For a site deployed at", None),
    ("docusaurus/website/docs/deployment/index.mdx", 64, "import 'dotenv/config';", None),
    ("docusaurus/website/docs/deployment/index.mdx", 102,
     "How many resources (money, person-hours, etc.) am I willing to invest in this?", None),
    ("docusaurus/website/docs/deployment/index.mdx", 106, "Static hosting providers can help you set up a working website",
     None),
    ("docusaurus/website/docs/deployment/index.mdx", 17, "The only responsibility of Docusaurus is to build your site", None),
    ("docusaurus/website/docs/deployment/index.mdx", 159, "We can only officially document a small subset of hosting providers.",
     None),
    ("docusaurus/website/docs/deployment/index.mdx", 143, "It is not the best option, compared to a static hosting provider",
     "Deployment > Self-Hosting"),
    ("docusaurus/website/docs/installation.mdx", 16, "to understand Docusaurus in", None),
    ("docusaurus/website/docs/installation.mdx", 45,
     "If you are setting up a new Docusaurus website for a Meta open source project", None),
    ("docusaurus/website/docs/installation.mdx", 54, "Alternative installation commands", None),
    ("docusaurus/website/docs/installation.mdx", 56, "You can also initialize a new project using your preferred project manager:",
     None),
    ("docusaurus/website/docs/installation.mdx", 123, "In this case, you should run", "Installation > Project structure > Monorepos"),
    ("docusaurus/website/docs/installation.mdx", 163, "npm install", None),
    ("docusaurus/website/docs/migration/index.mdx", 22,
     "This CLI command is used to clear a Docusaurus site's generated assets", None),
    ("docusaurus/website/docs/migration/index.mdx", 35, "rm -rf node_modules yarn.lock package-lock.json", None),
    ("docusaurus/website/docs/migration/index.mdx", 40, "Remove-Item -Force -Recurse", None),
    ("docusaurus/website/docs/migration/index.mdx", 30, "Remove the",
     "Upgrading Docusaurus > Troubleshooting Upgrades > Remove node_modules and your lock file(s)."),
    ("docusaurus/website/docs/migration/index.mdx", 25, "npm run clear",
     "Upgrading Docusaurus > Troubleshooting Upgrades > Run the clear command"),
    ("docusaurus/website/docs/guides/markdown-features/markdown-features-admonitions.mdx", 55,
     "Some content with Markdown syntax. Check this api.", None),
    ("docusaurus/website/docs/guides/markdown-features/markdown-features-admonitions.mdx", 217, "Deep child content", None),
    ("docusaurus/website/docs/guides/markdown-features/markdown-features-admonitions.mdx", 254, "This is an apple", None),
    ("docusaurus/website/docs/guides/markdown-features/markdown-features-admonitions.mdx", 286, "It works!",
     "Admonitions > Customizing admonitions > Custom admonition type components"),
    ("github/readme-ai/README.md", 81, "is a developer tool that automatically generates README files", "Introduction"),
    ("github/readme-ai/README.md", 22, "Designed for simplicity, customization, and developer productivity.", None),
    ("github/readme-ai/README.md", 75, "for a complete list of features, customization options, and examples.", None),
    ("github/readme-ai/README.md", 101, "This section captures your project's essence and value proposition.", None),
    ("github/readme-ai/README.md", 155, "No API key needed", "Getting Started > Supported LLM API Services"),
    ("github/readme-ai/README.md", 168, "Install with pip (recommended for most users):", "Getting Started > Installation > Pip"),
    ("github/readme-ai/README.md", 177, "extra dependencies are required", None),
    ("github/readme-ai/README.md", 181, 'pip install "readmeai[anthropic]"', None),
    ("github/readme-ai/README.md", 211, "for more information on setting up the Ollama server.",
     "Getting Started > Usage > Set your API key"),
    ("github/readme-ai/README.md", 218, "ollama pull llama3.2:latest", None),
    ("github/textual/README.md", 16, "Build cross-platform user interfaces with a simple Python API.", "Textual"),
    ("github/textual/README.md", 58, "Textual is an asynchronous framework under the hood.", None),
    ("github/textual/README.md", 166, "supplies a dev console that connects to your application", "Textual > Dev Console"),
]

# (page, text that must not reach any block)
NOT_TEXT = [
    ("vitepress/src/guide/built-ins/keep-alive.md", "import SwitchComponent"),
    ("vitepress/src/guide/essentials/reactivity-fundamentals.md", "outline: deep"),
    ("vitepress/src/guide/essentials/reactivity-fundamentals.md", "VueSchoolLink"),
    ("mkdocs/docs/en/docs/tutorial/body.md", "User Interfaces"),
    ("docusaurus/website/docs/deployment/index.mdx", "DocCardList"),
    ("docusaurus/website/docs/deployment/index.mdx", "#configuration"),
    ("docusaurus/website/docs/installation.mdx", "import UpgradeGuide"),
    ("docusaurus/website/docs/installation.mdx", "mdx-code-block"),
    ("docusaurus/website/docs/guides/markdown-features/markdown-features-admonitions.mdx", "prettier-ignore"),
    ("github/readme-ai/README.md", "img.shields.io"),
    ("github/textual/README.md", "<img"),
]


@pytest.mark.parametrize("page,line,phrase,path", TEXT, ids=[f"{t[0].split('/')[-1]}:{t[1]}" for t in TEXT])
def test_what_a_reader_sees_is_kept_in_its_section_at_its_line(page, line, phrase, path):
    block = block_at(parse(page), line, phrase)
    if path is not None:
        assert " > ".join(block.section) == path


@pytest.mark.parametrize("page,text", NOT_TEXT, ids=[f"{t[0].split('/')[-1]}:{t[1]}" for t in NOT_TEXT])
def test_markup_is_not_text(page, text):
    doc = parse(page)
    assert not [b.text for b in doc.blocks if text in b.text]


def test_a_page_without_a_title_has_sibling_sections_and_is_named_by_its_file():
    doc = parse("github/readme-ai/README.md")
    tops = [b.section for b in doc.blocks if b.kind == "title" and b.depth == 0]
    assert [s[0] for s in tops][:4] == ["Quick Links", "Introduction", "Features", "Getting Started"]
    assert doc.title == "README"  # the first `##` does not name the page


def test_a_component_only_page_is_skipped_as_no_text():
    from kbtool.errors import EmptyDocumentError

    with pytest.raises(EmptyDocumentError, match="no text"):
        parse("vitepress/src/api/index.md")


def test_an_escaped_script_title_keeps_the_whole_page():
    doc = parse("vitepress/src/api/sfc-script-setup.md")
    assert doc.title == "<script setup>"
    assert max(b.lines[1] for b in doc.blocks) >= 160


def test_the_five_line_example_keeps_all_three_paragraphs(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n<div class=\"composition-api\">\n\nIf you do not use `<script setup>`, make sure "
                    "this text is still here.\n\nThe third paragraph should also be here.\n\n</div>\n\n"
                    "Fourth paragraph.\n", encoding="utf-8")
    doc = parse_file(page, "page.md")
    assert [(b.kind, b.text, b.lines) for b in doc.blocks] == [
        ("title", "Title", (1, 1)),
        ("text", "If you do not use `<script setup>`, make sure this text is still here.", (5, 5)),
        ("text", "The third paragraph should also be here.", (7, 7)),
        ("text", "Fourth paragraph.", (11, 11)),
    ]


@pytest.mark.parametrize("page", PAGES)
def test_every_block_is_cited_at_lines_holding_its_words(page):
    """Citations checked against the source file: a block's first and last words are on its
    first and last cited lines' span (blocks from included files are checked by their own test;
    an admonition's label, "Tip: ...", stands on its opening line, just above)."""
    if page == "vitepress/src/api/index.md":
        pytest.skip("component-only: no blocks (test_a_component_only_page_is_skipped_as_no_text)")
    source = (SITES / page).read_text(encoding="utf-8").split("\n")
    doc = parse(page)
    checked = 0
    for b in doc.blocks:
        if getattr(b, "source", None) or not b.lines:
            continue
        words = re.findall(r"\w+", b.text.lower())
        span = "\n".join(source[b.lines[0] - 1:b.lines[1]]).lower()
        above = "\n".join(source[max(0, b.lines[0] - 4):b.lines[0] - 1]).lower()
        if not words or b.kind == "table":
            continue
        assert words[0] in above + span and words[-1] in above + span, (b.lines, b.text[:80])
        checked += 1
    assert checked >= 5


HAND = [("vitepress-keep-alive.txt", "vitepress/src/guide/built-ins/keep-alive.md"),
        ("mkdocs-metadata.txt", "mkdocs/docs/en/docs/tutorial/metadata.md"),
        ("docusaurus-deployment.txt", "docusaurus/website/docs/deployment/index.mdx"),
        ("github-readme-ai.txt", "github/readme-ai/README.md")]


@pytest.mark.parametrize("expected,page", HAND)
def test_the_blocks_hold_the_hand_counted_text(expected, page):
    """Every word a person counted on the rendered page (expected/*.txt) is in the blocks."""
    want = Counter(re.findall(r"\w+", (SITES / "expected" / expected).read_text(encoding="utf-8").lower()))
    have = Counter(re.findall(r"\w+", " ".join(b.text for b in parse(page).blocks).lower()))
    kept = sum(min(n, have[w]) for w, n in want.items()) / sum(want.values())
    assert kept >= 0.99, sorted((want - have).items())[:30]


def test_ingest_of_a_docs_site_with_a_component_only_page_exits_0_naming_it_skipped(tmp_path):
    """A real VitePress site (its pages as committed here): exit 0, the component-only page named as
    skipped for having no text, nothing failed, every other page keeps its text (the guard)."""
    import json
    import shutil
    import subprocess
    import sys

    shutil.copytree(SITES / "vitepress", tmp_path / "site")
    r = subprocess.run([sys.executable, "-m", "kbtool", "ingest", str(tmp_path / "site"), "--store",
                        str(tmp_path / "kb"), "--json", "--strict"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["counts"]["failed"] == 0 and out["counts"]["added"] >= 3
    assert out["skipped"] == {"unsupported file type (none)": ["LICENSE"], "no text: nothing to index": ["src/api/index.md"]}
    assert out["kept_text"]["below"] == [] and out["kept_text"]["measured"] == out["counts"]["added"]
    r = subprocess.run([sys.executable, "-m", "kbtool", "ingest", str(tmp_path / "site"), "--store",
                        str(tmp_path / "kb")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "skipped src/api/index.md: no text" in r.stderr, r.stderr


def test_an_api_reference_directive_keeps_the_name_and_drops_its_options(tmp_path):
    """mkdocstrings' `::: package.Class` (FastAPI's reference pages): the rendered page is titled by
    the object's name; the indented `options:` YAML is configuration. The guard agrees."""
    from kbtool.ingestion.kept import measure_document

    page = tmp_path / "apirouter.md"
    page.write_text("# `APIRouter` class\n\nImport it from `fastapi`.\n\n::: fastapi.APIRouter\n    options:\n"
                    "        members:\n            - websocket\n            - include_router\n\nAfter it.\n",
                    encoding="utf-8")
    doc = parse_file(page, "apirouter.md")
    assert [(b.kind, b.text) for b in doc.blocks] == [
        ("title", "APIRouter class"), ("text", "Import it from `fastapi`."), ("text", "fastapi.APIRouter"),
        ("text", "After it.")]
    assert measure_document(doc, page.read_text(encoding="utf-8"), ".md").share == 1.0
