"""The store's documents in the catalog (``Store`` reads and writes them through ``DocumentsView``;
the manifest's source records are written by ``Store`` itself)."""

from __future__ import annotations

import json
from typing import Iterable

from ..document import RESERVED_META, check_metadata_keys
from . import manifest as mf


class DocumentsView:
    """Documents of a ``Store``: put, remove, list, read."""

    # ---- documents -----------------------------------------------------------------------
    def document_hashes(self) -> dict[str, tuple[str, str]]:
        """doc_id -> (root, fingerprint of content, run metadata and parse options)."""
        return self.catalog.document_hashes()

    def document_options(self, doc_id: str) -> dict:
        """The parse options stored with a document (run metadata, markup rules, includes)."""
        return self.catalog.document_options(doc_id)

    def put_document(self, doc, root: str, metadata: dict | None = None, options: dict | None = None,
                     kept=None) -> None:
        """Insert or replace a parsed document; its old chunks go and it awaits chunking. ``kept``:
        its kept-text measure (``ingestion.kept.Kept``), or None when not measured."""
        check_metadata_keys(metadata or {})
        self.catalog.put_document(doc, root, json.dumps(metadata or {}, sort_keys=True),
                                  json.dumps([b.to_dict() for b in doc.blocks], ensure_ascii=False),
                                  json.dumps(options or {}, sort_keys=True), mf.now_iso(),
                                  None if kept is None else kept.share,
                                  None if kept is None else json.dumps(kept.missing, ensure_ascii=False))

    def kept_below(self, threshold: float) -> dict:
        """The kept-text guard over the store: {threshold, measured (documents), below: [{doc_id,
        path, kept, missing}] lowest first}."""
        return {"threshold": threshold, "measured": self.catalog.kept_measured(),
                "below": self.catalog.kept_below(threshold)}


    def document_roots(self) -> dict[str, int]:
        """Ingest root (absolute folder, or ``beir:FOLDER``) -> number of documents from it."""
        return self.catalog.document_roots()

    def source_window(self, doc_id: str, start: int | None, length: int, margin: int = 8192) -> tuple[str | None, int | None]:
        """(the document's text from ``margin`` characters before ``start`` to as many after the
        ``length`` characters there, where ``start`` falls in it): the source span a chunk or hit is
        checked against for secrets cut across chunks, without reading a big document whole."""
        if start is None:
            return None, None
        lo = max(0, start - margin)
        return self.catalog.document_slice(doc_id, lo, start - lo + length + margin), start - lo

    def roots_of(self, doc_ids) -> set[str]:
        """The roots these documents were ingested from."""
        roots = self.catalog.root_of()
        return {roots[d] for d in doc_ids if d in roots}

    def document_paths(self, root: str) -> list[str]:
        """The file paths of the documents ingested from ``root``."""
        return self.catalog.document_paths(root)

    def document_files(self) -> dict[str, str]:
        """doc_id -> the path of the file it was ingested from."""
        return self.catalog.document_files()

    def sources(self) -> dict[str, dict]:
        """The folders this store was ingested from, with the options each was ingested with
        (``ingest`` records them; an ingest without a path ingests them again)."""
        self._refresh()
        return dict(self.manifest.get("sources") or {})


    def published(self, root: str | None, doc_id: str | None = None) -> tuple[str, str | None, dict | None]:
        """(id prefix, base URL, MkDocs site) of the source a document of ``root`` comes from: the base
        URL is the source's own, else its mkdocs.yml's ``site_url``; the site is what ingest read of its
        mkdocs.yml (``ingestion.mkdocs.Site.record``), or None. With the ``doc_id`` of a ``.rst`` page
        and no base URL: the Sphinx project the page belongs to, (id prefix + its folder/, its conf.py's
        html_baseurl, None), as ingest recorded it (``sphinx``), if any."""
        rec = (self.manifest.get("sources") or {}).get(root or "") or {}
        site = rec.get("mkdocs")
        prefix, base = rec.get("id_prefix") or "", rec.get("base_url") or (site or {}).get("site_url")
        if base or doc_id is None or not doc_id.lower().endswith(".rst"):
            return prefix, base, site
        for folder, url in sorted((rec.get("sphinx") or {}).items(), key=lambda kv: -len(kv[0])):
            inside = prefix + (folder + "/" if folder else "")
            if doc_id.startswith(inside):
                return inside, url, None
        return prefix, None, site

    def remove_documents(self, doc_ids: Iterable[str]) -> int:  # how many were there
        return self.catalog.remove_documents(doc_ids)

    def document_for_chunking(self, doc_id: str) -> dict | None:
        """title, blocks, filetype and metadata of a document, as chunking needs them."""
        return self.catalog.document_for_chunking(doc_id)

    def replace_chunks(self, doc_id: str, rows: list[tuple], params) -> None:
        """A document's new chunk rows (catalog column order), recorded as chunked with ``params``."""
        self.catalog.replace_chunks(doc_id, rows, json.dumps(params.to_dict(), sort_keys=True))

    def documents_to_chunk(self, params=None) -> list[str]:
        """Documents not chunked yet, or (with ``ChunkParams``) not chunked with these parameters."""
        return self.catalog.documents_to_chunk(json.dumps(params.to_dict(), sort_keys=True) if params else "")

    def document_ids(self) -> list[str]:  # sorted
        return self.catalog.document_ids()

    def document_info(self, doc_id: str) -> dict | None:
        """doc_id, root, path, sha256, title, filetype and parsed text of a document, or None."""
        return self.catalog.document_info(doc_id)


    def document_text(self, doc_id: str) -> str | None:  # None: the store does not hold it
        return self.catalog.document_text(doc_id)

    def metadata_keys(self) -> set[str]:
        """Every metadata key of the store's documents (a filter on another key is an error). Read
        once per catalog generation: every filtered query asks (2 ms of SQL on 1,400 documents)."""
        gen = self.generation()
        cached = getattr(self, "_keys_cache", None)
        if cached is None or cached[0] != gen:
            cached = self._keys_cache = (gen, frozenset((RESERVED_META - {"index_hash"}) | self.catalog.metadata_keys()))
        return set(cached[1])
