"""Issue 16: refusals a team can trust. Identifier detection, the refusal message, suggestions
close in spelling and meaning, one rounding rule, and the contract in force."""

from __future__ import annotations

import re

import pytest

from kbtool.query.preprocess import detect_identifiers, detect_types, preprocess


def idents(text: str) -> list[tuple[str, str]]:
    return [(i["kind"], i["text"]) for i in detect_identifiers(text)]


# ---- identifiers --------------------------------------------------------------------------------
@pytest.mark.parametrize("text, kind, ident", [
    ("How do I use TestClient?", "pascal_case", "TestClient"),
    ("What raises HTTPException in a dependency?", "pascal_case", "HTTPException"),
    ("Configure CORSMiddleware for two origins", "pascal_case", "CORSMiddleware"),
    ("XMLHttpRequest times out", "pascal_case", "XMLHttpRequest"),
    ("How do I refresh an OAuth token?", "pascal_case", "OAuth"),
    ("Is IPv6 supported?", "pascal_case", "IPv6"),
    ("Can I mount it over WebDAV?", "pascal_case", "WebDAV"),
    ("Where is the GraphQL endpoint?", "pascal_case", "GraphQL"),
    ("TestClient is slow", "pascal_case", "TestClient"),  # at a sentence start too
    ("call getUserById() twice", "camel_case", "getUserById"),
    ("Use the iPhone app", "camel_case", "iPhone"),
    ("What does X-Process-Time measure?", "header", "X-Process-Time"),
    ("Send X-Request-ID on every call", "header", "X-Request-ID"),
    ("Set Access-Control-Allow-Origin", "header", "Access-Control-Allow-Origin"),
    ("the WWW-Authenticate header", "header", "WWW-Authenticate"),
    ("What does error TW-E5120 mean?", "error_code", "TW-E5120"),
    ("Set sync.timeout_ms to 500", "config_key", "sync.timeout_ms"),
])
def test_identifiers_are_detected_whole(text, kind, ident):
    assert (kind, ident) in idents(text)
    assert detect_types(text, detect_identifiers(text)) == ["identifier"]


@pytest.mark.parametrize("text", [
    "What is the refund window?", "How do I sign in?", "Tidewater pricing", "Why does Tidewater sync slowly?",
    "What HTTP status does the API return?", "Do EU customers get a refund?", "HTTPS only",
    "What happens if my laptop drops off the Wi-Fi?", "the refund window in Asia-Pacific",
    "Über Straße", "A B C", "I am OK", "Is SSO on the Enterprise plan?",
])
def test_ordinary_capitalised_words_and_acronyms_are_not_identifiers(text):
    assert idents(text) == []


# ---- a small real store -----------------------------------------------------------------------
import json  # noqa: E402

from typer.testing import CliRunner  # noqa: E402

from kbtool.cli import app  # noqa: E402
from kbtool.contract import default_contract, dump_yaml, load_contract  # noqa: E402
from kbtool.query.explain import MEANING, missing_terms, shown, shown_threshold, suggestions  # noqa: E402
from kbtool.query.pipeline import retrieve  # noqa: E402
from kbtool.query.scope import scope  # noqa: E402

from .conftest import public_and_restricted_store, write  # noqa: E402
from .test_filtered_search import _store  # noqa: E402 (a store of public and restricted documents)

runner = CliRunner()

DOCS = {
    "deploy/docker.md": """# Deploying with Docker

## Build the image

Build the image with docker build and run it behind a reverse proxy. Ask for help in the forum.

## Limits

The server held 300 connections at most, rather than the 200 of the old release; synchronize the
clocks first. Pick a color for the dashboard. Reset a lost password from the sign-in page.

## Errors

Error TW-E5120 means the block storage is unreachable.
""",
}
SECRET = {"vault.md": "# Vault\n\nThe colour of the vault door is secret: grimbleflax.\n"}


@pytest.fixture(scope="module")
def kb(tmp_path_factory, embedder):
    return public_and_restricted_store(tmp_path_factory.mktemp("explain"), DOCS, SECRET, {"access": "vault"}, embedder)


def contract(*sets):
    return load_contract(None, list(sets), search=False)


def suggested(kb, embedder, terms, allowed=None) -> dict[str, str]:
    return {s.split("'")[1]: s.split("the index has: ")[1] for s in suggestions(kb, terms, allowed, [], embedder)}


# ---- suggestions: close in spelling and meaning ---------------------------------------------------
def test_suggestions_need_spelling_and_meaning(kb, embedder):
    got = suggested(kb, embedder, ["helm", "rate", "3000", "synchronise", "TW-E5121"])
    got.update(suggested(kb, embedder, ["paswsord"]))  # (five missing terms at most get suggestions)
    assert "helm" not in got  # help, held: close in spelling only
    assert "rate" not in got  # rather
    assert "3000" not in got  # a different number is a different fact
    assert got["synchronise"] == "synchronize"
    assert got["TW-E5121"].startswith("tw-e5120")  # an identifier's sibling: the prefix rule
    assert got["paswsord"] == "password"  # a misspelling the model splits into pieces


