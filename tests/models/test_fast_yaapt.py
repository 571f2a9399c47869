"""The fast YAAPT (``models/f0/yaapt.py``, ``models/f0/yaapt_torch.py``) against pYAAPT with the SSL-SAS settings.

Parity on demo-corpus speech and on synthetic voices with octave jumps, creak, silence and clipping
(voicing decisions on >= 99.5 % of frames, F0 within 1 Hz on >= 99 % of the frames both call voiced);
pYAAPT's outcome for bad input; numpy's summation order in the compiled kernels; the torch version on
the CPU against the numpy one; the F0 stage's backend and device options, the cache and f0-targets.
"""
from __future__ import annotations

import json
from pathlib import Path

import numba
import numpy as np
import pytest

from tests.helpers.corpora import make_corpus
from tests.helpers.yaapt_parity import agreement, demo_speech, synthetic_speech
from voxanon.models.f0 import yaapt
from voxanon.models.f0.extract import F0Cache, yaapt_f0, yaapt_f0_batch
from voxanon.models.f0.params import MIN_SAMPLES, SSL_SAS_YAAPT, YaaptParams
from voxanon.pipeline.systems.stage import Utterance


def tracks(speech: dict[str, np.ndarray], backend: str) -> dict[str, np.ndarray]:
    return {name: yaapt_f0(audio, backend=backend) for name, audio in speech.items()}


def assert_parity(speech: dict[str, np.ndarray], frames_identical: float = 0.99):
    result = agreement(tracks(speech, "pyaapt"), tracks(speech, "fast"))
    assert result.voicing >= 0.995, result
    assert result.f0_within_1hz >= 0.99, result
    # Near bit for bit: only a tie in pYAAPT's dynamic programme, broken by the last bit, may differ.
    assert result.identical_frames >= frames_identical * result.frames, result
    return result


@pytest.fixture(scope="module")
def demo_subset() -> dict[str, np.ndarray]:
    return demo_speech(every=12)  # 16 utterances, about 40 s, 13 voices


def test_parity_on_demo_speech(demo_subset):
    assert_parity(demo_subset)


def test_parity_on_synthetic_voices():
    speech = synthetic_speech()
    result = assert_parity(speech)
    assert result.worst_voicing >= 0.99, result
    voiced = {name: np.mean(track > 0) for name, track in tracks(speech, "pyaapt").items()}
    assert min(voiced.values()) > 0.4, voiced  # every voice has voiced frames for the comparison to mean something


@pytest.mark.slow
def test_parity_on_the_whole_demo_corpus():
    assert_parity(demo_speech())


@pytest.mark.parametrize("case", ["nan_sample", "all_nan", "infinite_sample", "impulse", "dc", "noise",
                                  "shortest", "one_more", "short_vowel", "quiet"])
def test_bad_and_odd_input_as_pyaapt(case):
    rng = np.random.default_rng(7)
    t = np.arange(16000) / 16000
    vowel = (np.sign(np.sin(2 * np.pi * 140 * t)) * np.exp(-((t % (1 / 140)) * 900))).astype(np.float32) * 0.5
    audio = {"nan_sample": np.where(np.arange(16000) == 5000, np.nan, vowel),
             "all_nan": np.full(16000, np.nan, dtype=np.float32),
             "infinite_sample": np.where(np.arange(16000) == 3, np.inf, vowel),
             "impulse": np.where(np.arange(8000) == 4000, 1e-4, 0.0),
             "dc": np.full(8000, 0.1, dtype=np.float32),
             "noise": 0.3 * rng.standard_normal(9600),
             "shortest": 0.3 * rng.standard_normal(MIN_SAMPLES),
             "one_more": vowel[:MIN_SAMPLES + 1],
             "short_vowel": vowel[:1000],
             "quiet": vowel * 1e-6}[case]
    np.testing.assert_array_equal(yaapt_f0(audio, backend="fast"), yaapt_f0(audio, backend="pyaapt"))


