"""Calibrate a contract on labelled questions: fusion and per-type weights by cross-validation,
refusal thresholds from answerable and unanswerable questions, with the evidence.

Each question's candidates are gathered once (the expensive part); every setting is then scored
over the same candidates with the pipeline's own ``fuse`` (the one implementation of fusion).
Scoring a setting skips near-duplicate removal (it needs chunk texts per setting); the before /
after check at the end runs the full pipeline through ``evaluate``.

Choosing:
- settings: fusion ``weighted`` (min-max or z-score) or ``rrf`` (k in RRF_KS), each with a dense
  weight from 0 to 1 in steps of 0.1; a question type (identifier, cjk) with at least
  ``min_count`` answerable questions gets its own weight (a rule), the others share the global one;
- seeded k-fold cross-validation: each question is scored by the setting chosen on the other
  folds; the held-out mean is compared with the current contract's and the best single retriever's
  with a paired sign-flip randomisation test; the new setting is adopted only when it is
  significantly better (p < alpha), else the current fusion is kept;
- thresholds, from the top confidence of each question under the final fusion (what ``decide``
  uses at query time): ``low_confidence`` (refuse below) maximises balanced accuracy of
  refuse-vs-answer, or meets ``max_false_answer`` / ``max_false_refusal``; ``answer`` is the lowest
  threshold that answers at most 5 % of unanswerable questions without a notice. Types with at
  least ``MIN_TIER`` questions of each kind get their own tier. Fewer than ``MIN_UNANSWERABLE``
  unanswerable questions: no thresholds are proposed, and the result says how to add some.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Callable

import numpy as np

from .. import __version__
from ..errors import InputError, UsageError
from ..query.decide import confidence
from ..query.fusion import fuse
from .metrics import parse_metric, score

RRF_KS = (10, 30, 60, 100)
WEIGHTS = tuple(round(w / 10, 1) for w in range(11))
GROUPS = ("identifier", "cjk", "other")
MIN_UNANSWERABLE = 5
MIN_TIER = 5


@dataclass(frozen=True)
class Config:
    method: str
    normalization: str = "minmax"
    rrf_k: int = 60

    @property
    def name(self) -> str:
        return f"rrf:{self.rrf_k}" if self.method == "rrf" else f"weighted/{self.normalization}"


CONFIGS = (Config("weighted", "minmax"), Config("weighted", "zscore"), *(Config("rrf", rrf_k=k) for k in RRF_KS))


@dataclass
class CalibrationResult:
    objective: str
    folds: int
    seed: int
    questions: int
    answerable: int
    unanswerable: int
    groups: dict[str, int]
    current: dict
    proposed: dict
    adopted: bool
    heldout: dict
    weight_curves: dict
    thresholds: dict | None
    threshold_table: list[dict]
    distributions: dict
    notes: list[str] = field(default_factory=list)
    verification: dict | None = None
    appendix: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}


def group_of(types: list[str], multilingual: bool) -> str:
    if "identifier" in types:
        return "identifier"
    if "cjk" in types and not multilingual:
        return "cjk"
    return "other"


class _Question:
    """One question's candidates, ready to be scored under many settings."""

    def __init__(self, q, cands, level: str, store, matcher, depth: int):
        from .evaluate import _chunk_units, _doc_units

        self.q, self.c, self.level, self.depth = q, cands, level, depth
        self.group = "other"
        rows = store.chunks_by_id(cands.ids) if level == "chunk" else {}
        self._hits = {}
        for cid in cands.ids:
            row = rows.get(cid, {})
            self._hits[cid] = SimpleNamespace(
                chunk_id=cid, doc_id=row.get("doc_id", cid.rsplit("#", 1)[0]), score=0.0,
                section_path=row.get("section_path", ""), text=row.get("text", ""),
                char_start=row.get("char_start", 0), char_end=row.get("char_end", 0))
        self._units = _doc_units if level == "doc" else (lambda hits, q: _chunk_units(hits, q, matcher))
        self.pos = {c: i for i, c in enumerate(cands.ids)}

    def ranked(self, cfg: Config, w_dense: float) -> list[tuple[str, float]]:
        c = self.c
        return fuse(c.ids, c.dense, c.bm25, method=cfg.method, w_dense=w_dense, w_bm25=round(1 - w_dense, 10),
                    normalization=cfg.normalization, rrf_k=cfg.rrf_k)

    def metric(self, cfg: Config, w_dense: float, objective: str) -> float:
        hits = [self._hits[c] for c, _ in self.ranked(cfg, w_dense)[: self.depth]]
        ranking, _, qrels = self._units(hits, self.q)
        return score(objective, ranking, qrels)

    def top_confidence(self, cfg: Config, w_dense: float) -> float:
        ranked = self.ranked(cfg, w_dense)
        if not ranked:
            return 0.0
        best = 0.0
        # the decision uses the best confidence among the top_k hits, as pipeline.answer does
        for cid, _ in ranked[: self.top_k]:
            i = self.pos[cid]
            cos = None if math.isnan(self.c.dense[i]) else float(self.c.dense[i])
            raw = None if math.isnan(self.c.bm25[i]) else float(self.c.bm25[i])
            cov = None if raw is None or self.c.bm25_bound <= 0 else min(1.0, raw / self.c.bm25_bound)
            best = max(best, confidence(cos, cov, w_dense, 1 - w_dense))
        return best


