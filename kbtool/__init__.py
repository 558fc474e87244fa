"""kbtool: build and evaluate retrieval knowledge bases.

    from kbtool import Store, Retriever, ingest
    store = Store.open(".kb")
    hits = Retriever(store).search("error TW-E4031", mode="hybrid", top_k=5)
"""

__version__ = "0.1.0"

__all__ = [
    "Store", "Retriever", "Hit", "ingest", "IngestOptions", "IngestReport", "ChunkParams",
    "SentenceTransformerEmbedder", "KbtoolError", "__version__",
]

_LAZY = {
    "Store": "store", "Retriever": "query.retriever", "Hit": "query.retriever",
    "ingest": "ingestion.pipeline", "IngestOptions": "ingestion.pipeline", "IngestReport": "ingestion.pipeline",
    "ChunkParams": "chunk",
    "SentenceTransformerEmbedder": "embed", "KbtoolError": "errors",
}


def __getattr__(name):
    # Lazy so `import kbtool` (and `kbtool --help`) never pays for numpy, chromadb or torch.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(name)
