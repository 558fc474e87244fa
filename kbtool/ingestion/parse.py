"""Turn one file into a list of Blocks (title, text, list, table, code) with section paths.

unstructured does the parsing. Two deliberate departures, both for offline use:
- unstructured 0.27 downloads spaCy's ``en_core_web_sm`` on first use to tell narrative text
  from titles. When that model is not installed we hand it a blank English pipeline with a
  sentencizer (``_use_blank_spacy``). Headings in Markdown, HTML and DOCX come from markup and
  are unaffected; plain-text title detection loses its verb check, so ``_demote_sentences``
  turns "titles" that read like sentences back into text.
- PDF text comes from pypdfium2, page by page, then goes through unstructured's plain-text
  partitioner. ``unstructured[pdf]`` would replace the CPU torch with a multi-GB CUDA build and
  its fast strategy gives no heading depth either.

Big files: unstructured detects each element's language when a document looks mixed (langdetect,
tens of milliseconds per element: minutes per MB). kbtool never reads ``metadata.languages``, so
every partitioner gets ``languages=[""]`` (no detection; the blocks are the same). Plain text and
Markdown over ``PIECE_CHARS`` / ``MARKDOWN_PIECE_CHARS`` are partitioned in pieces cut at paragraph
(text) or heading (Markdown) boundaries, so memory stays bounded and a caller can see progress inside the file.
"""

from __future__ import annotations

import bisect

import hashlib
import io
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..document import Block, ParsedDocument  # noqa: F401  (re-exported: parsing hands these on)
from ..errors import EmptyDocumentError, ParseError
from .limits import (MAX_FILE_SIZE, MAX_SIZE_BY_TYPE, MAX_ZIP_ENTRIES, PARSE_TIMEOUT, SUPPORTED, ZIP_TYPES,  # noqa: F401
                     Budget, check_zip, failure_reason, read_file, size_limit, size_limits_text)

_PARTITIONERS = {"html": "unstructured.partition.html", "txt": "unstructured.partition.text",
                 "csv": "unstructured.partition.csv", "docx": "unstructured.partition.docx",
                 "pdf": "unstructured.partition.text"}


def _load_partitioner(filetype: str) -> None:
    """Import what parsing this type needs before a time budget starts: an import cut short by the
    alarm would leave a half-made module behind for every later file."""
    import importlib

    if filetype == "rst":
        from .rst import _kit

        _kit()
        return
    if filetype != "md":
        _use_blank_spacy()
    if filetype in _PARTITIONERS:
        importlib.import_module(_PARTITIONERS[filetype])
    if filetype == "pdf":
        import pypdfium2  # noqa: F401


TEXT_TYPES = {"md", "rst", "txt", "html", "csv"}
# Raised when a type's parsing changes what it gives: part of each document's parse options, so an
# existing store re-parses those documents (chunks whose text stays the same keep their vectors).
# md 2: code keeps its Markdown (inline backticks, fences and language).
# md 3: markdown-it-py (markdown.py): Markdown inside HTML containers kept, headings nested by the
# levels present, lines from the source map.
PARSER_VERSIONS = {"md": 3}
NO_LANGUAGES = [""]  # unstructured: no language detection (kbtool never reads metadata.languages)
# Plain text and Markdown longer than this are partitioned in pieces of about this size (characters).
# unstructured's text partitioner is slower per MB on bigger inputs: 100k-character pieces parsed 2 MB
# of text about 25 % faster than 1M ones. Markdown is cut only when it is really big, since a cut
# could separate a reference-style link from its definition (its text is kept either way).
PIECE_CHARS = 100_000
MARKDOWN_PIECE_CHARS = 1_000_000


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@lru_cache(maxsize=1)
def _use_blank_spacy() -> str:
    """Make unstructured's text classifier work offline; returns which pipeline is used."""
    from .._env import setup_offline_env

    setup_offline_env()
    import spacy

    try:
        spacy.load("en_core_web_sm")
        return "en_core_web_sm"
    except OSError:
        pass
    import unstructured.nlp.tokenize as tok

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    tok._get_nlp = lru_cache(maxsize=1)(lambda: nlp)
    return "blank"


