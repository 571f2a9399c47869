"""B3's text and audio front ends against the transcribed IMS-Toucan reference: the articulatory vectors of phone
strings (stress, length and tone marks, word boundaries, punctuation, ``~``/``#``, unknown symbols) and the
aligner's token IDs; the loudness normalisation and the 80-band log-mel, bit for bit, on demo audio."""
from __future__ import annotations

import numpy as np
import pytest
import soundfile
import torch

from tests.reference.toucan import articulatory as ref_text
from tests.reference.toucan import audio as ref_audio
from voxanon.data_prep.demo_corpus import demo_corpus_dir
from voxanon.models.nets.tts import articulatory, audio

# As the recogniser hands them to the TTS (~ at both ends, # at the end, word boundaries, stress, length).
RECIPE_LIKE = "~ðɪs ɪz ɐ kˈɑːmplɛks sˈɛntəns~ ɪt ˈiːvən hɐz ɐ pˈɔːz! bˌʌt kæn ɪt dˈuː ðɪs? nˈaɪs.~#"


def _random_phone_strings(count: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    symbols = list(ref_text.generate_feature_table()) + list("ɚᵻˈːˑ̆˥˦˧˨˩⭧⭨⮁⮃") + ["ˌ", "g", "ʰ", "1"]
    strings = []
    for _ in range(count):
        body = "".join(rng.choice(symbols, size=int(rng.integers(1, 40))))
        strings.append("~" + body + "~#")
    return strings


def test_articulatory_vectors_match_toucan():
    frontend = ref_text.ArticulatoryCombinedTextFrontend(language="en")
    assert articulatory.VECTOR_SIZE == 62
    for phones in [RECIPE_LIKE, *_random_phone_strings(300, seed=3)]:
        expected = frontend.string_to_tensor(phones, handle_missing=True, input_phonemes=True).numpy()
        ours = articulatory.articulatory_vectors(phones)
        assert ours.dtype == np.float32
        np.testing.assert_array_equal(ours, expected.reshape(-1, 62), err_msg=phones)


def test_table_and_ids_are_toucans():
    table = ref_text.generate_feature_table()
    assert list(articulatory.PHONE_VECTORS) == list(table)
    for phone, vector in table.items():
        np.testing.assert_array_equal(articulatory.PHONE_VECTORS[phone], np.array(vector, dtype=np.float32))
    assert articulatory.PHONE_TO_ID == ref_text.get_phone_to_id()


def test_aligner_tokens_as_the_recipe_looks_them_up():
    """The recipe's lookup: the first table phone with the same features past the 13 modifier slots."""
    frontend = ref_text.ArticulatoryCombinedTextFrontend(language="en")
    for phones in [RECIPE_LIKE, *_random_phone_strings(50, seed=4)]:
        text = frontend.string_to_tensor(phones, handle_missing=True, input_phonemes=True)
        expected = []
        for vector in text:
            if vector[21] == 0:
                for phone in frontend.phone_to_vector:
                    if vector.numpy().tolist()[13:] == frontend.phone_to_vector[phone][13:]:
                        expected.append(frontend.phone_to_id[phone])
                        break
        ours = articulatory.aligner_tokens(articulatory.articulatory_vectors(phones))
        assert ours.tolist() == expected


def test_unknown_symbols_are_named_and_bad_starts_refused():
    assert articulatory.unknown_phones("~ˌhɛˈloʊ1~#") == ["ˌ", "1"]
    with pytest.raises(ValueError, match="starts with the mark"):
        articulatory.articulatory_vectors("ːa")
    with pytest.raises(ValueError, match="stress mark"):
        articulatory.articulatory_vectors("ˈ1a")


@pytest.fixture(scope="module")
def demo_wave():
    path = sorted((demo_corpus_dir() / "audio").glob("*.flac"))[0]
    wave, rate = soundfile.read(path)  # float64, as the recipe reads it
    assert rate == 16000
    return wave


@pytest.mark.filterwarnings("ignore:n_fft=1024 is too large")
def test_loudness_and_log_mel_bit_identical(demo_wave):
    processor = ref_audio.AudioPreprocessor(input_sr=16000, output_sr=16000, melspec_buckets=80, hop_length=256,
                                            n_fft=1024, cut_silence=False)
    expected_wave = processor.audio_to_wave_tensor(normalize=True, audio=demo_wave)
    ours_wave = audio.normalise_loudness(demo_wave.astype(np.float32))
    np.testing.assert_array_equal(ours_wave, expected_wave.numpy())
    expected_mel = processor.audio_to_mel_spec_tensor(audio=expected_wave[1000:-1000], normalize=False,
                                                      explicit_sampling_rate=16000).transpose(0, 1)
    ours_mel = audio.log_mel(ours_wave[1000:-1000])
    assert ours_mel.shape == (1 + (len(ours_wave) - 2000) // 256, 80)
    np.testing.assert_array_equal(ours_mel, expected_mel.numpy())
    short = ours_wave[:700]  # librosa pads a signal this short whole rather than frame by frame at its ends
    np.testing.assert_array_equal(audio.log_mel(short), processor.logmelfilterbank(
        torch.from_numpy(short), sampling_rate=16000).transpose(0, 1).numpy())


def test_loudness_refuses_short_and_silent_audio():
    with pytest.raises(ValueError, match="too short"):
        audio.normalise_loudness(np.ones(6399, dtype=np.float32))
    with pytest.raises(ValueError, match="silent"):
        audio.normalise_loudness(np.zeros(16000, dtype=np.float32))
