"""The retrieval contract: one versioned YAML file that says how a question becomes an answer.

How a question is cleaned and truncated, which retrievers and how many candidates, how they are
fused (and per detected question type), how near-duplicates are dropped, how confident an answer
must be to be given, who may see what, and how hits become an LLM's context block.

    contract = load_contract("kbtool.yaml", overrides=["retrieve.top_k=8"])
    contract = Contract()            # the built-in default, identical to `kbtool contract init`

The model is strict: unknown keys are errors, every error names its path
(``retrieve.top_k: must be greater than 0``). ``dump_yaml(contract, comments=True)`` writes the
commented file `contract init` creates; load -> dump -> load is the identity.
"""

from __future__ import annotations

import os
import re
import string
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from .document import normalise_id_prefix  # noqa: F401 (data.sources[].id_prefix; re-exported)
from .errors import ContractError

CONTRACT_FILE = "kbtool.yaml"
QUESTION_TYPES = ("identifier", "cjk", "other")
RETRIEVERS = ("dense", "bm25")
RRF_K = 60  # the RRF constant of Cormack et al. (2009): retrieve.fusion.rrf_k and the "hybrid" mode
# Answerability signals the pipeline computes (kbtool.query.signals), which decide.model may use.
FEATURES = ("relevance", "cosine", "coverage", "absent_kb", "absent_top", "agreement", "dense_margin",
            "bm25_margin", "identifier", "cjk", "terms")
