"""Fuzzing the parsers that take user input: contracts, --set, filters, question sets and query
text end in a kbtool error (one line, an exit code) or a result, never another exception."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbtool.contract import apply_override, load_contract, validate_contract
from kbtool.errors import KbtoolError
from kbtool.evaluation.questions import load_questions
from kbtool.filters import parse_filter
from kbtool.query.preprocess import detect_identifiers, preprocess

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
                           max_leaves=12)


@FAST
@given(st.dictionaries(st.sampled_from(["contract_version", "retrieve", "decide", "preprocess", "context", "access",
                                        "data", "postprocess", "trace", "calibration", "extra"]), json_values))
def test_contract_data_validates_or_raises_contract_error(data):
    try:
        validate_contract(data, "fuzz")
    except KbtoolError:
        pass


@FAST
@given(st.text(max_size=200))
def test_contract_files_of_any_text(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("c") / "kbtool.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        load_contract(path, search=False)
    except KbtoolError:
        pass


@FAST
@given(st.text(max_size=60))
def test_set_overrides(item):
    data = {"contract_version": 1, "retrieve": {"rules": [{"when": "cjk"}]}}
    try:
        apply_override(data, item)
        validate_contract(data, "fuzz")
    except KbtoolError:
        pass


@FAST
@given(st.text(max_size=60))
def test_filters_parse_or_raise_value_error(spec):
    try:
        f = parse_filter(spec)
    except ValueError:
        return
    for ftype in ("str", "date", "number", "tags"):
        f.matches({f.key: "2024-01-01", "other": "x"}, ftype)


@FAST
@given(st.lists(st.one_of(st.text(max_size=80), json_values.map(json.dumps)), max_size=5))
def test_question_set_lines(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("q") / "set.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    try:
        load_questions(path)
    except KbtoolError:
        pass


@FAST
@given(st.text(max_size=300))
def test_query_text_preprocesses(text):
    from kbtool.contract import default_contract

    p = preprocess(text, default_contract(), lambda t: [(i, i + 1) for i in range(len(t))])
    assert p.types and isinstance(detect_identifiers(p.text), list)
