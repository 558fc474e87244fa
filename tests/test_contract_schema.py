"""The JSON Schema of kbtool.yaml (`kbtool contract schema`), for editors: it accepts every contract
kbtool accepts that the repository shows (the built-in one, `contract init`'s file, the README's
examples, hand-written ones) and rejects what kbtool rejects (unknown keys, wrong types)."""

from __future__ import annotations

import json
import re
import textwrap

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from kbtool.cli import app
from kbtool.contract import Contract, ContractError, default_contract, dump_yaml, validate_contract
from kbtool.contract.schema import SCHEMA_FILE, json_schema

from .conftest import ROOT, write
from .test_contract import custom_contract
from .test_contract_write import HAND

runner = CliRunner()
# draft-07's keywords (and $defs, where pydantic puts the definitions: reached by JSON pointer)
DRAFT_07 = {"$schema", "$id", "$ref", "$comment", "$defs", "definitions", "title", "description", "default",
            "examples", "type", "enum", "const", "properties", "patternProperties", "additionalProperties",
            "required", "items", "additionalItems", "anyOf", "oneOf", "allOf", "not", "minimum", "maximum",
            "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern", "format", "minItems",
            "maxItems", "uniqueItems", "minProperties", "maxProperties", "propertyNames", "if", "then", "else",
            "dependencies", "contains", "readOnly", "writeOnly", "multipleOf"}


@pytest.fixture(scope="module")
def validator():
    schema = json_schema()
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def as_json(text: str):
    """A YAML contract as the JSON data an editor validates (a bare date is a string there)."""
    return json.loads(json.dumps(yaml.safe_load(text), default=str))


def readme_contracts() -> list[str]:
    """The YAML examples of the README and docs/ that are contracts (a fragment gets contract_version: 1)."""
    out = []
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    text_of_pages = "\n".join(p.read_text(encoding="utf-8") for p in pages)
    for block in re.findall(r"```yaml\n(.*?)```", text_of_pages, re.S):
        text = textwrap.dedent(block)
        if not set(re.findall(r"^(\w+):", text, re.M)) & set(Contract.model_fields):
            continue  # a mkdocs.yml, a CI workflow: not a contract (and may hold tags safe_load refuses)
        data = yaml.safe_load(text)
        if isinstance(data, dict) and set(data) <= set(Contract.model_fields):
            out.append(text if "contract_version" in data else "contract_version: 1\n" + text)
    return out


def test_the_schema_is_draft_07_with_a_title_and_descriptions(validator):
    schema = validator.schema
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#" and schema["title"]
    used: set = set()

    def walk(node):
        if isinstance(node, dict):
            used.update(node)
            for key, value in node.items():
                for child in (value.values() if key in ("properties", "$defs", "patternProperties") else [value]):
                    walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(schema)
    assert used <= DRAFT_07, used - DRAFT_07
    assert schema["additionalProperties"] is False and schema["required"] == ["contract_version"]
    assert all(d.get("description") for name, d in schema["$defs"].items()), "every section says what it is"
    assert "P(answerable)" in schema["$defs"]["Thresholds"]["properties"]["answer"]["description"]


