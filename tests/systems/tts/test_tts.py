"""B3's FastSpeech2, HiFi-GAN and synthesis against the transcribed IMS-Toucan reference (``tests/reference/toucan``)
on random weights, CPU, one thread: both read the same files, written as Toucan's train loops save them
(``tests/helpers/sttts_tts_fixtures.py``); ours through ``read_*``, ``convert_*`` and a strict load of the result."""
from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
import torch

from tests.helpers.sttts_tts_fixtures import write_fastspeech2, write_hifigan
from tests.reference.toucan.fastspeech2 import FastSpeech2 as ReferenceFastSpeech2
from tests.reference.toucan.hifigan import HiFiGANGenerator as ReferenceHiFiGAN
from tests.reference.toucan.synthesis import ImsTTS
from voxanon.data_prep.errors import VoxanonError
from voxanon.models.checkpoints import sttts_tts
from voxanon.models.checkpoints.safe import CheckpointError, UnsafeCheckpointError, built_with_weights
from voxanon.models.nets.tts.fastspeech2 import VOICED_DIM
from voxanon.models.nets.tts.hifigan import vocode
from voxanon.models.dsp.resample import resample_kaiser_best
from voxanon.models.nets.tts.articulatory import articulatory_vectors
from voxanon.models.nets.tts.synthesis import MIN_SAMPLES_48K, synthesise_48k, synthesise_batch_48k, synthesise_vectors

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def relative_error(ours, reference) -> float:
    ours, reference = np.asarray(ours, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    assert ours.shape == reference.shape
    return float(np.abs(ours - reference).max() / np.abs(reference).max())


def release(folder, size: str, seed: int = 0):
    """(fastspeech2 path, hifigan path, our FastSpeech2, our generator) for files of the given size."""
    fastspeech2 = write_fastspeech2(folder / "FastSpeech2_Multi" / "prosody_cloning.pt", size, seed)
    hifigan = write_hifigan(folder / "HiFiGAN_combined" / "best.pt", size, seed)
    ours = []
    for component, path in (("fastspeech2", fastspeech2), ("hifigan", hifigan)):
        state, config = getattr(sttts_tts, f"convert_{component}")(getattr(sttts_tts, f"read_{component}")(path), path)
        build = getattr(sttts_tts, f"build_{component}")
        ours.append(built_with_weights(lambda: build(config), state, str(path)))
    return fastspeech2, hifigan, *ours


def utterance(seed: int, phones: int, max_duration: int = 9):
    """Articulatory-like vectors (voicing 0 or 1), durations (some 0), pitch and energy per phone, a style."""
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(phones, 62)).astype(np.float32)
    vectors[:, VOICED_DIM] = rng.integers(0, 2, phones)
    durations = rng.integers(0, max_duration, phones)
    pitch = rng.uniform(0.5, 1.5, (phones, 1)).astype(np.float32)
    energy = rng.uniform(0.5, 1.5, (phones, 1)).astype(np.float32)
    return vectors, durations, pitch, energy, rng.normal(size=128).astype(np.float32)


def reference_mel(path, config, vectors, durations, pitch, energy, style):
    checkpoint = torch.load(path, weights_only=False)
    model = ReferenceFastSpeech2(weights=checkpoint["model"], **config).eval()
    return model(torch.tensor(vectors), durations=torch.tensor(durations), pitch=torch.tensor(pitch),
                 energy=torch.tensor(energy), utterance_embedding=torch.tensor(style))


def reference_generator(path, channels: int):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.nn.utils.weight_norm, as Toucan uses it
        return ReferenceHiFiGAN(path_to_weights=path, channels=channels).eval()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return release(tmp_path_factory.mktemp("tts"), "tiny")


def test_fastspeech2_mel_matches_reference(tiny):
    fastspeech2, _, ours, _ = tiny
    config = sttts_tts.convert_fastspeech2(sttts_tts.read_fastspeech2(fastspeech2), fastspeech2)[1]
    for seed, phones in ((1, 17), (2, 40)):
        vectors, durations, pitch, energy, style = utterance(seed, phones)
        expected = reference_mel(fastspeech2, config, vectors, durations, pitch, energy, style)
        mel = ours(torch.tensor(vectors), durations, torch.tensor(pitch), torch.tensor(energy), torch.tensor(style))
        assert relative_error(mel, expected) < 1e-5


def test_fastspeech2_batch_equals_one_at_a_time(tiny):
    _, _, ours, _ = tiny
    items = [tuple(torch.as_tensor(x) for x in utterance(seed, phones)) for seed, phones in ((3, 9), (4, 30), (5, 21))]
    batched = ours.batch(items)
    for item, mel in zip(items, batched):
        assert relative_error(mel, ours(*item)) < 1e-5