CONTEXT_FIELDS = {"n", "source", "doc_id", "title", "section_path", "page", "text", "confidence", "chunk_id",
                  "citation", "lines", "anchor", "url"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# ---- 1. data spec ---------------------------------------------------------------------------
class MetadataField(_Strict):
    type: Literal["str", "date", "number", "tags"] = Field(
        "str", description="str, date (ISO 8601, compared as dates), number, or tags (comma-separated list)")
    required: bool = Field(False, description="every document must carry it (`contract validate --store` checks)")
    filterable: bool = Field(True, description="may be used in --filter and retrieve.filters")


def _default_metadata() -> dict[str, MetadataField]:
    return {
        "doc_id": MetadataField(required=True),
        "dir": MetadataField(required=True),
        "filetype": MetadataField(required=True),
        "page": MetadataField(type="number"),
        "access": MetadataField(type="tags"),
    }


class Source(_Strict):
    root: str = Field(description="folder (or BEIR folder) to ingest, relative to this contract's folder or absolute")
    id_prefix: str = Field("", description="put before every document id of this root, e.g. 'zh/': several roots "
                                           "with the same relative paths in one store")
    include: list[str] = Field(default_factory=list, description="only files matching these globs (relative to root)")
    exclude: list[str] = Field(default_factory=list, description="skip files matching these globs")
    meta: dict[str, str] = Field(default_factory=dict, description="metadata for every document of this root")
    meta_from_path: list[str] = Field(default_factory=list,
                                      description="metadata from the document id, e.g. 'docs/{lang}/**'")
    include_root: Optional[str] = Field(None, description="folder include directives resolve against, relative to root")
    base_url: Optional[str] = Field(None, description="site this root is published under: citations become "
                                                      "BASE/path-without-extension/#anchor")
    format: Literal["auto", "beir"] = Field("auto", description="auto (by extension) or beir (corpus.jsonl)")
    encoding: Optional[str] = Field(None, description="decode text files with this encoding instead of detecting it")
    markup_off: list[str] = Field(default_factory=list, description="Markdown clean-up rules switched off")
    max_file_size_mb: Optional[float] = Field(None, gt=0, description="skip files larger than this (default: per type)")

    @field_validator("id_prefix")
    @classmethod
    def _prefix(cls, v):
        return normalise_id_prefix(v)

    @field_validator("base_url")
    @classmethod
    def _url(cls, v):
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError("a base URL starts with http:// or https://")
        return v

    @field_validator("meta", "meta_from_path", "encoding", "markup_off")
    @classmethod
    def _ingest_option(cls, v, info):
        """Checked as `ingest` checks the flag, with the message naming the contract's field."""
        from .errors import UsageError

        try:
            if info.field_name == "meta":
                from .document import check_metadata_keys

                check_metadata_keys(v)
            elif info.field_name == "meta_from_path":
                from .document import path_pattern

                for pattern in v:
                    path_pattern(pattern)
            elif info.field_name == "encoding" and v:
                import codecs

                try:
                    codecs.lookup(v)
                except LookupError:
                    raise ValueError(f"unknown encoding {v!r}: e.g. utf-8, latin-1, cp1252, gb18030") from None
            elif info.field_name == "markup_off":
                from .ingestion.markup import MarkupRules

                MarkupRules.parse(v)
        except UsageError as exc:
            raise ValueError(str(exc).replace("--markup-off ", "")) from None
        return v


class DataSpec(_Strict):
    metadata: dict[str, MetadataField] = Field(
        default_factory=_default_metadata,
        description="metadata keys documents carry (doc_id, dir, filetype and page are set by kbtool; "
                    "others come from `ingest --meta key=value`)")
    sources: list[Source] = Field(
        default_factory=list,
        description="the roots `kbtool ingest` (without a path) ingests, each with its options; empty: the "
                    "folders given to `ingest`, remembered by the store")

    @field_validator("sources")
    @classmethod
    def _distinct(cls, v):
        prefixes = [s.id_prefix for s in v if s.id_prefix]
        if len(set(prefixes)) < len(prefixes):
            raise ValueError("two sources share an id_prefix: give each root its own (e.g. 'en/' and 'zh/')")
        roots = [s.root.rstrip("/") for s in v]
        if len(set(roots)) < len(roots):
            raise ValueError("a root is declared twice: one entry per root")
        return v


# ---- 2. preprocess --------------------------------------------------------------------------
class Preprocess(_Strict):
    clean: bool = Field(True, description="collapse whitespace, drop control characters, NFC-normalise")
    max_query_tokens: int = Field(
        128, gt=0, description="longest question in the embedding model's word pieces; longer ones are truncated")
    truncation: Literal["head", "tail", "middle"] = Field(
        "head", description="what a truncated question keeps: head (its start), tail (its end), "
                            "middle (its start and end, dropping the middle)")
    thesaurus: dict[str, list[str]] = Field(
        default_factory=dict, description="term -> synonyms appended to the question, e.g. {上下文理解: [语境推测]}")
    thesaurus_applies_to: list[Literal["dense", "bm25"]] = Field(
        default_factory=lambda: ["bm25"], description="which retrievers see the thesaurus expansion")

    @field_validator("thesaurus")
    @classmethod
    def _no_empty_terms(cls, v):
        for term, syns in v.items():
            if not str(term).strip():
                raise ValueError("a thesaurus term is empty")
            if not syns or any(not str(s).strip() for s in syns):
                raise ValueError(f"{term!r}: give a non-empty list of synonyms")
        return v


# ---- 3. retrieve ----------------------------------------------------------------------------
# A retriever: bm25, dense (the store's embedding model) or dense:NAME (a model added to the store).
RETRIEVER = re.compile(r"^(bm25|dense|dense:[a-z0-9][a-z0-9._-]{0,39})$")
# Further dense retrievers a built-in rule names: weighed only where the store has them.
BUNDLED_RETRIEVERS = ("dense:use-m",)


class Weights(_Strict):
    """Weights by retriever name: ``dense`` and ``bm25``, and ``dense:NAME`` for a model added to the
    store (``kbtool index --add-model``). They are normalised over the retrievers the store has."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)
    dense: float = Field(0.7, ge=0, le=1)
    bm25: float = Field(0.3, ge=0, le=1)

    @model_validator(mode="after")
    def _not_all_zero(self):
        for name, w in (self.model_extra or {}).items():
            if not RETRIEVER.match(name) or name in ("dense", "bm25"):
                raise ValueError(f"unknown retriever {name!r}: use dense, bm25 or dense:NAME (a model added "
                                 "with `kbtool index --add-model`)")
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w <= 1:
                raise ValueError(f"{name}: the weight must be a number from 0 to 1")
        if sum(self.as_dict().values()) <= 0:
            raise ValueError("every weight is 0: give at least one retriever a weight")
        return self

    def as_dict(self) -> dict[str, float]:
        """retriever -> weight as written."""
        return {"dense": self.dense, "bm25": self.bm25, **{k: float(v) for k, v in (self.model_extra or {}).items()}}

    def normalised(self) -> tuple[float, float]:
        """(dense, bm25), summing to 1 (further retrievers left out)."""
        total = self.dense + self.bm25
        return (self.dense / total, self.bm25 / total) if total > 0 else (0.5, 0.5)

    def over(self, available, where: str = "retrieve.fusion.weights") -> dict[str, float]:
        """retriever -> weight, summing to 1, over the retrievers a store has (``available``); a
        retriever with weight 0 is left out. A weight for a retriever the store lacks is a
        ContractError, except the bundled ones built-in rules name (``BUNDLED_RETRIEVERS``)."""
        out = {}
        for name, w in self.as_dict().items():
            if name in available:
                if w > 0:
                    out[name] = w
            elif w > 0 and name not in BUNDLED_RETRIEVERS:
                raise ContractError(f"{where}.{name}: the store has no retriever {name} (it has "
                                    f"{', '.join(available)}): add the model with `kbtool index --add-model`, "
                                    "or remove the weight")
        total = sum(out.values())
        if total <= 0:
            raise ContractError(f"{where}: no retriever the store has ({', '.join(available)}) has a weight above 0")
        return {k: v / total for k, v in out.items()}


class Fusion(_Strict):
    method: str = Field(
        "weighted", description="weighted (normalised scores), rrf (reciprocal rank), or one retriever alone "
                                "(dense, bm25, dense:NAME)")
    rrf_k: int = Field(RRF_K, gt=0, description="RRF constant (Cormack et al. 2009)")
    normalization: Literal["minmax", "zscore"] = Field(
        "minmax", description="how weighted fusion puts the retrievers' scores on one scale, per question")
    weights: Weights = Field(default_factory=Weights, description="weights when no rule below matches")
    fill_missing: bool = Field(
        True, description="a candidate found by one retriever gets its real score from the others "
                          "(cosine of its stored vector, BM25 score of its row) instead of 0")

    @field_validator("method")
    @classmethod
    def _method(cls, v):
        if v not in ("weighted", "rrf") and not RETRIEVER.match(v):
            raise ValueError(f"unknown method {v!r}: use weighted, rrf, dense, bm25 or dense:NAME")
        return v


class Rule(_Strict):
    when: Literal["identifier", "cjk", "other"] = Field(description="a detected question type")
    weights: Weights


def _default_rules() -> list[Rule]:
    return [
        # Error codes, versions, API paths, config keys: BM25 matches them exactly, the model does not.
        Rule(when="identifier", weights=Weights(dense=0.3, bm25=0.7)),
        # With the bundled multilingual model added (`kbtool index --add-model use-m`) it leads a
        # CJK question: 0.7 of the weight (MiniLM's vectors of Chinese text are noise that even
        # 0.03 of the weight lets in: zh nDCG@10 0.667 against 0.715 without; chosen on the sample
        # set's Chinese questions, eval_sets/sample.jsonl tag zh; `kbtool calibrate` tunes it for
        # yours). A rule weighing a bundled retriever the store lacks is skipped: the next applies.
        Rule(when="cjk", weights=Weights(**{"dense": 0.0, "bm25": 0.3, "dense:use-m": 0.7})),
        # A CJK question on a model not declared multilingual: the vectors carry little meaning.
        Rule(when="cjk", weights=Weights(dense=0.1, bm25=0.9)),
    ]


class Retrieve(_Strict):
    top_k: int = Field(5, gt=0, description="results returned")
    candidates: int = Field(100, gt=0, description="candidates taken from each retriever before fusion")
    fusion: Fusion = Field(default_factory=Fusion)
    rules: list[Rule] = Field(default_factory=_default_rules,
                              description="per detected question type, the first matching rule's weights")
    model_multilingual: bool = Field(
        False, description="the embedding model reads CJK: the cjk rule is then not applied")
    filters: list[str] = Field(default_factory=list,
                               description="filters applied to every question, same syntax as --filter")

    @field_validator("filters")
    @classmethod
    def _filters_parse(cls, v):
        from .filters import parse_filter

        for spec in v:
            try:
                parse_filter(spec)
            except ValueError as exc:
                raise ValueError(str(exc)) from None
        return v


# ---- 4. post-process and context ------------------------------------------------------------
class Dedup(_Strict):
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
                          "document dated after as_of is not decayed, ages never go below 0)")

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


class _FieldError(ValueError):
    """A cross-field check's failure that belongs to one field: ``format_error`` names
    ``postprocess.rerank.model``, not ``postprocess.rerank``."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


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
                              "JWTs, private key blocks, password=/api_key: values): redact, drop the hit, or off")
    lexicon: Optional[str] = Field(
        None, description="a YAML or JSON file of categories (words, patterns; question: refuse|allow with a "
                          "message; results: redact|drop|allow), relative to this contract's folder")

    @field_validator("credentials", mode="before")
    @classmethod
    def _yaml_off(cls, v):
        return "off" if v is False else v  # YAML reads a bare `off` as false

    _rules: Any = PrivateAttr(None)
    _written: Any = PrivateAttr(None)  # the lexicon as the file wrote it (load_contract makes it absolute): `contract show`

    def rules(self, base: Optional[Path] = None):
        """The compiled rules, a relative lexicon read from ``base`` (default: the current folder;
        ``load_contract`` makes it absolute): read and checked once, a bad lexicon is a ContractError."""
        if self._rules is None:
            from .sensitive import rules_for

            self._rules = rules_for(self, base)
        return self._rules