def test_the_schema_accepts_the_contracts_kbtool_accepts(validator, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert runner.invoke(app, ["contract", "init", "--schema"]).exit_code == 0
    examples = readme_contracts()
    assert len(examples) >= 5  # data.sources, min_kept_text, rules, rerank, sensitive
    texts = {"contract init": (tmp_path / "kbtool.yaml").read_text(encoding="utf-8"),
             "built-in, no comments": dump_yaml(default_contract(), comments=False),
             "non-default": dump_yaml(custom_contract()), "hand-written": HAND,
             "YAML 1.1 spellings": "contract_version: 1\nretrieve: {language: {route: off}}\n"
                                   "postprocess:\n  sensitive: {credentials: off}\n  freshness: {as_of: 2024-10-02}\n",
             "an added model's weight": "contract_version: 2\nretrieve:\n  fusion:\n    method: dense:use-m\n"
                                        "    weights: {dense: 0.5, bm25: 0.2, 'dense:use-m': 0.3}\n",
             **{f"README {i}": text for i, text in enumerate(examples)}}
    texts["built-in (JSON)"] = json.dumps(default_contract().to_dict())
    for name, text in texts.items():
        validate_contract(yaml.safe_load(text), name)  # kbtool accepts it ...
        errors = [e.message for e in validator.iter_errors(as_json(text))]
        assert not errors, (name, errors)  # ... and so does the schema


@pytest.mark.parametrize("text, where", [
    ("retrieve: {top_kk: 3}", "top_kk"),                        # an unknown key
    ("colour: blue", "colour"),                                 # an unknown section
    ("retrieve: {top_k: eight}", "eight"),                      # a wrong type
    ("retrieve: {top_k: 0}", "0"),                              # out of range
    ("postprocess: {sensitive: {credentials: maybe}}", "maybe"),  # not one of the choices
    ("retrieve: {fusion: {method: fancy}}", "fancy"),           # not a method or retriever
    ("retrieve: {fusion: {weights: {sparse: 1.0}}}", "sparse"),  # not a retriever
    ("retrieve: {rules: [{when: questions, weights: {dense: 1}}]}", "questions"),  # not a question type
    ("decide: {thresholds: {answer: 1.5}}", "1.5"),
    ("data: {sources: [{id_prefix: x/}]}", "root"),             # a source without its root
])
def test_the_schema_rejects_what_kbtool_rejects(validator, text, where):
    data = as_json("contract_version: 1\n" + text)
    with pytest.raises(ContractError):
        validate_contract(data)
    errors = list(validator.iter_errors(data))
    assert errors and any(where in e.message or where in json.dumps(list(e.path)) for e in errors), \
        [e.message for e in errors]


def test_a_missing_contract_version_is_rejected(validator):
    assert [e.message for e in validator.iter_errors({"retrieve": {"top_k": 3}})] == [
        "'contract_version' is a required property"]


def test_cli_schema_prints_or_writes_it_and_init_points_editors_at_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["contract", "schema"])
    assert r.exit_code == 0 and json.loads(r.stdout) == json_schema()
    r = runner.invoke(app, ["contract", "schema", "--out", "s.json"])
    assert r.exit_code == 0 and json.loads((tmp_path / "s.json").read_text()) == json_schema()
    r = runner.invoke(app, ["contract", "schema", "--out", str(tmp_path / "no" / "s.json")])
    assert r.exit_code == 1 and "cannot write" in r.stderr and "Traceback" not in r.output
    r = runner.invoke(app, ["contract", "init", "conf/kb.yaml"])  # without --schema: no header, no schema file
    assert r.exit_code == 1  # conf/ does not exist
    (tmp_path / "conf").mkdir()
    assert runner.invoke(app, ["contract", "init", "conf/kb.yaml"]).exit_code == 0
    assert not (tmp_path / "conf" / SCHEMA_FILE).exists()
    assert (tmp_path / "conf" / "kb.yaml").read_text() == dump_yaml(default_contract())
    r = runner.invoke(app, ["contract", "init", "conf/kb.yaml", "--force", "--schema"])
    assert r.exit_code == 0 and f"wrote conf/kb.yaml, conf/{SCHEMA_FILE}" in r.stderr
    text = (tmp_path / "conf" / "kb.yaml").read_text()
    assert text == f"# yaml-language-server: $schema={SCHEMA_FILE}\n" + dump_yaml(default_contract())
    assert json.loads((tmp_path / "conf" / SCHEMA_FILE).read_text()) == json_schema()


def test_calibrate_write_keeps_the_editor_line(tmp_path, monkeypatch):
    from kbtool.contract import Calibration, Thresholds, calibrated_text, load_contract

    monkeypatch.chdir(tmp_path)
    assert runner.invoke(app, ["contract", "init", "--schema"]).exit_code == 0
    text = (tmp_path / "kbtool.yaml").read_text()
    new = calibrated_text(text, load_contract(tmp_path / "kbtool.yaml"),
                          Calibration(thresholds=Thresholds(answer=0.9, low_confidence=0.8)), where="kbtool.yaml")
    assert new.splitlines()[0] == f"# yaml-language-server: $schema={SCHEMA_FILE}"
