"""ASR runners: Whisper tiny.en on the demo corpus, batched vs one-at-a-time, loaders and errors."""
from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from voxanon.data_prep.audio import load_audio
from voxanon.data_prep.corpus import read_data_dir
from voxanon.data_prep.errors import VoxanonError
from voxanon.eval.wer import normalise_english, word_error_rate
from voxanon.models.recognisers.asr import DEFAULT_ASR, SpeechBrainASR, WhisperASR, default_whisper_dir, load_asr
from tests.helpers.asr_dirs import write_tiny_encoder_asr

DEMO_CORPUS = Path(__file__).resolve().parents[2] / "data_prep" / "demo" / "corpus"
# One utterance from each of six voices (three TTS engines, male and female sources).
DEMO_UTTERANCES = ("awb-0001", "joe-0002", "rms-0003", "slt-0004", "us2-0005", "en1-0006")


@pytest.fixture(scope="module")
def whisper() -> WhisperASR:
    return WhisperASR(batch_size=4)


@pytest.fixture(scope="module")
def demo() -> tuple[dict[str, str], list[np.ndarray]]:
    data = read_data_dir(DEMO_CORPUS)
    audio = []
    for utt in DEMO_UTTERANCES:
        path = Path(data.wav[utt])
        audio.append(load_audio(path if path.is_absolute() else DEMO_CORPUS / path, 16000).samples)
    return {u: data.text[u] for u in DEMO_UTTERANCES}, audio


@pytest.fixture(scope="module")
def batched_transcripts(whisper, demo) -> list[str]:
    return whisper.transcribe_many(demo[1])


def test_whisper_tiny_en_wer_on_demo_utterances(batched_transcripts, demo):
    references, _ = demo
    result = word_error_rate(references, dict(zip(DEMO_UTTERANCES, batched_transcripts)))
    assert result.n_utterances == 6
    assert math.isfinite(result.wer)
    assert result.wer < 60.0
    assert result.hits > result.n_reference_words / 2


def test_batched_transcripts_equal_one_at_a_time(whisper, batched_transcripts, demo):
    # batch_size 4 over 6 utterances: two batches, and sorting by length reorders them.
    one_at_a_time = [whisper.transcribe(samples) for samples in demo[1]]
    assert batched_transcripts == one_at_a_time
    assert all(batched_transcripts)


def test_utterance_over_30_seconds_is_decoded_whole(whisper, batched_transcripts, demo):
    _, audio = demo
    gap = np.zeros(8000, dtype=np.float32)
    # All six utterances twice: about 36 s, so the second "horn" lies past the first window.
    long_audio = np.concatenate([part for _ in range(2) for a in audio for part in (a, gap)])
    assert len(long_audio) > 30 * 16000
    short_text, long_text = whisper.transcribe_many([audio[0], long_audio])
    assert short_text == batched_transcripts[0]
    words = normalise_english(long_text).split()
    assert words.count("box") == 2
    assert words.count("horn") == 2


def test_transcribe_many_empty_list_and_bad_audio(whisper):
    assert whisper.transcribe_many([]) == []
    with pytest.raises(ValueError, match="mono"):
        whisper.transcribe(np.zeros((2, 16000), dtype=np.float32))
    with pytest.raises(ValueError, match="float"):
        whisper.transcribe(np.ones(16000, dtype=np.int16))
    with pytest.raises(ValueError, match="audio 1: contains NaN"):
        whisper.transcribe_many([np.ones(100, np.float32), np.full(100, np.nan, np.float32)])


def test_whisper_model_dir_errors(tmp_path):
    with pytest.raises(VoxanonError, match=f"{tmp_path / 'absent'}: Whisper model directory not found"):
        WhisperASR(tmp_path / "absent")
    incomplete = tmp_path / "incomplete"
    incomplete.mkdir()
    (incomplete / "model.bin").write_bytes(b"")
    with pytest.raises(VoxanonError, match="missing config.json, tokenizer.json"):
        WhisperASR(incomplete)
    corrupt = tmp_path / "corrupt"
    shutil.copytree(default_whisper_dir(), corrupt, ignore=shutil.ignore_patterns("model.bin"))
    (corrupt / "model.bin").write_bytes(b"not a model")
    with pytest.raises(VoxanonError, match=f"{corrupt}: cannot load the Whisper model"):
        WhisperASR(corrupt)


def test_english_only_model_rejects_other_languages():
    with pytest.raises(VoxanonError, match="language 'de' not supported"):
        WhisperASR(language="de")


def test_speechbrain_loader_errors(tmp_path):
    with pytest.raises(VoxanonError, match=f"{tmp_path / 'absent'}: SpeechBrain model directory not found"):
        SpeechBrainASR(tmp_path / "absent")
    with pytest.raises(VoxanonError, match=f"{tmp_path}: no hyperparams.yaml"):
        SpeechBrainASR(tmp_path)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "hyperparams.yaml").write_text("modules: !new:speechbrain.nnet.linear.Linear\n")  # needs sizes
    with pytest.raises(VoxanonError, match=f"{broken}: cannot load the SpeechBrain EncoderASR"):
        SpeechBrainASR(broken)


def test_tiny_speechbrain_encoder_asr_decodes(tmp_path):
    constant = SpeechBrainASR(write_tiny_encoder_asr(tmp_path / "constant", favoured_label="B"))
    rng = np.random.default_rng(0)
    audio = [0.1 * rng.standard_normal(n).astype(np.float32) for n in (16000, 8000, 12000)]
    assert constant.transcribe_many(audio) == ["B", "B", "B"]

    random_model = SpeechBrainASR(write_tiny_encoder_asr(tmp_path / "random"), batch_size=2)
    # Two-tone signals: a random linear layer on white noise's flat spectrum picks one label.
    half_second = np.arange(8000) / 16000
    equal_length = [0.3 * np.concatenate([np.sin(2 * np.pi * low * half_second),
                                          np.sin(2 * np.pi * high * half_second)]).astype(np.float32)
                    for low, high in ((200, 3000), (1000, 5000), (4000, 300))]
    batched = random_model.transcribe_many(equal_length)
    assert batched == [random_model.transcribe(a) for a in equal_length]
    assert all(set(text) <= set("ABC ") for text in batched)
    assert len(set(batched)) == 3


def test_load_asr_dispatch(tmp_path):
    assert load_asr(None).name == DEFAULT_ASR
    assert isinstance(load_asr("whisper-tiny.en"), WhisperASR)
    assert load_asr(default_whisper_dir()).name == f"whisper:{default_whisper_dir().name}"
    speechbrain_dir = write_tiny_encoder_asr(tmp_path / "sb", favoured_label="A")
    assert isinstance(load_asr(speechbrain_dir), SpeechBrainASR)
    with pytest.raises(VoxanonError, match="no such directory"):
        load_asr(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(VoxanonError, match="neither model.bin nor hyperparams.yaml"):
        load_asr(tmp_path / "empty")
