"""Where the service keeps its state and finds its model unless configured (XDG folders)."""

from __future__ import annotations

import os
from pathlib import Path


def _xdg(var: str, fallback: str) -> Path:
    return Path(os.environ.get(var) or Path.home() / fallback)


def default_data_dir() -> Path:
    """Where embedded state (Qdrant folder, SQLite database) lives unless configured."""
    return _xdg("XDG_DATA_HOME", ".local/share") / "ragagent"


def default_model_dir() -> Path:
    """Where `make setup` provisions the default embedding model."""
    return _xdg("XDG_CACHE_HOME", ".cache") / "ragagent" / "models" / "all-MiniLM-L6-v2-int8"
