"""Structure-first chunking.

Blocks are grouped by their section path; tables and code blocks stay whole (up to
``hard_max`` tokens; a bigger one is split by rows, or lines, each piece keeping the table's header
or the code's fences); text is packed up to ``size`` tokens and a unit longer than that is split
recursively with overlap by langchain-text-splitters. Every size is counted in the embedding
model's own word pieces, *including* the title/section prefix that is embedded with the chunk,
so the default size fits the model's window and no text is silently invisible to the dense side.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, replace
from typing import Callable

from .document import Block, embed_text
from .errors import UsageError
from .markdown import split_fenced

Counter = Callable[[str], int]
SEP = " > "
# Where text is split when a unit outgrows a chunk, coarsest first (regular expressions; each cut
# keeps its separator at the end of the piece before it): paragraphs, lines, sentences, clauses,
# words. A Chinese sentence ends at 。！？ (and a clause at ；，、), with no space after it; each sits
# beside its Latin counterpart, which Latin text alone ever meets, so English splits as before.
SEPARATORS = [r"\n\n", r"\n", r"[。！？]+[”’」』）]?", r"\. ", r"；", r"; ", r"[，、]", r", ", r" ", r""]
# The splitter's version, part of the chunking key: a store chunked by an older one is re-chunked
# (2: Chinese sentence and clause ends, 2026-12-07).
SPLITTER = 2


@dataclass(frozen=True)
class ChunkParams:
    size: int = 0  # 0 = the embedding model's limit (max_seq_length minus [CLS]/[SEP])
    overlap: int | None = None  # None = min(32, size // 4)
    hard_max: int = 0  # 0 = 2 x size: tables/code up to this stay whole
    prefix: bool = True
    splitter: int = SPLITTER  # not a setting: the chunker's version (``SPLITTER``), so a new one re-chunks

    def resolved(self, model_max_tokens: int) -> "ChunkParams":
        size = self.size or (model_max_tokens - 2)
        hard_max = self.hard_max or 2 * size
        overlap = min(32, size // 4) if self.overlap is None else self.overlap
        if size < 16:
            raise UsageError(f"chunk size {size} is too small: use at least 16 tokens")
        if not 0 <= overlap < size // 2:
            raise UsageError(f"chunk overlap {overlap} must be between 0 and half of the chunk size ({size})")
        if hard_max < size:
            raise UsageError(f"chunk hard_max {hard_max} must be at least the chunk size ({size})")
        return ChunkParams(size, overlap, hard_max, self.prefix, SPLITTER)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ChunkDraft:
    ordinal: int
    text: str
    prefix: str
    section_path: str
    page: int | None
    char_start: int
    char_end: int
    n_tokens: int
    line_start: int | None = None
    line_end: int | None = None
    anchor: str | None = None
    line_source: list | None = None  # [{"path": included file, "lines": [first, last]}]

    @property
    def embed_text(self) -> str:
        return embed_text(self.prefix, self.text)

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(self.embed_text.encode("utf-8")).hexdigest()


def make_prefix(title: str, section: list[str]) -> str:
    parts = list(section)
    if title and (not parts or parts[0].casefold() != title.casefold()):
        parts.insert(0, title)
    return SEP.join(parts)


@dataclass
class _Unit:
    kind: str
    text: str
    start: int
    page: int | None
    lines: tuple[int, int] | None = None
    source: list | None = None  # included files' lines (Block.source)


def _splitter(size: int, overlap: int, count: Counter, separators: list[str] | None = None):
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    return RecursiveCharacterTextSplitter(
        chunk_size=size, chunk_overlap=overlap, length_function=count,
        separators=separators or SEPARATORS, is_separator_regex=True, keep_separator="end",
    )


def chunk_blocks(title: str, blocks: list[Block], params: ChunkParams, count: Counter) -> list[ChunkDraft]:
    """Chunk one document's blocks. ``params`` must already be resolved."""
    sections: list[tuple[list[str], list[_Unit], str | None]] = []
    # section path -> anchor of the heading in force for it: a repeated heading (two "## Options" on a
    # page) brings its own, so each of its sections is cited at its own anchor
    anchors: dict[tuple, str | None] = {}
    heading = False  # a heading came since the last section began: what follows is a section of its own
    pos = 0
    for i, block in enumerate(blocks):
        start = pos
        pos += len(block.text) + 2  # blocks are joined with "\n\n" in the document text
        if block.kind == "title":
            anchors[tuple(block.section)] = block.anchor
            heading = True
            nxt = blocks[i + 1] if i + 1 < len(blocks) else None
            has_body = nxt is not None and (nxt.kind != "title" or (nxt.depth or 0) > (block.depth or 0))
            if has_body:
                continue  # the heading lives in the section path of what follows
            # A heading with nothing under it (or a heading-only document) is content itself.
            block = Block("text", block.text, block.section, block.page, lines=block.lines, source=block.source)
        if not sections or sections[-1][0] != block.section or heading:
            sections.append((block.section, [], next((anchors[tuple(block.section[:n])] for n in
                                                      range(len(block.section), 0, -1)
                                                      if anchors.get(tuple(block.section[:n]))), None)))
            heading = False
        sections[-1][1].append(_Unit(block.kind, block.text, start, block.page, block.lines, block.source))

    drafts: list[ChunkDraft] = []
    for section, units, anchor in sections:
        prefix = make_prefix(title, section) if params.prefix else ""
        section_path = SEP.join(section)
        # count() includes [CLS] and [SEP] once per call: do not charge them twice.
        budget = params.size - (count(prefix + "\n\n") - count("") if prefix else 0)
        budget = max(budget, params.size // 2)
        pending: list[_Unit] = []

        def emit(text: str, start: int, page: int | None, end: int | None = None,
                 lines: tuple[int, int] | None = None, source: list | None = None) -> None:
            drafts.append(ChunkDraft(len(drafts), text, prefix, section_path, page, start,
                                     start + len(text) if end is None else end, count(embed_text(prefix, text)),
                                     lines[0] if lines else None, lines[1] if lines else None, anchor,
                                     source or None))

        def flush() -> None:
            if pending:
                text = "\n\n".join(u.text for u in pending)
                spans = [u.lines for u in pending if u.lines]
                emit(text, pending[0].start, pending[0].page,
                     lines=(min(s[0] for s in spans), max(s[1] for s in spans)) if spans else None,
                     source=merged_sources([s for u in pending for s in u.source or []]))
                pending.clear()

        for unit in units:
            n = count(unit.text)
            atomic = unit.kind in ("table", "code")
            if n > budget and not (atomic and n <= params.hard_max):
                flush()
                for piece, offset, length in _split(unit, budget, params, count):
                    emit(piece, unit.start + offset, unit.page, unit.start + offset + length,
                         _piece_lines(unit.lines, unit.text, offset, length), _piece_source(unit, offset, length))
                continue
            joined = "\n\n".join([u.text for u in pending] + [unit.text])
            if pending and count(joined) > budget:
                flush()
            pending.append(unit)
            if atomic and n > budget:
                flush()  # an oversized table or code block stands alone
        flush()
    # A chunk holding nothing but its own heading (already in its prefix) says nothing: dropped,
    # unless it is all the document has.
    kept = [d for d in drafts if not _prefix_only(d)]
    if kept and len(kept) < len(drafts):
        drafts = [replace(d, ordinal=i) for i, d in enumerate(kept)]
    return drafts


def _prefix_only(d: ChunkDraft) -> bool:
    words = re.findall(r"\w+", d.text.lower())
    if not words:
        return True
    last = d.section_path.split(SEP)[-1] if d.section_path else ""
    return words == re.findall(r"\w+", last.lower()) or words == re.findall(r"\w+", d.prefix.split(SEP)[-1].lower())


def _piece_lines(lines: tuple[int, int] | None, text: str, offset: int, length: int) -> tuple[int, int] | None:
    """Lines of a piece of a unit: the unit's line range, shared out by the newlines before it
    (exact for code and plain text, an estimate where rendering joined lines)."""
    if not lines:
        return None
    first, last = lines
    total = text.count("\n")
    if not total:
        return (first, last)
    span = last - first
    a = first + round(span * text.count("\n", 0, offset) / total)
    b = first + round(span * text.count("\n", 0, offset + length) / total)
    return (min(a, last), min(max(a, b), last))


def _piece_source(unit: _Unit, offset: int, length: int) -> list | None:
    """An included file's lines under a piece of a unit: one file's shared out as the unit's own
    lines are (a fenced block's fence lines aside); several files: all of them."""
    if not unit.source or len(unit.source) > 1:
        return unit.source
    src = unit.source[0]
    fenced = split_fenced(unit.text) if unit.kind == "code" else None
    head = len(fenced[0]) + 1 if fenced else 0
    body = fenced[1] if fenced else unit.text
    a = max(0, offset - head)
    b = max(a, min(len(body), offset + length - head))
    lines = _piece_lines(tuple(src["lines"]), body, a, b - a)
    return [{"path": src["path"], "lines": list(lines)}]


def merged_sources(sources: list) -> list | None:
    """Included files' line spans, one per file (first to last line)."""
    out: dict[str, list[int]] = {}
    for s in sources:
        span = out.setdefault(s["path"], list(s["lines"]))
        span[0], span[1] = min(span[0], s["lines"][0]), max(span[1], s["lines"][1])
    return [{"path": p, "lines": span} for p, span in out.items()] or None


def _split(unit: _Unit, budget: int, params: ChunkParams, count: Counter) -> list[tuple[str, int, int]]:
    """Pieces of one unit as (text, offset in the unit, length of the unit text it covers)."""
    if unit.kind == "table":
        # Split a large table by rows, repeating the header row in every piece.
        lines = unit.text.split("\n")
        header, rows = lines[0], lines[1:]
        room = max(budget - count(header), budget // 2)
        pieces = _splitter(room, 0, count, ["\n"]).split_text("\n".join(rows)) if rows else [header]
        out, cursor = [], 0
        for piece in pieces:
            off = unit.text.find(piece, cursor)
            off = cursor if off < 0 else off
            cursor = off + len(piece)
            out.append((header + "\n" + piece if rows else piece, off, len(piece)))
        return out
    fenced = split_fenced(unit.text) if unit.kind == "code" else None
    if fenced:
        # A fenced block too big for one chunk: split by lines, each piece in the block's fences.
        opening, body, closing = fenced
        room = max(budget - (count(opening + "\n" + closing) - count("")), budget // 2)
        out, cursor = [], len(opening) + 1
        for piece in _splitter(room, params.overlap, count, ["\n"]).split_text(body):
            off = unit.text.find(piece, cursor)
            off = cursor if off < 0 else off
            out.append((f"{opening}\n{piece.strip(chr(10))}\n{closing}", off, len(piece)))
            cursor = off + 1
        if out:  # the first piece starts at the opening fence, the last ends at the closing one
            out[0] = (out[0][0], 0, out[0][1] + out[0][2])
            out[-1] = (out[-1][0], out[-1][1], len(unit.text) - out[-1][1])
        return out
    seps = ["\n"] if unit.kind == "code" else None
    pieces = _splitter(budget, params.overlap, count, seps).split_text(unit.text)
    out, cursor = [], 0
    for piece in pieces:
        off = unit.text.find(piece, cursor)
        if off < 0:
            off = cursor
        out.append((piece, off, len(piece)))
        cursor = off + 1
    return out


# ---- chunking what the store holds ----------------------------------------------------------
Progress = Callable[[str, int, int], None]  # progress(stage, advance, total)


def chunk_documents(store, doc_ids: list[str], params: ChunkParams, count: Counter,
                    progress: Callable[[int], None] | None = None) -> int:
    """(Re)chunk documents from their stored blocks (no file is parsed again); the store writes the
    chunks. The parameters are recorded first, so an interrupted run is completed by the next
    ``index`` with the same ones. Returns the number of chunks written."""
    store.record_chunking(params.to_dict())
    total = 0
    for doc_id in doc_ids:
        doc = store.document_for_chunking(doc_id)
        if doc is None:
            continue
        drafts = chunk_blocks(doc["title"], [Block.from_dict(b) for b in doc["blocks"]], params, count)
        base = {"doc_id": doc_id, "filetype": doc["filetype"], "dir": os.path.dirname(doc_id)}
        user = {k: str(v) for k, v in doc["metadata"].items()}
        store.replace_chunks(doc_id, [
            (f"{doc_id}#{d.ordinal}", doc_id, d.ordinal, d.text, d.prefix, d.section_path, d.page, d.char_start,
             d.char_end, d.n_tokens, d.content_hash, d.line_start, d.line_end, d.anchor,
             json.dumps(d.line_source) if d.line_source else None,
             json.dumps({**user, **base, **({"page": str(d.page)} if d.page else {})}, sort_keys=True))
            for d in drafts], params)
        total += len(drafts)
        if progress:
            progress(1)
    return total


def store_params(store) -> ChunkParams | None:
    """The chunking parameters a store was last chunked with (None before any chunking)."""
    return ChunkParams(**store.manifest["chunking"]) if store.manifest.get("chunking") else None


def chunk(store, params: ChunkParams | None = None, *, embedder=None, all_documents: bool = False,
          progress: Progress | None = None) -> int:
    """Chunk every document not yet chunked with these parameters (all of them with all_documents),
    under the store's writer lock. Without ``params`` the store's own parameters are used (the
    defaults for a new store); sizes are resolved against the embedding model's token limit."""
    from .embed import load_embedder

    with store.writing():
        embedder = embedder or load_embedder(store.embedding_spec())
        params = (params or store_params(store) or ChunkParams()).resolved(embedder.max_tokens)
        todo = store.document_ids() if all_documents else store.documents_to_chunk(params)
        cb = (lambda n: progress("chunking", n, len(todo))) if progress else None
        return chunk_documents(store, todo, params, embedder.count_tokens, progress=cb)