def calibrate(store, qs, contract, *, objective: str = "ndcg@10", folds: int = 5, seed: int = 0,
              alpha: float = 0.05, min_count: int = 10, max_false_answer: float | None = None,
              max_false_refusal: float | None = None, level: str = "auto", embedder=None,
              principal: str | None = None, allow=None,
              progress: Callable[[str, int, int], None] | None = None, source: str = "") -> CalibrationResult:
    """Tune ``contract`` on question set ``qs``; returns the proposal and its evidence."""
    from ..query.pipeline import gather, scope
    from .evaluate import _EvidenceMatcher

    try:
        base, k = parse_metric(objective)
    except ValueError as exc:
        raise UsageError(f"--objective {objective!r}: {exc}") from None
    if folds < 2:
        raise UsageError("--folds must be at least 2")
    if max_false_answer is not None and max_false_refusal is not None:
        raise UsageError("give --max-false-answer or --max-false-refusal, not both")
    questions = qs.questions
    answerable = [q for q in questions if q.answerable]
    if len(answerable) < folds:
        raise InputError(f"{len(answerable)} answerable question(s): calibration needs at least {folds} "
                         "(one per fold); add labelled questions")
    depth = max(k, 100)  # chunks ranked per question, as eval's --depth: documents collapse from them
    t0 = time.perf_counter()
    sc = scope(store, contract, [], principal, allow)
    cb = (lambda n: progress("retrieving", n, len(questions))) if progress else None
    cands = gather(store, contract, [q.question for q in questions], sc=sc, embedder=embedder,
                   depth=max(contract.retrieve.candidates, depth), retrievers=("dense", "bm25"), progress=cb)
    matcher = _EvidenceMatcher(store)
    multilingual = contract.retrieve.model_multilingual
    items = []
    for q, c in zip(questions, cands):
        lvl = level if level != "auto" else ("chunk" if any(r.evidence or r.section for r in q.relevant) else "doc")
        item = _Question(q, c, lvl, store, matcher, depth)
        item.top_k = contract.retrieve.top_k
        item.group = group_of(c.processed.types, multilingual)
        items.append(item)
    ans_items = [it for it in items if it.q.answerable]
    t1 = time.perf_counter()

    # Score every (config, weight) for every answerable question once: S[config, weight, question].
    S = np.zeros((len(CONFIGS), len(WEIGHTS), len(ans_items)))
    total = len(CONFIGS) * len(ans_items)
    done = 0
    for ci, cfg in enumerate(CONFIGS):
        for qi, it in enumerate(ans_items):
            for wi, w in enumerate(WEIGHTS):
                S[ci, wi, qi] = it.metric(cfg, w, objective)
            done += 1
            if progress and done % 25 == 0:
                progress("scoring", 25, total)
    groups = np.array([it.group for it in ans_items])
    counts = {g: int((groups == g).sum()) for g in GROUPS}
    rule_weight = _rule_weights(contract)
    # A type with enough questions gets a weight of its own; a smaller one keeps the contract's rule
    # (scored at that rule's weight, exactly as it will be written); the rest share one weight.
    own = {g for g in ("identifier", "cjk") if counts[g] >= min_count}
    fixed = {g: rule_weight[g] for g in ("identifier", "cjk") if g not in own and g in rule_weight}
    F = np.full((len(CONFIGS), len(ans_items)), np.nan)
    for qi, it in enumerate(ans_items):
        if it.group in fixed:
            for ci, cfg in enumerate(CONFIGS):
                F[ci, qi] = it.metric(cfg, fixed[it.group], objective)
    shared_groups = [g for g in GROUPS if g not in own and g not in fixed]

    def choose(train: np.ndarray) -> tuple[int, dict[str, int]]:
        """Best config and per-group weight index on the training questions (a boolean mask)."""
        best = None
        for ci in range(len(CONFIGS)):
            wmap: dict[str, int] = {}
            total_score = 0.0
            shared = train & np.isin(groups, shared_groups)
            sums = S[ci][:, shared].sum(axis=1) if shared.any() else np.zeros(len(WEIGHTS))
            wi = int(np.argmax(sums))  # ties: the lowest dense weight, deterministic
            total_score += sums[wi]
            for g in shared_groups:
                wmap[g] = wi
            for g in own:
                m = train & (groups == g)
                sums = S[ci][:, m].sum(axis=1)
                wmap[g] = int(np.argmax(sums))
                total_score += sums[wmap[g]]
            fm = train & np.isin(groups, list(fixed))
            total_score += float(F[ci, fm].sum()) if fm.any() else 0.0
            if best is None or total_score > best[0] + 1e-12:
                best = (total_score, ci, wmap)
        return best[1], best[2]

    def per_question(ci: int, wmap: dict[str, int]) -> np.ndarray:
        return np.array([F[ci, qi] if g in fixed else S[ci, wmap[g], qi] for qi, g in enumerate(groups)])

    # Current contract's setting, and the single retrievers, on the same fast path.
    cur_cfg = Config(contract.retrieve.fusion.method, contract.retrieve.fusion.normalization,
                     contract.retrieve.fusion.rrf_k)
    current_scores = np.array([_current_metric(it, contract, cur_cfg, objective, multilingual) for it in ans_items])
    dense_scores = S[0, WEIGHTS.index(1.0)]
    bm25_scores = S[0, WEIGHTS.index(0.0)]
    best_single = "dense" if dense_scores.mean() >= bm25_scores.mean() else "bm25"
    single_scores = dense_scores if best_single == "dense" else bm25_scores

    rng = np.random.default_rng(seed)
    fold_of = rng.permutation(len(ans_items)) % folds
    heldout = np.zeros(len(ans_items))
    for f in range(folds):
        test = fold_of == f
        ci, wmap = choose(~test)
        heldout[test] = per_question(ci, wmap)[test]
    ci, wmap = choose(np.ones(len(ans_items), dtype=bool))
    chosen_cfg = CONFIGS[ci]
    p_value = _paired_p(heldout, current_scores, seed=seed)
    gain = float(heldout.mean() - current_scores.mean())
    adopted = gain > 0 and p_value < alpha
    notes = []
    if not adopted:
        notes.append(f"kept the current fusion: held-out {objective} {heldout.mean():.4f} vs current "
                     f"{current_scores.mean():.4f} (p = {p_value:.3f}, needs p < {alpha} and a gain)")
    for g in ("identifier", "cjk"):
        if 0 < counts[g] < min_count:
            notes.append(f"{g}: {counts[g]} answerable question(s), fewer than {min_count}: no weight of its own "
                         + ("is tuned (the contract's rule is kept)" if g in fixed else "(it shares the global one)"))

    proposed = _proposal(chosen_cfg, wmap, own, fixed) if adopted else _current_fusion(contract)
    # thresholds under the final fusion, with the weights the pipeline will use
    final_cfg = Config(proposed["method"], proposed["normalization"], proposed["rrf_k"])

    def final_weight(g: str) -> float:
        if final_cfg.method in ("dense", "bm25"):
            return 1.0 if final_cfg.method == "dense" else 0.0
        return proposed["group_weights"].get(g, proposed["weights"]["dense"])

    conf = {id(it): it.top_confidence(final_cfg, final_weight(it.group)) for it in items}
    thresholds, table, tnotes = _thresholds(items, conf, max_false_answer, max_false_refusal)
    notes += tnotes
    curves = {}
    curve_cfg = final_cfg if final_cfg in CONFIGS else chosen_cfg
    for g in GROUPS:
        m = groups == g
        if m.any():
            curves[g] = {"weights": list(WEIGHTS), "count": int(m.sum()), "fusion": curve_cfg.name,
                         "metric": [round(float(S[CONFIGS.index(curve_cfg), wi, m].mean()), 4)
                                    for wi in range(len(WEIGHTS))]}
    dist = {"answerable": sorted(round(conf[id(it)], 4) for it in items if it.q.answerable),
            "unanswerable": sorted(round(conf[id(it)], 4) for it in items if not it.q.answerable)}
    result = CalibrationResult(
        objective=objective, folds=folds, seed=seed, questions=len(items), answerable=len(ans_items),
        unanswerable=len(items) - len(ans_items), groups=counts,
        current={**_current_fusion(contract), objective: round(float(current_scores.mean()), 4)},
        proposed=proposed, adopted=adopted,
        heldout={"chosen": round(float(heldout.mean()), 4), "current": round(float(current_scores.mean()), 4),
                 "best_single": round(float(single_scores.mean()), 4), "best_single_name": best_single,
                 "dense": round(float(dense_scores.mean()), 4), "bm25": round(float(bm25_scores.mean()), 4),
                 "gain": round(gain, 4), "p_value": round(p_value, 4), "alpha": alpha,
                 "chosen_in_sample": round(float(per_question(ci, wmap).mean()), 4)},
        weight_curves=curves, thresholds=thresholds, threshold_table=table, distributions=dist, notes=notes,
    )
    t2 = time.perf_counter()
    result.appendix = _appendix(result, store, qs, source)
    # The full pipeline (dedup included) with the calibrated contract, on the whole set: the
    # numbers `eval --fail-under-recorded` holds CI to.
    from ..contract import calibrated_text, validate_contract, yaml_load_plain
    from .evaluate import EvalConfig, evaluate

    new = validate_contract(yaml_load_plain(calibrated_text(None, contract, result)), "the calibrated contract")
    report = evaluate(store, qs, EvalConfig(modes=["contract"], ks=sorted({k, 5, 10}),
                                            metrics=sorted({base, "ndcg", "mrr", "hit_rate"})),
                      contract=new, embedder=embedder, principal=principal, allow=allow)
    recorded = {n: v for n, v in report.metrics()["contract"].items() if v is not None}
    refusal = report.refusal()["contract"]
    result.verification = {"metrics": recorded, "refusal": refusal}
    result.timings = {"retrieval_s": round(t1 - t0, 2), "search_s": round(t2 - t1, 2),
                      "verification_s": round(time.perf_counter() - t2, 2)}
    result.appendix["recorded"] = {"metrics": recorded, "refusal": {k: refusal[k] for k in
                                   ("unanswerable", "correctly_refused", "answerable", "wrongly_refused")}}
    return result


