"""A docutils doctree (``rst.parse_rst``) → Blocks: sections nest into section paths, each block
cited at the source lines its text is on.

docutils records a line for most elements (a title at its underline, a paragraph at its first
line); a block's lines span its elements', checked against the file: the first and last words of
its text must be on its first and last lines, else the nearest lines holding them (a few lines
away at most) are taken. Lines an include brought are cited at the page's directive, with the
included file's own lines (``Block.source``). docutils itself is never imported here: the walk
gets its ``nodes`` module from the parse.
"""

from __future__ import annotations

import re

from ..document import Block
from .markup import RESERVED

_WORD = re.compile(r"[^\W_]+")  # "Fork_" (a link) holds the word "fork"
_LABELS = {"attention": "Attention", "caution": "Caution", "danger": "Danger", "error": "Error", "hint": "Hint",
           "important": "Important", "note": "Note", "tip": "Tip", "warning": "Warning"}


def _fenced(code: str, lang: str | None) -> str:
    """A code block as Markdown writes it (as Markdown's code blocks are stored): fenced, with its
    language."""
    fence = "`" * max([3] + [len(run) + 1 for run in re.findall(r"`{3,}", code)])
    return f"{fence}{lang or ''}\n{code}\n{fence}"


class Walk:
    """A docutils doctree → Blocks, with the section stack and source lines."""

    def __init__(self, nodes, ctx, document=None):
        self.nodes, self.ctx, self.document = nodes, ctx, document
        self.blocks: list[Block] = []
        self.stack: list[str] = []
        self.metadata: dict = {}

    # ---- text ------------------------------------------------------------------------------
    def inline(self, node, heading: bool = False) -> str:
        """A text element's text as a reader sees it: inline code in backticks (plain in a heading)."""
        n = self.nodes
        out: list[str] = []
        for child in node.children:
            if isinstance(child, n.Text):
                out.append(child.astext())
            elif isinstance(child, (n.image, n.system_message, n.comment, n.substitution_definition)):
                continue
            elif isinstance(child, n.literal) and not heading:
                code = child.astext()
                tick = "``" if "`" in code else "`"
                out.append(f"{tick}{code}{tick}")
            elif isinstance(child, n.footnote_reference):
                out.append(f"[{child.astext()}]")
            elif child.get("kbtool_ref") and self.document is not None:  # :ref:`label`
                target = self.document.ids.get(self.document.nameids.get(child["kbtool_ref"]) or "")
                shown = isinstance(target, n.section) and len(target) and isinstance(target[0], n.title)
                out.append(self.inline(target[0], heading=True) if shown else child.astext())
            elif isinstance(child, n.raw):
                if "html" in child.get("format", "").split():
                    from ..markdown import html_text

                    out.append(html_text(child.astext()))
            elif isinstance(child, n.Element):
                out.append(self.inline(child, heading))
        return "".join(out)

    def text_of(self, node) -> str:
        """A simple element's text (a paragraph, a line block, a term...)."""
        n = self.nodes
        if isinstance(node, n.line_block):
            return "\n".join(self.text_of(c) for c in node.children)
        if isinstance(node, n.attribution):
            return "— " + self.inline(node)
        text = self.inline(node)
        return "\n".join(line.strip() for line in text.strip().split("\n"))

    # ---- lines -----------------------------------------------------------------------------
    def span(self, *elements) -> tuple[tuple[int, int] | None, list | None]:
        """(page lines, included files' lines) of the elements: the lines docutils recorded (no
        line inside an element before the element's own; an element with none: its parent's),
        checked against the file (the first and last words of the text must be there)."""
        n = self.nodes
        found: dict[str, list[int]] = {}

        def note(source, first: int, last: int) -> None:
            span = found.setdefault(source, [first, last])
            span[0], span[1] = min(span[0], first), max(span[1], last)

        for el in elements:
            floor = el.line if el.line is not None and not isinstance(el, n.title) else 0
            for d in el.findall(include_self=True):
                if isinstance(d, (n.Text, n.system_message, n.problematic)) or d.line is None or d.source is None:
                    continue
                first = d.line - 1 if isinstance(d, n.title) else d.line
                if d.source == el.source and first < floor:
                    continue  # a csv-table's cells: lines of the table's data
                last = first if isinstance(d, n.title) or d.get("kbtool_source") else first + d.rawsource.count("\n")
                note(d.source, first, last)
                end = d.get("kbtool_end")
                if end and end[0] == d.source and end[1]:
                    note(d.source, first, max(first, end[1]))
            if not found:
                up = el.parent
                while up is not None and (up.line is None or up.source is None):
                    up = up.parent
                if up is not None:
                    note(up.source, up.line, up.line)
        if not found:
            return None, None
        text = "\n".join(el.astext() for el in elements)
        spans = {src: self.fit(src, a, b, text) for src, (a, b) in found.items()}
        page = spans.pop(self.ctx.page, None)
        source = []
        for src, (a, b) in spans.items():
            inc = self.ctx.included.get(src)
            if inc is None:
                continue  # docutils' own files (<isonum.txt>)
            source.append({"path": inc.shown, "lines": [a, b]})
            page = (min(page[0], inc.page_line), max(page[1], inc.page_line)) if page else (inc.page_line, inc.page_line)
        return page, source or None

    def fit(self, source: str, a: int, b: int, text: str) -> tuple[int, int]:
        """Lines ``a``-``b`` moved, if need be, to the nearest lines holding the text's first and
        last words (docutils records a title at its underline, some blocks a line off)."""
        lines = self.ctx.lines_of(source)
        words = _WORD.findall(text.lower())
        if not lines or not words:
            return a, max(a, b)

        def near(at: int, word: str, low: int) -> int:
            if 1 <= at <= len(lines) and word in lines[at - 1].lower():
                return at
            for dist in range(1, 6):
                for k in (at - dist, at + dist) if word is words[-1] else (at + dist, at - dist):
                    if low <= k <= len(lines) and word in _WORD.findall(lines[k - 1].lower()):
                        return k
            return at

        a = near(a, words[0], 1)
        b = near(max(a, b), words[-1], a)
        return a, max(a, b)

    # ---- blocks ----------------------------------------------------------------------------
    def add(self, kind: str, text: str, *elements, depth: int | None = None, anchor: str | None = None,
            extra_source: list | None = None) -> Block | None:
        if not text.strip():
            return None
        lines, source = self.span(*elements)
        if extra_source:
            source = (source or []) + extra_source
        block = Block(kind, text, list(self.stack), None, depth, lines, anchor, source)
        self.blocks.append(block)
        return block

    def run(self, document) -> None:
        n = self.nodes
        for child in document.children:
            if isinstance(child, n.docinfo):
                self.docinfo(child)
            else:
                self.walk(child)

    def docinfo(self, node) -> None:
        n = self.nodes
        for child in node.children:
            if isinstance(child, n.field):
                key, value = child[0].astext(), child[1].astext()
            else:
                key, value = child.tagname, child.astext()
            key = key.strip()
            if key and key not in RESERVED and not key.startswith("chroma:"):
                self.metadata[key] = " ".join(value.split())

    def walk(self, node) -> None:
        n = self.nodes
        if isinstance(node, n.section):
            self.section(node)
        elif isinstance(node, (n.system_message, n.comment, n.target, n.substitution_definition, n.pending,
                               n.transition, n.image, n.decoration, n.docinfo, n.meta)):
            return
        elif isinstance(node, n.raw):
            if "html" in node.get("format", "").split():
                from ..markdown import html_text

                self.add("text", html_text(node.astext()), node)
        elif isinstance(node, n.topic) and "contents" in node.get("classes", []):
            return  # a table of contents: the page's own headings again
        elif isinstance(node, (n.paragraph, n.line_block, n.attribution, n.rubric)):
            self.add("text", self.text_of(node), node)
        elif isinstance(node, n.literal_block):
            lang = node.get("language") or next((c for c in node.get("classes", []) if c != "code"), "")
            self.add("code", _fenced(node.astext(), lang), node, extra_source=node.get("kbtool_source"))
        elif isinstance(node, n.doctest_block):
            self.add("code", _fenced(node.astext(), "pycon"), node)
        elif isinstance(node, n.math_block):
            self.add("text", node.astext(), node)
        elif isinstance(node, n.table):
            self.table(node)
        elif isinstance(node, (n.bullet_list, n.enumerated_list)):
            for item in node.children:
                self.gather(item.children, "list")
        elif isinstance(node, n.definition_list):
            for item in node.children:
                head = [c for c in item.children if isinstance(c, (n.term, n.classifier))]
                body = [c for d in item.children if isinstance(d, n.definition) for c in d.children]
                self.gather(body, "text", " : ".join(self.text_of(c) for c in head), head, "\n")
        elif isinstance(node, n.field_list):
            for f in node.children:
                self.gather(list(f[1].children), "text", self.text_of(f[0]), [f[0]], ": ")
        elif isinstance(node, n.option_list):
            for item in node.children:
                self.gather(list(item[1].children) if len(item) > 1 else [], "text", item[0].astext(), [item[0]], "  ")
        elif isinstance(node, (n.footnote, n.citation)):
            label = [c for c in node.children if isinstance(c, n.label)]
            self.gather([c for c in node.children if not isinstance(c, n.label)], "text",
                        f"[{label[0].astext()}]" if label else "", label, " ")
        elif isinstance(node, (n.Admonition, n.topic, n.sidebar)):
            self.admonition(node)
        elif isinstance(node, n.figure):
            for child in node.children:
                if isinstance(child, n.caption):
                    self.add("text", self.text_of(child), child)
                elif isinstance(child, n.legend):
                    for c in child.children:
                        self.walk(c)
        elif isinstance(node, n.Element):
            for child in node.children:  # block quotes, containers, compound paragraphs, directives
                self.walk(child)

    def section(self, node) -> None:
        n = self.nodes
        title = node[0] if len(node) and isinstance(node[0], n.title) else None
        text = " ".join(self.inline(title, heading=True).split()) if title is not None else ""
        if text:
            self.stack.append(text)
            ids = node.get("ids") or []
            self.add("title", text, title, depth=len(self.stack) - 1, anchor=ids[0] if ids else None)
        for child in node.children[1 if title is not None else 0:]:
            self.walk(child)
        if text:
            self.stack.pop()

    def gather(self, children, kind: str, head: str = "", head_nodes=(), joiner: str = "\n") -> None:
        """One block of a compound element (a list item, a definition, a field): its head, joined
        to the text of its simple parts; a nested list, code, table or admonition is a block of its
        own (the text gathered so far first)."""
        n = self.nodes
        parts: list[str] = []
        used = list(head_nodes)

        def flush():
            text = joiner.join(p for p in [head] if p)
            if parts:
                text = (text + joiner if text else "") + "\n".join(parts)
            if text.strip():
                self.add(kind, text, *used)
            parts.clear()
            used.clear()

        for child in children:
            if isinstance(child, (n.paragraph, n.line_block, n.attribution, n.rubric)):
                parts.append(self.text_of(child))
                used.append(child)
            elif not isinstance(child, (n.system_message, n.comment, n.target, n.image)):
                flush()
                head = ""
                self.walk(child)
        flush()

    def own_line(self, node) -> tuple[tuple[int, int] | None, list | None]:
        """The line an element starts at, as docutils recorded it (a directive's line)."""
        if node.line is None or node.source is None:
            return None, None
        if node.source == self.ctx.page:
            return (node.line, node.line), None
        inc = self.ctx.included.get(node.source)
        if inc is None:
            return None, None
        return (inc.page_line, inc.page_line), [{"path": inc.shown, "lines": [node.line, node.line]}]

    def admonition(self, node) -> None:
        """An admonition's label at the start of its body's first block (a label of its own before
        code or a table, or with no body)."""
        n = self.nodes
        titles = [c for c in node.children if isinstance(c, (n.title, n.subtitle))]
        label = node.get("label") or " ".join(self.inline(t, heading=True) for t in titles).strip()
        if not label:
            label = next((v for k, v in _LABELS.items() if isinstance(node, getattr(n, k))), "")
        start = len(self.blocks)
        for child in node.children:
            if not isinstance(child, (n.title, n.subtitle)):
                self.walk(child)
        if not label:
            return
        own, source = self.span(*titles) if titles else self.own_line(node)
        first = self.blocks[start] if len(self.blocks) > start else None
        if first is not None and first.kind in ("text", "list"):
            first.text = f"{label}: {first.text}"
            if own and first.lines and (first.source is None) == (source is None):
                first.lines = (min(own[0], first.lines[0]), max(own[1], first.lines[1]))
        else:
            self.blocks.insert(start, Block("text", label, list(self.stack), None, None, own, None, source))

    def table(self, node) -> None:
        n = self.nodes
        rows = []
        titles = [c for c in node.children if isinstance(c, n.title)]
        if titles:
            rows.append(" ".join(self.inline(titles[0]).split()))
        for row in node.findall(n.row):
            cells = []
            for entry in row.children:
                parts = [self.text_of(p) if isinstance(p, (n.paragraph, n.line_block)) else p.astext()
                         for p in entry.children]
                cells.append(" ".join(" ".join(parts).split()))
            if any(cells):
                rows.append(" | ".join(cells))
        self.add("table", "\n".join(rows), node)
