"""Deterministic pseudo-random order, stable across Python versions and platforms.

Items are sorted by the SHA-256 of (seed, context, item): the same seed always gives
the same choice, a different context (a speaker id, say) an independent one, and
adding or removing one item does not reshuffle the others. Python's ``hash()`` is
salted per process, and library generators may change their streams, so neither is used.
"""
from __future__ import annotations

import hashlib
from typing import Iterable


def seeded_order(items: Iterable[str], seed: str | int, context: str = "") -> list[str]:
    """``items`` in the order fixed by ``seed`` and ``context``."""
    prefix = f"{seed}\x1f{context}\x1f".encode("utf-8")
    return sorted(items, key=lambda item: hashlib.sha256(prefix + item.encode("utf-8")).digest())
