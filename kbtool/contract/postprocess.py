"""The contract's ``postprocess`` and ``context`` sections: what happens to the fused hits (rerank,
dedup, sensitive content, diversity, expand, compress, freshness) and how they become an LLM's
context block."""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field, PrivateAttr, field_validator, model_validator

from .base import CONTEXT_FIELDS, _FieldError, _Strict


# ---- 4. post-process and context ------------------------------------------------------------
class Dedup(_Strict):
    """Drop a hit whose word 3-grams are mostly in a better hit."""

    enabled: bool = True
    similarity: float = Field(
        0.9, gt=0, le=1, description="drop a hit when this share of its word 3-grams is in a better hit")


class Diversity(_Strict):
    """Spread the top K over more documents (kbtool.query.postprocess.diversify); off by default."""

    mmr_lambda: Optional[float] = Field(
        None, ge=0, le=1, description="MMR over the fused candidates' chunk vectors: lambda * relevance (fused "
                                      "score scaled to 0..1) - (1 - lambda) * max cosine to a hit above; "
                                      "1 = pure relevance; null: off. Re-orders the window dedup reads (the contract's "
                                      "retrieve.top_k + 20, whatever top_k a caller asks)")
    max_per_document: Optional[int] = Field(None, gt=0, description="at most this many hits per document; null: off")


class Expand(_Strict):
    """Return a hit's enclosing section or its neighbours (kbtool.query.expand); off by default."""

    mode: Optional[Literal["section", "neighbours"]] = Field(
        None, description="section: the hit's chunks of the same section (contiguous, same section_path); "
                          "neighbours: up to `neighbours` chunks on each side; null: off")
    max_tokens: int = Field(512, gt=0, le=100000, description="budget per expanded result in model tokens (the "
                                                               "chunks' n_tokens), grown around the hit")
    neighbours: int = Field(1, gt=0, le=100, description="neighbours mode: chunks on each side of the hit")


class Compress(_Strict):
    """Keep the sentences of each hit most like the question (kbtool.query.compress); off by default."""

    mode: Optional[Literal["sentences"]] = Field(
        None, description="sentences: keep the sentences sharing the most question-term weight (BM25 idf) and "
                          "their neighbours, code blocks, tables and list items whole, elisions marked ' … '; "
                          "null: off")
    max_sentences: int = Field(2, gt=0, le=100, description="best-scoring sentences kept per hit (before neighbours)")
    neighbours: int = Field(1, ge=0, le=20, description="sentences kept on each side of a chosen one")
    max_tokens: int = Field(256, gt=0, le=100000, description="budget per compressed hit in model tokens; the best "
                                                               "sentence is kept even when it alone is over")
    min_tokens: int = Field(96, ge=0, le=100000, description="a hit of fewer model tokens is left whole")
    lead: bool = Field(True, description="also keep a hit's first sentence (a section's opening often states "
                                         "what the rest is about), within max_tokens")


