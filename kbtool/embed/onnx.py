"""ONNX Runtime backend: the store's own sentence-transformers model, exported once, verified, cached.

The first use of a model on a machine exports it with ``torch.onnx.export`` (the whole
sentence-transformers forward: transformer, pooling, any dense/normalise modules) and checks
that ONNX Runtime reproduces sentence-transformers' vectors on a fixed sample (cosine >= 0.99999
for every text, in a batch and one by one). A graph that fails the check is refused and torch is
used instead. After that, a process needs only onnxruntime + tokenizers: ~0.3 s to start and
a few ms per question, against ~5-9 s to import torch.

Cache: ``$KBTOOL_CACHE_DIR/onnx/<fingerprint of the model folder's files>/``
(model.onnx + meta.json); a changed model file gives a new fingerprint and a new export.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import warnings
from functools import cached_property
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import ModelError
from .base import EmbeddingSpec, file_fingerprint, normalise, resolve_model_path
from .st import LocalEmbedderBase, load_sentence_transformer, model_max_tokens

log = logging.getLogger("kbtool")

EXPORT_VERSION = 1
MIN_COSINE = 0.99999
# Measured on Cranfield chunk texts (2 cores): ONNX Runtime ~42 chunks/s at batch 8, torch ~45 at
# batch 16. torch costs 5-9 s to import, so it pays only for big runs: from this many texts.
TORCH_FROM = 3000
OPSET = 17
# Short and long, several scripts, punctuation, identifiers, one text past the 256-piece limit.
VERIFY_TEXTS = [
    "hello",
    "What causes error TW-E5120 and how do I fix it?",
    "Refunds are issued within 14 days; in the EU the window is 30 days (see policy v2.3).",
    "出现同步冲突时，我的修改会丢失吗？",
    "Die Synchronisierung schlägt fehl, wenn der Speicherplatz voll ist.",
    "def retry(n=3):\n    return backoff(2 ** n)  # seconds",
    " ".join(f"word{i} alpha beta gamma" for i in range(120)),
    "a",
]


def onnx_dir(model_path: Path) -> Path:
    from .._env import cache_dir

    return Path(cache_dir()) / "onnx" / f"{file_fingerprint(model_path)}-v{EXPORT_VERSION}"


def read_meta(folder: Path) -> dict | None:
    try:
        return json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError):
        return None


def ensure_export(model_path: Path, st_model=None) -> tuple[Path | None, dict]:
    """The verified ONNX graph of a model folder (exporting it on first use), or (None, meta) when
    the export was refused. Safe against concurrent processes (file lock, atomic rename)."""
    folder = onnx_dir(model_path)
    meta = read_meta(folder)
    if meta is None:
        from filelock import FileLock

        folder.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(folder) + ".lock"):
            meta = read_meta(folder)
            if meta is None:
                meta = _export_into(folder, model_path, st_model)
    if meta.get("ok") and not (folder / "model.onnx").is_file():
        # A verified export whose graph was deleted (a cache clean-up): export again.
        from filelock import FileLock

        with FileLock(str(folder) + ".lock"):
            if not (folder / "model.onnx").is_file():
                shutil.rmtree(folder, ignore_errors=True)
                meta = _export_into(folder, model_path, st_model)
    if meta.get("ok") and (folder / "model.onnx").is_file():
        return folder / "model.onnx", meta
    return None, meta


def _export_into(folder: Path, model_path: Path, st_model=None) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=folder.parent))
    try:
        model = st_model if st_model is not None else load_sentence_transformer(model_path)
        inputs = export_graph(model, tmp / "model.onnx")
        runner = OnnxRunner(tmp / "model.onnx", model_path, inputs)
        min_cos = verify(runner, model)
        import torch

        meta = {"ok": min_cos >= MIN_COSINE, "min_cosine": min_cos, "threshold": MIN_COSINE,
                "inputs": inputs, "dim": int(runner.run(["x"]).shape[1]), "source": str(model_path),
                "torch": torch.__version__, "export_version": EXPORT_VERSION}
        if not meta["ok"]:
            (tmp / "model.onnx").unlink()
            log.warning("ONNX export of %s refused: cosine to sentence-transformers %.6f < %s; using torch",
                        model_path, min_cos, MIN_COSINE)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; a shared cache serves every user
        if not folder.exists():
            os.replace(tmp, folder)  # atomic: readers see no folder or a whole one
        return read_meta(folder) or meta
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def export_graph(model, out: Path) -> list[str]:
    """``torch.onnx.export`` of a sentence-transformers model's whole forward; returns input names."""
    import torch

    names = [n for n in model.tokenizer.model_input_names if n in ("input_ids", "attention_mask", "token_type_ids")]

    class Forward(torch.nn.Module):
        def __init__(self, st):
            super().__init__()
            self.st = st

        def forward(self, *tensors):
            return self.st(dict(zip(names, tensors)))["sentence_embedding"]

    sample = model.tokenizer(["a short text", "and a somewhat longer one, to pad the first"], padding=True,
                             return_tensors="pt")
    args = tuple(sample[n] for n in names)
    axes = {n: {0: "batch", 1: "tokens"} for n in names} | {"sentence_embedding": {0: "batch"}}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(Forward(model).eval(), args, str(out), input_names=names,
                          output_names=["sentence_embedding"], dynamic_axes=axes, opset_version=OPSET,
                          dynamo=False)
    return names


