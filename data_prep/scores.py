"""Score files: three columns, ``<first-id> <second-id> <score>``, one comparison a line.

For verification trials the columns are ``<enrol-spk> <test-utt> <score>`` (VoicePrivacy
layout, anchors Part B §1.2); for the exhaustive utterance-pair lists behind voice
similarity matrices they are ``<utt-a> <utt-b> <score>``. Each (first, second) pair may
appear once. Scores must be finite numbers: a NaN or an infinity in a score file is
always a scoring failure upstream, so it is reported here with its line number.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voxanon.data_prep.atomic import atomic_write_text
from voxanon.data_prep.corpus import DataDirError

MAX_REPORTED = 20


class ScoreFileError(DataDirError):
    """A score file that cannot be read; lists every problem found (first few shown)."""


@dataclass(frozen=True)
class ScoreTable:
    """Scores of comparisons in file order. ``scores`` is float64, one entry per row."""

    first: list[str]
    second: list[str]
    scores: np.ndarray

    def __post_init__(self) -> None:
        if not len(self.first) == len(self.second) == len(self.scores):
            raise ValueError(f"ScoreTable columns differ in length: {len(self.first)}, "
                             f"{len(self.second)}, {len(self.scores)}")

    def __len__(self) -> int:
        return len(self.scores)

    def keys(self) -> list[tuple[str, str]]:
        return list(zip(self.first, self.second))


def read_scores(path: str | os.PathLike) -> ScoreTable:
    """Read a score file; malformed lines, non-finite scores and repeated pairs raise
    :class:`ScoreFileError` naming the line numbers."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ScoreFileError(str(path), [f"cannot read: {error.strerror or error}"]) from None
    numbered = [(number, line.split()) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    problems = [f"line {number}: expected '<id> <id> <score>', got {' '.join(fields)!r}"
                for number, fields in numbered if len(fields) != 3]
    if problems:
        raise ScoreFileError(str(path), problems)
    first = [fields[0] for _, fields in numbered]
    second = [fields[1] for _, fields in numbered]
    values = [fields[2] for _, fields in numbered]
    try:
        scores = np.array([float(value) for value in values], dtype=np.float64)
    except ValueError:
        scores = np.array([_float_or_nan(value) for value in values], dtype=np.float64)
    if not np.all(np.isfinite(scores)):
        for index in np.flatnonzero(~np.isfinite(scores))[:MAX_REPORTED]:
            number, fields = numbered[index]
            problems.append(f"line {number}: score {fields[2]!r} is not a finite number")
        bad = int(np.count_nonzero(~np.isfinite(scores)))
        if bad > MAX_REPORTED:
            problems.append(f"... {bad} scores in all are not finite numbers")
        raise ScoreFileError(str(path), problems)
    if len(set(zip(first, second))) != len(first):
        seen: dict[tuple[str, str], int] = {}
        for (number, _), key in zip(numbered, zip(first, second)):
            if key in seen:
                problems.append(f"line {number}: pair {key[0]} {key[1]} already scored on line {seen[key]}")
            else:
                seen[key] = number
        raise ScoreFileError(str(path), problems)
    return ScoreTable(first, second, scores)


def _float_or_nan(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        return math.nan


def format_scores(table: ScoreTable) -> str:
    """File text in table order; ``repr`` keeps every float64 exactly."""
    return "".join(f"{a} {b} {score!r}\n" for a, b, score in zip(table.first, table.second, table.scores.tolist()))


def write_scores(path: str | os.PathLike, table: ScoreTable) -> None:
    atomic_write_text(path, format_scores(table))
