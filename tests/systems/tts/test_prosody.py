"""B3's aligner and prosody against the transcribed references (IMS-Toucan's Aligner, the recipe's
``ImsProsodyExtractor`` and ``ImsProsodyAnonymization``), on random weights in ``aligner.pt`` written as Toucan's
train loop writes it, with the same random draws (the reference's global generator seeded as our generator):
aligner scores, fine-tuning, durations, per-phone pitch and energy, the anonymisation factors; the file's
import (entries, shapes, a pickle that would run code)."""
from __future__ import annotations

import numpy as np
import pytest
import soundfile
import torch

from tests.helpers.sttts_prosody_fixtures import ALIGNER_FILE, reference_sizes, write_aligner
from tests.reference.toucan import aligner as aligner_ref
from tests.reference.toucan import prosody as prosody_ref
from voxanon.data_prep.demo_corpus import demo_corpus_dir
from voxanon.models.checkpoints.safe import CheckpointError, UnsafeCheckpointError, built_with_weights
from voxanon.models.checkpoints.sttts_prosody import build_aligner, convert_aligner, random_aligner, read_aligner
from voxanon.models.nets.tts import prosody
from voxanon.models.nets.tts.aligner import AlignerConfig, fine_tuned_copy, monotonic_path, path_durations

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# As the recogniser hands them over: ~ at both ends, # last, word boundaries, stress and length marks, a pause,
# two equal neighbours (the recipe shares their frames 3:2).
PHONES = "~ðɪs ɪz ɐ kˈɑːmplɛks sˈɛntəns~ ɪt hɐz ɐ pˈɔːz! bˌʌt kæn ɪt dˈuː ðɪs? nˈaɪss.~#"
SEED = 1234


def _speech(wave: np.ndarray) -> tuple[int, int]:
    """A fixed cut standing in for the VAD on both sides."""
    return 1600, len(wave) - 800


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    root = tmp_path_factory.mktemp("sttts")
    path = write_aligner(root / ALIGNER_FILE, "tiny", seed=5)
    state, config = convert_aligner(read_aligner(path), path)
    aligner = built_with_weights(lambda: build_aligner(config), state, str(path))
    return path, aligner, config


@pytest.fixture(scope="module")
def utterance(tmp_path_factory):
    source = sorted((demo_corpus_dir() / "audio").glob("*.flac"))[0]
    wave, rate = soundfile.read(source, dtype="float32")
    wave = wave[:rate * 2]  # 2 s keep the test short
    path = tmp_path_factory.mktemp("audio") / "utterance.wav"
    soundfile.write(path, wave, rate, subtype="PCM_16")
    return path, soundfile.read(path, dtype="float32")[0]


def test_published_entries_are_accepted_and_only_the_aligner_kept(release):
    path, _, config = release
    checkpoint = torch.load(path, weights_only=True)
    assert set(checkpoint) == {"asr_model", "optimizer", "tts_model", "tts_optimizer", "step_counter"}
    state, _ = convert_aligner(checkpoint, path)
    assert set(state) == set(checkpoint["asr_model"])
    assert config == {"n_mels": 80, "num_symbols": 145, "lstm_dim": 16, "conv_dim": 16}


def test_random_full_has_the_published_shapes(release):
    path, _, _ = release
    state, config = random_aligner("full", 0)
    assert config == AlignerConfig().to_dict() == {"n_mels": 80, "num_symbols": 145, "lstm_dim": 512, "conv_dim": 512}
    assert convert_aligner({"asr_model": state}, path)[1] == config
    assert state["rnn.weight_ih_l0"].shape == (2048, 512) and state["proj.weight"].shape == (145, 1024)
    with pytest.raises(ValueError, match="unknown size 'huge'"):
        random_aligner("huge", 0)


