from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from . import app
from ._common import ContractOpt, JsonOpt, StoreOpt, handle_errors, load_contract_opt, open_store, out, print_json


@app.command()
@handle_errors
def status(
    store: StoreOpt = None,
    json_: JsonOpt = False,
    principal: Annotated[Optional[str], typer.Option("--principal", metavar="NAME", help="Count only what this principal (access.principals) may read.")] = None,
    allow: Annotated[Optional[List[str]], typer.Option("--allow", metavar="TAG", help="Count only documents with this permission tag (repeatable).")] = None,
    contract: ContractOpt = None,
):
    """What the store holds: documents, chunks, model, sizes, last ingest.

    With --principal/--allow (required when the contract says access.require_principal), counts
    only what that caller may read and leaves out what describes the whole store."""
    from ..access import restricted_status
    from ..store.doctor import engine_line

    kb = open_store(store)
    contract_ = load_contract_opt(contract, [])
    info = restricted_status(kb, contract_, principal, allow)
    # The kept-text guard describes the whole store: not shown to a restricted caller.
    info["kept_text"] = None if info.get("access") is not None else kb.kept_below(contract_.data.min_kept_text)
    if json_:
        print_json(info)
        return
    from rich.table import Table

    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    emb = info["embedding"]
    restricted = info.get("access") is not None
    rows = [
        ("store", f"{info['store']} (format {info['format_version']}, kbtool {info['kbtool_version']})"),
        *([("access", f"counts of what tags {', '.join(info['access']) or '(none)'} may read")] if restricted else []),
        ("documents", f"{info['documents']}  " + ", ".join(f"{k}: {v}" for k, v in (info["documents_by_type"] or {}).items())),
        ("chunks", f"{info['chunks']}" + ("" if restricted or not info["chunks"] else f"  (avg {info['chunk_tokens_avg']} tokens, max {info['chunk_tokens_max']}, "
                   f"{info['chunks_over_model_limit']} over the model limit)")),
        ("model", f"{emb['model']}  ({_size(emb.get('dim'), emb.get('max_tokens'))}"
                  + (f", {emb['url']}" if emb.get("url") else "")
                  + (f", prefixes {emb.get('query_prefix')!r}/{emb.get('passage_prefix')!r}"
                     if emb.get("query_prefix") or emb.get("passage_prefix") else "")
                  + (", input_type sent" if emb.get("input_type") else "")
                  + (f", embedded by {emb['runtime']}" if emb.get("runtime") else "") + ")"),
        *((name, f"{rec['model']}  ({_size(rec.get('dim'))}"
                  + (f", embedded by {rec['runtime']}" if rec.get("runtime") else "")
                  + (", current" if rec.get("current") else ", behind: run `kbtool index`") + ")")
          for name, rec in (info.get("models") or {}).items()),
        ("vectors", engine_line(info["vectors"])),
        ("chunking", "not chunked yet" if info["chunking"] is None else str(info["chunking"])),
        ("bm25", str(info["bm25"])),
        ("analyzer", str(info["analyzer"])),
        ("indexes", "current" if info["indexes_current"] else "nothing ingested yet: run `kbtool ingest PATH`"
                    if not info["documents"] and not info.get("last_ingest") and not restricted
                    else "behind the catalog: run `kbtool index`"),
        *([] if restricted else [("kept text", kept_line(info["kept_text"]))]),
        *([] if restricted else [("source", _source_line(src)) for src in info.get("sources") or []]),
        *([] if restricted else [("last ingest", str(info["last_ingest"] or "never")),
                                 ("disk", f"{info['disk_bytes'] / 2**20:.1f} MiB")]),
    ]
    for k, v in rows:
        table.add_row(k, v)
    out.print(table, highlight=False)


def _size(dim, max_tokens=False) -> str:
    """'384-d, 256 tokens'; a model the store has not run yet: 'not run yet' (its vector size and
    input limit are recorded when it first embeds)."""
    parts = ([f"{dim}-d"] if dim else []) + ([f"{max_tokens} tokens"] if max_tokens else [])
    return ", ".join(parts) or "not run yet: its vector size is recorded when it first embeds"


def kept_line(kept: dict) -> str:
    """'2 of 40 measured documents keep less than 98% of their visible text: a.md (87.0%), …'."""
    below, t = kept["below"], kept["threshold"]
    if not kept["measured"]:
        return "no document measured (Markdown, text and HTML are, when parsed)"
    if not below:
        return f"{kept['measured']} measured document(s) keep at least {t:.0%} of their visible text"
    named = ", ".join(f"{d['doc_id']} ({d['kept']:.1%})" for d in below[:5]) + (", …" if len(below) > 5 else "")
    return f"{len(below)} of {kept['measured']} measured documents keep less than {t:.0%} of their visible text: {named}"


def _source_line(src: dict) -> str:
    """'/repo/docs/zh/docs  (id prefix zh/, https://…/zh/, meta lang=zh, from kbtool.yaml)'."""
    from pathlib import Path

    root = src["root"]
    parts = [f"id prefix {src['id_prefix']}" if src.get("id_prefix") else "",
             src.get("base_url") or (f"{src['mkdocs']['site_url']} from mkdocs.yml"
                                     if (src.get("mkdocs") or {}).get("site_url") else "")
             or ", ".join(f"{url} from {d + '/' if d else ''}conf.py" for d, url in sorted((src.get("sphinx") or {}).items())),
             "include " + ",".join(src["include"]) if src.get("include") else "",
             "exclude " + ",".join(src["exclude"]) if src.get("exclude") else "",
             "meta " + ",".join(f"{k}={v}" for k, v in sorted(src["metadata"].items())) if src.get("metadata") else "",
             "meta from " + ",".join(src["meta_from_path"]) if src.get("meta_from_path") else "",
             "declared in the contract" if src.get("declared") else "",
             "" if Path(root.removeprefix("beir:")).exists() else "FOLDER GONE: kbtool ingest NEW_PATH (re-uses it)"]
    extra = ", ".join(p for p in parts if p)
    return root + (f"  ({extra})" if extra else "")