def test_all_zero_durations_give_one_frame_per_phone(tiny):
    fastspeech2, _, ours, _ = tiny
    config = sttts_tts.convert_fastspeech2(sttts_tts.read_fastspeech2(fastspeech2), fastspeech2)[1]
    vectors, _, pitch, energy, style = utterance(6, 5)
    durations = np.zeros(5, dtype=np.int64)
    expected = reference_mel(fastspeech2, config, vectors, durations, pitch, energy, style)
    mel = ours(torch.tensor(vectors), durations, torch.tensor(pitch), torch.tensor(energy), torch.tensor(style))
    assert mel.shape == (5, 80) and relative_error(mel, expected) < 1e-5


def test_hifigan_waveform_matches_reference(tiny):
    _, hifigan, _, generator = tiny
    reference = reference_generator(hifigan, generator.config.upsample_initial_channel)
    mel = torch.randn(80, 530, generator=torch.Generator().manual_seed(7))  # two windows
    with torch.inference_mode():
        expected = reference(mel)
    assert relative_error(vocode(generator, mel.T), expected) < 1e-5


@pytest.mark.parametrize("max_duration", [9, 2], ids=["long", "short-retried"])
def test_synthesis_matches_the_recipe(tiny, max_duration):
    """The whole ``ImsTTS.read_text``: silences into the 48 kHz signal, resampy to 16 kHz, and (short) the recipe's
    31 masked retries drawn from torch's global generator, against our one synthesis with the masks drawn from a
    seeded generator."""
    fastspeech2, hifigan, ours, generator = tiny
    config = sttts_tts.convert_fastspeech2(sttts_tts.read_fastspeech2(fastspeech2), fastspeech2)[1]
    tts = ImsTTS(hifigan, fastspeech2, "cpu", hifigan_channels=generator.config.upsample_initial_channel, **config)
    vectors, durations, pitch, energy, style = utterance(8, 12, max_duration)
    short = int(durations.sum()) * 768 < MIN_SAMPLES_48K
    assert short == (max_duration == 2)
    with torch.random.fork_rng():
        torch.manual_seed(11)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            expected = tts.read_text(torch.tensor(vectors), torch.tensor(style), duration=torch.tensor(durations),
                                     pitch=torch.tensor(pitch), energy=torch.tensor(energy), start_silence=160,
                                     end_silence=321)
    wave_48k = synthesise_vectors(ours, generator, vectors, durations, pitch, energy, style,
                                  torch.Generator().manual_seed(11), start_silence=160, end_silence=321)
    wave = resample_kaiser_best(wave_48k, 48_000, 16_000)[:len(wave_48k) // 3].astype(np.float32)
    assert wave.dtype == np.float32 and wave.shape == expected.shape
    assert relative_error(wave, expected) < 1e-5


def test_phone_string_synthesis(tiny):
    """The recogniser's phone string through the articulatory front end, one duration per vector."""
    _, _, ours, generator = tiny
    phones = "~ðɪs ɪz ɐ tˈɛst~#"
    vectors = articulatory_vectors(phones)
    _, durations, pitch, energy, style = utterance(12, len(vectors))
    wave = synthesise_48k(ours, generator, phones, durations, pitch, energy, style, torch.Generator().manual_seed(1))
    assert np.array_equal(wave, synthesise_vectors(ours, generator, vectors, durations, pitch, energy, style,
                                                   torch.Generator().manual_seed(1)))
    with pytest.raises(ValueError, match="durations"):
        synthesise_48k(ours, generator, phones, durations[1:], pitch[1:], energy[1:], style, torch.Generator())


def test_batch_synthesis_equals_one_at_a_time(tiny):
    """The padded GPU path, run on CPU: a long and a short (retried) utterance, each with its own generator."""
    _, _, ours, generator = tiny
    utterances = []
    for seed, phones in ((13, "~hˈɛloʊ wˈɜːld~#"), (14, "~ɐ~#")):
        _, durations, pitch, energy, style = utterance(seed, len(articulatory_vectors(phones)))
        utterances.append({"phones": phones, "durations": durations, "pitch": pitch, "energy": energy,
                           "style": style, "start_silence": seed, "end_silence": 2 * seed})
    batched = synthesise_batch_48k(ours, generator, [{**u, "generator": torch.Generator().manual_seed(5)}
                                                     for u in utterances])
    for utt, wave in zip(utterances, batched):
        alone = synthesise_48k(ours, generator, **utt, generator=torch.Generator().manual_seed(5))
        assert relative_error(wave, alone) < 1e-5


def test_training_entries_are_read_and_dropped(tiny):
    fastspeech2, hifigan, _, _ = tiny
    assert set(sttts_tts.read_fastspeech2(fastspeech2)) == {"model", "default_emb"}
    assert set(sttts_tts.read_hifigan(hifigan)) == {"generator"}


class Payload:
    def __reduce__(self):
        return (print, ("payload ran",))


def test_reduce_payload_is_refused(tmp_path, capsys):
    path = tmp_path / "best.pt"
    torch.save({"generator": {}, "step_counter": Payload()}, path, pickle_protocol=pickle.DEFAULT_PROTOCOL)
    with pytest.raises(UnsafeCheckpointError, match="best.pt"):
        sttts_tts.read_hifigan(path)
    assert "payload ran" not in capsys.readouterr().out


def test_wrong_shape_is_refused_naming_its_key(tiny, tmp_path):
    fastspeech2, hifigan, _, _ = tiny
    checkpoint = torch.load(fastspeech2, weights_only=True)
    checkpoint["model"]["decoder.encoders.1.self_attn.linear_q.weight"] = torch.zeros(3, 3)
    torch.save(checkpoint, tmp_path / "prosody_cloning.pt")
    with pytest.raises(CheckpointError, match=r"prosody_cloning\.pt.*decoder\.encoders\.1\.self_attn\.linear_q\.weight"):
        sttts_tts.convert_fastspeech2(sttts_tts.read_fastspeech2(tmp_path / "prosody_cloning.pt"),
                                      tmp_path / "prosody_cloning.pt")
    checkpoint = torch.load(hifigan, weights_only=True)
    checkpoint["generator"]["blocks.4.convs2.1.1.bias"] = torch.zeros(5)
    torch.save(checkpoint, tmp_path / "best.pt")
    with pytest.raises(CheckpointError, match=r"best\.pt.*resblocks\.4\.convs2\.1\.bias"):
        sttts_tts.convert_hifigan(sttts_tts.read_hifigan(tmp_path / "best.pt"), tmp_path / "best.pt")


def test_unknown_entries_and_keys_are_refused(tiny, tmp_path):
    _, hifigan, _, _ = tiny
    checkpoint = torch.load(hifigan, weights_only=True)
    torch.save({**checkpoint, "averaged": 1}, tmp_path / "best.pt")
    with pytest.raises(CheckpointError, match=r"best\.pt.*averaged"):
        sttts_tts.read_hifigan(tmp_path / "best.pt")
    checkpoint["generator"]["extra_conv.bias"] = torch.zeros(3)
    torch.save(checkpoint, tmp_path / "best.pt")
    with pytest.raises(CheckpointError, match=r"best\.pt.*extra_conv\.bias"):
        sttts_tts.convert_hifigan(sttts_tts.read_hifigan(tmp_path / "best.pt"), tmp_path / "best.pt")
    checkpoint["generator"].pop("extra_conv.bias")
    checkpoint["step_counter"] = "many"
    torch.save(checkpoint, tmp_path / "best.pt")
    with pytest.raises(CheckpointError, match=r"best\.pt.*step_counter"):
        sttts_tts.read_hifigan(tmp_path / "best.pt")


def test_random_sizes():
    for component in ("fastspeech2", "hifigan"):
        state, config = getattr(sttts_tts, f"random_{component}")("tiny", 3)
        again, _ = getattr(sttts_tts, f"random_{component}")("tiny", 3)
        assert all(torch.equal(state[key], again[key]) for key in state)
        built_with_weights(lambda: getattr(sttts_tts, f"build_{component}")(config), state)
    with pytest.raises(VoxanonError, match="full' or 'tiny"):
        sttts_tts.random_hifigan("huge", 0)


@pytest.mark.slow
def test_full_size_parity(tmp_path):
    """Published sizes, with the training entries from torch's own optimizers: FastSpeech2's mel and HiFi-GAN's
    waveform within 1e-5 of the reference."""
    fastspeech2 = write_fastspeech2(tmp_path / "prosody_cloning.pt", "full", 0, real_training=True)
    hifigan = write_hifigan(tmp_path / "best.pt", "full", 0, real_training=True)
    states = {}
    for component, path in (("fastspeech2", fastspeech2), ("hifigan", hifigan)):
        states[component] = getattr(sttts_tts, f"convert_{component}")(
            getattr(sttts_tts, f"read_{component}")(path), path)
    config = states["fastspeech2"][1]
    ours = built_with_weights(lambda: sttts_tts.build_fastspeech2(config), states["fastspeech2"][0])
    generator = built_with_weights(lambda: sttts_tts.build_hifigan(states["hifigan"][1]), states["hifigan"][0])
    vectors, durations, pitch, energy, style = utterance(9, 30)
    expected = reference_mel(fastspeech2, config, vectors, durations, pitch, energy, style)
    mel = ours(torch.tensor(vectors), durations, torch.tensor(pitch), torch.tensor(energy), torch.tensor(style))
    assert relative_error(mel, expected) < 1e-5
    with torch.inference_mode():
        wave = reference_generator(hifigan, 512)(expected.T)
    assert relative_error(vocode(generator, expected), wave) < 1e-5
