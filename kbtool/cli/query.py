from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from . import app
from ._common import (ContractOpt, JsonOpt, ModelOpt, SetOpt, StoreOpt, contract_line, contract_source, err,
                      handle_errors, quick_exit, load_contract_opt, open_store, out, print_json, visible)


@app.command()
@handle_errors
def query(
    text: Annotated[Optional[str], typer.Argument(metavar="TEXT", help="The question or keywords (or --batch).")] = None,
    batch: Annotated[Optional[str], typer.Option("--batch", metavar="FILE", help="Answer every question of FILE ('-': stdin) in one process: a line is a question, or a JSON object {\"question\", \"id\", \"filters\", \"tags\"}; writes one JSON answer per line (JSONL) on stdout.")] = None,
    mode: Annotated[str, typer.Option("--mode", "-m", metavar="MODE", help="contract (its fusion and rules), dense, bm25, hybrid (RRF k=60), rrf:K, weighted:W; with added models dense:NAME, rrf:R1+R2, weighted:R1=W1+R2=W2.")] = "contract",
    top_k: Annotated[Optional[int], typer.Option("--top-k", "-k", metavar="N", min=1, help="Number of results [default: the contract's retrieve.top_k].")] = None,
    filter_: Annotated[Optional[List[str]], typer.Option("--filter", "-f", metavar="SPEC", help="key=value, key=a|b, dir=docs/** (glob), key!=v, updated>=2024-01-01 (repeatable); applied inside both retrievers.")] = None,
    principal: Annotated[Optional[str], typer.Option("--principal", metavar="NAME", help="Query as this principal (access.principals in the contract): documents it may not read never appear.")] = None,
    allow: Annotated[Optional[List[str]], typer.Option("--allow", metavar="TAG", help="Permission tag the caller holds (repeatable).")] = None,
    tag: Annotated[Optional[List[str]], typer.Option("--tag", metavar="TAG", help="Question tag selecting a threshold tier (decide.tiers), repeatable.")] = None,
    context: Annotated[bool, typer.Option("--context", help="Print the context block an agent puts in its prompt.")] = False,
    trace: Annotated[Optional[str], typer.Option("--trace", metavar="FILE", help="Append a JSONL trace record to this file.")] = None,
    contract: ContractOpt = None,
    set_: SetOpt = None,
    base_url: Annotated[Optional[str], typer.Option("--base-url", metavar="URL", help="Site the documents are published under: citations become BASE/doc-path/#anchor (contract: context.base_url).")] = None,
    model: ModelOpt = None,
    store: StoreOpt = None,
    json_: JsonOpt = False,
):
    """Answer a question from the store as the retrieval contract says: hits with confidence, and a
    decision (answer, low_confidence or refuse) that explains itself."""
    from ..query.pipeline import retrieve
    from ..query.retriever import contract_for_mode

    from ..query.preprocess import clean

    quick_exit()
    if (text is None) == (batch is None):
        raise typer.BadParameter("give a question, or --batch FILE, not both" if text is not None
                                 else "give a question (TEXT), or --batch FILE", param_hint="TEXT")
    if batch is None and not clean(text):
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
    if batch is not None:
        _batch(kb, c, batch, filters=filter_ or [], principal=principal, allow=allow, tags=tag or [], top_k=top_k,
               trace=trace, embedder=embedder, source=source)
        return
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


def _batch(kb, contract, file: str, *, filters, principal, allow, tags, top_k, trace, embedder, source) -> None:
    """One JSON answer per question, in input order. Questions with the same filters and tags are
    retrieved together (embedded in batches, the model loaded once)."""
    import json
    import sys

    from ..query.pipeline import retrieve

    items = list(_batch_questions(file))
    groups: dict[tuple, list[int]] = {}
    for i, q in enumerate(items):
        groups.setdefault((tuple(q["filters"]), tuple(q["tags"])), []).append(i)
    answers: list = [None] * len(items)
    for (extra, qtags), idx in groups.items():
        got = retrieve(kb, contract, [items[i]["question"] for i in idx], filters=[*filters, *extra],
                       principal=principal, allow=allow, tags=[*tags, *qtags], top_k=top_k, trace_path=trace,
                       embedder=embedder)
        for i, a in zip(idx, got):
            answers[i] = a
    for q, a in zip(items, answers):
        sys.stdout.write(json.dumps({**({"id": q["id"]} if q["id"] is not None else {}), **a.to_dict(),
                                     "contract": source}, ensure_ascii=False, default=str) + "\n")


def _batch_questions(file: str):
    """{question, id, filters, tags} per non-empty line of FILE ('-': stdin); InputError names file:line."""
    import json
    import sys
    from pathlib import Path

    from ..errors import InputError
    from ..query.preprocess import clean

    name = "stdin" if file == "-" else file
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"--batch {name}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            try:
                rec = json.loads(line)
            except ValueError as exc:
                raise InputError(f"{name}:{n}: not valid JSON ({exc.msg}): write one question or one JSON object per line") from None
            q = rec.get("question")
            filters, qtags = rec.get("filters", []), rec.get("tags", [])
            if not isinstance(q, str) or not clean(q):
                raise InputError(f"{name}:{n}: \"question\" must be a non-empty string")
            if not (isinstance(filters, list) and all(isinstance(f, str) for f in filters)
                    and isinstance(qtags, list) and all(isinstance(t, str) for t in qtags)):
                raise InputError(f"{name}:{n}: \"filters\" and \"tags\" must be lists of strings")
            yield {"question": q, "id": rec.get("id"), "filters": filters, "tags": qtags}
        elif clean(line):
            yield {"question": line.strip(), "id": None, "filters": [], "tags": []}


def _render(ans, mode: str) -> None:
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    from ..query.explain import shown

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
    rank = {h.chunk_id: h.rank for h in ans.hits}
    for c in ans.conflicts or ():  # postprocess.freshness
        from ..query.context import conflict_text

        out.print(visible("sources differ: " + conflict_text(c, rank, "#{}")), style="yellow", highlight=False,
                  markup=False)
