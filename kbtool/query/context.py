"""The context block an agent puts in its prompt: most relevant first, each chunk cited, within a
token budget, built from the contract's template."""

from __future__ import annotations

from functools import lru_cache

MIN_SOURCE_TOKENS = 16  # room for at least the start of one source


def url_for(doc_id: str, anchor: str | None, base_url: str | None, site: dict | None = None) -> str:
    """BASE/doc path without its extension/ (``index`` is the folder itself) + ``#anchor``; for a
    document of a MkDocs site (``site``: what ingest read of its mkdocs.yml), the URL MkDocs gives it;
    a reStructuredText page is Sphinx's BASE/doc path.html + ``#anchor``."""
    if not base_url:
        return ""
    if site is not None:  # a MkDocs site publishes the files of its docs_dir, and only those
        page = mkdocs_url(doc_id, site)
        if page is None:
            return ""
        from urllib.parse import quote

        return base_url.rstrip("/") + "/" + page + (f"#{quote(anchor, safe='%')}" if anchor else "")
    if doc_id.lower().endswith(".rst"):
        from urllib.parse import quote

        url = base_url.rstrip("/") + "/" + quote(doc_id[: -len(".rst")].strip("/")) + ".html"
        return url + (f"#{quote(anchor)}" if anchor else "")
    page = next((doc_id[: -len(ext)] for ext in (".md", ".markdown", ".html", ".htm")
                 if doc_id.lower().endswith(ext)), None)
    from urllib.parse import quote

    if page is None:  # a PDF, DOCX, ...: published as the file itself
        return base_url.rstrip("/") + "/" + quote(doc_id)
    if page == "index" or page.endswith("/index"):
        page = page[: -len("index")]
    page = quote(page.strip("/"))
    url = base_url.rstrip("/") + "/" + (page + "/" if page else "")
    return url + (f"#{quote(anchor)}" if anchor else "")


def mkdocs_url(doc_id: str, site: dict) -> str | None:
    """The URL of a file relative to its MkDocs site (``doc_id``: relative to the ingest root), as
    MkDocs makes it (``mkdocs.structure.files.File.url``); None when the file is outside docs_dir."""
    from posixpath import join, split, splitext
    from urllib.parse import quote

    docs = site.get("docs_dir") or "."
    if docs != ".":
        if not doc_id.startswith(docs + "/"):
            return None
        doc_id = doc_id[len(docs) + 1:]
    elif site.get("root_in_docs"):
        doc_id = site["root_in_docs"] + "/" + doc_id
    hidden = _unpublished(tuple(site.get("unpublished") or ()))
    if hidden is not None and hidden.match_file(doc_id):  # exclude_docs, draft_docs: not on the built site
        return None
    parent, name = split(doc_id)
    stem, ext = splitext(name)
    if ext.lower() not in (".md", ".markdown", ".mdown", ".mkdn", ".mkd"):
        return quote(doc_id)  # copied to the site as it is
    stem = "index" if stem == "README" else stem
    directory = site.get("use_directory_urls", True)
    dest = join(parent, stem + ".html") if not directory or stem == "index" else join(parent, stem, "index.html")
    if directory and split(dest)[1] == "index.html":
        dest = split(dest)[0] + "/" if split(dest)[0] else ""
    return quote(dest)


@lru_cache(maxsize=16)
def _unpublished(lines: tuple):
    """MkDocs' matcher of the files a build leaves out (gitignore lines, as MkDocs reads them), or
    None (no lines, or pathspec not installed: ingest said so)."""
    if not lines:
        return None
    try:
        import pathspec
    except ImportError:
        return None
    return pathspec.gitignore.GitIgnoreSpec.from_lines(list(lines))


def hit_url(hit, base_url: str | None = None) -> str:
    """The hit's own URL (its source's base URL), else one under ``base_url``, else ''."""
    return getattr(hit, "url", "") or url_for(hit.doc_id, hit.anchor, base_url)


def citation(hit, base_url: str | None = None) -> str:
    """Where a person finds the hit: a URL, else ``path:line`` (or ``path:first-last``), ``path p.N``;
    then the files an include brought its text from (``; includes docs_src/app.py:1-38``)."""
    url = hit_url(hit, base_url)
    if url:
        where = url
    elif hit.line_start:
        where = hit.doc_id + _lines(hit)
    elif hit.page:
        where = f"{hit.doc_id} p.{hit.page}"
    else:
        where = hit.doc_id
    included = getattr(hit, "line_source", None)
    if included:
        where += "; includes " + ", ".join(
            f"{s['path']}:{s['lines'][0]}" + (f"-{s['lines'][1]}" if s["lines"][1] != s["lines"][0] else "")
            for s in included)
    return where


