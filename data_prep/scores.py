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
    :class:`ScoreFileError` naming the line numbers.

    Lines end with ``\\n``; fields are separated by ASCII whitespace; blank lines are
    skipped. Field counting and number parsing are vectorised, so 10^6 lines take
    about a second.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ScoreFileError(str(path), [f"cannot read: {error.strerror or error}"]) from None
    fields = _fields_per_line(data)
    malformed = np.flatnonzero((fields != 3) & (fields != 0))
    if malformed.size:
        lines = data.split(b"\n")
        raise ScoreFileError(str(path), [
            f"line {k + 1}: expected '<id> <id> <score>', got {lines[k].decode('utf-8', 'replace').strip()!r}"
            for k in malformed[:MAX_REPORTED]] + _more(malformed.size, "malformed lines"))
    tokens = data.split()
    try:
        first = [token.decode("utf-8") for token in tokens[0::3]]
        second = [token.decode("utf-8") for token in tokens[1::3]]
    except UnicodeDecodeError as error:
        raise ScoreFileError(str(path), [f"not UTF-8 text ({error.reason})"]) from None
    values = tokens[2::3]
    try:
        scores = np.array(values, dtype=np.bytes_).astype(np.float64)
    except ValueError:
        scores = np.array([_float_or_nan(value) for value in values], dtype=np.float64)
    if not np.all(np.isfinite(scores)):
        line_numbers = np.flatnonzero(fields) + 1
        bad = np.flatnonzero(~np.isfinite(scores))
        raise ScoreFileError(str(path), [
            f"line {line_numbers[k]}: score {values[k].decode('utf-8', 'replace')!r} is not a finite number"
            for k in bad[:MAX_REPORTED]] + _more(bad.size, "scores are not finite numbers"))
    if len(set(zip(first, second))) != len(first):
        line_numbers = np.flatnonzero(fields) + 1
        seen: dict[tuple[str, str], int] = {}
        problems = []
        for number, key in zip(line_numbers.tolist(), zip(first, second)):
            if key in seen:
                problems.append(f"line {number}: pair {key[0]} {key[1]} already scored on line {seen[key]}")
            else:
                seen[key] = number
        raise ScoreFileError(str(path), problems[:MAX_REPORTED] + _more(len(problems), "repeated pairs"))
    return ScoreTable(first, second, scores)


_ASCII_WHITESPACE = np.zeros(256, dtype=bool)
_ASCII_WHITESPACE[list(b" \t\n\r\x0b\x0c")] = True


def _fields_per_line(data: bytes) -> np.ndarray:
    """Number of whitespace-separated fields on each ``\\n``-terminated line."""
    buffer = np.frombuffer(data, dtype=np.uint8)
    space = _ASCII_WHITESPACE[buffer]
    field_starts = np.flatnonzero(~space & np.concatenate(([True], space[:-1])))
    newlines = np.flatnonzero(buffer == ord("\n"))
    return np.bincount(np.searchsorted(newlines, field_starts), minlength=newlines.size + 1)


def _more(count: int, what: str) -> list[str]:
    return [f"... {count} {what} in all"] if count > MAX_REPORTED else []


def _float_or_nan(value: bytes) -> float:
    try:
        return float(value)
    except ValueError:
        return math.nan


def format_scores(table: ScoreTable) -> str:
    """File text in table order; ``repr`` keeps every float64 exactly."""
    return "".join(f"{a} {b} {score!r}\n" for a, b, score in zip(table.first, table.second, table.scores.tolist()))


def write_scores(path: str | os.PathLike, table: ScoreTable) -> None:
    atomic_write_text(path, format_scores(table))
