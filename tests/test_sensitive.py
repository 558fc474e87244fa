"""postprocess.sensitive: the built-in credentials rule and lexicon categories, applied by the one
pipeline (query, query --json/--context, eval's answers, serve), recorded in the trace by category
and count only."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from kbtool import load_contract, retrieve
from kbtool.cli import app
from kbtool.errors import ContractError
from kbtool.query.tokens import count_tokens_for

from .conftest import write

runner = CliRunner()

# Fake secrets, built so that this file itself holds none verbatim.
AWS = "AKIA" + "QX7RZ2MB4TKW9PLD"
SK = "sk-" + "proj-" + "a8Jd0Qz3Lm5Xc7Vb9Nn2Rt4Yu6Io1Pw"
GHP = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
KEY_BODY = "MIIEowIBAAKCAQEA7b3x9Qm2LwZr4Tn8Vc1Kp0Ys5Hd6Jf3Ga2Ue9Ri7Oo4Aa1Bb2C"
PEM = "-----BEGIN RSA " + f"PRIVATE KEY-----\n{KEY_BODY}\n{KEY_BODY[::-1]}\n-----END RSA " + "PRIVATE KEY-----"
PASSWORD = "Tr0ub4dor&3x"
SECRETS = [AWS, SK, GHP, KEY_BODY, KEY_BODY[::-1], PASSWORD]
SHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

DOCS = {
    "deploy.md": ("# Deploying the billing worker\n\nThe billing worker deploy needs cloud credentials. "
                  f"Set the access key id {AWS} in the worker environment, the model token {SK} and the "
                  f"repository token {GHP}. The worker config reads:\n\n```\ndb_user = billing\n"
                  f"password = {PASSWORD}\n```\n\nThe signing key of the billing worker deploy:\n\n{PEM}\n"),
    "errors.md": ("# Error TW-E4031\n\nTW-E4031 means the upload checksum failed. Compare the sha256 digest "
                  f"{SHA} with the one on the download page. The password: required field of the login form "
                  "and api_key: YOUR_API_KEY in agent.yaml are unrelated. The task id is 3f2b9c1e-7d4a-4b8e-9a61-0c5d2e7f8a90.\n"),
    "pay.md": ("# Salary bands\n\nThe salary bands for support engineers are reviewed every spring by the "
               "billing committee at hr-db.internal.\n"),
    "refund.md": "# Refunds\n\nA refund is available within thirty days of purchase; the billing team sends it.\n",
}
LEXICON = """\
categories:
  pay:
    words: [salary, salaries, "pay band"]
    question: refuse
    message: "Questions about staff pay go to HR, not to this assistant."
    results: drop
  hosts:
    patterns: ['\\b[a-z0-9-]+\\.internal\\b']
    results: redact
