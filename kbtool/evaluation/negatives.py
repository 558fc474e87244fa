"""Unanswerable questions made from a team's own labels, for calibrate when few are written.

Few teams write twenty unanswerable questions; every team that labels answerable ones already
holds two kinds of negative:

- *leave the evidence out* (``leave-out``): an answerable question asked again with its labelled
  documents (``relevant[].doc``) removed from the scope. The scope is a ``Scope`` like any
  filter's or access's — allowed chunks, their documents, and ``visible`` (the chunks BM25
  statistics count) all without those documents — so the question sees exactly a store that
  never held them (tests/test_negatives.py checks it against such a store), with no re-index.
  A question is skipped when no labelled document is in the caller's scope, when they are every
  document of it, or when a labelled evidence passage is still found in what is left (another
  page repeats it: the question is still answerable);
- *name swaps* (``name-swap``): a named thing of an answerable question (``query.names``)
  replaced by one of the same shape that the knowledge base never mentions: a code's digits
  changed (``TW-E5120`` -> ``TW-E3871``), a PascalCase, camelCase, snake_case, ``--option`` or
  header identifier, an acronym or a capitalised name replaced from a small fixed list of real
  ones. Absent means: no chunk of the store holds it (``Store.any_chunk_contains``) and some
  token of it is unknown to the BM25 index. Deterministic: the choice is seeded per question.

Both are labelled unanswerable. ``generated`` runs them through the pipeline calibrate scores
every question with (``gather``: calibrate's ``gathered`` under a given scope) and tags each
item with its kind (``item.generated``). Calibrate fits the answerability model and chooses
thresholds with them as extra unanswerable examples only; every rate it reports is counted on
the real questions (``real_rates``), the generated ones apart (``report``).

Shrinkage (``shrink_weight``, ``blended``): a model fitted on few questions is pulled toward the
built-in one in proportion to its evidence: P = sigmoid(w * z_fitted + (1 - w) * z_builtin), w =
n / (n + SHRINK_N0), n the unanswerable examples (real and generated; the scarcer class), when
n < SHRINK_UNANSWERABLE or the questions number fewer than SHRINK_TOTAL.
"""

from __future__ import annotations

import math
import random
import re
import zlib
from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Iterable

import numpy as np

from ..query.names import key_tokens, named_things
from ..query.scope import Scope
from .questions import Question, QuestionSet

KINDS = ("leave-out", "name-swap")
MODES = ("auto", "none", "leave-out", "name-swap", "all")
AUTO_BELOW = 20  # auto: generate when fewer hand-written unanswerable questions than this
# Shrinkage toward the built-in model. SHRINK_N0 is the prior's worth in unanswerable questions:
# measured (bench/negatives.py, bench/NEGATIVES.md): fitted on 20 answerable fastapi-docs questions and
# their generated negatives, scored on the rest, AUC 0.919 unshrunk, 0.923 / 0.925 / 0.927 at n0 = 10 /
# 20 / 40, Brier about the same: small gains; real unanswerable questions are likely worth more than these.
SHRINK_N0 = 20
SHRINK_UNANSWERABLE = 40
SHRINK_TOTAL = 100
# The mix P(answerable) is calibrated to when generated negatives outnumber the real ones: the
# built-in model's own (181 answerable of 237 questions), unless the set has MIN_REAL unanswerable.
ANSWERABLE_SHARE = 0.76
MIN_REAL = 10

# Real names of the same shape, none of them a word of everyday English; each is used only when
# the knowledge base never mentions it.
NAMES = ("Heroku", "Netlify", "Terraform", "Grafana", "Airflow", "Svelte", "Tornado", "Cassandra",
         "Kibana", "Ansible", "Jenkins", "Memcached", "Nginx", "Vagrant", "Prometheus", "RabbitMQ")
ACRONYMS = ("LDAP", "SAML", "MQTT", "SNMP", "NTLM", "XMPP", "SFTP", "RADIUS")
PASCAL = ("KafkaConsumer", "RedisCluster", "BlobServiceClient", "SparkSession", "WebDriverWait",
          "QuerySet", "DataLoader", "ThreadPoolExecutor")