def _current_metric(it: _Question, contract, cfg: Config, objective: str, multilingual: bool) -> float:
    if cfg.method in ("dense", "bm25"):
        return it.metric(Config("weighted"), 1.0 if cfg.method == "dense" else 0.0, objective)
    w_dense, _ = contract.weights_for(set(it.c.processed.types))
    return it.metric(cfg, w_dense, objective)


def _rule_weights(contract) -> dict[str, float]:
    """Dense weight of the first rule for each type, as ``Contract.weights_for`` picks it."""
    out: dict[str, float] = {}
    for rule in contract.retrieve.rules:
        if rule.when == "cjk" and contract.retrieve.model_multilingual:
            continue
        out.setdefault(rule.when, round(rule.weights.normalised()[0], 4))
    return out


def _current_fusion(contract) -> dict:
    f = contract.retrieve.fusion
    wd, _ = f.weights.normalised()
    rules = _rule_weights(contract)
    return {"method": f.method, "normalization": f.normalization, "rrf_k": f.rrf_k,
            "weights": {"dense": round(rules.get("other", wd), 4), "bm25": round(1 - rules.get("other", wd), 4)},
            "group_weights": {g: w for g, w in rules.items() if g != "other"}}


def _proposal(cfg: Config, wmap: dict[str, int], own: set[str], fixed: dict[str, float]) -> dict:
    shared = WEIGHTS[wmap["other"]]
    groups = {g: WEIGHTS[wmap[g]] for g in own}
    groups.update(fixed)  # types without enough questions keep the contract's rule
    return {"method": cfg.method, "normalization": cfg.normalization, "rrf_k": cfg.rrf_k,
            "weights": {"dense": shared, "bm25": round(1 - shared, 1)}, "group_weights": groups}


