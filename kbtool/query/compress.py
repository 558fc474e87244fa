"""postprocess.compress: extractive compression. Each hit keeps the sentences sharing the most
question-term weight (the BM25 idf times informativeness ``Candidates.term_weights`` gives the
question's analysed terms) and their neighbours, in their original order, elisions marked
" … ", so more sources fit in the context block's budget.

Units (``split``): prose splits at sentence ends (. ! ? and 。！？; not after abbreviations such as
"e.g." or initials, nor inside "v2.3" or "config.yaml"); a fenced or indented code block, a
Markdown table and a list item holding inline code are one unit each, kept whole or dropped
whole; a heading is kept above any kept unit under it, and (``lead``) the hit's first sentence. A hit shorter than ``min_tokens``, or
none of whose units holds a question term, is returned whole.

The hit keeps its span (char_start, char_end, lines) and so its citation: the span the kept
sentences come from. The decision never reads compressed text (it was taken on the hits' own
chunks before this stage)."""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass, replace

from ..markdown import HEADING_LINE as _HEADING
from ..markdown import INDENTED_LINE as _INDENTED
from ..markdown import LIST_ITEM_LINE as _LIST
from ..markdown import TABLE_LINE as _TABLE
from ..markdown import closes, fence_of

# Words whose trailing period does not end a sentence (compared lower-case, without the period).
ABBREVIATIONS = frozenset("""e.g i.e etc vs cf al approx fig figs no nos eq eqs ref refs sec mr mrs ms dr prof st
jr sr inc ltd co corp dept est min max vol vols ed eds p pp ca resp incl excl""".split())

# A sentence end: terminal punctuation, closing quotes/brackets, then space before a capital,
# digit, quote, bracket, backtick or CJK; a period set off by spaces (" . ", tokenized text such as
# Cranfield's abstracts); or a CJK full stop / exclamation / question mark.
_END = re.compile(r"[.!?][\"'”’)\]]*\s+(?=[A-Z0-9\"'“‘(\[`\u3400-\u9fff])|(?<=\s)[.!?]\s+|[。！？][」』”’）)]*\s*")


@dataclass(frozen=True)
class Unit:
    start: int
    end: int  # exclusive, trailing whitespace left out
    kind: str  # sentence | code | table | list | heading


def split(text: str) -> list[Unit]:
    """The text's units in order, by character offsets into ``text``."""
    units: list[Unit] = []
    lines, pos = [], 0
    for line in text.splitlines(keepends=True):
        lines.append((pos, line))
        pos += len(line)
    i, n = 0, len(lines)
    para: list[tuple[int, str]] = []

    def flush():
        if para:
            units.extend(_sentences(text, para[0][0], para[-1][0] + len(para[-1][1].rstrip())))
            para.clear()

    def block(a: int, b: int, kind: str):  # lines a..b-1 as one unit
        start = lines[a][0] + (0 if kind == "code" else len(lines[a][1]) - len(lines[a][1].lstrip()))
        end = lines[b - 1][0] + len(lines[b - 1][1].rstrip())
        if end > start:
            units.append(Unit(start, end, kind))

    while i < n:
        start, line = lines[i]
        if not line.strip():
            flush()
            i += 1
        elif fence_of(line.rstrip("\n")):
            flush()
            fence = fence_of(line.rstrip("\n"))
            j = i + 1  # closed by a fence of its character at least as long (```` holds ```)
            while j < n and not closes(lines[j][1].rstrip("\n"), fence):
                j += 1
            j = min(j + 1, n)  # the closing fence (an unclosed block runs to the end)
            block(i, j, "code")
            i = j
        elif _INDENTED.match(line) and not para:
            j = i
            while j < n and (_INDENTED.match(lines[j][1]) or not lines[j][1].strip()):
                j += 1
            while j > i and not lines[j - 1][1].strip():
                j -= 1
            block(i, j, "code")
            i = j
        elif _TABLE.match(line):
            flush()
            j = i
            while j < n and _TABLE.match(lines[j][1]):
                j += 1
            block(i, j, "table")
            i = j
        elif _HEADING.match(line):
            flush()
            block(i, i + 1, "heading")
            i += 1
        elif _LIST.match(line):
            flush()
            j = i + 1  # the item's continuation lines: indented, not a new item
            while j < n and lines[j][1].strip() and not _LIST.match(lines[j][1]) and lines[j][1][:1] in " \t":
                j += 1
            body = "".join(ln for _, ln in lines[i:j])
            if "`" in body:  # inline code: the item stays whole
                block(i, j, "list")
            else:
                para.extend(lines[i:j])
                flush()
            i = j
        else:
            para.append((start, line))
            i += 1
    flush()
    return units


def _sentences(text: str, start: int, end: int) -> list[Unit]:
    out, a = [], start
    for m in _END.finditer(text, start, end):
        cut = m.start() + len(m.group(0).rstrip())
        if text[m.start()] == "." and _abbreviation(text, a, m.start()):
            continue
        if cut > a:
            out.append(Unit(a, cut, "sentence"))
        a = m.end()
    if end > a:
        out.append(Unit(a, end, "sentence"))
    return out


def _abbreviation(text: str, a: int, dot: int) -> bool:
    """Whether the period at ``dot`` ends an abbreviation ("e.g.", "etc.", an initial "J.")."""
    word = re.search(r"[\w.]*$", text[a:dot]).group(0).lower().strip(".")
    return word in ABBREVIATIONS or (len(word) == 1 and word.isalpha())


