"""Sensitive content (``postprocess.sensitive``): refuse questions, redact or drop results.

Two sources of rules:

* the built-in ``credentials`` rule (``postprocess.sensitive.credentials``): strings that look like
  secrets are redacted in results. Token formats come from detect-secrets' (Yelp) plugins — AWS,
  Stripe, Slack, GitHub, JWT, Twilio, OpenAI, GitLab, npm, PyPI, SendGrid, Square, Mailchimp,
  Azure storage keys, private keys; its keyword plugin finds quoted ``password: "..."``-style
  values and its basic-auth plugin a URL's password — and kbtool's own patterns add
  ``sk-``/``github_pat_`` tokens, PEM blocks cut by chunking, bare ``password=`` values and URL
  passwords with symbols. Values that are placeholders (``<your key>``, ``${API_KEY}``,
  ``:secret@``) stay; redacted is the secret only (``postgres://admin:[REDACTED:credentials]@db``);
* a lexicon file (``postprocess.sensitive.lexicon``, YAML or JSON) of categories, each with words
  or phrases (case-insensitive, whole words), regexes, and what to do with a question that
  matches (``refuse`` with the category's message, or ``allow``) and with a result that matches
  (``redact``: the match becomes ``[REDACTED:category]``; ``drop`` the hit; ``allow``).

The stage runs in ``pipeline.answer`` after dedup and before the context is built: ``query``,
``eval``, ``calibrate`` and ``serve`` see the same. The trace records categories and counts,
never the matched text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

from .errors import ContractError

CREDENTIALS = "credentials"

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
    + r"(?P<auth>[A-Za-z0-9+/=._~-]{8,})",
]


@dataclass
class Category:
    name: str
    question: str = "allow"  # refuse | allow
    results: str = "redact"  # redact | drop | allow
    message: str = ""
    show_match: bool = False  # a refusal's explanation may quote the word that matched
    regex: re.Pattern | None = None
    maybe: object = None  # a cheap test a text must pass before the regex runs (None: always run it)
    find: Callable[[str], Sequence[tuple[int, int]]] | None = None  # the spans to redact, instead of the regex's matches


@dataclass
class Rules:
    categories: list[Category] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return bool(self.categories)

    @property
    def drops(self) -> bool:
        return any(c.results == "drop" for c in self.categories)

    def refusal(self, question: str) -> tuple[Category, str] | None:
        """The first category refusing questions whose words or patterns the question holds."""
        for c in self.categories:
            if c.question == "refuse" and c.regex is not None:
                m = c.regex.search(question)
                if m:
                    return c, m.group(0)
        return None

    def scan(self, text: str, source: str | None = None, start: int | None = None) -> tuple[str, str | None, dict[str, int]]:
        """(text with redactions, the category dropping it or None, {category: redactions}).

        ``source``: the text ``text`` was cut from (its document, line breaks as parsed) at
        ``start``: a credential found there is redacted in ``text`` too, so a secret cut across
        chunks, or whose lines the parser joined, is still one secret."""
        counts: dict[str, int] = {}
        for c in self.categories:
            if c.results == "allow" or (c.regex is None and c.find is None):
                continue
            if c.maybe is not None and not c.maybe(text) and not (c.find is not None and source and c.maybe(source)):
                continue
            if c.find is not None:
                spans = c.find(text)
                if source:
                    spans = _union(spans, within_source(text, source, start, c.find))
                if spans and c.results == "drop":
                    return text, c.name, counts
                if spans:
                    text = _replace(text, spans, f"[REDACTED:{c.name}]")
                    counts[c.name] = counts.get(c.name, 0) + len(spans)
                continue
            if c.results == "drop":
                if c.regex.search(text):
                    return text, c.name, counts
                continue
            text, n = c.regex.subn(lambda m, name=c.name: _redact(m, name), text)
            if n:
                counts[c.name] = counts.get(c.name, 0) + n
        return text, None, counts


def _redact(m: re.Match, name: str) -> str:
    """Replace the match, or for an assignment only its value (``password=[REDACTED:credentials]``)."""
    mark = f"[REDACTED:{name}]"
    groups = m.re.groupindex
    for g in ("q1", "q2", "bare", "url", "auth"):
        if g in groups and m.group(g) is not None:
            s, e = m.span(g)
            full = m.group(0)
            return full[: s - m.start()] + mark + full[e - m.start():]
    return mark


def _compile(words: list[str], patterns: list[str], where: str) -> re.Pattern | None:
    parts = []
    for w in words:
        w = str(w).strip()
        if w:
            esc = r"\s+".join(re.escape(p) for p in w.split())
            parts.append((r"\b" if re.match(r"\w", w) else "") + esc + (r"\b" if re.search(r"\w$", w) else ""))
    for i, p in enumerate(patterns):
        try:
            re.compile(p)
        except re.error as exc:
            raise ContractError(f"{where}: patterns[{i}] is not a valid regex ({exc}): fix or remove it") from None
        parts.append(f"(?:{p})")
    if not parts:
        return None
    return re.compile("|".join(parts), re.IGNORECASE)


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


@lru_cache(maxsize=1)
def _plugins():
    """(token plugins as [(strings, [(regex, check)])], the private-key, keyword and basic-auth
    plugins, the keyword plugin's key words), made once: importing detect-secrets (and requests)
    costs ~0.13 s, paid on first use."""
    from detect_secrets.plugins import (aws, azure_storage_key, basic_auth, github_token, gitlab_token, jwt, keyword,
                                        mailchimp, npm, openai, private_key, pypi_token, sendgrid, slack, square_oauth,
                                        stripe, twilio)

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


def _union(a: Sequence[tuple[int, int]], b: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
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


def redact_lines(text: str, rules: "Rules") -> tuple[str, str | None, dict[str, int]]:
    """``Rules.scan`` for a span of source lines shown whole (``/v1/documents``, MCP ``read``): a
    credential across lines is redacted line by line, so line numbers stay those of the file."""
    counts: dict[str, int] = {}
    cred = next((c for c in rules.categories if c.find is not None and c.results != "allow"), None)
    if cred is not None:
        spans = cred.find(text)
        if spans and cred.results == "drop":
            return text, cred.name, counts
        if spans:
            mark, out, at = f"[REDACTED:{cred.name}]", [], 0
            for s, e in spans:
                out.append(text[at:s])
                out.append("\n".join(mark if part.strip() else part for part in text[s:e].split("\n")))
                at = e
            text = "".join(out) + text[at:]
            counts[cred.name] = len(spans)
    text, drop, more = Rules([c for c in rules.categories if c is not cred]).scan(text)
    for k, n in more.items():
        counts[k] = counts.get(k, 0) + n
    return text, drop, counts


def _replace(text: str, spans: Sequence[tuple[int, int]], mark: str) -> str:
    out, at = [], 0
    for s, e in spans:
        out += [text[at:s], mark]
        at = e
    return "".join(out) + text[at:]


def credentials_category(action: str) -> Category:
    return Category(CREDENTIALS, question="allow", results=action, find=credential_spans)


_FORMAT_HELP = ("write a YAML or JSON mapping `categories: {NAME: {words: [...], patterns: [...], "
                "question: refuse|allow, message: ..., results: redact|drop|allow}}`")


def load_lexicon(path: Path, shown: str) -> list[Category]:
    """Categories of a lexicon file; a missing or malformed file is one ContractError naming it."""
    import yaml

    where = f"postprocess.sensitive.lexicon {shown}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ContractError(f"{where}: no such file ({path}): create it or fix the path (relative to the "
                            "contract's folder)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ContractError(f"{where}: cannot read it ({exc})") from None
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        raise ContractError(f"{where}:{line} not valid {'JSON' if path.suffix.lower() == '.json' else 'YAML'}: "
                            + _FORMAT_HELP) from None
    cats = data.get("categories") if isinstance(data, dict) else None
    if not isinstance(cats, dict) or not cats:
        raise ContractError(f"{where}: no categories: {_FORMAT_HELP}")
    out = []
    allowed = {"words", "patterns", "question", "message", "results", "show_match"}
    for name, spec in cats.items():
        at = f"{where}: categories.{name}"
        if not isinstance(spec, dict):
            raise ContractError(f"{at}: a category is a mapping: {_FORMAT_HELP}")
        unknown = set(spec) - allowed
        if unknown:
            raise ContractError(f"{at}: unknown key(s) {', '.join(sorted(map(str, unknown)))}: use "
                                f"{', '.join(sorted(allowed))}")
        words, patterns = spec.get("words") or [], spec.get("patterns") or []
        if not isinstance(words, list) or not isinstance(patterns, list) or not (words or patterns):
            raise ContractError(f"{at}: give a list of words and/or patterns")
        question, results = spec.get("question", "allow"), spec.get("results", "redact")
        if question not in ("refuse", "allow"):
            raise ContractError(f"{at}.question: {question!r}: use refuse or allow")
        if results not in ("redact", "drop", "allow"):
            raise ContractError(f"{at}.results: {results!r}: use redact, drop or allow")
        message = spec.get("message") or ""
        if question == "refuse" and not str(message).strip():
            raise ContractError(f"{at}.message: required when question is refuse: the text a refused asker reads")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", str(name)):
            raise ContractError(f"{at}: a category name is letters, digits, _ . - (it is shown in [REDACTED:name])")
        out.append(Category(str(name), question, results, str(message), bool(spec.get("show_match", False)),
                            _compile(words, patterns, at)))
    return out


def lexicon_file(name: str, base: Path | None) -> Path:
    """``postprocess.sensitive.lexicon`` as an absolute path: a relative one from ``base`` (the
    contract file's folder; None: the current folder)."""
    path = Path(name).expanduser()
    return path if path.is_absolute() else (base or Path.cwd()) / path


def rules_for(cfg, base: Path | None) -> Rules:
    """The compiled rules of a ``postprocess.sensitive`` setting (``compiled`` keeps them)."""
    cats = [] if cfg.credentials == "off" else [credentials_category(cfg.credentials)]
    if cfg.lexicon:
        cats = load_lexicon(lexicon_file(cfg.lexicon, base), cfg.lexicon) + cats
    return Rules(cats)


# Compiled rules, kept outside the contract model: (credentials, lexicon file) -> the rules as the
# latest ``load_contract`` read the lexicon. A contract and its copies (``contract_for_mode``) share
# them; a server's reload reads the lexicon again, and a broken edit raises there, leaving these.
_COMPILED: dict[tuple, Rules] = {}


def compiled(cfg, base: Path | None = None, *, reread: bool = False) -> Rules:
    """The rules of a ``postprocess.sensitive`` setting, compiled once per (credentials, lexicon
    file; a relative one read from ``base``, default the current folder); ``reread``: read the
    lexicon again (``load_contract``)."""
    key = (cfg.credentials, str(lexicon_file(cfg.lexicon, base)) if cfg.lexicon else None)
    if reread or key not in _COMPILED:
        _COMPILED[key] = rules_for(cfg, base)
    return _COMPILED[key]


def apply(rules: Rules, question: str, window: list, rows: dict,
          source: Callable[[str], str | None] | None = None) -> tuple[list, dict[str, str], dict, tuple | None]:
    """(window without dropped hits, {chunk id: {field: redacted value}}, trace record, refusal or None).

    ``window``: [(chunk id, score)] after dedup; ``rows``: chunk rows by id. A hit's text, title and
    section path (what the context block shows) are scanned; a match in any drops the hit.
    ``source``: doc id -> its text, so a hit's text is also checked against its source span."""
    refused = rules.refusal(question)
    kept, texts = [], {}
    redacted: dict[str, int] = {}
    dropped: dict[str, int] = {}
    for item in window:
        row, changed, drop = rows[item[0]], {}, None
        for name in ("text", "title", "section_path"):
            whole = source(row["doc_id"]) if source is not None and name == "text" and row.get("doc_id") else None
            value, drop, counts = rules.scan(row.get(name) or "", whole, row.get("char_start"))
            if drop:
                break
            if counts:
                changed[name] = value
                for k, n in counts.items():
                    redacted[k] = redacted.get(k, 0) + n
        if drop:
            dropped[drop] = dropped.get(drop, 0) + 1
            continue
        if changed:
            texts[item[0]] = changed
        kept.append(item)
    trace = {"question": None if refused is None else {"category": refused[0].name, "action": "refuse"},
             "redacted": redacted, "dropped": dropped}
    return kept, texts, trace, refused


def safe_notes(rules: Rules, notes: list[str]) -> list[str]:
    """Explanation lines quoting index terms (spelling suggestions) without one the rules would
    redact or drop: the index's vocabulary is lowercased, so each is also checked upper-cased."""
    def clean(note: str) -> bool:
        return all(rules.scan(t)[1:] == (None, {}) for t in (note, note.upper()))

    return [n for n in notes if clean(n)]