def test_silence_and_short_input_like_pyaapt():
    assert not np.any(yaapt_f0(np.zeros(16000, dtype=np.float32), backend="fast"))
    for backend in ("fast", "pyaapt"):
        with pytest.raises(ValueError, match="too short"):
            yaapt_f0(np.ones(MIN_SAMPLES - 1, dtype=np.float32), backend=backend)
    with pytest.raises(ValueError, match="backend"):
        yaapt_f0(np.ones(16000, dtype=np.float32), backend="praat")


def test_parameters_pyaapt_cannot_hold_are_refused():
    with pytest.raises(ValueError, match="f0_min < f0_max"):
        yaapt.geometry_of(16000, YaaptParams(f0_min_hz=300.0, f0_max_hz=200.0))
    with pytest.raises(ValueError, match="spectrum covers"):
        yaapt.geometry_of(16000, YaaptParams(f0_max_hz=2500.0))


def test_compiled_sums_follow_numpys_pairwise_order():
    rng = np.random.default_rng(3)
    for n in list(range(1, 300)) + [400, 513, 1000, 2047, yaapt.PAIRWISE_MAX]:
        values = rng.standard_normal(n + 9) * np.exp(4 * rng.standard_normal(n + 9))
        assert yaapt._pairwise_sum(values, 5, n) == np.sum(values[5:5 + n]), n
        if n <= 500:
            out = np.empty(4)
            yaapt._sliding_pairwise_sums(values, 2, 4, n, out)
            assert np.array_equal(out, [np.sum(values[2 + r:2 + r + n]) for r in range(4)]), n


def test_kernels_are_cached_on_disk():
    kernels = [value for value in vars(yaapt).values() if isinstance(value, numba.core.registry.CPUDispatcher)]
    assert len(kernels) > 10
    assert all(type(kernel._cache).__name__ == "FunctionCache" for kernel in kernels)


def test_kernels_are_cached_in_the_users_cache_folder_unless_numba_cache_dir_is_set(tmp_path):
    import os
    import subprocess
    import sys

    probe = ("import numba; from voxanon.models.f0 import yaapt; "
             "print(numba.config.CACHE_DIR); print(yaapt._first_argmax._cache._cache_path)")
    environment = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    for extra, expected in (({"XDG_CACHE_HOME": str(tmp_path / "xdg")}, tmp_path / "xdg" / "voxanon" / "numba"),
                            ({"HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": ""},
                             tmp_path / "home" / ".cache" / "voxanon" / "numba"),
                            ({"NUMBA_CACHE_DIR": str(tmp_path / "mine")}, tmp_path / "mine")):
        run = subprocess.run([sys.executable, "-c", probe], env={**environment, **extra}, capture_output=True,
                             text=True, check=True)
        cache_dir, kernel_cache = run.stdout.split()
        assert Path(cache_dir) == expected and Path(kernel_cache).is_relative_to(expected), run.stdout


def test_warm_up_command_compiles_the_kernels(capsys):
    from voxanon.pipeline.cli import main

    assert main(["models", "warm-up"]) == 0
    assert "fast YAAPT kernels ready in" in capsys.readouterr().out