def _paired_p(a: np.ndarray, b: np.ndarray, *, seed: int, permutations: int = 10000) -> float:
    """Two-sided paired sign-flip randomisation test of mean(a - b): the test of `eval --baseline`."""
    from .evaluate import sign_flip_p

    d = a - b
    d = np.where(np.abs(d) < 1e-12, 0.0, d)
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=(permutations, len(d)))
    return sign_flip_p(d, signs)


def _rates(ans: np.ndarray, unans: np.ndarray, t: float) -> tuple[float, float]:
    """(false answer rate: unanswerable not refused, false refusal rate: answerable refused) at t."""
    fa = float((unans >= t).mean()) if len(unans) else 0.0
    fr = float((ans < t).mean()) if len(ans) else 0.0
    return fa, fr


def _pick(ans: np.ndarray, unans: np.ndarray, max_fa, max_fr) -> tuple[float, float, float, bool]:
    """(refuse-below threshold, false answer rate, false refusal rate, target met)."""
    cands = sorted({0.0, *np.round(np.concatenate([ans, unans]), 4).tolist(), 1.0})
    # a threshold just above each observed value separates it; use midpoints between neighbours
    points = [round((a + b) / 2, 4) for a, b in zip(cands, cands[1:])] or [0.5]
    scored = []
    for t in points:
        fa, fr = _rates(ans, unans, t)
        scored.append((t, fa, fr))
    if max_fa is not None:
        ok = [s for s in scored if s[1] <= max_fa]
        return (*min(ok, key=lambda s: (s[2], s[0])), True) if ok else (*max(scored, key=lambda s: s[0]), False)
    if max_fr is not None:
        ok = [s for s in scored if s[2] <= max_fr]
        return (*min(ok, key=lambda s: (s[1], -s[0])), True) if ok else (*min(scored, key=lambda s: s[0]), False)
    # balanced accuracy = ((1 - fa) + (1 - fr)) / 2; ties: the lower threshold (fewer refusals)
    return (*max(scored, key=lambda s: ((1 - s[1]) + (1 - s[2]), -s[0])), True)