class Postprocess(_Strict):
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


# ---- 5. confidence and tiers ----------------------------------------------------------------
class Thresholds(_Strict):
    answer: float = Field(0.9116, ge=0, le=1, description="P(answerable) (without decide.model: the top hit's confidence) at or above: answer")
    low_confidence: float = Field(
        0.6905, ge=0, le=1, description="at or above (and below answer): answer with an uncertainty notice; below: refuse")

    @model_validator(mode="after")
    def _ordered(self):
        if self.low_confidence > self.answer:
            raise ValueError("low_confidence must not be above answer")
        return self


def _default_tiers() -> dict[str, Thresholds]:
    # Chosen with the built-in model by the same calibration (eval_sets/sample.jsonl): identifier
    # questions (error codes, config keys, API names) get their own refuse threshold.
    return {"identifier": Thresholds(answer=0.7006, low_confidence=0.7006)}


class PlattMap(_Strict):
    slope: float = Field(1.0, allow_inf_nan=False,
                         description="Platt scaling of the score: P = 1 / (1 + exp(-(slope * score + offset)))")
    offset: float = Field(0.0, allow_inf_nan=False)


MODEL_FORMAT = 1  # the decide.model format this kbtool reads


class AnswerabilityModel(_Strict):
    """A logistic model of P(answerable) over the answerability signals (kbtool.query.signals):
    P = 1 / (1 + exp(-(slope * (intercept + sum(coefficient * signal)) + offset)))."""

    version: int = Field(1, ge=1, le=MODEL_FORMAT, description="the model format")
    coefficients: dict[str, Annotated[float, Field(allow_inf_nan=False)]] = Field(
        description="signal name -> weight, on the signal's own scale")
    intercept: float = Field(0.0, allow_inf_nan=False)
    calibration: PlattMap = Field(default_factory=PlattMap,
                                  description="maps the model's score to a probability (fitted out of fold)")
    fitted_on: Optional[dict[str, Any]] = Field(None, description="the question set and out-of-fold quality")

    @field_validator("coefficients")
    @classmethod
    def _known(cls, v):
        unknown = [f for f in v if f not in FEATURES]
        if unknown:
            raise ValueError(f"unknown signal(s) {', '.join(unknown)}: use {', '.join(FEATURES)}")
        if not v:
            raise ValueError("no coefficients: give at least one signal a weight")
        return v