@pytest.mark.usefixtures("one_torch_thread")
def test_torch_version_on_the_cpu_agrees_with_numpy(demo_subset):
    import torch

    from voxanon.models.f0 import yaapt_torch

    voices = synthetic_speech()
    speech = dict(list(demo_subset.items())[:4] + [(name, voices[name]) for name in ("creak", "silences", "clipped")])
    signals = [np.pad(audio.astype(np.float64), (160, 160)) for audio in speech.values()]
    geo = yaapt.geometry_of(16000, SSL_SAS_YAAPT)
    taps = yaapt.bandpass_taps(16000.0)
    lengths = [len(s) for s in signals]
    host = np.zeros((len(signals), max(lengths)))
    for b, signal in enumerate(signals):
        host[b, :len(signal)] = signal
    valid = torch.arange(host.shape[1]) < torch.tensor(lengths)[:, None]
    x = torch.from_numpy(host)
    frames = np.array([geo.n_frames(n) for n in lengths])
    filtered = yaapt_torch._fir(x * x, taps, valid)
    energy = yaapt_torch._nlfer(yaapt_torch._fir(x, taps, valid), frames, geo).numpy()
    vuv = []
    for b, signal in enumerate(signals):
        expected, expected_vuv = yaapt.nlfer(yaapt.fir_filtered(signal, taps), geo)
        np.testing.assert_allclose(energy[b, :frames[b]], expected, rtol=1e-12)
        vuv.append(expected_vuv)
    rows = torch.tensor([(b, f) for b, voiced in enumerate(vuv) for f in np.flatnonzero(voiced)])
    shc = yaapt_torch._shc(filtered, rows, geo).numpy()
    for b, signal in enumerate(signals):
        expected = yaapt.shc_numpy(yaapt.fir_filtered(signal ** 2, taps), np.flatnonzero(vuv[b]), geo)
        np.testing.assert_allclose(shc[rows[:, 0].numpy() == b], expected, rtol=1e-9,
                                   atol=1e-12 * np.max(np.abs(expected), initial=0))
    batched = yaapt_torch.yaapt_samp_values_batch(signals, 16000, SSL_SAS_YAAPT, "cpu")
    single = [yaapt.yaapt_samp_values(signal, 16000, SSL_SAS_YAAPT) for signal in signals]
    result = agreement(dict(enumerate(single)), dict(enumerate(batched)))
    assert result.voicing >= 0.999 and result.identical_frames >= 0.99 * result.frames, result


