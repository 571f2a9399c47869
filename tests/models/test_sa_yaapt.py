"""SA-toolkit's YAAPT variant (the F0 of B5/B6) and its utterance CMVN against SA-toolkit's own code.

The references are transcriptions of SA-toolkit's ``yaapt.py`` (``tests/reference/sa_yaapt.py``) and of its
``UttCMVN`` (``tests/reference/sa_toolkit.py``). The issue asks for voicing agreement on >= 99.5 % of frames and
|dF0| <= 1 Hz on >= 99 % of jointly voiced frames; on the development machine nearly every track is bit-identical.
"""
from __future__ import annotations

import functools
import math
import warnings

import numpy as np
import pytest
import soundfile
import torch
from tests.helpers.corpora import synthetic_vowel
from tests.reference.sa_toolkit import UttCMVN

from voxanon.data_prep.demo_corpus import demo_corpus_dir
from voxanon.models.f0.sa_yaapt import (SA_TOOLKIT_B5_B6, SaToolkitYaaptParams, normalise_f0, normalise_f0_pooled,
                                        sa_toolkit_f0, sa_toolkit_f0_frames)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # the original is TorchScript, which torch deprecates
    from tests.reference.sa_yaapt import yaapt as reference_yaapt

SAMPLE_RATE = 16000


def reference_f0(audio: np.ndarray, params: SaToolkitYaaptParams = SA_TOOLKIT_B5_B6,
                 sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    # Without gradients, as the challenge's conversion runs it: under TorchScript's legacy executor, which
    # importing speechbrain selects for the whole process (its "disable_jit_profiling" quirk), the scripted
    # biquads refuse their cut-off tensors when gradients are on.
    with torch.no_grad():
        return reference_yaapt(torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32))[None],
                               params.reference_kwargs(sample_rate))[0].numpy()


def assert_parity(references: list[np.ndarray], ours: list[np.ndarray], min_voiced: int) -> None:
    """The issue's criteria, over all frames of all tracks; lengths must match exactly."""
    assert [len(track) for track in ours] == [len(track) for track in references]
    reference, our = np.concatenate(references), np.concatenate(ours)
    voicing = np.mean((reference > 0) == (our > 0))
    both = (reference > 0) & (our > 0)
    assert both.sum() >= min_voiced  # the comparison has something to compare
    within = np.mean(np.abs(reference[both] - our[both]) <= 1.0)
    assert voicing >= 0.995, f"voicing agreement {voicing:.4f}"
    assert within >= 0.99, f"within 1 Hz on {within:.4f} of jointly voiced frames"


@functools.lru_cache(maxsize=None)
def _demo_utterances(per_speaker: int | None) -> tuple[np.ndarray, ...]:
    corpus = demo_corpus_dir()
    taken: dict[str, int] = {}
    waves = []
    for line in (corpus / "wav.scp").read_text().splitlines():
        utterance, path = line.split()
        speaker = utterance.split("-")[0]
        taken[speaker] = taken.get(speaker, 0) + 1
        if per_speaker is None or taken[speaker] <= per_speaker:
            waves.append(soundfile.read(corpus / path, dtype="float32")[0])
    return tuple(waves)


def demo_utterances(per_speaker: int | None) -> list[np.ndarray]:
    """The first ``per_speaker`` utterances of each demo speaker (all if None), in wav.scp order."""
    return [wave.copy() for wave in _demo_utterances(per_speaker)]


def speech(index: int = 0) -> np.ndarray:
    return demo_utterances(1)[index]


def test_frame_count_is_one_per_hop_centred_on_the_unpadded_input():
    for n_samples in (961, 1000, 1280, 16000, 16001, 41520):
        assert sa_toolkit_f0_frames(n_samples) == math.ceil(n_samples / 320)
    assert sa_toolkit_f0_frames(16000, 8000) == 100  # 20 ms at 8 kHz is 160 samples
    assert len(sa_toolkit_f0(np.zeros(16001, np.float32))) == 51


def test_parity_with_sa_toolkit_on_demo_speech():
    waves = demo_utterances(per_speaker=1)  # all 13 voices; the whole corpus is the slow test below
    assert_parity([reference_f0(wave) for wave in waves], sa_toolkit_f0(waves), min_voiced=600)


@pytest.mark.slow
def test_parity_with_sa_toolkit_on_the_whole_demo_corpus():
    waves = demo_utterances(per_speaker=None)
    assert_parity([reference_f0(wave) for wave in waves], sa_toolkit_f0(waves), min_voiced=10000)


