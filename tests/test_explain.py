"""Issue 16: refusals a team can trust. Identifier detection, the refusal message, suggestions
close in spelling and meaning, one rounding rule, and the contract in force."""

from __future__ import annotations

import pytest

from kbtool.query.preprocess import detect_identifiers, detect_types


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