class Freshness(_Strict):
    """Newer documents and conflicting sources (kbtool.query.freshness); off by default."""

    prefer: Optional[Literal["newer", "score"]] = Field(
        None, description="hits of different documents about the same thing whose facts differ (numbers with "
                          "units, durations, dates, versions) are flagged in the answer and the context block; "
                          "newer: the newer document's hit moves above the older one (which stays, below); "
                          "score: the order is kept; null: no conflict check")
    similarity: float = Field(
        0.8, gt=0, le=1, description="cosine of two chunk vectors at or above which hits are about the same thing "
                                     "(under the same last section_path heading: at 0.2 less; without vectors the heading alone)")
    date_fields: list[str] = Field(
        default_factory=lambda: ["updated", "last_modified", "date", "mtime"],
        description="where a document's date comes from, tried in order: metadata (front matter) keys, and "
                    "mtime (the file's modification time when it was ingested); leave mtime out where files "
                    "are checked out or copied (their mtime is then that day): such documents stay undated")
    half_life_days: Optional[float] = Field(
        None, gt=0, allow_inf_nan=False, description="time decay of the fused score: score * 0.5 ** (age days / half_life_days), "
                                "before dedup; null: off")
    as_of: Optional[str] = Field(
        None, description="the date ages are counted from (YYYY-MM-DD); null: the newest date among the "
                          "question's candidates, so runs are reproducible (the order is the same for any "
                          "as_of on or after the newest candidate's date: it scales every score alike; a "
                          "document dated after as_of is not decayed, ages never go below 0)",
        json_schema_extra={"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]})  # YYYYMMDD too

    @field_validator("date_fields")
    @classmethod
    def _fields(cls, v):
        if any(not str(k).strip() for k in v):
            raise ValueError("empty metadata key: name keys such as updated, date")
        return v

    @field_validator("as_of", mode="before")
    @classmethod
    def _date(cls, v):
        from datetime import date

        if isinstance(v, date):  # YAML reads a bare 2024-10-02 as a date
            return v.isoformat()
        if v is not None and not isinstance(v, bool):
            try:  # 20241002 (read by YAML as a number), 2024-10-02: kept as YYYY-MM-DD
                return date.fromisoformat(str(v)).isoformat()
            except ValueError:
                raise ValueError(f"{v!r} is not a date: use YYYY-MM-DD") from None
        return v

    @property
    def active(self) -> bool:
        return self.prefer is not None or self.half_life_days is not None


RERANK_KEY_ENV = "KBTOOL_RERANK_API_KEY"


class Rerank(_Strict):
    """Re-order the top of the fused list with a second scorer (kbtool.query.rerank)."""

    backend: Literal["none", "cross-encoder", "http", "dense"] = Field(
        "none", description="none (off); cross-encoder (a local sentence-transformers CrossEncoder folder, "
                            "runs on this machine); http (a rerank server: text-embeddings-inference, Cohere, "
                            "Jina); dense (the cosine of another embedding model of the store)")
    model: Optional[str] = Field(
        None, description="cross-encoder: the model folder (required); http: the model name sent (optional); "
                          "dense: the store's dense retriever, dense or dense:NAME [default: dense]")
    url: Optional[str] = Field(
        None, description="http: the server's base URL; kbtool POSTs to URL/rerank (tei) or URL/v1/rerank "
                          "(cohere), or to URL itself when it ends in /rerank")
    api: Literal["tei", "cohere"] = Field(
        "tei", description="http request shape: tei ({query, texts} -> [{index, score}]) or cohere "
                           "(Cohere, Jina: {model, query, documents, top_n} -> {results: [{index, relevance_score}]})")
    api_key_env: str = Field(
        RERANK_KEY_ENV, description="http: environment variable holding a bearer key, sent only when it is set")
    top_n: int = Field(20, gt=0, le=1000, description="fused candidates reranked; the rest follow below them unchanged")
    weight: float = Field(
        1.0, ge=0, le=1, description="final = weight * minmax(rerank score) + (1 - weight) * minmax(fused score) "
                                     "over the reranked top_n; 1.0: the rerank order alone")
    timeout_s: float = Field(10.0, gt=0, le=600, description="http: seconds per request")
    retries: int = Field(2, ge=0, le=10, description="http: retries on connection errors, timeouts, 429 and 5xx (backoff doubles)")

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, v):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v):
            raise ValueError(f"{v!r} is not an environment variable name")
        return v

    @model_validator(mode="after")
    def _backend_needs(self):
        if self.backend == "cross-encoder" and not (self.model or "").strip():
            raise _FieldError("model", "required for backend cross-encoder: the folder of a sentence-transformers "
                                       "CrossEncoder model")
        if self.backend == "http":
            if not (self.url or "").strip():
                raise _FieldError("url", "required for backend http: the rerank server, e.g. http://localhost:8080")
            if not re.match(r"https?://[^/\s]+", self.url):
                raise _FieldError("url", f"{self.url!r} is not an http:// or https:// URL")
        if self.backend == "dense" and self.model is not None and not re.fullmatch(r"dense(:\S+)?", self.model):
            raise _FieldError("model", f"{self.model!r}: for backend dense, name a dense retriever of the store: "
                                       "dense or dense:NAME")
        return self

    @property
    def dense_retriever(self) -> str:
        """Backend dense: the store's dense retriever whose model scores (``model``, default ``dense``)."""
        return self.model or "dense"


