"""Where the credentials in a text are (``credential_spans``): token formats from detect-secrets'
(Yelp) plugins, its keyword, private-key and basic-auth plugins, and kbtool's own patterns (below);
``within_source``: the part of a chunk that lies inside a credential of the text it was cut from.
``kbtool.sensitive`` turns these spans into redactions on every path that shows stored text."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import types
from contextlib import contextmanager
from functools import lru_cache
from typing import Sequence

# Placeholders docs write instead of a value: <your key>, ${API_KEY}, {{secret}}, $TOKEN, ****, xxx, your_key...
_PLACEHOLDER = r"(?!<|\$|\{|%|\*|\.\.\.|x{3}|X{3}|your|YOUR|example|EXAMPLE|env\b|os\.)"
_KEYS = (r"password|passwd|pwd|passphrase|secret|client[_-]?secret|secret[_-]?key|api[_-]?key|apikey|"
         r"access[_-]?key(?:[_-]?id)?|private[_-]?key|auth[_-]?token|access[_-]?token|api[_-]?token|"
         r"refresh[_-]?token|bearer[_-]?token|secret[_-]?token")
CREDENTIAL_PATTERNS = [
    # AWS access key ids (long-term AKIA, temporary ASIA)
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    # OpenAI/Anthropic-style sk-..., GitHub ghp_/gho_/ghu_/ghs_/ghr_ and github_pat_, Slack xoxb-/xoxa-/xoxp-
    r"\bsk-[A-Za-z0-9_-]{20,}",
    r"\bgh[pousr]_[A-Za-z0-9]{30,}\b",
    r"\bgithub_pat_[A-Za-z0-9_]{30,}\b",
    r"\bxox[baprs]-[A-Za-z0-9-]{10,}",
    # JWT-like: three base64url segments, the first a JSON header ("eyJ" = '{"')
    r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    # PEM private key blocks, also cut by chunking: BEGIN .. END, BEGIN .. end of text, start of text .. END
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|[\s\S]*\Z)",
    r"\A[A-Za-z0-9+/=\s]*-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----",
    # the body of a key block without its BEGIN/END lines: two or more 64-column base64 lines
    r"(?m:(?:^[A-Za-z0-9+/]{64}[ \t]*\r?\n){2,}(?:^[A-Za-z0-9+/=]{1,64}[ \t]*$)?)",
    # password=..., api_key: "...", "secret": "...", AWS_SECRET_ACCESS_KEY=..., DB_PASSWORD=... — the
    # value only, when it is a literal: quoted (4-64 characters on one line, a passphrase's spaces
    # too) or bare with a digit or symbol (6+), never a placeholder
    r"(?i:(?<![A-Za-z0-9])(?:[A-Za-z0-9]+[_-])*(?:" + _KEYS + r"))[\"']?\s*[:=]\s*(?:\"" + _PLACEHOLDER
    + r"(?P<q1>[^\"\r\n]{4,64})\"|'" + _PLACEHOLDER + r"(?P<q2>[^'\r\n]{4,64})'|" + _PLACEHOLDER
    + r"(?P<bare>(?=[^\s\"',;]*[0-9!@#%^&*+/=_.-])[^\s\"',;<>()\[\]{}]{6,}))",
    # a password in a URL's userinfo (postgres://admin:S3cr3tPass@db:5432, redis://:pw@cache): the
    # password only, when it looks real as a bare assignment value does (6+ characters, a digit or
    # symbol, never a placeholder: user:password@, ${DB_PASSWORD}, <password>, ****)
    r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/?#@\[\]<>\"']*:" + _PLACEHOLDER
    + r"(?P<url>(?=[^\s/?#@]*[0-9!#%^&*+=_.-])[^\s/?#@\"'<>()\[\]{}]{6,})@",
    # Stripe-style live keys and tokens (sk_live_, rk_live_, tok_live_), of any length detect-secrets misses
    r"\b(?:sk|rk|tok)_live_[0-9A-Za-z]{10,}\b",
    # an HTTP Authorization header's credentials (Basic user:password in base64, Bearer/Token values)
    r"(?i:\bauthorization\b[\"']?\s*[:=]\s*[\"']?(?:basic|bearer|token|digest)\s+)" + _PLACEHOLDER
    + r"(?![^\s\"'`]*(?:\.\.\.|…))(?P<auth>[A-Za-z0-9+/=._~-]{8,})",  # "eyJhbGciOi..." is an example
]


_CRED_RE = re.compile("|".join(f"(?:{p})" if "(?P<" not in p else p for p in CREDENTIAL_PATTERNS))


# What every credential pattern needs in the text (case-sensitive literals; lowercased key words;
# a 64-column base64 line; "://" and "@" for a URL's password): most chunks hold none, and these tests cost a tenth of the regex.
_LITERALS = ("AKIA", "ASIA", "sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xox", "eyJ", "PRIVATE KEY",
             "_live_")
_KEYWORDS = ("pass", "pwd", "secret", "key", "token", "authorization")
_BODY = re.compile(CREDENTIAL_PATTERNS[8])


def _maybe_credential(text: str) -> bool:
    if any(t in text for t in _LITERALS):
        return True
    if "://" in text and "@" in text:  # a URL with userinfo
        return True
    low = text.lower()
    return any(k in low for k in _KEYWORDS) or _BODY.search(text) is not None


def _own_spans(text: str) -> list[tuple[int, int]]:
    """kbtool's own credential patterns: each match, or for an assignment or a URL only its value."""
    if not _maybe_credential(text):
        return _bare_spans(text)
    out = []
    for m in _CRED_RE.finditer(text):
        g = next((g for g in ("q1", "q2", "bare", "url", "auth") if m.group(g) is not None), 0)
        out.append(m.span(g))
    return out + _bare_spans(text)