def _answer_threshold(low: float, unans: np.ndarray, share: float = 0.05) -> float:
    """The lowest threshold at or above ``low`` that answers (without the notice) at most ``share``
    of the unanswerable questions."""
    if not len(unans):
        return low
    allowed = int(math.floor(share * len(unans) + 1e-9))
    ordered = np.sort(unans)
    if allowed >= len(ordered):
        return low
    t = float(ordered[len(ordered) - allowed - 1]) + 1e-4  # that one and all below it get the notice
    return round(min(1.0, max(low, t)), 4)


def _thresholds(items, conf, max_fa, max_fr):
    notes = []
    all_ans = np.array([conf[id(it)] for it in items if it.q.answerable])
    all_unans = np.array([conf[id(it)] for it in items if not it.q.answerable])
    table = []
    for t in sorted({round(x / 20, 2) for x in range(21)}):
        fa, fr = _rates(all_ans, all_unans, t)
        table.append({"threshold": t, "false_answer": round(fa, 4), "false_refusal": round(fr, 4)})
    if len(all_unans) < MIN_UNANSWERABLE:
        notes.append(f"{len(all_unans)} unanswerable question(s), fewer than {MIN_UNANSWERABLE}: no refusal threshold is "
                     "proposed. Add questions the knowledge base cannot answer, with \"relevant\": [], e.g. "
                     '{"id": "u1", "question": "How do I pay with PayPal?", "relevant": []}')
        return None, table, notes

    def tier(a, u, name):
        low, fa, fr, met = _pick(a, u, max_fa, max_fr)
        if not met:
            notes.append(f"{name}: the target cannot be met on these questions; the closest threshold is used "
                         f"(false answers {fa:.0%}, false refusals {fr:.0%})")
        return {"answer": _answer_threshold(low, u), "low_confidence": round(low, 4), "false_answer": round(fa, 4),
                "false_refusal": round(fr, 4), "answerable": len(a), "unanswerable": len(u)}

    tiers, in_tier = {}, set()
    for g in ("identifier", "cjk"):
        a = np.array([conf[id(it)] for it in items if it.q.answerable and it.group == g])
        u = np.array([conf[id(it)] for it in items if not it.q.answerable and it.group == g])
        if len(a) >= MIN_TIER and len(u) >= MIN_TIER:
            tiers[g] = tier(a, u, g)
            in_tier.add(g)
        elif len(a) or len(u):
            notes.append(f"{g}: {len(a)} answerable / {len(u)} unanswerable question(s): fewer than {MIN_TIER} of "
                         "each, so no tier of its own (the default thresholds apply)")
    rest = [it for it in items if it.group not in in_tier]
    default = tier(np.array([conf[id(it)] for it in rest if it.q.answerable]),
                   np.array([conf[id(it)] for it in rest if not it.q.answerable]), "default")
    # rates over every question, each under the thresholds that will decide it
    fa = [conf[id(it)] >= (tiers.get(it.group) or default)["low_confidence"] for it in items if not it.q.answerable]
    fr = [conf[id(it)] < (tiers.get(it.group) or default)["low_confidence"] for it in items if it.q.answerable]
    overall = {"false_answer": round(float(np.mean(fa)), 4) if fa else 0.0, "answerable": len(fr),
               "false_refusal": round(float(np.mean(fr)), 4) if fr else 0.0, "unanswerable": len(fa)}
    notes.append("threshold rates are in-sample: measured on the questions they were chosen on")
    return {"default": default, "tiers": tiers, "overall": overall}, table, notes


