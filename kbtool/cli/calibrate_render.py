"""Rich tables for `kbtool calibrate` (the library returns data, this draws it)."""

from __future__ import annotations


def render(result, console) -> None:
    from rich.markup import escape
    from rich.table import Table

    h = result.heldout
    console.print(f"{result.questions} questions ({result.answerable} answerable, {result.unanswerable} unanswerable); "
                  f"types: " + ", ".join(f"{g} {n}" for g, n in result.groups.items() if n), highlight=False)
    t = Table(title=f"Held-out {result.objective} ({result.folds}-fold cross-validation, seed {result.seed})",
              title_justify="left")
    for col in ("setting", result.objective):
        t.add_column(col, justify="left" if col == "setting" else "right")
    t.add_row("chosen by cross-validation", f"{h['chosen']:.4f}")
    t.add_row("current contract", f"{h['current']:.4f}")
    t.add_row(f"best single retriever ({h['best_single_name']})", f"{h['best_single']:.4f}")
    for name in _retrievers(h):
        t.add_row(f"  {name} alone", f"{h[name]:.4f}")
    console.print(t)
    p = result.proposed
    verdict = "adopted" if result.adopted else "kept the current fusion"
    console.print(f"fusion: {verdict} (gain {h['gain']:+.4f}, p = {h['p_value']:.3f}): {p['method']}"
                  + (f"/{p['normalization']}" if p["method"] == "weighted" else f" k={p['rrf_k']}")
                  + f", {_weights(p['weights'])}" + "".join(f"; {g}: {_weights(w)}" for g, w in p["group_weights"].items())
                  + _coverage_rules(p.get("coverage_rules") or [], h.get("coverage_rule")), highlight=False)
    a = result.answerability or {}
    if a.get("fitted"):
        o, c, ht = a["oof"], a["confidence"], a.get("heldout_thresholds")
        t = Table(title=f"Answerability model ({result.folds}-fold out of fold: each question scored by a model "
                        "fitted without it)", title_justify="left")
        for col in ("decided by", "AUC", "Brier", "calibration error"):
            t.add_column(col, justify="left" if col == "decided by" else "right")
        t.add_row("P(answerable), the model", _f(o["auc"]), _f(o["brier"]), _f(o["calibration_error"]))
        t.add_row("best hit's confidence alone", _f(c["auc"]), "", "")
        console.print(t)
        if ht:
            console.print(
                f"held out, threshold choice included: refused {ht['correctly_refused']} of {ht['unanswerable']} "
                f"unanswerable ({_pct(ht['refusal_rate'])}, 95% CI {_ci(ht['refusal_interval'])}), wrongly refused "
                f"{ht['wrongly_refused']} of {ht['answerable']} answerable ({_pct(ht['false_refusal'])}, "
                f"95% CI {_ci(ht['false_refusal_interval'])})", highlight=False)
    g = a.get("generated") or {}
    if g.get("questions"):
        console.print("generated negatives (model fit and threshold choice only, in no rate shown): " + "; ".join(
            f"{k} {v['questions']}" + ("" if v["refused"] is None else f", {v['refused']} refused by the thresholds")
            for k, v in g["kinds"].items()), highlight=False)
    if result.thresholds:
        unit = "P(answerable)" if a.get("fitted") or result.model or a.get("decided_by") == "P(answerable)" \
            else "top confidence"
        t = Table(title=f"Thresholds ({unit})", title_justify="left")
        for col in ("tier", "answer", "refuse below", "false answers", "false refusals"):
            t.add_column(col, justify="left" if col == "tier" else "right")
        rows = {"default": result.thresholds["default"], **result.thresholds["tiers"]}
        for name, r in rows.items():
            t.add_row(escape(name), f"{r['answer']:.3f}", f"{r['low_confidence']:.3f}",
                      _of(r["false_answer"], r["unanswerable"]), _of(r["false_refusal"], r["answerable"]))
        o = result.thresholds["overall"]
        t.add_row("all questions", "", "", _of(o["false_answer"], o["unanswerable"]),
                  _of(o["false_refusal"], o["answerable"]))
        console.print(t)
    for note in result.notes:
        console.print(f"[yellow]note[/] {escape(note)}", highlight=False)


def _retrievers(heldout: dict) -> list[str]:
    """The retrievers scored alone: heldout keys named as retrievers (dense, bm25, dense:NAME)."""
    from ..contract import RETRIEVER

    return [k for k in heldout if RETRIEVER.match(k)]


def _coverage_rules(rules, test) -> str:
    """'; BM25 coverage < 0.3: dense 0.9, bm25 0.1 (coverage rule held out +0.0120, p = 0.010)'."""
    out = "".join(f"; BM25 coverage < {r['bm25_coverage_below']:g}: {_weights(r['weights'])}" for r in rules)
    if test and test["gain"]:
        out += f" (coverage rule held out {test['gain']:+.4f}, p = {test['p_value']:.3f})"
    return out