class Sensitive(_Strict):
    """Sensitive content (kbtool.sensitive): refuse questions, redact or drop results."""

    credentials: Literal["redact", "drop", "off"] = Field(
        "redact", description="results holding credential-looking strings (AWS key ids, sk-/ghp_/xoxb- tokens, "
                              "JWTs, private key blocks, password=/api_key: values): redact, drop the hit, or off",
        json_schema_extra={"enum": ["redact", "drop", "off", False], "type": ["string", "boolean"]})  # YAML 1.1: off
    lexicon: Optional[str] = Field(
        None, description="a YAML or JSON file of categories (words, patterns; question: refuse|allow with a "
                          "message; results: redact|drop|allow), relative to this contract's folder")

    @field_validator("credentials", mode="before")
    @classmethod
    def _yaml_off(cls, v):
        return "off" if v is False else v  # YAML reads a bare `off` as false

    _written: Any = PrivateAttr(None)  # the lexicon as the file wrote it (load_contract makes it absolute): `contract show`

    def rules(self, base: Optional[Path] = None):
        """The compiled rules, a relative lexicon read from ``base`` (default: the current folder;
        ``load_contract`` makes it absolute), as ``load_contract`` last read them: kept by
        ``kbtool.sensitive.compiled``, not on this model (copies share them); a bad lexicon is a ContractError."""
        from ..sensitive import compiled

        return compiled(self, base)


class Postprocess(_Strict):
    """What happens to the fused hits: rerank, freshness, dedup, sensitive content, diversity,
    expansion, compression."""

    dedup: Dedup = Field(default_factory=Dedup)
    sensitive: Sensitive = Field(default_factory=Sensitive)
    rerank: Rerank = Field(default_factory=Rerank,
                           description="rerank the fused top_n before dedup; measure with `kbtool eval` first")
    diversity: Diversity = Field(default_factory=Diversity,
                                 description="after rerank and dedup: MMR and a per-document cap (off by default)")
    expand: Expand = Field(default_factory=Expand,
                           description="after diversity: a hit's section or neighbours, cited as one span (off by default)")
    compress: Compress = Field(default_factory=Compress,
                               description="after expand: a hit's sentences most like the question (off by default)")
    freshness: Freshness = Field(default_factory=Freshness,
                                 description="a time decay before dedup; after diversity: conflicting sources flagged, "
                                             "the newer preferred (off by default)")


class Context(_Strict):
    """How the hits become an LLM's context block: its budget, header, one template per hit, notices."""

    max_tokens: int = Field(1500, gt=0, description="budget of the context block, in the model's word pieces")
    header: str = Field("Answer from these sources. Cite them as [n].\n\n",
                        description="text before the first source")
    template: str = Field(
        "[{n}] ### Source: {citation} — {section_path}\n{text}\n\n",
        description="one hit; fields: " + ", ".join(sorted(CONTEXT_FIELDS)))
    low_confidence_notice: str = Field(
        "Note: these sources may not answer the question; say so if they do not.\n\n",
        description="put first when the decision is low_confidence")
    refusal: str = Field("The knowledge base has no source that answers this question.\n",
                         description="the whole block when the decision is refuse")
    base_url: str | None = Field(
        None, description="a site the documents are published under: {citation} and {url} become "
                          "BASE/doc-path-without-extension/#section-anchor (e.g. https://docs.example.com/)")

    @field_validator("template")
    @classmethod
    def _known_fields(cls, v):
        try:
            parts = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(v) if f is not None]
        except ValueError as exc:
            raise ValueError(f"not a valid template ({exc})") from None
        if any(spec or conv for _, spec, conv in parts):
            raise ValueError("format specs and conversions ({text:>9}, {text!r}) are not allowed: use plain {field} names")
        names = {f for f, _, _ in parts}
        unknown = {n for n in names if n not in CONTEXT_FIELDS}
        if unknown:
            raise ValueError(f"unknown field(s) {', '.join(sorted(unknown))}: use {', '.join(sorted(CONTEXT_FIELDS))}")
        sample = {"n": 1, "source": "a.md", "doc_id": "a.md", "title": "A", "section_path": "A > B", "page": "",
                  "text": "text", "confidence": "0.50", "chunk_id": "a.md#0", "citation": "a.md:1", "lines": ":1",
                  "anchor": "", "url": ""}
        try:
            v.format(**sample)
        except (ValueError, KeyError, IndexError, AttributeError, TypeError) as exc:
            raise ValueError(f"cannot be filled in ({exc}): use plain {{field}} names") from None
        return v

