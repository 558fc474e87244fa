"""Embedders: one interface (``Embedder``), so the store never cares which model or runtime
produces vectors.

* local models (the bundled all-MiniLM-L6-v2 by default, any sentence-transformers folder):
  ONNX Runtime from a verified export (``onnx.py``), else torch (``st.py``);
  ``KBTOOL_RUNTIME=torch|onnx`` forces one;
* ``openai:http://host:port/v1#name``: an OpenAI-compatible endpoint (``http.py``);
* ``use-m``: Universal Sentence Encoder multilingual v3 in pure numpy (``use.py``), whatever
  ``KBTOOL_RUNTIME`` says.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path
from typing import Callable

from ..errors import ModelError
from .base import (
    DEFAULT_MODEL,
    USE_MODEL,
    ApproxTokenizer,
    Embedder,
    EmbeddingSpec,
    canonical_model_id,
    check_available,
    default_prefixes,
    load_tokenizer_file,
    parse_model,
    resolve_model_path,
    runtime_choice,
)
from .st import SentenceTransformerEmbedder

__all__ = [
    "DEFAULT_MODEL", "USE_MODEL", "Embedder", "EmbeddingSpec", "SentenceTransformerEmbedder", "canonical_model_id",
    "check_available", "default_prefixes", "load_embedder", "load_tokenizer", "parse_model", "resolve_model_path",
]

log = logging.getLogger("kbtool")


# backend name (``EmbeddingSpec.backend``) -> a loader of (spec, runtime); ``register`` adds one.
LOADERS: dict[str, Callable[[EmbeddingSpec, str], Embedder]] = {}


def register(backend: str):
    """Register the decorated ``loader(spec, runtime) -> Embedder`` for specs of ``backend``."""
    def add(loader):
        LOADERS[backend] = loader
        return loader
    return add


def load_embedder(model: str | EmbeddingSpec | None = None, *, runtime: str | None = None):
    """One loaded model per process and spec: a library user or a test pays the load once."""
    spec = model if isinstance(model, EmbeddingSpec) else parse_model(model)
    if spec.backend == "use":  # one runtime: KBTOOL_RUNTIME does not apply
        return _load(spec, "numpy")
    return _load(spec, runtime or runtime_choice())


@lru_cache(maxsize=4)
def _load(spec: EmbeddingSpec, runtime: str):
    return LOADERS[spec.backend](spec, runtime)


@register("http")
def _http(spec: EmbeddingSpec, runtime: str):
    from .http import HttpEmbedder

    return HttpEmbedder(spec)


@register("use")
def _use(spec: EmbeddingSpec, runtime: str):
    from .use import UseEmbedder

    return UseEmbedder(spec)


@register("local")
def _local(spec: EmbeddingSpec, runtime: str):
    """A sentence-transformers model: ONNX Runtime from a verified export, else torch."""
    if runtime == "torch":
        return SentenceTransformerEmbedder(spec)
    from .onnx import OnnxEmbedder, ensure_export

    path = resolve_model_path(spec.model)
    try:
        onnx_path, meta = ensure_export(path)
    except OSError as exc:  # e.g. a read-only cache folder
        if runtime == "onnx":
            raise ModelError(f"could not export {spec.model} to ONNX ({exc}): set KBTOOL_CACHE_DIR to a writable folder") from exc
        log.warning("ONNX export of %s failed (%s); using torch", spec.model, exc)
        return SentenceTransformerEmbedder(spec)
    if onnx_path is None:
        if runtime == "onnx":
            raise ModelError(f"the ONNX export of {spec.model} does not reproduce its vectors "
                             f"(cosine {meta.get('min_cosine')}): use KBTOOL_RUNTIME=torch")
        return SentenceTransformerEmbedder(spec)
    return OnnxEmbedder(spec, onnx_path, meta)


def load_tokenizer(model: str | EmbeddingSpec | None = None):
    """The model's word-piece tokenizer without torch (no padding, no truncation): for counting
    and truncating questions and sizing context blocks. An endpoint without a ``--tokenizer``
    gets a conservative estimate (``ApproxTokenizer``); use-m its SentencePiece model behind the
    same interface (``UseTokenizerAdapter``)."""
    spec = model if isinstance(model, EmbeddingSpec) else parse_model(model)
    return _tokenizer(spec.model, spec.tokenizer)


@lru_cache(maxsize=4)
def _tokenizer(model: str, tokenizer: str | None):
    if tokenizer:
        if Path(tokenizer).is_file():
            return load_tokenizer_file(tokenizer)
        log.warning("the store's tokenizer %s is gone: counting tokens by estimate", tokenizer)
        return ApproxTokenizer()
    if model.startswith("openai:"):
        return ApproxTokenizer()
    if model == USE_MODEL:
        from .use import UseTokenizerAdapter

        return UseTokenizerAdapter()
    file = resolve_model_path(model) / "tokenizer.json"
    if not file.exists():
        raise ModelError(f"{file.parent} has no tokenizer.json: it is not a sentence-transformers model folder")
    return load_tokenizer_file(file)