def _weights(w) -> str:
    """'dense 0.2, bm25 0.4, dense:use-m 0.4' (a bare number: the dense weight beside bm25)."""
    if not isinstance(w, dict):
        return f"dense {w}"
    return ", ".join(f"{name} {v:g}" for name, v in w.items())


def _f(x) -> str:
    return "" if x is None else f"{x:.3f}"


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def _of(rate: float | None, total: int) -> str:
    """'1 of 8 (12.5%)': the count first (a rate rounded to whole percent hid it: '12% of 8')."""
    if rate is None or not total:
        return f"– of {total}"
    n = round(rate * total)
    pct = 100 * n / total
    return f"{n} of {total} ({pct:.0f}%)" if pct == round(pct) else f"{n} of {total} ({pct:.1f}%)"


def _ci(iv) -> str:
    return "n/a" if not iv else f"{iv[0]:.0%}–{iv[1]:.0%}"


def print_change(console, old: str, new: str, diff: str, source, target, verbose: bool) -> None:
    """The contract change calibrate proposes: a line per section (``changes_lines``), or with
    ``verbose`` the unified ``diff`` of the file."""
    if verbose or not diff:
        console.file.write(diff if diff else "(no change)\n")
        return
    import yaml

    console.print(f"proposed {target} (from {source}; -v prints the {diff.count(chr(10))}-line diff):",
                  highlight=False, markup=False)
    for line in changes_lines(yaml.safe_load(old), yaml.safe_load(new)):
        console.print("  " + line, highlight=False, markup=False)


SHOWN_VALUES = 3  # changed values named in a section's line; more are counted


def changes_lines(old: dict, new: dict) -> list[str]:
    """The change calibrate proposes, a line per contract section (``retrieve.fusion``,
    ``decide.thresholds``, each ``decide.tiers.NAME``, ``calibration``), each threshold named by its
    tier: ``decide.tiers.identifier (the identifier tier's thresholds): added: answer 0.5905, ...``."""
    return [_describe(path, a, b) for path, a, b in _changed(old, new, [])]


def _changed(old, new, path: list[str]) -> list[tuple[list[str], object, object]]:
    """(section path, old, new) of every section that differs: two levels deep, three under decide.tiers."""
    if old == new:
        return []
    depth = 3 if path[:2] == ["decide", "tiers"] else 2
    if isinstance(old, dict) and isinstance(new, dict) and len(path) < depth:
        keys = list(old) + [k for k in new if k not in old]
        return [c for k in keys for c in _changed(old.get(k), new.get(k), [*path, str(k)])]
    return [(path, old, new)]


def _describe(path: list[str], old, new) -> str:
    name = ".".join(path)
    if path == ["decide", "model"]:
        name += " (the answerability model)"
    elif path == ["decide", "thresholds"]:
        name += " (the default tier's thresholds)"
    elif path[:2] == ["decide", "tiers"] and len(path) == 3:
        name += f" (the {path[2]} tier's thresholds)"
    if old in (None, {}, []) and new not in (None, {}, []):
        return f"{name}: added" + (f": {_values(_leaves(new))}" if isinstance(new, dict) else f" {_short(new)}")
    if new in (None, {}, []):
        return f"{name}: removed"
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return f"{name}: {_short(old)} -> {_short(new)}"
    a, b = _leaves(old), _leaves(new)
    diff = [k for k in list(a) + [k for k in b if k not in a] if a.get(k) != b.get(k)]
    if len(diff) <= SHOWN_VALUES:
        return f"{name}: " + ", ".join(f"{k} {_short(a.get(k))} -> {_short(b.get(k))}" for k in diff)
    return f"{name}: {len(diff)} values of {_parts(diff)}"


def _leaves(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_leaves(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _values(leaves: dict) -> str:
    if len(leaves) <= SHOWN_VALUES + 1:
        return ", ".join(f"{k} {_short(v)}" for k, v in leaves.items())
    return f"{len(leaves)} values of {_parts(leaves)}"


def _parts(keys, shown: int = 4) -> str:
    """'coefficients, intercept, calibration, fitted_on' (the first parts of the keys; more: '…')."""
    parts = list(dict.fromkeys(k.split(".")[0] for k in keys))
    return ", ".join(parts[:shown]) + (", …" if len(parts) > shown else "")


def _short(v) -> str:
    text = "(none)" if v is None else str(v)
    return text if len(text) <= 40 else f"{type(v).__name__} of {len(v)}" if isinstance(v, (list, dict)) else text[:37] + "..."