"""


@pytest.fixture(scope="module")
def kb(tmp_path_factory, embedder):
    from kbtool.ingestion.pipeline import ingest
    from kbtool.store import Store

    base = tmp_path_factory.mktemp("sensitive")
    for name, text in DOCS.items():
        write(base / "docs" / name, text)
    store = Store.open(base / "kb", create=True)
    assert not ingest(store, [base / "docs"], embedder=embedder).failed
    write(base / "conf" / "lex.yaml", LEXICON)
    write(base / "conf" / "kbtool.yaml", "contract_version: 1\npostprocess:\n  sensitive:\n    lexicon: lex.yaml\n")
    return {"store": store, "base": base, "contract": base / "conf" / "kbtool.yaml"}


def ask(kb, question, embedder, overrides=(), contract=None, **kw):
    c = load_contract(contract, list(overrides), search=False)
    return retrieve(kb["store"], c, question, embedder=embedder, **kw)


def leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


# ---- the built-in credentials rule ----------------------------------------------------------
def test_credentials_never_reach_hits_context_or_trace(kb, embedder, tmp_path):
    trace = tmp_path / "t.jsonl"
    a = ask(kb, "billing worker deploy access key and token", embedder, top_k=4, trace_path=trace)
    assert a.hits and a.hits[0].doc_id == "deploy.md"
    everything = json.dumps(a.to_dict(with_trace=True)) + trace.read_text()
    assert leaks(everything) == []
    assert "[REDACTED:credentials]" in a.context and "[REDACTED:credentials]" in a.hits[0].text
    assert "password = [REDACTED:credentials]" in "\n".join(h.text for h in a.hits)  # the key stays readable
    sens = a.trace["sensitive"]
    assert sens["redacted"]["credentials"] >= 5 and sens["dropped"] == {} and sens["question"] is None
    assert "sensitive_ms" in a.trace["timings_ms"]


def test_credentials_drop(kb, embedder):
    a = ask(kb, "billing worker deploy access key and token", embedder, ["postprocess.sensitive.credentials=drop"])
    assert "deploy.md" not in {h.doc_id for h in a.hits} and a.hits
    assert a.trace["sensitive"]["dropped"]["credentials"] >= 1 and a.trace["sensitive"]["redacted"] == {}
    assert leaks(json.dumps(a.to_dict(with_trace=True))) == []


def test_query_json_and_context_cli(kb):
    store = str(kb["store"].path)
    r = runner.invoke(app, ["query", "billing worker deploy access key", "--store", store, "--json", "-k", "4"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["hits"][0]["doc_id"] == "deploy.md" and leaks(r.stdout) == []
    assert "[REDACTED:credentials]" in out["hits"][0]["text"]
    r = runner.invoke(app, ["query", "billing worker deploy signing key", "--store", store, "--context"])
    assert r.exit_code == 0, r.output
    assert "[REDACTED:credentials]" in r.stdout and leaks(r.stdout) == []
    r = runner.invoke(app, ["query", "billing worker deploy signing key", "--store", store])  # the table
    assert r.exit_code == 0 and leaks(r.stdout) == []


def test_server_answers(kb):
    from fastapi.testclient import TestClient

    from kbtool.serve.http import create_app
    from kbtool.serve.service import Service

    service = Service(kb["store"].path, kb["contract"])
    c = TestClient(create_app(service), base_url="http://127.0.0.1")
    r = c.post("/v1/retrieve", json={"question": "billing worker deploy access key and token"})
    assert r.status_code == 200, r.text
    assert r.json()["hits"] and leaks(r.text) == [] and "[REDACTED:credentials]" in r.text


def test_ordinary_text_is_untouched(kb, embedder):
    a = ask(kb, "TW-E4031 upload checksum sha256", embedder, top_k=4)
    errors = next(h for h in a.hits if h.doc_id == "errors.md")
    assert errors.text == kb["store"].chunks_by_id([errors.chunk_id])[errors.chunk_id]["text"]
    assert SHA in errors.text and "password: required" in errors.text and "api_key: YOUR_API_KEY" in errors.text
    assert "REDACTED" not in errors.text


def test_sample_store_is_identical_with_it_off(sample_store, embedder):
    """The sample corpus holds no credential: the built-in rule (on by default) changes nothing, and
    off the stage does not run at all."""
    qs = [json.loads(x)["question"] for x in open("eval_sets/sample.jsonl", encoding="utf-8") if x.strip()][:25]
    on = retrieve(sample_store, load_contract(search=False), qs, embedder=embedder)
    off = retrieve(sample_store, load_contract(overrides=["postprocess.sensitive.credentials=off"], search=False),
                   qs, embedder=embedder)
    for a, b in zip(on, off):
        assert a.to_dict() == b.to_dict()
        assert a.trace["sensitive"] == {"question": None, "redacted": {}, "dropped": {}}  # no time in it: equal runs give equal traces
        assert "sensitive" not in b.trace


R = "[REDACTED:credentials]"


@pytest.mark.parametrize("text, expected", [
    # a URL's password: scheme, user and host stay, so the text still reads
    ("dsn: postgres://admin:" + "S3cr3tPass@db.internal:5432/app", f"dsn: postgres://admin:{R}@db.internal:5432/app"),
    ("git clone https://user:" + "token123@github.com/x.git", f"git clone https://user:{R}@github.com/x.git"),
    ("redis://:" + "hunter2pass@cache:6379", f"redis://:{R}@cache:6379"),
    ("mongodb+srv://svc:" + "p%40ss%3Aw0rd@cluster0.example.net/db", f"mongodb+srv://svc:{R}@cluster0.example.net/db"),
    ("amqp://bot:" + "Zq9-kL2m@mq:5672 and https://ops:" + "Xy7!abcd@ci.local",
     f"amqp://bot:{R}@mq:5672 and https://ops:{R}@ci.local"),
    # placeholders and the words docs write instead of a password are left alone
    ("postgres://user:password@host/db", None),
    ("postgres://tidewater:secret@db.internal:5432/tidewater", None),  # the sample corpus' own example
    ("amqp://guest:guest@rabbit:5672", None),
    ("postgres://app:${DB_PASSWORD}@db:5432/app", None),
    ("postgres://app:<password>@db:5432/app", None),
    ("postgres://app:****@db:5432/app", None),
    ("https://me:your_token_here@github.com/x.git", None),
    ("mysql://root:xxxxxxxx@localhost/db", None),
    ("https://u:" + "%s@h" % R, None),  # already redacted: a second pass changes nothing
    # no userinfo password at all
    ("http://localhost:8000/docs", None),
    ("mail user@example.com or admin@example.com:8080", None),
    ("git@github.com:org/repo.git", None),
    ("ssh://git@github.com:22/org/repo.git", None),
    ("lunch 12:30@noon, then 14:00@office", None),
    ("https://example.com/search?q=a:b1c2d3e4@x", None),  # '@' after the path is not userinfo
])
def test_credentials_in_urls(text, expected):
    from kbtool.contract import Sensitive

    out, dropped, counts = Sensitive().rules().scan(text)
    assert out == (text if expected is None else expected) and dropped is None
    assert counts == ({} if expected is None else {"credentials": expected.count(R) - text.count(R)})


def test_sample_corpus_holds_no_credential(sample_store):
    """The built-in rule matches none of the sample store's chunks (its postgres://...:secret@ is a
    placeholder), so it costs the sample corpus' answers nothing."""
    from kbtool.contract import Sensitive

    rules = Sensitive().rules()
    rows = sample_store.chunks_by_id([c["chunk_id"] for c in sample_store.chunks()])
    assert len(rows) > 50 and any("postgres://tidewater:secret@" in r["text"] for r in rows.values())
    hits = [i for i, r in rows.items() for f in ("text", "title", "section_path") if rules.scan(r.get(f) or "")[2]]
    assert hits == []


