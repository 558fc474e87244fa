"""Named things and evidence of absence (kbtool.query.names, signals.named_absent_*, decide.absence):
a question naming what the knowledge base never mentions is refused and told which name; a
paraphrase in everyday words the documents do not use is not refused."""

from __future__ import annotations

import pytest

from kbtool.contract import Refuse, Thresholds, default_contract
from kbtool.query.decide import absence, decide
from kbtool.query.names import key_tokens, named_things, weight


def names(text: str) -> list[tuple[str, str]]:
    return [(n.text, n.kind) for n in named_things(text)]


# ---- finding names ------------------------------------------------------------------------------
@pytest.mark.parametrize("question, expected", [
    ("How do I deploy FastAPI on Heroku?", [("FastAPI", "pascal_case"), ("Heroku", "name")]),
    ("Can I use it with Google Cloud Run and AWS Lambda?", [("Google Cloud Run", "name"), ("AWS Lambda", "name")]),
    ("What causes error TW-E5120 and how do I fix it?", [("TW-E5120", "error_code")]),
    ("Does it take --dry-run or verbose=true?", [("--dry-run", "option"), ("verbose", "option")]),
    ("How do I set sync.timeout_ms?", [("sync.timeout_ms", "config_key")]),
    ("How do I rate limit with slowapi?", [("slowapi", "rare")]),
    ("I want to use Celery. Which broker?", [("Celery", "name")]),  # 'I', 'Which' start nothing
    ("My gizmo is sluggish, how do I wipe it?", []),  # everyday words, however the docs put it
    ("What happens when a dependency yields?", []),
    ("Will it drain my notebook's battery?", []),  # a possessive is the word
])
def test_named_things_are_names_not_words(question, expected):
    assert names(question) == expected


def test_latin_words_in_a_chinese_question_are_names():
    got = names("如何在 Kubernetes 上部署这个软件？")
    assert ("Kubernetes", "name") in got or ("Kubernetes", "latin") in got
    assert all(t != "软件" for t, _ in got)


def test_everyday_names_weigh_less_and_identifiers_weigh_one():
    assert weight("name", ("march",)) == 0.0  # Zipf 5.3: a month is no evidence
    assert weight("name", ("heroku",)) == 1.0
    assert 0 < weight("name", ("pc",)) < 1
    assert weight("error_code", ("tw-e5120",)) == 1.0  # identifiers always 1, whatever their frequency
    assert weight("option", ("verbose",)) == 1.0


def test_a_mention_must_hold_the_whole_identifier_not_its_parts():
    from kbtool.store.analyzer import Analyzer, AnalyzerConfig

    analyse = Analyzer(AnalyzerConfig())
    assert key_tokens(analyse, "TW-E5120") == ("tw-e5120",)
    assert key_tokens(analyse, "Google Cloud Run") == ("google", "cloud", "run")


# ---- the refuse tier's job ------------------------------------------------------------------------
def test_refuse_needs_evidence_of_absence():
    r = Refuse()
    th = Thresholds(answer=0.9, low_confidence=0.6)
    plain = {"cosine": 0.5, "named_absent_top": 0.0, "terms": 2.0, "absent_kb": 0.0}
    assert absence(plain, r) is None
    assert decide(0.3, th, absence(plain, r)) == "low_confidence"  # weak, but nothing says it is absent
    assert absence({**plain, "named_absent_top": 1.0}, r) == "named"
    assert decide(0.3, th, "named") == "refuse"
    assert absence({**plain, "cosine": 0.1}, r) == "far"
    assert absence({**plain, "terms": 0.0, "absent_kb": 1.0}, r) == "empty"
    assert absence(plain, Refuse(needs_evidence=False)) == "threshold"  # the old rule, when asked for
    assert decide(0.3, th, "threshold") == "refuse"
    assert decide(None, th, None) == "refuse"  # nothing retrieved at all
    assert decide(0.95, th, "named") == "answer"  # evidence alone never refuses a confident answer


def test_calibrate_chooses_the_refuse_threshold_over_questions_with_evidence_only():
    from kbtool.evaluation.thresholds import UNREFUSABLE, pick, rates, refusable

    ans = refusable([0.2, 0.8, 0.9, 0.95], [None, "named", None, None])  # the 0.2 one has no evidence
    unans = refusable([0.1, 0.3, 0.5], ["named", "far", None])
    assert ans[0] == UNREFUSABLE and unans[2] == UNREFUSABLE
    fa, fr = rates(ans, unans, 0.85)
    assert fr == pytest.approx(0.25) and fa == pytest.approx(1 / 3)  # 0.8 (named) refused; 0.5 never
    t, fa, fr, met = pick(ans, unans, None, 0.0)
    assert met and fr == 0.0 and fa == pytest.approx(1 / 3) and 0.3 < t <= 0.8


def test_the_built_in_contract_refuses_with_evidence_and_aims_at_few_false_refusals():
    d = default_contract().decide
    assert d.refuse.needs_evidence and d.refuse.max_false_refusal == 0.05
    assert {"named_absent_kb", "named_absent_top"} <= set(d.model.coefficients)
    assert d.model.coefficients["named_absent_top"] < 0


