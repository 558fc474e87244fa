"""The contract's query pipeline, clause by clause, on small real stores (real files, real Chroma,
the real bundled model)."""

import json

import pytest
from typer.testing import CliRunner

from kbtool.cli import app
from kbtool.contract import default_contract, load_contract
from kbtool.errors import AccessError
from kbtool.evaluation.evaluate import EvalConfig, evaluate
from kbtool.evaluation.questions import load_questions
from kbtool.ingestion.pipeline import ingest
from kbtool.query.pipeline import retrieve
from kbtool.query.tokens import count_tokens_for
from kbtool.store import Store

from .conftest import ROOT, public_and_restricted_store, write

runner = CliRunner()
SAMPLE_SET = ROOT / "eval_sets" / "sample.jsonl"

PUBLIC = {
    "guide.md": """# Zeta Guide

## Errors

Error ZETA-4410 means the upload quota of the workspace is exhausted. Delete old versions or buy more storage.

## Offline work

When the laptop loses its network connection, edits are queued locally and uploaded once it reconnects.

## Stripes

The unique marker word here is quuxzebra.
""",
    "copy-a.md": """# Copy A

The nightly cleanup job deletes temporary files older than seven days from the scratch folder and writes a short report to the audit log.
""",
    "copy-b.md": """# Copy A

The nightly cleanup job deletes temporary files older than seven days from the scratch folder and writes a short report to the audit log.
""",
}
PUBLIC["faq.md"] = """# Upload FAQ

## When an upload fails

Upload problems usually come from a dropped network connection. The error disappears on retry.

## Ledger codes

ZETA-7702: the billing ledger rejected the invoice batch.
"""
SECRET = {
    "salaries.md": """# Payroll

The payroll run for grimbleflax contractors happens on the 25th; the cleanup job never touches payroll files.
""",
}


@pytest.fixture(scope="module")
def kb(tmp_path_factory, embedder):
    return public_and_restricted_store(tmp_path_factory.mktemp("pipe"), PUBLIC, SECRET,
                                       {"access": "finance", "cost_centre": "fin-7"}, embedder, folder="finance")


def contract(*sets):
    return load_contract(None, list(sets), search=False)


contract_of = contract


# ---- 2. preprocess --------------------------------------------------------------------------
def test_truncation_keeps_the_stated_part(kb, embedder):
    question = "quuxzebra " + " ".join(["filler"] * 60) + " ZETA-4410"
    head = retrieve(kb, contract("preprocess.max_query_tokens=6"), question, embedder=embedder)
    assert head.processed.truncated and head.processed.tokens > 60
    assert "quuxzebra" in head.processed.text and "ZETA" not in head.processed.text
    tail = retrieve(kb, contract("preprocess.max_query_tokens=6", "preprocess.truncation=tail"), question,
                    embedder=embedder)
    assert "ZETA-4410" in tail.processed.text and "quuxzebra" not in tail.processed.text
    middle = retrieve(kb, contract("preprocess.max_query_tokens=12", "preprocess.truncation=middle"), question,
                      embedder=embedder)
    assert "quuxzebra" in middle.processed.text and "4410" in middle.processed.text


def test_thesaurus_expands_the_bm25_question(kb, embedder):
    q = "stripy horse"
    plain = retrieve(kb, contract("retrieve.fusion.method=bm25"), q, embedder=embedder)
    assert plain.hits == []
    expanded = retrieve(kb, contract("retrieve.fusion.method=bm25", "preprocess.thesaurus={stripy horse: [quuxzebra]}"),
                        q, embedder=embedder)
    assert expanded.hits[0].doc_id == "guide.md" and "Stripes" in expanded.hits[0].section_path
    assert expanded.processed.expansions == {"stripy horse": ["quuxzebra"]}
    assert expanded.processed.dense_text == q  # applies to bm25 only, as configured


