"""The contract's ``preprocess`` and ``retrieve`` sections: how a question is cleaned, which
retrievers and how many candidates, how they are fused (and per detected question type)."""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_serializer, model_validator

from ..errors import ContractError, did_you_mean
from .base import ADDED_RETRIEVER, BUNDLED_RETRIEVERS, QUESTION_TYPES, RETRIEVER, RRF_K, _FieldError, _Strict, same_kind


# ---- 2. preprocess --------------------------------------------------------------------------
class Preprocess(_Strict):
    """How a question is prepared: clean-up, truncation, thesaurus expansion, Chinese question words."""

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
    cjk_question_words: Literal["drop", "keep"] = Field(
        "drop", description="Chinese function and question words (的, 了, 是, 怎么, 如何, 什么, 可以 …) in a question: "
                            "left out of its BM25 terms (drop) or kept; every Chinese page holds them")

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


class Weights(_Strict):
    """Weights by retriever name: ``dense`` and ``bm25``, and ``dense:NAME`` for a model added to the
    store (``kbtool index --add-model``). They are normalised over the retrievers the store has."""

    model_config = ConfigDict(extra="allow", validate_assignment=True, json_schema_extra={
        "patternProperties": {f"^{ADDED_RETRIEVER}$": {"type": "number", "minimum": 0, "maximum": 1}},
        "additionalProperties": False})
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
                raise ContractError(f"{where}.{name}: the store has no retriever {name}{did_you_mean(name, same_kind(name, available))} (it has "
                                    f"{', '.join(available)}): add the model with `kbtool index --add-model`, "
                                    "or remove the weight")
        total = sum(out.values())
        if total <= 0:
            raise ContractError(f"{where}: no retriever the store has ({', '.join(available)}) has a weight above 0")
        return {k: v / total for k, v in out.items()}


class Fusion(_Strict):
    """How the retrievers' candidates become one list: the method, its parameters, and the
    weights when no rule matches."""

    method: str = Field(
        "weighted", description="weighted (normalised scores), rrf (reciprocal rank), or one retriever alone "
                                "(dense, bm25, dense:NAME)",
        json_schema_extra={"pattern": rf"^(weighted|rrf|bm25|dense|{ADDED_RETRIEVER})$",
                           "examples": ["weighted", "rrf", "dense", "bm25"]})
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


QuestionType = Literal["identifier", "cjk", "cjk_identifier", "other"]


class When(_Strict):
    """A rule's conditions, every one given must hold: the question's detected ``type`` and signals
    known before fusion. ``bm25_coverage_below``: the best BM25 coverage among the question's
    candidates (best BM25 score / the score of a chunk holding every query term at its best, 0–1)
    is below this; never holds without a BM25 index."""

    type: Optional[QuestionType] = Field(None, description="a detected question type")
    bm25_coverage_below: Optional[float] = Field(
        None, gt=0, le=1, description="the best BM25 coverage among the candidates is below this (0-1]")

    @model_validator(mode="after")
    def _some_condition(self):
        if self.type is None and self.bm25_coverage_below is None:
            raise ValueError("give a condition: type, bm25_coverage_below or both")
        return self

    @model_serializer(mode="wrap")
    def _given(self, handler):
        return {k: v for k, v in handler(self).items() if v is not None}

    def __hash__(self):  # a rule's ``when`` keys a mapping as a type name does
        return hash((self.type, self.bm25_coverage_below))

    def holds(self, types: set[str], bm25_coverage: float | None) -> bool:
        if self.type is not None and self.type not in types:
            return False
        cut = self.bm25_coverage_below
        return cut is None or (bm25_coverage is not None and bm25_coverage < cut)


class Rule(_Strict):
    """Weights for the questions a condition picks (a detected type, BM25 coverage); the first
    matching rule applies."""

    when: Union[QuestionType, When] = Field(
        description="a detected question type (identifier, cjk, cjk_identifier: both, other), or conditions "
                    "{type: ..., bm25_coverage_below: ...} that must all hold")
    weights: Weights

    @field_validator("when", mode="before")
    @classmethod
    def _when(cls, v):
        if isinstance(v, str):
            if v not in QUESTION_TYPES:
                raise ValueError(f"unknown question type {v!r}: use {', '.join(QUESTION_TYPES)}, or conditions "
                                 "{type: ..., bm25_coverage_below: ...}")
            return v
        if isinstance(v, dict):
            try:
                return When.model_validate(v)
            except ValidationError as exc:
                err = exc.errors()[0]
                field = ".".join(str(p) for p in err["loc"])
                msg = str(err["msg"]).removeprefix("Value error, ").replace(
                    "Extra inputs are not permitted", "unknown key (use type or bm25_coverage_below)")
                if not field:
                    raise ValueError(msg) from None
                raise _FieldError(field, msg) from None
        if isinstance(v, When):
            return v
        raise ValueError("give a question type (identifier, cjk, other) or a mapping of conditions")

    @property
    def type(self) -> str | None:
        """The question type the rule requires (None: any)."""
        return self.when if isinstance(self.when, str) else self.when.type

    @property
    def signals(self) -> bool:
        """Whether the rule conditions on a signal, not on the question type alone."""
        return isinstance(self.when, When) and self.when.bm25_coverage_below is not None

    def holds(self, types: set[str], bm25_coverage: float | None = None) -> bool:
        """Whether it applies to a question of these detected types and this BM25 coverage (None:
        unknown, and a coverage condition does not hold)."""
        return self.when in types if isinstance(self.when, str) else self.when.holds(types, bm25_coverage)


