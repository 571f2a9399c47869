"""A voxanon stage of your own: each speaker's voice shifted by a random number of semitones."""
import numpy as np

import voxanon


class PitchShift(voxanon.Stage):
    name = "pitch_shift"   # its section in a recipe, and --set pitch_shift.KEY=VALUE

    def __init__(self, max_semitones: float = 4.0, device: str = "cpu"):
        if max_semitones <= 0:
            raise ValueError(f"max_semitones must be positive, got {max_semitones}")
        self.max_semitones = float(max_semitones)
        self.device = device   # cpu:0 runs it in the streaming executor's device process

    def process(self, utt: voxanon.Utterance) -> None:
        # One draw per speaker, the same in every run, resumed or not, with any number of workers.
        semitones = utt.rng("speaker").uniform(-self.max_semitones, self.max_semitones)
        # Resampled by the frequency ratio: pitch and formants move together (and the tempo with them).
        positions = np.arange(0, len(utt.audio) - 1, 2 ** (semitones / 12))
        utt.audio = np.interp(positions, np.arange(len(utt.audio)), utt.audio).astype(np.float32)
        utt.record["semitones"] = round(float(semitones), 3)   # kept in the run's journal
