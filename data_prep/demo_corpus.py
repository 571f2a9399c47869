"""Where the bundled demo corpus lives (made by ``data_prep/demo/make_demo.py``)."""
from __future__ import annotations

from pathlib import Path

from .errors import VoxanonError


def demo_corpus_dir() -> Path:
    path = Path(__file__).parent / "demo" / "corpus"
    if not (path / "wav.scp").is_file():
        raise VoxanonError(f"the demo corpus is missing from {path}; reinstall voxanon or remake it "
                           "with data_prep/demo/make_demo.py")
    return path