# A secret with no keyword near it (an AWS secret access key pasted alone): 40 characters of base64's
# alphabet, mixed case and digits, not hexadecimal (a git SHA), and random (Shannon entropy ≥ 4.5
# bits a character: 40 random base62 characters have about 4.9; a CamelCase identifier about 3.9).
_BARE = re.compile(r"(?<![A-Za-z0-9/+=_-])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=_-])")
BARE_ENTROPY = 4.5


def _entropy(s: str) -> float:
    import math
    from collections import Counter

    return -sum(n / len(s) * math.log2(n / len(s)) for n in Counter(s).values())


def _bare_spans(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in _BARE.finditer(text)
            if re.search(r"[A-Z]", m.group(0)) and re.search(r"[a-z]", m.group(0)) and re.search(r"[0-9]", m.group(0))
            and _entropy(m.group(0)) >= BARE_ENTROPY]


# ---- detect-secrets (Yelp) plugins -----------------------------------------------------------
_TOKEN_CHAR = re.compile(r"[A-Za-z0-9_+/=-]")
_ARMOUR = re.compile(r"-{4,} ?$")  # the dashes before BEGIN (-----BEGIN, SSH2's ---- BEGIN) ...
_ARMOUR_END = re.compile(r" ?-{4,}")  # ... and after END's words


class _OnDemand(types.ModuleType):
    """Stands for a module that is imported only when one of its attributes is first read (then it
    is the real one, in ``sys.modules`` too, and every read is passed on to it)."""

    def __getattr__(self, name: str):
        real = self.__dict__.get("_real")
        if real is None:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]
            real = importlib.import_module(self.__name__)
            self.__dict__["_real"] = real
        return getattr(real, name)


@contextmanager
def _requests_on_demand():
    """While detect-secrets' plugins are imported, ``import requests`` gives an ``_OnDemand``
    stand-in (unless requests is already imported): their modules import it at the top but use it
    only inside their ``verify`` functions."""
    if "requests" in sys.modules:
        yield
        return
    stand_in = _OnDemand("requests")
    stand_in.__spec__ = importlib.util.find_spec("requests")
    sys.modules["requests"] = stand_in
    try:
        yield
    finally:
        if sys.modules.get("requests") is stand_in:
            del sys.modules["requests"]