# ---- 3. retrieve ----------------------------------------------------------------------------
def test_identifier_rule_leans_on_bm25(kb, embedder):
    q = "What does error ZETA-7702 mean for my upload?"
    dense = retrieve(kb, contract("retrieve.fusion.method=dense"), q, embedder=embedder)
    assert "Ledger codes" not in dense.hits[0].section_path  # the model alone misses the code
    ans = retrieve(kb, default_contract(), q, embedder=embedder)
    assert ans.processed.types == ["identifier"] and ans.weights == {"dense": 0.3, "bm25": 0.7}
    assert ans.processed.identifiers == [{"kind": "error_code", "text": "ZETA-7702"}]
    assert "Ledger codes" in ans.hits[0].section_path


def test_identifier_rule_puts_the_evidence_first_where_plain_rrf_did_not(sample_store, tmp_path):
    line = next(x for x in SAMPLE_SET.read_text().splitlines() if '"q008"' in x)  # "In which release was API v1 removed?"
    path = write(tmp_path / "q008.jsonl", line + "\n")
    report = evaluate(sample_store, load_questions(path), EvalConfig(modes=["hybrid", "contract"], ks=[10]))
    modes = report.results[0].modes
    assert report.results[0].level == "chunk"
    assert modes["hybrid"].first_relevant_rank > 1 and modes["contract"].first_relevant_rank == 1


def test_cjk_rule_leans_on_bm25(sample_store, embedder):
    ans = retrieve(sample_store, default_contract(), "出现同步冲突时，我的修改会丢失吗？", embedder=embedder)
    assert ans.processed.types == ["cjk"] and ans.weights["bm25"] == pytest.approx(0.9)
    assert ans.hits[0].doc_id == "zh/faq.md"
    multi = retrieve(sample_store, contract("retrieve.model_multilingual=true"), "出现同步冲突时", embedder=embedder)
    assert multi.weights == {"dense": 0.7, "bm25": 0.3}


PARAPHRASE = "I subscribed while living in Germany three weeks ago. Can I still get reimbursed?"  # sample q050
COVERED = "Can the agent sync a folder on a network drive?"  # sample q152: BM25 finds its words
TYPE_RULES_ONLY = ("retrieve.rules=[{when: identifier, weights: {dense: 0.3, bm25: 0.7}}, "
                   "{when: cjk, weights: {dense: 0.1, bm25: 0.9}}]")


def test_a_question_bm25_barely_covers_is_fused_by_the_coverage_rule(sample_store, embedder, tmp_path):
    trace = tmp_path / "trace.jsonl"
    ans = retrieve(sample_store, contract(f"trace.path={trace}"), PARAPHRASE, embedder=embedder)
    assert ans.processed.types == ["other"] and ans.weights == {"dense": 1.0}
    assert ans.rule["when"] == {"bm25_coverage_below": 0.25} and ans.rule["bm25_coverage"] < 0.25
    assert ans.rule["index"] == 5 and ans.to_dict()["rule"] == ans.rule  # after the five type rules (cjk's own coverage rule among them)
    assert json.loads(trace.read_text())["rule"] == ans.rule
    dense = retrieve(sample_store, contract("retrieve.fusion.method=dense"), PARAPHRASE, embedder=embedder)
    assert [h.chunk_id for h in ans.hits] == [h.chunk_id for h in dense.hits]
    assert dense.rule is None  # a single-retriever method reads no rule
    # without the rule the same question is fused 0.7 / 0.3, and BM25's noise changes the list
    plain = retrieve(sample_store, contract(TYPE_RULES_ONLY), PARAPHRASE, embedder=embedder)
    assert plain.rule is None and plain.weights == {"dense": 0.7, "bm25": 0.3}
    assert [h.chunk_id for h in plain.hits] != [h.chunk_id for h in ans.hits]
    covered = retrieve(sample_store, default_contract(), COVERED, embedder=embedder)
    assert covered.rule is None and covered.weights == {"dense": 0.7, "bm25": 0.3}