def _default_model() -> AnswerabilityModel:
    # Fitted on eval_sets/sample.jsonl (the sample corpus, all-MiniLM-L6-v2; 84 answerable and
    # 32 unanswerable questions) by `kbtool calibrate eval_sets/sample.jsonl` on 2026-12-01:
    # out of fold AUC 0.7995, Brier 0.1542, calibration error 0.1076. A starting point
    # only: `kbtool calibrate` on your own labelled questions fits one for your knowledge base.
    return AnswerabilityModel(coefficients={
        "relevance": 0.0,
        "cosine": 0.0,
        "coverage": 0.903698,
        "absent_kb": -0.198521,
        "absent_top": -2.266073,
        "dense_margin": 9.454024,
    }, intercept=0.533757, calibration=PlattMap(slope=0.973155, offset=0.952431),
        fitted_on={"question_set": "sample (built in)", "questions": 116, "answerable": 84,
                   "unanswerable": 32, "date": "2026-12-01", "oof": {'auc': 0.7995, 'brier': 0.1542, 'calibration_error': 0.1076}})


class Decide(_Strict):
    model: Optional[AnswerabilityModel] = Field(
        default_factory=_default_model, description="answerability model: thresholds compare P(answerable) from it; "
                          "null: they compare the best hit's confidence")
    thresholds: Thresholds = Field(default_factory=Thresholds)
    tiers: dict[str, Thresholds] = Field(
        default_factory=_default_tiers,
        description="thresholds per detected type (identifier, cjk, other) or question tag; first match wins")


# ---- 6. access and 7. trace -----------------------------------------------------------------
class Access(_Strict):
    key: str = Field("access", description="document metadata key holding its permission tags (comma-separated)")
    untagged: Literal["visible", "hidden"] = Field(
        "visible", description="documents without tags, for a restricted query: visible to everyone, or hidden")
    principals: dict[str, list[str]] = Field(
        default_factory=dict, description="principal name -> tags it may read (query --principal NAME)")
    require_principal: bool = Field(False, description="refuse queries that name no --principal or --allow")


class Trace(_Strict):
    path: Optional[str] = Field(None, description="append one JSONL record per question to this file")


