"""YAAPT settings: pYAAPT's as SSL-SAS runs it, SA-toolkit's port's as B5/B6 run it, and the backends.

A leaf module (dataclasses only): the F0 extractors, their torch form and the systems' configuration all
read their settings here, so none of them imports another to learn a default.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

MIN_SAMPLES = 640
"""pYAAPT indexes past the end of its arrays below four frames (2 × 20 ms after padding)."""

PYAAPT_BACKENDS = ("fast", "pyaapt")
"""The backends that compute pYAAPT's own track (the SSL-SAS systems' F0)."""
BACKENDS = (*PYAAPT_BACKENDS, "sa-toolkit")
DEFAULT_BACKEND = "fast"


@dataclass(frozen=True)
class YaaptParams:
    """pYAAPT settings; the defaults are the SSL-SAS ones (``get_yaapt_f0``)."""

    frame_length_ms: float = 20.0
    frame_space_ms: float = 10.0
    tda_frame_length_ms: float = 25.0
    nccf_thresh1: float = 0.25
    f0_min_hz: float = 60.0
    f0_max_hz: float = 400.0

    def pad_samples(self, sample_rate: int) -> int:
        return int(self.frame_length_ms / 1000 * sample_rate) // 2

    def yaapt_kwargs(self) -> dict[str, float]:
        return {"frame_length": self.frame_length_ms, "frame_space": self.frame_space_ms,
                "tda_frame_length": self.tda_frame_length_ms, "nccf_thresh1": self.nccf_thresh1,
                "f0_min": self.f0_min_hz, "f0_max": self.f0_max_hz}


SSL_SAS_YAAPT = YaaptParams()


@dataclass(frozen=True)
class SaToolkitYaaptParams:
    """SA-toolkit's YAAPT port's parameters (:mod:`voxanon.models.f0.sa_yaapt`) (its ``kwargs`` names without units); the defaults are B5/B6's settings.

    Only ``frame_length_ms``, ``frame_space_ms``, ``tda_frame_length_ms`` and ``nccf_thresh1`` differ from
    YAAPT's defaults. :meth:`reference_kwargs` gives the dict the original's ``yaapt()`` takes.
    """

    frame_length_ms: float = 35.0
    frame_space_ms: float = 20.0
    tda_frame_length_ms: float = 25.0
    nccf_thresh1: float = 0.25
    f0_min: float = 60.0
    f0_max: float = 400.0
    fft_length: int = 8192
    bp_low: float = 50.0
    bp_high: float = 1500.0
    nlfer_thresh1: float = 0.75
    nlfer_thresh2: float = 0.1
    shc_numharms: int = 3
    shc_window: float = 40.0
    shc_maxpeaks: int = 4
    shc_pwidth: float = 50.0
    shc_thresh1: float = 5.0
    shc_thresh2: float = 1.25
    f0_double: float = 150.0
    f0_half: float = 150.0
    dp5_k1: float = 11.0
    nccf_thresh2: float = 0.9
    nccf_maxcands: int = 3
    nccf_pwidth: int = 5
    merit_boost: float = 0.20
    merit_pivot: float = 0.99
    merit_extra: float = 0.4
    median_value: int = 7
    dp_w1: float = 0.15
    dp_w2: float = 0.5
    dp_w3: float = 0.1
    dp_w4: float = 0.9
    spec_pitch_min_std: float = 0.05

    def __post_init__(self) -> None:
        if not 0 < self.f0_min < self.f0_max:
            raise ValueError(f"need 0 < f0_min < f0_max, got {self.f0_min} and {self.f0_max}")
        if self.nccf_maxcands < 2 or self.shc_maxpeaks < 1 or self.median_value < 1 or self.shc_numharms < 0:
            raise ValueError("need nccf_maxcands >= 2, shc_maxpeaks >= 1, median_value >= 1, shc_numharms >= 0")
        if min(self.frame_length_ms, self.frame_space_ms, self.tda_frame_length_ms, self.dp_w4) <= 0:
            raise ValueError("frame lengths, frame space and dp_w4 must be positive")

    def reference_kwargs(self, sample_rate: int = 16000) -> dict[str, float]:
        names = {"frame_length_ms": "frame_length", "frame_space_ms": "frame_space",
                 "tda_frame_length_ms": "tda_frame_length"}
        kwargs = {names.get(key, key): float(value) for key, value in asdict(self).items()}
        kwargs["sr"] = float(sample_rate)
        return kwargs


SA_TOOLKIT_B5_B6 = SaToolkitYaaptParams()


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"F0 backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    return backend


def backend_params(backend: str, f0_min_hz: float = 60.0, f0_max_hz: float = 400.0):
    """The parameters ``backend`` runs with: SSL-SAS's pYAAPT settings (:class:`YaaptParams`), or B5/B6's for
    ``sa-toolkit``; both with the given F0 range."""
    if check_backend(backend) == "sa-toolkit":
        return replace(SA_TOOLKIT_B5_B6, f0_min=float(f0_min_hz), f0_max=float(f0_max_hz))
    return YaaptParams(f0_min_hz=float(f0_min_hz), f0_max_hz=float(f0_max_hz))