def _default_rules() -> list[Rule]:
    return [
        # A Chinese question naming an API or product (如何在 FastAPI 中启用 CORS): its identifier wants
        # BM25's exact match, its Chinese words the multilingual model; MiniLM reads neither well. On
        # the 31 such questions of eval_sets/fastapi-zh.jsonl, nDCG@10 (chunk / document): the
        # identifier rule below 0.787 / 0.928, bm25 0.5 + use-m 0.5 0.848 / 0.946 (0.7/0.3: 0.819 /
        # 0.961; 0.3/0.7: 0.831 / 0.967); on the sample's 5, 0.803 -> 0.925. Without use-m: skipped.
        Rule(when="cjk_identifier", weights=Weights(**{"dense": 0.0, "bm25": 0.5, "dense:use-m": 0.5})),
        # Error codes, versions, API paths, config keys: BM25 matches them exactly, the model does not.
        Rule(when="identifier", weights=Weights(dense=0.3, bm25=0.7)),
        # With the bundled multilingual model added (`kbtool index --add-model use-m`), a CJK question
        # whose words BM25 barely finds (best coverage below 0.4: a paraphrase) is led by it, 0.7 of
        # the weight; one whose words BM25 finds is led by BM25, 0.9 (MiniLM's vectors of Chinese
        # text are noise: it gets none). Chosen on CMRC 2018's 1,000 trial questions and
        # eval_sets/fastapi-zh.jsonl (the best mean nDCG@10 of CMRC, fastapi-zh's pages and its
        # chunks, with CMRC at least 0.002 above BM25 alone; bench/cjk_weights.py), judged on CMRC's
        # 3,219 dev questions (0.972 -> 0.988, BM25 alone 0.987); the sample's 37 Chinese questions,
        # held out, lose (chunks 0.754 -> 0.702): bench/RESULTS.md, "Chinese documentation". A rule
        # weighing a bundled retriever the store lacks is skipped: the next applies.
        Rule(when=When(type="cjk", bm25_coverage_below=0.4), weights=Weights(**{"dense": 0.0, "bm25": 0.3, "dense:use-m": 0.7})),
        Rule(when="cjk", weights=Weights(**{"dense": 0.0, "bm25": 0.9, "dense:use-m": 0.1})),
        # A CJK question on a model not declared multilingual: the vectors carry little meaning.
        Rule(when="cjk", weights=Weights(dense=0.1, bm25=0.9)),
        # Any other question whose words BM25 barely finds (a paraphrase): BM25's share would pull
        # the model's ranking down, so dense leads — alone below 0.25, at 0.8 below 0.35 (chosen on
        # sample, fastapi-docs and Cranfield: the most paraphrase nDCG@10 with no set's overall
        # nDCG@10 lower; bench/FUSION_RULES.md). Cranfield's long questions sit at 0.2–0.4 and
        # still gain from BM25: higher cut-offs cost it.
        Rule(when=When(bm25_coverage_below=0.25), weights=Weights(dense=1.0, bm25=0.0)),
        Rule(when=When(bm25_coverage_below=0.35), weights=Weights(dense=0.8, bm25=0.2)),
    ]


class Language(_Strict):
    """Which documents a question is searched in, by language: a document's language is its
    metadata ``key`` (``data.meta_from_path: ['docs/{lang}/**']``, a source's ``--meta lang=zh``); a
    question's is its script (Chinese/Japanese/Korean, or any other)."""

    route: Literal["prefer", "only", "off"] = Field(
        "prefer", description="prefer: a question is searched among the documents in its language when the "
                              "scope holds any, else among all; only: among those alone; off: among all",
        json_schema_extra={"enum": ["prefer", "only", "off", False], "type": ["string", "boolean"]})  # YAML 1.1: off
    key: str = Field("lang", min_length=1, description="the metadata key holding a document's language "
                                                       "(en, zh, zh-hant, ja, ...)")

    @field_validator("route", mode="before")
    @classmethod
    def _yaml_off(cls, v):
        return "off" if v is False else v  # YAML reads a bare `off` as false


class Retrieve(_Strict):
    """Which retrievers and how many candidates, how they are fused (per question by rules),
    filters, language routing."""

    top_k: int = Field(5, gt=0, description="results returned")
    candidates: int = Field(100, gt=0, description="candidates taken from each retriever before fusion")
    fusion: Fusion = Field(default_factory=Fusion)
    rules: list[Rule] = Field(default_factory=_default_rules,
                              description="per detected question type, the first matching rule's weights")
    model_multilingual: bool = Field(
        False, description="the embedding model reads CJK: the cjk rule is then not applied")
    filters: list[str] = Field(default_factory=list,
                               description="filters applied to every question, same syntax as --filter")
    language: Language = Field(default_factory=Language,
                               description="route a question to the documents in its language (documents without one: always)")

    @field_validator("filters")
    @classmethod
    def _filters_parse(cls, v):
        from ..filters import parse_filter

        for spec in v:
            try:
                parse_filter(spec)
            except ValueError as exc:
                raise ValueError(str(exc)) from None
        return v