def test_parity_with_sa_toolkit_on_synthetic_and_degraded_signals():
    rng = np.random.default_rng(7)
    time = np.arange(32000) / SAMPLE_RATE
    spoken = speech(3)
    signals = [
        synthetic_vowel(120, [(700, 80), (1200, 90), (2600, 120)], 2.0),
        synthetic_vowel(230, [(800, 80), (1400, 90)], 1.2, seed=3),
        (0.3 * np.sin(2 * np.pi * (80 * time + 60 * time ** 2))).astype(np.float32),  # 80-320 Hz glide
        (0.1 * rng.standard_normal(24000)).astype(np.float32),
        spoken * 1e-3,  # faint: the port's NCCF works near float32's subnormal range
        spoken + 0.2,  # DC offset
        np.concatenate([spoken[:20000], np.zeros(8000, np.float32), spoken[20000:]]),  # digital silence inside
        np.clip(spoken * 4, -1, 1),
        synthetic_vowel(130, [(700, 80)], 0.1)[:961],  # the shortest input the port analyses: 4 frames
    ]
    assert_parity([reference_f0(signal) for signal in signals], sa_toolkit_f0(signals), min_voiced=500)


@pytest.mark.parametrize("params, sample_rate", [
    (SA_TOOLKIT_B5_B6, 8000),
    (SaToolkitYaaptParams(frame_length_ms=25.0, frame_space_ms=10.0, tda_frame_length_ms=35.0,
                          nccf_thresh1=0.3), SAMPLE_RATE),
])
def test_parity_with_other_settings(params, sample_rate):
    signals = [speech(0), synthetic_vowel(150, [(700, 80), (1200, 90)], 1.0, seed=5)]
    if sample_rate == 8000:
        signals = [signal[::2].copy() for signal in signals]
    assert_parity([reference_f0(signal, params, sample_rate) for signal in signals],
                  sa_toolkit_f0(signals, sample_rate, params), min_voiced=80)


def test_batched_equals_one_at_a_time():
    waves = demo_utterances(per_speaker=1)[:6] + [np.zeros(20000, np.float32), speech(1)[:700], speech(2)[:5000]]
    batched = sa_toolkit_f0(waves, batch_size=4)
    alone = [sa_toolkit_f0(wave) for wave in waves]
    batched_frames, alone_frames = np.concatenate(batched), np.concatenate(alone)
    assert [len(track) for track in batched] == [len(track) for track in alone]
    # Batching changes no decision; at worst a rounding difference in an NCCF merit (float32 FFT and
    # convolution kernels may round differently with the batch shape on some CPUs) tips a near-tie of the
    # dynamic programme. Bit-identical on the machines this was developed on.
    assert np.mean(batched_frames == alone_frames) >= 0.998


@pytest.mark.filterwarnings("ignore:std\\(\\)")
def test_inputs_the_port_cannot_analyse_are_all_unvoiced():
    silence = np.zeros(32000, np.float32)
    with pytest.raises(RuntimeError):
        reference_f0(silence)  # the port itself fails: no frame is voiced
    for signal in (silence, np.full(32000, 0.25, np.float32), speech(0)[:960], np.zeros(1, np.float32)):
        track = sa_toolkit_f0(signal)
        assert track.dtype == np.float32
        assert len(track) == sa_toolkit_f0_frames(len(signal))
        assert not track.any()
    # A bad utterance does not change its batch's other tracks.
    mixed = sa_toolkit_f0([speech(0), silence, speech(0)[:900]])
    np.testing.assert_array_equal(mixed[0], sa_toolkit_f0(speech(0)))


@pytest.mark.parametrize("audio, message", [
    ([np.zeros(16000, np.float32), np.zeros(0, np.float32)], "audio 1: expected a non-empty mono waveform"),
    ([np.array([0.0, np.nan] * 8000, np.float32)], "audio 0: the waveform contains NaN"),
    ([np.full(16000, np.inf, np.float32)], "audio 0: the waveform contains NaN or infinite"),
    ([np.zeros((2, 16000), np.float32)], "audio 0: expected a non-empty mono waveform"),
    ([np.zeros(16000, np.int16)], "audio 0: expected float samples"),
])
def test_bad_input_raises_naming_the_utterance(audio, message):
    with pytest.raises(ValueError, match=message):
        sa_toolkit_f0(audio)


def test_parameters_are_b5_b6_settings_and_checked():
    kwargs = SA_TOOLKIT_B5_B6.reference_kwargs()
    assert {key: kwargs[key] for key in ("frame_length", "frame_space", "tda_frame_length", "nccf_thresh1", "sr")} \
        == {"frame_length": 35.0, "frame_space": 20.0, "tda_frame_length": 25.0, "nccf_thresh1": 0.25, "sr": 16000.0}
    with pytest.raises(ValueError, match="f0_min"):
        SaToolkitYaaptParams(f0_min=500.0)
    with pytest.raises(ValueError, match="time-domain frame"):
        sa_toolkit_f0(np.zeros(16000, np.float32), params=SaToolkitYaaptParams(tda_frame_length_ms=10.0))


def test_normalisation_matches_utt_cmvn():
    f0 = sa_toolkit_f0(speech(0))
    assert (f0 > 0).sum() > 20
    reference = UttCMVN(var_norm=True, keep_zeros=True)(torch.from_numpy(f0.copy())).numpy()
    normalised = normalise_f0(f0)
    np.testing.assert_array_equal(normalised, reference)
    assert np.array_equal(normalised == 0, f0 == 0)
    assert normalise_f0([f0])[0].tolist() == normalised.tolist()