@lru_cache(maxsize=1)
def _plugins():
    """(token plugins as [(strings, [(regex, check)])], the private-key, keyword and basic-auth
    plugins, the keyword plugin's key words), made once: importing detect-secrets (and requests)
    costs ~0.13 s, paid on first use; of that, ~65 ms is ``requests``, which the plugins need only
    to verify a secret against its service, something kbtool never asks: ``_requests_on_demand``)."""
    with _requests_on_demand():
        from detect_secrets.plugins import (aws, azure_storage_key, basic_auth, github_token, gitlab_token, jwt,
                                            keyword, mailchimp, npm, openai, private_key, pypi_token, sendgrid, slack,
                                            square_oauth, stripe, twilio)

    # Formats of service tokens: each plugin's ``denylist`` regexes say where a token is (its
    # ``analyze_string`` says only what; kbtool redacts the span). A pattern that starts with a
    # literal is fast as it is; the others run only on a text holding (lowercased) one of the strings
    # they need. Left out on purpose: the high-entropy string detectors (in documentation a quoted
    # random-looking string is mostly a checksum, a commit or an example id the reader needs), the
    # public-IP detector (not a credential: 0.0.0.0, version numbers), and the detectors with no
    # string to test first — Telegram, Discord, Artifactory, Cloudant, IBM, SoftLayer (5-400 us per
    # chunk each; the last four look for ``..._key = "..."``, which the keyword plugin reads already).
    token_plugins = {
        aws.AWSKeyDetector: ("akia", "asia", "abia", "acca", "a3t", "aws"),
        stripe.StripeDetector: ("k_live_",),
        slack.SlackDetector: ("xox", "hooks.slack.com"),
        github_token.GitHubTokenDetector: None,
        jwt.JwtTokenDetector: None,
        twilio.TwilioKeyDetector: None,
        openai.OpenAIDetector: None,
        gitlab_token.GitLabTokenDetector: ("gl", "gr1348941"),
        npm.NpmDetector: None,
        pypi_token.PypiTokenDetector: None,
        sendgrid.SendGridDetector: None,
        square_oauth.SquareOAuthDetector: None,
        mailchimp.MailchimpDetector: ("-us",),
        azure_storage_key.AzureStorageKeyDetector: None,
    }
    tokens = []
    for cls, needs in token_plugins.items():
        plugin = cls()
        valid = getattr(plugin, "is_formally_valid", None)  # the JWT plugin's check of its matches
        tokens.append((needs, tuple((regex, valid) for regex in plugin.denylist)))
    # the key words the keyword plugin's patterns need (api_?key -> key, password -> pass ...)
    words = {re.split(r"_\?", w)[-1] for w in keyword.DENYLIST}
    words = tuple(sorted(w for w in words if not any(o != w and o in w for o in words)))
    return tokens, private_key.PrivateKeyDetector(), keyword.KeywordDetector(), words, basic_auth.BasicAuthDetector()


def _whole_token(text: str, start: int, end: int) -> tuple[int, int]:
    """A token plugin's match grown to the whole token: its patterns may end early (Stripe's takes
    24 characters of a longer key, a JWT's stops before the signature) or hold a delimiter."""
    while start < end and not _TOKEN_CHAR.match(text, start):
        start += 1
    while end > start and not _TOKEN_CHAR.match(text, end - 1):
        end -= 1
    while start > 0 and text[start - 1].isalnum() and text[start - 1].isascii():
        start -= 1
    while end < len(text) and (_TOKEN_CHAR.match(text, end) or (text[end] == "." and _TOKEN_CHAR.match(text, end + 1))):
        end += 1
    return start, end


def _token_spans(text: str, low: str, plugins) -> list[tuple[int, int]]:
    out = []
    for needs, patterns in plugins:
        if needs is not None and not any(map(low.__contains__, needs)):
            continue
        for regex, valid in patterns:
            for m in regex.finditer(text):
                # the secret's group when the pattern has context before it (aws ... key ... "<secret>")
                g = next((i for i in range(1, regex.groups + 1) if m.group(i) and m.start(i) > m.start()), 0)
                if valid is None or valid(m.group(g)):
                    out.append(_whole_token(text, *m.span(g)))
    return out


def _key_block_spans(text: str, plugin) -> list[tuple[int, int]]:
    """Private keys the plugin finds by their first line, as whole blocks: to the END line, else to
    the end of the text (a block chunking cut). A BEGIN line counts inside its dashes only, never
    a mention in prose; PuTTY's key file ends with its Private-MAC line."""
    if "PRIVATE KEY" not in text and "PuTTY" not in text:
        return []
    out = []
    for regex in plugin.denylist:
        for m in regex.finditer(text):
            head, start = m.group(0), m.start()
            if head.startswith("BEGIN"):
                armour = _ARMOUR.search(text, max(0, start - 12), start)
                if armour is None:
                    continue
                start, stop = armour.start(), "END" + head[len("BEGIN"):]
            elif text.startswith(":", m.end()):
                stop = "Private-MAC:"
            else:
                continue
            at = text.find(stop, m.end())
            if at < 0:
                out.append((start, len(text)))
            elif stop == "Private-MAC:":
                nl = text.find("\n", at)
                out.append((start, len(text) if nl < 0 else nl))
            else:
                tail = _ARMOUR_END.match(text, at + len(stop))
                out.append((start, tail.end() if tail else at + len(stop)))
    return out


_NOT_PLACEHOLDER = re.compile(_PLACEHOLDER)
_SYMBOL = re.compile(r"[0-9!@#%^&*+/=_.-]")  # what a bare value needs (kbtool's own pattern asks the same) ...
_URL_SYMBOL = re.compile(r"[0-9!#%^&*+=_.-]")  # ... and a URL's password


def _literal(value: str) -> bool:
    """A value written as itself, not a placeholder (<your key>, ${API_KEY}, ****, YOUR_...) nor a
    redaction already made."""
    return _NOT_PLACEHOLDER.match(value) is not None and "[REDACTED:" not in value


