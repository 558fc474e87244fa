"""Negatives from a team's own labels (kbtool.evaluation.negatives): leave the evidence out, name
swaps, and calibrate using them apart from the real questions."""

import json
import math
import random
import shutil

import pytest

from kbtool.contract import default_contract, load_contract
from kbtool.evaluation import negatives as neg
from kbtool.evaluation.questions import Question, QuestionSet, Relevant, load_questions
from kbtool.ingestion.pipeline import ingest
from kbtool.query.names import named_things
from kbtool.query.pipeline import Searcher
from kbtool.query.scope import scope
from kbtool.store import Store

from .conftest import ROOT, SAMPLE

FILES = ["manual/install.md", "manual/troubleshooting.md", "manual/large-files.md", "manual/agent-behaviour.md",
         "support/maintenance.md", "policies/data-residency.md", "billing/orders.md", "security/permissions.md"]
LEFT_OUT = [("manual/troubleshooting.md",), ("manual/install.md", "manual/large-files.md"),
            ("support/maintenance.md", "billing/orders.md", "security/permissions.md")]
WORDS = ["install", "agent", "sync", "error", "TW-E5120", "refund", "order", "region", "data", "maintenance",
         "window", "large", "files", "upload", "permissions", "admin", "zorblax", "Heroku"]


