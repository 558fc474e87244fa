"""The contract's schema: pure data, no I/O. ``Contract`` and its ``data``, ``decide``, ``access``
and ``trace`` sections; ``preprocess``/``retrieve`` and ``postprocess``/``context`` are in the
modules of those names."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_serializer, model_validator

from ..document import normalise_id_prefix
from ..errors import ContractError, did_you_mean
from .base import BUNDLED_RETRIEVERS, FEATURES, _Strict, same_kind
from .postprocess import Context, Postprocess
from .retrieve import Preprocess, Retrieve


# ---- 1. data spec ---------------------------------------------------------------------------
class MetadataField(_Strict):
    """A metadata key documents carry: its type, whether every document must carry it, whether
    filters may use it."""

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
    """A folder `kbtool ingest` (without a path) ingests, with the options it is ingested with."""

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
        from ..errors import UsageError

        try:
            if info.field_name == "meta":
                from ..document import check_metadata_keys

                check_metadata_keys(v)
            elif info.field_name == "meta_from_path":
                from ..document import path_pattern

                for pattern in v:
                    path_pattern(pattern)
            elif info.field_name == "encoding" and v:
                import codecs

                try:
                    codecs.lookup(v)
                except LookupError:
                    raise ValueError(f"unknown encoding {v!r}: e.g. utf-8, latin-1, cp1252, gb18030") from None
            elif info.field_name == "markup_off":
                from ..ingestion.markup import MarkupRules

                MarkupRules.parse(v)
        except UsageError as exc:
            raise ValueError(str(exc).replace("--markup-off ", "")) from None
        return v


class DataSpec(_Strict):
    """What documents carry and where they come from: metadata keys, the sources `kbtool ingest`
    reads, the kept-text guard."""

    metadata: dict[str, MetadataField] = Field(
        default_factory=_default_metadata,
        description="metadata keys documents carry (doc_id, dir, filetype and page are set by kbtool; "
                    "others come from `ingest --meta key=value`)")
    sources: list[Source] = Field(
        default_factory=list,
        description="the roots `kbtool ingest` (without a path) ingests, each with its options; empty: the "
                    "folders given to `ingest`, remembered by the store")
    min_kept_text: float = Field(
        0.98, ge=0, le=1,
        description="kept-text guard: a Markdown, text or HTML document whose chunks keep less than this share of "
                    "the words a reader sees in its file is listed by `ingest` (a warning; `ingest --strict` exits "
                    "1), `status` and `doctor`")

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


# ---- 5. confidence and tiers ----------------------------------------------------------------
class Thresholds(_Strict):
    """P(answerable) (or, without decide.model, the top hit's confidence) at or above `answer`:
    answer; at or above `low_confidence`: answer with a notice; below: refuse."""

    answer: float = Field(0.8796, ge=0, le=1, description="P(answerable) (without decide.model: the top hit's confidence) at or above: answer")
    low_confidence: float = Field(
        0.8254, ge=0, le=1, description="at or above (and below answer): answer with an uncertainty notice; below: refuse "
                                        "(with decide.refuse.needs_evidence: only on evidence of absence)")

    @model_validator(mode="after")
    def _ordered(self):
        if self.low_confidence > self.answer:
            raise ValueError("low_confidence must not be above answer")
        return self


def _default_tiers() -> dict[str, Thresholds]:
    # The built-in thresholds above were chosen by calibrate's rule on the built-in model's
    # out-of-fold P(answerable) over both built-in sets (false refusals at most
    # decide.refuse.max_false_refusal, 5 %; answered plainly: at most 5 % unanswerable). A named
    # thing absent now carries identifier questions' refusals, so they need no tier of their own.
    return {}


class PlattMap(_Strict):
    """Platt scaling: maps the model's score to a probability."""

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
    # Fitted on every labelled question the project has: eval_sets/sample.jsonl (the sample corpus)
    # and eval_sets/fastapi-docs.jsonl (FastAPI's docs), all-MiniLM-L6-v2, the built-in fusion; 181
    # answerable and 56 unanswerable questions, on 2026-12-04 (bench/builtin_model.py fits it; bench/ANSWERABILITY.md
    # holds the script and the leave-one-set-out numbers: fitted on one set, scored on the other,
    # AUC 0.836 on sample and 0.931 on fastapi-docs; the previous model's 0.744 and 0.864).
    # Pooled out of fold: AUC 0.865, Brier 0.1022, calibration error 0.0596. A starting point only:
    # `kbtool calibrate` on your own labelled questions fits one for your knowledge base.
    return AnswerabilityModel(coefficients={
        "relevance": 1.722245,
        "cosine": 0.0,
        "coverage": 0.134773,
        "absent_top": -1.581224,
        "named_absent_kb": -2.3702,
        "named_absent_top": -1.152351,
        "dense_margin": 4.220745,
    }, intercept=0.588637, calibration=PlattMap(slope=0.987864, offset=1.186071),
        fitted_on={"question_set": "sample + fastapi-docs (built in)", "questions": 237, "answerable": 181,
                   "unanswerable": 56, "date": "2026-12-04",
                   "oof": {"auc": 0.8652, "brier": 0.1022, "calibration_error": 0.0596}})


class Refuse(_Strict):
    """When a question below ``low_confidence`` is refused, and what calibrate aims the refuse tier at."""

    needs_evidence: bool = Field(
        True, description="refuse only on evidence of absence: a named thing the top documents never mention "
                          "(weight >= named) or nothing near (best cosine < near); else low_confidence, with the "
                          "context and the notice. false: every question below low_confidence is refused")
    named: float = Field(0.5, ge=0, le=1, description="named_absent_top at or above: a named thing is missing")
    near: float = Field(0.2, ge=-1, le=1, description="best cosine below: nothing near the question at all")
    max_false_refusal: float = Field(
        0.05, ge=0, le=1, description="calibrate's target: the share of answerable questions the refuse tier may refuse")


class Decide(_Strict):
    """Whether to answer: the answerability model, thresholds on P(answerable), tiers per
    question type or tag, and when a question is refused."""

    refuse: Refuse = Field(default_factory=Refuse)
    model: Optional[AnswerabilityModel] = Field(
        default_factory=_default_model, description="answerability model: thresholds compare P(answerable) from it; "
                          "null: they compare the best hit's confidence")
    thresholds: Thresholds = Field(default_factory=Thresholds)
    tiers: dict[str, Thresholds] = Field(
        default_factory=_default_tiers,
        description="thresholds per detected type (identifier, cjk, other) or question tag; first match wins")


# ---- 6. access and 7. trace -----------------------------------------------------------------
class Access(_Strict):
    """Who may see what: documents' permission tags, named principals and the tags they may read."""

    key: str = Field("access", description="document metadata key holding its permission tags (comma-separated)")
    untagged: Literal["visible", "hidden"] = Field(
        "visible", description="documents without tags, for a restricted query: visible to everyone, or hidden")
    principals: dict[str, list[str]] = Field(
        default_factory=dict, description="principal name -> tags it may read (query --principal NAME)")
    require_principal: bool = Field(False, description="refuse queries that name no --principal or --allow")


class Trace(_Strict):
    """A JSONL record per question (as `query --trace` writes)."""

    path: Optional[str] = Field(None, description="append one JSONL record per question to this file")


# ---- 8. the calibration appendix ------------------------------------------------------------
class _Record(BaseModel):
    """A record ``kbtool calibrate --write`` wrote: every key kept (an older kbtool wrote fewer, a
    newer one may write more) and dumped as written, only the keys given, in their order. Empty,
    it is no record (false, as the empty mapping it replaced)."""

    model_config = ConfigDict(extra="allow")
    _order: tuple = PrivateAttr(())  # the keys as given

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data, handler):
        record = handler(data)
        if isinstance(data, dict):
            record._order = tuple(data)
        return record

    @model_serializer(mode="wrap")
    def _as_written(self, handler):
        out = handler(self)
        given = set(self.model_fields_set) | set(self.model_extra or {})
        keys = [k for k in self._order if k in given] + [k for k in out if k in given and k not in self._order]
        return {k: out[k] for k in keys}

    def __bool__(self) -> bool:
        return bool(self.model_fields_set or self.model_extra)

    def to_dict(self) -> dict:
        return self.model_dump()