def _appendix(result: CalibrationResult, store, qs, source: str) -> dict:
    return {
        "date": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        "kbtool_version": __version__,
        "question_set": {"path": source, "sha256": question_set_sha256(qs), "questions": result.questions,
                         "answerable": result.answerable, "unanswerable": result.unanswerable},
        "store": store_fingerprint(store),
        "objective": result.objective, "folds": result.folds, "seed": result.seed,
        "heldout": result.heldout, "adopted": result.adopted,
        "thresholds": result.thresholds,
    }


def question_set_sha256(qs) -> str:
    h = hashlib.sha256()
    for q in qs.questions:
        h.update(repr((q.id, q.question, [(r.doc, r.grade, r.evidence, r.section) for r in q.relevant],
                       sorted(q.tags))).encode())
    return h.hexdigest()


def store_fingerprint(store) -> dict:
    info = store.status()
    return {"model": store.model_id, "chunking": store.manifest.get("chunking"),
            "analyzer": info.get("analyzer"), "documents": info["documents"], "chunks": info["chunks"]}


def write_outputs(result: CalibrationResult, out_dir) -> list:
    """calibration.json (everything) and calibration.png (trade-off, distributions, weight curves)."""
    import json
    from pathlib import Path

    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        js = out_dir / "calibration.json"
        js.write_text(json.dumps(result.to_dict(), indent=2, ensure_ascii=False) + "\n")
        png = out_dir / "calibration.png"
        plot(result, png)
    except OSError as exc:
        raise InputError(f"--out {out_dir}: cannot write ({exc.strerror})") from None
    return [js, png]


def plot(result: CalibrationResult, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    ax = axes[0]
    table = result.threshold_table
    ax.plot([r["false_refusal"] for r in table], [r["false_answer"] for r in table], marker=".")
    if result.thresholds:
        d = result.thresholds["default"]
        ax.scatter([d["false_refusal"]], [d["false_answer"]], color="red", zorder=3,
                   label=f"chosen: refuse below {d['low_confidence']:.3f}")
        ax.legend()
    ax.set_xlabel("false refusals (answerable refused)")
    ax.set_ylabel("false answers (unanswerable answered)")
    ax.set_title("Refusal trade-off over thresholds")
    ax = axes[1]
    bins = [i / 20 for i in range(21)]
    ax.hist(result.distributions["answerable"], bins=bins, alpha=0.6, label="answerable")
    ax.hist(result.distributions["unanswerable"], bins=bins, alpha=0.6, label="unanswerable")
    ax.set_xlabel("top confidence")
    ax.set_title("Confidence by question kind")
    ax.legend()
    ax = axes[2]
    for g, curve in result.weight_curves.items():
        ax.plot(curve["weights"], curve["metric"], marker=".", label=f"{g} (n={curve['count']})")
    ax.set_xlabel("dense weight")
    ax.set_ylabel(result.objective)
    ax.set_title("Metric vs dense weight, per question type")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