def test_eval_and_query_fuse_with_the_same_coverage_rule(sample_store, embedder, tmp_path):
    lines = [x for x in SAMPLE_SET.read_text().splitlines() if '"q050"' in x or '"q152"' in x]
    path = write(tmp_path / "two.jsonl", "\n".join(lines) + "\n")
    rule = "retrieve.rules=[{when: {bm25_coverage_below: 0.5}, weights: {dense: 0.0, bm25: 1.0}}]"
    firsts = {}
    for sets in ([], [rule]):
        c = contract(*sets)
        report = evaluate(sample_store, load_questions(path), EvalConfig(modes=["contract"], ks=[10]), contract=c)
        for res in report.results:
            ans = retrieve(sample_store, c, res.question.question, embedder=embedder)
            got = res.modes["contract"]
            assert (got.top_doc, got.top_score, got.decision) == (ans.hits[0].doc_id, ans.confidence, ans.decision)
            assert got.rule == ans.rule and report.to_dict()["per_question"][0]["modes"]["contract"]["rule"] == \
                report.results[0].modes["contract"].rule
        firsts[bool(sets)] = {r.question.id: r.modes["contract"].top_doc for r in report.results}
    # the rule (BM25 alone below 0.5) moved the paraphrase's first hit, not the covered question's
    assert firsts[True]["q050"] != firsts[False]["q050"] and firsts[True]["q152"] == firsts[False]["q152"]


def test_one_sided_candidates_get_their_real_other_score(kb, embedder):
    q = "quuxzebra"
    filled = retrieve(kb, default_contract(), q, embedder=embedder, top_k=8)
    assert all(h.dense_score is not None and h.bm25_score is not None for h in filled.hits)
    # The cosine filled in for a chunk equals what the dense retriever itself gives it.
    dense_all = {h.chunk_id: h.dense_score for h in
                 retrieve(kb, contract("retrieve.fusion.method=dense"), q, embedder=embedder, top_k=50).hits}
    for h in filled.hits:
        assert h.dense_score == pytest.approx(dense_all[h.chunk_id], abs=1e-4)
    unfilled = retrieve(kb, contract("retrieve.fusion.fill_missing=false", "retrieve.candidates=2"), q,
                        embedder=embedder, top_k=2)
    assert any(h.dense_score is None or h.bm25_score is None for h in unfilled.hits)


# ---- 4. post-process and context ------------------------------------------------------------
def test_dedup_drops_the_copy(kb, embedder):
    q = "nightly cleanup job temporary files"
    on = retrieve(kb, default_contract(), q, embedder=embedder)
    off = retrieve(kb, contract("postprocess.dedup.enabled=false"), q, embedder=embedder)
    assert {"copy-a.md", "copy-b.md"} <= {h.doc_id for h in off.hits}
    assert len({"copy-a.md", "copy-b.md"} & {h.doc_id for h in on.hits}) == 1
    assert on.trace["dedup_dropped"]


def test_context_block_within_budget_with_citations(kb, embedder):
    count = count_tokens_for(kb)
    for budget in (40, 120, 2000):
        ans = retrieve(kb, contract(f"context.max_tokens={budget}", "decide.thresholds.low_confidence=0",
                                    "decide.thresholds.answer=0"), "What does error ZETA-4410 mean?", embedder=embedder)
        assert ans.decision == "answer"
        assert count(ans.context) <= budget, budget
        assert ans.context.startswith("Answer from these sources") and "[1] ### Source: " in ans.context
    assert "[2]" in ans.context  # the big budget holds more than one hit


