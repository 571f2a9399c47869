"""Typed stage settings with ranges: each stage declares what each of its numeric settings must be, and the
stage's constructor converts and checks its values through these declarations, so that a wrong type or an
out-of-range value is refused in our wording, naming ``stage.setting``, before any utterance is read.

Settings whose valid range depends on the system's sample rate (a window in samples, a frequency below
Nyquist) are checked by the stage's :meth:`~voxanon.pipeline.systems.stage.Stage.check_sample_rate`, which
:func:`voxanon.pipeline.systems.recipes.build_system` calls with the system's rate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


class SettingError(ValueError):
    """A stage setting of the wrong type or out of its range (``build_system`` names the system with it)."""


def _bound(value: float, inclusive: bool, side: str) -> str:
    if side == "low":
        return f"{'[' if inclusive else '('}{value:g}"
    return f"{value:g}{']' if inclusive else ')'}"


@dataclass(frozen=True)
class Number:
    """A finite number (an integer if ``integer``) between ``low`` and ``high``, each bound included or not."""

    low: float = -math.inf
    high: float = math.inf
    low_inclusive: bool = True
    high_inclusive: bool = True
    integer: bool = False
    unit: str = ""

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        unit = f" {self.unit}" if self.unit else ""
        if self.low == -math.inf and self.high == math.inf:
            return kind + unit
        if self.high == math.inf:
            return f"{kind}{unit} {'>=' if self.low_inclusive else '>'} {self.low:g}"
        return (f"{kind}{unit} in {_bound(self.low, self.low_inclusive, 'low')}, "
                f"{_bound(self.high, self.high_inclusive, 'high')}")

    def accepts(self, value) -> bool:
        value = _as_number(value)
        if value is None or not math.isfinite(value):
            return False
        if self.integer and int(value) != value:
            return False
        above = value >= self.low if self.low_inclusive else value > self.low
        below = value <= self.high if self.high_inclusive else value < self.high
        return above and below

    def convert(self, value):
        value = _as_number(value)
        return int(value) if self.integer else float(value)


def _as_number(value) -> int | float | None:
    """``value`` as a number, or None. YAML 1.1 reads ``1e-3`` (no dot) as a string: such a string is taken too."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


@dataclass(frozen=True)
class Interval:
    """A list ``[low, high]`` of two numbers, each as ``bound`` says, with ``low <= high``."""

    bound: Number

    def describe(self) -> str:
        return f"a list [low, high] of two numbers with low <= high, each {self.bound.describe()}"

    def accepts(self, value) -> bool:
        return (isinstance(value, (list, tuple)) and len(value) == 2 and all(map(self.bound.accepts, value))
                and value[0] <= value[1])

    def convert(self, value) -> tuple:
        return tuple(self.bound.convert(v) for v in value)


@dataclass(frozen=True)
class Choice:
    """One of ``options`` (strings)."""

    options: tuple[str, ...]

    def describe(self) -> str:
        return "one of " + ", ".join(self.options)

    def accepts(self, value) -> bool:
        return isinstance(value, str) and value in self.options

    def convert(self, value) -> str:
        return value


def checked(stage: str, declared: dict, values: dict, why: dict[str, str] | None = None) -> dict:
    """``values`` converted by their ``declared`` types, or :class:`SettingError` naming ``stage.setting`` with what
    it must be (and ``why``, for a setting whose range has a reason worth telling) and the value given."""
    converted = {}
    for key, value in values.items():
        rule = declared[key]
        if not rule.accepts(value):
            reason = f" ({why[key]})" if why and key in why else ""
            raise SettingError(f"{stage}.{key} must be {rule.describe()}{reason}, got {value!r}")
        converted[key] = rule.convert(value)
    return converted