@pytest.mark.usefixtures("one_torch_thread")
def test_torch_version_issues_a_few_hundred_torch_calls_whatever_the_batch_length(demo_subset):
    """A GPU is bound by launches here: the calls per batch must not grow with its length (the per-tap
    filter and per-sample NCCF loops issued about 2,700 for 10 s and 5,000 for 77 s)."""
    import collections

    from torch.utils._python_dispatch import TorchDispatchMode

    from voxanon.models.f0 import yaapt_torch

    class Counting(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.calls = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.calls[str(func)] += 1
            return func(*args, **(kwargs or {}))

    signals = [np.pad(audio.astype(np.float64), (160, 160)) for audio in demo_subset.values()]
    counts = {}
    for n in (2, len(signals)):
        with Counting() as counting:
            tracks = yaapt_torch.yaapt_samp_values_batch(signals[:n], 16000, SSL_SAS_YAAPT, "cpu")
        assert not any(isinstance(track, Exception) for track in tracks)
        counts[sum(len(s) for s in signals[:n]) / 16000] = sum(counting.calls.values())
    assert max(counts) > 30 and min(counts) < 10, counts
    assert max(counts.values()) <= 300, counts
    assert len(set(counts.values())) == 1, counts


@pytest.mark.usefixtures("one_torch_thread")
def test_a_batch_settles_each_bad_utterance_alone(demo_subset):
    good = list(demo_subset.values())[:2]
    nan = good[0].copy()
    nan[100] = np.nan
    audios = [good[0], np.zeros(3200, dtype=np.float32), nan, np.ones(100, dtype=np.float32), good[1]]
    results = yaapt_f0_batch(audios, 16000, SSL_SAS_YAAPT, "cpu")
    assert isinstance(results[3], ValueError) and "too short" in str(results[3])
    np.testing.assert_array_equal(results[1], np.zeros(20, dtype=np.float32))
    np.testing.assert_array_equal(results[2], yaapt_f0(nan, backend="pyaapt"))
    for index in (0, 4):
        expected = yaapt_f0(audios[index], backend="fast")
        assert results[index].dtype == np.float32 and results[index].shape == expected.shape
        assert np.mean((results[index] > 0) == (expected > 0)) >= 0.99


def utterances(audios: list[np.ndarray]) -> list[Utterance]:
    return [Utterance(f"u{i}", "s", None, audio, 16000, seeds={}) for i, audio in enumerate(audios)]


@pytest.mark.usefixtures("one_torch_thread")
def test_f0_stage_hands_whole_batches_to_the_device_version(demo_subset, monkeypatch, tmp_path):
    from voxanon.pipeline.systems import f0 as f0_module
    from voxanon.pipeline.systems.f0 import F0Stage

    stage = F0Stage(cache_dir=str(tmp_path / "f0"), device="cuda")
    assert stage.device == "cuda" and not stage.model_free
    assert F0Stage().model_free and F0Stage().backend == "fast"
    monkeypatch.setattr(f0_module, "resolve_device", lambda device: "cpu:0")  # the batch path, on the CPU
    calls = []
    original = f0_module.F0Stage.process
    monkeypatch.setattr(f0_module.F0Stage, "process", lambda self, utt: calls.append(utt) or original(self, utt))
    audios = list(demo_subset.values())[:3] + [np.zeros(3200, dtype=np.float32)]
    batch = utterances(audios)
    stage.process_batch(batch)
    assert not calls  # nothing went to the per-utterance CPU path
    for utt, audio in zip(batch, audios):
        expected = yaapt_f0(audio, backend="fast")
        assert np.mean((utt.features["f0"] > 0) == (expected > 0)) >= 0.99
    assert len(list((tmp_path / "f0").glob("*.npy"))) == 4
    again = utterances(audios)
    stage.process_batch(again)  # from the cache
    for first, second in zip(batch, again):
        np.testing.assert_array_equal(first.features["f0"], second.features["f0"])
    short = utterances([audios[0], np.ones(100, dtype=np.float32)])
    with pytest.raises(ValueError, match="too short"):
        stage.process_batch(short)
    assert "f0" in short[0].features


def test_f0_stage_options_are_checked():
    from voxanon.pipeline.systems.f0 import F0Stage

    with pytest.raises(ValueError, match="backend"):
        F0Stage(backend="crepe")
    with pytest.raises(ValueError, match="CPU only"):
        F0Stage(backend="pyaapt", device="cuda")
    with pytest.raises(ValueError, match="device"):
        F0Stage(device="tpu")


def test_f0_stage_backends_on_the_cpu(demo_subset):
    from voxanon.pipeline.systems.f0 import F0Stage

    audio = next(iter(demo_subset.values()))
    for backend in ("fast", "pyaapt"):
        [utt] = utterances([audio])
        F0Stage(backend=backend).process_batch([utt])
        np.testing.assert_array_equal(utt.features["f0"], yaapt_f0(audio, backend=backend))


def test_every_system_recipe_names_the_backend():
    from voxanon.pipeline.systems.f0 import F0Stage
    from voxanon.pipeline.systems.recipes import available_systems, load_system_config

    with_f0 = [name for name in available_systems() if "f0" in load_system_config(name).get("stages", [])]
    assert len(with_f0) >= 6
    for name in with_f0:
        section = load_system_config(name)["f0"]
        expected = "sa-toolkit" if name in ("b5", "b6") else "fast"    # B5/B6 were trained on SA-toolkit's port
        assert section["backend"] == expected and section["device"] == "cpu", name
        assert F0Stage(**section).backend == expected


def test_cache_keeps_backends_apart(tmp_path):
    audio = next(iter(synthetic_speech().values()))
    cache = F0Cache(tmp_path)
    assert cache.key(audio, 16000, SSL_SAS_YAAPT, "fast") != cache.key(audio, 16000, SSL_SAS_YAAPT, "pyaapt")
    cache.store(audio, np.full(10, 7.0, dtype=np.float32), backend="pyaapt")
    assert cache.load(audio, backend="fast") is None
    np.testing.assert_array_equal(cache.f0(audio, backend="fast"), yaapt_f0(audio, backend="fast"))
    assert len(list(tmp_path.glob("*.npy"))) == 2


def test_f0_targets_backend_option(tmp_path, capsys):
    from voxanon.pipeline.cli import main

    data = make_corpus(tmp_path, n_speakers=2, n_utts=2, seconds=0.6)
    means = {}
    for backend in ("pyaapt", "fast"):
        code = main(["f0-targets", "--quiet", "--workers", "1", "--cache-dir", str(tmp_path / "cache"),
                     "--f0-backend", backend, "--data", str(data.path)])
        targets = json.loads(capsys.readouterr().out)
        assert code == 0 and targets["f0_backend"] == backend
        means[backend] = targets["f0_mean_hz"]
    assert means["fast"] == pytest.approx(means["pyaapt"], abs=0.5)
    assert len(list((tmp_path / "cache").glob("*.npy"))) == 8  # four utterances, each backend apart
