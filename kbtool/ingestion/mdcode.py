"""Code as the author wrote it: a Python-Markdown extension for unstructured's ``partition_md``.

unstructured renders Markdown to HTML and keeps the text of each element, so code loses what marks
it as code: ``security_scopes.scopes`` reads as prose and a code block loses its fences and
language. With this extension (in place of Python-Markdown's ``fenced_code``) the rendered text is
the Markdown again:

* inline code keeps its backticks (````x```` as written), except in headings, which become section
  paths (labels, kept plain);
* a fenced block keeps its fences and language (```` ```python ````; other fence attributes go),
  also when it is indented inside a list item or quoted;
* an indented code block is fenced (```` ``` ````), so it still reads as code once its indent is gone.

The chunk text, embedded and BM25-indexed as it is stored: the analyzer drops backticks (identifiers
in them are the same tokens), a fence line gives at most its language as a token.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as etree

from markdown import util
from markdown.extensions import Extension
from markdown.extensions.fenced_code import FencedBlockPreprocessor
from markdown.inlinepatterns import BACKTICK_RE, BacktickInlineProcessor
from markdown.treeprocessors import Treeprocessor

# FencedBlockPreprocessor's pattern, allowing an indent or quote marks (a fence inside a list item
# or a block quote), which the closing fence repeats.
_FENCED = re.compile(
    r"(?P<indent>^[ ]*(?:>[ ]?[ ]*)*)(?P<fence>`{3,}|~{3,})[ ]*"
    r"(?:\{(?P<attrs>[^\n]*)\}|\.?(?P<lang>[\w#.+-]*)(?:[ ]+[^`\n]*)?)[ ]*\n"
    r"(?P<code>.*?)(?<=\n)"
    r"(?P=indent)?[ ]{0,3}(?P=fence)[ ]*$",
    re.MULTILINE | re.DOTALL)
_LIST_ITEM = re.compile(r"^[ ]*(?:[-*+]|\d+[.)])[ ]")
_CLASS = re.compile(r"(?:^|\s)\.([\w#+-]+)")
_PLAIN = "data-kbtool-plain"  # on a <code> span: its text without the backticks (for headings)


class _Fences(FencedBlockPreprocessor):
    """Fenced blocks into the HTML stash as ``<pre><code>`` holding the fences themselves."""

    def __init__(self, md):
        super().__init__(md, {})

    def run(self, lines: list[str]) -> list[str]:
        return _FENCED.sub(self._stash, "\n".join(lines)).split("\n")

    def _stash(self, m: re.Match) -> str:
        indent = m.group("indent")
        if len(indent) >= 4 and ">" not in indent and not _in_list(m.string, m.start(), len(indent)):
            return m.group(0)  # an indented code block that shows a fence: code as it is
        lang = m.group("lang") or ""
        if m.group("attrs") is not None:
            c = _CLASS.search(m.group("attrs"))
            lang = c.group(1) if c else ""
        body = "".join(line[len(indent):] if line.startswith(indent) else line.lstrip(" >")
                       for line in m.group("code").splitlines(keepends=True))
        fence = m.group("fence")
        code = f"<pre><code>{self._escape(f'{fence}{lang}' + chr(10) + body + fence)}</code></pre>"
        return f"\n{indent}{self.md.htmlStash.store(code)}\n"


def _in_list(text: str, at: int, indent: int) -> bool:
    """Whether the line at ``at``, indented by ``indent``, continues a list item: a list item less
    indented comes before it, with only blank or indented lines between."""
    for line in reversed(text[max(0, at - 20_000):at].split("\n")[:-1]):
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip(" "))
        if depth < indent and _LIST_ITEM.match(line):
            return True
        if depth == 0:
            return False
    return False


class _Backticks(BacktickInlineProcessor):
    """Inline code as written, backticks included."""

    def handleMatch(self, m, data):
        if m.group(1):
            return super().handleMatch(m, data)
        begin = m.start(0)
        start, end = self.find_code_spans(begin, data)
        if end is None:
            return None, begin, start
        ticks = start - begin
        el = etree.Element("code")
        el.text = util.AtomicString(util.code_escape(data[begin:end + ticks]))
        el.set(_PLAIN, data[start:end].strip())
        return el, begin, end + ticks


class _Finish(Treeprocessor):
    """Indented code blocks get fences; inline code in headings loses its backticks."""

    def run(self, root):
        for pre in root.iter("pre"):
            if len(pre) and pre[0].tag == "code" and not len(pre[0]) and pre[0].text is not None:
                code = pre[0].text.rstrip("\n")
                fence = "`" * max([3] + [len(run) + 1 for run in re.findall(r"`{3,}", code)])
                pre[0].text = util.AtomicString(f"{fence}\n{code}\n{fence}\n")
        for el in root.iter():
            if el.tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
                for code in el.iter("code"):
                    if code.get(_PLAIN) is not None:
                        code.text = util.AtomicString(util.code_escape(code.get(_PLAIN)))
            if el.tag == "code" and _PLAIN in el.attrib:
                del el.attrib[_PLAIN]


class CodeAsWritten(Extension):
    def extendMarkdown(self, md):
        md.registerExtension(self)
        md.preprocessors.register(_Fences(md), "fenced_code_block", 25)
        md.inlinePatterns.register(_Backticks(BACKTICK_RE), "backtick", 190)
        md.treeprocessors.register(_Finish(md), "kbtool_code", 5)


def extensions() -> list:
    """What ``partition_md(extensions=...)`` gets: tables, and code as written."""
    return ["tables", CodeAsWritten()]
