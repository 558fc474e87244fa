from __future__ import annotations

from typing import Annotated

import typer

from . import app
from ._common import JsonOpt, ModelOpt, QuietOpt, StemmerOpt, StoreOpt, WaitOpt, writer_settings, handle_errors, open_store, out, print_json, progress_bars


@app.command()
@handle_errors
def index(
    model: ModelOpt = None,
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Re-embed everything (required to switch --model).")] = False,
    stemmer: StemmerOpt = None,
    wait: WaitOpt = 300.0,
    store: StoreOpt = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
):
    """Embed new chunks and make Chroma and BM25 hold exactly the catalog's chunks."""
    from ..embed import load_embedder
    from ..ingestion.pipeline import index as run_index

    kb = open_store(store)
    writer_settings(kb, wait, quiet)
    if not rebuild:
        kb.check_model(model)
    if stemmer is not None:
        kb.set_stemmer(stemmer)
    embedder = load_embedder(model or kb.model_id)
    with progress_bars(quiet) as progress:
        report = run_index(kb, embedder=embedder, rebuild=rebuild, progress=progress)
    if json_:
        print_json(report.to_dict())
    else:
        out.print(f"{report.chunks} chunks: {report.embedded} embedded, {report.from_cache} from cache, "
                  f"{report.upserted} written, {report.deleted} deleted"
                  + (", BM25 rebuilt" if report.bm25_rebuilt else ""), highlight=False)
