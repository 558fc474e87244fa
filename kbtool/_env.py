"""Process-wide settings that keep heavy libraries offline and quiet.

Called before importing torch, transformers, chromadb or unstructured: each of them otherwise
tries the network (model hubs, telemetry, a spaCy model download) on these machines.
"""

import os

_DEFAULTS = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "DO_NOT_TRACK": "1",
    "UNSTRUCTURED_DISABLE_NOTICE": "1",
    "ANONYMIZED_TELEMETRY": "False",
    "ORT_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def setup_offline_env() -> None:
    for key, value in _DEFAULTS.items():
        os.environ.setdefault(key, value)


def cache_dir() -> str:
    """kbtool's own cache folder (jieba's dictionary cache lives here)."""
    base = os.environ.get("KBTOOL_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "kbtool"
    )
    os.makedirs(base, exist_ok=True)
    return base
