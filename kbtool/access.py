"""Who may see what: a caller's access tags, which chunks and documents they make visible, the
store's status as that caller may see it, and the metadata keys a filter may name. One place for
the query pipeline, serve (HTTP and MCP), provenance and the CLI."""

from __future__ import annotations

from typing import Callable, Sequence

from .errors import AccessError


def access_tags(contract, principal: str | None, allow: Sequence[str] | None) -> set[str] | None:
    """Tags a caller may read; None means unrestricted."""
    acc = contract.access
    if principal is None and not allow:
        if acc.require_principal:
            raise AccessError("the contract requires a principal (access.require_principal): pass principal= or allow= (CLI: --principal NAME or --allow TAG)")
        return None
    tags = set(allow or [])
    if principal is not None:
        if principal not in acc.principals:
            known = ", ".join(sorted(acc.principals)) or "none defined"
            raise AccessError(f"unknown principal {principal!r} (access.principals: {known})")
        tags |= set(acc.principals[principal])
    return tags


def visibility(contract, tags: set[str] | None) -> Callable[[dict], bool]:
    """Whether a chunk's metadata is visible to a caller holding ``tags`` (None: everything)."""
    key, untagged_visible = contract.access.key, contract.access.untagged == "visible"

    def visible(meta: dict) -> bool:
        if tags is None:
            return True
        have = {t.strip() for t in str(meta.get(key, "")).split(",") if t.strip()}
        return bool(have & tags) if have else untagged_visible

    return visible


def visible_documents(store, contract, principal: str | None = None,
                      allow: Sequence[str] | None = None) -> set[str] | None:
    """The documents a caller may see (None: every document). Access only, no filters: what lint,
    counts and fingerprints may speak of. A document without chunks is invisible to a restricted
    caller (its access tags live on its chunks)."""
    tags = access_tags(contract, principal, allow)
    if tags is None:
        return None
    visible = visibility(contract, tags)
    return {doc_id for _, doc_id, meta in store.chunk_metadata() if visible(meta)}


# Status fields that describe every document, whoever may read it: a restricted caller gets None.
_WHOLE_STORE = ("documents_by_type", "chunk_tokens_avg", "chunk_tokens_max", "chunks_over_model_limit",
                "disk_bytes", "last_ingest", "source_bytes", "documents_not_chunked")


def restricted_status(store, contract, principal: str | None = None, allow: Sequence[str] | None = None) -> dict:
    """``store.status()`` as a caller may see it: unrestricted, all of it; restricted (or required
    to be, ``access.require_principal``), documents and chunks it may read, ``access`` its tags,
    the sources it may read a document of, and None for what describes the whole store (types,
    token sizes, source and disk bytes, last ingest)."""
    tags = access_tags(contract, principal, allow)
    info = store.status()
    if tags is None:
        return info
    docs = visible_documents(store, contract, principal, allow) or set()
    info.update({k: None for k in _WHOLE_STORE})
    info.update(documents=len(docs), chunks=sum(1 for _, d, _ in store.chunk_metadata() if d in docs),
                access=sorted(tags))
    if info.get("sources") is not None:  # only the sources it may read a document of (their metadata may name tags)
        roots = store.roots_of(docs)
        info["sources"] = [s for s in info["sources"] if s.get("root") in roots
                           or ("beir:" + str(s.get("root"))) in roots]
    return info


def known_filter_keys(store, contract, tags: set[str] | None) -> set[str]:
    """The metadata keys a filter may name for a caller holding ``tags`` (None: unrestricted): the
    contract's ``data.metadata`` and the store's keys — for a restricted caller, only the keys of
    chunks it may read (it learns no key only forbidden documents carry)."""
    fields = contract.data.metadata
    if tags is None:
        return store.metadata_keys() | set(fields)
    visible = visibility(contract, tags)
    known = set(fields) | {k for _, _, meta in store.chunk_metadata() if visible(meta) for k in meta}
    known.discard("index_hash")
    return known