def test_meaning_threshold_separates_the_measured_pairs(embedder):
    words = ["helm", "help", "rate", "rather", "colour", "color", "licence", "license"]
    v = dict(zip(words, embedder.embed_queries(words)))
    assert float(v["helm"] @ v["help"]) < MEANING and float(v["rate"] @ v["rather"]) < MEANING
    assert float(v["colour"] @ v["color"]) >= MEANING and float(v["licence"] @ v["license"]) >= MEANING


def test_without_a_model_only_a_misspelling_is_suggested(kb):
    got = suggested(kb, None, ["helm", "rate", "3000", "paswsord", "colour"])
    assert got == {"paswsord": "password", "colour": "color"}  # one edit, five letters or more


def test_suggestions_come_only_from_permitted_chunks(kb, embedder):
    visible = {c for c, doc, _ in kb.chunk_metadata() if not doc.startswith("vault")}
    assert suggestions(kb, ["colours"], None, [], embedder) == ["instead of 'colours', the index has: colour, color"]
    assert suggestions(kb, ["colours"], visible, [], embedder) == ["instead of 'colours', the index has: color"]
    assert suggestions(kb, ["grimbleflux"], None, [], embedder) == ["instead of 'grimbleflux', the index has: grimbleflax"]
    assert suggestions(kb, ["grimbleflux"], visible, [], embedder) == []  # only the vault holds it


# ---- the message --------------------------------------------------------------------------------
# the decision on the best hit's confidence (no answerability model), with the thresholds these tests name
CONFIDENCE = ("decide.model=null", "decide.thresholds={answer: 0.5, low_confidence: 0.4}",
              "decide.tiers={identifier: {answer: 0.45, low_confidence: 0.35}}")


def test_refusal_names_missing_terms_as_spelled_and_the_nearest_miss_with_its_citation(kb, embedder):
    # fused 0.7 / 0.3 (the type rules only): BM25 covers little of it, so the built-in coverage
    # rule would rank by the model alone, whose nearest miss on this tiny corpus is another page
    type_rules = "retrieve.rules=[{when: identifier, weights: {dense: 0.3, bm25: 0.7}}]"
    ans = retrieve(kb, contract(*CONFIDENCE, type_rules), "How do I run it with Mangum on Lambda?", embedder=embedder)
    assert ans.decision == "refuse"
    ex = ans.explanation
    assert {"mangum", "lambda"} <= set(ex["missing_terms"]) and "suggestions" in ex
    best = ans.hits[0] if ans.hits[0].confidence == ans.confidence else max(ans.hits, key=lambda h: h.confidence)
    assert "the knowledge base never mentions 'Mangum' or 'Lambda'" in ex["message"]
    assert f"nearest miss: {best.citation} at relevance {shown(best.confidence, (0.5, 0.4))}" in ex["message"]
    assert best.citation.startswith("deploy/docker.md:") and ex["best"]["citation"] == best.citation
    assert ex["message"].startswith(f"confidence {shown(ans.confidence, (0.5, 0.4))} is below the refuse threshold 0.40 "
                                    "(default tier)")  # the contract has tiers: each threshold is named by its own
    code = retrieve(kb, contract(*CONFIDENCE), "What does error TW-E5121 mean?", embedder=embedder)
    assert code.tier == "identifier"
    assert re.search(r"threshold 0\.(45|35) \(identifier tier\)", code.explanation["message"]), code.explanation["message"]
    plain = retrieve(kb, contract("decide.model=null", "decide.thresholds={answer: 0.5, low_confidence: 0.4}"),
                     "How do I run it with Mangum on Lambda?", embedder=embedder)
    assert "tier)" not in plain.explanation["message"]  # no tiers: nothing to tell apart


def test_low_confidence_and_answer_messages(kb, embedder):
    q = "How do I build the docker image?"
    low = retrieve(kb, contract("decide.thresholds={answer: 0.99, low_confidence: 0.01}"), q, embedder=embedder)
    assert low.decision == "low_confidence"
    assert "is below the answer threshold 0.99 (refuse below 0.01)" in low.explanation["message"]
    assert "best match: deploy/docker.md:" in low.explanation["message"] and "at relevance" in low.explanation["message"]
    ok = retrieve(kb, contract("decide.thresholds={answer: 0.01, low_confidence: 0.01}"), q, embedder=embedder)
    assert ok.explanation["message"].startswith(f"P(answerable) {shown(ok.confidence, (0.01,))} ≥ answer threshold 0.01")


