"""Content identity of files: sha256, read in blocks so large files need little memory."""
from __future__ import annotations

import hashlib
import os


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
