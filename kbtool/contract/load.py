"""Loading a contract: find the file, read it (strict YAML), apply ``--set`` overrides, validate,
with error messages naming the contract path (``retrieve.top_k: must be greater than 0``)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Optional

from pydantic import ValidationError

from ..errors import ContractError, did_you_mean
from .base import CONTRACT_FILE, _FieldError
from .schema import Contract, default_contract


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


def contract_named(path: str | Path | None = None) -> bool:
    """Whether the contract in force is named (--contract PATH, $KBTOOL_CONTRACT), not found in the
    working directory (./kbtool.yaml)."""
    return bool(path or os.environ.get("KBTOOL_CONTRACT"))


def contract_source(source: str | Path | None, contract: "Contract") -> dict:
    """Which contract is in force, as ``query --json`` and the server say it: {"path" (None: the
    built-in one), "version", "calibrated" (the date `kbtool calibrate --write` recorded, or None)}."""
    date = contract.calibration.date if contract.calibration is not None else None
    return {"path": None if source is None else str(source), "version": contract.contract_version,
            "calibrated": str(date)[:10] if date else None}


def load_contract(path: str | Path | None = None, overrides: list[str] | None = None, *,
                  search: bool = True) -> Contract:
    """Load and validate a contract file (or the default), then apply ``a.b=c`` overrides."""
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
        import yaml  # only for a file: the built-in contract's query never imports it

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
        _thresholds_before_evidence(data)
    for item in overrides or []:
        apply_override(data, item)
    if overrides:
        where += " with overrides " + " ".join(overrides)
    contract = validate_contract(data, where)
    sens = contract.postprocess.sensitive
    if sens.lexicon:  # relative to the contract's folder (made absolute: copies keep it); read and checked now
        from ..sensitive import compiled

        compiled(sens, source.resolve().parent if source is not None else Path.cwd(), reread=True)
        sens._written, sens.lexicon = sens.lexicon, lexicon_path(sens.lexicon, source)
    return contract


def lexicon_path(name: str, source: Optional[Path]) -> str:
    """postprocess.sensitive.lexicon as an absolute path: relative to the folder of the contract
    file ``source`` (None: the current folder)."""
    from ..sensitive import lexicon_file

    return str(lexicon_file(name, source.resolve().parent if source is not None else None))


MAX_CONTRACT_BYTES = 2**20  # 1 MB

# The confidence rule's defaults before decide.model existed (thresholds on the best hit's confidence).
_CONFIDENCE_THRESHOLDS = {"answer": 0.5, "low_confidence": 0.4}
_CONFIDENCE_TIERS = {"identifier": {"answer": 0.45, "low_confidence": 0.35}}


def _thresholds_before_evidence(data: dict) -> None:
    """A contract file whose ``decide`` sets thresholds or tiers but no ``refuse`` chose them when
    every question below the refuse threshold was refused: it keeps that rule,
    ``decide.refuse.needs_evidence: false`` (``calibrate --write`` now writes the rule it chose under)."""
    decide = data.get("decide")
    if isinstance(decide, dict) and "refuse" not in decide and ("thresholds" in decide or "tiers" in decide):
        decide["refuse"] = {"needs_evidence": False}


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


def format_error(error: dict, model: type = Contract) -> str:
    """'retrieve.top_k: must be greater than 0' from a pydantic error of validating ``model``; an
    unknown key names the closest known one there ('retrieve.topk: unknown key (did you mean
    'top_k'?)')."""
    path = ".".join(str(p) for p in error["loc"]) or "(top level)"
    msg = error["msg"]
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, _FieldError):
        path, msg = f"{path}.{cause.field}", cause.message
    msg = re.sub(r"^(Value error|Assertion failed), ", "", msg)
    msg = msg.replace("Input should be", "must be").replace("Extra inputs are not permitted",
                                                            "unknown key (check the spelling)")
    if error["type"] == "extra_forbidden" and error["loc"]:
        hint = did_you_mean(str(error["loc"][-1]), keys_at(model, error["loc"][:-1]))
        if hint:
            msg = "unknown key" + hint
    if error["type"] == "missing":
        msg = "required" + (": add `contract_version: 1`" if path == "contract_version" else "")
    return f"{path}: {msg}"


def keys_at(model: type, loc) -> list[str]:
    """The keys a mapping at ``loc`` (a pydantic error's path) of ``model`` may hold: the fields of
    every model class that can stand there (through Optional, unions, lists and dicts)."""
    import typing

    from pydantic import BaseModel

    def step(tp, part) -> list:
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            field = tp.model_fields.get(part) if isinstance(part, str) else None
            return [] if field is None else [field.annotation]
        if origin is dict:
            return list(args[1:2]) if isinstance(part, str) else []
        if origin in (list, tuple):
            return list(args[:1]) if isinstance(part, int) else []
        return [t for arg in args for t in step(arg, part)]  # Optional, a union, Annotated

    def models(tp) -> list[type]:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return [tp]
        if typing.get_origin(tp) in (dict, list, tuple):
            return []
        return [m for arg in typing.get_args(tp) for m in models(arg)]

    here: list = [model]
    for part in loc:
        here = [t for tp in here for t in step(tp, part)]
    return sorted({name for tp in here for m in models(tp) for name in m.model_fields})


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


def check_against_store(contract: Contract, store) -> list[str]:
    """Problems between a contract and a store: required metadata missing from documents, filters
    on keys no document carries."""
    from ..filters import parse_filter

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

