"""Which chunks a run may see: the contract's and the caller's filters, and access (``Scope``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Sequence

from ..access import access_tags, known_filter_keys, visibility
from ..errors import ContractError, InputError, UsageError, did_you_mean
from ..filters import parse_filter


@dataclass
class Scope:
    """Which chunks a run may see: the contract's and the caller's filters, and access tags."""

    filters: list[str]
    allowed: set[str] | None  # chunk ids, None = every chunk
    allowed_docs: list[str] | None
    extra_dense: int = 0  # chunks of allowed documents the filters exclude
    warnings: list[str] = field(default_factory=list)  # a filter that matches no document, and why
    visible: set[str] | None = None  # chunk ids access permits (None: every chunk): BM25 statistics count these only
    _by_language: dict = field(default_factory=dict, repr=False, compare=False)  # class -> narrowed Scope


def scope(store, contract, filters: Sequence[str] = (), principal: str | None = None,
          allow: Sequence[str] | None = None) -> Scope:
    specs = list(contract.retrieve.filters) + list(filters or [])
    try:
        parsed = [parse_filter(s) for s in specs]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    fields = contract.data.metadata
    tags = access_tags(contract, principal, allow)
    visible = visibility(contract, tags)
    known = known_filter_keys(store, contract, tags) if parsed else set()
    for f in parsed:
        if f.key not in known:
            raise InputError(f"unknown filter key {f.key!r}{did_you_mean(f.key, sorted(known))}: known keys are "
                             f"{', '.join(sorted(known))}")
        if f.key in fields and not fields[f.key].filterable:
            raise ContractError(f"filter on {f.key!r}: data.metadata.{f.key}.filterable is false in the contract")
    if not parsed and tags is None:
        return Scope(specs, None, None)
    # Once per catalog generation and (filters, caller, access settings, field types): a server's
    # callers and an eval's questions share it, and the filtered dense search holds vectors by it.
    key = ("scope", tuple(specs), None if tags is None else frozenset(tags), contract.access.key,
           contract.access.untagged, json.dumps({k: v.model_dump(mode="json") for k, v in fields.items()}, sort_keys=True))
    return store.memo(key, lambda: _scope(store, specs, parsed, fields, visible, tags))


def _scope(store, specs, parsed, fields, visible, tags) -> Scope:
    allowed, docs, seen_chunks = set(), set(), set()
    doc_chunks: dict[str, int] = {}
    hit_by = [0] * len(parsed)  # visible chunks each filter matches on its own
    for doc_id, meta, ids in store.metadata_groups():  # chunks of one document with one metadata
        doc_chunks[doc_id] = doc_chunks.get(doc_id, 0) + len(ids)
        if not visible(meta):
            continue
        seen_chunks.update(ids)
        ok = [f.matches(meta, fields[f.key].type if f.key in fields else "str") for f in parsed]
        for i, matched in enumerate(ok):
            hit_by[i] += matched * len(ids)
        if all(ok):
            allowed.update(ids)
            docs.add(doc_id)
    warnings = []
    for f, n in zip(parsed, hit_by):
        if n == 0:  # rare: the values the key has, among the chunks this caller may see
            seen: dict[str, int] = {}
            for _, meta, ids in store.metadata_groups():
                if visible(meta) and f.key in meta:
                    seen[str(meta[f.key])] = seen.get(str(meta[f.key]), 0) + len(ids)
            warnings.append(_no_match(f, seen))
    # Chroma filters by document; chunks of those documents the filter leaves out (a page filter)
    # are dropped after the search, so the dense search must look that much deeper.
    extra = sum(doc_chunks[d] for d in docs) - len(allowed)
    return Scope(specs, allowed, sorted(docs), extra, warnings, None if tags is None else seen_chunks)


def _no_match(f, seen: dict[str, int]) -> str:
    """'filter lang=fr matches no document; lang has: 'en', 'zh'' (closest values first)."""
    import difflib

    wanted = f.values[0] if f.values else ""
    close = difflib.get_close_matches(wanted, list(seen), n=5, cutoff=0.0) if wanted else []
    close += [v for v, _ in sorted(seen.items(), key=lambda kv: -kv[1]) if v not in close]
    shown = ", ".join(repr(v) for v in close[:5])
    return (f"filter {f} matches no document; {f.key} has: {shown}" if shown
            else f"filter {f} matches no document; no document has a {f.key!r} value")


# A document language (its metadata value) of CJK script: the question of CJK script goes to these.
CJK_LANGUAGES = ("zh", "cn", "ja", "ko", "chinese", "japanese", "korean")


def language_class(value) -> str:
    """'cjk' for a CJK language code or name (zh, zh-hant, zh_CN, ja, ko, ...), else 'other'."""
    return "cjk" if str(value).strip().lower().startswith(CJK_LANGUAGES) else "other"


def for_language(store, contract, sc: Scope, types) -> Scope:
    """``sc`` narrowed to the documents in the question's language (contract ``retrieve.language``):
    a question of CJK script (``types`` holds cjk) to the documents whose language (metadata
    ``key``) is Chinese, Japanese or Korean, any other question to the rest; documents without the
    key stay in both. ``prefer`` keeps ``sc`` when it holds no document of the question's language
    (a store without the key: always), ``only`` then allows none; ``off`` is ``sc``."""
    cfg = contract.retrieve.language
    if cfg.route == "off":
        return sc
    cls = "cjk" if "cjk" in types else "other"
    key = (cfg.route, cfg.key, cls)
    got = sc._by_language.get(key)
    if got is not None:
        return got
    if sc.allowed is None and sc.visible is None:  # the whole store (no filter, no access): one per generation,
        # the same object for every query — the filtered dense search holds its vectors by it
        narrowed = store.memo(("language-scope", *key, tuple(sc.filters)), lambda: _narrowed(store, cfg, cls, sc))
    else:  # a filtered scope is itself held per generation (``scope``): held on it
        narrowed = _narrowed(store, cfg, cls, sc)
    sc._by_language[key] = narrowed
    return narrowed


def _narrowed(store, cfg, cls: str, sc: Scope) -> Scope:
    docs, chunks, keyless = store.memo(("languages", cfg.key), lambda: _languages(store, cfg.key))
    mine, mine_chunks = docs.get(cls, set()), chunks.get(cls, set())
    allowed = mine_chunks if sc.allowed is None else sc.allowed & mine_chunks
    if not allowed and cfg.route == "prefer":
        narrowed = sc
    else:
        free_docs, free_chunks = keyless
        allowed = allowed | (free_chunks if sc.allowed is None else sc.allowed & free_chunks)
        in_docs = mine | free_docs
        allowed_docs = sorted(in_docs) if sc.allowed_docs is None else [d for d in sc.allowed_docs if d in in_docs]
        narrowed = Scope(sc.filters, allowed, allowed_docs, sc.extra_dense, sc.warnings, sc.visible)
    return narrowed


def _languages(store, key: str):
    """({class: doc ids}, {class: chunk ids}, (doc ids, chunk ids) without the key), once per generation."""
    docs: dict[str, set] = {}
    chunks: dict[str, set] = {}
    free_docs, free_chunks = set(), set()
    for doc_id, meta, ids in store.metadata_groups():
        if key in meta and str(meta[key]).strip():
            cls = language_class(meta[key])
            docs.setdefault(cls, set()).add(doc_id)
            chunks.setdefault(cls, set()).update(ids)
        else:
            free_docs.add(doc_id)
            free_chunks.update(ids)
    return docs, chunks, (free_docs, free_chunks)
