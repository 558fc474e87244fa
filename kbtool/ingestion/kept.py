"""The kept-text guard: how much of what a reader sees in a source file reaches its blocks.

``visible_words`` measures the source on its own, without the Markdown parser (``kbtool.markdown``)
or unstructured, so it catches their losses: front matter, comments, link and image URLs, HTML tag
markup, fence info strings, include directives, MDX import/export lines, admonition markers,
heading anchors and diagram sources (mermaid, PlantUML, Graphviz: drawn as pictures) are not
text; the text between tags, inline code and code blocks are. Words are
``\\w+`` of the lower-cased text (Markdown prose: without the ``_`` of ``_emphasis_``), and each
CJK character one word: Chinese runs no spaces between words, so a run's ends are wherever markup
falls (``*路径操作装饰器*支持`` is one run rendered, two in the source) and runs would not compare.
``kept_share`` is the multiset share of those words found in the kept text: words the kept side
adds (section paths, included files, admonition types) change nothing.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from dataclasses import dataclass, field

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"  # as store.analyzer.CJK
WORD = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+")
MISSING_SHOWN = 5  # missing words kept with a document's measure, most missing first

_FRONT = re.compile(r"\A\ufeff?(?:---[ \t]*\n[\s\S]*?\n(?:---|\.\.\.)|\+\+\+[ \t]*\n[\s\S]*?\n\+\+\+)[ \t]*(?:\n|\Z)")
_FENCE = re.compile(r"^[ \t]*(?:>[ \t]?)*(`{3,}|~{3,})(.*)$")
# Include directives of every common syntax (the included text counts on the kept side only).
_INCLUDE = re.compile(r"\{\*[^\n]*?\*\}|\{!>?[^\n]*?!\}|^[ \t]*;?-{2}8<-{2}[ \t]*(?:\"[^\"]*\"|'[^']*'|\S+)[ \t]*$"
                      r"|<!--\s*@include:?[^\n]*?-->|\{%-?\s*include[\w-]*\s[^\n]*?-?%\}", re.M)
_SNIPPET_BLOCK = re.compile(r"^[ \t]*-{2}8<-{2}[ \t]*$")
_ESM = re.compile(r"^(?:import|export)\b")
_ADMONITION = re.compile(r"^([ \t]*)(?:!!!|\?\?\?\+?)[ \t]*[\w-]+(?:[ \t]+inline(?:[ \t]+end)?)?[ \t]*(?:\"([^\"]*)\")?[ \t]*$")
_BLOCKS = re.compile(r"^([ \t]*)/{3,}[ \t]*[\w-]*[ \t]*(?:\|(.*))?$")  # pymdownx blocks: /// tip | Title
_CONTAINER = re.compile(r"^([ \t]*(?:>[ \t]?)*):{3,}[ \t]*[\w-]*[ \t]*(.*)$")  # :::tip Title, :::tip[Title]
_AUTODOC = re.compile(r"^[ \t]*:::[ \t]+([A-Za-z_]\w*(?:\.\w+)+)[ \t]*$")  # mkdocstrings: its options are not text
_ALERT = re.compile(r"\[![A-Za-z]+\]")  # > [!NOTE]
_ORDERED = re.compile(r"^([ \t]*(?:>[ \t]?)*)\d{1,9}[.)](?=[ \t]|$)")  # list numbers are markup
# Terminal transcripts: sites render these tags in code as colours; not in languages where tags are code.
_CODE_TAG = re.compile(r"</?(?:span|font|u|b|i|strong|em)\b[^<>]*>", re.I)
_MARKUP_LANGS = {"html", "htm", "xhtml", "xml", "svg", "jsx", "tsx", "vue", "svelte", "markdown", "md", "mdx", "php",
                 "astro", "erb", "jinja", "jinja2", "django", "handlebars", "vue-html"}
_DIAGRAM_LANGS = {"mermaid", "plantuml", "puml", "dot", "graphviz", "d2"}
_REF_DEF = re.compile(r"^[ \t]{0,3}\[(?!\^)[^\]\n]+\]:[ \t]*\S+.*$")
# Leftmost first, as a reader's renderer sees them: an HTML or JSX comment, or a code span (not
# across a blank line), whichever starts first.
_SPANS = re.compile(r"(?P<comment><!--[\s\S]*?-->)|(?P<jsx>\{/\*[\s\S]*?\*/\})"
                    r"|(?<![`\\])(?P<t>`+)(?!`)(?P<code>(?:(?!\n[ \t]*\n)[\s\S]){1,2000}?)(?<!`)(?P=t)(?!`)")
_RAW = re.compile(r"(?<!\\)<(script|style)\b[^>]*>[\s\S]*?</\1\s*>", re.I)
_DESTINATION = r"\(\s*(?:<[^>\n]*>|[^()\s]*(?:\([^()\s]*\)[^()\s]*)*)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)"
_IMAGE = re.compile(r"!\[[^\]]*\](?:" + _DESTINATION + r"|\[[^\]]*\])")
_LINK = re.compile(r"\[((?:[^\[\]]|\[[^\[\]]*\])*)\](?:" + _DESTINATION + r"|\[[^\]]*\])")
_TAG = re.compile(r"(?<!\\)</?[A-Za-z][\w.:-]*(?:\s(?:[^<>\"'{}]|\"[^\"]*\"|'[^']*'|\{(?:[^{}]|\{[^{}]*\})*\})*)?/?>")
_ATTRS = re.compile(r"\{\s*:?\s*(?:[#.][\w-]+\s*|[\w-]+=(?:\"[^\"]*\"|\S+?)\s*)+\}")  # {#id}, {: .cls }
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def counted(text: str, piece: int = 1 << 20) -> Counter:
    """``Counter(words(text))`` a megabyte at a time (cut between words): a 30 MB file's word list
    alone would take 300 MB."""
    out: Counter = Counter()
    at = 0
    while at < len(text):
        end = min(len(text), at + piece)
        while end < len(text) and (text[end].isalnum() or text[end] == "_"):
            end += 1
        out.update(words(text[at:end]))
        at = end
    return out


def visible_words(text: str, filetype: str) -> Counter | None:
    """The words a reader sees in a source file's text, or None for a type not measured (PDF,
    DOCX, CSV). ``filetype``: md, mdx (MDX's import/export lines are not text), txt, html."""
    if filetype in ("md", "mdx", "markdown"):
        return _markdown(text, mdx=filetype == "mdx")
    if filetype == "txt":
        return counted(text)
    if filetype == "html":
        return _html(text)
    return None


def _markdown(text: str, mdx: bool) -> Counter:
    text = _FRONT.sub("", text.replace("\r\n", "\n").replace("\r", "\n"), count=1)
    prose: list[str] = []
    code: list[str] = []
    fence = None  # the opening fence of the code block we are in
    tags_are_code = True
    diagram = False  # a diagram's source is drawn as a picture, not read as text (the diagrams rule)
    mdx_fence = None  # an mdx-code-block fence: its inside is read as Markdown
    esm = snippets = False
    previous_blank = True
    autodoc = None  # the indent of a mkdocstrings directive whose indented options follow
    for line in text.split("\n"):
        blank = not line.strip()
        if autodoc is not None and fence is None:
            if blank or len(line) - len(line.lstrip()) > autodoc:
                continue
            autodoc = None
        if _SNIPPET_BLOCK.match(line):  # --8<-- on its own opens and closes a list of included files
            snippets = not snippets
            continue
        if snippets:
            continue
        m = _FENCE.match(line)
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not m.group(2).strip():
                fence = None
            elif not diagram:
                code.append(_INCLUDE.sub(" ", line if tags_are_code else html.unescape(_CODE_TAG.sub("", line))))
            continue
        if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
            if mdx_fence and m.group(1)[0] == mdx_fence[0] and len(m.group(1)) >= len(mdx_fence) and not m.group(2).strip():
                mdx_fence = None
            elif m.group(2).strip().startswith("mdx-code-block"):
                mdx_fence = m.group(1)
            else:
                fence = m.group(1)
                lang = (m.group(2).strip().split() or [""])[0].strip("{}.").lower()
                tags_are_code = lang in _MARKUP_LANGS
                diagram = lang in _DIAGRAM_LANGS
            continue
        if mdx and (esm or (previous_blank and _ESM.match(line))):
            esm = not blank
            previous_blank = blank
            continue
        previous_blank = blank
        if _REF_DEF.match(line):
            continue
        a = _AUTODOC.match(line)
        if a:
            autodoc = len(line) - len(line.lstrip())
            prose.append(a.group(1))
            continue
        for pattern in (_ADMONITION, _BLOCKS, _CONTAINER):
            a = pattern.match(line)
            if a:
                line = a.group(1) + re.sub(r"[\[\]]|\{[^}]*\}", " ", a.group(2) or "")
                break
        prose.append(_ORDERED.sub(r"\1", _ALERT.sub(" ", _INCLUDE.sub(" ", line))))
    body = "\n".join(prose)

    def span(m: re.Match) -> str:
        if m.group("code") is not None:
            code.append(m.group("code"))
        return " "

    body = _SPANS.sub(span, body)
    body = _RAW.sub(" ", body)
    body = _IMAGE.sub(" ", body)
    body = _LINK.sub(lambda m: " " + m.group(1) + " ", body)
    body = _TAG.sub(" ", body)
    body = _ATTRS.sub(" ", body)
    body = html.unescape(_ESCAPE.sub(r"\1", body))
    seen = Counter(w for w in (w.strip("_") for w in words(body)) if w)
    seen.update(words("\n".join(code)))
    return seen


_INLINE_HTML = {"a", "abbr", "b", "bdi", "bdo", "cite", "code", "data", "dfn", "em", "i", "kbd", "mark", "q", "s",
                "samp", "small", "span", "strong", "sub", "sup", "time", "u", "var", "font"}
_HIDDEN_HTML = ("head", "script", "style", "noscript", "template", "nav", "svg")


def _html(text: str) -> Counter | None:
    """Visible text of an HTML page (lxml): without head, scripts, styles, navigation and
    elements marked hidden; None when lxml cannot read it."""
    try:
        import lxml.html

        root = lxml.html.document_fromstring(text)
    except Exception:
        return None
    xpath = "|".join(f"//{t}" for t in _HIDDEN_HTML) + ("|//*[@hidden]|//*[@aria-hidden='true']"
                                                          "|//*[contains(translate(@style, ' ', ''), 'display:none')]")
    for el in root.xpath(xpath):
        if el.getparent() is not None:
            el.drop_tree()
    for el in root.iter():  # a block element (a cell, a paragraph) ends a word
        if isinstance(el.tag, str) and el.tag.lower() not in _INLINE_HTML:
            el.tail = " " + (el.tail or "")
            el.text = " " + (el.text or "")
    return Counter(words(root.text_content()))


def kept_share(source_words: Counter, kept_text: str) -> float:
    """Share of the source's words (a multiset) found in ``kept_text``; 1.0 for a source without words."""
    return measure(source_words, kept_text).share


@dataclass
class Kept:
    share: float  # 0..1
    words: int  # visible words in the source
    missing: list[str] = field(default_factory=list)  # the most missing words, most first

    def to_dict(self) -> dict:
        return {"share": round(self.share, 4), "words": self.words, "missing": self.missing}


def measure(source_words: Counter, kept_text: str, shown: int = MISSING_SHOWN) -> Kept:
    total = sum(source_words.values())
    if not total:
        return Kept(1.0, 0)
    kept = counted(kept_text)
    share = sum(min(n, kept[w]) for w, n in source_words.items()) / total
    lost = source_words - kept  # words the kept text never has first, then the most missing
    missing = sorted(lost, key=lambda w: (w in kept, -lost[w]))[:shown]
    return Kept(share, total, missing)


def measure_document(doc, source_text: str, suffix: str) -> Kept | None:
    """The kept-text measure of a parsed document against the text of its blocks (what chunking
    reads: chunks repeat block text, their section-path prefix aside), or None when its type is
    not measured. ``suffix``: the file's extension (``.mdx`` drops MDX's import/export lines)."""
    kind = "mdx" if suffix.lower() == ".mdx" else doc.filetype
    seen = visible_words(source_text, kind)
    if seen is None:
        return None
    return measure(seen, doc.text)


def below(records: list[dict], threshold: float) -> list[dict]:
    """Documents whose kept share is below ``threshold``, lowest first."""
    return sorted((r for r in records if r.get("kept") is not None and r["kept"] < threshold),
                  key=lambda r: (r["kept"], r["doc_id"]))