CAMEL = ("maxPoolSize", "retryWrites", "connectTimeoutMS", "autoCommit", "readPreference", "socketTimeout")
SNAKE = ("max_overflow", "pool_recycle", "retry_backoff", "prefetch_multiplier", "shard_count", "replica_set")
OPTIONS = ("--max-requests-jitter", "--shard-count", "--replica-set", "--pool-recycle", "--max-overflow")
HEADERS = ("X-Amzn-Trace-Id", "X-Cache-Status", "X-Request-Budget", "X-Shard-Key")


@dataclass(frozen=True)
class Negative:
    """A generated unanswerable question: from ``source`` (an answerable question's id), by ``kind``."""

    question: Question
    kind: str
    source: str
    left_out: frozenset = frozenset()  # leave-out: the documents removed from the scope
    swapped: tuple[str, str] | None = None  # name-swap: (the named thing, its replacement)


def kinds_for(mode: str, unanswerable: int) -> tuple[str, ...]:
    """The kinds ``--negatives MODE`` generates with this many hand-written unanswerable questions."""
    if mode not in MODES:
        raise ValueError(f"negatives {mode!r}: use one of {', '.join(MODES)}")
    if mode == "auto":
        return KINDS if unanswerable < AUTO_BELOW else ()
    return {"none": (), "all": KINDS}.get(mode, (mode,))


def _negative(q: Question, kind: str, text: str | None = None) -> Question:
    suffix = {"leave-out": "out", "name-swap": "swap"}[kind]
    return replace(q, id=f"{q.id}~{suffix}", question=text or q.question, relevant=[], tags=list(q.tags))


# ---- leave the evidence out ------------------------------------------------------------------
def leave_out_scope(store, base: Scope, docs: Iterable[str]) -> Scope:
    """``base`` (the caller's scope) without every chunk of ``docs``: allowed, their documents and
    the chunks BM25 statistics count (``visible``) — what a store without those documents gives."""
    docs = set(docs)
    meta = store.chunk_metadata()
    every = {c for c, _, _ in meta}
    drop = {c for c, d, _ in meta if d in docs}
    allowed = (every if base.allowed is None else base.allowed) - drop
    visible = (every if base.visible is None else base.visible) - drop
    kept = sorted({d for c, d, _ in meta if c in allowed})
    chunks_of = Counter(d for _, d, _ in meta)
    extra = sum(chunks_of[d] for d in kept) - len(allowed)  # chunks of kept documents a filter leaves out
    return Scope(list(base.filters), allowed, kept, extra, list(base.warnings), visible)


def leave_out(store, qs: QuestionSet, base: Scope) -> tuple[list[Negative], dict]:
    """Every answerable question with its labelled documents left out, and what was skipped (why)."""
    meta = store.chunk_metadata()
    in_scope = {d for c, d, _ in meta if base.allowed is None or c in base.allowed}
    out, skipped = [], Counter()
    for q in qs.questions:
        if not q.answerable:
            continue
        docs = frozenset(r.doc for r in q.relevant) & in_scope
        if not docs:
            skipped["labelled documents not in the store"] += 1
            continue
        if docs >= in_scope:
            skipped["labelled documents are every document"] += 1
            continue
        rest = leave_out_scope(store, base, docs).allowed
        if any(r.evidence and store.any_chunk_contains(r.evidence, rest) for r in q.relevant):
            skipped["evidence found in another document"] += 1  # another page repeats it: still answerable
            continue
        out.append(Negative(_negative(q, "leave-out"), "leave-out", q.id, left_out=docs))
    return out, dict(skipped)


# ---- name swaps ----------------------------------------------------------------------------
def absent(store, text: str) -> bool:
    """Whether the knowledge base never mentions ``text``: no chunk holds it, and the BM25 index
    does not know every one of its tokens."""
    if store.any_chunk_contains(text):
        return False
    index = store.bm25() if store.has_bm25() else None
    if index is None or index.retriever is None:
        return True
    tokens = key_tokens(store.analyzer, text)
    return not tokens or not all(index.knows(t) for t in tokens)


