"""Markdown as people write it, cleaned before it is parsed: what a reader sees, nothing else.

Each rule is on by default and can be switched off (``kbtool ingest --markup-off RULE``); the
rules in force are part of every document's parse options, so a change re-parses.

* ``front_matter``: a leading YAML block (``---`` ... ``---``) becomes document metadata (title,
  tags, dates, anything filterable) and leaves the text.
* ``anchors``: heading attributes ``{ #id }``, ``{#id}``, ``{: #id .cls }`` leave the heading and
  are kept as the section's anchor (for citations).
* ``admonitions``: MkDocs ``!!! note "Title"`` / ``??? note`` (indented body), PyMdown
  ``/// tip | Title`` ... ``///`` and ``//// tab | Python 3.10+`` ... ``////``, Docusaurus
  ``:::note[Title]`` ... ``:::``, GitHub ``> [!NOTE]``: the label ("Tip: Title") becomes the start
  of the body's first line, so it can never be separated from its body; fences are dropped.
* ``includes``: ``{* path ln[3:9] hl[1] *}`` (FastAPI), ``{!path!}`` / ``{!> path!}`` (markdown-include,
  mdx_include), ``--8<-- "path"`` with ``:first:last`` lines or ``[start:name]`` sections (PyMdown
  Snippets), ``<!--@include: path{3,9}-->`` / ``#region`` (VitePress), ``<!-- include: path -->``
  and ``{% include "path" %}`` / ``{% include-markdown "path" %}`` (mkdocs-include-markdown) are
  replaced by the file's text. A path resolves against the document's folder, then each folder
  above it up to the include root (MkDocs resolves from the docs folder or from where it runs),
  then the include root; the file must lie under the ingest root or the declared include root.
  Included lines remember their file and line (``line_src``): a block made of them is cited
  there. Not found: removed and counted.
* ``admonitions`` also reads mkdocstrings' ``::: package.Class`` (the object's name stays, as a line;
  its indented ``options:`` go).
* ``code_html``: HTML inside code blocks (terminal transcripts as ``<span style=...>``) is reduced
  to its text.
* ``diagrams``: mermaid blocks keep their first lines only, so they cannot crowd out prose.
* ``mdx``: MDX (Docusaurus) as its site shows it: ``import``/``export`` statements and ``{/* comments */}``
  go (a heading's ``{/* #id */}`` is its anchor), and a ```` ```mdx-code-block ```` fence is live
  MDX, not code: its fences go and its content is read as Markdown.

Every output line remembers the source line it came from (``line_map``), for citations.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path

from .includes import read_include, select, selection

RULES = ("front_matter", "anchors", "admonitions", "includes", "code_html", "diagrams", "mdx")
DIAGRAM_LINES = 8
RESERVED = {"doc_id", "filetype", "dir", "page", "index_hash",
            "access"}  # access tags are the ingest operator's to set (--meta), not a document author's

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
_ATTRS = re.compile(r"\s*\{:?\s*((?:[#.][\w:-]+|[\w-]+=\S+)(?:\s+(?:[#.][\w:-]+|[\w-]+=\S+))*)\s*\}\s*$")
_MKDOCS = re.compile(r'^(\s*)(!!!|\?\?\?\+?)\s+([\w-]+)(?:\s+[\w-]+)*(?:\s+"(.*?)")?\s*$')
_TAB = re.compile(r'^(\s*)===!?\s+"(.*?)"\s*$')  # Material content tabs: body indented below
_PYMDOWN = re.compile(r"^(/{3,})\s*([\w-]+)?(?:\s*\|\s*(.*?))?\s*$")
_DOCUSAURUS = re.compile(r"^(:{3,})\s*([\w-]+)?(?:\[(.*?)\]|\s+(.*?))?\s*$")
_AUTODOC = re.compile(r"^(\s*):::\s+([A-Za-z_]\w*(?:\.\w+)+)\s*$")  # mkdocstrings: ::: package.Class
_GITHUB = re.compile(r"^\s*>\s*\[!(\w+)\]\s*(.*?)\s*$")
_INCLUDE_CURLY = re.compile(r"^\s*\{\*\s*(\S+)((?:\s+[^*]*)?)\*\}\s*$")
_INCLUDE_BANG = re.compile(r"^(\s*)\{!(>?)\s*(\S+?)\s*!\}\s*$")  # markdown-include, mdx_include
_INCLUDE_COMMENT = re.compile(r"""^\s*<!--\s*@?include:?\s*["']?([^"'\s{}]+?)["']?\s*(?:\{(\d*),(\d*)\})?\s*-->\s*$""")
_INCLUDE_JINJA = re.compile(r"""^\s*\{%-?\s*include(?:-markdown)?\s+["']([^"']+)["'][^%]*-?%\}\s*$""")
_INCLUDE_SNIPPET = re.compile(r"""^\s*-{1,3}8<-{1,3}\s+["']([^"']+)["']\s*$""")
_SNIPPET_BLOCK = re.compile(r"^\s*-{1,3}8<-{1,3}\s*$")  # a block form: file names on the lines until the next
# Only the tags terminal transcripts are written with; never in languages where tags are code.
_TAG = re.compile(r"</?(?:span|font|div|br|b|i|u|strong|em|code|pre|a|samp|kbd)(?:\s[^<>]*)?/?>", re.IGNORECASE)
_TAG_LANGS_KEPT = {"html", "xml", "svg", "jsx", "tsx", "vue", "svelte", "markdown", "md", "htm", "xhtml", "php",
                   "erb", "jinja", "jinja2", "django", "handlebars", "astro", "mdx"}
_ESM = re.compile(r"""^(?:import\s+(?:[\w$*{}\s,]+\s+from\s+)?["'][^"']+["'];?|export\s+(?:const|let|var|function|default|\{)\b.*)\s*$""")
_JSX_COMMENT = re.compile(r"\s*\{/\*\s*(.*?)\s*\*/\}")
_PYMDOWN_OPTION = re.compile(r"^\s{4,}[\w-]+:\s*\S")
_LANG = {".py": "python", ".js": "javascript", ".ts": "typescript", ".sh": "bash", ".json": "json",
         ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".html": "html", ".css": "css", ".go": "go",
         ".rs": "rust", ".java": "java", ".md": ""}


@dataclass(frozen=True)
class MarkupRules:
    off: frozenset = frozenset()

    @classmethod
    def parse(cls, names) -> "MarkupRules":
        from ..errors import UsageError

        off = set()
        for item in names or []:
            for name in str(item).replace(",", " ").split():
                name = name.strip().replace("-", "_")
                if name == "all":
                    off.update(RULES)
                elif name not in RULES:
                    raise UsageError(f"--markup-off {name!r}: use one of {', '.join(RULES)} or all")
                else:
                    off.add(name)
        return cls(frozenset(off))

    def on(self, rule: str) -> bool:
        return rule not in self.off

    def to_dict(self) -> dict:
        return {rule: self.on(rule) for rule in RULES}


@dataclass
class Cleaned:
    text: str
    metadata: dict = field(default_factory=dict)
    title: str | None = None
    anchors: list = field(default_factory=list)  # (heading text, anchor id), in document order
    anchor_lines: dict = field(default_factory=dict)  # source line -> anchor id, of the page's own headings
    includes: dict = field(default_factory=dict)  # included file -> sha256, to notice when it changes
    line_map: list = field(default_factory=list)  # output line index -> source line number (1-based)
    stats: dict = field(default_factory=dict)
    missing_includes: list = field(default_factory=list)  # include targets not found, as written
    # output line index -> (included file, its line) for lines an include brought, else None
    line_src: list = field(default_factory=list)


def _label(kind: str | None, title: str | None) -> str:
    kind = (kind or "").replace("-", " ").replace("_", " ").strip()
    if kind.lower() in ("tab", "details", "admonition") and title:
        return title.strip()
    label = kind[:1].upper() + kind[1:] if kind else ""
    if title and title.strip():
        label = f"{label}: {title.strip()}" if label else title.strip()
    return label


class _Out:
    def __init__(self):
        self.lines: list[str] = []
        self.src: list[int] = []
        self.origin: list = []  # (included file, line) or None, per output line
        self.pending_label: str | None = None

    def add(self, line: str, src: int, origin: tuple | None = None) -> None:
        if self.pending_label is not None and line.strip():
            stripped = line.lstrip()
            indent = line[: len(line) - len(stripped)]
            m = re.match(r"^([-*+]\s+|\d+[.)]\s+|#{1,6}\s+|>\s*|\|)", stripped)
            if m or _FENCE.match(line):  # a list, heading or code first: the label stands just before it
                self.lines.append(indent + self.pending_label + ":")
                self.src.append(src)
                self.origin.append(None)
            else:
                line = f"{indent}{self.pending_label}: {stripped}"
            self.pending_label = None
        self.lines.append(line)
        self.src.append(src)
        self.origin.append(origin)

    def label(self, text: str, src: int) -> None:
        self.flush_label(src)  # an admonition with no body line yet: keep its label as text
        self.pending_label = text or None

    def flush_label(self, src: int) -> None:
        if self.pending_label:
            self.lines.extend([self.pending_label, ""])
            self.src.extend([src, src])
            self.origin.extend([None, None])
            self.pending_label = None


def _scalar(value) -> str | None:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, (str, int, float, bool, date)) for v in value):
        return ", ".join(_scalar(v) or "" for v in value)
    return None


def _front_matter(lines: list[str], cleaned: Cleaned) -> int:
    """Parse a leading YAML block into metadata; returns how many lines it took (0 if none)."""
    if not lines or lines[0].strip() != "---":
        return 0
    for end in range(1, min(len(lines), 500)):
        if lines[end].strip() in ("---", "..."):
            break
    else:
        return 0
    import yaml

    try:
        # Every value as written (1.10 stays "1.10", no stays "no"; dates as ISO strings).
        data = yaml.load("\n".join(lines[1:end]), Loader=yaml.BaseLoader)
    except yaml.YAMLError:
        cleaned.stats["front_matter_invalid"] = 1
        return 0  # not YAML: a rule around ordinary text, kept as text
    if not isinstance(data, dict):
        return 0  # "---" lines around ordinary text (a rule, a paragraph): not front matter
    for key, value in data.items():
        key = str(key).strip()
        text = _scalar(value)
        if not key or text is None:
            continue
        if key == "title":
            cleaned.title = text
        if key in RESERVED or key.startswith("chroma:"):
            cleaned.stats["front_matter_reserved"] = cleaned.stats.get("front_matter_reserved", 0) + 1
            continue
        cleaned.metadata[key] = text
    return end + 1


def plain_heading(text: str) -> str:
    """A heading as the parser renders it: links to their text, no code/emphasis marks, entities
    decoded, whitespace collapsed (anchors are matched on this)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = html.unescape(re.sub(r"[`*_~]", "", text))
    return " ".join(text.split())


class _Includer:
    """The include directives of one document: the lines to put in their place (each with the file
    and line it came from), found or missing counted in ``cleaned``."""

    def __init__(self, cleaned: Cleaned, rules: MarkupRules, doc_path: Path | None, ingest_root: Path | None,
                 include_root: Path | None, excluded, depth: int):
        self.cleaned, self.rules, self.doc_path, self.depth = cleaned, rules, doc_path, depth
        self.ingest_root, self.include_root, self.excluded = ingest_root, include_root, excluded

    def shown(self, path: Path) -> str:
        """An included file as citations name it: under the ingest root, else the include root."""
        for r in (self.ingest_root, self.include_root):
            if r is not None and path.is_relative_to(r):
                return path.relative_to(r).as_posix()
        return path.as_posix()

    def __call__(self, target: str, in_code: bool = False, form=None, options: str = "") -> list | None:
        """(line, (file, line number)) to put in place of an include directive (None: missing), counted."""
        cleaned, stats = self.cleaned, self.cleaned.stats
        target, which = selection(target, "curly" if form is _INCLUDE_CURLY else "comment" if form is _INCLUDE_COMMENT else "", options)
        missing: list[str] = []
        found = read_include(target, self.doc_path.parent if self.doc_path else None, self.include_root,
                             self.ingest_root, self.excluded, missing)
        key = "includes_resolved" if found is not None else "includes_missing"
        stats[key] = stats.get(key, 0) + 1
        if found is None:
            for path in missing:  # "" = absent: a later ingest re-parses when it appears
                cleaned.includes.setdefault(path, "")
            where = f" (in {self.doc_path.name})" if self.depth and self.doc_path is not None else ""
            cleaned.missing_includes.append(target + where)
            return None
        path, body = found
        import hashlib

        cleaned.includes[str(path)] = hashlib.sha256(body.encode("utf-8")).hexdigest()
        name = self.shown(path)
        picked = select(body.rstrip("\n").split("\n"), which)
        if not in_code and path.suffix.lower() in (".md", ".markdown") and self.depth < 3:  # a Markdown snippet: cleaned too
            inner = clean_markdown("\n".join(t for _, t in picked), self.rules, doc_path=path,
                                   ingest_root=self.ingest_root, include_root=self.include_root,
                                   excluded=self.excluded, _depth=self.depth + 1)
            cleaned.includes.update(inner.includes)
            cleaned.missing_includes.extend(inner.missing_includes)
            cleaned.anchors.extend(inner.anchors)
            for k, v in inner.stats.items():
                stats[k] = stats.get(k, 0) + v
            numbers = [n for n, _ in picked]
            return [(t, inner.line_src[k] or (name, numbers[min(inner.line_map[k], len(numbers)) - 1]))
                    for k, t in enumerate(inner.text.split("\n"))]
        return [(t, (name, n)) for n, t in picked]

    @staticmethod
    def fenced(target: str, body: list) -> list:
        """Included code outside a code block: fenced, so a "# comment" can never read as a heading."""
        if target.lower().endswith((".md", ".markdown")):
            return body
        fence = "`" * max([3] + [len(r) + 1 for t, _ in body for r in re.findall(r"`{3,}", t)])
        lang = _LANG.get(Path(target.split(":")[0].split("#")[0]).suffix.lower(), "")
        return [(fence + lang, None), *body, (fence, None)]


def clean_markdown(text: str, rules: MarkupRules = MarkupRules(), *, doc_path: Path | None = None,
                   ingest_root: Path | None = None, include_root: Path | None = None, excluded=None,
                   _depth: int = 0) -> Cleaned:
    cleaned = Cleaned(text="")
    stats = cleaned.stats
    text = text.replace("\r\n", "\n")

    lines = text.split("\n")
    start = _front_matter(lines, cleaned) if rules.on("front_matter") and _depth == 0 else 0
    if _depth and rules.on("front_matter"):
        start = _front_matter(lines, Cleaned(text=""))  # a snippet's own front matter is dropped
    out = _Out()
    ingest_root = ingest_root.resolve() if ingest_root else None
    include_root = include_root.resolve() if include_root else ingest_root
    include = _Includer(cleaned, rules, doc_path, ingest_root, include_root, excluded, _depth)
    code_fenced = _Includer.fenced

    fence: tuple[str, str] | None = None  # (marker, language) while inside a code block
    fence_lines = 0
    fence_in = (False, 0)  # (opened inside a GitHub alert, MkDocs depth) of the open fence
    blocks: list[str] = []  # open PyMdown / Docusaurus fence markers
    options_allowed = False  # just after a PyMdown opener: its indented "key: value" option lines
    mkdocs: list[int] = []  # indents of open MkDocs admonition / content tab bodies
    github = False
    snippet_block = False
    mdx_blocks: list[str] = []  # open ```mdx-code-block fences (their content is Markdown)
    autodoc: int | None = None  # after a mkdocstrings "::: package.Class": the indent of its directive

    def strip_attrs(title: str) -> str:
        a = _ATTRS.search(title)
        if not a:
            return title
        ident = next((t[1:] for t in a.group(1).split() if t.startswith("#")), None)
        title = title[: a.start()].rstrip()
        if ident:
            cleaned.anchors.append((plain_heading(title), ident))
            if not _depth:
                cleaned.anchor_lines[src] = ident
        stats["anchors"] = stats.get("anchors", 0) + 1
        return title

    i = start
    while i < len(lines):
        line, src = lines[i], i + 1
        i += 1
        # ---- GitHub alerts: "> [!NOTE]" then "> body" (code fences inside included) ---------
        if github:
            if line.lstrip().startswith(">"):
                line = re.sub(r"^\s*>\s?", "", line)
            else:
                github = False
                if fence is not None and fence_in[0]:
                    fence = None  # a fence left open inside the alert ends with it
        # ---- MkDocs admonition / tab bodies end at the first line indented less -----------
        if mkdocs and line[:1] == "\t" or (mkdocs and line.startswith(" ") and "\t" in line[: mkdocs[-1]]):
            body = line.lstrip(" \t")
            line = line[: len(line) - len(body)].expandtabs(4) + body  # Python-Markdown: a tab is 4 spaces
        if fence is None or fence_in[1]:
            while mkdocs and line.strip() and (len(line) - len(line.lstrip())) < mkdocs[-1]:
                if fence is not None and len(mkdocs) <= fence_in[1]:
                    fence = None  # a fence left open inside the admonition ends with it
                mkdocs.pop()
                out.flush_label(src)  # an admonition with a title and no body keeps its label apart
        if mkdocs:
            line = line[mkdocs[-1]:] if line[: mkdocs[-1]].strip() == "" else line.lstrip()

        # ---- inside a code block ---------------------------------------------------------
        if fence is not None:
            stripped = line.strip()
            if stripped.startswith(fence[0][0] * 3) and stripped.rstrip(fence[0][0]) == "" \
                    and len(stripped) >= len(fence[0]):
                fence = None
                out.add(line, src)
                continue
            if rules.on("includes"):
                m = _INCLUDE_SNIPPET.match(line) or _INCLUDE_BANG.match(line)
                if m:
                    bang = m.re is _INCLUDE_BANG
                    indent = m.group(1) if bang and m.group(2) else ""  # {!> !}: the directive's indent, every line
                    for inc, origin in include(m.group(3) if bang else m.group(1), in_code=True) or []:
                        out.add(indent + inc if inc else inc, src, origin)
                    continue
            fence_lines += 1
            if rules.on("diagrams") and fence[1] == "mermaid" and fence_lines > DIAGRAM_LINES:
                if fence_lines == DIAGRAM_LINES + 1:
                    out.add("…", src)
                stats["diagram_lines_dropped"] = stats.get("diagram_lines_dropped", 0) + 1
                continue
            if rules.on("code_html") and fence[1] not in _TAG_LANGS_KEPT and _TAG.search(line):
                line = html.unescape(_TAG.sub("", line))
                stats["code_html_lines"] = stats.get("code_html_lines", 0) + 1
            out.add(line, src)
            continue

        # ---- MDX: live code blocks, ESM statements, JSX comments ---------------------------
        if rules.on("mdx"):
            if mdx_blocks and line.strip() and line.strip() == mdx_blocks[-1][0] * len(line.strip()) \
                    and len(line.strip()) >= len(mdx_blocks[-1]):
                mdx_blocks.pop()
                continue
            f = _FENCE.match(line)
            if f and f.group(3).lower() == "mdx-code-block":
                mdx_blocks.append(f.group(2))
                stats["mdx_blocks"] = stats.get("mdx_blocks", 0) + 1
                continue
            if _ESM.match(line):
                stats["mdx_statements"] = stats.get("mdx_statements", 0) + 1
                continue
            if "{/*" in line:
                for c in _JSX_COMMENT.finditer(line):
                    if _HEADING.match(line) and c.group(1).startswith("#"):
                        cleaned.anchors.append((plain_heading(_JSX_COMMENT.sub("", line).lstrip("#").strip()),
                                                c.group(1)[1:].strip()))
                        if not _depth:
                            cleaned.anchor_lines[src] = c.group(1)[1:].strip()
                line = _JSX_COMMENT.sub("", line)
                if not line.strip():
                    out.add("", src)
                    continue

        # ---- includes ----------------------------------------------------------------------
        if rules.on("includes"):
            if snippet_block:
                if _SNIPPET_BLOCK.match(line):
                    snippet_block = False
                elif line.strip() and not line.strip().startswith(";"):
                    for inc, origin in include(line.strip().strip("\"'")) or []:
                        out.add(inc, src, origin)
                continue
            if _SNIPPET_BLOCK.match(line):
                snippet_block = True
                continue
            m = (_INCLUDE_CURLY.match(line) or _INCLUDE_SNIPPET.match(line) or _INCLUDE_BANG.match(line)
                 or _INCLUDE_COMMENT.match(line) or _INCLUDE_JINJA.match(line))
            if m:
                target = m.group(3) if m.re is _INCLUDE_BANG else m.group(1)
                options = m.group(2) or "" if m.re is _INCLUDE_CURLY else ""
                if m.re is _INCLUDE_COMMENT and (m.group(2) or m.group(3)):  # VitePress {first,last}
                    target += f":{m.group(2) or 1}" + (f":{m.group(3)}" if m.group(3) else "")
                body = include(target, form=m.re, options=options)
                if body is not None:
                    if m.re is not _INCLUDE_SNIPPET:  # Snippets paste as written; the others fence code
                        body = code_fenced(target, body)
                    for inc, origin in body:
                        out.add(inc, src, origin)
                continue

        if rules.on("admonitions"):
            # mkdocstrings: "::: package.Class" renders that object's documentation, titled by its
            # name (kept as a line); its indented "options:" YAML is configuration, not text.
            if autodoc is not None:
                if not line.strip() or len(line) - len(line.lstrip()) > autodoc:
                    continue
                autodoc = None
            m = _AUTODOC.match(line)
            if m:
                out.add(m.group(1) + m.group(2), src)
                out.add("", src)
                autodoc = len(m.group(1))
                stats["autodoc"] = stats.get("autodoc", 0) + 1
                continue
            # PyMdown block options ("    type: warning") right after the opening line.
            if options_allowed and _PYMDOWN_OPTION.match(line):
                continue
            options_allowed = False
            m = _GITHUB.match(line)
            if m:
                github = True
                out.label(_label(m.group(1).lower(), None), src)
                stats["admonitions"] = stats.get("admonitions", 0) + 1
                if m.group(2):
                    out.add(m.group(2), src)
                continue
            m = _MKDOCS.match(line) or _TAB.match(line)
            if m:
                if m.re is _TAB:
                    out.label(m.group(2).strip(), src)
                else:
                    out.label(_label(m.group(3), m.group(4)), src)
                    stats["admonitions"] = stats.get("admonitions", 0) + 1
                mkdocs.append((mkdocs[-1] if mkdocs else 0) + len(m.group(1)) + 4)
                continue
            m = _PYMDOWN.match(line) or _DOCUSAURUS.match(line)
            if m:
                marker = m.group(1)
                if m.group(2) is None:  # a bare fence: closes the innermost block of its kind
                    if marker in blocks:
                        while blocks and blocks.pop() != marker:
                            pass
                    out.flush_label(src)  # an empty block: its label stays, on its own line
                    stats["fences_dropped"] = stats.get("fences_dropped", 0) + 1
                    continue
                title = m.group(3) if m.re is _PYMDOWN else (m.group(3) or m.group(4))
                out.label(_label(m.group(2), title), src)
                blocks.append(marker)
                options_allowed = m.re is _PYMDOWN
                stats["admonitions"] = stats.get("admonitions", 0) + 1
                continue

        # ---- headings (ATX, and setext: a line underlined with === or ---) ---------------
        if rules.on("anchors"):
            m = _HEADING.match(line)
            if m:
                title = strip_attrs(m.group(2))
                if title != m.group(2):
                    line = f"{m.group(1)} {title}"
            elif line.strip() and i < len(lines) and re.match(r"^\s*(=+|-+)\s*$", lines[i]) and _ATTRS.search(line):
                line = strip_attrs(line)

        # ---- code fences open --------------------------------------------------------------
        f = _FENCE.match(line)
        if f and not (f.group(2)[0] == "`" and "`" in line[f.end(2):]):  # ```inline``` text is no fence
            fence = (f.group(2), f.group(3).lower())
            fence_in = (github, len(mkdocs))
            fence_lines = 0
        out.add(line, src)

    if out.pending_label:
        out.lines.append(out.pending_label)
        out.src.append(len(lines))
        out.origin.append(None)
    cleaned.text = "\n".join(out.lines)
    cleaned.line_map = out.src
    cleaned.line_src = out.origin
    return cleaned