def unit_scores(units: list[Unit], text: str, analyzer, weights: dict[str, float]) -> list[float]:
    """Each unit's question-term weight: the sum of the weights of the distinct terms it holds."""
    out = []
    for u in units:
        held = set(analyzer(text[u.start:u.end]))
        out.append(sum(w for t, w in weights.items() if t in held))
    return out


def question_weights(cands) -> dict[str, float]:
    """term -> weight for the question's analysed terms: BM25 idf times informativeness where the
    store has a BM25 index (``Candidates.term_weights``), else 1 each; all 0 (every term an
    everyday word): 1 each."""
    terms = list(dict.fromkeys(cands.query_terms))
    tw = cands.term_weights or {}
    weights = {t: float(tw[t][0]) if t in tw else (0.0 if tw else 1.0) for t in terms}
    if not any(weights.values()):
        weights = {t: 1.0 for t in terms}
    return weights


def compress_text(text: str, scores: list[float], units: list[Unit], cfg, cost: list[int]) -> tuple[str, list[int]]:
    """(compressed text, indexes of the units kept); the text itself when every unit is kept.
    ``cost``: each unit's model tokens."""
    seeds = sorted((i for i, s in enumerate(scores) if s > 0 and units[i].kind != "heading"),
                   key=lambda i: (-scores[i], i))[: cfg.max_sentences]
    keep: set[int] = set()
    used = 0

    def take(i: int) -> None:
        nonlocal used
        if 0 <= i < len(units) and i not in keep and units[i].kind != "heading" and (
                not keep or used + cost[i] <= cfg.max_tokens):
            keep.add(i)
            used += cost[i]

    for i in seeds:  # the best sentences first, the lead, then their neighbours nearest first
        take(i)
    if cfg.lead:
        take(next((j for j, u in enumerate(units) if u.kind != "heading"), -1))
    for d in range(1, cfg.neighbours + 1):
        for i in seeds:
            if i in keep:
                take(i - d)
                take(i + d)
    for i in sorted(keep):  # the heading above a kept unit
        h = next((j for j in range(i - 1, -1, -1) if units[j].kind == "heading"), None)
        if h is not None and h not in keep and used + cost[h] <= cfg.max_tokens:
            keep.add(h)
            used += cost[h]
    kept = sorted(keep)
    if not kept or len(kept) == len(units):  # nothing kept (a heading alone matched, no lead): whole
        return text, kept
    parts, prev = [], None
    if kept[0] > 0:
        parts.append("…\n\n" if "\n" in text[: units[kept[0]].start] else "… ")
    for i in kept:
        if prev is not None:
            gap = text[units[prev].end:units[i].start]
            parts.append(gap if i == prev + 1 else _elision(gap, text, units, prev, i))
        parts.append(text[units[i].start:units[i].end])
        prev = i
    if kept[-1] < len(units) - 1:
        parts.append("\n\n…" if "\n" in text[units[kept[-1]].end:] else " …")
    return "".join(parts), kept


def _elision(gap: str, text: str, units: list[Unit], a: int, b: int) -> str:
    """' … ' within a paragraph; on a line of its own when the dropped units span lines."""
    dropped = text[units[a].end:units[b].start]
    if "\n" not in dropped and units[a].kind == units[b].kind == "sentence":
        return " … "
    return "\n\n…\n\n"


def compress(hits: list, cands, analyzer, cfg, count_tokens, spans=None) -> tuple[list, dict]:
    """Compressed copies of ``hits`` (same order, ranks, spans). Returns (hits, trace): ``compressed``
    [[chunk id, tokens before, tokens after, units kept, units]] for every hit looked at.
    ``spans(text)``: the model's token offsets (one tokenizer call per hit prices every unit);
    None: ``count_tokens`` per unit. ``count_tokens`` None: the length of ``spans`` (the same
    tokenizer), else whitespace words."""
    if count_tokens is None:
        count_tokens = (lambda t: len(spans(t))) if spans is not None else (lambda t: len(t.split()))
    weights = question_weights(cands)
    out, record = [], []
    for hit in hits:
        starts = [a for a, _ in spans(hit.text)] if spans is not None else None
        before = len(starts) if starts is not None else count_tokens(hit.text)
        if before < cfg.min_tokens or not weights:
            out.append(hit)
            continue
        units = split(hit.text)
        scores = unit_scores(units, hit.text, analyzer, weights)
        if not units or not any(scores):  # no unit holds a question term: whole
            record.append([hit.chunk_id, before, before, len(units), len(units)])
            out.append(hit)
            continue
        if starts is not None:  # the tokens starting inside each unit
            cost = [bisect_left(starts, u.end) - bisect_left(starts, u.start) for u in units]
        else:
            cost = [count_tokens(hit.text[u.start:u.end]) for u in units]
        text, kept = compress_text(hit.text, scores, units, cfg, cost)
        after = before if text is hit.text else count_tokens(text)
        record.append([hit.chunk_id, before, after, len(kept), len(units)])
        out.append(replace(hit, text=text) if text is not hit.text else hit)
    return out, {"mode": cfg.mode, "max_sentences": cfg.max_sentences, "neighbours": cfg.neighbours,
                 "max_tokens": cfg.max_tokens, "min_tokens": cfg.min_tokens, "lead": cfg.lead, "compressed": record}