def test_a_restricted_caller_reads_the_same_words_for_a_secret_and_an_unknown_term(kb, embedder):
    # dense cosines differ by word: BM25 alone, with a model of BM25 signals (a model weighing dense
    # signals makes a bm25 query gather the dense retriever too)
    c = contract("access.principals={bob: [public]}", "retrieve.fusion.method=bm25",
                 "decide.model={coefficients: {coverage: 1.0, absent_kb: -1.0, absent_top: -1.0}}")
    secret = retrieve(kb, c, "Which grimbleflax opens the vault?", embedder=embedder, principal="bob")
    unknown = retrieve(kb, c, "Which zqxwvutsr opens the vault?", embedder=embedder, principal="bob")
    assert "grimbleflax" in secret.explanation["missing_terms"]
    assert "the knowledge base never mentions 'grimbleflax'" in secret.explanation["message"]  # no word of a limit
    assert secret.explanation["message"].replace("grimbleflax", "zqxwvutsr") == unknown.explanation["message"]
    assert "secret" not in json.dumps(secret.to_dict(with_trace=True))
    filtered = retrieve(kb, c, "Which zqxwvutsr opens the vault?", embedder=embedder, principal="bob",
                        filters=["dir=deploy/**"])
    assert "no chunk the filters allow mentions 'zqxwvutsr'" in filtered.explanation["message"]


# ---- one rounding ------------------------------------------------------------------------------
@pytest.mark.parametrize("x, against, text", [
    (0.499, (0.5,), "0.499"), (0.4999, (0.5,), "0.4999"), (0.3963, (0.4,), "0.396"), (0.5, (0.5,), "0.50"),
    (0.5024, (0.5, 0.4), "0.50"), (0.44, (0.5, 0.4), "0.44"), (0.401, (0.4,), "0.40"), (0.123, (), "0.12"),
])
def test_one_rounding_rule(x, against, text):
    assert shown(x, against) == text
    assert all((float(shown(x, against)) < t) == (x < t) for t in against)


def test_with_a_model_the_message_names_the_probability_and_the_hit_its_relevance(kb, embedder):
    ans = retrieve(kb, default_contract(), "How do I run it with Mangum on Lambda?", embedder=embedder)
    assert ans.decision != "answer" and default_contract().decide.model is not None
    msg = ans.explanation["message"]
    assert msg.startswith(f"P(answerable) {shown(ans.confidence, (ans.thresholds['answer'], ans.thresholds['low_confidence']))} is below")
    assert "the knowledge base never mentions 'Mangum' or 'Lambda'" in msg and " at relevance " in msg


def test_thresholds_show_their_own_digits():
    assert [shown_threshold(t) for t in (0.5, 0.4, 0.455, 0.35)] == ["0.50", "0.40", "0.455", "0.35"]


def test_table_and_verdict_show_the_same_digits_at_a_threshold(kb, embedder):
    """The tester's case: the table said 0.50 while the verdict said '0.49 is below 0.5'."""
    for q in ("How do I build the docker image?", "reverse proxy", "lost password", "block storage error",
              "clocks", "dashboard color", "connections at most", "forum help"):
        x = retrieve(kb, contract(*CONFIDENCE), q, embedder=embedder).confidence
        if round(x, 2) > x + 1e-9 and round(x, 2) - x < 0.005:
            break
    else:
        pytest.skip("no question with a best confidence that rounds up")
    t = round(x, 2)
    r = runner.invoke(app, ["query", q, "--store", str(kb.path), "--set", f"decide.thresholds={{answer: {t}, low_confidence: 0.01}}",
                            "--set", "decide.tiers={}", "--set", "decide.model=null"])
    assert r.exit_code == 0, r.output
    digits = shown(x, (t, 0.01))
    assert digits != f"{t:.2f}" and float(digits) < t
    assert f"confidence {digits} is below the answer threshold {t:.2f}" in r.stdout
    assert f"│ {digits}" in r.stdout  # the table row of that hit, same digits


# ---- the contract in force ------------------------------------------------------------------------
def test_query_names_the_contract_file_and_version(kb, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["query", "docker image", "--store", str(kb.path)])
    assert r.exit_code == 0, r.output
    assert "contract: built-in (version 1)" in r.stdout
    path = write(tmp_path / "mine.yaml", dump_yaml(default_contract()).replace("contract_version: 1", "contract_version: 3"))
    r = runner.invoke(app, ["query", "docker image", "--store", str(kb.path), "--contract", str(path)])
    assert f"contract: {path} (version 3)" in r.stdout
    r = runner.invoke(app, ["query", "docker image", "--store", str(kb.path), "--contract", str(path), "--json"])
    assert json.loads(r.stdout)["contract"] == {"path": str(path), "version": 3, "calibrated": None}
    write(tmp_path / "kbtool.yaml", dump_yaml(default_contract()).replace("contract_version: 1", "contract_version: 2"))
    r = runner.invoke(app, ["query", "docker image", "--store", str(kb.path), "--json"])
    assert json.loads(r.stdout)["contract"] == {"path": "kbtool.yaml", "version": 2, "calibrated": None}