def _keyword_spans(text: str, low: str, plugin, words: tuple[str, ...]) -> list[tuple[int, int]]:
    """Values the keyword plugin finds near a key word (``password: "..."``, ``"..." == secret``),
    when literal: quoted, 4+ characters (at most 64 with a space: longer is prose); in backticks —
    Markdown's code, as in ``Password: `required``` — only as a bare value counts (6+ characters, a
    digit or symbol). The plugin reads a line around each key word (its patterns backtrack: a
    700-character line costs it 5 ms)."""
    out, seen = [], set()
    for at in _occurrences(text, low, words):
        a = max(text.rfind("\n", 0, at) + 1, at - 80)
        b = text.find("\n", at)
        b = min(len(text) if b < 0 else b, at + 160)
        if (a, b) in seen:
            continue
        seen.add((a, b))
        window = text[a:b]  # each of the plugin's forms needs a quote and one of : = ; (key: "v", key == "v", key ... "v";)
        if not (any(map(window.__contains__, "\"'`")) and any(map(window.__contains__, ":=;"))):
            continue
        for value in set(plugin.analyze_string(window)):
            if len(value) < 4 or (len(value) > 64 and any(c.isspace() for c in value)) or not _literal(value):
                continue
            for q in "\"'`" if len(value) >= 6 and _SYMBOL.search(value) else "\"'":
                i = window.find(q + value + q)
                while i >= 0:
                    out.append((a + i + 1, a + i + 1 + len(value)))
                    i = window.find(q + value + q, i + 1)
    return sorted(set(out))


def _occurrences(text: str, low: str, words: tuple[str, ...]):
    """Where the words are in ``text`` (``low``: it lowercased; str.find is ten times a regex)."""
    if len(low) != len(text):  # a character whose lowercase is longer (İ): positions differ
        yield from (m.start() for m in re.finditer("|".join(map(re.escape, words)), text, re.IGNORECASE))
        return
    for w in words:
        i = low.find(w)
        while i >= 0:
            yield i
            i = low.find(w, i + 1)


def _basic_auth_spans(text: str, plugin) -> list[tuple[int, int]]:
    """A URL's password the basic-auth plugin finds, when it looks real as kbtool's URL pattern
    asks: 6+ characters, a digit or symbol, literal (``user:password@``, ``:secret@`` stay)."""
    if "://" not in text or "@" not in text:
        return []
    out = []
    for regex in plugin.denylist:
        for m in regex.finditer(text):
            value = m.group(1)
            if len(value) >= 6 and _URL_SYMBOL.search(value) and _literal(value):
                out.append(m.span(1))
    return out


@lru_cache(maxsize=8192)
def credential_spans(text: str) -> tuple[tuple[int, int], ...]:
    """Where the credentials in ``text`` are: sorted, overlapping findings merged. Remembered for
    the last 8,192 texts (~4 MB): eval, calibrate and serve scan the same chunks again and again."""
    tokens, key, keyword, words, basic_auth = _plugins()
    low = text.lower()
    spans = sorted(_own_spans(text) + _token_spans(text, low, tokens) + _key_block_spans(text, key)
                   + _keyword_spans(text, low, keyword, words) + _basic_auth_spans(text, basic_auth))
    merged: list[tuple[int, int]] = []
    for s, e in spans:
        if e <= s:
            continue
        if merged and s < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return tuple(merged)


def union_spans(a: Sequence[tuple[int, int]], b: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    merged: list[tuple[int, int]] = []
    for s, e in sorted([*a, *b]):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return tuple(merged)


def within_source(text: str, source: str, start: int | None, find=None) -> list[tuple[int, int]]:
    """The spans of ``text`` that lie inside a credential of ``source`` (``text`` cut from it at
    ``start``): by offset when ``text`` is that slice of ``source``, else by the secret's lines
    (whole, or the part of one a piece begins or ends with: at least 8 characters)."""
    secrets = (find or credential_spans)(source)
    if not secrets:
        return []
    out: list[tuple[int, int]] = []
    exact = start is not None and source[start:start + len(text)] == text
    for s, e in secrets:
        if exact:
            a, b = max(s, start), min(e, start + len(text))
            if a < b:
                out.append((a - start, b - start))
            continue
        for line in source[s:e].split("\n"):
            line = line.strip()
            if len(line) < 8:
                continue
            for m in re.finditer(re.escape(line), text):
                out.append(m.span())
            head, tail = text.lstrip(), text.rstrip()
            for n in range(len(line) - 1, 7, -1):  # a piece beginning inside the line, or ending inside it
                if head.startswith(line[-n:]):
                    at = len(text) - len(head)
                    out.append((at, at + n))
                    break
            for n in range(len(line) - 1, 7, -1):
                if tail.endswith(line[:n]):
                    out.append((len(tail) - n, len(tail)))
                    break
    return out
