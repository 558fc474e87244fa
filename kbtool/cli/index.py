from __future__ import annotations

from typing import Annotated

import typer

from . import app
from ._common import JsonOpt, InputTypeOpt, MaxTokensOpt, ModelOpt, PassagePrefixOpt, QueryPrefixOpt, TokenizerOpt, check_sizing, model_spec, QuietOpt, StemmerOpt, StoreOpt, WaitOpt, writer_settings, handle_errors, open_store, out, print_json, progress_bars


@app.command()
@handle_errors
def index(
    model: ModelOpt = None,
    query_prefix: QueryPrefixOpt = None,
    passage_prefix: PassagePrefixOpt = None,
    max_tokens: MaxTokensOpt = None,
    tokenizer: TokenizerOpt = None,
    input_type: InputTypeOpt = False,
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Re-embed everything (required to switch --model or prefixes).")] = False,
    stemmer: StemmerOpt = None,
    wait: WaitOpt = 300.0,
    store: StoreOpt = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
):
    """Embed new chunks and make Chroma and BM25 hold exactly the catalog's chunks."""
    from ..embed import load_embedder
    from ..index import index as run_index

    kb = open_store(store)
    writer_settings(kb, wait, quiet)
    spec = model_spec(kb, model, query_prefix, passage_prefix, max_tokens, tokenizer, input_type)
    if not rebuild:
        kb.check_model(spec)
    check_sizing(kb, spec, rebuild)
    if stemmer is not None:
        kb.set_stemmer(stemmer)
    embedder = load_embedder(spec or kb.embedding_spec())
    with progress_bars(quiet) as progress:
        report = run_index(kb, embedder=embedder, rebuild=rebuild, progress=progress)
    if json_:
        print_json(report.to_dict())
    else:
        out.print(f"{report.chunks} chunks: {report.embedded} embedded, {report.from_cache} from cache, "
                  f"{report.upserted} written, {report.deleted} deleted"
                  + (", BM25 rebuilt" if report.bm25_rebuilt else ""), highlight=False)
