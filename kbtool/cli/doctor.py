from __future__ import annotations

from typing import Annotated

import typer

from . import app
from ._common import ContractOpt, JsonOpt, StoreOpt, WaitOpt, err, handle_errors, open_store, out, print_json, writer_settings


@app.command()
@handle_errors
def doctor(
    repair: Annotated[bool, typer.Option("--repair", help="Bring Chroma and BM25 in line with the catalog (re-using cached vectors).")] = False,
    wait: WaitOpt = 300.0,
    store: StoreOpt = None,
    json_: JsonOpt = False,
    contract: ContractOpt = None,
):
    """Check that catalog, Chroma and BM25 hold the same chunks; exit 1 if they do not.

    Also lists the documents whose chunks keep less of their visible text than the contract's
    data.min_kept_text (a warning: the indexes can be in line with a parse that lost text)."""
    from ..index import repair as run_repair
    from ..store.doctor import diagnose

    kb = open_store(store)
    findings = diagnose(kb)
    repaired = None
    if repair and not all(f["ok"] for f in findings):
        from ..embed import load_embedder

        writer_settings(kb, wait)
        repaired = run_repair(kb, load_embedder(kb.embedding_spec()))
        findings = diagnose(kb)
    ok = all(f["ok"] for f in findings)
    from ..contract import load_contract
    from .status import kept_line

    kept = kb.kept_below(load_contract(contract).data.min_kept_text)
    if json_:
        print_json({"store": str(kb.path), "ok": ok, "findings": findings, "repaired": repaired, "kept_text": kept})
    else:
        for f in findings:
            out.print(f"{'ok  ' if f['ok'] else 'FAIL'} {f['check']:<10} {f['detail']}", highlight=False, markup=False)
        out.print(f"{'ok  ' if not kept['below'] else 'warn'} {'kept text':<10} {kept_line(kept)}", highlight=False,
                  markup=False)
        if repaired is not None:
            err.print(f"repaired: {repaired}", highlight=False, markup=False)
        if not ok and not repair:
            err.print("run `kbtool doctor --repair` (or `kbtool index --verify`) to bring the indexes in line", highlight=False,
                      markup=False)
    if not ok:
        raise typer.Exit(1)