# ---- 5. confidence, tiers, refusals ---------------------------------------------------------
def test_confidence_is_in_unit_range_and_tiers_decide(kb, embedder):
    """Thresholds and tiers on the best hit's confidence (a contract without an answerability model)."""
    q = "What does error ZETA-4410 mean?"
    contract = lambda *sets: contract_of("decide.model=null", *sets)  # noqa: E731
    tiered = "decide.tiers={identifier: {answer: 0.2, low_confidence: 0.1}}"
    ans = retrieve(kb, contract("decide.thresholds={answer: 0.99, low_confidence: 0.98}", tiered), q, embedder=embedder)
    assert all(0 <= h.confidence <= 1 for h in ans.hits)
    assert ans.tier == "identifier" and ans.decision == "answer"  # the tier, not the strict default thresholds
    strict = contract("decide.thresholds={answer: 0.99, low_confidence: 0.98}", "decide.tiers={}")
    weak = retrieve(kb, strict, q, embedder=embedder)
    # below the refuse threshold, but ZETA-4410 is in the knowledge base: no evidence of absence
    assert weak.tier == "default" and weak.decision == "low_confidence"
    refused = retrieve(kb, contract("decide.thresholds={answer: 0.99, low_confidence: 0.98}", "decide.tiers={}",
                                    "decide.refuse.needs_evidence=false"), q, embedder=embedder)
    assert refused.decision == "refuse"
    assert refused.context == default_contract().context.refusal
    tagged = retrieve(kb, contract("decide.tiers={urgent: {answer: 0.0, low_confidence: 0.0}}"),
                      "nightly cleanup", embedder=embedder, tags=["urgent"])
    assert tagged.tier == "urgent" and tagged.decision == "answer"


def test_refusal_names_the_missing_exact_term(kb, embedder):
    # the confidence rule (the explanation is what is tested; on this four-document store the
    # built-in model, fitted on the sample corpus, reads a large dense margin as evidence)
    plain = contract("decide.model=null", "decide.thresholds={answer: 0.5, low_confidence: 0.4}",
                     "decide.tiers={identifier: {answer: 0.45, low_confidence: 0.35}}")
    ans = retrieve(kb, plain, "What does error ZETA-9931 mean?", embedder=embedder)
    assert ans.decision == "refuse"
    ex = ans.explanation
    assert "ZETA-9931" in ex["missing_terms"] and ex["best"]["doc_id"] == "guide.md"
    assert "nearest miss: guide.md" in ex["message"]
    assert any("zeta-4410" in s for s in ex["suggestions"])


# ---- 6. access ------------------------------------------------------------------------------
def test_forbidden_document_never_appears_anywhere(kb, embedder, tmp_path):
    c = contract("access.principals={alice: [finance], bob: [support]}")
    q = "grimbleflax payroll cleanup job"
    trace = tmp_path / "t.jsonl"
    bob = retrieve(kb, c, q, embedder=embedder, principal="bob", top_k=10, trace_path=trace)
    text = json.dumps(bob.to_dict(with_trace=True)) + trace.read_text()
    assert "salaries" not in text and "payroll run" not in text
    assert json.loads(trace.read_text().splitlines()[-1])["caller"] == {"principal": "bob", "allow": []}  # who asked
    assert "grimbleflax" in bob.explanation["missing_terms"]  # for bob no chunk holds it, as for any unknown word
    near = retrieve(kb, c, "grimblefax", embedder=embedder, principal="bob")
    assert "grimbleflax" not in json.dumps(near.to_dict(with_trace=True))  # not even as a suggestion
    # A word only forbidden documents hold behaves exactly like a word no document holds.
    # (answer threshold 1: "cleanup job" matches public chunks, and only a non-answer is explained)
    bm25 = contract("access.principals={bob: [support]}", "retrieve.fusion.method=bm25", "decide.thresholds.answer=1")
    secret = retrieve(kb, bm25, "grimbleflax cleanup job", embedder=embedder, principal="bob")
    unknown = retrieve(kb, bm25, "zqxwvutsr cleanup job", embedder=embedder, principal="bob")
    assert [(h.chunk_id, h.confidence) for h in secret.hits] == [(h.chunk_id, h.confidence) for h in unknown.hits]
    assert secret.explanation["missing_terms"] == ["grimbleflax"] and unknown.explanation["missing_terms"] == ["zqxwvutsr"]
    r = runner.invoke(app, ["query", "cleanup", "--store", str(kb.path), "--allow", "support", "--filter", "secret=1"])
    assert r.exit_code == 1 and "known keys" in r.stderr and "cost_centre" not in r.stderr  # only forbidden docs carry it
    r = runner.invoke(app, ["query", "cleanup", "--store", str(kb.path), "--allow", "finance", "--filter", "secret=1"])
    assert r.exit_code == 1 and "cost_centre" in r.stderr
    alice = retrieve(kb, c, q, embedder=embedder, principal="alice")
    assert alice.hits[0].doc_id == "salaries.md"
    assert retrieve(kb, c, q, embedder=embedder, allow=["finance"]).hits[0].doc_id == "salaries.md"
    with pytest.raises(AccessError, match="unknown principal"):
        retrieve(kb, c, q, embedder=embedder, principal="mallory")
    with pytest.raises(AccessError, match="requires a principal"):
        retrieve(kb, contract("access.require_principal=true"), q, embedder=embedder)


