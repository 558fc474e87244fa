"""Writing a contract: ``dump_yaml`` (the commented file ``contract init`` writes) and
``calibrated_text`` (a contract file with a calibration applied, comments and order kept)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from pydantic import BaseModel

from .base import BUNDLED_RETRIEVERS, _Strict
from .load import validate_contract
from .retrieve import Rule, Weights
from .schema import AnswerabilityModel, CalibrationRecord, Contract, Thresholds
from .yamledit import commented, layout, round_trip, set_value, set_items


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
        if isinstance(value, _Strict):  # a section (a record, e.g. the calibration appendix, is written whole)
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


# ---- calibration ----------------------------------------------------------------------------
@dataclass(frozen=True)
class FusionProposal:
    """The fusion calibrate adopted: retriever -> weight over the store's retrievers for an 'other'
    question (``weights``) and per question type (``group_weights``); ``coverage_rules``
    ([{bm25_coverage_below, weights}]) replace the contract's untyped BM25-coverage rules (None:
    they stay as written)."""

    method: str
    normalization: str
    rrf_k: int
    weights: dict
    group_weights: dict = field(default_factory=dict)
    coverage_rules: Optional[list] = None


@dataclass(frozen=True)
class Calibration:
    """What ``kbtool calibrate`` writes into a contract: the adopted fusion (None: kept as
    written), the thresholds chosen (None: none) with exactly these tiers, the answerability model
    they were chosen with (None: the contract's own), and the appendix (``calibration``)."""

    fusion: Optional[FusionProposal] = None
    thresholds: Optional[Thresholds] = None
    tiers: dict = field(default_factory=dict)  # tier name -> Thresholds
    model: Optional[AnswerabilityModel] = None
    record: Optional[CalibrationRecord] = None
    needs_evidence: Optional[bool] = None  # the refuse rule the thresholds were chosen under (decide.refuse)


def calibrated_contract(contract: Contract, cal: Calibration) -> Contract:
    """``contract`` with a calibration applied, as ``calibrated_text`` writes it into the
    built-in contract's file (the two are checked equal in the tests)."""
    retrieve = contract.retrieve
    if cal.fusion is not None:
        retrieve = _fused(retrieve, cal.fusion)
    decide = contract.decide
    if cal.model is not None:
        decide = decide.model_copy(update={"model": cal.model})
    if cal.thresholds is not None:
        kept = [name for name in decide.tiers if name in cal.tiers]
        tiers = {name: cal.tiers[name] for name in [*kept, *(n for n in cal.tiers if n not in kept)]}
        decide = decide.model_copy(update={"thresholds": cal.thresholds, "tiers": tiers})
        if cal.needs_evidence is not None:
            decide = decide.model_copy(update={"refuse": decide.refuse.model_copy(
                update={"needs_evidence": cal.needs_evidence})})
    return contract.model_copy(update={
        "contract_version": contract.contract_version + 1, "retrieve": retrieve, "decide": decide,
        "calibration": cal.record if cal.record is not None else CalibrationRecord()})


def _fused(retrieve, p: FusionProposal):
    """``retrieve`` with the proposal's fusion: what ``_write_fusion`` writes, on the model."""
    fusion = {"method": p.method}
    fusion["normalization" if p.method == "weighted" else "rrf_k"] = (
        p.normalization if p.method == "weighted" else p.rrf_k)
    shared = _retriever_weights(p.weights)
    written = _as_written(retrieve.fusion.weights)
    if not _fuses_as(written, shared):
        fusion["weights"] = Weights.model_validate({**written, **shared})
    rules = list(retrieve.rules)
    for group, ws in _wanted(p, shared).items():
        matching = [i for i, r in enumerate(rules)
                    if rule_group(r) == group and not _skipped_here(_as_written(r.weights), ws)][:1]
        if not matching and group != "other" and "@" not in group:
            rules.append(Rule(when=group, weights=Weights.model_validate({n: round(w, 4) for n, w in ws.items()})))
        for i in (i for i in matching if not _fuses_as(_as_written(rules[i].weights), ws)):
            weights = {**_as_written(rules[i].weights), **{n: round(w, 4) for n, w in ws.items()}}
            rules[i] = rules[i].model_copy(update={"weights": Weights.model_validate(weights)})
    if p.coverage_rules is not None:
        rules = _with_coverage_rules(rules, p.coverage_rules, lambda r: _when_of(r.model_dump(mode="json")),
                                     Rule.model_validate)
    return retrieve.model_copy(update={"fusion": retrieve.fusion.model_copy(update=fusion), "rules": rules})


def rule_group(rule) -> str | None:
    """The calibration group a rule fuses (a ``Rule``, or a rule as written: a mapping): its question
    type; '<type>@<cut-off>' for a rule on a type and BM25 coverage; None for a rule on coverage alone
    (or no rule). ``evaluation.calibrate`` groups questions by it and the writers find rules by it."""
    if rule is not None and not hasattr(rule, "get"):
        rule = rule.model_dump(mode="json")
    when = rule.get("when") if hasattr(rule, "get") else None
    if not hasattr(when, "get"):
        return when
    if not when.get("type"):
        return None
    return when["type"] if when.get("bm25_coverage_below") is None else f"{when['type']}@{when['bm25_coverage_below']}"


def _when_of(rule) -> tuple[str | None, bool]:
    """(question type, conditions on a signal) of a rule as written (a mapping)."""
    when = rule.get("when") if hasattr(rule, "get") else None
    if hasattr(when, "get"):
        return when.get("type"), when.get("bm25_coverage_below") is not None
    return when, False


def _with_coverage_rules(rules: list, proposed: list, when_of, make) -> list:
    """``rules`` with their untyped BM25-coverage rules replaced by the proposed ones, where
    calibrate measured them: after the type rules, before a rule for every 'other' question."""
    kept = [r for r in rules if when_of(r) != (None, True)]
    at = next((i for i, r in enumerate(kept) if when_of(r) == ("other", False)), len(kept))
    new = [make({"when": {"bm25_coverage_below": p["bm25_coverage_below"]},
                 "weights": {name: round(w, 4) for name, w in _retriever_weights(p["weights"]).items()}})
           for p in proposed]
    return [*kept[:at], *new, *kept[at:]]


def _as_written(weights: Weights) -> dict:
    return {"dense": weights.dense, "bm25": weights.bm25, **(weights.model_extra or {})}


def _wanted(p: FusionProposal, shared: dict) -> dict:
    """Group -> retriever weights a proposal gives each rule ('other' last)."""
    return {**{g: _retriever_weights(w) for g, w in p.group_weights.items()}, "other": shared}


def calibrated_text(text: str | None, contract: Contract, cal: Calibration, where=None) -> str:
    """The contract file's text with a calibration applied: tuned fields set, contract_version
    bumped, the appendix recorded. Only the values calibrated change (ruamel.yaml round trip, values
    set in place): every other line keeps its indentation (the file's own, detected), comments,
    quoting, key order and blank lines; a calibrated key the file lacks is added at the end of its
    section. ``text`` None means the built-in contract (its commented form is the starting point).
    ``where``: the file it is written to; the paths it records (the question set) are then
    relative to its folder when under it, else absolute. Threshold tiers become exactly those the
    calibration measured, so the rates it reports are what the written contract does."""
    import io

    yaml = round_trip()
    data = yaml.load(text if text is not None else dump_yaml(contract))
    yaml.indent(**layout(data))
    cal = recorded_paths(cal, where)
    _put(data, ["contract_version"], int(data.get("contract_version", contract.contract_version)) + 1)
    if cal.fusion is not None:
        _write_fusion(data, contract, cal.fusion)
    if cal.model is not None:
        _put(data, ["decide", "model"], cal.model.model_dump(mode="json"))
    elif cal.thresholds is not None and "model" not in (data.get("decide") or {}):
        # thresholds chosen with the contract's own model (or none): the file says which
        kept = contract.decide.model
        _put(data, ["decide", "model"], None if kept is None else kept.model_dump(mode="json"))
    if cal.thresholds is not None:
        _write_thresholds(data, cal)
    _put(data, ["calibration"], _plain(cal.record) if cal.record is not None else {})
    out = io.StringIO()
    yaml.dump(data, out)
    new = out.getvalue()
    validate_contract(yaml_load_plain(new), "the calibrated contract")
    return new


def recorded_paths(cal: Calibration, where) -> Calibration:
    """``cal`` with the paths it records (the question set's, in the appendix and in the model's
    ``fitted_on``) as a contract at ``where`` keeps them: relative to its folder (posix
    separators) when under it, else absolute. ``where`` None: as given."""
    if where is None:
        return cal
    from dataclasses import replace
    from pathlib import Path

    folder = Path(where).absolute().parent.resolve()

    def rel(path):
        if not isinstance(path, str) or not path:
            return path
        full = Path(path).expanduser().absolute().resolve()
        return full.relative_to(folder).as_posix() if full.is_relative_to(folder) else str(full)

    record, model = cal.record, cal.model
    if record is not None and isinstance(record.question_set, dict) and "path" in record.question_set:
        record = record.model_copy(update={"question_set": {**record.question_set,
                                                            "path": rel(record.question_set["path"])}})
    if model is not None and isinstance(model.fitted_on, dict) and "source" in model.fitted_on:
        model = model.model_copy(update={"fitted_on": {**model.fitted_on, "source": rel(model.fitted_on["source"])}})
    return replace(cal, record=record, model=model)


def _write_fusion(data, contract: Contract, p: FusionProposal) -> None:
    fusion = ["retrieve", "fusion"]
    _put(data, [*fusion, "method"], p.method, contract)
    if p.method == "weighted":
        _put(data, [*fusion, "normalization"], p.normalization, contract)
    else:
        _put(data, [*fusion, "rrf_k"], p.rrf_k, contract)
    # Weights are retriever -> weight over the store's retrievers: those set, any other a
    # weight names (a bundled model the store lacks) left as written.
    shared = _retriever_weights(p.weights)
    retrieve = data.get("retrieve") or {}
    weights = (retrieve.get("fusion") or {}).get("weights")
    if not _fuses_as(weights if weights is not None else _as_written(contract.retrieve.fusion.weights), shared):
        for name, w in shared.items():
            _put(data, [*fusion, "weights", name], w)
    retrieve = data.get("retrieve") or {}
    written = retrieve.get("rules")
    # a file without rules has the built-in ones: written out only when a rule changes
    rules = written if written is not None else commented([r.model_dump(mode="json") for r in contract.retrieve.rules])
    before = _plain(rules)
    for group, ws in _wanted(p, shared).items():
        # Only the rule the pipeline applies on this store (``rule_for``: the first of its type
        # that weighs no bundled retriever the store lacks) takes the weights: the others stay
        # as written, for a store with (or without) that retriever.
        matching = [r for r in rules if rule_group(r) == group and not _skipped_here(r.get("weights"), ws)][:1]
        if not matching and (group == "other" or "@" in group):
            continue  # "other" questions use fusion.weights
        if not matching:
            set_value(rules, len(rules), {"when": group, "weights": {name: round(w, 4) for name, w in ws.items()}})
        for rule in (r for r in matching if not _fuses_as(r.get("weights"), ws)):
            for name, w in ws.items():
                _put(rule, ["weights", name], round(w, 4))
    if p.coverage_rules is not None:
        proposed = _with_coverage_rules(list(rules), p.coverage_rules, _when_of, lambda raw: raw)
        if _plain(proposed) != _plain(rules):
            set_items(rules, proposed)
    if written is None and _plain(rules) != before:
        _put(data, ["retrieve", "rules"], rules)


def _write_thresholds(data, cal: Calibration) -> None:
    if cal.needs_evidence is not None:  # the rule the thresholds were chosen under, so a reload keeps it
        _put(data, ["decide", "refuse", "needs_evidence"], cal.needs_evidence)
    _put(data, ["decide", "thresholds", "answer"], cal.thresholds.answer)
    _put(data, ["decide", "thresholds", "low_confidence"], cal.thresholds.low_confidence)
    tiers = {name: {"answer": t.answer, "low_confidence": t.low_confidence} for name, t in cal.tiers.items()}
    if tiers or "tiers" in data["decide"]:  # none written: none is the default (the file has a model now)
        _put(data, ["decide", "tiers"], tiers)


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


def _put(node, path: list, value, contract: Contract | None = None) -> None:
    """Set a value in place (``yamledit.set_value``), creating mappings on the way. Given ``contract`` (the
    contract as loaded), a key the file lacks is not added when ``value`` is what it already is."""
    from ruamel.yaml.comments import CommentedMap

    if contract is not None and not _has(node, path) and _effective(contract, path) == value:
        return
    for key in path[:-1]:
        if not isinstance(node.get(key), CommentedMap):
            set_value(node, key, CommentedMap())
        node = node[key]
    set_value(node, path[-1], value)


def _has(node, path: list) -> bool:
    for key in path:
        if not hasattr(node, "get") or key not in node:
            return False
        node = node[key]
    return True


def _effective(contract: Contract, path: list):
    node = contract.to_dict()
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def yaml_load_plain(text: str):
    import yaml

    return yaml.safe_load(text)