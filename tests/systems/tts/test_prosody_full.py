"""B3's prosody at the published aligner size (random weights in an ``aligner.pt`` written as Toucan's train loop
writes it) against the transcribed recipe on five demo utterances with the same random draws: durations
identical, per-phone pitch and energy within 1e-5."""
from __future__ import annotations

import numpy as np
import pytest
import soundfile
import torch

from tests.helpers.sttts_prosody_fixtures import ALIGNER_FILE, reference_sizes, write_aligner
from tests.reference.toucan import prosody as prosody_ref
from voxanon.data_prep.demo_corpus import demo_corpus_dir
from voxanon.models.checkpoints.safe import built_with_weights
from voxanon.models.checkpoints.sttts_prosody import build_aligner, convert_aligner, read_aligner
from voxanon.models.nets.tts import prosody

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

SENTENCES = ("~ðɪs ɪz ɐ kˈɑːmplɛks sˈɛntəns~ ɪt hɐz ɐ pˈɔːz!~#",
             "~bˌʌt kæn ɪt dˈuː ðɪs? nˈaɪss.~#",
             "~ɐ vˈɛɹi lˈɔːŋ sˈɛntəns wɪð mˈɛni wˈɜːdz ænd fˈʌni θˈɪŋz ɪn ɪt~ sˈoʊ ðæt ðə ɐlˈaɪnɚ hɐz wˈɜːk~#",
             "~jˈɛs.~#",
             "~ʃiː sˈɛd~ hˈɛloʊ~ ænd ðɛn lˈɛft ðə ɹˈuːm.~#")


def _speech(wave: np.ndarray) -> tuple[int, int]:
    return 400, len(wave) - 1200


def test_full_size_prosody_matches_the_recipe(tmp_path):
    path = write_aligner(tmp_path / ALIGNER_FILE, "full", seed=11)
    state, config = convert_aligner(read_aligner(path), path)
    aligner = built_with_weights(lambda: build_aligner(config), state, str(path))
    extractor = prosody_ref.ImsProsodyExtractor(
        aligner_path=path, device="cpu", aligner_sizes=reference_sizes(config),
        get_speech_timestamps=lambda audio, model, sampling_rate: [dict(zip(("start", "end"), _speech(audio)))])
    sources = sorted((demo_corpus_dir() / "audio").glob("*.flac"))[:len(SENTENCES)]
    for index, (source, phones) in enumerate(zip(sources, SENTENCES)):
        wave, rate = soundfile.read(source, dtype="float32")
        wav_path = tmp_path / f"{index}.wav"
        soundfile.write(wav_path, wave, rate, subtype="PCM_16")
        wave = soundfile.read(wav_path, dtype="float32")[0]
        torch.manual_seed(index)
        duration, pitch, energy, _, _ = extractor.extract_prosody(phones, str(wav_path), input_is_phones=True)
        ours = prosody.extract_prosody(aligner, phones, wave, torch.Generator().manual_seed(index), _speech)
        np.testing.assert_array_equal(ours["durations"], duration.numpy(), err_msg=source.name)
        np.testing.assert_allclose(ours["pitch"], pitch.numpy().reshape(-1), rtol=1e-5, atol=0, err_msg=source.name)
        np.testing.assert_allclose(ours["energy"], energy.numpy().reshape(-1), rtol=1e-5, atol=0,
                                   err_msg=source.name)