# ---- 7. trace ---------------------------------------------------------------------------------
def test_trace_record(kb, embedder, tmp_path):
    path = tmp_path / "trace.jsonl"
    retrieve(kb, contract(f"trace.path={path}"), ["quuxzebra", "What does error ZETA-4410 mean?"], embedder=embedder)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 2 and records[0]["run_id"] == records[1]["run_id"]
    r = records[1]
    assert r["processed"]["raw"] == "What does error ZETA-4410 mean?" and r["types"] == ["identifier"]
    assert r["weights"] == {"dense": 0.3, "bm25": 0.7} and r["candidates"]["bm25"] and r["candidates"]["dense"]
    assert r["fused"] and r["decision"] in ("answer", "low_confidence", "refuse")
    assert {"dense_ms", "bm25_ms", "fuse_decide_ms"} <= set(r["timings_ms"])


# ---- filters ----------------------------------------------------------------------------------
def test_glob_and_in_filters_apply_inside_both_retrievers(sample_store, embedder):
    ans = retrieve(sample_store, default_contract(), "refund window", embedder=embedder, filters=["dir=policies/**"])
    assert ans.hits and all(h.doc_id.startswith("policies/") for h in ans.hits)
    both = retrieve(sample_store, default_contract(), "refund window", embedder=embedder, top_k=20,
                    filters=["filetype=docx|pdf"])
    assert {h.filetype for h in both.hits} <= {"docx", "pdf"}


# ---- must show: the default contract on the sample set --------------------------------------
def test_default_contract_beats_single_retrievers_and_refuses_most_unanswerable(sample_store, embedder):
    report = evaluate(sample_store, load_questions(SAMPLE_SET), EvalConfig(
        modes=["bm25", "dense", "hybrid", "contract"], ks=[10], metrics=["ndcg", "mrr"]))
    m = report.metrics()
    assert m["contract"]["ndcg@10"] >= max(m["bm25"]["ndcg@10"], m["dense"]["ndcg@10"], m["hybrid"]["ndcg@10"])
    # identifier questions: the per-type rule does at least as well as plain RRF
    assert report.mean("contract", "mrr@10", "exact-id") >= report.mean("hybrid", "mrr@10", "exact-id")
    r = report.refusal()["contract"]
    # The built-in model (2026-12-04) is fitted on this set and fastapi-docs (in-sample here; the
    # out-of-set numbers are in bench/ANSWERABILITY.md), and the refuse tier refuses only on
    # evidence of absence (decide.refuse): of the first 14 unanswerable questions the 8 that name
    # something the corpus never mentions (TW-E8123, Slack, Platinum, GraphQL, 3.6.0, WebDAV,
    # PayPal, sync.max_parallel_uploads) are refused; near misses in the corpus's own words (a share
    # link password's length, two-factor authentication) get the notice, not a refusal. Before
    # (the confidence-only tiers): 13 of those 14 refused, and 39 of 126 answerable questions.
    unans = [q for q in report.results if not q.question.answerable and q.question.id <= "q098"]
    named = [q for q in unans if q.modes["contract"].signals["named_absent_top"] >= 0.5]
    assert len(unans) == 14 and len(named) == 8 and all(q.modes["contract"].refused for q in named)
    assert all(q.modes["contract"].decision != "refuse" for q in unans if q not in named
               and q.modes["contract"].signals["cosine"] >= 0.2)  # refused only with evidence
    off = [q for q in report.results if "off-topic" in q.question.tags]
    english = [q for q in off if "zh" not in q.question.tags]
    assert len(off) == 6 and all(q.modes["contract"].refused for q in english)
    # '明天北京的天气怎么样？' (q116): 北京 is an everyday word in Chinese (no weight as a name), and an
    # English-only model's cosines say little about Chinese text (the Chinese issue): not answered plainly
    assert all(q.modes["contract"].decision != "answer" for q in off)
    assert r["unanswerable"] == 34 and r["correctly_refused"] >= 20
    assert r["answerable"] == 126 and r["wrongly_refused"] <= 0.05 * r["answerable"]  # was 39 of 126
    answerable = [q for q in report.results if q.question.answerable]
    literal = [q for q in answerable if "zh-literal" in q.question.tags]
    assert len(literal) == 14 and sum(q.modes["contract"].refused for q in literal) <= 0.25 * len(literal)


