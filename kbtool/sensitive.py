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
from pathlib import Path
from typing import Callable, Sequence

from .credentials import CREDENTIAL_PATTERNS, credential_spans, union_spans, within_source  # noqa: F401
from .errors import ContractError

CREDENTIALS = "credentials"

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
                    spans = union_spans(spans, within_source(text, source, start, c.find))
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
          source: Callable | None = None) -> tuple[list, dict[str, str], dict, tuple | None]:
    """(window without dropped hits, {chunk id: {field: redacted value}}, trace record, refusal or None).

    ``window``: [(chunk id, score)] after dedup; ``rows``: chunk rows by id. A hit's text, title and
    section path (what the context block shows) are scanned; a match in any drops the hit.
    ``source``: (doc id, start, length) -> (the document's text around it, where it starts in
    that), so a hit's text is also checked against its source span."""
    refused = rules.refusal(question)
    kept, texts = [], {}
    redacted: dict[str, int] = {}
    dropped: dict[str, int] = {}
    for item in window:
        row, changed, drop = rows[item[0]], {}, None
        for name in ("text", "title", "section_path"):
            around, at = (source(row["doc_id"], row.get("char_start"), len(row.get("text") or ""))
                          if source is not None and name == "text" and row.get("doc_id") else (None, None))
            value, drop, counts = rules.scan(row.get(name) or "", around, at)
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