def test_wrong_shape_missing_key_and_bad_entries_are_named(release):
    path, _, _ = release
    checkpoint = torch.load(path, weights_only=True)
    bent = {**checkpoint, "asr_model": {**checkpoint["asr_model"], "convs.2.bnorm.weight": torch.ones(3)}}
    with pytest.raises(CheckpointError, match=r"convs\.2\.bnorm\.weight \(3,\) \(expected \(16,\)\)"):
        convert_aligner(bent, path)
    missing = {**checkpoint, "asr_model": {key: value for key, value in checkpoint["asr_model"].items()
                                           if key != "rnn.bias_hh_l0_reverse"}}
    with pytest.raises(CheckpointError, match="missing rnn.bias_hh_l0_reverse"):
        convert_aligner(missing, path)
    with pytest.raises(CheckpointError, match="step_counter is a str"):
        convert_aligner({**checkpoint, "step_counter": "7"}, path)
    with pytest.raises(CheckpointError, match="asr_model"):
        convert_aligner({"model": checkpoint["asr_model"]}, path)


class RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


def test_code_in_the_pickle_is_refused_and_never_run(release, tmp_path):
    path, _, _ = release
    marker = tmp_path / "ran"
    hostile = tmp_path / "aligner.pt"
    torch.save({**torch.load(path, weights_only=True), "step_counter": RunsCode(marker)}, hostile)
    with pytest.raises(UnsafeCheckpointError, match="system"):
        read_aligner(hostile)
    assert not marker.exists()


def _reference_aligner(path, config):
    model = aligner_ref.Aligner(**reference_sizes(config))
    model.load_state_dict(torch.load(path, map_location="cpu")["asr_model"])
    return model


def test_scores_in_evaluation_and_training_mode(release):
    path, aligner, config = release
    reference = _reference_aligner(path, config).eval()
    mel = torch.randn(1, 57, 80, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(aligner(mel), reference(mel), rtol=1e-5, atol=1e-6)
        reference.train()
        torch.manual_seed(SEED)
        expected = reference(mel)
        aligner.train()
        try:
            ours = aligner(mel, torch.Generator().manual_seed(SEED))
        finally:
            aligner.eval()
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-6)


def test_fine_tuning_leaves_the_shared_aligner_alone(release):
    _, aligner, _ = release
    before = {key: value.clone() for key, value in aligner.state_dict().items()}
    tuned = fine_tuned_copy(aligner, torch.randn(30, 80), torch.tensor([0, 30, 40, 1]), torch.Generator())
    assert not tuned.training and not aligner.training
    for key, value in aligner.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert not torch.equal(tuned.state_dict()["proj.weight"], before["proj.weight"])


def test_monotonic_alignment_durations_as_the_recipe_finds_them():
    """Random scores, coarse ones (ties everywhere) and more phones than frames."""
    rng = np.random.default_rng(0)
    calculator = prosody_ref.DurationCalculator(reduction_factor=1)
    for frames, phones, step in [(50, 12, 0.0), (80, 30, 0.5), (40, 39, 0.0), (7, 10, 0.0), (30, 5, 2.0)]:
        scores = rng.normal(0.0, 3.0, size=(frames, phones)).astype(np.float32)
        if step:
            scores = (np.round(scores / step) * step).astype(np.float32)
        expected = calculator(torch.LongTensor(aligner_ref.binarize_alignment(scores)), vis=None)
        ours = path_durations(monotonic_path(scores), phones)
        np.testing.assert_array_equal(ours, expected.numpy(), err_msg=f"{frames}x{phones}")


