"""calibrate's logic on a tiny store built with the fake embedder (milliseconds per run): every
setting it scores is what eval measures on a contract with that setting, mixed CJK + identifier
questions follow the contract's rule order, and the refusal rates it reports are eval's."""

import hashlib
import json

import numpy as np
import pytest

from kbtool.contract import load_contract
from kbtool.errors import UsageError
from kbtool.contract import calibrated_text
from kbtool.evaluation.calibrate import (CONFIGS, MAX_GRID, WEIGHTS, Search, calibrate, gathered, weight_grid,
                                         written_contract)
from kbtool.evaluation.compare import recorded_gate
from kbtool.evaluation.evaluate import EvalConfig, evaluate
from kbtool.evaluation.provenance import calibration_warnings, questions_fingerprint
from kbtool.evaluation.questions import load_questions
from kbtool.ingestion.pipeline import ingest
from kbtool.query.routing import rule_applied
from kbtool.store import Store

from .conftest import write

# the rules of the built-in contract without the dense:use-m weight: CJK questions fused without it
NO_USE_M = ["retrieve.rules=[{when: identifier, weights: {dense: 0.3, bm25: 0.7}}, "
            "{when: cjk, weights: {dense: 0.1, bm25: 0.9}}]"]
CJK_FIRST = ["retrieve.rules=[{when: cjk, weights: {dense: 0.1, bm25: 0.9}}, "
             "{when: identifier, weights: {dense: 0.3, bm25: 0.7}}]"]
TOPICS = ["the agent stops syncing after a network timeout", "a refund is available within seven days",
          "storage quota is full and uploads fail", "the proxy replaces the TLS certificate",
          "two people edited the same file and a conflict copy was kept", "the license key was rejected",
          "the folder was renamed on one side and deleted on the other", "the disk is read only"]
