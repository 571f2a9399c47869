"""Score files: three columns, ``<first-id> <second-id> <score>``, one comparison a line.

For verification trials the columns are ``<enrol-spk> <test-utt> <score>`` (VoicePrivacy
layout); for the exhaustive utterance-pair lists behind voice
similarity matrices they are ``<utt-a> <utt-b> <score>``. Each (first, second) pair may
appear once. Ids follow the corpus rules (:mod:`voxanon.data_prep.paths`: no ``/``, ``\\``,
control characters, ``.`` or ``..``). Scores must be finite numbers: a NaN or an infinity in a score file is
always a scoring failure upstream, so it is reported here with its line number.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .atomic import atomic_write_text
from .corpus import DataDirError
from .paths import id_message, id_problem, text_may_hold_refused_character

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


def read_scores(path: str | os.PathLike) -> ScoreTable:
    """Read a score file; malformed lines, refused ids, non-finite scores and repeated pairs raise
    :class:`ScoreFileError` naming the line numbers.

    Lines end with ``\\n``; blank lines are skipped. Built for size: 10^6 lines read
    in about a second.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.reason if isinstance(error, UnicodeDecodeError) else (error.strerror or error)
        raise ScoreFileError(str(path), [f"cannot read: {reason}"]) from None
    lines = text.split("\n")
    fields = np.fromiter(map(len, map(str.split, lines)), dtype=np.int64, count=len(lines))
    malformed = np.flatnonzero((fields != 3) & (fields != 0))
    if malformed.size:
        raise ScoreFileError(str(path), [f"line {k + 1}: expected '<id> <id> <score>', got {lines[k].strip()!r}"
                                         for k in malformed[:MAX_REPORTED]] + _more(malformed.size, "malformed lines"))
    line_numbers = np.flatnonzero(fields) + 1
    tokens = text.split()
    first, second, values = tokens[0::3], tokens[1::3], tokens[2::3]
    if (text_may_hold_refused_character(text)
            or "." in first or ".." in first or "." in second or ".." in second):
        refused = [f"line {line_numbers[k]}: {id_message('the', value, problem)}"
                   for k in range(len(first)) for value in (first[k], second[k])
                   for problem in [id_problem(value)] if problem is not None]
        if refused:
            raise ScoreFileError(str(path), refused[:MAX_REPORTED] + _more(len(refused), "refused ids"))
    try:
        scores = np.fromiter(map(float, values), dtype=np.float64, count=len(values))
    except ValueError:
        scores = np.fromiter(map(_float_or_nan, values), dtype=np.float64, count=len(values))
    bad = np.flatnonzero(~np.isfinite(scores))
    if bad.size:
        raise ScoreFileError(str(path), [f"line {line_numbers[k]}: score {values[k]!r} is not a finite number"
                                         for k in bad[:MAX_REPORTED]] + _more(bad.size, "scores are not finite"))
    repeated = repeated_pairs(first, second)
    if repeated:
        first_seen: dict[tuple[str, str], int] = {}
        for row in range(len(first)):
            first_seen.setdefault((first[row], second[row]), row)
        raise ScoreFileError(str(path), [
            f"line {line_numbers[k]}: pair {first[k]} {second[k]} already scored on line "
            f"{line_numbers[first_seen[first[k], second[k]]]}"
            for k in repeated[:MAX_REPORTED]] + _more(len(repeated), "repeated pairs"))
    return ScoreTable(first, second, scores)


def repeated_pairs(first: list[str], second: list[str]) -> list[int]:
    """Rows whose ``(first, second)`` pair already occurred on an earlier row, ascending.

    Compares 64-bit hashes first, so only rows with colliding hashes are looked at as
    strings: far cheaper than a set of 10^6 tuples.
    """
    hashes = np.fromiter(map(hash, zip(first, second)), dtype=np.int64, count=len(first))
    order = np.argsort(hashes, kind="stable")
    collisions = np.flatnonzero(hashes[order][1:] == hashes[order][:-1])
    if collisions.size == 0:
        return []
    seen: set[tuple[str, str]] = set()
    repeated = []
    for row in np.unique(np.concatenate((order[collisions], order[collisions + 1]))).tolist():
        key = (first[row], second[row])
        if key in seen:
            repeated.append(row)
        seen.add(key)
    return repeated


def _more(count: int, what: str) -> list[str]:
    return [f"... {count} {what} in all"] if count > MAX_REPORTED else []


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
