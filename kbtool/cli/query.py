from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from . import app
from ._common import JsonOpt, ModelOpt, StoreOpt, err, handle_errors, open_store, out, parse_pairs, print_json


@app.command()
@handle_errors
def query(
    text: Annotated[str, typer.Argument(metavar="TEXT", help="The question or keywords.")],
    mode: Annotated[str, typer.Option("--mode", "-m", help="hybrid (RRF k=60 of dense and BM25), dense, bm25, rrf:K or weighted:W.")] = "hybrid",
    top_k: Annotated[int, typer.Option("--top-k", "-k", min=1, help="Number of results.")] = 5,
    filter_: Annotated[Optional[List[str]], typer.Option("--filter", "-f", help="key=value on chunk metadata (doc_id, filetype, dir, page, or --meta keys), repeatable; applied inside both retrievers.")] = None,
    model: ModelOpt = None,
    store: StoreOpt = None,
    json_: JsonOpt = False,
):
    """Search the store."""
    from ..query.retriever import Retriever, parse_mode

    parse_mode(mode)
    if not text.strip():
        raise typer.BadParameter("the query is empty", param_hint="TEXT")
    kb = open_store(store)
    kb.check_model(model)
    hits = Retriever(kb).search(text, mode=mode, top_k=top_k, filters=parse_pairs(filter_, "--filter"))
    if json_:
        print_json({"query": text, "mode": mode, "top_k": top_k, "hits": [h.to_dict() for h in hits]})
        return
    if not hits:
        err.print(f"No results for {text!r} in {mode} mode.", highlight=False)
        return
    from rich.table import Table
    from rich.text import Text

    from rich.markup import escape

    table = Table(title=escape(f"{mode}: {text}"), title_justify="left", expand=True, show_lines=True)
    table.add_column("#", justify="right", width=2)
    table.add_column("score", min_width=7, no_wrap=True)
    table.add_column("source · section · page", ratio=2, overflow="fold")
    table.add_column("snippet", ratio=3)
    for h in hits:
        source = Text(h.doc_id, style="bold")
        if h.section_path:
            source.append(f"\n{h.section_path}", style="cyan")
        if h.page:
            source.append(f"\np. {h.page}", style="dim")
        snippet = " ".join(h.text.split())
        table.add_row(str(h.rank), f"{h.score:.4f}", source, Text(snippet[:240] + ("…" if len(snippet) > 240 else "")))
    out.print(table)