# ---- a lexicon -------------------------------------------------------------------------------
def test_lexicon_refuses_a_question(kb, embedder):
    a = ask(kb, "What are the salary bands of support engineers?", embedder, contract=kb["contract"])
    assert a.decision == "refuse" and a.hits == []
    assert "'pay'" in a.explanation["message"] and "salary" not in a.explanation["message"]
    assert a.context == "Questions about staff pay go to HR, not to this assistant.\n"
    assert a.trace["sensitive"]["question"] == {"category": "pay", "action": "refuse"}
    assert "salary" not in json.dumps(a.trace["sensitive"])


def test_lexicon_show_match(kb, embedder, tmp_path):
    write(tmp_path / "lex.yaml", LEXICON.replace("    results: drop", "    results: drop\n    show_match: true"))
    write(tmp_path / "k.yaml", "contract_version: 1\npostprocess:\n  sensitive:\n    lexicon: lex.yaml\n")
    a = ask(kb, "What are the salary bands?", embedder, contract=tmp_path / "k.yaml")
    assert a.decision == "refuse" and "'salary'" in a.explanation["message"]


def test_lexicon_drops_and_redacts_results(kb, embedder):
    a = ask(kb, "bands reviewed every spring by the billing committee", embedder, contract=kb["contract"], top_k=4)
    assert a.decision != "refuse" or a.explanation.get("sensitive") is None
    assert "pay.md" not in {h.doc_id for h in a.hits} and a.trace["sensitive"]["dropped"] == {"pay": 1}
    # the pay category dropped it; without the drop the host would be redacted
    write(kb["base"] / "conf" / "lex2.yaml", LEXICON.replace("results: drop", "results: redact"))
    a = ask(kb, "bands reviewed every spring by the billing committee", embedder, contract=kb["contract"],
            overrides=["postprocess.sensitive.lexicon=lex2.yaml"], top_k=4)
    pay = next(h for h in a.hits if h.doc_id == "pay.md")
    assert "hr-db.internal" not in pay.text and "[REDACTED:hosts]" in pay.text and "[REDACTED:pay]" in pay.text
    assert pay.title == pay.section_path == "[REDACTED:pay] bands"  # what the context block shows too
    assert "Salary" not in a.context and "salary" not in a.context
    assert a.trace["sensitive"]["redacted"]["hosts"] == 1 and "hr-db" not in json.dumps(a.trace)


