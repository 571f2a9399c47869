"""Signal-processing stages: transforms that need no model weights."""
from __future__ import annotations

from ..models.dsp.mcadams import mcadams
from .stages import SEED_LEVELS, Stage, Utterance


class McAdamsStage(Stage):
    """McAdams coefficient anonymisation (B2 with a fixed alpha, B2r with a drawn one)."""

    name = "mcadams"

    def __init__(self, alpha: float = 0.8, randomise: str = "none",
                 alpha_range: tuple[float, float] | list[float] = (0.7, 0.9),
                 lp_order: int = 20, win_ms: float = 20.0, shift_ms: float = 10.0):
        if randomise not in ("none",) + SEED_LEVELS:
            raise ValueError(f"mcadams.randomise must be none, utterance or speaker, got {randomise!r}")
        low, high = (float(v) for v in alpha_range)
        if not 0.0 < low <= high <= 1.0:
            raise ValueError(f"mcadams.alpha_range must be [low, high] with 0 < low <= high <= 1, got {alpha_range}")
        # Above 1, a pole's angle raised to alpha passes the Nyquist frequency (pi ** alpha > pi) and folds back.
        if not 0.0 < float(alpha) <= 1.0:
            raise ValueError(f"mcadams.alpha must be in (0, 1] (above 1 the warped poles pass the Nyquist "
                             f"frequency), got {alpha}")
        if int(lp_order) != lp_order or lp_order < 1:
            raise ValueError(f"mcadams.lp_order must be a positive integer, got {lp_order}")
        if not 0.0 < float(shift_ms) <= float(win_ms):
            raise ValueError(f"mcadams.win_ms and shift_ms must satisfy 0 < shift_ms <= win_ms, got win_ms={win_ms}, "
                             f"shift_ms={shift_ms}")
        self.alpha = float(alpha)
        self.randomise = randomise
        self.alpha_range = (low, high)
        self.lp_order = int(lp_order)
        self.win_ms = float(win_ms)
        self.shift_ms = float(shift_ms)

    def process(self, utt: Utterance) -> None:
        alpha = self.alpha if self.randomise == "none" else float(utt.rng(self.randomise).uniform(*self.alpha_range))
        utt.record["mcadams_alpha"] = alpha
        utt.audio = mcadams(utt.audio, utt.sample_rate, alpha, lp_order=self.lp_order,
                            win_ms=self.win_ms, shift_ms=self.shift_ms)