ZH = ["同步失败，请检查网络连接", "存储配额已满，无法上传文件", "代理替换了证书，连接失败", "许可证密钥无效，请联系客服"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, fake_embedder):
    base = tmp_path_factory.mktemp("tiny")
    lines = []
    for i, topic in enumerate(TOPICS):
        code = f"TW-E{1000 + i}"
        write(base / "docs" / f"en{i}.md", f"# Error {code}\n\nError {code} means {topic}. Restart the agent "
                                           f"and try again; if {code} stays, contact support.\n")
        lines.append({"id": f"id{i}", "question": f"What does {code} mean?",
                      "relevant": [{"doc": f"en{i}.md", "evidence": topic}]})
        lines.append({"id": f"en{i}", "question": f"why does it say {topic.split(' ', 2)[2]}?", "relevant": [f"en{i}.md"]})
    for i, text in enumerate(ZH):
        code = f"TW-E{2000 + i}"
        write(base / "docs" / f"zh{i}.md", f"# 错误 {code}\n\n出现错误代码 {code} 表示{text}。请重启客户端。\n")
        lines.append({"id": f"mix{i}", "question": f"错误 {code} 怎么修复", "relevant": [f"zh{i}.md"]})
        lines.append({"id": f"zh{i}", "question": f"{text[:4]}怎么办？", "relevant": [f"zh{i}.md"]})
    for i, q in enumerate(["How do I pay with PayPal?", "Is there a dark mode?", "Can I print invoices in Klingon?",
                           "支持苹果手机吗？", "What does TW-E9999 mean?", "Where is the office in Oslo?"]):
        lines.append({"id": f"u{i}", "question": q, "relevant": []})
    questions = write(base / "q.jsonl", "".join(json.dumps(rec, ensure_ascii=False) + "\n" for rec in lines))
    store = Store.open(base / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(store, [base / "docs"], embedder=fake_embedder).failed
    return store, load_questions(questions), questions


@pytest.mark.slow
def test_the_group_of_a_mixed_question_is_the_rule_the_pipeline_applies(tiny, fake_embedder):
    store, qs, _ = tiny
    for overrides, expected in (([], "identifier"), (CJK_FIRST, "cjk")):
        contract = load_contract(None, overrides, search=False)
        items = gathered(store, qs, contract, k=10, embedder=fake_embedder)
        mixed = [it for it in items if it.q.id.startswith("mix")]
        assert all(it.types == {"identifier", "cjk", "cjk_identifier"} for it in mixed)
        search = Search(contract, [it for it in items if it.q.answerable], "ndcg@10", min_count=3)
        assert {it.group for it in mixed} == {expected}
        assert rule_applied(contract, [["identifier", "cjk"]]) == [expected]
        # the weight the written contract gives them is the one their group was scored at
        w = contract.weights_for({"identifier", "cjk"})[0]
        assert w == pytest.approx(0.1 if expected == "cjk" else 0.3)
        assert set(search.own) == {"identifier", "cjk"}


@pytest.mark.parametrize("overrides", [[], CJK_FIRST, ["retrieve.rules=[]"]],
                         ids=["identifier-first", "cjk-first", "rules-appended"])
@pytest.mark.slow
def test_calibrate_scores_a_setting_as_eval_measures_it(tiny, fake_embedder, overrides):
    store, qs, _ = tiny
    contract = load_contract(None, overrides, search=False)
    items = gathered(store, qs, contract, k=10, embedder=fake_embedder)
    ans = [it for it in items if it.q.answerable]
    search = Search(contract, ans, "ndcg@10", min_count=3)
    assert {"identifier", "cjk", "other"} <= set(search.groups)
    rng = np.random.default_rng(1)
    assert search.grid == weight_grid(("dense", "bm25")) and len(search.grid) == len(WEIGHTS)
    for ci in range(len(CONFIGS)):
        wmap = {g: int(rng.integers(len(search.grid))) for g in ("identifier", "cjk", "cjk_identifier", "other")}
        _assert_eval_measures(store, qs, contract, search, ans, ci, wmap, fake_embedder)


def _assert_eval_measures(store, qs, contract, search, items, ci, wmap, embedder, proposal=None):
    """Each question's calibrate score under setting (ci, wmap) is what eval measures on the
    contract calibrate writes for it."""
    written = written_contract(contract, True, proposal or search.proposal(ci, wmap))
    report = evaluate(store, qs, EvalConfig(modes=["contract"], ks=[10], metrics=["ndcg"]), contract=written,
                      embedder=embedder)
    evals = {r.question.id: r.modes["contract"].metrics["ndcg@10"] for r in report.answerable()}
    mine = dict(zip([it.q.id for it in items], search.per_question(ci, wmap)))
    assert mine == pytest.approx(evals, abs=1e-12), (CONFIGS[ci], wmap)


@pytest.mark.slow
def test_calibrate_refusal_rates_are_what_eval_measures_on_the_written_contract(tiny, fake_embedder):
    store, qs, path = tiny
    contract = load_contract(None, CJK_FIRST, search=False)
    r = calibrate(store, qs, contract, embedder=fake_embedder, min_count=3, folds=3, source=str(path))
    overall = r.thresholds["overall"]
    refusal = r.verification["refusal"]
    assert overall["false_answer"] * overall["unanswerable"] == pytest.approx(
        refusal["unanswerable"] - refusal["correctly_refused"], abs=0.01)  # rates are rounded to 4 places
    assert overall["false_refusal"] * overall["answerable"] == pytest.approx(refusal["wrongly_refused"], abs=0.01)
    # the in-sample score of the current contract is eval's
    assert r.heldout["current"] == pytest.approx(r.verification["metrics"]["ndcg@10"], abs=1e-4) or r.adopted


@pytest.mark.slow
def test_appendix_records_the_file_sha256_and_the_content_fingerprint(tiny, fake_embedder):
    store, qs, path = tiny
    contract = load_contract(None, [], search=False)
    r = calibrate(store, qs, contract, embedder=fake_embedder, min_count=3, folds=3, source=str(path))
    record = r.appendix.question_set
    assert record["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert record["questions_fingerprint"] == questions_fingerprint(qs) != record["sha256"]
    fewer = type(qs)(qs.name, qs.questions[:-1])
    for appendix in (r.appendix,  # new form, and the old one (content fingerprint under sha256)
                     r.appendix.model_copy(update={"question_set": {"path": str(path), "sha256": questions_fingerprint(qs)}})):
        cal = contract.model_copy(update={"calibration": appendix})
        assert calibration_warnings(cal, store, qs) == []
        assert any("question set differs" in w for w in calibration_warnings(cal, store, fewer))


def test_evaluate_leaves_the_callers_config_alone(tiny, fake_embedder):
    store, qs, _ = tiny
    config = EvalConfig(modes=["bm25"], ks=[5], metrics=["ndcg"])
    a = load_contract(None, [], search=False)
    b = load_contract(None, ["retrieve.fusion.method=dense"], search=False)
    first = evaluate(store, qs, config, contracts={"a": a}, embedder=fake_embedder)
    assert config.modes == ["bm25"] and list(config.contract_names) == []
    second = evaluate(store, qs, config, contracts={"b": b}, embedder=fake_embedder)
    assert first.config.modes == ["bm25", "a"] and second.config.modes == ["bm25", "b"]


def test_evaluate_with_a_retriever_uses_its_contract(tiny, fake_embedder):
    from kbtool.query.retriever import Retriever

    store, qs, _ = tiny
    bm25_only = load_contract(None, ["retrieve.fusion.method=bm25"], search=False)
    config = EvalConfig(modes=["contract"], ks=[10], metrics=["ndcg"])
    via_retriever = evaluate(store, qs, config, retriever=Retriever(store, fake_embedder, contract=bm25_only))
    direct = evaluate(store, qs, config, contract=bm25_only, embedder=fake_embedder)
    default = evaluate(store, qs, config, embedder=fake_embedder)
    assert via_retriever.metrics() == direct.metrics() != default.metrics()
    with pytest.raises(UsageError, match="not both"):
        evaluate(store, qs, config, contract=bm25_only, retriever=Retriever(store, fake_embedder))


def test_library_errors_name_parameters_not_flags(tiny, fake_embedder):
    store, qs, _ = tiny
    contract = load_contract(None, [], search=False)
    cases = [(dict(objective="ndgc@10"), "objective 'ndgc@10'"), (dict(folds=1), "folds 1"),
             (dict(max_false_answer=0.1, max_false_refusal=0.1), "max_false_answer")]
    for kwargs, message in cases:
        with pytest.raises(UsageError) as exc:
            calibrate(store, qs, contract, embedder=fake_embedder, **kwargs)
        assert str(exc.value).startswith(message) and "--" not in str(exc.value)
    for config, message in ((EvalConfig(ks=[0]), "ks"), (EvalConfig(level="page"), "level"),
                            (EvalConfig(thresholds={"nope": 0.5}), "thresholds")):
        with pytest.raises(UsageError) as exc:
            evaluate(store, qs, config, embedder=fake_embedder)
        assert str(exc.value).startswith(message) and "--" not in str(exc.value)


def test_weight_grid_sizes_and_order():
    two = weight_grid(("dense", "bm25"))
    assert two == tuple({"dense": w, "bm25": round(1 - w, 4)} for w in WEIGHTS)  # the grid of before, in its order
    for n, size, step in ((3, 21, 0.2), (4, 56, 0.2), (5, 70, 0.25), (6, 21, 0.5)):
        names = ("dense", "bm25", *(f"dense:m{i}" for i in range(n - 2)))
        grid = weight_grid(names)
        assert len(grid) == size <= MAX_GRID, n
        assert all(list(p) == list(names) and sum(p.values()) == pytest.approx(1) for p in grid)
        assert len({tuple(p.values()) for p in grid}) == size
        assert {p["dense"] for p in grid} == {round(i * step, 4) for i in range(round(1 / step) + 1)}
        assert grid[0] == {**dict.fromkeys(names, 0.0), "bm25": 1.0}  # ties: BM25 alone, as with two retrievers
        assert grid[1]["dense"] > 0 and all(p[names[-1]] == 0 for p in grid[: round(1 / step) + 1])
    assert weight_grid(("dense",)) == ({"dense": 1.0},)


@pytest.mark.slow
def test_a_two_retriever_store_gets_the_proposal_of_before(tiny, fake_embedder):
    """Same grid, same scores, same choice; the proposal's weights are what the dense weight
    meant before (group weights were a bare dense weight, bm25 the rest)."""
    store, qs, _ = tiny
    contract = load_contract(None, [], search=False)
    items = [it for it in gathered(store, qs, contract, k=10, embedder=fake_embedder) if it.q.answerable]
    search = Search(contract, items, "ndcg@10", min_count=3)
    assert search.retrievers == ("dense", "bm25") and set(search.own) == {"identifier", "cjk"}
    for ci, wmap in ((0, {"identifier": 3, "cjk": 1, "other": 7}), (3, {"identifier": 10, "cjk": 0, "other": 2})):
        p = search.proposal(ci, wmap)
        w = {g: WEIGHTS[i] for g, i in wmap.items()}
        assert p["weights"] == {"dense": w["other"], "bm25": round(1 - w["other"], 1)}
        assert p["group_weights"] == {g: {"dense": w[g], "bm25": round(1 - w[g], 4)} for g in ("identifier", "cjk")}
        written = written_contract(contract, True, p)
        rules = {r.when: r.weights.as_dict() for r in written.retrieve.rules}
        assert rules["identifier"] == p["group_weights"]["identifier"]
        # the built-in cjk rule weighing dense:use-m, a retriever this store lacks, is left as written;
        # the one the store applies takes the weights
        assert [r.weights.as_dict() for r in written.retrieve.rules if r.when == "cjk"] == [
            {"dense": 0.0, "bm25": 0.9, "dense:use-m": 0.1}, p["group_weights"]["cjk"]]
        assert written.retrieve.fusion.weights.as_dict() == p["weights"]


def _three_items(three_retrievers, fake_embedder, overrides):
    store, qs, _ = three_retrievers
    contract = load_contract(None, overrides, search=False)
    items = [it for it in gathered(store, qs, contract, k=10, embedder=fake_embedder) if it.q.answerable]
    return contract, items, Search(contract, items, "ndcg@10", min_count=3)


def test_calibrate_scores_a_three_retriever_setting_as_eval_measures_it(three_retrievers, fake_embedder):
    store, qs, _ = three_retrievers
    for overrides in ([], NO_USE_M):
        contract, items, search = _three_items(three_retrievers, fake_embedder, overrides)
        assert search.retrievers == ("dense", "bm25", "dense:use-m") and len(search.grid) == 21
        # Chinese paraphrases: BM25 barely covers them, so the built-in rule on cjk and coverage fuses them
        cjk = "cjk@0.4" if overrides == [] else "cjk"
        assert {cjk, "other"} <= set(search.groups) and cjk in search.own
        rng = np.random.default_rng(2)
        for ci in range(len(CONFIGS)):
            wmap = {g: int(rng.integers(len(search.grid))) for g in ("identifier", "cjk", "other", *search.own)}
            p = search.proposal(ci, wmap)
            assert p["group_weights"][cjk] == search.grid[wmap[cjk]] and set(p["weights"]) == set(search.retrievers)
            _assert_eval_measures(store, qs, contract, search, items, ci, wmap, fake_embedder, p)


def test_the_search_over_three_retrievers_weighs_use_m_on_cjk_questions(three_retrievers, fake_embedder):
    """Chinese paraphrases only the multilingual model finds: every setting without dense:use-m
    scores lower on them, so calibrate must weigh it in the cjk rule, and eval with the written
    contract reproduces the numbers it recorded."""
    import yaml

    store, qs, path = three_retrievers
    contract, items, search = _three_items(three_retrievers, fake_embedder, NO_USE_M)
    assert "cjk" in search.own
    cjk = search.groups == "cjk"
    for ci in range(len(CONFIGS)):
        sums = search.S[ci][:, cjk].sum(axis=1)
        without = max(s for p, s in zip(search.grid, sums) if p["dense:use-m"] == 0)
        assert sums.max() > without + 0.5, CONFIGS[ci]  # at least half a question's nDCG better with use-m
    ci, wmap = search.choose(np.ones(len(items), dtype=bool))
    assert search.grid[wmap["cjk"]]["dense:use-m"] > 0

    r = calibrate(store, qs, contract, embedder=fake_embedder, min_count=3, folds=3, source=str(path))
    h = r.heldout
    assert r.adopted and h["p_value"] < 0.05 and h["chosen"] > h["current"]
    assert h["best_single_name"] == "dense:use-m" and h["dense:use-m"] > max(h["dense"], h["bm25"])
    w = r.proposed["group_weights"]["cjk"]
    assert list(w) == ["dense", "bm25", "dense:use-m"] and w["dense:use-m"] > 0 and sum(w.values()) == pytest.approx(1)
    assert list(r.current["group_weights"]["cjk"].values()) == [0.1, 0.9, 0.0]
    curve = r.weight_curves["cjk"]
    assert len(curve["grid"]) == len(curve["metric"]) == 21 and curve["count"] == int(cjk.sum())
    assert curve["profiles"]["dense:use-m"]["weights"] == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert max(curve["profiles"]["dense:use-m"]["metric"][1:]) > curve["profiles"]["dense:use-m"]["metric"][0]

    new = load_contract(None, [], search=False).model_validate(yaml.safe_load(calibrated_text(None, contract, r.calibration())))
    rules = {rule.when: rule.weights.as_dict() for rule in new.retrieve.rules}
    assert rules["cjk"] == w and new.retrieve.fusion.weights.as_dict() == r.proposed["weights"]
    assert new.calibration.heldout["dense:use-m"] == h["dense:use-m"]
    # eval --fail-under-recorded 0 with the written contract: every recorded number reproduced
    report = evaluate(store, qs, EvalConfig(modes=["contract"], ks=[5, 10], metrics=["hit_rate", "mrr", "ndcg"]),
                      contract=new, embedder=fake_embedder)
    gate = recorded_gate(new, report, 0.0)
    assert gate["passed"] and len(gate["checks"]) >= 6, gate
    assert report.metrics()["contract"]["ndcg@10"] == r.verification["metrics"]["ndcg@10"] > h["current"]


def test_cli_calibrate_writes_the_use_m_weight_and_eval_holds_ci_to_it(three_retrievers, fake_embedder, tmp_path,
                                                                       monkeypatch):
    import kbtool.embed as embed
    from typer.testing import CliRunner

    from kbtool.cli import app

    store, _, path = three_retrievers
    real = embed.load_embedder
    monkeypatch.setattr(embed, "load_embedder", lambda model=None, **kw: fake_embedder if getattr(
        model, "model", model) == fake_embedder.model_id else real(model, **kw))  # the store's model: the fake one
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    assert runner.invoke(app, ["contract", "init"]).exit_code == 0
    text = (tmp_path / "kbtool.yaml").read_text()
    # CJK questions fused without the model (Chinese paraphrases: the rule on cjk and BM25 coverage)
    text = text.replace("dense:use-m: 0.7", "dense:use-m: 0.0").replace("dense:use-m: 0.1", "dense:use-m: 0.0")
    assert text.count("dense:use-m: 0.0") == 2
    (tmp_path / "kbtool.yaml").write_text(text)
    base = ["--store", str(store.path)]
    r = runner.invoke(app, ["calibrate", str(path), *base, "--min-count", "3", "--folds", "3", "--out", "cal"])
    assert r.exit_code == 0, r.output
    assert "cjk@0.4: dense " in r.stdout and "dense:use-m" in r.stdout and "dense:use-m alone" in r.stdout
    assert (tmp_path / "cal" / "calibration.png").stat().st_size > 10_000
    r = runner.invoke(app, ["calibrate", str(path), *base, "--min-count", "3", "--folds", "3", "--write", "--json", "-q"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["adopted"] and data["proposed"]["group_weights"]["cjk@0.4"]["dense:use-m"] > 0
    written = load_contract(tmp_path / "kbtool.yaml")
    cjk = next(rule for rule in written.retrieve.rules if rule.type == "cjk" and rule.signals)
    assert cjk.when.bm25_coverage_below == 0.4
    assert cjk.weights.as_dict() == data["proposed"]["group_weights"]["cjk@0.4"]
    assert "# your version of this contract" in (tmp_path / "kbtool.yaml").read_text()  # comments kept
    r = runner.invoke(app, ["eval", str(path), *base, "-q", "--fail-under-recorded", "0", "--out", "ev"])
    assert r.exit_code == 0, r.output
    html = (tmp_path / "ev" / "report.html").read_text()
    assert "best single (dense:use-m)" in html and "dense:use-m alone" in html


def test_weights_that_already_fuse_as_proposed_are_left_as_written():
    """A rule kept as written (a type with too few questions) is in the proposal normalised over
    the store's retrievers; --write leaves it (and any weights already at the proposal) alone."""
    import yaml

    from kbtool.contract import default_contract, validate_contract
    from kbtool.evaluation.calibrate import _current_fusion, as_calibration

    contract = default_contract()
    proposed = {**_current_fusion(contract, ("dense", "bm25", "dense:use-m")), "method": "rrf"}
    assert proposed["group_weights"]["cjk"] == {"dense": 0.0, "bm25": 0.9, "dense:use-m": 0.1}
    assert proposed["weights"] == {"dense": 0.7, "bm25": 0.3, "dense:use-m": 0.0}
    proposed["group_weights"]["identifier"] = {"dense": 0.2, "bm25": 0.4, "dense:use-m": 0.4}
    new = validate_contract(yaml.safe_load(calibrated_text(None, contract, as_calibration(True, proposed))))
    rules = {r.when: r.weights.as_dict() for r in new.retrieve.rules}
    assert [r.weights.as_dict() for r in new.retrieve.rules if r.when == "cjk"] == [
        {"dense": 0.0, "bm25": 0.9, "dense:use-m": 0.1}, {"dense": 0.1, "bm25": 0.9}]
    assert rules["identifier"] == {"dense": 0.2, "bm25": 0.4, "dense:use-m": 0.4}
    assert new.retrieve.fusion.weights.as_dict() == {"dense": 0.7, "bm25": 0.3}
    assert new.retrieve.fusion.method == "rrf" and new.contract_version == 2



def test_calibrated_weights_go_to_the_rule_the_store_applies_and_no_other():
    """The built-in contract has two cjk rules: one weighing dense:use-m (skipped where the store
    lacks it) and the 0.1 / 0.9 one. Calibrating on a store without use-m writes the cjk weights into
    the second rule and leaves the first as written; on a store with use-m, the first, and the
    second stays the fallback."""
    import yaml

    from kbtool.contract import default_contract, validate_contract
    from kbtool.evaluation.calibrate import _current_fusion, as_calibration

    contract = default_contract()
    for retrievers, cjk, want in [
        (("dense", "bm25"), {"dense": 0.2, "bm25": 0.8},
         [{"dense": 0.0, "bm25": 0.9, "dense:use-m": 0.1}, {"dense": 0.2, "bm25": 0.8}]),
        (("dense", "bm25", "dense:use-m"), {"dense": 0.0, "bm25": 0.4, "dense:use-m": 0.6},
         [{"dense": 0.0, "bm25": 0.4, "dense:use-m": 0.6}, {"dense": 0.1, "bm25": 0.9}]),
    ]:
        proposed = _current_fusion(contract, retrievers)
        if len(retrievers) == 2:
            assert proposed["group_weights"]["cjk"] == {"dense": 0.1, "bm25": 0.9}  # the rule that applies
        proposed["group_weights"]["cjk"] = cjk
        new = validate_contract(yaml.safe_load(calibrated_text(None, contract, as_calibration(True, proposed))))
        assert [r.weights.as_dict() for r in new.retrieve.rules if r.when == "cjk"] == want, retrievers
        assert new.retriever_weights({"cjk"}, retrievers) == pytest.approx({k: v for k, v in cjk.items() if v})


def test_threshold_rates_print_their_counts():
    """'1 of 8 (12.5%)', never '12% of 8' (a rate rounded to whole percent hid the count)."""
    from kbtool.cli.calibrate_render import _of

    assert _of(0.125, 8) == "1 of 8 (12.5%)"
    assert _of(0.0, 6) == "0 of 6 (0%)"
    assert _of(0.2143, 28) == "6 of 28 (21.4%)"
    assert _of(None, 0) == "– of 0"


def test_the_calibrated_contract_is_what_the_written_file_loads_as():
    """calibrate builds the contract it writes directly (no YAML round trip): it equals the file
    calibrated_text writes, read back, for an adopted fusion (a rule appended, one set, one kept),
    thresholds with tiers replaced, a model and the appendix."""
    import yaml

    from kbtool.contract import (AnswerabilityModel, CalibrationRecord, calibrated_contract, default_contract,
                                 validate_contract)
    from kbtool.evaluation.calibrate import _current_fusion, as_calibration

    contract = default_contract()
    proposed = {**_current_fusion(contract, ("dense", "bm25")), "method": "rrf", "rrf_k": 30,
                "weights": {"dense": 0.6, "bm25": 0.4}}
    proposed["group_weights"] = {"identifier": {"dense": 0.2, "bm25": 0.8}, "cjk": {"dense": 0.1, "bm25": 0.9}}
    th = {"default": {"answer": 0.8, "low_confidence": 0.6},
          "tiers": {"cjk": {"answer": 0.5, "low_confidence": 0.4}, "identifier": {"answer": 0.7, "low_confidence": 0.7}}}
    model = AnswerabilityModel(coefficients={"coverage": 1.5}, intercept=-0.25).model_dump(mode="json")
    record = CalibrationRecord(date="2026-12-04T00:00:00+00:00", adopted=True, recorded={"metrics": {"ndcg@10": 0.5}})
    for cal in (as_calibration(True, proposed, th, model, record), as_calibration(False, {}, th),
                as_calibration(True, proposed)):
        direct = calibrated_contract(contract, cal)
        written = validate_contract(yaml.safe_load(calibrated_text(None, contract, cal)))
        assert direct.to_dict() == written.to_dict()
        assert list(direct.decide.tiers) == list(written.decide.tiers)
    assert [(r.when, r.weights.as_dict()) for r in direct.retrieve.rules if not r.signals] == [
        ("cjk_identifier", {"dense": 0.0, "bm25": 0.5, "dense:use-m": 0.5}), ("identifier", {"dense": 0.2, "bm25": 0.8}), ("cjk", {"dense": 0.0, "bm25": 0.9, "dense:use-m": 0.1}),
        ("cjk", {"dense": 0.1, "bm25": 0.9})]
    assert direct.retrieve.rules[2] == contract.retrieve.rules[2]  # Chinese questions BM25 barely covers: as written
    assert direct.retrieve.rules[5:] == contract.retrieve.rules[5:]  # the coverage rules, as the proposal had them
    assert direct.retrieve.fusion.method == "rrf" and direct.retrieve.fusion.rrf_k == 30
    assert direct.retrieve.fusion.weights.as_dict() == {"dense": 0.6, "bm25": 0.4} and direct.contract_version == 2


def test_calibrate_proposes_a_coverage_rule_where_it_pays_and_writes_it_after_the_type_rules():
    """Search.choose_rule picks the cut-off and grid point that raise the training questions of the
    shared groups whose BM25 coverage is below it; the proposal is written after the type rules,
    replacing the contract's coverage rules, the same by both writers."""
    import yaml

    from kbtool.contract import calibrated_contract, default_contract, validate_contract
    from kbtool.evaluation.calibrate import COVERAGE_CUTS, as_calibration

    search = object.__new__(Search)  # scores made up: questions 0-3 gain from dense alone when BM25 covers little
    search.grid = weight_grid(("dense", "bm25"))
    search.groups = np.array(["other"] * 6 + ["identifier"])
    search.shared_groups, search.fixed, search.own = ["other"], {}, ("identifier",)
    search.coverage = np.array([0.1, 0.12, 0.15, 0.18, 0.6, 0.7, 0.05])
    search.S = np.full((1, len(search.grid), 7), 0.5)
    search.S[0, -1, :4] = 1.0  # dense 1.0: the low-coverage questions' relevant page first
    search.S[0, -1, 4:6] = 0.0  # ... but not the covered ones'
    search.S[0, -1, 6] = 0.0  # nor the identifier question (a type rule takes it first)
    wmap = {"other": 7, "identifier": 3}
    everyone = np.ones(7, dtype=bool)
    rule = search.choose_rule(0, wmap, everyone)
    assert rule == (COVERAGE_CUTS[1], len(search.grid) - 1)  # the first cut-off above all four: 0.2
    assert list(search.per_question(0, wmap, rule)) == [1.0] * 4 + [0.5] * 3
    assert search.choose_rule(0, wmap, np.array([False] * 4 + [True] * 3)) is None  # nothing to gain there
    proposal = search.proposal(0, wmap, rule)
    assert proposal["coverage_rules"] == [{"bm25_coverage_below": 0.2, "weights": {"dense": 1.0, "bm25": 0.0}}]

    contract = default_contract()
    cal = as_calibration(True, proposal)
    direct = calibrated_contract(contract, cal)
    written = validate_contract(yaml.safe_load(calibrated_text(None, contract, cal)))
    assert direct.to_dict() == written.to_dict()
    assert [r.type for r in direct.retrieve.rules] == ["cjk_identifier", "identifier", "cjk", "cjk", "cjk", None]
    last = direct.retrieve.rules[-1]
    assert last.when.bm25_coverage_below == 0.2 and last.weights.as_dict() == {"dense": 1.0, "bm25": 0.0}
    assert direct.retriever_weights({"other"}, ("dense", "bm25"), 0.1) == {"dense": 1.0}
    # no rule proposed: the coverage rules go (the choice measured without one)
    none = calibrated_contract(contract, as_calibration(True, search.proposal(0, wmap)))
    assert not any(r.signals and r.type is None for r in none.retrieve.rules)
    assert none.retrieve.rules[2] == contract.retrieve.rules[2]  # the rule on a type and coverage stays


@pytest.mark.slow
def test_calibrate_reports_the_coverage_rule_test_held_out(tiny, fake_embedder):
    store, qs, path = tiny
    r = calibrate(store, qs, load_contract(None, [], search=False), embedder=fake_embedder, min_count=3, folds=3)
    test = r.heldout["coverage_rule"]
    assert set(test) == {"with", "without", "gain", "p_value"}
    assert test["gain"] == pytest.approx(test["with"] - test["without"], abs=2e-4)
    if not r.adopted:  # kept as written: the built-in coverage rules stay in the proposal
        assert r.proposed["coverage_rules"] == [
            {"bm25_coverage_below": 0.25, "weights": {"dense": 1.0, "bm25": 0.0}},
            {"bm25_coverage_below": 0.35, "weights": {"dense": 0.8, "bm25": 0.2}}]
    elif not (test["gain"] > 0 and test["p_value"] < 0.05):
        assert r.proposed["coverage_rules"] == []


def test_the_proposed_change_is_a_line_per_section_naming_each_tier():
    """calibrate prints what it would change as a line per contract section — each threshold under
    the name of its tier — not a 190-line YAML diff (-v prints that)."""
    import copy

    import yaml

    from kbtool.cli.calibrate_render import changes_lines
    from kbtool.contract import default_contract, dump_yaml

    old = yaml.safe_load(dump_yaml(default_contract()))
    new = copy.deepcopy(old)
    new["contract_version"] = 2
    new["decide"]["thresholds"].update(answer=0.9116, low_confidence=0.6905)
    new["decide"]["tiers"] = {"identifier": {"answer": 0.7006, "low_confidence": 0.7006}}
    new["decide"]["model"]["intercept"] = 1.5
    new["decide"]["model"]["coefficients"] = {k: v + 1 for k, v in new["decide"]["model"]["coefficients"].items()}
    new["calibration"] = {"date": "2026-12-07", "store": {"documents": 20, "chunks": 197}, "objective": "ndcg@10",
                          "folds": 5, "seed": 0}
    lines = changes_lines(old, new)
    t = old["decide"]["thresholds"]
    assert lines == [
        "contract_version: 1 -> 2",
        f"decide.model (the answerability model): {len(new['decide']['model']['coefficients']) + 1} values of "
        "coefficients, intercept",
        f"decide.thresholds (the default tier's thresholds): answer {t['answer']} -> 0.9116, low_confidence "
        f"{t['low_confidence']} -> 0.6905",
        "decide.tiers.identifier (the identifier tier's thresholds): added: answer 0.7006, low_confidence 0.7006",
        "calibration: added: 6 values of date, store, objective, folds, …",
    ]
    assert changes_lines(old, old) == []