def test_pooled_normalisation_matches_utt_cmvn_on_a_padded_batch():
    tracks = [sa_toolkit_f0(speech(0)), sa_toolkit_f0(speech(1))]
    # The VPC 2024 recipe zero-pads each batch's F0 tracks to one length before the model normalises them.
    padded = torch.zeros(2, max(len(track) for track in tracks))
    for row, track in enumerate(tracks):
        padded[row, :len(track)] = torch.from_numpy(track)
    reference = UttCMVN(var_norm=True, keep_zeros=True)(padded).numpy()
    pooled = normalise_f0_pooled(tracks)
    for row, track in enumerate(pooled):
        np.testing.assert_array_equal(track, reference[row, :len(track)])
    assert not np.array_equal(pooled[0], normalise_f0(tracks[0]))


@pytest.mark.filterwarnings("ignore:var\\(\\)")
def test_normalisation_of_degenerate_tracks():
    np.testing.assert_array_equal(normalise_f0(np.zeros(5, np.float32)), np.zeros(5, np.float32))
    single = np.array([0.0, 120.0, 0.0], np.float32)
    assert np.isnan(UttCMVN(var_norm=True, keep_zeros=True)(torch.from_numpy(single.copy())).numpy()[1])
    np.testing.assert_array_equal(normalise_f0(single), np.zeros(3, np.float32))


# The F0 stage's sa-toolkit backend (the B5/B6 systems' F0) ---------------------------------------------------

def test_the_f0_stage_runs_the_port_as_its_sa_toolkit_backend(tmp_path):
    from voxanon.models.f0.extract import F0Cache
    from voxanon.pipeline.systems.f0 import F0Stage
    from voxanon.pipeline.systems.stage import Utterance

    waves = [speech(0), speech(1)]
    stage = F0Stage(backend="sa-toolkit", cache_dir=str(tmp_path))
    batch = [Utterance.create(f"u{i}", "s", None, wave, SAMPLE_RATE, 0, "b5") for i, wave in enumerate(waves)]
    stage.process_batch(batch)
    for utt, wave in zip(batch, waves):
        np.testing.assert_array_equal(utt.features["f0"], sa_toolkit_f0(wave))
        assert len(utt.features["f0"]) == sa_toolkit_f0_frames(len(wave))
    # Cached under the backend and its own parameters: the SSL-SAS backends' tracks of the same audio are not it.
    cache = F0Cache(tmp_path)
    assert len(list(tmp_path.glob("*.npy"))) == 2
    assert cache.load(waves[0], SAMPLE_RATE, stage.params, "sa-toolkit") is not None
    assert cache.load(waves[0], SAMPLE_RATE, F0Stage().params, "fast") is None
    again = [Utterance.create("u0", "s", None, waves[0], SAMPLE_RATE, 0, "b5")]
    F0Stage(backend="sa-toolkit", cache_dir=str(tmp_path)).process_batch(again)
    np.testing.assert_array_equal(again[0].features["f0"], batch[0].features["f0"])


def test_the_batched_backend_reports_a_bad_utterance_in_its_place():
    from voxanon.models.f0.extract import yaapt_f0_batch
    from voxanon.models.f0.params import backend_params

    good = speech(0)
    tracks = yaapt_f0_batch([good, np.full(4000, np.nan, np.float32), good[:8000]], SAMPLE_RATE,
                            backend_params("sa-toolkit"), "cpu", "sa-toolkit")
    assert isinstance(tracks[1], ValueError) and "NaN" in str(tracks[1])
    np.testing.assert_array_equal(tracks[0], sa_toolkit_f0(good))
    np.testing.assert_array_equal(tracks[2], sa_toolkit_f0(good[:8000]))


def test_device_puts_sa_toolkits_f0_on_the_device_and_leaves_pyaapts_algorithm_in_the_cpu_pool():
    from voxanon.pipeline.execution.planning import cpu_stage_count
    from voxanon.pipeline.systems.recipes import build_system, device_overrides, load_system_config

    assert "f0.device=cuda" in device_overrides(load_system_config("b5"), "cuda")
    for backend in ("fast", "pyaapt"):
        config = load_system_config("resynth", [f"f0.backend={backend}"])
        overrides = device_overrides(config, "cuda")
        assert "content.device=cuda" in overrides and not any(o.startswith("f0.") for o in overrides)
    system = build_system(load_system_config("resynth", device_overrides(load_system_config("resynth"), "cuda")))
    assert [stage.name for stage in system.stages[:cpu_stage_count(system)]] == ["ssl_sas_input", "f0"]
    gpu_f0 = build_system(load_system_config("resynth", ["f0.device=cuda"]))
    assert [stage.name for stage in gpu_f0.stages[:cpu_stage_count(gpu_f0)]] == ["ssl_sas_input"]