def verify(runner: "OnnxRunner", model) -> float:
    """Smallest cosine between ONNX and sentence-transformers vectors over the sample, computed in
    one batch (padding) and one text at a time."""
    ref = normalise(model.encode(VERIFY_TEXTS, normalize_embeddings=True, convert_to_numpy=True,
                                 show_progress_bar=False))
    batch = normalise(runner.run(VERIFY_TEXTS))
    single = normalise(np.vstack([runner.run([t]) for t in VERIFY_TEXTS]))
    return float(min((ref * batch).sum(1).min(), (ref * single).sum(1).min()))


class OnnxRunner:
    """A loaded graph + the model's tokenizer, truncating and padding like sentence-transformers."""

    def __init__(self, onnx_path: Path, model_path: Path, inputs: Sequence[str]):
        from .._env import setup_offline_env

        setup_offline_env()
        import onnxruntime as ort

        from .base import load_tokenizer_file

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = max(1, os.cpu_count() or 1)
        opts.log_severity_level = 3
        try:
            self.session = _session(ort, Path(onnx_path), opts)
        except Exception as exc:
            raise ModelError(f"could not load the ONNX export {onnx_path} ({exc}): delete that folder to re-export") from exc
        self.inputs = list(inputs)
        self.tok = load_tokenizer_file(model_path / "tokenizer.json")
        self.tok.enable_truncation(model_max_tokens(model_path))
        pad_id = self.tok.token_to_id("[PAD]") if self.tok.token_to_id("[PAD]") is not None else self.tok.token_to_id("<pad>")
        self.tok.enable_padding(pad_id=pad_id or 0)
        self.lower = _lowercases(model_path)

    def run(self, texts: Sequence[str]) -> np.ndarray:
        enc = self.tok.encode_batch([t.lower() if self.lower else t for t in texts])
        feed = {
            "input_ids": np.array([e.ids for e in enc], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in enc], dtype=np.int64),
        }
        return self.session.run(None, {n: feed[n] for n in self.inputs})[0]


def _session(ort, onnx_path: Path, opts):
    """An inference session of the export. ONNX Runtime optimises the graph (fusions, layouts) each
    time it loads one, ~50 ms of a cold query's ~170 ms load: the first session on a machine saves
    its optimised graph beside the export (``model.opt-<runtime, CPU>.onnx``, written atomically),
    and later ones load that with optimisation off: the same graph, the same vectors bit for bit
    (tests). A saved graph that will not load, or a cache that cannot be written, costs only the
    optimisation."""
    providers = ["CPUExecutionProvider"]
    saved = onnx_path.with_name(f"model.opt-{_machine_stamp(ort)}.onnx")
    if saved.is_file():
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            return ort.InferenceSession(str(saved), opts, providers=providers)
        except Exception:  # noqa: BLE001 - damaged or foreign: optimise the export again
            log.debug("the optimised graph %s did not load; optimising %s again", saved, onnx_path)
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    tmp = saved.with_name(f".{saved.name}.{os.getpid()}.tmp")
    save = ort.SessionOptions()
    save.log_severity_level, save.intra_op_num_threads = opts.log_severity_level, opts.intra_op_num_threads
    save.optimized_model_filepath = str(tmp)
    try:
        session = ort.InferenceSession(str(onnx_path), save, providers=providers)
        os.replace(tmp, saved)
        return session
    except Exception:  # noqa: BLE001 - a read-only cache: load without saving
        tmp.unlink(missing_ok=True)
    return ort.InferenceSession(str(onnx_path), opts, providers=providers)


def _machine_stamp(ort) -> str:
    """ONNX Runtime's version and this CPU (architecture, instruction-set flags): what an optimised
    graph may depend on (its layout transformations are chosen for the CPU)."""
    import hashlib
    import platform

    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            flags = next((line for line in fh if line.startswith(("flags", "Features"))), "")
    except OSError:
        flags = platform.processor()
    digest = hashlib.sha1(f"{platform.machine()} {flags}".encode()).hexdigest()[:10]
    return f"{ort.__version__}-{digest}"


def _lowercases(model_path: Path) -> bool:
    try:
        return bool(json.loads((model_path / "sentence_bert_config.json").read_text()).get("do_lower_case"))
    except (OSError, ValueError):
        return False


class OnnxEmbedder(LocalEmbedderBase):
    """The model run by ONNX Runtime from its verified export."""

    runtime = "onnx"

    def __init__(self, spec: EmbeddingSpec, onnx_path: Path, meta: dict, batch_size: int = 8):
        self.spec = spec
        self.model_id = spec.model
        self.path = resolve_model_path(spec.model)
        self.onnx_path = onnx_path
        self.meta = meta
        self.batch_size = batch_size

    @cached_property
    def _runner(self) -> OnnxRunner:
        return OnnxRunner(self.onnx_path, self.path, self.meta["inputs"])

    @property
    def dim(self) -> int:
        return int(self.meta["dim"])

    def _run_batch(self, texts: list[str]) -> np.ndarray:
        return self._runner.run(texts)

    def for_bulk(self, n: int):
        """The embedder for ``n`` passages: torch for big runs (faster per text, verified to give
        the same vectors), unless KBTOOL_RUNTIME pins ONNX."""
        from . import load_embedder
        from .base import runtime_choice

        if n >= TORCH_FROM and runtime_choice() == "auto":
            return load_embedder(self.spec, runtime="torch")
        return self
