"""Secrets stay secret on every path that shows stored text: hits, the context block, expansion,
refusal suggestions, `/v1/documents` (Service.document_span, MCP `read`) and `kbtool chunks` —
also a private key the chunker cut into many chunks, and questions made of fragments of the
secrets (a "did you mean" must never complete one)."""

from __future__ import annotations

import base64
import json
import random

import pytest
from typer.testing import CliRunner

from kbtool import load_contract, retrieve
from kbtool.cli import app

from .conftest import write

runner = CliRunner()
_rng = random.Random(36)
_KEY = base64.b64encode(bytes(_rng.getrandbits(8) for _ in range(900))).decode()
KEY_LINES = [_KEY[i:i + 64] for i in range(0, len(_KEY), 64)]
PEM = "-----BEGIN RSA " + "PRIVATE KEY-----\n" + "\n".join(KEY_LINES) + "\n-----END RSA " + "PRIVATE KEY-----"
# 25 fake secrets (and the PEM key above), built so that this file holds none verbatim; in Markdown (a table, a link, a code
# fence, a key cut across chunks), text, HTML, DOCX and PDF.
FORMS = {
    "aws_secret": "Zx9Qw8ErTy7Ui6Op5As4" + "Df3Gh2Jk1LzXcVbNm0Qw",
    "url_password": "Tr0ub4dor" + "Xyz9",
    "slack": "xoxb-" + "2048-4096-Zq8Wm3Rt6Yp1",
    "github": "ghp_" + "Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8",
    "openai": "sk-" + "proj-Lm5Xc7Vb9Nn2Rt4Yu6Io1PwQz3a8Jd0",
    "aws_id": "AKIA" + "ZR7QX2MB4TKW9PLD",
    "jwt": "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiJib3QtZGVwbG95In0.Sf1KxwRJSMeKKF2QT4fwpMeJf36POk6yJV",
    "passphrase": "correct horse " + "battery staple 42",
    "smtp": "Sm7p!" + "Relay#2024",
    "basic_auth": "YWRtaW46" + "c2VjcmV0UGFzczEyMw==",
    "stripe": "sk_live_" + "51H8abcdEFGhijkLMno",
    "stripe_token": "tok_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "bare_aws": "wJalrXUtnFEMI/K7MDENG" + "/bPxRfiCYEXAMPLEKEY",
    "docx_password": "Qz8!mkVr" + "27pLw",
    "pdf_token": "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2",
    # detect-secrets' service formats, in a Markdown table, a code fence, a link, text and HTML
    "gitlab": "glpat-" + "Xy7Kp2Lm9Qr4St6Uv8Wz",
    "npm": "npm_" + "Ab3Cd5Ef7Gh9Ij1Kl3Mn5Op7Qr9St1Uv3Wx5",
    "twilio": "SK" + "9f8e7d6c5b4a39281706f5e4d3c2b1a0",
    "sendgrid": "SG." + "Qw3Er5Ty7Ui9Op1As3Df5G" + ".Hj7Kl9Zx1Cv3Bn5Mq7Wr9Ty1Ui3Op5As7Df9Gh1Jk3Lz",
    "mailchimp": "8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d" + "-us14",
    "azure": "AccountKey=" + base64.b64encode(bytes(_rng.getrandbits(8) for _ in range(66))).decode(),
    "square": "sq0csp-" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx2Yz3Ab4Cd5",
    "pypi": "pypi-AgEIcHlwaS5vcmc" + base64.urlsafe_b64encode(bytes(_rng.getrandbits(8) for _ in range(60))).decode().rstrip("="),
    "ec_key": base64.b64encode(bytes(_rng.getrandbits(8) for _ in range(48))).decode(),
    "link_token": "Q9w8E7r6" + "T5y4U3i2",
}