class Contract(_Strict):
    contract_version: int = Field(ge=1, strict=True, description="your version of this contract: bump it on every change")
    data: DataSpec = Field(default_factory=DataSpec)
    preprocess: Preprocess = Field(default_factory=Preprocess)
    retrieve: Retrieve = Field(default_factory=Retrieve)
    postprocess: Postprocess = Field(default_factory=Postprocess)
    context: Context = Field(default_factory=Context)
    decide: Decide = Field(default_factory=Decide)
    access: Access = Field(default_factory=Access)
    trace: Trace = Field(default_factory=Trace)
    calibration: Optional[dict[str, Any]] = Field(
        None, description="written by `kbtool calibrate --write`: what this contract was calibrated on, and the result")

    def rule_for(self, types: set[str], available=None):
        """The first rule of ``retrieve.rules`` that applies to a question of these detected types
        (a ``cjk`` rule is skipped for a multilingual model; with ``available``, the retrievers of the
        store, a rule weighing a bundled retriever it lacks is skipped), or None: ``retrieve.fusion.weights``."""
        for rule in self.retrieve.rules:
            if rule.when == "cjk" and self.retrieve.model_multilingual:
                continue
            if available is not None and any(w > 0 and r in BUNDLED_RETRIEVERS and r not in available
                                             for r, w in rule.weights.as_dict().items()):
                continue
            if rule.when in types:
                return rule
        return None

    def weights_for(self, types: set[str]) -> tuple[float, float]:
        """(dense, bm25) weights, summing to 1, for a question of these detected types on a store of
        these two retrievers."""
        rule = self.rule_for(types, ("dense", "bm25"))
        return (rule or self.retrieve.fusion).weights.normalised()

    def retriever_weights(self, types: set[str], available) -> dict[str, float]:
        """retriever -> weight (> 0, summing to 1) a question of these detected types is fused with,
        over the retrievers a store has (``available``): the first matching rule's, else
        ``retrieve.fusion.weights``; a single-retriever method weighs that one alone."""
        method = self.retrieve.fusion.method
        if method not in ("weighted", "rrf"):
            if method not in available:
                raise ContractError(f"retrieve.fusion.method (or the mode): the store has no retriever {method} "
                                    f"(it has {', '.join(available)}): add the model with `kbtool index "
                                    f"--add-model`, or use one of these")
            return {method: 1.0}
        rule = self.rule_for(types, available)
        if rule is None:
            return self.retrieve.fusion.weights.over(available)
        return rule.weights.over(available, f"retrieve.rules[{self.retrieve.rules.index(rule)}].weights")

    def thresholds_for(self, types: set[str], tags: set[str] = frozenset()) -> tuple[str, Thresholds]:
        """(tier name, thresholds) for a question; 'default' when no tier matches."""
        for name, tier in self.decide.tiers.items():
            if name in types or name in tags:
                return name, tier
        return "default", self.decide.thresholds

    def to_dict(self) -> dict:
        return self.model_dump(mode="json")


def default_contract() -> Contract:
    return Contract(contract_version=1)


# ---- loading --------------------------------------------------------------------------------
def find_contract(path: str | Path | None = None) -> Path | None:
    """--contract PATH, else $KBTOOL_CONTRACT, else ./kbtool.yaml if present, else None (the default)."""
    if path:
        return Path(path)
    env = os.environ.get("KBTOOL_CONTRACT")
    if env:
        return Path(env)
    local = Path(CONTRACT_FILE)
    return local if local.is_file() else None


def contract_source(source: str | Path | None, contract: "Contract") -> dict:
    """Which contract is in force, as ``query --json`` and the server say it: {"path" (None: the
    built-in one), "version", "calibrated" (the date `kbtool calibrate --write` recorded, or None)}."""
    cal = contract.calibration
    date = cal.get("date") if isinstance(cal, dict) else None
    return {"path": None if source is None else str(source), "version": contract.contract_version,
            "calibrated": str(date)[:10] if date else None}