def _shape(text: str, kind: str) -> tuple[str, ...] | None:
    """The list a replacement comes from (None: a code whose digits change; () : not swapped)."""
    if any(ch.isdigit() for ch in text):
        return None
    if text.startswith("-"):
        return OPTIONS
    if kind == "header" or re.fullmatch(r"(?:[A-Z][A-Za-z]*-)+[A-Z][A-Za-z]*", text):
        return HEADERS
    if kind in ("config_key", "option") or re.fullmatch(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+", text):
        return SNAKE
    if kind == "camel_case":
        return CAMEL
    if kind == "pascal_case":
        return PASCAL
    if kind == "name":
        return ACRONYMS if text.isupper() else NAMES
    return ()


def _digits(text: str, rng: random.Random) -> str:
    out = [str(rng.randrange(10)) if ch.isdigit() else ch for ch in text]
    if out and out[0] == "0" and text[0] != "0":
        out[0] = str(rng.randrange(1, 10))
    return "".join(out)


def swap(store, text: str, rng: random.Random, tries: int = 20) -> tuple[str, str, str] | None:
    """(question with one named thing replaced, the named thing, its replacement) or None.

    The first named thing (in order) that has a replacement of its shape absent from the knowledge
    base is replaced; the rest of the question is kept as it is."""
    for n in named_things(text):
        name, suffix = n.text, ""
        m = re.fullmatch(r"(.+?)((?:['’]s)|\(\))", name)
        if m:
            name, suffix = m.group(1), m.group(2)
        pool = _shape(name, n.kind)
        if pool == ():
            continue
        if pool is None:
            options = [_digits(name, rng) for _ in range(tries)]
        else:
            options = [p for p in pool if p.lower() != name.lower()]
            rng.shuffle(options)
        new = next((o for o in options if o != name and absent(store, o)), None)
        if new is None:
            continue
        start, end = n.start, n.start + len(name)
        return text[:start] + new + text[end:], n.text, new + suffix
    return None


def name_swaps(store, qs: QuestionSet, seed: int = 0) -> tuple[list[Negative], dict]:
    """A name-swapped copy of every answerable question that has a swappable named thing. The
    random choice is seeded by ``seed`` and the question's id (one question's swap does not
    depend on the others)."""
    out, skipped = [], Counter()
    for q in qs.questions:
        if not q.answerable:
            continue
        rng = random.Random(seed * 1_000_003 + zlib.crc32(q.id.encode("utf-8")))
        got = swap(store, q.question, rng)
        if got is None:
            skipped["no named thing to swap"] += 1
            continue
        text, old, new = got
        out.append(Negative(_negative(q, "name-swap", text), "name-swap", q.id, swapped=(old, new)))
    return out, dict(skipped)


# ---- through the pipeline ------------------------------------------------------------------
def generated(store, qs: QuestionSet, base: Scope, kinds: tuple[str, ...], gather: Callable, *,
              seed: int = 0) -> tuple[list, dict]:
    """The generated negatives of ``kinds``, each gathered by ``gather(question_set, scope)``
    (calibrate's ``gathered``: the pipeline's candidates and chunk rows) under its own scope:
    leave-out questions grouped by the documents they leave out, name swaps under ``base``.
    Returns (items tagged ``item.generated`` = kind and ``item.negative``, {kind: skipped})."""
    items, skipped = [], {}
    if "leave-out" in kinds:
        negs, skipped["leave-out"] = leave_out(store, qs, base)
        groups: dict[frozenset, list[Negative]] = {}
        for n in negs:
            groups.setdefault(n.left_out, []).append(n)
        for docs, group in groups.items():
            items += _tagged(gather(QuestionSet(qs.name, [n.question for n in group]),
                                    leave_out_scope(store, base, docs)), group)
    if "name-swap" in kinds:
        negs, skipped["name-swap"] = name_swaps(store, qs, seed)
        if negs:
            items += _tagged(gather(QuestionSet(qs.name, [n.question for n in negs]), base), negs)
    return items, skipped


def _tagged(items, negs):
    for it, n in zip(items, negs):
        it.generated, it.negative = n.kind, n
    return items


# ---- reporting: real rates, generated apart ----------------------------------------------------
def real_rates(contract, items, gen, conf, thresholds: dict, evidence: dict) -> tuple[dict, list[dict]]:
    """Thresholds chosen with generated negatives too, finished on the real questions (``items``):
    each tier's answer threshold chosen again with the generated negatives weighing as many
    unanswerable questions as the assumed mix gives (``answer_threshold``: the share of plain answers
    that are unanswerable depends on the mix, and generated ones outnumber real ones), and every
    rate (per tier, overall) and the trade-off table counted on the real questions alone."""
    from ..contract import Thresholds
    from .thresholds import refusable, rates, refused_as_written, with_tiers

    written = with_tiers(contract, {n: Thresholds(answer=t["answer"], low_confidence=t["low_confidence"])
                                    for n, t in thresholds["tiers"].items()})
    tier = {id(it): written.thresholds_for(it.types, it.tags)[0] for it in [*items, *gen]}
    for name, t in [("default", thresholds["default"]), *thresholds["tiers"].items()]:
        mine = [it for it in [*items, *gen] if tier[id(it)] == name]
        t["answer"] = answer_threshold(t["low_confidence"], mine, conf)
    refused = refused_as_written(contract, items, conf, thresholds, evidence)

    def counted(members, into: dict) -> dict:
        fa = [not refused[id(it)] for it in members if not it.q.answerable]
        fr = [refused[id(it)] for it in members if it.q.answerable]
        return {**into, "false_answer": round(float(np.mean(fa)), 4) if fa else 0.0, "unanswerable": len(fa),
                "false_refusal": round(float(np.mean(fr)), 4) if fr else 0.0, "answerable": len(fr)}

    out = {"default": counted([it for it in items if tier[id(it)] == "default"], thresholds["default"]),
           "tiers": {n: counted([it for it in items if tier[id(it)] == n], t) for n, t in thresholds["tiers"].items()},
           "overall": counted(items, {})}
    ref = lambda its: refusable([conf[id(it)] for it in its], [evidence[id(it)] for it in its])  # noqa: E731
    ans, unans = ref([it for it in items if it.q.answerable]), ref([it for it in items if not it.q.answerable])
    table = []
    for t in sorted({round(x / 20, 2) for x in range(21)}):
        fa, fr = rates(ans, unans, t)
        table.append({"threshold": t, "false_answer": round(fa, 4), "false_refusal": round(fr, 4)})
    return out, table


def answer_threshold(low: float, members, conf, share: float = 0.05) -> float:
    """``thresholds.answer_threshold`` (the lowest threshold at or above ``low`` at which at most
    ``share`` of plain answers are unanswerable) with the generated negatives among ``members``
    weighted so that all unanswerable ones weigh ``1 - ANSWERABLE_SHARE`` of the tier's questions
    (or the real unanswerable ones alone, when they weigh that much already)."""
    ans = [conf[id(it)] for it in members if it.q.answerable and conf[id(it)] is not None]
    real = [conf[id(it)] for it in members if not it.q.answerable and not it.generated and conf[id(it)] is not None]
    made = [conf[id(it)] for it in members if it.generated and conf[id(it)] is not None]
    want = len(ans) * (1 - ANSWERABLE_SHARE) / ANSWERABLE_SHARE
    w = max(0.0, want - len(real)) / len(made) if made else 0.0
    unans = [(c, 1.0) for c in real] + [(c, w) for c in made]
    if not sum(v for _, v in unans):
        return round(low, 4)
    for t in sorted({low, *(c for c in ans if c >= low), *(c for c, _ in unans if c >= low)}):
        a = sum(1 for c in ans if c >= t)
        u = sum(v for c, v in unans if c >= t)
        if a + u and u <= share * (a + u) + 1e-12:
            return round(t, 4)
    return round(min(1.0, max(low, max(c for c, v in unans if v) + 1e-4)), 4)


def mix_shift(answerable: int, unanswerable: int, real_unanswerable: int) -> float:
    """The logit shift that turns P(answerable) calibrated at the fitted mix (generated negatives
    included) into P at the assumed real mix: the set's own when it has ``MIN_REAL`` real
    unanswerable questions, else ``ANSWERABLE_SHARE`` (label-shift correction of a Platt map)."""
    if not answerable or not unanswerable:
        return 0.0
    total_real = answerable + real_unanswerable
    target = answerable / total_real if real_unanswerable >= MIN_REAL else ANSWERABLE_SHARE
    fitted = answerable / (answerable + unanswerable)
    return math.log(target / (1 - target)) - math.log(fitted / (1 - fitted))


def report(contract, gen, conf, thresholds: dict | None, evidence: dict, *, mode: str, skipped: dict) -> dict:
    """``answerability.generated``: how many negatives of each kind were made (and skipped, why),
    and how many the written thresholds refuse; with a few examples."""
    from .thresholds import refused_as_written

    refused = refused_as_written(contract, gen, conf, thresholds, evidence) if thresholds else {}
    kinds = {}
    for kind in KINDS:
        mine = [it for it in gen if it.generated == kind]
        if not mine and kind not in skipped:
            continue
        kinds[kind] = {"questions": len(mine), "refused": sum(refused.get(id(it), False) for it in mine) if thresholds
                       else None, "skipped": skipped.get(kind, {}),
                       "examples": [_example(it) for it in mine[:3]]}
    return {"mode": mode, "questions": len(gen), "kinds": kinds,
            "used_for": "the model fit and the threshold choice, as unanswerable examples; no reported rate counts them"}


def _example(it) -> dict:
    n = it.negative
    out = {"id": it.q.id, "question": it.q.question, "from": n.source}
    if n.left_out:
        out["left_out"] = sorted(n.left_out)
    if n.swapped:
        out["swapped"] = list(n.swapped)
    return out


# ---- shrinkage toward the built-in model ------------------------------------------------------
def shrink_weight(unanswerable: int, total: int, n0: float | None = None) -> float | None:
    """The fitted model's weight against the built-in one (None: enough questions, no shrinkage;
    ``n0``: the prior's worth, ``SHRINK_N0`` unless given)."""
    n0 = SHRINK_N0 if n0 is None else n0
    if (unanswerable >= SHRINK_UNANSWERABLE and total >= SHRINK_TOTAL) or n0 <= 0:
        return None
    return unanswerable / (unanswerable + n0)


def logit(model, signals: dict) -> float:
    """A contract model's calibrated score (the logit of its P(answerable)) for one question's signals."""
    z = model.intercept + sum(c * float(signals.get(f, 0.0)) for f, c in model.coefficients.items())
    return model.calibration.slope * z + model.calibration.offset


def blended(fitted: dict, prior, w: float) -> dict:
    """The contract model (a dict, ``Fitted.to_contract``) whose logit is ``w`` x the fitted model's
    + (1 - ``w``) x ``prior``'s: calibration folded into coefficients and intercept (slope 1, offset 0)."""
    fs, fo = fitted["calibration"]["slope"], fitted["calibration"]["offset"]
    ps, po = prior.calibration.slope, prior.calibration.offset
    names = list(dict.fromkeys([*fitted["coefficients"], *prior.coefficients]))
    coef = {f: round(w * fs * fitted["coefficients"].get(f, 0.0) + (1 - w) * ps * prior.coefficients.get(f, 0.0), 6)
            for f in names}
    intercept = w * (fs * fitted["intercept"] + fo) + (1 - w) * (ps * prior.intercept + po)
    return {**fitted, "coefficients": coef, "intercept": round(intercept, 6),
            "calibration": {"slope": 1.0, "offset": 0.0}}
