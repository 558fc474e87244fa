from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from . import app
from ._common import (ContractOpt, JsonOpt, ModelOpt, SetOpt, StoreOpt, contract_line, contract_source, err,
                      handle_errors, load_contract_opt, open_store, out, print_json, visible)


@app.command()
@handle_errors
def query(
    text: Annotated[str, typer.Argument(metavar="TEXT", help="The question or keywords.")],
    mode: Annotated[str, typer.Option("--mode", "-m", help="contract (its fusion and rules), dense, bm25, hybrid (RRF k=60), rrf:K or weighted:W.")] = "contract",
    top_k: Annotated[Optional[int], typer.Option("--top-k", "-k", min=1, help="Number of results [default: the contract's retrieve.top_k].")] = None,
    filter_: Annotated[Optional[List[str]], typer.Option("--filter", "-f", help="key=value, key=a|b, dir=docs/** (glob), key!=v, updated>=2024-01-01 (repeatable); applied inside both retrievers.")] = None,
    principal: Annotated[Optional[str], typer.Option("--principal", help="Query as this principal (access.principals in the contract): documents it may not read never appear.")] = None,
    allow: Annotated[Optional[List[str]], typer.Option("--allow", help="Permission tag the caller holds (repeatable).")] = None,
    tag: Annotated[Optional[List[str]], typer.Option("--tag", help="Question tag selecting a threshold tier (decide.tiers), repeatable.")] = None,
    context: Annotated[bool, typer.Option("--context", help="Print the context block an agent puts in its prompt.")] = False,
    trace: Annotated[Optional[str], typer.Option("--trace", help="Append a JSONL trace record to this file.")] = None,
    contract: ContractOpt = None,
    set_: SetOpt = None,
    base_url: Annotated[Optional[str], typer.Option("--base-url", help="Site the documents are published under: citations become BASE/doc-path/#anchor (contract: context.base_url).")] = None,
    model: ModelOpt = None,
    store: StoreOpt = None,
    json_: JsonOpt = False,
):
    """Answer a question from the store as the retrieval contract says: hits with confidence, and a
    decision (answer, low_confidence or refuse) that explains itself."""
    from ..query.pipeline import retrieve
    from ..query.retriever import contract_for_mode

    from ..query.preprocess import clean

    if not clean(text):
        raise typer.BadParameter("the query is empty", param_hint="TEXT")
    loaded = load_contract_opt(contract, set_)
    source = contract_source(contract, loaded)
    c = contract_for_mode(loaded, mode)
    if base_url:
        if not base_url.startswith(("http://", "https://")):
            raise typer.BadParameter("write the site's address, e.g. https://docs.example.com/", param_hint="--base-url")
        c = c.model_copy(update={"context": c.context.model_copy(update={"base_url": base_url})})
    kb = open_store(store)
    kb.check_model(model)
    embedder = None
    if model and model.startswith("openai:"):  # the store's model, served from this URL for this query
        from ..embed import load_embedder, parse_model
        from ..embed.base import with_overrides

        embedder = load_embedder(with_overrides(kb.embedding_spec(), url=parse_model(model).url))
    ans = retrieve(kb, c, text, filters=filter_ or [], principal=principal, allow=allow, tags=tag or [],
                   top_k=top_k, trace_path=trace, embedder=embedder)
    for warning in ans.explanation.get("filter_warnings", []):
        err.print(f"warning: {visible(warning)}", highlight=False, markup=False)
    if json_:
        print_json({**ans.to_dict(), "contract": source})
        return
    if context:
        out.file.write(visible(ans.context) if out.is_terminal else ans.context)
        return
    _render(ans, mode)
    out.print(contract_line(source, bool(set_)), style="dim", highlight=False, markup=False)


def _render(ans, mode: str) -> None:
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    from ..query.decide import shown

    ex = ans.explanation
    limits = tuple(ans.thresholds.values())  # rounded as the verdict rounds them: 0.499, never 0.50
    colour = {"answer": "green", "low_confidence": "yellow", "refuse": "red"}[ans.decision]
    line = Text(f"{ans.decision}", style=f"bold {colour}")
    line.append(f"  {visible(ex.get('message', ''))}", style="")
    if ans.decision == "refuse":
        out.print(line, highlight=False)  # the message names the missing terms
        for s in ex.get("suggestions", []):
            out.print(f"  suggestion: {visible(s)}", highlight=False, markup=False)
        return
    if not ans.hits:
        err.print(f"No results for {ans.question!r}.", highlight=False, markup=False)
        return
    w = " / ".join(f"{r} {v:.2f}" for r, v in ans.weights.items())
    table = Table(title=escape(visible(f"{mode} ({', '.join(ans.processed.types)}; {w}): {ans.question}")),
                  title_justify="left", expand=out.is_terminal, show_lines=True)
    table.add_column("#", justify="right", width=2)
    table.add_column("conf", min_width=5, no_wrap=True)
    table.add_column("source · section", ratio=2, overflow="fold")
    table.add_column("snippet", ratio=3, max_width=None if out.is_terminal else 100)
    for h in ans.hits:
        source = Text(visible(h.citation or h.doc_id), style="bold")  # path:line, path p.N or a URL
        if h.section_path:
            source.append(f"\n{visible(h.section_path)}", style="cyan")
        snippet = visible(" ".join(h.text.split()))
        table.add_row(str(h.rank), shown(h.confidence, limits), source, Text(snippet[:240] + ("…" if len(snippet) > 240 else "")))
    out.print(table)
    out.print(line, highlight=False)