def test_eval_sees_the_stage(kb, tmp_path):
    qs = write(tmp_path / "q.jsonl", json.dumps({"id": "p", "question": "what is the salary of engineers",
                                                 "relevant": ["pay.md"]}) + "\n")
    r = runner.invoke(app, ["eval", str(qs), "--store", str(kb["store"].path), "--contract", str(kb["contract"]),
                            "--json", "-q"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    modes = out["per_question"][0]["modes"]
    assert modes["contract"]["decision"] == "refuse" and modes["contract"]["first_relevant_rank"] is None
    assert all(m["decision"] == "refuse" for m in modes.values())  # every mode runs the same answer()


# ---- errors ----------------------------------------------------------------------------------
@pytest.mark.parametrize("lexicon, expected", [
    (None, "no such file"),
    ("categories: [oops\n", "not valid YAML"),
    ("categories:\n  pay:\n    words: [x]\n    question: refuse\n", "message: required"),
    ("categories:\n  pay:\n    patterns: ['(']\n", "not a valid regex"),
    ("categories:\n  pay:\n    words: [x]\n    results: hide\n", "use redact, drop or allow"),
    ("words: [x]\n", "no categories"),
])
def test_bad_lexicon_is_one_line(kb, tmp_path, lexicon, expected):
    if lexicon is not None:
        write(tmp_path / "lex.yaml", lexicon)
    contract = write(tmp_path / "k.yaml", "contract_version: 1\npostprocess:\n  sensitive:\n    lexicon: lex.yaml\n")
    with pytest.raises(ContractError, match=expected) as exc:
        load_contract(contract)
    assert "postprocess.sensitive.lexicon lex.yaml" in str(exc.value) and "\n" not in str(exc.value)
    r = runner.invoke(app, ["query", "refund", "--store", str(kb["store"].path), "--contract", str(contract)])
    assert r.exit_code == 1 and expected in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_contract_round_trip_and_off_spelling(tmp_path):
    from kbtool.contract import dump_yaml, validate_contract, yaml_load_plain

    c = load_contract(search=False)
    assert c.postprocess.sensitive.credentials == "redact" and c.postprocess.sensitive.lexicon is None
    assert validate_contract(yaml_load_plain(dump_yaml(c))) == c
    off = write(tmp_path / "k.yaml", "contract_version: 1\npostprocess:\n  sensitive:\n    credentials: off\n")
    assert load_contract(off).postprocess.sensitive.credentials == "off"




def test_contract_show_gives_the_lexicon_as_written(kb, tmp_path, monkeypatch):
    """Loading makes the lexicon absolute (copies of the contract keep reading it); `contract show`
    shows it as the file wrote it, and that text loads again from the contract's folder."""
    monkeypatch.chdir(tmp_path)  # not the contract's folder
    c = load_contract(kb["contract"])
    assert c.postprocess.sensitive.lexicon == str(kb["base"].resolve() / "conf" / "lex.yaml")
    r = runner.invoke(app, ["contract", "show", "--contract", str(kb["contract"]), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["postprocess"]["sensitive"]["lexicon"] == "lex.yaml"
    r = runner.invoke(app, ["contract", "show", "--contract", str(kb["contract"])])
    assert r.exit_code == 0 and "    lexicon: lex.yaml\n" in r.stdout, r.output
    shown = write(kb["base"] / "conf" / "shown.yaml", r.stdout)
    again = load_contract(shown)
    assert again.to_dict() == c.to_dict() and [x.name for x in again.postprocess.sensitive.rules().categories] == \
        ["pay", "hosts", "credentials"]
    r = runner.invoke(app, ["contract", "show", "--contract", str(kb["contract"]), "--json",
                            "--set", "postprocess.sensitive.lexicon=../conf/lex.yaml"])
    assert r.exit_code == 0 and json.loads(r.stdout)["postprocess"]["sensitive"]["lexicon"] == "../conf/lex.yaml"

def test_spelling_suggestions_never_offer_a_secret():
    """The index's vocabulary is lowercased: a suggestion is checked as written and upper-cased."""
    from kbtool.contract import Sensitive
    from kbtool.sensitive import safe_notes

    notes = [f"instead of 'x', the index has: {SK.lower()}", f"instead of 'y', the index has: {AWS.lower()}",
             "instead of 'colour', the index has: color, tw-e4031"]
    assert safe_notes(Sensitive().rules(), notes) == notes[2:]


# ---- detect-secrets' formats: a Stripe live key, a Slack token, a GitHub token ---------------
# Fake tokens in the services' formats, built so that this file holds none verbatim.
STRIPE = "sk_" + "live_" + "51Hq8ZkLm2Vt9Rx4Wc7Nb3Yd"
SLACK = "xoxb-" + "2934712049-5819273645018-" + "q8Jf3LmZt0Wc7Vb2Nn4Rx9Ky"
GITHUB = "ghp_" + "Zr7Kq2Wm9Tx4Lb8Nc3Vd6Hf1Gj5Ps0Ya2Eu7"
TOKENS = [STRIPE, SLACK, GITHUB]
TOKENS_QUESTION = "which keys does the alerting bot of the payment service use"


@pytest.fixture(scope="module")
def tokens_kb(tmp_path_factory, embedder):
    from kbtool.ingestion.pipeline import ingest
    from kbtool.store import Store

    base = tmp_path_factory.mktemp("tokens")
    write(base / "docs" / "alerts.md", (
        "# The alerting bot of the payment service\n\nThe alerting bot of the payment service charges with "
        f"the Stripe key {STRIPE}, posts to the ops channel with the Slack token {SLACK} and opens "
        f"issues with the GitHub token {GITHUB}.\n\n```\nSTRIPE_KEY={STRIPE}\n```\n"))
    write(base / "docs" / "refund.md", DOCS["refund.md"])
    store = Store.open(base / "kb", create=True)
    assert not ingest(store, [base / "docs"], embedder=embedder).failed
    return store


def test_service_tokens_never_reach_any_answer(tokens_kb, tmp_path):
    """query --json (and its --trace record), query --context, the HTTP answer and the MCP answer."""
    import anyio
    from fastapi.testclient import TestClient
    from mcp import Client

    from kbtool.serve.http import create_app
    from kbtool.serve.mcp import build_server
    from kbtool.serve.service import Service

    store, trace = str(tokens_kb.path), tmp_path / "trace.jsonl"
    shown = {}
    r = runner.invoke(app, ["query", TOKENS_QUESTION, "--store", store, "--json", "--trace", str(trace)])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["hits"][0]["doc_id"] == "alerts.md"
    shown["query --json"], shown["trace"] = r.stdout, trace.read_text()
    r = runner.invoke(app, ["query", TOKENS_QUESTION, "--store", store, "--context"])
    assert r.exit_code == 0, r.output
    shown["query --context"] = r.stdout

    service = Service(tokens_kb.path)
    r = TestClient(create_app(service), base_url="http://127.0.0.1").post("/v1/retrieve",
                                                                         json={"question": TOKENS_QUESTION})
    assert r.status_code == 200, r.text
    shown["http"] = r.text

    async def mcp_search():
        async with Client(build_server(service)) as client:
            res = await client.call_tool("search", {"question": TOKENS_QUESTION})
            return json.dumps(res.structured_content) + "\n".join(c.text for c in res.content if c.type == "text")

    shown["mcp"] = anyio.run(mcp_search)
    for where, text in shown.items():
        assert "alerts.md" in text, where  # the document was answered from ...
        assert [t for t in TOKENS if t in text] == [], where  # ... and none of its tokens shown
        if where != "trace":
            assert text.count("[REDACTED:credentials]") >= 3, where


FAKE = "Zq8vL2mN4pR7sT1wX5yB9cD3fG6hJ0kQ2eU7aB4cD9eF1gH3iJ5kL7mN9oP1qR3sT5uV7wX9yZ"
HEX32 = "9f3b2c1d4e5f60718293a4b5c6d7e8f9"


@pytest.mark.parametrize("text, secret", [
    # the rule's own patterns missed each of these (detect-secrets' plugins find them)
    (f"charge with sk_{'live_'}{FAKE[:40]} today", f"sk_{'live_'}{FAKE[:40]}"),  # redacted whole, past the 24 the plugin reads
    (f"restricted rk_{'live_'}{FAKE[:24]}", f"rk_{'live_'}{FAKE[:24]}"),
    (f"hook https://hooks.slack.com/services/T0A1B2C3D4/B5E6F7G8H/{FAKE[:24]}", FAKE[:24]),
    (f"the ACCA{'QX7RZ2MB4TKW9PLD'} key id", f"ACCA{'QX7RZ2MB4TKW9PLD'}"),
    (f'aws key: "wJalrXUtnFEMI/K7MDENG/{FAKE[:18]}"', f"wJalrXUtnFEMI/K7MDENG/{FAKE[:18]}"),
    (f"sid AC{HEX32} and SK{HEX32[::-1]}", HEX32),
    (f"token glpat-{FAKE[:20]}", f"glpat-{FAKE[:20]}"),
    (f"pypi-AgEIcHlwaS5vcmc{FAKE[:70]}", FAKE[:70]),
    (f"SG.{FAKE[:22]}.{FAKE[22:65]}", FAKE[22:65]),
    (f"sq0csp-{FAKE[:43]}", FAKE[:43]),
    (f"{HEX32}-us12 is the key", HEX32),
    (f"DefaultEndpointsProtocol=https;AccountName=x;AccountKey={(FAKE * 2)[:86]}==", FAKE[:60]),
    ("jwt eyJhbGciOiJub25lIn0.eyJzdWIiOiIxMjMifQ. unsigned", "eyJzdWIiOiIxMjMifQ"),
    (f"-----BEGIN PGP {'PRIVATE'} KEY BLOCK-----\n\nlQOYBF{FAKE[:40]}\n-----END PGP PRIVATE KEY BLOCK-----\nafter",
     FAKE[:40]),
    (f"---- BEGIN SSH2 ENCRYPTED {'PRIVATE'} KEY ----\nComment: x\nP2/56w{FAKE[:40]}\n---- END SSH2 ENCRYPTED "
     "PRIVATE KEY ----", FAKE[:40]),
    (f"PuTTY-User-Key-File-2: ssh-rsa\nEncryption: none\nPrivate-Lines: 1\n{FAKE[:40]}\nPrivate-MAC: 8f3b2c1d\nafter",
     FAKE[:40]),
    ('if not (credentials.password == "swordfish"):', "swordfish"),
    ('db_pass = "Zq8vL2mN"', "Zq8vL2mN"),
    ('{"auth_key": "Zq8vL2mN4pR7"}', "Zq8vL2mN4pR7"),
])
def test_detect_secrets_formats_are_redacted(text, secret):
    from kbtool.contract import Sensitive

    out, dropped, counts = Sensitive().rules().scan(text)
    assert secret not in out and "[REDACTED:credentials]" in out and counts["credentials"] >= 1
    assert out.endswith(("today", "key id", "after", "unsigned", "is the key", '"):', '"', '"}', "]")), out  # the text around stays


@pytest.mark.parametrize("text", [
    # what detect-secrets' high-entropy, public-IP detectors (not used) flag; a key's name in prose
    '"sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"',
    'commit = "a94a8fe5ccb19ba61c4c0873d391e987982fbbd3"',
    '"request_id": "Zq8vL2mN4pR7sT1wX5yB9cD3fG6hJ0kQ"',
    "uvicorn main:app --host 0.0.0.0 --port 80",
    "a PEM file begins with BEGIN RSA PRIVATE KEY and ends with END RSA PRIVATE KEY",
    # the keyword plugin's placeholders, and Markdown code that is no password
    'password: "<your-password>", api_key = "YOUR_API_KEY", secret: "${SECRET}"',
    "See the Password: `required` field; the secret: `str` type",
])
def test_what_the_credentials_rule_leaves_alone(text):
    from kbtool.contract import Sensitive

    assert Sensitive().rules().scan(text) == (text, None, {})


# Review of issue 21: the credentials rule redacts env-style names and quoted passphrases (each
# failed before the fix).
SECRET = "Zq8" + "vL2mN4pR7sT1wX5yB9cD3fG6hJ0kQ2eU"  # a fake secret, built so this file holds none verbatim


def _scan(text: str) -> str:
    return load_contract(None, [], search=False).postprocess.sensitive.rules().scan(text)[0]


def test_an_env_style_secret_assignment_is_redacted():
    got = _scan(f"export AWS_SECRET_ACCESS_KEY={SECRET}")
    assert SECRET not in got


def test_a_quoted_passphrase_with_spaces_is_redacted():
    got = _scan('db:\n  password: "correct horse battery staple"\n')
    assert "correct horse battery staple" not in got


def test_detect_secrets_plugins_work_without_importing_requests():
    """detect-secrets' plugins import ``requests`` only to verify secrets online: a stand-in is
    imported in its place, and turns into the real module when one of its attributes is read."""
    code = (
        "import sys\n"
        "from kbtool.credentials import credential_spans\n"
        "spans = credential_spans(\"password = 'hunter2hunter2'  AKIAIOSFODNN7EXAMPLE\")\n"
        "assert spans == ((12, 26), (29, 49)), spans\n"
        "assert 'requests' not in sys.modules and 'urllib3' not in sys.modules\n"
        "import detect_secrets.plugins.base as base\n"
        "assert base.requests.exceptions.RequestException.__module__ == 'requests.exceptions'\n"
        "import requests\n"
        "assert type(requests).__name__ == 'module' and 'urllib3' in sys.modules\n"
        "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
