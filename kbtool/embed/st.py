"""sentence-transformers (torch) backend: the reference every other local runtime must reproduce.

torch and sentence-transformers are imported only when vectors are first needed (~5-9 s here).
"""

from __future__ import annotations

import json
import os
from functools import cached_property
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import ModelError
from .base import DEFAULT_MODEL, EmbeddingSpec, Progress, normalise, parse_model, resolve_model_path


def model_max_tokens(path: Path) -> int:
    """Word pieces the model sees, including [CLS] and [SEP]."""
    cfg = path / "sentence_bert_config.json"
    if cfg.exists():
        try:
            return int(json.loads(cfg.read_text()).get("max_seq_length", 256))
        except (ValueError, OSError):
            pass
    return 256


def load_sentence_transformer(path: Path, device: str = "cpu"):
    from .._env import setup_offline_env

    setup_offline_env()
    try:
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(max(1, os.cpu_count() or 1))
        return SentenceTransformer(str(path), device=device, local_files_only=True)
    except Exception as exc:
        raise ModelError(f"could not load embedding model from {path}: {exc}") from exc


class LocalEmbedderBase:
    """What the local runtimes share: token counting from tokenizer.json alone (no torch), batching."""

    spec: EmbeddingSpec
    path: Path

    @cached_property
    def tokenizer(self):
        from . import load_tokenizer

        return load_tokenizer(self.spec)

    @cached_property
    def max_tokens(self) -> int:
        return model_max_tokens(self.path)

    def count_tokens(self, text: str) -> int:
        # Chunking sizes the same pieces again and again (the splitter re-measures merged splits:
        # 56 % of the calls on 100k chunks were repeats): counts are kept, up to 50k texts.
        counts = self.__dict__.setdefault("_token_counts", {})
        n = counts.get(text)
        if n is None:
            n = len(self.tokenizer.encode(self.spec.passage_prefix + text, add_special_tokens=True).ids)
            if len(counts) >= 50_000:
                counts.clear()
            counts[text] = n
        return n

    # Batching shared by the local runtimes; each supplies _run_batch(texts) -> vectors.
    batch_size: int
    dim: int

    def _run_batch(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def _encode(self, texts: list[str], progress: Progress | None = None) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        # Sort by length so each batch pads little; restore order on the way out.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            out[idx] = self._run_batch([texts[i] for i in idx])
            if progress:
                progress(len(idx))
        return normalise(out)

    def embed(self, texts: Sequence[str], progress: Progress | None = None) -> np.ndarray:
        return self._encode([self.spec.passage_prefix + t for t in texts], progress)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode([self.spec.query_prefix + t for t in texts])


class SentenceTransformerEmbedder(LocalEmbedderBase):
    """A sentence-transformers model run by torch."""

    runtime = "torch"

    def __init__(self, model: str | EmbeddingSpec = DEFAULT_MODEL, batch_size: int = 16, device: str = "cpu"):
        self.spec = model if isinstance(model, EmbeddingSpec) else parse_model(model)
        self.model_id = self.spec.model
        self.path = resolve_model_path(self.model_id)
        self.batch_size = batch_size
        self.device = device

    @cached_property
    def dim(self) -> int:
        model = self._model
        get = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(get())

    @cached_property
    def _model(self):
        return load_sentence_transformer(self.path, self.device)

    def _run_batch(self, texts: list[str]) -> np.ndarray:
        return self._model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                  convert_to_numpy=True, show_progress_bar=False)
