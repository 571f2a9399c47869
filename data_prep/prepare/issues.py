"""What preparing a corpus found wrong, grouped by kind, with every id concerned.

Nothing found here is dropped silently: by default each kind is logged as one warning
with its count and a few examples; in strict mode the whole list is raised instead.
"""
from __future__ import annotations

import logging
from collections import defaultdict

from ..corpus import DataDirError

log = logging.getLogger(__name__)

EXAMPLES_SHOWN = 5


def summarise(kind: str, items: list[str]) -> str:
    """``kind: count (e.g. a, b, ...)`` with the first few items in sorted order."""
    examples = ", ".join(sorted(items)[:EXAMPLES_SHOWN])
    more = ", ..." if len(items) > EXAMPLES_SHOWN else ""
    return f"{kind}: {len(items)} (e.g. {examples}{more})"


class PreparationIssues:
    """Problems of one preparation run; ``kind`` says what was found and what was done about it."""

    def __init__(self, where: str):
        self.where = where
        self._items: dict[str, list[str]] = defaultdict(list)

    def add(self, kind: str, item: str) -> None:
        self._items[kind].append(item)

    def extend(self, kind: str, items: list[str]) -> None:
        if items:
            self._items[kind].extend(items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def counts(self) -> dict[str, int]:
        return {kind: len(items) for kind, items in self._items.items()}

    def items(self, kind: str) -> list[str]:
        return list(self._items.get(kind, []))

    def summary(self) -> list[str]:
        """One line per kind: ``kind: count (e.g. a, b, ...)``."""
        return [summarise(kind, items) for kind, items in self._items.items()]

    def conclude(self, *, strict: bool) -> None:
        """Raise every problem in strict mode, else log one warning per kind."""
        if not self._items:
            return
        if strict:
            raise DataDirError(f"{self.where} (--strict)", self.summary())
        for line in self.summary():
            log.warning("%s: %s", self.where, line)
