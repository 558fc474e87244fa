"""Review of issue 21: kbtool/sensitive.py — the credentials rule redacts env-style names and quoted
passphrases (each failed before the fix)."""

from kbtool.contract import load_contract

SECRET = "Zq8" + "vL2mN4pR7sT1wX5yB9cD3fG6hJ0kQ2eU"  # a fake secret, built so this file holds none verbatim


def _scan(text: str) -> str:
    return load_contract(None, [], search=False).postprocess.sensitive.rules().scan(text)[0]


def test_an_env_style_secret_assignment_is_redacted():
    got = _scan(f"export AWS_SECRET_ACCESS_KEY={SECRET}")
    assert SECRET not in got


def test_a_quoted_passphrase_with_spaces_is_redacted():
    got = _scan('db:\n  password: "correct horse battery staple"\n')
    assert "correct horse battery staple" not in got
