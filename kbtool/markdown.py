"""Markdown through one CommonMark parser: markdown-it-py's tokens become Blocks with exact lines.

The one place kbtool reads Markdown's grammar. ``markup.clean_markdown`` first rewrites what
CommonMark does not know (front matter, admonitions, tabs, includes; every output line keeps its
source line); this module parses the result with markdown-it-py (CommonMark, plus GFM tables and
strikethrough, definition lists and footnotes from mdit-py-plugins) and walks the tokens:

* headings → ``title`` blocks and section paths, nested by the levels present: a page without a
  ``#`` title has its ``##`` sections as siblings, and only a ``#`` heading names the document;
* paragraphs, block quotes, definitions, footnotes → ``text``; each list item → ``list``;
* code as written: inline code keeps its backticks (plain in headings, which become labels), a
  fenced block keeps its fences and language, an indented block is fenced;
* tables → one row per line, cells joined with `` | ``;
* raw HTML as the spec says: an HTML block is its text without the tags (``<script>``, ``<style>``
  and comments are not text; an HTML ``<table>`` is a table), and the Markdown between HTML blocks
  is Markdown — a ``<div>`` container never hides the prose inside it; inline HTML tags go, their
  text stays;
* every block's ``lines`` come from the token's source map (no guessing by words).

The line-level rules the rest of kbtool uses on Markdown-shaped text are here too (``fence_of``,
``closes``, ``split_fenced``, the ``*_LINE`` patterns): markup clean-up, cutting a big page into
pieces, chunking (a fenced block split keeps its fences) and compression (a fenced block is one
unit, closed only by a fence at least as long as its opening).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from functools import lru_cache

from .document import Block

# An opening code fence (CommonMark: up to 3 spaces, 3+ backticks or tildes; a backtick fence's
# info string holds no backtick).
_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")


HEADING_LINE = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)")  # an ATX heading
LIST_ITEM_LINE = re.compile(r"^ {0,3}(?:[-*+]|\d{1,9}[.)])[ \t]+")
TABLE_LINE = re.compile(r"^\s*\|")  # a pipe-table row (a leading pipe)
INDENTED_LINE = re.compile(r"^(?: {4}|\t)")  # an indented code block's line
_FENCED = re.compile(r"((?:`{3,}|~{3,})[^\n]*)\n(.*)\n([`~]{3,})[ \t]*", re.DOTALL)


def split_fenced(text: str) -> tuple[str, str, str] | None:
    """(opening fence line, body, closing fence line) when ``text`` is one fenced code block."""
    m = _FENCED.fullmatch(text)
    if not m or fence_of(m.group(1)) is None or not closes(m.group(3), fence_of(m.group(1))):
        return None
    return m.group(1), m.group(2), m.group(3)


def fence_of(line: str) -> str | None:
    """The fence (```` ``` ````, ``~~~~``...) a line opens a code block with, or None."""
    m = _FENCE.match(line)
    if not m or (m.group(2)[0] == "`" and "`" in m.group(3)):
        return None
    return m.group(2)


def closes(line: str, fence: str) -> bool:
    """Whether ``line`` closes a code block opened with ``fence``: the same character, at least as
    many, nothing else on the line (up to 3 spaces of indent)."""
    s = line.strip()
    return (len(line) - len(line.lstrip(" ")) <= 3 and len(s) >= len(fence)
            and s == fence[0] * len(s))


@lru_cache(maxsize=1)
def parser():
    from markdown_it import MarkdownIt
    from mdit_py_plugins.deflist import deflist_plugin
    from mdit_py_plugins.footnote import footnote_plugin

    md = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    return md.use(deflist_plugin).use(footnote_plugin)


_DROP_ELEMENT = re.compile(r"<(script|style|template)\b[^>]*>.*?(?:</\1\s*>|\Z)", re.IGNORECASE | re.DOTALL)
_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)|<!\[CDATA\[.*?(?:\]\]>|\Z)|<![A-Za-z][^>]*>|<\?.*?(?:\?>|\Z)", re.DOTALL)
_TAG = re.compile(r"</?[A-Za-z][\w:.-]*(?:\s+(?:[^>\"'{]|\"[^\"]*\"|'[^']*'|\{[^}]*\})*)?/?>")
_BREAK_TAG = re.compile(r"<(?:br|p|div|li|tr|h[1-6]|summary|details|dt|dd|blockquote|section|article|figure|figcaption)\b"
                        r"[^>]*>|</(?:p|div|li|tr|h[1-6]|summary|details|dt|dd|blockquote|section|article|figure|figcaption)\s*>",
                        re.IGNORECASE)


def html_text(fragment: str) -> str:
    """The text a reader sees of an HTML fragment: no tags, no script/style/template bodies, no
    comments; block tags break lines; entities decoded."""
    text = _COMMENT.sub("", _DROP_ELEMENT.sub("", fragment))
    text = _BREAK_TAG.sub("\n", text)
    text = html.unescape(_TAG.sub("", text))
    lines = (" ".join(line.split()) for line in text.split("\n"))
    return "\n".join(line for line in lines if line)


_PHRASE_TAG = re.compile(r"</?(?:a|b|i|em|strong|code|kbd|sub|sup|mark|abbr|u|s|del|ins|small|var|samp|q|cite|dfn|time)\b",
                         re.IGNORECASE)


def _table_html(fragment: str) -> str | None:
    """An HTML table's rows, cells joined with " | " (None when the fragment holds no table); a
    cell's text as ``html_text`` reads it (a table nested in a cell: its words, spaced)."""
    if "<table" not in fragment.lower():
        return None
    import lxml.html

    try:
        root = lxml.html.fragment_fromstring(fragment, create_parent="div")
    except Exception:
        return None
    rows = []
    for table in root.iter("table"):
        if any(a.tag == "table" for a in table.iterancestors()):
            continue  # nested: read as its cell's text
        for tr in table.iter("tr"):
            if next((a for a in tr.iterancestors() if a.tag == "table"), None) is not table:
                continue
            cells = [" ".join(html_text(lxml.html.tostring(c, encoding="unicode")).split())
                     for c in tr if c.tag in ("td", "th")]
            if any(cells):
                rows.append(" | ".join(cells))
    return "\n".join(rows) or None


def inline_text(token, *, heading: bool = False) -> str:
    """An inline token's text as written minus the markup a reader does not see: code keeps its
    backticks (not in a heading), links and emphasis keep their text, inline HTML tags and
    images go."""
    out: list[str] = []
    for child in token.children or []:
        t = child.type
        if t == "text":
            out.append(child.content)
        elif t == "code_inline":
            out.append(child.content if heading else f"{child.markup}{child.content}{child.markup}")
        elif t == "softbreak":
            out.append("\n")
        elif t == "hardbreak":
            out.append("\n")
        elif t == "html_inline":
            if re.match(r"<br\b", child.content, re.IGNORECASE):
                out.append("\n")
            elif not _PHRASE_TAG.match(child.content):
                out.append(" ")  # <span>a</span><span>b</span>: two words, not "ab"
        elif t == "image":
            pass  # a reader sees the image, not its alt text (badges, screenshots)
        elif t == "footnote_ref":
            out.append(f"[^{child.meta.get('label', '')}]" if child.meta else "")
    text = "".join(out)
    if any(c.type == "html_inline" for c in token.children or []):
        text = re.sub(r"[ \t]{2,}", " ", text)
    return "\n".join(line.strip() for line in text.strip().split("\n"))


def heading_name(token) -> str:
    """A heading's text as Python-Markdown's ``toc`` reads it to make its id (MkDocs): text, code
    and link text; tags, images and footnote references gone; whitespace collapsed."""
    parts = [c.content if c.type in ("text", "code_inline") else " " if c.type in ("softbreak", "hardbreak") else ""
             for c in token.children or []]
    return " ".join("".join(parts).split())


def _fenced(token) -> str:
    """A code block as written: its fences and language (other info-string words go); an indented
    block gets a fence longer than any backtick run in it."""
    code = token.content.rstrip("\n")
    if token.type == "fence":
        lang = token.info.strip().split()[0] if token.info.strip() else ""
        if lang.startswith("{"):  # {.python .numberLines}: the first class
            m = re.search(r"\.([\w#+-]+)", token.info)
            lang = m.group(1) if m else ""
        return f"{token.markup}{lang}\n{code}\n{token.markup}" if code else f"{token.markup}{lang}\n{token.markup}"
    fence = "`" * max([3] + [len(run) + 1 for run in re.findall(r"`{3,}", code)])
    return f"{fence}\n{code}\n{fence}"


@dataclass
class _Heading:
    level: int
    text: str


class _Walk:
    """Tokens → Blocks, carrying the heading stack across pieces of one document."""

    def __init__(self, line_map: list[int] | None, headings: list[_Heading] | None = None,
                 line_src: list | None = None, names: list | None = None):
        self.line_map = line_map
        self.names = names  # (title block or None, heading_name) per heading, when asked for
        self.line_src = line_src if line_src and any(line_src) else None
        self.headings: list[_Heading] = list(headings or [])
        self.blocks: list[Block] = []
        self.title: str | None = None  # the first `#` heading: what names the document

    def section(self) -> list[str]:
        return [h.text for h in self.headings]

    def lines(self, mapped, offset: int) -> tuple[int, int] | None:
        if not mapped:
            return None
        a, b = mapped[0] + offset, max(mapped[0], mapped[1] - 1) + offset
        if self.line_map:
            a = self.line_map[min(a, len(self.line_map) - 1)]
            b = self.line_map[min(b, len(self.line_map) - 1)]
            return (min(a, b), max(a, b))
        return (a + 1, b + 1)

    def source(self, mapped, offset: int) -> list | None:
        """The included files a block's lines came from, with their lines (None: the page's own)."""
        if not mapped or self.line_src is None:
            return None
        spans: dict[str, list[int]] = {}
        for origin in self.line_src[mapped[0] + offset:mapped[1] + offset]:
            if origin is not None:
                span = spans.setdefault(origin[0], [origin[1], origin[1]])
                span[0], span[1] = min(span[0], origin[1]), max(span[1], origin[1])
        return [{"path": p, "lines": s} for p, s in spans.items()] or None

    def add(self, kind: str, text: str, mapped, offset: int, depth: int | None = None) -> None:
        if text.strip():
            self.blocks.append(Block(kind, text, self.section(), None, depth, self.lines(mapped, offset),
                                     source=self.source(mapped, offset)))

    def flush(self, item: list, offset: int) -> None:
        """A list item's text gathered so far, as a ``list`` block."""
        self.add("list", "\n".join(item[0]), item[1], offset)

    def run(self, tokens, offset: int = 0) -> None:
        i = 0
        item: list[list] = []  # open list items, innermost last
        while i < len(tokens):
            tok = tokens[i]
            t = tok.type
            if t == "heading_open":
                inline = tokens[i + 1]
                text = " ".join(inline_text(inline, heading=True).split())
                if text:
                    level = int(tok.tag[1])
                    while self.headings and self.headings[-1].level >= level:
                        self.headings.pop()
                    self.headings.append(_Heading(level, text))
                    self.blocks.append(Block("title", text, self.section(), None, len(self.headings) - 1,
                                             self.lines(tok.map, offset), source=self.source(tok.map, offset)))
                    if level == 1 and self.title is None:
                        self.title = text
                if self.names is not None:
                    self.names.append((self.blocks[-1] if text else None, heading_name(inline)))
                i += 3
                continue
            if t == "list_item_open":
                item.append([[], None])  # texts, [first line, end line) of the texts
            elif t == "list_item_close":
                self.flush(item.pop(), offset)
            elif item and (t in ("bullet_list_open", "ordered_list_open", "fence", "code_block", "table_open")
                           or (t == "html_block" and _table_html(tok.content))):
                # A nested list, code or table inside an item: the item's text so far comes first.
                self.flush(item[-1], offset)
                item[-1] = [[], None]
            if t == "inline" and not item:
                self.add("text", inline_text(tok), tok.map, offset)
            elif t == "inline" or (t == "html_block" and item and not _table_html(tok.content)):
                text = inline_text(tok) if t == "inline" else html_text(tok.content)
                if text:
                    item[-1][0].append(text)
                    span = item[-1][1]
                    item[-1][1] = [span[0] if span else tok.map[0], tok.map[1]] if tok.map else span
            elif t in ("fence", "code_block"):
                self.add("code", _fenced(tok), tok.map, offset)
            elif t == "html_block":
                table = _table_html(tok.content)
                if table:
                    self.add("table", table, tok.map, offset)
                else:
                    self.add("text", html_text(tok.content), tok.map, offset)
            elif t == "table_open":
                j, rows, cells = i + 1, [], []
                while j < len(tokens) and tokens[j].type != "table_close":
                    if tokens[j].type == "tr_close":
                        if any(cells):
                            rows.append(" | ".join(cells))
                        cells = []
                    elif tokens[j].type == "inline":
                        cells.append(" ".join(inline_text(tokens[j]).split()))
                    j += 1
                self.add("table", "\n".join(rows), tok.map, offset)
                i = j + 1
                continue
            i += 1


def parse_blocks(text: str, line_map: list[int] | None = None, *, headings: list | None = None,
                 offset: int = 0, line_src: list | None = None,
                 names: list | None = None) -> tuple[list[Block], list, str | None]:
    """Blocks of Markdown ``text`` (already cleaned). ``line_map`` maps lines of the whole cleaned
    text to source lines (``line_src``: to an included file's lines, where an include brought
    them); ``offset``: where ``text`` starts in it (a piece of a big document); ``headings``: the
    heading stack in force before it. Returns (blocks, heading stack after, the first ``#``
    heading's text or None). ``names``: a list to append (title block or None, ``heading_name``)
    to for every heading, in order."""
    walk = _Walk(line_map, headings, line_src, names)
    walk.run(parser().parse(text), offset)
    return walk.blocks, walk.headings, walk.title