def _lines(hit) -> str:
    """``:12`` or ``:12-18`` (empty without lines)."""
    if not hit.line_start:
        return ""
    return f":{hit.line_start}" + (f"-{hit.line_end}" if hit.line_end and hit.line_end != hit.line_start else "")


def _fields(n: int, hit, base_url: str | None = None) -> dict:
    return {
        "n": n, "source": hit.doc_id, "doc_id": hit.doc_id, "title": hit.title,
        "section_path": hit.section_path or hit.title, "page": f" p.{hit.page}" if hit.page else "",
        "text": hit.text.strip(), "confidence": f"{hit.confidence:.2f}", "chunk_id": hit.chunk_id,
        "citation": citation(hit, base_url), "lines": _lines(hit), "anchor": hit.anchor or "",
        "url": hit_url(hit, base_url),
    }


def differ_lines(conflicts: list[dict], hits: list) -> str:
    """``Sources differ: [1] a.md (2024-10-02) vs [3] b.md (2023-05-10): 90 days / 30 days.`` per
    conflict (postprocess.freshness), numbered as the block numbers the hits; '' without any."""
    n = {h.chunk_id: i for i, h in enumerate(hits, start=1)}
    lines = [f"Sources differ: {conflict_text(c, n)}.\n" for c in conflicts if c["newer"] in n and c["older"] in n]
    return "".join(lines) + ("\n" if lines else "")


def conflict_text(c: dict, number: dict, mark: str = "[{}]") -> str:
    """``[1] a.md (2024-10-02) vs [3] b.md (2023-05-10): 90 days / 30 days`` for one conflict,
    ``number``: chunk id -> the number its source is shown under (``mark`` formats it)."""
    side = [mark.format(number[c[k]]) + f" {c[k + '_doc']}" + (f" ({c[k + '_date']})" if c[k + "_date"] else "")
            for k in ("newer", "older")]
    return f"{side[0]} vs {side[1]}: " + "; ".join(f"{a} / {b}" for a, b in c["differ"])


def build_context(hits: list, decision: str, cfg, count_tokens, conflicts: list | None = None) -> tuple[str, list[str]]:
    """(block, chunk ids included). Whole hits only: one that does not fit ends the block, except
    the first, which is cut to the budget so an answer never has an empty context. ``conflicts``
    (postprocess.freshness): a "Sources differ" line each after the header, only for a pair both
    of whose hits the block holds (where the budget holds them but not the line too: no line)."""
    if decision == "refuse" or not hits:
        return cfg.refusal, []
    head = cfg.header + (cfg.low_confidence_notice if decision == "low_confidence" else "")
    used = count_tokens(head)
    if cfg.max_tokens - used < MIN_SOURCE_TOKENS:
        from ..errors import ContractError

        raise ContractError(f"context.max_tokens {cfg.max_tokens} leaves {cfg.max_tokens - used} token(s) for sources after "
                            f"the header and notice: raise it to at least {used + MIN_SOURCE_TOKENS}")
    ids = {h.chunk_id for h in hits}
    conflicts = [c for c in conflicts or () if c["newer"] in ids and c["older"] in ids]
    note = differ_lines(conflicts, hits)
    if note and cfg.max_tokens - count_tokens(head + note) >= MIN_SOURCE_TOKENS:
        head += note
        used = count_tokens(head)
    else:
        conflicts = []
    parts, included = [head], []
    for n, hit in enumerate(hits, start=1):
        piece = cfg.template.format(**_fields(n, hit, cfg.base_url))
        cost = count_tokens(piece)
        if used + cost > cfg.max_tokens:
            if included:
                break
            piece = _cut(piece, cfg.max_tokens - used, count_tokens)
            cost = count_tokens(piece)
        parts.append(piece)
        included.append(hit.chunk_id)
        used += cost
    kept = [c for c in conflicts if c["newer"] in included and c["older"] in included]
    if len(kept) < len(conflicts):  # a line only for a pair both of whose sources are in (fewer: more room)
        return build_context(hits, decision, cfg, count_tokens, kept)
    return "".join(parts), included


def _cut(text: str, budget: int, count_tokens) -> str:
    lo, hi = 0, len(text)
    while lo < hi:  # longest prefix within the budget
        mid = (lo + hi + 1) // 2
        if count_tokens(text[:mid] + " …") <= budget:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo].rstrip() + " …\n\n" if lo else ""
