from __future__ import annotations

from typing import Annotated, Optional

import typer

from . import app
from ._common import ContractOpt, JsonOpt, StoreOpt, handle_errors, load_contract_opt, open_store, out, print_json, visible


@app.command()
@handle_errors
def chunks(
    doc_id: Annotated[Optional[str], typer.Argument(metavar="DOC_ID", help="A document id (as `status`, hits and citations name it); without one: every document, a line each.")] = None,
    over_limit: Annotated[bool, typer.Option("--over-limit", help="Only chunks longer than the embedding model's token limit (the model reads only the first part).")] = False,
    store: StoreOpt = None,
    contract: ContractOpt = None,
    json_: JsonOpt = False,
):
    """Show what a document was cut into: each chunk's section path, lines, token count (over the
    model's limit or not) and the exact text that is embedded and BM25-indexed — with the
    contract's sensitive rules applied, as every answer shows it (credentials redacted)."""
    kb = open_store(store)
    rules = load_contract_opt(contract, None).postprocess.sensitive.rules()
    if doc_id is None and not over_limit:
        rows = kb.chunks()
        docs: dict[str, dict] = {}
        for r in rows:
            d = docs.setdefault(r["doc_id"], {"doc_id": r["doc_id"], "chunks": 0, "tokens_max": 0, "over_limit": 0})
            d["chunks"] += 1
            d["tokens_max"] = max(d["tokens_max"], r["tokens"])
            d["over_limit"] += r["over_limit"]
        if json_:
            print_json(list(docs.values()))
            return
        from rich.table import Table

        table = Table(title=f"{len(docs)} documents, {len(rows)} chunks (`kbtool chunks DOC_ID` shows one)",
                      title_justify="left")
        for col in ("document", "chunks", "max tokens", "over limit"):
            table.add_column(col, justify="left" if col == "document" else "right")
        for d in docs.values():
            table.add_row(visible(d["doc_id"]), str(d["chunks"]), str(d["tokens_max"]), str(d["over_limit"] or ""))
        out.print(table)
        return
    rows = kb.chunks(doc_id, over_limit=over_limit, gate=rules.scan if rules.active else None)
    if json_:
        print_json(rows)
        return
    from rich.table import Table
    from rich.text import Text

    limit = rows[0]["limit"] if rows else kb.manifest["embedding"].get("max_tokens")
    what = f"{doc_id}: {len(rows)} chunks" if doc_id else f"{len(rows)} chunks over the model's limit"
    table = Table(title=f"{what} (limit {limit} tokens; the text is what is embedded and BM25-indexed)",
                  title_justify="left", show_lines=True, expand=out.is_terminal)
    table.add_column("#", justify="right")
    table.add_column("section · lines", ratio=1, overflow="fold", max_width=None if out.is_terminal else 50)
    table.add_column("tokens", justify="right", no_wrap=True)
    table.add_column("embedded text", ratio=3, overflow="fold", max_width=None if out.is_terminal else 100)
    for r in rows:
        where = Text(visible(r["section_path"] or "(no heading)"), style="cyan")
        lines = r["lines"]
        where.append(f"\n{visible(r['doc_id'])}" if not doc_id else "")
        if lines:
            where.append(f"\nlines {lines[0]}-{lines[1]}" if lines[1] != lines[0] else f"\nline {lines[0]}")
        for inc in r.get("line_source") or []:
            a, b = inc["lines"]
            where.append(f"\nincludes {visible(inc['path'])}:{a}" + (f"-{b}" if b != a else ""))
        if r["page"]:
            where.append(f"\npage {r['page']}")
        tokens = Text(str(r["tokens"]), style="bold red" if r["over_limit"] else "")
        if r["over_limit"]:
            tokens.append("\nover", style="red")
        table.add_row(str(r["n"]), where, tokens, Text(visible(r["embedded"])))
    out.print(table)
