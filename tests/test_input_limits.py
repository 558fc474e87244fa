"""Contracts and question sets: size limits, duplicate keys, deep nesting and odd types are one
clear error, never an internal one or a silent guess."""

from __future__ import annotations

import json

import pytest

from kbtool.errors import ContractError, InputError

from .conftest import write


def test_duplicate_contract_keys_are_refused_with_key_and_line(tmp_path):
    from kbtool.contract import load_contract

    path = write(tmp_path / "kbtool.yaml", "contract_version: 1\nretrieve:\n  top_k: 5\n  top_k: 8\n")
    with pytest.raises(ContractError, match=r"kbtool.yaml:4: key 'top_k' is given twice .*first on line 3"):
        load_contract(path)


def test_a_deeply_nested_contract_is_a_contract_error(tmp_path):
    from kbtool.contract import load_contract

    path = write(tmp_path / "kbtool.yaml", "contract_version: 1\nretrieve: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ContractError, match="nested too deeply|retrieve"):
        load_contract(path)


def test_a_contract_over_the_size_limit_is_refused_before_parsing(tmp_path):
    from kbtool.contract import MAX_CONTRACT_BYTES, load_contract

    path = write(tmp_path / "kbtool.yaml", "contract_version: 1\n" + "# filler\n" * (MAX_CONTRACT_BYTES // 9 + 1))
    with pytest.raises(ContractError, match="over the contract size limit of 1 MB"):
        load_contract(path)


def _qs(tmp_path, *records):
    from kbtool.evaluation.questions import load_questions

    path = tmp_path / "qs.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return lambda: load_questions(path)


@pytest.mark.parametrize("record, said", [
    ({"id": "q1", "question": 123}, "the question 123 must be a string"),
    ({"id": ["x"], "question": "Where?"}, r"id \[\"x\"\] must be a string"),
    ({"id": True, "question": "Where?"}, "id true must be a string"),
    ('{"id": "q1", "question": "port \\ud800 8443"}', "lone surrogate"),
])
def test_odd_question_records_are_refused_with_what_is_wrong(tmp_path, record, said):
    with pytest.raises(InputError, match=said):
        _qs(tmp_path, record)()


def test_a_whole_number_id_is_still_accepted(tmp_path):
    assert _qs(tmp_path, {"id": 7, "question": "Where?"})().questions[0].id == "7"


def test_question_set_limits(tmp_path, monkeypatch):
    from kbtool.evaluation import questions

    load = _qs(tmp_path, *({"id": f"q{i}", "question": "Where?"} for i in range(3)))
    monkeypatch.setattr(questions, "MAX_QUESTIONS", 2)
    with pytest.raises(InputError, match="3 questions is over the limit of 2"):
        load()
    monkeypatch.setattr(questions, "MAX_QUESTIONS", 10)
    monkeypatch.setattr(questions, "MAX_QUESTION_FILE_BYTES", 10)
    with pytest.raises(InputError, match="over the question set limit"):
        load()


def test_outputs_are_written_atomically_and_survive_a_lone_surrogate(tmp_path, monkeypatch):
    from kbtool.evaluation import outputs

    path = tmp_path / "summary.json"
    outputs._write(path, json.dumps({"q": "port \ud800"}, ensure_ascii=False))
    assert json.loads(path.read_text(encoding="utf-8")) == {"q": "port \ud800"}

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(outputs.json, "dumps", lambda *a, **k: "x" * 10)
    monkeypatch.setattr("os.fsync", full)
    with pytest.raises(OSError):
        outputs._write(tmp_path / "report.html", "<html>")
    assert not (tmp_path / "report.html").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]