class Recorded(_Record):
    """What the calibrated contract scored on the whole question set (``eval --fail-under-recorded``)."""

    metrics: Optional[dict[str, Any]] = None  # metric name (ndcg@10) -> mean, rounded to 6
    refusal: Optional[dict[str, Any]] = None  # {unanswerable, correctly_refused, answerable, wrongly_refused} counts


class CalibrationRecord(_Record):
    """The contract's ``calibration`` appendix: what it was calibrated on, and the result."""

    date: Any = None  # when, ISO 8601 (YAML may read an unquoted one as a datetime)
    kbtool_version: Optional[str] = None
    question_set: Optional[dict[str, Any]] = None  # path, sha256, questions_fingerprint, counts (provenance)
    store: Optional[dict[str, Any]] = None  # the store's fingerprint as the calibrating caller saw it
    objective: Optional[str] = None
    folds: Optional[int] = None
    seed: Optional[int] = None
    heldout: Optional[dict[str, Any]] = None  # held-out objective: chosen, current, each retriever, gain, p_value
    adopted: Optional[bool] = None
    thresholds: Optional[dict[str, Any]] = None  # default, tiers, overall: thresholds and their rates
    answerability: Optional[dict[str, Any]] = None  # fitted, oof quality, heldout_thresholds
    recorded: Optional[Recorded] = None


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
    calibration: Optional[CalibrationRecord] = Field(
        None, description="written by `kbtool calibrate --write`: what this contract was calibrated on, and the result")

    def rule_for(self, types: set[str], available=None, bm25_coverage: float | None = None):
        """The first rule of ``retrieve.rules`` that applies to a question of these detected types
        and this BM25 coverage (``query.routing.bm25_coverage``; None: unknown, no coverage condition
        holds); a ``cjk`` rule is skipped for a multilingual model; with ``available``, the retrievers
        of the store, a rule weighing a bundled retriever it lacks is skipped. None: ``retrieve.fusion.weights``."""
        for rule in self.retrieve.rules:
            if rule.type in ("cjk", "cjk_identifier") and self.retrieve.model_multilingual:
                continue
            if available is not None and any(w > 0 and r in BUNDLED_RETRIEVERS and r not in available
                                             for r, w in rule.weights.as_dict().items()):
                continue
            if rule.holds(types, bm25_coverage):
                return rule
        return None

    def weights_for(self, types: set[str], bm25_coverage: float | None = None) -> tuple[float, float]:
        """(dense, bm25) weights, summing to 1, for a question of these detected types (and BM25
        coverage) on a store of these two retrievers."""
        rule = self.rule_for(types, ("dense", "bm25"), bm25_coverage)
        return (rule or self.retrieve.fusion).weights.normalised()

    def retriever_weights(self, types: set[str], available, bm25_coverage: float | None = None) -> dict[str, float]:
        """retriever -> weight (> 0, summing to 1) a question of these detected types (and BM25
        coverage) is fused with, over the retrievers a store has (``available``): the first matching
        rule's, else ``retrieve.fusion.weights``; a single-retriever method weighs that one alone."""
        method = self.retrieve.fusion.method
        if method not in ("weighted", "rrf"):
            if method not in available:
                raise ContractError(f"retrieve.fusion.method (or the mode): the store has no retriever {method}"
                                    f"{did_you_mean(method, same_kind(method, available))} (it has {', '.join(available)}): add the model with `kbtool index "
                                    f"--add-model`, or use one of these")
            return {method: 1.0}
        rule = self.rule_for(types, available, bm25_coverage)
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



# ---- the JSON Schema, for editors -----------------------------------------------------------
SCHEMA_FILE = "kbtool.schema.json"  # where `contract init --schema` writes it, beside the contract


def json_schema() -> dict:
    """The JSON Schema of a contract file, generated from these models (descriptions included), for
    editors that validate and complete YAML against one (yaml-language-server: VS Code's YAML
    extension, Neovim, Helix). Declared draft-07, the draft yaml-language-server validates; pydantic's
    output uses nothing later (``$defs`` is reached by JSON pointer). What a model checks in code
    (low_confidence not above answer, a filter's syntax) is left to ``kbtool contract validate``."""
    from .. import __version__

    schema = Contract.model_json_schema()
    return {"$schema": "http://json-schema.org/draft-07/schema#",
            "title": "kbtool retrieval contract (kbtool.yaml)",
            "description": "How a question becomes an answer: preprocessing, retrieval and fusion, post-processing, "
                           "the context block, when to answer or refuse, and who may see what. Check a file with "
                           "`kbtool contract validate`.",
            "$comment": f"generated by kbtool {__version__} (`kbtool contract schema`); regenerate after upgrading",
            **{k: v for k, v in schema.items() if k not in ("title", "description")}}
