"""postprocess.expand: a hit on a small chunk returns its enclosing section (the contiguous chunks
of its document with the same section path) or its N neighbours on each side, grown around the
hit within a token budget; hits a result already covers merge into it (the better rank kept).

The returned text is the document's text over the span (first chunk's start to last chunk's end),
and its lines are the span's, so the citation and the context block cite what is returned."""

from __future__ import annotations

import json

from dataclasses import replace

from .context import citation


def expand(hits: list, store, cfg, *, allowed: set | None, keep: int) -> tuple[list, dict]:
    """Expanded copies of ``hits`` (rank order), at most ``keep``. ``allowed``: the chunk ids the
    caller may see (None: all): growth never crosses a chunk outside it. Tokens are the chunks'
    ``n_tokens`` (each counted with its section prefix, as embedded). Returns (hits, trace):
    ``expanded`` [[chunk id, first chunk id, last chunk id, tokens before, tokens after]],
    ``merged`` [[chunk id, the chunk id of the result covering it]]."""
    spans: dict[str, list[dict]] = {}  # doc -> its chunks in order
    taken: dict[str, dict[int, str]] = {}  # doc -> position -> chunk id of the result holding it
    texts: dict[str, str | None] = {}  # doc -> its text, read once
    out, expanded, merged = [], [], []
    for hit in hits:
        if len(out) >= keep:
            break
        doc = hit.doc_id
        if doc not in spans:
            spans[doc] = store.catalog.chunk_spans(doc)
            taken[doc] = {}
        chunks, held = spans[doc], taken[doc]
        pos = next((i for i, c in enumerate(chunks) if c["chunk_id"] == hit.chunk_id), None)
        if pos is None:  # not in the catalog any more: as it is
            out.append(replace(hit, rank=len(out) + 1))
            continue
        if pos in held:
            merged.append([hit.chunk_id, held[pos]])
            continue

        def ok(i: int) -> bool:
            if not 0 <= i < len(chunks) or i in held:
                return False
            c = chunks[i]
            if allowed is not None and c["chunk_id"] not in allowed:
                return False
            if cfg.mode == "section":
                return c["section_path"] == chunks[pos]["section_path"]
            return abs(i - pos) <= cfg.neighbours

        lo = hi = pos
        used = chunks[pos]["n_tokens"]
        grew = True
        while grew:  # one chunk each side in turn, while it fits
            grew = False
            for j in (hi + 1, lo - 1):
                if ok(j) and used + chunks[j]["n_tokens"] <= cfg.max_tokens:
                    used += chunks[j]["n_tokens"]
                    lo, hi = min(lo, j), max(hi, j)
                    grew = True
        for i in range(lo, hi + 1):
            held[i] = hit.chunk_id
        new = replace(hit, rank=len(out) + 1)
        if hi > lo and doc not in texts:
            texts[doc] = store.document_text(doc)
        text = texts.get(doc) if hi > lo else None
        if text is not None:
            first, last = chunks[lo], chunks[hi]
            lines = [c["line_start"] for c in chunks[lo:hi + 1] if c["line_start"]]
            ends = [c["line_end"] for c in chunks[lo:hi + 1] if c["line_end"]]
            from ..chunk import merged_sources

            included = merged_sources([s for c in chunks[lo:hi + 1] if c.get("line_source")
                                for s in json.loads(c["line_source"])])
            new = replace(new, text=text[first["char_start"]:last["char_end"]],
                          char_start=first["char_start"], char_end=last["char_end"],
                          line_start=min(lines) if lines else hit.line_start, line_end=max(ends) if ends else hit.line_end,
                          line_source=included)
            new.citation = citation(new)
            expanded.append([hit.chunk_id, first["chunk_id"], last["chunk_id"], chunks[pos]["n_tokens"], used])
        out.append(new)
    return out, {"mode": cfg.mode, "max_tokens": cfg.max_tokens, "expanded": expanded, "merged": merged}