def load_contract(path: str | Path | None = None, overrides: list[str] | None = None, *,
                  search: bool = True) -> Contract:
    """Load and validate a contract file (or the default), then apply ``a.b=c`` overrides."""
    import yaml

    source = find_contract(path) if search else (Path(path) if path else None)
    if source is None:
        data: dict = default_contract().to_dict()
        where = "the built-in contract"
    else:
        where = str(source)
        try:
            if source.is_file() and source.stat().st_size > MAX_CONTRACT_BYTES:
                raise ContractError(
                    f"{source}: {source.stat().st_size / 2**20:.1f} MB is over the contract size limit of "
                    f"{MAX_CONTRACT_BYTES / 2**20:g} MB: a contract holds settings and short lists (a thesaurus "
                    "that large would slow every query); trim it")
            text = source.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ContractError(f"{source}: no such contract file (create one with `kbtool contract init`)") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ContractError(f"{source}: cannot read it ({exc})") from None
        try:
            data = yaml.load(text, Loader=_strict_loader(source))  # noqa: S506 (a SafeLoader)
        except RecursionError:
            raise ContractError(f"{source}: nested too deeply to be a contract") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = f":{mark.line + 1}" if mark else ""
            raise ContractError(f"{source}{line}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
        if not isinstance(data, dict):
            raise ContractError(f"{source}: a contract is a YAML mapping with contract_version, retrieve, ...")
        _thresholds_without_model(data)
    for item in overrides or []:
        apply_override(data, item)
    if overrides:
        where += " with overrides " + " ".join(overrides)
    contract = validate_contract(data, where)
    sens = contract.postprocess.sensitive
    if sens.lexicon:  # relative to the contract's folder (made absolute: copies keep it); read and checked now
        rules = sens.rules(source.resolve().parent if source is not None else Path.cwd())
        sens._written, sens.lexicon = sens.lexicon, lexicon_path(sens.lexicon, source)
        sens._rules = rules
    return contract


def lexicon_path(name: str, source: Optional[Path]) -> str:
    """postprocess.sensitive.lexicon as an absolute path: relative to the folder of the contract
    file ``source`` (None: the current folder)."""
    written = Path(name).expanduser()
    base = source.resolve().parent if source is not None else Path.cwd()
    return str(written if written.is_absolute() else base / written)


MAX_CONTRACT_BYTES = 2**20  # 1 MB

# The confidence rule's defaults before decide.model existed (thresholds on the best hit's confidence).
_CONFIDENCE_THRESHOLDS = {"answer": 0.5, "low_confidence": 0.4}
_CONFIDENCE_TIERS = {"identifier": {"answer": 0.45, "low_confidence": 0.35}}


def _thresholds_without_model(data: dict) -> None:
    """A contract file whose ``decide`` sets thresholds or tiers but no ``model`` was written for the
    best hit's confidence (``contract init`` and ``calibrate --write`` before kbtool had a model
    wrote exactly that): it keeps that meaning, ``decide.model: null``, with the defaults of that
    time for what it does not set (the built-in thresholds and tiers now are probabilities). Applied
    to the file before ``--set`` overrides, so an override never changes which model applies.
    ``calibrate --write`` always writes the model its thresholds were chosen with."""
    decide = data.get("decide")
    if not isinstance(decide, dict) or "model" in decide or not ("thresholds" in decide or "tiers" in decide):
        return
    decide["model"] = None
    th = decide.setdefault("thresholds", dict(_CONFIDENCE_THRESHOLDS))
    if isinstance(th, dict):
        for key, value in _CONFIDENCE_THRESHOLDS.items():
            th.setdefault(key, value)
    decide.setdefault("tiers", {k: dict(v) for k, v in _CONFIDENCE_TIERS.items()})


def _strict_loader(source):
    """yaml's SafeLoader that refuses a key given twice in one mapping (YAML keeps the last silently)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen: dict = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, (str, int, float, bool)) and key in seen:
                    raise ContractError(f"{source}:{key_node.start_mark.line + 1}: key {key!r} is given twice "
                                        f"in one mapping (first on line {seen[key]}): keep one")
                seen[key] = key_node.start_mark.line + 1
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def validate_contract(data: Any, where: str = "contract") -> Contract:
    try:
        return Contract.model_validate(data)
    except RecursionError:
        raise ContractError(f"{where}: nested too deeply to be a contract") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        more = len(exc.errors()) - 1
        raise ContractError(f"{where}: {format_error(first)}" + (f" (and {more} more)" if more else "")) from None


def format_error(error: dict) -> str:
    """'retrieve.top_k: must be greater than 0' from a pydantic error."""
    path = ".".join(str(p) for p in error["loc"]) or "(top level)"
    msg = error["msg"]
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, _FieldError):
        path, msg = f"{path}.{cause.field}", cause.message
    msg = re.sub(r"^(Value error|Assertion failed), ", "", msg)
    msg = msg.replace("Input should be", "must be").replace("Extra inputs are not permitted",
                                                            "unknown key (check the spelling)")
    if error["type"] == "missing":
        msg = "required" + (": add `contract_version: 1`" if path == "contract_version" else "")
    return f"{path}: {msg}"


def apply_override(data: dict, item: str) -> None:
    """Set ``a.b.c=value`` in a raw contract mapping; the value is parsed as YAML (numbers, lists)."""
    import yaml

    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ContractError(f"override {item!r} (CLI: --set): write path=value, e.g. retrieve.top_k=8")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except (yaml.YAMLError, ValueError):  # ValueError: a date-like value YAML cannot build (2024-13-01)
        value = raw
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        if isinstance(node, list):
            node = _list_item(node, part, item)
            continue
        nxt = node.get(part) if isinstance(node, dict) else None
        if nxt is None:
            nxt = {}
            node[part] = nxt
        if not isinstance(nxt, (dict, list)):
            raise ContractError(f"override {item!r} (CLI: --set): {part} is not a section")
        node = nxt
    last = parts[-1]
    if isinstance(node, list):
        _list_item(node, last, item)
        node[int(last)] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ContractError(f"override {item!r} (CLI: --set): cannot set inside a value")


def _list_item(items: list, part: str, item: str):
    """``rules.0``: a list element by its index."""
    if not part.isdigit() or int(part) >= len(items):
        raise ContractError(f"override {item!r} (CLI: --set): {part!r} is not an index of a list of {len(items)} item(s)")
    return items[int(part)]


# ---- writing --------------------------------------------------------------------------------
def dump_yaml(contract: Contract, comments: bool = True) -> str:
    """YAML text of a contract; with comments, each key carries its description (the `init` file)."""
    import yaml

    if not comments:
        return yaml.safe_dump(contract.to_dict(), sort_keys=False, allow_unicode=True, width=100)
    head = ("# kbtool retrieval contract: how a question becomes an answer.\n"
            "# Validate with `kbtool contract validate`, see the effective one with `kbtool contract show`.\n")
    return head + "".join(_dump_model(contract, 0))


def _dump_model(model: BaseModel, indent: int):
    import yaml

    pad = "  " * indent
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        if info.description:
            yield f"{pad}# {info.description}\n"
        if isinstance(value, BaseModel):
            yield f"{pad}{name}:\n"
            yield from _dump_model(value, indent + 1)
            continue
        plain = value.model_dump(mode="json") if isinstance(value, BaseModel) else _plain(value)
        if isinstance(plain, (dict, list)) and plain:
            text = yaml.safe_dump({name: plain}, sort_keys=False, allow_unicode=True, width=100)
            yield "".join(f"{pad}{line}\n" for line in text.splitlines())
        else:
            yield f"{pad}{name}: {_scalar(plain)}\n"


def _plain(value):
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _scalar(value) -> str:
    import json

    import yaml

    if isinstance(value, str) and "\n" in value:
        return json.dumps(value, ensure_ascii=False)  # one line, double-quoted: diffs and edits stay small

    text = yaml.safe_dump(value, allow_unicode=True, width=10**6, default_flow_style=True).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def check_against_store(contract: Contract, store) -> list[str]:
    """Problems between a contract and a store: required metadata missing from documents, filters
    on keys no document carries."""
    from .filters import parse_filter

    problems = []
    keys = store.metadata_keys()
    metas = store.chunk_metadata()
    docs: dict[str, dict] = {}
    for _, doc_id, meta in metas:
        docs.setdefault(doc_id, meta)
    for name, spec in contract.data.metadata.items():
        if spec.required:
            missing = [d for d, m in docs.items() if name not in m]
            if missing:
                problems.append(f"data.metadata.{name}: required, but {len(missing)} document(s) lack it, "
                                f"e.g. {missing[0]} (set it with `kbtool ingest --meta {name}=...`)")
    for i, spec in enumerate(contract.retrieve.filters):
        f = parse_filter(spec)
        if f.key not in keys:
            problems.append(f"retrieve.filters.{i}: no document carries {f.key!r}")
    return problems


# ---- calibration ----------------------------------------------------------------------------
def calibrated_text(text: str | None, contract: Contract, result) -> str:
    """The contract file's text with a calibration applied: tuned fields set, contract_version
    bumped, the appendix recorded; comments, quoting and key order kept (ruamel.yaml round trip,
    values set in place). ``text`` None means the built-in contract (its commented form is the
    starting point). Threshold tiers become exactly those the calibration measured, so the rates
    it reports are what the written contract does."""
    import io

    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.width = 4096
    yaml.preserve_quotes = True
    yaml.indent(mapping=2, sequence=2, offset=0)  # the layout `contract init` writes
    yaml.representer.add_representer(
        type(None), lambda rep, _: rep.represent_scalar("tag:yaml.org,2002:null", "null"))
    data = yaml.load(text if text is not None else dump_yaml(contract))
    _put(data, ["contract_version"], int(data.get("contract_version", contract.contract_version)) + 1)
    if result.adopted:
        p = result.proposed
        _put(data, ["retrieve", "fusion", "method"], p["method"])
        if p["method"] == "weighted":
            _put(data, ["retrieve", "fusion", "normalization"], p["normalization"])
        else:
            _put(data, ["retrieve", "fusion", "rrf_k"], p["rrf_k"])
        # Weights are retriever -> weight over the store's retrievers: those set, any other a
        # weight names (a bundled model the store lacks) left as written.
        shared = _retriever_weights(p["weights"])
        if not _fuses_as(((data["retrieve"].get("fusion") or {}).get("weights")), shared):
            for name, w in shared.items():
                _put(data, ["retrieve", "fusion", "weights", name], w)
        retrieve = data["retrieve"]
        if retrieve.get("rules") is None:
            retrieve["rules"] = [r.model_dump() for r in contract.retrieve.rules]
        rules = retrieve["rules"]
        wanted = {**{g: _retriever_weights(w) for g, w in p["group_weights"].items()}, "other": shared}
        for group, ws in wanted.items():
            # Only the rule the pipeline applies on this store (``rule_for``: the first of its type
            # that weighs no bundled retriever the store lacks) takes the weights: the others stay
            # as written, for a store with (or without) that retriever.
            matching = [r for r in rules if r.get("when") == group and not _skipped_here(r.get("weights"), ws)][:1]
            if not matching and group == "other":
                continue  # "other" questions use fusion.weights
            if not matching:
                rules.append({"when": group, "weights": {name: round(w, 4) for name, w in ws.items()}})
            for rule in (r for r in matching if not _fuses_as(r.get("weights"), ws)):
                for name, w in ws.items():
                    _put(rule, ["weights", name], round(w, 4))
    model = getattr(result, "model", None)
    if model is not None:
        _put(data, ["decide", "model"], model)
    elif result.thresholds and "model" not in (data.get("decide") or {}):
        # thresholds chosen with the contract's own model (or none): the file says which
        kept = contract.decide.model
        _put(data, ["decide", "model"], None if kept is None else kept.model_dump(mode="json"))
    if result.thresholds:
        d = result.thresholds["default"]
        _put(data, ["decide", "thresholds", "answer"], d["answer"])
        _put(data, ["decide", "thresholds", "low_confidence"], d["low_confidence"])
        decide = data["decide"]
        tiers = decide.get("tiers")
        new_tiers = {name: {"answer": t["answer"], "low_confidence": t["low_confidence"]}
                     for name, t in result.thresholds["tiers"].items()}
        if tiers is None or not hasattr(tiers, "keys"):
            decide["tiers"] = new_tiers
        else:
            for name in [k for k in tiers.keys() if k not in new_tiers]:
                del tiers[name]
            for name, t in new_tiers.items():
                _put(tiers, [name, "answer"], t["answer"])
                _put(tiers, [name, "low_confidence"], t["low_confidence"])
    data["calibration"] = _plain(result.appendix)
    out = io.StringIO()
    yaml.dump(data, out)
    new = out.getvalue()
    validate_contract(yaml_load_plain(new), "the calibrated contract")
    return new


def _retriever_weights(w) -> dict[str, float]:
    """A proposal's weights: retriever -> weight (a bare number, as calibrate wrote it before
    stores had more than two retrievers: the dense weight beside bm25)."""
    if isinstance(w, dict):
        return dict(w)
    return {"dense": round(w, 4), "bm25": round(1 - w, 4)}


def _skipped_here(written, weights: dict[str, float]) -> bool:
    """Whether a rule's weights as written name a bundled retriever (``BUNDLED_RETRIEVERS``) with a
    weight while the store (the retrievers of ``weights``) lacks it: ``rule_for`` skips that rule."""
    if not hasattr(written, "get"):
        return False
    try:
        return any(name in BUNDLED_RETRIEVERS and name not in weights and float(written.get(name) or 0) > 0
                   for name in written)
    except (TypeError, ValueError):
        return False


def _fuses_as(written, weights: dict[str, float]) -> bool:
    """Whether weights as written (a mapping, or None) already fuse as ``weights`` (retriever ->
    weight over the store's retrievers, rounded to 4 places): a rule kept as written (a type with
    too few questions) or already at the proposal is left alone, whatever it gives the others."""
    if not hasattr(written, "get"):
        return False
    try:
        mine = {name: float(written.get(name, 0.0)) for name in weights}
    except (TypeError, ValueError):
        return False
    total = sum(mine.values())
    return total > 0 and all(abs(mine[name] / total - w) <= 5e-5 for name, w in weights.items())


def _put(node, path: list[str], value) -> None:
    """Set a value in place, creating mappings on the way: comments on existing keys survive."""
    for key in path[:-1]:
        if node.get(key) is None or not hasattr(node.get(key), "keys"):
            node[key] = {}
        node = node[key]
    node[path[-1]] = value


def yaml_load_plain(text: str):
    import yaml

    return yaml.safe_load(text)