def decode_text(data: bytes, name: str, encoding: str | None = None) -> str:
    if encoding:
        try:
            return data.decode(encoding)
        except (UnicodeDecodeError, LookupError) as exc:
            raise ParseError(f"cannot decode as {encoding}: {exc}") from exc
    import codecs

    for bom, codec in ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
                       (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")):
        if data.startswith(bom):
            try:
                return data.decode(codec)
            except UnicodeDecodeError as exc:
                raise ParseError(f"starts with a {codec} byte-order mark but does not decode: {exc.reason}") from None
    if b"\x00" in data[:8192]:
        raise ParseError("binary content (NUL bytes) in a text file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes

    best = from_bytes(data).best()
    if best is None or best.encoding is None:
        raise ParseError("not valid UTF-8 and no encoding detected: re-save as UTF-8 or pass encoding= (CLI: --encoding)")
    return str(best)


def _table_rows(html: str | None, fallback: str) -> str:
    if not html:
        return fallback
    import lxml.html

    try:
        root = lxml.html.fromstring(html)
    except Exception:
        return fallback
    rows = []
    for tr in root.iter("tr"):
        cells = [" ".join(c.text_content().split()) for c in tr if c.tag in ("td", "th")]
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n".join(rows) or fallback


_SENTENCE_END = re.compile(r"[.!?,;:。！？，；：]$")


def _demote_sentences(text: str) -> bool:
    return bool(_SENTENCE_END.search(text)) or len(text.split()) > 12


def elements_to_blocks(elements, page: int | None = None, headings_from_markup: bool = True,
                       stack: list[str] | None = None) -> list[Block]:
    """Map unstructured elements to Blocks, tracking the heading stack for section paths (``stack``:
    the headings in force before these elements, when a document is partitioned in pieces)."""
    blocks: list[Block] = []
    stack = list(stack or [])
    for el in elements:
        text = (el.text or "").strip()
        if not text:
            continue
        cat = el.category
        md = el.metadata
        el_page = getattr(md, "page_number", None) or page
        if cat == "Title" and not (not headings_from_markup and _demote_sentences(text)):
            depth = getattr(md, "category_depth", None) or 0
            stack = stack[:depth] + [" ".join(text.split())]
            blocks.append(Block("title", text, list(stack), el_page, depth))
            continue
        if cat in ("PageBreak", "Image", "PageNumber", "Header", "Footer"):
            continue
        if cat == "Table":
            kind, text = "table", _table_rows(getattr(md, "text_as_html", None), text)
        elif cat == "CodeSnippet":
            kind = "code"
        elif cat == "ListItem":
            kind = "list"
        else:
            kind = "text"
        blocks.append(Block(kind, text, list(stack), el_page))
    return blocks


@dataclass
class MarkupContext:
    """What Markdown clean-up needs beyond the file: rules, the ingest root, the include root."""

    rules: "object" = None
    ingest_root: Path | None = None
    include_root: Path | None = None
    excluded: "object" = None  # rel path -> True when ingest excludes it (includes must not read it)
    # a MkDocs page: what its mkdocs.yml says about it (ingestion.mkdocs.Site.parse_options), else None
    mkdocs: dict | None = None


_BLANK_LINE = re.compile(r"\n[ \t\f\v\r]*\n")


def _text_cuts(text: str, size: int, per_line: bool = False) -> list[int]:
    """Offsets that cut plain text into pieces of at least ``size`` characters: inside the next
    blank line, which no paragraph spans (``per_line``: at the next line end, each line being a
    paragraph)."""
    cuts: list[int] = []
    start = 0
    while len(text) - start > size:
        if per_line:
            at = text.find("\n", start + size)
        else:
            m = _BLANK_LINE.search(text, start + size)
            at = m.start() if m else -1
        if at < 0 or at + 1 >= len(text):
            break
        start = at + 1
        cuts.append(start)
    return cuts


def _paragraph_grouper(text: str):
    """The grouper unstructured's ``auto_paragraph_grouper`` would choose for the whole text (from
    its first 2000 lines): one paragraph per line when under 10 % of them are blank."""
    from unstructured.cleaners.core import blank_line_grouper, new_line_grouper

    lines = text.split("\n", 2000)[:2000]
    empty = sum(1 for line in lines if not line.strip())
    return new_line_grouper if empty / len(lines) < 0.1 else blank_line_grouper


def _markdown_cuts(lines: list[str], size: int) -> list[int]:
    """Line numbers that cut Markdown into pieces of about ``size`` characters: at an ATX heading
    after a blank line, outside code fences (no list, table, paragraph or code block spans one)."""
    from ..markdown import HEADING_LINE, closes, fence_of

    cuts: list[int] = []
    fence: str | None = None
    since = 0
    blank = True
    for n, line in enumerate(lines):
        if fence:
            if closes(line, fence):
                fence = None
        elif fence_of(line):
            fence = fence_of(line)
        elif since >= size and blank and line.startswith("#") and HEADING_LINE.match(line):
            cuts.append(n)
            since = 0
        since += len(line) + 1
        blank = not line.strip()
    return cuts


def _partition(filetype: str, data: bytes, name: str, encoding: str | None, markup: MarkupContext | None = None,
               path: Path | None = None, extra: dict | None = None, progress=None) -> list[Block]:
    if filetype == "md":
        return _partition_markdown(data, name, encoding, markup, path, extra, progress)
    if filetype == "rst":  # docutils (rst.py): Sphinx's roles and directives kept as text
        from .rst import parse_rst

        ctx = markup or MarkupContext()
        parsed = parse_rst(decode_text(data, name, encoding), doc_path=path, ingest_root=ctx.ingest_root,
                           include_root=ctx.include_root, excluded=ctx.excluded)
        if extra is not None:
            extra["cleaned"] = parsed  # title, metadata (a leading field list), includes, as Markdown's
        return parsed.blocks
    _use_blank_spacy()
    if filetype == "html":
        from unstructured.partition.html import partition_html

        source = decode_text(data, name, encoding)
        blocks = elements_to_blocks(partition_html(text=source, languages=NO_LANGUAGES))
        locate_lines(blocks, source, None)
        return blocks
    if filetype == "txt":
        from unstructured.partition.text import partition_text

        source = decode_text(data, name, encoding)
        # Paragraphs are grouped as the whole text says (unstructured decides from its first lines).
        grouper = _paragraph_grouper(source) if len(source) > PIECE_CHARS else None
        cuts = [0] + (_text_cuts(source, PIECE_CHARS, grouper.__name__ == "new_line_grouper") if grouper else []) + [len(source)]
        grouper = {"paragraph_grouper": grouper} if len(cuts) > 2 else {}
        blocks, line = [], 0
        for a, b in zip(cuts, cuts[1:]):
            piece = source[a:b]
            piece_blocks = elements_to_blocks(partition_text(text=piece, languages=NO_LANGUAGES, **grouper),
                                              headings_from_markup=False, stack=blocks[-1].section if blocks else None)
            locate_lines(piece_blocks, piece, None, line)
            blocks.extend(piece_blocks)
            line += piece.count("\n")
            if progress and len(cuts) > 2:
                progress(b, len(source))
        return blocks
    if filetype == "csv":
        from unstructured.partition.csv import partition_csv

        text = decode_text(data, name, encoding)
        return elements_to_blocks(partition_csv(file=io.BytesIO(text.encode("utf-8")), languages=NO_LANGUAGES))
    if filetype == "docx":
        from unstructured.partition.docx import partition_docx

        return elements_to_blocks(partition_docx(file=io.BytesIO(data), languages=NO_LANGUAGES))
    if filetype == "pdf":
        return _partition_pdf(data)
    raise ParseError(f"unsupported file type {filetype!r}")


def _partition_markdown(data: bytes, name: str, encoding: str | None, markup: MarkupContext | None,
                        path: Path | None, extra: dict | None, progress=None) -> list[Block]:
    """Markdown: cleaned (markup.py), then parsed by markdown-it-py (markdown.py), in pieces cut at
    headings when it is very big (progress inside the file)."""
    from ..markdown import parse_blocks
    from .markup import MarkupRules, clean_markdown, plain_heading

    source = decode_text(data, name, encoding)
    ctx = markup or MarkupContext()
    rules, site = ctx.rules or MarkupRules(), ctx.mkdocs
    if site is not None and not site.get("attr_list"):
        rules = MarkupRules(rules.off | {"anchors"})  # MkDocs without attr_list shows "{ #id }" as text
    # MkDocs' ids for headings without an explicit one (not when anchors are switched off)
    names: list | None = [] if site and site.get("slugify") and (ctx.rules or MarkupRules()).on("anchors") else None
    cleaned = clean_markdown(source, rules, doc_path=path, ingest_root=ctx.ingest_root,
                             include_root=ctx.include_root, excluded=ctx.excluded)
    if extra is not None:
        extra["cleaned"] = cleaned
    if not cleaned.text.strip():
        # Only front matter: its title is what the document says.
        return [Block("title", cleaned.title, [cleaned.title], None, 0, (1, 1))] if cleaned.title else []
    blocks: list[Block] = []
    lines = cleaned.text.split("\n")
    cuts = [0] + _markdown_cuts(lines, MARKDOWN_PIECE_CHARS) + [len(lines)]
    done, headings, title = 0, None, None
    for a, b in zip(cuts, cuts[1:]):
        piece = "\n".join(lines[a:b])
        piece_blocks, headings, piece_title = parse_blocks(piece, cleaned.line_map, headings=headings, offset=a,
                                                            line_src=cleaned.line_src, names=names)
        title = title or piece_title
        blocks.extend(piece_blocks)
        done += len(piece) + 1
        if progress and len(cuts) > 2:
            progress(min(done, len(cleaned.text)), len(cleaned.text))
    if extra is not None:
        extra["title"] = title
    # A heading of the page takes the anchor written on its line; an included one the next anchor
    # written on a heading with its text (equal headings keep their own ids).
    own = dict(cleaned.anchor_lines)
    pending = list(cleaned.anchors)
    for ident in own.values():
        pending.pop(next(n for n, (_, a) in enumerate(pending) if a == ident))
    for b in blocks:
        if b.kind == "title" and b.lines and not b.source and b.lines[0] in own:
            b.anchor = own.pop(b.lines[0])
        elif b.kind == "title":
            key = plain_heading(b.text)
            k = next((n for n, (h, _) in enumerate(pending) if h == key), None)
            if k is not None:
                b.anchor = pending.pop(k)[1]
    if names:
        given = _mkdocs_ids(names, {a for _, a in cleaned.anchors}, site)
        if given:
            cleaned.stats["mkdocs_ids"] = given
    return blocks


def _mkdocs_ids(names: list, explicit: set[str], site: dict) -> int:
    """Give each heading without an explicit anchor the id MkDocs gives it (``ingestion.mkdocs``);
    returns how many got one."""
    from .mkdocs import SlugError, heading_ids

    try:
        ids = heading_ids([None if b is not None and b.anchor else n for b, n in names], explicit, site)
    except SlugError:  # reported when the site was read; the page keeps its explicit anchors
        return 0
    given = 0
    for (b, _), ident in zip(names, ids):
        if b is not None and ident is not None:
            b.anchor = ident
            given += 1
    return given


def _partition_pdf(data: bytes) -> list[Block]:
    import pypdfium2 as pdfium
    from unstructured.partition.text import partition_text

    try:
        pdf = pdfium.PdfDocument(data)
    except Exception as exc:
        raise ParseError(f"not a readable PDF ({exc})") from exc
    blocks: list[Block] = []
    try:
        for number in range(len(pdf)):
            page = pdf[number]
            text = page.get_textpage().get_text_range().replace("\r\n", "\n").replace("\r", "\n")
            page.close()
            # pdfium gives one line per text line; a blank line separates paragraphs.
            page_blocks = elements_to_blocks(partition_text(text=text, languages=NO_LANGUAGES), page=number + 1, headings_from_markup=False)
            if blocks and page_blocks:
                # Headings continue across pages.
                carry = blocks[-1].section
                for b in page_blocks:
                    if b.kind != "title" and not b.section:
                        b.section = list(carry)
                    elif b.kind == "title":
                        break
            blocks.extend(page_blocks)
    finally:
        pdf.close()
    return blocks


def title_from(blocks: list[Block], doc_id: str) -> str:
    for b in blocks:
        if b.kind == "title" and (b.depth or 0) == 0:
            return " ".join(b.text.split())
    stem = Path(doc_id).stem
    return re.sub(r"[-_]+", " ", stem).strip() or doc_id


_WORD = re.compile(r"\w+", re.UNICODE)
def locate_lines(blocks: list[Block], text: str, line_map: list[int] | None, line_offset: int = 0) -> None:
    """Give each block the source lines it came from, by finding its words, in order, in the text
    it was parsed from (rendering drops markup, so exact offsets are not kept). ``line_map`` maps
    lines of ``text`` to lines of the source file (None: the same, after ``line_offset`` lines)."""
    words: list[str] = []
    word_line: list[int] = []
    for n, line in enumerate(text.split("\n")):
        for w in _WORD.findall(line.lower()):
            words.append(w)
            word_line.append(n)
    index: dict[str, list[int]] = {}
    for pos, w in enumerate(words):
        index.setdefault(w, []).append(pos)

    def find(seq: list[str], start: int) -> int:
        """First position >= start where ``seq`` occurs (up to 3 words), or -1."""
        if not seq:
            return -1
        cands = index.get(seq[0], [])
        k = bisect.bisect_left(cands, start)
        for pos in cands[k:]:
            if words[pos : pos + len(seq)] == seq:
                return pos
        return -1

    def source_line(pos: int, n: int | None = None) -> int:
        """The source line of word ``pos`` (or of line ``n`` of ``text``)."""
        n = word_line[pos] if n is None else n
        return (line_map[n] if line_map and n < len(line_map) else n + 1 + line_offset)

    starts: list[tuple[Block, int, list[str]]] = []
    cursor = 0
    for b in blocks:
        bw = _WORD.findall(b.text.lower())
        if not bw:
            continue
        first = find(bw[:3], cursor)
        if first < 0:
            first = find(bw[:1], cursor)
        if first < 0:
            continue
        starts.append((b, first, bw))
        cursor = first + 1
    for n, (b, first, bw) in enumerate(starts):
        # The block ends before the next one starts, and spans about as many words as it has.
        limit = min(starts[n + 1][1] if n + 1 < len(starts) else len(words), first + 2 * len(bw) + 8)
        last = find(bw[-3:], first)
        end = (last + len(bw[-3:]) - 1) if 0 <= last < limit else min(first + len(bw), limit) - 1
        end = max(first, min(end, limit - 1, len(words) - 1))
        start_line = source_line(first)
        b.lines = (start_line, max(start_line, source_line(end)))


def parse_file(path: Path, doc_id: str, *, encoding: str | None = None, max_bytes: int | None = None,
               data: bytes | None = None, mtime: float | None = None,
               markup: MarkupContext | None = None, progress=None, timeout: float | None = None) -> ParsedDocument:
    """Parse one file (or its already-read bytes); raises ParseError with a one-line reason.
    ``progress(done, total)`` is called as the pieces of a big text or Markdown file are parsed
    (characters of the decoded text). ``timeout``: seconds the parse may take (ParseTimeoutError
    after; None or 0: no limit; see ``limits.Budget`` for where it applies)."""
    filetype = SUPPORTED.get(path.suffix.lower())
    if filetype is None:
        raise ParseError(f"unsupported file type {path.suffix!r}")
    if data is None:
        data, mtime = read_file(path, max_bytes)
    if not data.strip():
        raise EmptyDocumentError("empty file")
    if filetype in ZIP_TYPES:
        check_zip(data, filetype, size_limit(path, max_bytes))
    extra: dict = {}
    budget = Budget(timeout)
    try:
        if timeout:
            _load_partitioner(filetype)
        with budget:
            blocks = _partition(filetype, data, doc_id, encoding, markup, path, extra, progress)
        if budget.expired:  # every alarm swallowed: what came back may be cut short
            raise budget.error()
    except ParseError:
        if budget.expired:
            raise budget.error() from None
        raise
    except Exception as exc:  # unstructured and friends raise anything on corrupt input
        if budget.expired:  # the alarm's error, wrapped by a library
            raise budget.error() from None
        raise ParseError(failure_reason(filetype, exc)) from exc
    if not blocks:
        if filetype in TEXT_TYPES:  # markup, components, comments only: nothing a reader sees
            raise EmptyDocumentError("no text")
        raise ParseError("no text found")
    cleaned = extra.get("cleaned")
    doc = ParsedDocument(
        doc_id=doc_id, filetype=filetype, title=title_from(blocks, doc_id), blocks=blocks,
        sha256=sha256_bytes(data), size=len(data), mtime=mtime, path=str(path),
    )
    if cleaned is not None:
        doc.metadata = dict(cleaned.metadata)
        # Only a `#` heading (or the front matter) names a Markdown page, never its first `##`.
        doc.title = (cleaned.title or extra.get("title") or ((markup and markup.mkdocs) or {}).get("nav_title")
                     or title_from([], doc_id))
        doc.markup_stats = dict(cleaned.stats)
        doc.includes = dict(cleaned.includes)
        doc.missing_includes = list(cleaned.missing_includes)
    return doc


def beir_document(doc_id: str, title, text, line_hash: str) -> ParsedDocument:
    if not isinstance(title, str) or not isinstance(text, str):
        raise ParseError("BEIR record: title and text must be strings")
    blocks = []
    title = " ".join((title or "").split())
    if title:
        blocks.append(Block("title", title, [title], None, 0))
    if text and text.strip():
        blocks.append(Block("text", text.strip(), [title] if title else [], None))
    return ParsedDocument(
        doc_id=doc_id, filetype="beir", title=title or doc_id, blocks=blocks, sha256=line_hash,
        size=len(text or ""),
    )