# ---- CLI ----------------------------------------------------------------------------------------
def test_cli_query_context_json_and_access_errors(sample_store):
    store = str(sample_store.path)
    r = runner.invoke(app, ["query", "refund window in the EU", "--store", store, "--context"])
    assert r.exit_code == 0, r.output
    assert "[1] ### Source: policies/" in r.stdout and "Cite them as [n]" in r.stdout
    r = runner.invoke(app, ["query", "What does error code TW-E8123 mean?", "--store", store, "--json"])
    data = json.loads(r.stdout)
    assert data["decision"] == "refuse" and "TW-E8123" in data["explanation"]["missing_terms"]
    r = runner.invoke(app, ["query", "x", "--store", store, "--principal", "nobody"])
    assert r.exit_code == 1 and "unknown principal" in r.stderr and "Traceback" not in r.output
    r = runner.invoke(app, ["query", "x", "--store", store, "--set", "retrieve.top_k=0"])
    assert r.exit_code == 1 and "retrieve.top_k" in r.stderr


# ---- regressions found in review ------------------------------------------------------------------
def test_decision_does_not_depend_on_how_many_hits_are_asked_for(sample_store, embedder):
    q = "Can I mount my Tidewater folder over WebDAV?"
    few = retrieve(sample_store, default_contract(), q, embedder=embedder, top_k=1)
    many = retrieve(sample_store, default_contract(), q, embedder=embedder, top_k=100)
    assert (few.decision, few.confidence) == (many.decision, many.confidence)
    best = many.explanation["best"]
    # the message names the hit with the top relevance, the signal the model (and a contract without one) reads
    assert best["confidence"] == many.signals["relevance"]
    plain = contract_of("decide.model=null")
    assert retrieve(sample_store, plain, q, embedder=embedder, top_k=100).explanation["best"]["confidence"] == \
        retrieve(sample_store, plain, q, embedder=embedder, top_k=100).confidence
    assert f"{best['doc_id']}" in many.explanation["message"]


def test_each_compared_contract_keeps_its_own_filters(sample_store, tmp_path):
    from kbtool.contract import dump_yaml

    a = write(tmp_path / "a.yaml", dump_yaml(contract("retrieve.filters=[dir=manual]")))
    b = write(tmp_path / "b.yaml", dump_yaml(default_contract()))
    r = runner.invoke(app, ["eval", str(SAMPLE_SET), "--store", str(sample_store.path), "--contract", str(a),
                            "--contract", str(b), "--json", "-q", "--k", "10", "--metrics", "ndcg"])
    data = json.loads(r.stdout)
    tops = {m: {q["modes"][m]["top_doc"] for q in data["per_question"]} for m in ("a", "b")}
    assert all(d.startswith("manual/") for d in tops["a"] if d) and any(not d.startswith("manual/") for d in tops["b"])
    assert data["metrics"]["b"]["ndcg@10"] > data["metrics"]["a"]["ndcg@10"]