def test_contract_source_reports_the_calibration_date(tmp_path):
    from kbtool.cli._common import contract_source

    text = dump_yaml(default_contract()).replace("calibration: null", "calibration:\n  date: '2026-11-30T08:00:00+00:00'")
    path = write(tmp_path / "cal.yaml", text)
    assert contract_source(path) == {"path": str(path), "version": 1, "calibrated": "2026-11-30"}
    assert contract_source(None, default_contract())["path"] in (None, "kbtool.yaml")


def test_chinese_question_words_are_never_named_as_missing():
    """'怎样' (how), '为什么' (why) phrase a question; a knowledge base without them misses nothing."""
    from kbtool.query.explain import PHRASING

    assert {"怎样", "怎么", "如何", "什么", "为什么", "哪些", "多少", "是否"} <= PHRASING


# Review of issue 20 (large-store filtered search, memoised scopes, refusal explanations at
# scale): regressions found by probing, each on a real store (fake embedder for logic).
def test_an_identifier_inside_a_longer_one_is_not_reported_missing(tmp_path, fake_embedder):
    """The analyser emits ``client.sync.timeout_ms`` and ``tw-e1042/tw-e1043`` whole, not the
    identifier a question names inside them: BM25's vocabulary alone says a chunk that holds
    ``sync.timeout_ms`` never mentions it."""
    store = _store(tmp_path, fake_embedder, {
        "cfg.md": "# Config\n\nSet client.sync.timeout_ms to 5000 when the link is slow.\n",
        "err.md": "# Errors\n\nThe agent shows TW-E1042/TW-E1043 when the proxy drops the upload.\n",
    })
    c = contract()
    for question, ident in [("What does sync.timeout_ms do?", "sync.timeout_ms"),
                            ("How do I fix TW-E1042?", "TW-E1042")]:
        p = preprocess(question, c)
        assert [i["text"] for i in p.identifiers] == [ident]
        assert store.any_chunk_contains(ident)
        assert ident not in missing_terms(store, p, [], None)
    # an identifier no chunk holds is still missing, and a longer one does not hold a prefix of it
    p = preprocess("How do I fix TW-E104?", c)
    assert missing_terms(store, p, [], None) == ["TW-E104"]


def test_suggestions_of_a_restricted_caller_do_not_depend_on_hidden_identifiers(tmp_path, fake_embedder):
    """A restricted caller gets what a store without the hidden documents gives: siblings of a
    missing identifier that only hidden chunks hold must not crowd out the one it may read (the
    nearest 100 in sorted order, and the 6 closest in spelling, were picked among every term)."""
    from kbtool.query.explain import suggestions

    public = {"tickets.md": "# Tickets\n\nTicket KB-1-900 covers the proxy that drops uploads.\n"}
    secret = {f"codes{j}.md": f"# Codes {j}\n\n" + " ".join(f"KB-1-{n}" for n in range(100 + 100 * j, 200 + 100 * j)) + "\n"
              for j in range(4)}
    full = _store(tmp_path / "full", fake_embedder, public, secret)
    alone = _store(tmp_path / "alone", fake_embedder, public)
    c = contract("access.principals={guest: [public], cfo: [finance]}")
    got = suggestions(full, ["KB-1-260"], scope(full, c, [], "guest").allowed, [], None)
    want = suggestions(alone, ["KB-1-260"], scope(alone, c, [], "guest").allowed, [], None)
    assert want == ["instead of 'KB-1-260', the index has: kb-1-900"]
    assert got == want
    # the caller who may read them is offered siblings among them
    cfo = suggestions(full, ["KB-1-260"], scope(full, c, [], "cfo").allowed, [], None)
    assert len(cfo) == 1 and "kb-1-2" in cfo[0] and "kb-1-900" not in cfo[0]


# Review of issue 16 (answerability model, refusal gates): defects found by probing, each pinned.
def test_a_two_character_chinese_word_the_knowledge_base_lacks_is_named(sample_store, embedder):
    from kbtool.query.pipeline import retrieve

    ans = retrieve(sample_store, contract(), "Tidewater Sync 有安卓或苹果手机客户端吗？", embedder=embedder)
    # not refused since 2026-12-04: 苹果 (Apple) is an everyday word, not a name jieba's dictionary
    # tags, so nothing says the knowledge base lacks it; still never answered plainly, and named
    assert ans.decision in ("refuse", "low_confidence") and "苹果" in ans.explanation["missing_terms"]
    assert "never mentions" in ans.explanation["message"] and "苹果" in ans.explanation["message"]
