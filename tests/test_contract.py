"""The retrieval contract (kbtool/contract/), its CLI group, the filter syntax and question
preprocessing. Pure unit tests plus CliRunner runs: no store, no embedding model."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from kbtool.cli import app
from kbtool.contract import (
    Contract,
    Thresholds,
    apply_override,
    default_contract,
    dump_yaml,
    find_contract,
    load_contract,
    validate_contract,
)
from kbtool.errors import ContractError
from kbtool.filters import parse_filter
from kbtool.query.preprocess import clean, detect_identifiers, detect_types, expand, preprocess, truncate

from .conftest import write

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(autouse=True)
def _no_ambient_contract(tmp_path, monkeypatch):
    """No $KBTOOL_CONTRACT and a cwd without kbtool.yaml unless a test puts one there."""
    monkeypatch.delenv("KBTOOL_CONTRACT", raising=False)
    monkeypatch.chdir(tmp_path)


def custom_contract() -> Contract:
    data = default_contract().to_dict()
    data["contract_version"] = 4
    data["data"]["metadata"]["updated"] = {"type": "date", "required": False, "filterable": True}
    data["preprocess"].update(
        truncation="middle", max_query_tokens=64, thesaurus_applies_to=["bm25", "dense"],
        thesaurus={"上下文理解": ["语境推测", "情境理解"], "VPN": ["virtual private network"]})
    data["retrieve"].update(top_k=8, candidates=40, model_multilingual=True,
                            filters=["dir=policies/**", "updated>=2024-01-01", "doc_type=faq|guide"])
    data["retrieve"]["fusion"].update(method="rrf", rrf_k=30, weights={"dense": 0.4, "bm25": 0.6})
    data["retrieve"]["rules"] = [{"when": "other", "weights": {"dense": 0.2, "bm25": 0.6}}]
    data["decide"]["tiers"] = {"cjk": {"answer": 0.6, "low_confidence": 0.3},
                               "faq": {"answer": 0.55, "low_confidence": 0.55}}
    data["access"].update(untagged="hidden", require_principal=True,
                          principals={"alice": ["hr", "finance"], "鲍勃": ["工程"]})
    data["context"].update(header="资料 — sources #1: cite them.\nSecond line\n  indented\n",
                           template="[{n}] {title} ({doc_id}): {text}\n", refusal="no")
    data["trace"]["path"] = "traces/q.jsonl"
    return Contract.model_validate(data)


def load_text(tmp_path, text: str, name: str = "c.yaml") -> Contract:
    return load_contract(write(tmp_path / name, text))


# ---- 1. round trips -------------------------------------------------------------------------
def test_commented_default_round_trips(tmp_path):
    text = dump_yaml(default_contract())
    assert text.startswith("#") and "# results returned\n" in text
    assert load_text(tmp_path, text) == default_contract()
    assert Contract(contract_version=1) == default_contract()


@pytest.mark.parametrize("comments", [False, True])
def test_non_default_contract_round_trips(tmp_path, comments):
    c = custom_contract()
    assert c != default_contract()
    first = load_text(tmp_path, dump_yaml(c, comments=comments), "a.yaml")
    assert first == c
    second = load_text(tmp_path, dump_yaml(first, comments=comments), "b.yaml")
    assert second == c and second.to_dict() == c.to_dict()
    assert second.preprocess.thesaurus["上下文理解"] == ["语境推测", "情境理解"]
    assert second.retrieve.filters == ["dir=policies/**", "updated>=2024-01-01", "doc_type=faq|guide"]
    assert second.access.principals["鲍勃"] == ["工程"]
    assert second.context.header == "资料 — sources #1: cite them.\nSecond line\n  indented\n"
    # allow_unicode: the Chinese is written as is, not as \u escapes
    assert "上下文理解" in dump_yaml(c, comments=comments)


def test_init_file_is_the_default(tmp_path):
    r = run("contract", "init", tmp_path / "k.yaml")
    assert r.exit_code == 0, r.output
    assert "wrote" in r.stderr and r.stdout == ""
    assert load_contract(tmp_path / "k.yaml") == default_contract()


# ---- 2. every error names its path ----------------------------------------------------------
BAD = [
    ({"retrieve": {"top_k": 0}}, ["retrieve.top_k", "greater than 0"]),
    ({"retrieve": {"topk": 3}}, ["retrieve.topk", "unknown key"]),
    ({"retrieve": {"fusion": {"wieghts": {}}}}, ["retrieve.fusion.wieghts", "unknown key"]),
    ({"decide": {"thresholds": {"answer": 0.3, "low_confidence": 0.5}}}, ["decide.thresholds", "low_confidence"]),
    ({"decide": {"tiers": {"faq": {"answer": 0.3, "low_confidence": 0.5}}}}, ["decide.tiers.faq"]),
    ({"retrieve": {"fusion": {"method": "magic"}}}, ["retrieve.fusion.method", "rrf"]),
    ({"context": {"template": "[{n}] {foo}\n"}}, ["context.template", "foo"]),
    ({"context": {"template": "[{n\n"}}, ["context.template", "not a valid template"]),
    ({"retrieve": {"filters": ["no-operator"]}}, ["retrieve.filters", "no-operator"]),
    ({"retrieve": {"filters": ["dir="]}}, ["retrieve.filters"]),
    ({"preprocess": {"truncation": "side"}}, ["preprocess.truncation", "head"]),
    ({"retrieve": {"fusion": {"weights": {"dense": 0, "bm25": 0}}}}, ["retrieve.fusion.weights", "every weight is 0"]),
    ({"retrieve": {"rules": [{"when": "cjk", "weights": {"dense": 0, "bm25": 0}}]}}, ["retrieve.rules.0.weights"]),
    ({"retrieve": {"rules": [{"when": "foo", "weights": {"dense": 1, "bm25": 0}}]}}, ["retrieve.rules.0.when"]),
    ({"retrieve": {"rules": [{"when": {"bm25_coverage_below": 0.3, "bm25_covrage": 1}, "weights": {"dense": 1}}]}},
     ["retrieve.rules.0.when.bm25_covrage", "unknown key"]),
    ({"retrieve": {"rules": [{"when": {"bm25_coverage_below": 1.5}, "weights": {"dense": 1}}]}},
     ["retrieve.rules.0.when.bm25_coverage_below", "less than or equal to 1"]),
    ({"retrieve": {"rules": [{"when": {"bm25_coverage_below": 0}, "weights": {"dense": 1}}]}},
     ["retrieve.rules.0.when.bm25_coverage_below", "greater than 0"]),
    ({"retrieve": {"rules": [{"when": {}, "weights": {"dense": 1}}]}}, ["retrieve.rules.0.when", "give a condition"]),
    ({"retrieve": {"rules": [{"when": {"type": "faq"}, "weights": {"dense": 1}}]}}, ["retrieve.rules.0.when.type"]),
    ({"retrieve": {"rules": [{"when": ["cjk"], "weights": {"dense": 1}}]}}, ["retrieve.rules.0.when", "mapping"]),
    ({"retrieve": {"fusion": {"weights": {"dense": 1.5}}}}, ["retrieve.fusion.weights.dense"]),
    ({"preprocess": {"thesaurus": {"上下文理解": []}}}, ["preprocess.thesaurus", "上下文理解"]),
    ({"preprocess": {"thesaurus_applies_to": ["rrf"]}}, ["preprocess.thesaurus_applies_to.0"]),
    ({"data": {"metadata": {"updated": {"type": "datetime"}}}}, ["data.metadata.updated.type"]),
    ({"access": {"untagged": "maybe"}}, ["access.untagged"]),
    ({"postprocess": {"dedup": {"similarity": 0}}}, ["postprocess.dedup.similarity"]),
    ({"contract_version": 0}, ["contract_version"]),
]


@pytest.mark.parametrize("patch,needles", BAD, ids=[n[0] for _, n in BAD])
def test_invalid_field_names_its_path(tmp_path, patch, needles):
    text = yaml.safe_dump({"contract_version": 1, **patch}, allow_unicode=True)
    path = write(tmp_path / "bad.yaml", text)
    with pytest.raises(ContractError) as exc:
        load_contract(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}: "), msg
    for needle in needles:
        assert needle in msg, (needle, msg)
    assert "\n" not in msg


def test_errors_name_only_the_first_problem_and_count_the_rest():
    with pytest.raises(ContractError, match=r"^x\.yaml: retrieve\.top_k: .*\(and 1 more\)$"):
        validate_contract({"contract_version": 1, "retrieve": {"top_k": 0, "candidates": 0}}, "x.yaml")


def test_missing_contract_version(tmp_path):
    with pytest.raises(ContractError, match=r"contract_version: required: add `contract_version: 1`"):
        load_text(tmp_path, "retrieve:\n  top_k: 3\n")


def test_equal_thresholds_are_allowed():
    assert Thresholds(answer=0.4, low_confidence=0.4).answer == 0.4


def test_malformed_yaml_gives_file_and_line(tmp_path):
    path = write(tmp_path / "mal.yaml", "contract_version: 1\nretrieve:\n  top_k: [1, 2\n  x: 1\n")
    with pytest.raises(ContractError, match=r"mal\.yaml:4: not valid YAML"):
        load_contract(path)


@pytest.mark.parametrize("text", ["- contract_version: 1\n- retrieve: {}\n", "", "just a string\n"])
def test_not_a_mapping_is_a_clear_error(tmp_path, text):
    with pytest.raises(ContractError, match=r"c\.yaml: a contract is a YAML mapping"):
        load_text(tmp_path, text)


def test_missing_file_names_it_and_suggests_init(tmp_path):
    with pytest.raises(ContractError) as exc:
        load_contract(tmp_path / "nope.yaml")
    assert "nope.yaml" in str(exc.value) and "kbtool contract init" in str(exc.value)


# ---- 3. --set --------------------------------------------------------------------------------
def test_overrides_apply_with_yaml_typing():
    c = load_contract(None, ["retrieve.top_k=8", "retrieve.fusion.weights.dense=0.5",
                             "preprocess.thesaurus_applies_to=[bm25, dense]",
                             "retrieve.model_multilingual=true", "trace.path=out/t.jsonl",
                             "preprocess.thesaurus.上下文理解=[语境推测]"])
    assert c.retrieve.top_k == 8 and isinstance(c.retrieve.top_k, int)
    assert c.retrieve.fusion.weights.dense == 0.5 and c.retrieve.fusion.weights.bm25 == 0.3
    assert c.preprocess.thesaurus_applies_to == ["bm25", "dense"]
    assert c.retrieve.model_multilingual is True
    assert c.trace.path == "out/t.jsonl"
    assert c.preprocess.thesaurus == {"上下文理解": ["语境推测"]}
    # everything not overridden is the default
    d = default_contract().to_dict()
    got = c.to_dict()
    assert got["context"] == d["context"] and got["decide"] == d["decide"]


def test_overrides_apply_on_top_of_a_file(tmp_path):
    path = write(tmp_path / "k.yaml", "contract_version: 2\nretrieve:\n  top_k: 3\n  candidates: 20\n")
    c = load_contract(path, ["retrieve.top_k=9"])
    assert (c.contract_version, c.retrieve.top_k, c.retrieve.candidates) == (2, 9, 20)


def test_override_value_is_validated():
    with pytest.raises(ContractError, match=r"retrieve\.top_k"):
        load_contract(None, ["retrieve.top_k=0"])
    with pytest.raises(ContractError, match=r"retrieve\.topk: unknown key"):
        load_contract(None, ["retrieve.topk=3"])


@pytest.mark.parametrize("item", ["retrieve.top_k", "=5", "retrieve..top_k=5", "retrieve.top_k.x=5", ""])
def test_bad_override_is_a_contract_error(item):
    with pytest.raises(ContractError, match=r"^override .* \(CLI: --set\): "):
        load_contract(None, [item])


def test_apply_override_creates_sections():
    data: dict = {"trace": None}
    apply_override(data, "trace.path=a.jsonl")
    apply_override(data, "retrieve.fusion.rrf_k=10")
    assert data == {"trace": {"path": "a.jsonl"}, "retrieve": {"fusion": {"rrf_k": 10}}}


def test_cli_show_json_with_set():
    r = run("contract", "show", "--set", "retrieve.top_k=8", "--json")
    assert r.exit_code == 0, r.output
    shown = json.loads(r.stdout)
    assert shown["retrieve"]["top_k"] == 8
    shown["retrieve"]["top_k"] = 5
    assert shown == default_contract().to_dict()


def test_cli_show_without_a_file_prints_the_default_yaml():
    r = run("contract", "show")
    assert r.exit_code == 0, r.output
    assert validate_contract(yaml.safe_load(r.stdout)) == default_contract()
    assert not r.stdout.lstrip().startswith("{")


def test_cli_bad_set_is_one_line_exit_1():
    r = run("contract", "show", "--set", "retrieve.top_k")
    assert r.exit_code == 1 and r.stdout == ""
    assert "--set" in r.stderr and "Traceback" not in r.output
    assert len(r.stderr.strip().splitlines()) == 1


# ---- 4. weights and thresholds per question ---------------------------------------------------
def test_weights_for_question_types():
    c = default_contract()
    assert c.weights_for({"identifier"}) == pytest.approx((0.3, 0.7))
    assert c.weights_for({"other"}) == pytest.approx((0.7, 0.3))
    assert c.weights_for({"cjk"}) == pytest.approx((0.1, 0.9))
    assert c.weights_for({"identifier", "cjk"}) == pytest.approx((0.3, 0.7))  # first rule wins

    multi = load_contract(None, ["retrieve.model_multilingual=true"])
    assert multi.weights_for({"cjk"}) == pytest.approx((0.7, 0.3))
    assert multi.weights_for({"identifier", "cjk"}) == pytest.approx((0.3, 0.7))


COVERAGE_RULE = ("retrieve.rules=[{when: identifier, weights: {dense: 0.3, bm25: 0.7}}, "
                 "{when: {bm25_coverage_below: 0.3}, weights: {dense: 0.9, bm25: 0.1}}, "
                 "{when: {type: cjk, bm25_coverage_below: 0.5}, weights: {dense: 0.6, bm25: 0.4}}]")


def test_a_coverage_rule_applies_below_its_cut_off_only():
    c = load_contract(None, [COVERAGE_RULE])
    two = ("dense", "bm25")
    assert c.retriever_weights({"other"}, two, 0.1) == pytest.approx({"dense": 0.9, "bm25": 0.1})
    assert c.retriever_weights({"other"}, two, 0.3) == pytest.approx({"dense": 0.7, "bm25": 0.3})  # not below
    assert c.retriever_weights({"other"}, two, None) == pytest.approx({"dense": 0.7, "bm25": 0.3})  # unknown
    assert c.retriever_weights({"other"}, two) == pytest.approx({"dense": 0.7, "bm25": 0.3})
    # rules are tried in order: the identifier rule comes first whatever the coverage
    assert c.weights_for({"identifier"}, 0.0) == pytest.approx((0.3, 0.7))
    assert c.weights_for({"cjk"}, 0.4) == pytest.approx((0.6, 0.4))  # type and coverage both hold
    assert c.weights_for({"cjk"}, 0.6) == pytest.approx((0.7, 0.3))  # the fusion weights (no plain cjk rule)
    assert c.rule_for({"cjk"}, two, 0.1) is c.retrieve.rules[1]  # the untyped rule comes first
    # a mode fusing one retriever ignores the rules
    assert load_contract(None, [COVERAGE_RULE, "retrieve.fusion.method=dense"]).retriever_weights(
        {"other"}, two, 0.0) == {"dense": 1.0}


def test_a_coverage_rule_round_trips_as_written():
    c = load_contract(None, [COVERAGE_RULE])
    rules = yaml.safe_load(dump_yaml(c))["retrieve"]["rules"]
    assert rules[1] == {"when": {"bm25_coverage_below": 0.3}, "weights": {"dense": 0.9, "bm25": 0.1}}
    assert rules[2]["when"] == {"type": "cjk", "bm25_coverage_below": 0.5}
    assert validate_contract(yaml.safe_load(dump_yaml(c))) == c
    assert [r.type for r in c.retrieve.rules] == ["identifier", None, "cjk"]
    assert [r.signals for r in c.retrieve.rules] == [False, True, True]


def test_weights_are_normalised():
    c = load_contract(None, ["retrieve.rules=[{when: identifier, weights: {dense: 0.2, bm25: 0.6}}]",
                             "retrieve.fusion.weights={dense: 0.5, bm25: 0.5}"])
    assert c.weights_for({"identifier"}) == pytest.approx((0.25, 0.75))
    assert c.weights_for({"other"}) == pytest.approx((0.5, 0.5))
    assert c.weights_for({"cjk"}) == pytest.approx((0.5, 0.5))  # no cjk rule any more
    assert sum(c.weights_for({"identifier"})) == pytest.approx(1.0)


def test_thresholds_for_tier_by_type_or_tag():
    c = custom_contract()  # tiers: cjk, faq
    name, t = c.thresholds_for({"cjk"})
    assert name == "cjk" and (t.answer, t.low_confidence) == (0.6, 0.3)
    name, t = c.thresholds_for({"other"}, {"faq"})
    assert name == "faq" and t.answer == 0.55
    assert c.thresholds_for({"cjk"}, {"faq"})[0] == "cjk"  # first tier in the file wins
    name, t = c.thresholds_for({"identifier"}, {"nope"})
    assert name == "default" and t == c.decide.thresholds

    d = default_contract()  # no built-in tier: a named thing absent carries identifier questions' refusals
    assert d.decide.tiers == {}
    assert d.thresholds_for({"identifier"}) == ("default", d.decide.thresholds)
    assert d.thresholds_for({"other"}) == ("default", d.decide.thresholds)


# ---- 5. CLI and discovery ---------------------------------------------------------------------
def test_cli_init_refuses_to_overwrite(tmp_path):
    path = tmp_path / "k.yaml"
    assert run("contract", "init", path).exit_code == 0
    path.write_text("contract_version: 7\n", encoding="utf-8")
    r = run("contract", "init", path)
    assert r.exit_code == 1
    assert "--force" in r.stderr and "Traceback" not in r.output
    assert len(r.stderr.strip().splitlines()) == 1
    assert path.read_text(encoding="utf-8") == "contract_version: 7\n"
    r = run("contract", "init", path, "--force")
    assert r.exit_code == 0 and load_contract(path) == default_contract()


def test_cli_init_default_path_and_unwritable(tmp_path):
    assert run("contract", "init").exit_code == 0
    assert (tmp_path / "kbtool.yaml").is_file()
    r = run("contract", "init", tmp_path / "no" / "dir" / "k.yaml")
    assert r.exit_code == 1 and "cannot write" in r.stderr and "Traceback" not in r.output


def test_cli_validate_good_and_bad(tmp_path):
    good = tmp_path / "good.yaml"
    assert run("contract", "init", good).exit_code == 0
    r = run("contract", "validate", good)
    assert r.exit_code == 0 and "valid" in r.stderr
    r = run("contract", "validate", good, "--json")
    assert r.exit_code == 0
    assert json.loads(r.stdout) == {"contract": str(good), "valid": True, "contract_version": 1, "problems": []}

    bad = write(tmp_path / "bad.yaml", "contract_version: 1\nretrieve:\n  top_k: 0\n")
    r = run("contract", "validate", bad)
    assert r.exit_code == 1 and r.stdout == ""
    assert "retrieve.top_k" in r.stderr and "bad.yaml" in r.stderr and "Traceback" not in r.output

    r = run("contract", "validate", tmp_path / "missing.yaml")
    assert r.exit_code == 1 and "missing.yaml" in r.stderr and "kbtool contract init" in r.stderr

    r = run("contract", "validate", good, "--set", "decide.thresholds.answer=0.3", "--set",
            "decide.thresholds.low_confidence=0.9")
    assert r.exit_code == 1 and "decide.thresholds" in r.stderr


def test_discovery_uses_local_kbtool_yaml(tmp_path, monkeypatch):
    assert find_contract() is None and load_contract() == default_contract()
    write(tmp_path / "kbtool.yaml", "contract_version: 3\nretrieve:\n  top_k: 11\n")
    c = load_contract()
    assert (c.contract_version, c.retrieve.top_k) == (3, 11)
    # search=False ignores it
    assert load_contract(None, search=False) == default_contract()
    r = run("contract", "show", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["retrieve"]["top_k"] == 11
    # elsewhere, it is not found
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)
    assert load_contract() == default_contract()


def test_env_var_wins_over_local_file(tmp_path, monkeypatch):
    write(tmp_path / "kbtool.yaml", "contract_version: 3\nretrieve:\n  top_k: 11\n")
    env = write(tmp_path / "env" / "team.yaml", "contract_version: 5\nretrieve:\n  top_k: 2\n")
    monkeypatch.setenv("KBTOOL_CONTRACT", str(env))
    c = load_contract()
    assert (c.contract_version, c.retrieve.top_k) == (5, 2)
    # an explicit path wins over both
    explicit = write(tmp_path / "x.yaml", "contract_version: 9\n")
    assert load_contract(explicit).contract_version == 9
    r = run("contract", "validate")
    assert r.exit_code == 0 and "team.yaml" in r.stderr
    monkeypatch.setenv("KBTOOL_CONTRACT", str(tmp_path / "gone.yaml"))
    with pytest.raises(ContractError, match="gone.yaml"):
        load_contract()


# ---- 6. filters -------------------------------------------------------------------------------
def test_filter_equality_and_alternatives():
    f = parse_filter("doc_type=faq")
    assert (f.key, f.op, f.value) == ("doc_type", "=", "faq") and str(f) == "doc_type=faq"
    assert f.matches({"doc_type": "faq"}) and not f.matches({"doc_type": "faqs"}) and not f.matches({})
    f = parse_filter(" doc_type = faq|guide ")
    assert f.matches({"doc_type": "guide"}) and f.matches({"doc_type": "faq"})
    assert not f.matches({"doc_type": "draft"})


def test_filter_globs():
    f = parse_filter("dir=docs/en/**")
    assert f.matches({"dir": "docs/en"})
    assert f.matches({"dir": "docs/en/tutorial/security"})
    assert not f.matches({"dir": "docs/english"})
    assert not f.matches({"dir": "other/docs/en"})
    star = parse_filter("dir=docs/*")
    assert star.matches({"dir": "docs/en"})
    assert not star.matches({"dir": "docs/en/tutorial"})
    assert parse_filter("dir=docs/**").matches({"dir": "docs/en/tutorial"})
    assert parse_filter("dir=docs/e?").matches({"dir": "docs/en"})
    assert not parse_filter("dir=docs?en").matches({"dir": "docs/en"})
    assert parse_filter("dir=a.b").matches({"dir": "a.b"}) and not parse_filter("dir=a.b").matches({"dir": "axb"})


def test_filter_not_equal():
    f = parse_filter("doc_type!=draft")
    assert f.op == "!="
    assert f.matches({"doc_type": "faq"}) and not f.matches({"doc_type": "draft"})
    assert parse_filter("dir!=docs/en/**").matches({"dir": "docs/english"})
    assert not parse_filter("dir!=docs/en/**").matches({"dir": "docs/en/x"})


def test_filter_dates():
    f = parse_filter("updated>=2024-01-01")
    assert (f.key, f.op, f.value) == ("updated", ">=", "2024-01-01")
    assert f.matches({"updated": "2024-03-05"}, "date")
    assert not f.matches({"updated": "2023-12-31"}, "date")
    assert f.matches({"updated": "2024-01-01"}, "date")
    assert f.matches({"updated": "2024-01-01T08:30:00Z"}, "date")
    assert not f.matches({}, "date")
    assert parse_filter("updated<2024-01-01").matches({"updated": "2023-12-31"}, "date")


def test_filter_numbers_compare_numerically():
    f = parse_filter("page>9")
    assert f.matches({"page": "10"}, "number")  # as text, "10" < "9"
    assert f.matches({"page": 10}, "number")
    assert not f.matches({"page": "9"}, "number")
    assert parse_filter("page<=9").matches({"page": "9"}, "number")
    assert parse_filter("score>-1").matches({"score": "0.5"}, "number")


def test_filter_tags():
    f = parse_filter("access=hr")
    assert f.matches({"access": "finance, hr"}, "tags")
    assert f.matches({"access": "hr"}, "tags")
    assert not f.matches({"access": "finance, hrx"}, "tags")
    assert not f.matches({"access": "finance, hr"}, "str")  # as a plain string, not equal
    assert parse_filter("access=legal|hr").matches({"access": "finance,hr"}, "tags")
    assert not parse_filter("access!=hr").matches({"access": "finance, hr"}, "tags")


@pytest.mark.parametrize("spec", ["no-operator", "dir=", "=docs", ">=2024", "", "   ", "a b=c", None])
def test_malformed_filters_raise_value_error(spec):
    with pytest.raises(ValueError, match="write key=value"):
        parse_filter(spec)


# ---- 7. preprocess ----------------------------------------------------------------------------
@pytest.mark.parametrize("text,expected,kind", [
    ("Why do I get TW-E5120 on login?", "TW-E5120", "error_code"),
    ("mysql says ERROR 1045 when connecting", "ERROR 1045", "error_code"),
    ("what changed in 3.4.1", "3.4.1", "version"),
    ("call /v2/shares/{share_id} to update", "/v2/shares/{share_id}", "api_path"),
    ("what is sync.timeout_ms for", "sync.timeout_ms", "config_key"),
    ("when does rotateToken run", "rotateToken", "camel_case"),
    ('search for "quoted phrase" please', "quoted phrase", "quoted"),
])
def test_detect_identifiers(text, expected, kind):
    found = detect_identifiers(text)
    assert {"kind": kind, "text": expected} in found, found
    assert detect_types(text, found) == ["identifier"]


def test_detect_identifiers_in_order_once():
    q = "After 3.4.1, TW-E5120 on /v2/shares/{share_id} with sync.timeout_ms and rotateToken, ERROR 1045"
    assert [i["text"] for i in detect_identifiers(q)] == [
        "3.4.1", "TW-E5120", "/v2/shares/{share_id}", "sync.timeout_ms", "rotateToken", "ERROR 1045"]


@pytest.mark.parametrize("text", ["What happens if my laptop drops off the Wi-Fi?",
                                  "How do I reset my password, e.g. from the app?",
                                  "Paypal or Webdav: which one?", "Is HTTPS or SSO in the EU plan?"])
def test_plain_questions_have_no_identifiers(text):
    assert detect_identifiers(text) == []
    assert detect_types(text, []) == ["other"]


def test_detect_types_cjk():
    assert detect_types("什么是上下文理解", []) == ["cjk"]
    ids = detect_identifiers("TW-E5120 是什么")
    assert detect_types("TW-E5120 是什么", ids) == ["identifier", "cjk", "cjk_identifier"]


SPANS_TEXT = "alpha beta gamma delta epsilon"
SPANS = [(0, 5), (6, 10), (11, 16), (17, 22), (23, 30)]


@pytest.mark.parametrize("limit,side,expected", [
    (3, "head", "alpha beta gamma"),
    (3, "tail", "gamma delta epsilon"),
    (3, "middle", "alpha beta … epsilon"),
    (4, "middle", "alpha beta … delta epsilon"),
    (1, "head", "alpha"),
    (1, "tail", "epsilon"),
    (5, "head", SPANS_TEXT),
    (9, "middle", SPANS_TEXT),
])
def test_truncate(limit, side, expected):
    assert SPANS_TEXT[slice(*SPANS[0])] == "alpha" and SPANS_TEXT[slice(*SPANS[-1])] == "epsilon"
    assert truncate(SPANS_TEXT, SPANS, limit, side) == expected


def test_clean():
    assert clean("  What\tis\n\n TW-E5120?\x00\x07 ") == "What is TW-E5120?"
    out = clean("a\x00b\x1fc\x7fd\x9fe")
    assert not any(ch in out for ch in "\x00\x1f\x7f\x9f") and out.replace(" ", "") == "abcde"
    assert clean("cafe\u0301") == "caf\u00e9"  # NFC
    assert clean("\ufeffhello  world\u2028") == "hello world"


def test_clean_drops_invisible_joiners_without_splitting_words():
    assert clean("rotate\u2060Token") == "rotateToken"
    assert clean("\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645").count(" ") == 0


def test_expand_with_thesaurus():
    th = {"上下文理解": ["语境推测", "情境理解"], "VPN": ["virtual private network"]}
    text, used = expand("什么是上下文理解", th)
    assert text == "什么是上下文理解 语境推测 情境理解" and used == {"上下文理解": ["语境推测", "情境理解"]}
    text, used = expand("vpn drops", th)  # case-insensitive
    assert text == "vpn drops virtual private network" and used == {"VPN": ["virtual private network"]}
    text, used = expand("上下文理解 与 语境推测", th)  # a synonym already present is not repeated
    assert text == "上下文理解 与 语境推测 情境理解" and used == {"上下文理解": ["情境理解"]}
    assert expand("nothing here", th) == ("nothing here", {})


def test_preprocess_applies_the_contract():
    c = load_contract(None, ["preprocess.thesaurus={上下文理解: [语境推测]}"])
    p = preprocess("  什么是\t上下文理解? ", c)
    assert p.text == "什么是 上下文理解?" and p.types == ["cjk"]
    assert p.bm25_text == "什么是 上下文理解? 语境推测" and p.dense_text == p.text  # default: bm25 only
    assert p.expansions == {"上下文理解": ["语境推测"]} and p.truncated is False and p.tokens is None

    both = load_contract(None, ["preprocess.thesaurus={上下文理解: [语境推测]}",
                                "preprocess.thesaurus_applies_to=[dense, bm25]"])
    assert preprocess("上下文理解", both).dense_text == "上下文理解 语境推测"

    def spans(text):  # whitespace tokens stand in for the model's word pieces
        import re
        return [m.span() for m in re.finditer(r"\S+", text)]

    short = load_contract(None, ["preprocess.max_query_tokens=3", "preprocess.truncation=tail"])
    p = preprocess("why does the sync fail with TW-E5120", short, spans)
    assert p.truncated and p.tokens == 7 and p.text == "fail with TW-E5120"
    assert p.types == ["identifier"]


def test_set_reaches_into_lists_by_index():
    c = load_contract(None, ["retrieve.rules.1.weights={dense: 0.5, bm25: 0.5}"], search=False)
    assert c.retrieve.rules[1].weights.dense == 0.5 and c.retrieve.rules[1].when == "identifier"
    with pytest.raises(ContractError, match="not an index"):
        load_contract(None, ["retrieve.rules.7.weights={dense: 1, bm25: 0}"], search=False)


def test_sensitive_rules_are_those_the_load_read_and_copies_share_them(tmp_path):
    """postprocess.sensitive's compiled rules live outside the model (kbtool.sensitive.compiled):
    a per-mode copy uses the rules its contract loaded with; a broken lexicon edit fails the next
    load and leaves them; a good one is read by the next load."""
    from kbtool.query.retriever import contract_for_mode

    lex = write(tmp_path / "lex.yaml", "categories:\n  a:\n    words: [alpha]\n")
    path = write(tmp_path / "kbtool.yaml", "contract_version: 1\npostprocess:\n  sensitive:\n    lexicon: lex.yaml\n")
    c = load_contract(path)
    rules = c.postprocess.sensitive.rules()
    assert "_rules" not in type(c.postprocess.sensitive).__private_attributes__
    assert contract_for_mode(c, "bm25").postprocess.sensitive.rules() is rules
    write(lex, "categories: [oops\n")
    with pytest.raises(ContractError, match="not valid YAML"):
        load_contract(path)
    assert contract_for_mode(c, "dense").postprocess.sensitive.rules() is rules
    write(lex, "categories:\n  b:\n    words: [beta]\n")
    names = [x.name for x in load_contract(path).postprocess.sensitive.rules().categories]
    assert "b" in names and "a" not in names


@pytest.mark.parametrize("override,hint", [
    ("retrieve.topk=3", "retrieve.topk: unknown key (did you mean 'top_k'?)"),
    ("postprocess.diversity.mmr_lambdda=0.5", "postprocess.diversity.mmr_lambdda: unknown key (did you mean 'mmr_lambda'?)"),
    ("data.metadata.lang.filterabel=true", "data.metadata.lang.filterabel: unknown key (did you mean 'filterable'?)"),
    ("data.sources=[{root: docs, inclde: ['*.md']}]", "data.sources.0.inclde: unknown key (did you mean 'include'?)"),
    ("decide.tiers.identifier.answr=0.5", "decide.tiers.identifier.answr: unknown key (did you mean 'answer'?)"),
    ("contract_versoin=1", "contract_versoin: unknown key (did you mean 'contract_version'?)"),
    ("retrieve.xyzzy=1", "retrieve.xyzzy: unknown key (check the spelling)"),
])
def test_an_unknown_contract_key_names_the_closest_known_one_at_any_depth(override, hint):
    with pytest.raises(ContractError) as info:
        load_contract(None, [override], search=False)
    assert str(info.value).endswith(hint), str(info.value)
