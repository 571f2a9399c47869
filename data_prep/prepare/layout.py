"""Shared helpers for reading distributed corpus folder layouts."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import VoxanonError
from ..paths import resolved


def corpus_base(root: str | os.PathLike, subsets: list[str], folder: str) -> Path:
    """The folder holding ``subsets``: ``root`` itself or ``root/<folder>``, resolved."""
    root = resolved(root, "--root")
    for base in (root, root / folder):
        if all((base / subset).is_dir() for subset in subsets):
            return base
    found = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    missing = [s for s in subsets if not (root / s).is_dir() and not (root / folder / s).is_dir()]
    raise VoxanonError(f"{root}: subset folder(s) {', '.join(missing)} not found (looked in {root} "
                       f"and {root / folder}); folders there: {', '.join(found) or 'none'}")


def subfolders(path: str | os.PathLike) -> list[tuple[str, str]]:
    """``(name, path)`` of the folders directly in ``path``, sorted by name."""
    with os.scandir(path) as entries:
        return sorted((e.name, e.path) for e in entries if e.is_dir())