def _store(base, fake_embedder, files) -> Store:
    for f in files:
        (base / "docs" / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SAMPLE / f, base / "docs" / f)
    store = Store.open(base / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(store, [base / "docs"], embedder=fake_embedder).failed
    return store


@pytest.fixture(scope="module")
def stores(tmp_path_factory, fake_embedder):
    """The eight files in one store, and for each LEFT_OUT set a store ingested without it."""
    full = _store(tmp_path_factory.mktemp("neg-full"), fake_embedder, FILES)
    without = {docs: _store(tmp_path_factory.mktemp("neg-without"), fake_embedder, [f for f in FILES if f not in docs])
               for docs in LEFT_OUT}
    return full, without


def _output(answer) -> dict:
    out = answer.to_dict(with_trace=True)
    out["trace"].pop("timings_ms", None)
    return out


# ---- leave the evidence out ------------------------------------------------------------------
def test_property_leaving_the_evidence_out_equals_a_store_without_those_documents(stores, fake_embedder):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    full, without = stores
    assert set(full.document_ids()) == set(FILES)

    @settings(max_examples=60, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(docs=st.sampled_from(LEFT_OUT), method=st.sampled_from(["weighted", "rrf", "bm25", "dense"]),
           words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=5), top_k=st.integers(1, 8),
           filters=st.sampled_from([(), ("dir=manual",), ("dir=support|billing|security",)]))
    def check(docs, method, words, top_k, filters):
        c = load_contract(None, [f"retrieve.fusion.method={method}"], search=False)
        q = " ".join(words)
        sc = neg.leave_out_scope(full, scope(full, c, filters), docs)  # the caller's own scope, then left out
        if not sc.allowed:
            return  # nothing of the caller's left: leave_out skips such a question
        got = Searcher(full, c, sc, fake_embedder).search([q], top_k=top_k, depth=top_k)[0]
        want = Searcher.of(without[docs], c, filters, embedder=fake_embedder).search([q], top_k=top_k, depth=top_k)[0]
        assert _output(got) == _output(want)
        assert not {h.doc_id for h in got.hits} & set(docs)
        assert got.signals == want.signals

    check()


def test_leave_out_masks_exactly_the_labelled_documents_and_skips_what_cannot_be_left_out(stores):
    full, _ = stores
    c = default_contract()
    base = scope(full, c)
    qs = QuestionSet("t", [
        Question("a", "How do I install the agent?", [Relevant("manual/install.md")]),
        Question("b", "Where is my data stored?", [Relevant("policies/data-residency.md"), Relevant("billing/orders.md", 0)]),
        Question("c", "Not in the store", [Relevant("nowhere.md")]),
        Question("d", "Everything", [Relevant(f) for f in FILES]),
        Question("u", "Unanswerable", []),
    ])
    negs, skipped = neg.leave_out(full, qs, base)
    assert [n.source for n in negs] == ["a", "b"]
    assert negs[1].left_out == {"policies/data-residency.md", "billing/orders.md"}
    assert all(not n.question.answerable and n.question.question == q.question for n, q in zip(negs, qs.questions))
    assert skipped == {"labelled documents not in the store": 1, "labelled documents are every document": 1}
    sc = neg.leave_out_scope(full, base, negs[0].left_out)
    doc_of = {cid: d for cid, d, _ in full.chunk_metadata()}
    assert {doc_of[cid] for cid in sc.allowed} == set(FILES) - {"manual/install.md"}
    assert sc.allowed == sc.visible and sc.allowed_docs == sorted(set(FILES) - {"manual/install.md"})


def test_leave_out_skips_a_question_whose_evidence_another_document_repeats(tmp_path, fake_embedder):
    store = _store(tmp_path, fake_embedder, FILES[:2])
    (tmp_path / "docs" / "copy.md").write_text((SAMPLE / FILES[0]).read_text(encoding="utf-8"), encoding="utf-8")
    assert not ingest(store, [tmp_path / "docs"], embedder=fake_embedder).failed
    text = (SAMPLE / FILES[0]).read_text(encoding="utf-8")
    evidence = next(line for line in text.splitlines() if len(line) > 40 and not line.startswith("#"))[:40]
    qs = QuestionSet("t", [Question("a", "q", [Relevant(FILES[0], 1, evidence)])])
    negs, skipped = neg.leave_out(store, qs, scope(store, default_contract()))
    assert negs == [] and skipped == {"evidence found in another document": 1}


# ---- name swaps ------------------------------------------------------------------------------
def test_name_swaps_are_absent_from_the_kb_and_keep_the_question_otherwise(stores):
    full, _ = stores
    questions = ["How do I fix error TW-E5120 after an update?", "Can I deploy the agent on Kubernetes with Helm?",
                 "What does maxRetries do in the SyncClient?", "Does the agent honour --dry-run?",
                 "Is the X-Request-Id header logged?", "How do I set sync_interval?", "how do i install it"]
    qs = QuestionSet("t", [Question(f"q{i}", q, [Relevant("manual/install.md")]) for i, q in enumerate(questions)])
    negs, skipped = neg.name_swaps(full, qs, seed=3)
    assert skipped == {"no named thing to swap": 1} and len(negs) == len(questions) - 1
    for n in negs:
        old, new = n.swapped
        original = questions[int(n.source[1:])]
        assert old in original and new in n.question.question and old != new
        assert n.question.question == original.replace(old, new, 1)
        assert neg.absent(full, new.removesuffix("'s").removesuffix("()")) and not full.any_chunk_contains(new)
        assert not n.question.answerable and n.question.id == f"{n.source}~swap"
    code = next(n for n in negs if n.source == "q0").swapped[1]
    assert code.startswith("TW-E") and len(code) == len("TW-E5120") and code[4:].isdigit()
    assert {"pascal_case", "camel_case"} & {m.kind for m in named_things(negs[2].question.question)}
    again, _ = neg.name_swaps(full, qs, seed=3)
    assert [n.question.question for n in again] == [n.question.question for n in negs]  # deterministic


def test_a_name_the_kb_mentions_is_not_a_swap(stores):
    full, _ = stores
    assert not neg.absent(full, "agent") and not neg.absent(full, "TW-E5120")
    rng = random.Random(0)
    text, old, new = neg.swap(full, "Why does TW-E5120 appear?", rng)
    assert old == "TW-E5120" and new != old and neg.absent(full, new)


def test_modes_and_shrinkage_weights():
    assert neg.kinds_for("auto", 3) == neg.KINDS and neg.kinds_for("auto", 20) == ()
    assert neg.kinds_for("none", 0) == () and neg.kinds_for("name-swap", 50) == ("name-swap",)
    with pytest.raises(ValueError):
        neg.kinds_for("some", 0)
    assert neg.shrink_weight(10, 60) == pytest.approx(10 / (10 + neg.SHRINK_N0))
    assert neg.shrink_weight(40, 100) is None and neg.shrink_weight(45, 90) is not None
    prior = default_contract().decide.model
    fitted = {"coefficients": {"cosine": 2.0}, "intercept": -1.0, "calibration": {"slope": 0.5, "offset": 0.1}}
    signals = {"cosine": 0.6, "coverage": 0.3, "relevance": 0.4}
    blended = default_contract().decide.model.model_validate({**neg.blended(fitted, prior, 0.25), "version": 1})
    z_fit = 0.5 * (-1.0 + 2.0 * 0.6) + 0.1
    assert neg.logit(blended, signals) == pytest.approx(0.25 * z_fit + 0.75 * neg.logit(prior, signals), abs=1e-4)


# ---- calibrate: generated negatives used, reported apart ----------------------------------------
FEW_UNANSWERABLE = 3


@pytest.fixture(scope="module")
def few(sample_store, embedder, tmp_path_factory):
    """The sample set with only three of its unanswerable questions, calibrated with generated
    negatives (auto) and without (none)."""
    from kbtool.evaluation.calibrate import calibrate

    rows = [json.loads(line) for line in (ROOT / "eval_sets" / "sample.jsonl").read_text().splitlines() if line.strip()]
    kept = [r for r in rows if r["relevant"]] + [r for r in rows if not r["relevant"]][:FEW_UNANSWERABLE]
    path = tmp_path_factory.mktemp("few") / "few.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in kept))
    qs = load_questions(path)
    runs = {m: calibrate(sample_store, qs, default_contract(), embedder=embedder, negatives=m, folds=3)
            for m in ("auto", "none")}
    small = tmp_path_factory.mktemp("few") / "small.jsonl"  # 25 answerable: a fit on few, shrunk
    small.write_text("".join(json.dumps(r) + "\n" for r in kept[:25] + kept[-FEW_UNANSWERABLE:]))
    runs["small"] = calibrate(sample_store, load_questions(small), default_contract(), embedder=embedder,
                              negatives="leave-out", folds=3)
    return qs, runs


def test_calibrate_with_few_unanswerable_questions_fits_with_generated_negatives(few):
    qs, runs = few
    auto, none = runs["auto"], runs["none"]
    g = auto.answerability["generated"]
    assert g["mode"] == "auto" and g["questions"] > 20
    assert set(g["kinds"]) == {"leave-out", "name-swap"} and all(k["questions"] for k in g["kinds"].values())
    assert auto.answerability["fitted"] and auto.model is not None and none.model is None  # 3 real: no model alone
    assert auto.model["fitted_on"]["generated"] == {k: v["questions"] for k, v in g["kinds"].items()}
    assert auto.thresholds is not None and none.thresholds is None
    assert all(k["refused"] is not None for k in g["kinds"].values())
    assert any("generated unanswerable" in n for n in auto.notes)
    assert none.answerability["generated"]["questions"] == 0
    n_un = FEW_UNANSWERABLE + g["questions"]
    assert ("shrinkage" in auto.model["fitted_on"]) == (neg.shrink_weight(n_un, len(qs.questions) + g["questions"]) is not None)


def test_a_model_fitted_on_few_is_shrunk_toward_the_built_in_one_and_says_so(few):
    from kbtool.contract import AnswerabilityModel

    _, runs = few
    small = runs["small"]
    g = small.answerability["generated"]
    assert set(g["kinds"]) == {"leave-out"} and g["questions"] >= 10
    n_un = FEW_UNANSWERABLE + g["questions"]
    w = n_un / (n_un + neg.SHRINK_N0)
    shrunk = small.model["fitted_on"]["shrinkage"]
    assert shrunk["weight"] == pytest.approx(w, abs=1e-4) and shrunk["n0"] == neg.SHRINK_N0
    assert small.answerability["shrinkage"] == shrunk
    assert any("shrunk toward the built-in model" in n and f"{n_un}/({n_un}+{neg.SHRINK_N0})" in n for n in small.notes)
    model = AnswerabilityModel.model_validate(small.model)
    assert model.calibration.slope == 1.0 and model.calibration.offset == 0.0  # the Platt map folded in
    prior = default_contract().decide.model
    assert set(prior.coefficients) <= set(model.coefficients)  # the built-in model's signals weigh in too


def test_generated_negatives_never_count_in_the_real_rates(few):
    qs, runs = few
    auto, none = runs["auto"], runs["none"]
    n_ans = sum(q.answerable for q in qs.questions)
    assert (auto.questions, auto.answerable, auto.unanswerable) == (len(qs.questions), n_ans, FEW_UNANSWERABLE)
    o = auto.thresholds["overall"]
    assert (o["answerable"], o["unanswerable"]) == (n_ans, FEW_UNANSWERABLE)
    tiers = [auto.thresholds["default"], *auto.thresholds["tiers"].values()]
    assert sum(t["unanswerable"] for t in tiers) == FEW_UNANSWERABLE and sum(t["answerable"] for t in tiers) == n_ans
    a = auto.answerability
    assert sum(b["count"] for b in a["oof"]["reliability"]) == len(qs.questions)
    assert len(auto.distributions["unanswerable"]) == FEW_UNANSWERABLE
    assert a["heldout_thresholds"]["unanswerable"] == FEW_UNANSWERABLE
    # the same real questions: signals and confidence measured alike with and without negatives
    assert a["signal_auc"] == none.answerability["signal_auc"]
    assert a["confidence"] == none.answerability["confidence"]
    # the reported mistakes are real questions, and the overall rates count exactly them
    ids = {q.id for q in qs.questions}
    m = a["mistakes"]
    assert {x["id"] for x in m["wrongly_refused"] + m["wrongly_answered"]} <= ids
    assert round(o["false_refusal"] * n_ans) == len(m["wrongly_refused"])
    assert round(o["false_answer"] * FEW_UNANSWERABLE) == len(m["wrongly_answered"])
    assert auto.verification["refusal"]["unanswerable"] == FEW_UNANSWERABLE
    # each tier's trade-off curve is on the real questions too: its chosen point at the rates reported
    for name, t in [("default", auto.thresholds["default"]), *auto.thresholds["tiers"].items()]:
        at = [r for r in auto.threshold_curves[name] if r["threshold"] == t["low_confidence"]]
        assert [(r["false_refusal"], r["false_answer"]) for r in at] == [(t["false_refusal"], t["false_answer"])], name


def test_the_mix_generated_negatives_bring_is_not_the_mix_p_and_the_answer_threshold_assume():
    from types import SimpleNamespace

    from kbtool.evaluation.thresholds import answer_threshold as unweighted

    logit = lambda p: math.log(p / (1 - p))  # noqa: E731
    assert neg.mix_shift(55, 96, 0) == pytest.approx(logit(neg.ANSWERABLE_SHARE) - logit(55 / 151))
    assert neg.mix_shift(50, 70, 20) == pytest.approx(logit(50 / 70) - logit(50 / 120))  # the set's own mix
    assert neg.mix_shift(50, 0, 0) == 0.0

    def item(answerable, generated=None):
        return SimpleNamespace(q=SimpleNamespace(answerable=answerable), generated=generated)

    ans = [item(True) for _ in range(20)]
    made = [item(False, "name-swap") for _ in range(60)]
    conf = {id(it): 0.5 + i / 50 for i, it in enumerate(ans)}  # 0.50 ... 0.88
    conf.update({id(it): 0.55 + (i % 10) / 100 for i, it in enumerate(made)})  # 0.55 ... 0.64
    as_counted = unweighted(0.5, [conf[id(i)] for i in ans], [conf[id(i)] for i in made])
    assert as_counted == 0.66  # counted one for one, 60 generated make every plain answer below them suspect
    # weighted: however many were generated, they weigh 20 x 0.24 / 0.76 = 6.3 unanswerable questions
    assert neg.answer_threshold(0.5, ans + made, conf) == neg.answer_threshold(0.5, ans + made[:30], conf) == 0.64
    assert neg.answer_threshold(0.5, ans, conf) == 0.5  # none unanswerable: the refuse threshold