def test_eval_refuses_a_store_whose_indexes_are_behind(tmp_path, embedder):
    write(tmp_path / "d" / "a.md", "# A\n\nalpha text here.\n")
    store = Store.open(tmp_path / "kb", create=True)
    ingest(store, [tmp_path / "d"], embedder=embedder)
    store.set_stemmer("english")
    q = write(tmp_path / "q.jsonl", '{"id": "1", "question": "alpha", "relevant": ["a.md"]}\n')
    r = runner.invoke(app, ["eval", str(q), "--store", str(store.path), "-q"])
    assert r.exit_code == 1 and "kbtool index" in r.stderr


def test_chunk_level_filter_keeps_dense_results(sample_store, embedder):
    ans = retrieve(sample_store, contract("retrieve.fusion.method=dense", "retrieve.candidates=3"),
                   "release notes new features", embedder=embedder, filters=["page=1"], top_k=3)
    assert ans.hits and all(h.page == 1 for h in ans.hits)


def test_bad_bytes_tiny_context_budget_and_template_specs_are_clean_errors(sample_store, kb, embedder):
    r = runner.invoke(app, ["query", "\udcff abc TW-E1042", "--store", str(sample_store.path), "--json"])
    assert r.exit_code == 0 and "Traceback" not in r.output
    r = runner.invoke(app, ["query", "\u200b\u200b", "--store", str(sample_store.path)])
    assert r.exit_code == 2 and "empty" in r.stderr
    r = runner.invoke(app, ["query", "How do I fix error TW-E1042?", "--store", str(sample_store.path), "--context",
                            "--set", "context.max_tokens=12"])
    assert r.exit_code == 1 and "context.max_tokens" in r.stderr
    for bad in ("'{text:>100000000000}'", "'{text.__class__}'", "'{text!r}'"):
        r = runner.invoke(app, ["contract", "show", "--set", f"context.template={bad}"])
        assert r.exit_code == 1 and "context.template" in r.stderr, bad


def test_eval_takes_a_principal(kb, tmp_path):
    c = write(tmp_path / "c.yaml", __import__("kbtool.contract", fromlist=["dump_yaml"]).dump_yaml(
        contract("access.require_principal=true", "access.principals={bob: [support]}")))
    q = write(tmp_path / "q.jsonl", '{"id": "1", "question": "quuxzebra", "relevant": ["guide.md"]}\n'
                                    '{"id": "2", "question": "grimbleflax payroll", "relevant": ["salaries.md"]}\n')
    r = runner.invoke(app, ["eval", str(q), "--store", str(kb.path), "--contract", str(c), "-q", "--json"])
    assert r.exit_code == 1 and "principal" in r.stderr
    r = runner.invoke(app, ["eval", str(q), "--store", str(kb.path), "--contract", str(c), "-q", "--json",
                            "--principal", "bob", "--k", "10", "--metrics", "hit_rate"])
    data = json.loads(r.stdout)
    per = {p["id"]: p["modes"]["contract"]["metrics"]["hit_rate@10"] for p in data["per_question"]}
    assert per == {"1": 1.0, "2": 0.0}  # bob cannot find the finance document


def test_dedup_keeps_texts_that_only_share_a_phrase():
    from kbtool.query.postprocess import dedup

    shared = " ".join(f"shared{i}" for i in range(40))
    a = shared + " " + " ".join(f"alpha{i}" for i in range(60))
    b = shared + " " + " ".join(f"beta{i}" for i in range(60))
    kept, dropped = dedup([("a", a), ("b", b), ("c", a)], lambda x: x[1], 0.9)
    assert [k for k, _ in kept] == ["a", "b"] and dropped[0][0][0] == "c"


# ---- the stages after fusion (kbtool.query.stages) ----------------------------------------------
def test_the_stages_run_in_pipeline_order():
    from kbtool.query.stages import STAGES

    assert [s.name for s in STAGES] == ["rerank", "freshness", "window", "dedup", "sensitive", "diversity",
                                        "freshness", "hits", "expand", "decide", "explain", "compress",
                                        "conflicts", "context"]