def tiny_pdf(lines: list[str]) -> bytes:
    """A one-page PDF of text lines (Helvetica), written by hand: no PDF library is installed."""
    stream = "BT /F1 11 Tf 50 780 Td 14 TL " + " ".join(
        "(" + t.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ") Tj T*" for t in lines) + " ET"
    objs = ["<< /Type /Catalog /Pages 2 0 R >>", "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> "
            "/Contents 5 0 R >>", "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
            f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream"]
    out, offsets = "%PDF-1.4\n", []
    for i, body in enumerate(objs, start=1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n{body}\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n" + "".join(f"{o:010d} 00000 n \n" for o in offsets)
    out += f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n"
    return out.encode("latin-1")
DOCS = {
    "deploy.md": ("# Deploy\n\nThe deploy bot signs releases with this key:\n\n" + PEM + "\n\nRotate it every quarter.\n\n"
                  "## Storage\n\nThe storage settings: aws_secret_access_key = " + FORMS["aws_secret"]
                  + " and region eu-west-1.\n\nThe billing database lives at postgres://admin:" + FORMS["url_password"]
                  + "@db.internal:5432/app for the billing service.\n"),
    "chat.md": ("# Chat bot\n\n| setting | value |\n| --- | --- |\n| bot token | `" + FORMS["slack"] + "` |\n"
                "| repo token | " + FORMS["github"] + " |\n\nSee [the token](https://example.com/?t=" + FORMS["openai"]
                + ") for the model.\n\n```yaml\nsmtp_password: \"" + FORMS["smtp"] + "\"\n```\n"),
    "api.html": ("<html><body><h1>Payments API</h1><p>Send the header <code>Authorization: Basic "
                 + FORMS["basic_auth"] + "</code> with every payments request.</p><table><tr><td>live key</td><td>"
                 + FORMS["stripe"] + "</td></tr><tr><td>card token</td><td>" + FORMS["stripe_token"]
                 + "</td></tr></table><p>The archive bucket key, pasted alone:</p><pre>" + FORMS["bare_aws"]
                 + "</pre><p>Newsletter key " + FORMS["mailchimp"] + " and the shop's OAuth secret " + FORMS["square"]
                 + " are rotated yearly.</p></body></html>\n"),
    "services.md": ("# Services\n\n| service | credential |\n| --- | --- |\n| sms | " + FORMS["twilio"] + " |\n"
                    "| mail | `" + FORMS["sendgrid"] + "` |\n\nThe CI runner clones with " + FORMS["gitlab"]
                    + " as its deploy token.\n\n```ini\n//registry.npmjs.org/:_authToken=" + FORMS["npm"] + "\n```\n\n"
                    "Download [the nightly export](https://files.example.com/export?access_token=" + FORMS["link_token"]
                    + ") each morning.\n\n```\n-----BEGIN EC " + "PRIVATE KEY-----\n" + FORMS["ec_key"]
                    + "\n-----END EC " + "PRIVATE KEY-----\n```\n"),
    "config.txt": ("Storage connection: DefaultEndpointsProtocol=https;AccountName=archive;" + FORMS["azure"]
                   + ";EndpointSuffix=core.windows.net\nThe package upload uses " + FORMS["pypi"] + " from the release job.\n"),
    "notes.txt": ("Operations notes.\n\nThe cloud access key id is " + FORMS["aws_id"] + " for the uploader.\n"
                  "The session token of the deploy bot: " + FORMS["jwt"] + "\n"
                  "The vault passphrase: \"" + FORMS["passphrase"] + "\" opens the release vault.\n"),
}


def test_the_probe_plants_at_least_twenty_credential_forms():
    assert len(FORMS) >= 20 and len(set(FORMS.values())) == len(FORMS)
    placed = "".join(DOCS.values())
    assert all(v in placed for k, v in FORMS.items() if k not in ("docx_password", "pdf_token"))


def fragments(secret: str) -> list[str]:
    """Pieces a leak would show: every 10-character window of the secret (any case)."""
    return [secret[i:i + 10].lower() for i in range(0, max(1, len(secret) - 9), 3)]


def leaked(text: str, asked: str = "") -> list[str]:
    """The secrets ``text`` shows a piece of, but for pieces of the question ``asked`` (echoed)."""
    low, asked = text.lower(), asked.lower()
    out = [name for name, s in FORMS.items() if any(f in low and f not in asked for f in fragments(s))]
    return out + [f"key line {i}" for i, line in enumerate(KEY_LINES)
                  if any(f in low and f not in asked for f in (line[:12].lower(), line[-12:].lower()))]


@pytest.fixture(scope="module")
def kb(tmp_path_factory, embedder):
    from kbtool.ingestion.pipeline import ingest
    from kbtool.store import Store

    base = tmp_path_factory.mktemp("secrets")
    for name, text in DOCS.items():
        write(base / "docs" / name, text)
    from docx import Document

    doc = Document()
    doc.add_heading("Database access", 1)
    doc.add_paragraph("The reporting database account uses db_password = " + FORMS["docx_password"] + " until June.")
    doc.save(base / "docs" / "access.docx")
    (base / "docs" / "tokens.pdf").write_bytes(tiny_pdf(
        ["Release tokens", "The release robot pushes tags with the token " + FORMS["pdf_token"] + " daily."]))
    store = Store.open(base / "kb", create=True)
    report = ingest(store, [base / "docs"], embedder=embedder)
    assert not report.failed and len(report.added) == len(DOCS) + 2, report
    store.close()
    # Small chunks: the key is cut into many, most with neither its BEGIN nor its END line.
    for args in (["chunk", "--size", "64"], ["index"]):
        r = runner.invoke(app, [*args, "--store", str(base / "kb"), "-q"])
        assert r.exit_code == 0, r.output
    store = Store.open(base / "kb")
    chunks = store.chunks("deploy.md")
    assert sum(1 for c in chunks if any(line in c["embedded"] for line in KEY_LINES)) >= 6  # cut, really
    return {"store": store, "base": base}


QUESTIONS = ["how does the deploy bot sign releases", "rotate the deploy key", "storage settings region",
             "where does the billing database live", "chat bot token", "smtp password", "cloud access key id",
             "deploy bot session token", "vault passphrase", "private key lines", "payments API header",
             "live key card token", "archive bucket key", "reporting database account password",
             "release robot token", "sms service credential", "mail credential", "CI runner deploy token",
             "npm registry auth", "nightly export download", "EC key", "storage connection account",
             "package upload release job", "newsletter key OAuth secret"]


def _probes() -> list[str]:
    """Questions made of pieces of each secret: its start, a middle window, one character changed."""
    out = []
    for s in [*FORMS.values(), *KEY_LINES[1:4]]:
        out += [s[:8], s[len(s) // 3:len(s) // 3 + 9], s[:-1] + ("x" if s[-1] != "x" else "y")]
    return out


@pytest.mark.parametrize("mode", ["contract", "bm25"])
def test_no_answer_shows_a_secret_for_any_question(kb, embedder, mode):
    contract = load_contract(None, ["postprocess.expand.mode=section"] if mode == "contract"
                             else ["retrieve.fusion.method=bm25"], search=False)
    shown = 0
    for question in QUESTIONS + _probes():
        answer = retrieve(kb["store"], contract, question, embedder=embedder, top_k=8)
        out = answer.to_dict()
        out.pop("question"), out.pop("processed")  # the caller's own words, echoed
        out["trace"] = {k: v for k, v in (out.get("trace") or {}).items() if k not in ("question", "preprocess")}
        text = json.dumps(out, ensure_ascii=False)
        assert not leaked(text, question), (question, leaked(text, question), answer.explanation.get("suggestions"))
        shown += len(answer.hits)
    assert shown >= 40  # the rules had hits to redact: the probe is not vacuous


def test_suggestions_never_complete_a_secret(kb, embedder):
    contract = load_contract(None, ["retrieve.fusion.method=bm25"], search=False)
    for probe in ("Zx9Qw8Er", "Tr0ub4dorXyz8", "xoxb-2048-4096"):
        answer = retrieve(kb["store"], contract, probe, embedder=embedder)
        assert not leaked(json.dumps(answer.explanation), probe), answer.explanation
    # An ordinary misspelling is still suggested.
    answer = retrieve(kb["store"], contract, "qaurter rotaton", embedder=embedder)
    assert any("quarter" in s for s in answer.explanation.get("suggestions", [])), answer.explanation


def test_a_document_span_is_redacted_line_by_line(kb):
    from kbtool.serve.service import Service

    service = Service(kb["base"] / "kb")
    for doc_id, source in DOCS.items():
        span = service.document_span(doc_id)
        assert not leaked(span["text"]), (doc_id, leaked(span["text"]))
        assert span["total_lines"] == len(source.split("\n"))  # the file's line numbers still hold
    span = service.document_span("deploy.md", "5-7")
    assert span["text"].split("\n")[1] == "[REDACTED:credentials]"
    assert "Rotate it every quarter." in service.document_span("deploy.md")["text"]


def test_kbtool_chunks_shows_no_secret(kb):
    for doc in [*DOCS, "access.docx", "tokens.pdf"]:
        r = runner.invoke(app, ["chunks", doc, "--store", str(kb["base"] / "kb"), "--json"])
        assert r.exit_code == 0, r.output
        assert not leaked(r.stdout), leaked(r.stdout)
        assert "REDACTED:credentials" in r.stdout


def test_the_source_span_is_a_bounded_window_read_by_sqlite(kb):
    """A hit is checked against the text around it, not its whole document (a 30 MB file scanned
    on every question took seconds): the window SQLite cuts equals the Python slice."""
    store = kb["store"]
    text = store.document_text("deploy.md")
    for start, n, margin in ((0, 40, 10), (120, 64, 50), (len(text) - 5, 5, 100)):
        around, at = store.source_window("deploy.md", start, n, margin=margin)
        lo = max(0, start - margin)
        assert around == text[lo:start + n + margin] and around[at:at + n] == text[start:start + n]
    assert store.source_window("deploy.md", None, 10) == (None, None)
