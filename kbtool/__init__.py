"""kbtool: build and evaluate retrieval knowledge bases.

    from kbtool import Store, load_contract, retrieve, ingest
    store = Store.open(".kb")
    answer = retrieve(store, load_contract(), "How do I fix error TW-E4031?")
    answer.decision, answer.confidence, answer.hits[0].doc_id, answer.context
"""

__version__ = "0.1.0"

__all__ = [
    "Store", "Contract", "load_contract", "default_contract", "retrieve", "Answer", "Hit", "evaluate",
    "Retriever", "ingest", "IngestOptions", "IngestReport", "ChunkParams", "IndexReport", "calibrate",
    "SentenceTransformerEmbedder",
    "KbtoolError", "__version__",
]

_LAZY = {
    "Store": "store", "Contract": "contract", "load_contract": "contract", "default_contract": "contract",
    "retrieve": "query.pipeline", "Answer": "query.answer_types", "Hit": "query.answer_types",
    "evaluate": "evaluation.evaluate", "Retriever": "query.retriever",
    "ingest": "ingestion.pipeline", "IngestOptions": "ingestion.pipeline", "IngestReport": "ingestion.pipeline",
    "ChunkParams": "chunk", "IndexReport": "index", "calibrate": "evaluation.calibrate",
    "SentenceTransformerEmbedder": "embed", "KbtoolError": "errors",
}


def __getattr__(name):
    # Lazy so `import kbtool` (and `kbtool --help`) never pays for numpy, chromadb or torch.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(name)
