from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from . import app
from ._common import AddModelOpt, ChromaCollectionOpt, ChromaDatabaseOpt, ChromaTenantOpt, ChromaUrlOpt, chroma_options, add_models, JsonOpt, InputTypeOpt, MaxTokensOpt, ModelOpt, PassagePrefixOpt, QueryPrefixOpt, TokenizerOpt, QuietOpt, StemmerOpt, StoreOpt, WaitOpt, writer_settings, handle_errors, open_store, out, print_json, progress_bars


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
    verify: Annotated[bool, typer.Option("--verify", help="List what Chroma holds instead of trusting the store's record of it, and repair what differs.")] = False,
    stemmer: StemmerOpt = None,
    add_model: AddModelOpt = None,
    drop_model: Annotated[Optional[List[str]], typer.Option("--drop-model", metavar="NAME", help="Remove retriever dense:NAME and its vectors (repeatable).")] = None,
    chroma_url: ChromaUrlOpt = None,
    chroma_tenant: ChromaTenantOpt = None,
    chroma_database: ChromaDatabaseOpt = None,
    chroma_collection: ChromaCollectionOpt = None,
    wait: WaitOpt = 300.0,
    store: StoreOpt = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
):
    """Embed new chunks and make Chroma and BM25 hold exactly the catalog's chunks."""
    from ..embed import load_embedder
    from ..index import index as run_index
    from ..store.models import check_sizing, model_spec

    kb = open_store(store, vectors=chroma_options(chroma_url, chroma_tenant, chroma_database, chroma_collection))
    writer_settings(kb, wait, quiet)
    spec = model_spec(kb, model, query_prefix, passage_prefix, max_tokens, tokenizer, input_type)
    if not rebuild:
        kb.check_model(spec)
    check_sizing(kb, spec, rebuild)
    if stemmer is not None:
        kb.set_stemmer(stemmer)
    dropped = [n for n in drop_model or [] if _drop(kb, n)]
    added = add_models(kb, add_model)
    embedder = load_embedder(spec or kb.embedding_spec())
    with progress_bars(quiet) as progress:
        report = run_index(kb, embedder=embedder, rebuild=rebuild, progress=progress, verify=verify)
    if json_:
        print_json({**report.to_dict(), "added_models": added, "dropped_models": [f"dense:{n.removeprefix('dense:')}" for n in dropped],
                    "retrievers": list(kb.dense_retrievers())})
    else:
        for name in dropped:
            out.print(f"dropped dense:{name.removeprefix('dense:')}", highlight=False)
        for name in added:
            out.print(f"added {name}: questions reach it where the contract weighs it (the built-in cjk rule weighs "
                      "dense:use-m); `kbtool calibrate` tunes its weights", highlight=False)
        out.print(f"{report.chunks} chunks: {report.embedded} embedded, {report.from_cache} from cache, "
                  f"{report.upserted} written, {report.deleted} deleted"
                  + (", BM25 rebuilt" if report.bm25_rebuilt else "")
                  + (f", BM25 delta of {report.bm25_delta} chunks" if report.bm25_delta else ""), highlight=False)


def _drop(kb, name: str) -> bool:
    from ..errors import UsageError

    if name == "dense":
        raise UsageError("--drop-model dense: dense is the store's own model, which cannot be dropped (switch it "
                         "with `kbtool index --rebuild --model MODEL`); --drop-model takes the NAME of a model "
                         "added as dense:NAME")
    if not kb.drop_model(name):
        have = ", ".join(kb.dense_retrievers()[1:]) or "none"
        raise UsageError(f"--drop-model {name}: the store has no model dense:{name.removeprefix('dense:')} "
                         f"(added models: {have})")
    return True
