"""Signal-processing stages: transforms that need no model weights."""
from __future__ import annotations

from ...models.dsp.mcadams import frame_setting_problem, mcadams
from ..stage_settings import Choice, Interval, Number, SettingError, checked
from .stage import SEED_LEVELS, Stage, Utterance

_ALPHA = Number(0.0, 1.0, low_inclusive=False)


class McAdamsStage(Stage):
    """McAdams coefficient anonymisation (B2 with a fixed alpha, B2r with a drawn one)."""

    name = "mcadams"
    bytes_per_sample = 23.0  # 22.3 measured (benchmarks/stage_memory.py, 20 and 80 s at 16 kHz), in blocks of frames
    SETTINGS = {
        "alpha": _ALPHA,
        "randomise": Choice(("none",) + SEED_LEVELS),
        "alpha_range": Interval(_ALPHA),
        "lp_order": Number(1, 100, integer=True),
        "win_ms": Number(0.0, 1000.0, low_inclusive=False, unit="(ms)"),
        "shift_ms": Number(0.0, 1000.0, low_inclusive=False, unit="(ms)"),
    }
    WHY = {
        # Above 1, a pole's angle raised to alpha passes the Nyquist frequency (pi ** alpha > pi) and folds back.
        "alpha": "above 1 the warped poles pass the Nyquist frequency",
        # The batched root finding holds an order x order companion matrix per frame.
        "lp_order": "speech needs about the sample rate in kHz plus 2 to 4; the pole finding holds order^2 values per frame",
    }
    MAX_OVERLAP = 10
    """Frames per sample (win_ms / shift_ms) at most: the chain holds every frame of a block of frames at once."""

    def __init__(self, alpha: float = 0.8, randomise: str = "none",
                 alpha_range: tuple[float, float] | list[float] = (0.7, 0.9),
                 lp_order: int = 20, win_ms: float = 20.0, shift_ms: float = 10.0):
        values = checked(self.name, self.SETTINGS, dict(alpha=alpha, randomise=randomise, alpha_range=alpha_range,
                                                       lp_order=lp_order, win_ms=win_ms, shift_ms=shift_ms),
                         self.WHY)
        if not values["shift_ms"] <= values["win_ms"] <= self.MAX_OVERLAP * values["shift_ms"]:
            raise SettingError(f"mcadams.win_ms and shift_ms must satisfy shift_ms <= win_ms <= "
                               f"{self.MAX_OVERLAP} x shift_ms (frames overlap-add; each sample is in win/shift "
                               f"frames), got win_ms={win_ms}, shift_ms={shift_ms}")
        self.alpha = values["alpha"]
        self.randomise = values["randomise"]
        self.alpha_range = values["alpha_range"]
        self.lp_order = values["lp_order"]
        self.win_ms = values["win_ms"]
        self.shift_ms = values["shift_ms"]

    def check_sample_rate(self, sample_rate: int) -> None:
        problem = frame_setting_problem(sample_rate, self.lp_order, self.win_ms, self.shift_ms)
        if problem is not None:
            setting, what = problem
            raise SettingError(f"mcadams.{setting}={getattr(self, setting):g} {what}")

    def process(self, utt: Utterance) -> None:
        alpha = self.alpha if self.randomise == "none" else float(utt.rng(self.randomise).uniform(*self.alpha_range))
        utt.record["mcadams_alpha"] = alpha
        utt.audio = mcadams(utt.audio, utt.sample_rate, alpha, lp_order=self.lp_order,
                            win_ms=self.win_ms, shift_ms=self.shift_ms)