def test_one_window_policy_for_every_stage():
    from kbtool.query.stages import MARGIN, Window

    def window(*over, top_k=None, drops=False):
        return Window.of(load_contract(None, list(over), search=False), top_k, drops)

    # dedup on (the default): 20 more rows read so it can still fill top_k; nothing kept beyond top_k
    assert window() == Window(asked=5, top_k=5, decided=5, read=5 + MARGIN, dedup_keep=5, kept=5,
                              scanned=5 + MARGIN, pool=5 + MARGIN)
    assert window("postprocess.dedup.enabled=false").read == 5  # nothing can remove an item: no margin
    # a caller asking for fewer hits than the contract's top_k: the decision still sees the contract's
    w = window(top_k=2)
    assert (w.asked, w.top_k, w.decided, w.pool) == (2, 5, 5, 25)
    # eval asks for 100: the decision and MMR's pool stay the contract's
    w = window("postprocess.diversity.mmr_lambda=0.5", top_k=100)
    assert (w.top_k, w.decided, w.read, w.dedup_keep, w.kept, w.pool) == (100, 5, 120, 120, 100, 25)
    # expansion merges hits: room for them in what diversity keeps and the hits built
    w = window("postprocess.expand.mode=section", "postprocess.dedup.enabled=false")
    assert (w.read, w.dedup_keep, w.kept) == (25, 25, 25)
    # a dropping rule may remove any item: dedup never stops early
    w = window("postprocess.dedup.enabled=false", drops=True)
    assert (w.read, w.dedup_keep, w.kept) == (25, None, 5)


# Review 17: defects found in several dense retrievers per store (index --add-model / --drop-model).
def test_query_and_calibrate_gathering_give_the_same_hits_on_a_two_model_store(tmp_path, embedder):
    """A Chinese question on a store with use-m runs BM25 and dense:use-m only (MiniLM is weighed 0);
    calibrate and eval gather every retriever. Ranking, scores and decision agreed, but the hits did
    not: eval/calibrate's carried MiniLM's cosine (dense_score) where query's had None, and an English
    question's carried a dense:use-m score query never computed. One Answer, whoever gathers."""
    from kbtool.contract import default_contract
    from kbtool.query.pipeline import answer, gather, retrieve
    from kbtool.query.routing import store_retrievers
    from kbtool.query.scope import scope

    from .test_models import _store as two_model_store

    store = two_model_store(tmp_path, embedder)
    contract = default_contract()
    sc = scope(store, contract)
    for question in ("两个人同时修改同一个文件会怎样？", "What happens when two people edit the same file?"):
        by_query = retrieve(store, contract, question)
        cands = gather(store, contract, [question], sc=sc, retrievers=store_retrievers(store))[0]
        by_all = answer(store, contract, cands, sc=sc)
        assert by_query.weights == by_all.weights
        assert [h.to_dict() for h in by_query.hits] == [h.to_dict() for h in by_all.hits], question
        assert by_query.signals == by_all.signals and by_query.decision == by_all.decision


def test_dense_mode_signals_do_not_depend_on_what_else_eval_gathered(sample_store, embedder):
    """The dense mode of a contract whose model reads no BM25 signal runs no BM25 in a query; eval,
    gathering BM25 for its other modes, must give the same signals (BM25's statistics unseen)."""
    from kbtool.contract import AnswerabilityModel, default_contract
    from kbtool.query.pipeline import answer, gather, retrieve
    from kbtool.query.scope import scope
    from kbtool.query.retriever import contract_for_mode

    base = default_contract()
    base.decide.model = AnswerabilityModel(coefficients={"cosine": 4.0, "dense_margin": 3.0}, intercept=-2.0)
    dense = contract_for_mode(base, "dense")
    q = "What causes error TW-E5120 and how do I fix it?"
    alone = retrieve(sample_store, dense, q, embedder=embedder)
    sc = scope(sample_store, dense)
    both = gather(sample_store, dense, [q], sc=sc, embedder=embedder, retrievers=("dense", "bm25"))[0]
    assert both.term_weights is not None  # BM25 was gathered
    via_eval = answer(sample_store, dense, both, sc=sc)
    assert via_eval.signals == alone.signals
    assert via_eval.confidence == alone.confidence and via_eval.decision == alone.decision
