"""Small synthetic corpora in the real on-disk formats: glottal-pulse vowels and a Kaldi data directory of them."""
from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import scipy.signal
import soundfile

from voxanon.data_prep.corpus import DataDir, Trial, write_data_dir


SAMPLE_RATE = 16000


def synthetic_vowel(f0: float, formants: list[tuple[float, float]], seconds: float,
                    sample_rate: int = SAMPLE_RATE, seed: int = 0) -> np.ndarray:
    """A glottal pulse train through second-order formant resonators, with a little noise and vibrato."""
    rng = np.random.default_rng(seed)
    n = int(seconds * sample_rate)
    t = np.arange(n) / sample_rate
    phase = np.cumsum(f0 * (1 + 0.02 * np.sin(2 * np.pi * 5 * t)) / sample_rate)
    source = np.diff(np.floor(phase), prepend=0.0)
    source = scipy.signal.lfilter([1.0], [1.0, -0.95], source)
    signal = source
    for frequency, bandwidth in formants:
        radius = np.exp(-np.pi * bandwidth / sample_rate)
        theta = 2 * np.pi * frequency / sample_rate
        signal = scipy.signal.lfilter([1 - radius], [1, -2 * radius * np.cos(theta), radius ** 2], signal)
    signal = signal / np.max(np.abs(signal)) * 0.5 + 0.002 * rng.standard_normal(n)
    return signal.astype(np.float32)


def make_corpus(root: Path, n_speakers: int = 4, n_utts: int = 3, seconds: float = 1.0,
                name: str = "toy") -> DataDir:
    """A Kaldi data dir of synthetic vowels: alternating f/m speakers, enrolls and same-sex trials."""
    data_dir = root / name
    audio_dir = root / f"{name}_audio"
    audio_dir.mkdir(parents=True, exist_ok=True)
    wav, utt2spk, text, spk2gender = {}, {}, {}, {}
    for s in range(n_speakers):
        speaker = f"spk{s}"
        gender = "f" if s % 2 == 0 else "m"
        spk2gender[speaker] = gender
        for u in range(n_utts):
            utt = f"{speaker}-{u:03d}"
            f0 = (200.0 if gender == "f" else 110.0) + 7 * u
            formants = [(500 + 40 * s, 80), (1500 + 60 * u, 120), (2500, 160), (3500, 200)]
            samples = synthetic_vowel(f0, formants, seconds + 0.1 * u, seed=100 * s + u)
            path = audio_dir / f"{utt}.wav"
            soundfile.write(path, samples, SAMPLE_RATE, subtype="PCM_16")
            wav[utt] = str(path)
            utt2spk[utt] = speaker
            text[utt] = f"HELLO NUMBER {u}"
    enrolls = [f"spk{s}-000" for s in range(n_speakers)]
    trials = [Trial(f"spk{e}", utt, utt2spk[utt] == f"spk{e}")
              for utt in sorted(wav) if utt not in enrolls
              for e in range(n_speakers) if spk2gender[f"spk{e}"] == spk2gender[utt2spk[utt]]]
    data = DataDir(name=name, wav=wav, utt2spk=utt2spk, spk2gender=spk2gender, text=text,
                   utt2dur={u: soundfile.info(p).duration for u, p in wav.items()},
                   enrolls=enrolls, trials=trials, path=data_dir)
    write_data_dir(data, data_dir)
    return data


@contextlib.contextmanager
def single_torch_thread():
    """Tiny models run fastest on one thread, and the test machine's cores are shared (two threads
    waiting on each other ran tiny ECAPA training 10-15x slower)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
