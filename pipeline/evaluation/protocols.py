"""Evaluation protocols: the recipes in recipes/protocols/, read with their overrides and checked."""
from __future__ import annotations

from ...data_prep.errors import VoxanonError
from ..systems.recipes import read_recipe


def load_protocol(name: str, overrides: list[str] = ()) -> dict:
    protocol = read_recipe("protocols", name, overrides)
    unknown = set(protocol) - {"name", "description", "asv", "similarity", "asr", "asr_decoding", "relative", "adversary_calibration", "pitch_correlation",
                                   "inversion_attack", "sex_attack", "weighted_averages"}
    if unknown:
        raise VoxanonError(f"protocol {protocol['name']!r}: unknown setting(s) {sorted(unknown)}")
    return protocol