# ---- real store, real model ---------------------------------------------------------------------
def test_a_question_naming_what_the_kb_never_mentions_is_refused_and_told_which(sample_store, embedder):
    from kbtool.query.pipeline import retrieve

    ans = retrieve(sample_store, default_contract(), "Can I pay for my subscription with PayPal?", embedder=embedder)
    assert ans.decision == "refuse", (ans.confidence, ans.signals)
    assert ans.signals["named_absent_kb"] == 1.0 and ans.signals["named_absent_top"] == 1.0
    assert "'PayPal'" in ans.explanation["message"]
    assert [m["text"] for m in ans.explanation["missing_names"]] == ["PayPal"]


def test_a_name_the_kb_holds_is_no_evidence(sample_store, embedder):
    from kbtool.query.pipeline import retrieve

    ans = retrieve(sample_store, default_contract(), "What causes error TW-E5120 and how do I fix it?", embedder=embedder)
    assert ans.signals["named_absent_kb"] == 0.0 and ans.signals["named_absent_top"] == 0.0
    assert ans.decision == "answer"


def test_a_paraphrase_sharing_no_word_with_its_page_ranked_first_is_not_refused(sample_store, embedder):
    """q043 of the sample set: 'hogging my internet' is the upload and download ceiling, in other words."""
    from kbtool.query.pipeline import retrieve

    ans = retrieve(sample_store, default_contract(), "Can I stop the app from hogging my internet?", embedder=embedder)
    assert ans.signals["absent_top"] == 1.0  # no word of the question is in the top hit
    assert ans.hits[0].doc_id == "manual/agent-behaviour.md"
    assert ans.signals["named_absent_top"] == 0.0
    assert ans.decision != "refuse", (ans.confidence, ans.signals, ans.explanation)


def test_the_demo_refund_question_is_answered_without_the_notice(sample_store, embedder):
    from kbtool.query.pipeline import retrieve

    ans = retrieve(sample_store, default_contract(), "How long is the refund window in the EU?", embedder=embedder)
    assert ans.decision == "answer", (ans.confidence, ans.signals, ans.explanation)
    assert ans.hits[0].doc_id.startswith("policies/refund")


def test_a_contract_file_with_thresholds_but_no_refuse_keeps_the_rule_they_were_chosen_under(tmp_path):
    from kbtool.contract import load_contract

    old = tmp_path / "old.yaml"
    old.write_text("contract_version: 2\ndecide:\n  thresholds: {answer: 0.6, low_confidence: 0.3}\n", encoding="utf-8")
    assert load_contract(old).decide.refuse.needs_evidence is False  # every question below 0.3 refused, as then
    new = tmp_path / "new.yaml"
    new.write_text("contract_version: 2\ndecide:\n  refuse: {needs_evidence: true}\n"
                   "  thresholds: {answer: 0.6, low_confidence: 0.3}\n", encoding="utf-8")
    assert load_contract(new).decide.refuse.needs_evidence is True
    assert load_contract(None, search=False).decide.refuse.needs_evidence is True


def test_calibrate_writes_the_refuse_rule_its_thresholds_were_chosen_under(tmp_path):
    from kbtool.contract import Calibration, Thresholds, calibrated_contract, default_contract, load_contract
    from kbtool.contract.file import calibrated_text

    old = tmp_path / "kbtool.yaml"
    old.write_text("contract_version: 2\ndecide:\n  thresholds: {answer: 0.6, low_confidence: 0.3}\n", encoding="utf-8")
    cal = Calibration(thresholds=Thresholds(answer=0.7, low_confidence=0.4), needs_evidence=True)
    old.write_text(calibrated_text(old.read_text(encoding="utf-8"), load_contract(old), cal), encoding="utf-8")
    assert load_contract(old).decide.refuse.needs_evidence is True
    assert calibrated_contract(default_contract(), Calibration(
        thresholds=Thresholds(answer=0.7, low_confidence=0.4), needs_evidence=False)).decide.refuse.needs_evidence is False


def test_a_tier_from_few_questions_is_written_with_a_warning():
    """A user's 35 questions wrote an identifier tier from 9 + 7 questions, and nothing said so."""
    from types import SimpleNamespace as NS

    from kbtool.evaluation.thresholds import choose_thresholds

    items = [NS(q=NS(answerable=i < 9), types={"identifier"}, tags=[]) for i in range(16)]
    items += [NS(q=NS(answerable=i < 20), types={"other"}, tags=[]) for i in range(30)]
    conf = {id(it): (0.9 if it.q.answerable else 0.2) for it in items}
    evidence = {id(it): "named" for it in items}
    got, _, notes = choose_thresholds(default_contract(), items, conf, None, None, evidence)
    assert "identifier" in got["tiers"]
    assert any(n.startswith("identifier: tier thresholds from 9 answerable and 7 unanswerable") for n in notes), notes
    assert not any(n.startswith("default: tier thresholds") for n in notes)
