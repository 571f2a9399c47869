"""IEMOCAP-like evaluation sets (utt2emo, spk2fold) of synthetic signals."""
from __future__ import annotations

import numpy as np

from tests.helpers.speechbrain_layouts import IEMOCAP_LABELS


def write_set(directory, utterances, scale: float):
    """A Kaldi IEMOCAP-like set: utt -> (speaker, emotion, signal index); utt2emo and spk2fold."""
    import soundfile

    from voxanon.data_prep.corpus import DataDir, format_mapping, write_data_dir

    (directory / "wav").mkdir(parents=True)
    for utt, (_, _, index) in utterances.items():
        soundfile.write(directory / "wav" / f"{utt}.wav", scale * SIGNALS[index % len(SIGNALS)][::1 + index // 4],
                        16000, subtype="FLOAT")
    data = DataDir(name=directory.name, wav={u: f"{directory}/wav/{u}.wav" for u in utterances},
                   utt2spk={u: s for u, (s, _, _) in utterances.items()},
                   passthrough={"utt2emo": format_mapping({u: e for u, (_, e, _) in utterances.items()}),
                                "spk2fold": format_mapping({s: s[4] for s, _, _ in utterances.values()})})
    write_data_dir(data, directory)
    return directory


UTTERANCES = {f"Ses0{fold}{sex}_u{i}": (f"Ses0{fold}{sex}", IEMOCAP_LABELS[(i + fold) % 4], i + 2 * fold)
              for fold in (1, 2) for sex in "FM" for i in range(3)}


RNG = np.random.default_rng(3)
SIGNALS = [(0.3 * np.sin(2 * np.pi * f * np.arange(n) / 16000) + 0.05 * RNG.standard_normal(n)).astype(np.float32)
           for f, n in ((180, 9000), (440, 16000), (900, 6400), (2500, 12000))]