def test_prosody_matches_the_recipe(release, utterance):
    path, aligner, config = release
    wav_path, wave = utterance
    extractor = prosody_ref.ImsProsodyExtractor(
        aligner_path=path, device="cpu", aligner_sizes=reference_sizes(config),
        get_speech_timestamps=lambda audio, model, sampling_rate: [dict(zip(("start", "end"), _speech(audio)))])
    torch.manual_seed(SEED)
    duration, pitch, energy, start_silence, end_silence = extractor.extract_prosody(
        PHONES, str(wav_path), input_is_phones=True)
    ours = prosody.extract_prosody(aligner, PHONES, wave, torch.Generator().manual_seed(SEED), _speech)
    np.testing.assert_array_equal(ours["durations"], duration.numpy())
    assert ours["durations"].sum() == 1 + (len(wave) - 2400) // 256
    assert (ours["start_silence"], ours["end_silence"]) == (start_silence, end_silence) == (1600, 800)
    np.testing.assert_allclose(ours["pitch"], pitch.numpy().reshape(-1), rtol=1e-5, atol=0)
    np.testing.assert_allclose(ours["energy"], energy.numpy().reshape(-1), rtol=1e-5, atol=0)
    assert np.count_nonzero(ours["pitch"]) > 5 and np.count_nonzero(ours["energy"]) > 5

    anonymiser = prosody_ref.ImsProsodyAnonymization(random_offset_lower=60, random_offset_higher=140)
    torch.manual_seed(SEED + 1)
    expected = anonymiser.anonymize_values(duration=duration, energy=energy, pitch=pitch)
    anonymised = prosody.anonymise_prosody(ours, torch.Generator().manual_seed(SEED + 1))
    np.testing.assert_array_equal(anonymised["durations"], ours["durations"])
    np.testing.assert_allclose(anonymised["energy"], expected["energy"].numpy().reshape(-1), rtol=1e-5, atol=0)
    np.testing.assert_allclose(anonymised["pitch"], expected["pitch"].numpy().reshape(-1), rtol=1e-5, atol=0)


def test_anonymisation_factors_are_60_to_139_hundredths():
    ones = {"energy": np.ones(20_000, dtype=np.float32), "pitch": np.ones(20_000, dtype=np.float32)}
    factors = prosody.anonymise_prosody(ones, torch.Generator().manual_seed(0))
    for name in ("energy", "pitch"):
        hundredths = np.round(factors[name] * 100).astype(int)
        assert hundredths.min() == 60 and hundredths.max() == 139
        np.testing.assert_array_equal(factors[name], (hundredths.astype(np.float32) / 100).astype(np.float32))
    assert not np.array_equal(factors["energy"], factors["pitch"])


def test_unvoiced_phones_keep_pitch_at_zero_where_the_recipe_gives_nan(release, utterance):
    path, aligner, config = release
    wav_path, wave = utterance
    extractor = prosody_ref.ImsProsodyExtractor(
        aligner_path=path, device="cpu", aligner_sizes=reference_sizes(config),
        get_speech_timestamps=lambda audio, model, sampling_rate: [dict(zip(("start", "end"), _speech(audio)))])
    torch.manual_seed(0)
    _, pitch, _, _, _ = extractor.extract_prosody("~sˈt st~#", str(wav_path), input_is_phones=True)
    ours = prosody.extract_prosody(aligner, "~sˈt st~#", wave, torch.Generator().manual_seed(0), _speech)
    assert torch.isnan(pitch).all()
    np.testing.assert_array_equal(ours["pitch"], np.zeros(len(ours["durations"]), dtype=np.float32))
    assert ours["durations"][3] == 0 and ours["durations"].sum() == 1 + (len(wave) - 2400) // 256  # " " at 3


def test_unusable_inputs_are_refused(release, utterance):
    _, aligner, _ = release
    _, wave = utterance
    with pytest.raises(ValueError, match="no symbol to align"):
        prosody.extract_prosody(aligner, " ", wave, torch.Generator())
    with pytest.raises(ValueError, match="too few for one 1024-sample"):
        prosody.extract_prosody(aligner, PHONES, wave, torch.Generator(), lambda audio: (100, 900))
    with pytest.raises(ValueError, match="too short for a loudness"):
        prosody.extract_prosody(aligner, PHONES, wave[:6000], torch.Generator())
