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
from voxanon.models.recognisers.asr import (DEFAULT_ASR, PACK_GAP_SAMPLES, SHORT_WINDOW_SAMPLES, WHISPER_WINDOW_SAMPLES,
                                            SpeechBrainASR, WhisperASR, assign_words, default_whisper_dir, load_asr,
                                            pack_windows, repeats_words)
from tests.helpers.asr_dirs import smallest_decision_margin, write_tiny_encoder_asr

DEMO_CORPUS = Path(__file__).resolve().parents[2] / "data_prep" / "demo" / "corpus"
# One utterance from each of six voices (three TTS engines, male and female sources).
DEMO_UTTERANCES = ("awb-0001", "joe-0002", "rms-0003", "slt-0004", "us2-0005", "en1-0006")
# Transcripts of the same windows decoded in other batches (how many windows one encoder call holds, which replica
# runs them) agree to this word error rate of one against the other, not bit for bit: CTranslate2's matrix products
# may round differently with the batch's shape on another CPU, and a rounding can move a beam's choice.
ACROSS_BATCHES_WER = 10.0


def agree_across_batches(transcripts: list[str], others: list[str]) -> bool:
    """Whether ``transcripts`` and ``others`` (the same utterances, decoded in other batches) agree to
    ``ACROSS_BATCHES_WER``."""
    return word_error_rate(dict(enumerate(others)), dict(enumerate(transcripts))).wer <= ACROSS_BATCHES_WER


@pytest.fixture(scope="module")
def whisper() -> WhisperASR:
    return WhisperASR(batch_size=4, decoding="per-utterance")


@pytest.fixture(scope="module")
def packed_whisper() -> WhisperASR:
    return WhisperASR(batch_size=4, decoding="packed")


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


def test_per_utterance_decoding_agrees_with_one_at_a_time(whisper, batched_transcripts, demo):
    # batch_size 4 over 6 utterances: two batches, and sorting by length reorders them.
    one_at_a_time = [whisper.transcribe(samples) for samples in demo[1]]
    assert agree_across_batches(batched_transcripts, one_at_a_time)
    assert all(batched_transcripts)


def test_utterance_over_30_seconds_is_decoded_whole(whisper, batched_transcripts, demo):
    _, audio = demo
    gap = np.zeros(8000, dtype=np.float32)
    # All six utterances twice: about 36 s, so the second "horn" lies past the first window.
    long_audio = np.concatenate([part for _ in range(2) for a in audio for part in (a, gap)])
    assert len(long_audio) > 30 * 16000
    short_text, long_text = whisper.transcribe_many([audio[0], long_audio])
    assert agree_across_batches([short_text], [batched_transcripts[0]])
    words = normalise_english(long_text).split()
    assert words.count("box") == 2
    assert words.count("horn") == 2


def test_short_window_decoding_reads_short_utterances_in_a_10_second_window(whisper, batched_transcripts, demo,
                                                                           monkeypatch):
    references, audio = demo
    short_window = WhisperASR(batch_size=4, decoding="short-window")
    encoded = []
    # An utterance's length -> its transcript from a 10 s window, and from a 30 s one.
    short_texts, window_texts = {}, {}
    encode = short_window._model.encode

    def recorded(decode, texts_by_length):
        def decode_and_record(utterances):
            # Called from the replicas' threads, in any order: each call records its own utterances' texts.
            texts = decode(utterances)
            texts_by_length.update({len(samples): text for samples, text in zip(utterances, texts)})
            return texts
        return decode_and_record

    monkeypatch.setattr(short_window._model, "encode", lambda features: encoded.append(features.shape) or
                        encode(features))
    monkeypatch.setattr(short_window, "_decode_short_windows", recorded(short_window._decode_short_windows,
                                                                        short_texts))
    monkeypatch.setattr(short_window, "_transcribe_windows", recorded(short_window._transcribe_windows, window_texts))
    # The six (about 3 s each) in 10 s windows; the six in a row (too long to leave a second spare) in a 30 s one,
    # with any of the six whose short window made Whisper say a phrase again.
    together = np.concatenate(audio)
    assert SHORT_WINDOW_SAMPLES - 16000 < len(together) <= WHISPER_WINDOW_SAMPLES
    assert len({len(samples) for samples in audio}) == 6
    transcripts = short_window.transcribe_many([*audio, together])
    assert sorted(short_texts) == sorted(len(samples) for samples in audio)
    said_again = {i for i in range(6) if repeats_words(short_texts[len(audio[i])])}
    # Windows encoded per length (the batches may be split between CTranslate2's replicas).
    windows = {frames: sum(batch for batch, _, f in encoded if f == frames) for _, _, frames in encoded}
    assert windows == {1000: 6, 3000: 1 + len(said_again)}
    assert sorted(window_texts) == sorted([len(together)] + [len(audio[i]) for i in said_again])
    for i in range(6):
        assert transcripts[i] == (window_texts if i in said_again else short_texts)[len(audio[i])]
    assert transcripts[-1] == window_texts[len(together)]
    assert agree_across_batches([transcripts[-1]], [whisper.transcribe(together)])
    result = word_error_rate(references, dict(zip(DEMO_UTTERANCES, transcripts)))
    before = word_error_rate(references, dict(zip(DEMO_UTTERANCES, batched_transcripts)))
    assert result.n_utterances == 6 and result.wer <= before.wer + 10.0


def test_repeats_words_finds_a_run_of_words_said_again():
    assert repeats_words("Adding fast leads to wrong sons. Adding fast leads to wrong sons.")
    assert repeats_words("that you know that you know that you can reach up the world.")
    assert not repeats_words("The box was thrown beside the parked truck.")
    assert not repeats_words("the the the")  # overlapping runs of one word: a stutter, not a phrase said again
    assert not repeats_words("")


def test_packed_decoding_gives_each_utterance_its_own_words(packed_whisper, batched_transcripts, demo, monkeypatch):
    references, audio = demo
    packed = packed_whisper
    decoded = []

    def spied(windows):
        decoded.append(WhisperASR._decode_packed(packed, windows))
        return decoded[-1]

    monkeypatch.setattr(packed, "_decode_packed", spied)
    # Longest first, as the evaluation sends them: the six fill one window in that order.
    order = sorted(range(6), key=lambda i: -len(audio[i]))
    assert pack_windows([len(audio[i]) for i in order]) == [list(range(6))]
    transcripts = dict(zip(order, packed.transcribe_many([audio[i] for i in order])))
    # The first window holds all six, most of them attributed there (the rest packed again or decoded alone).
    assert len(decoded[0]) == 1 and sum(text is not None for text in decoded[0][0]) >= 4
    for i, text in transcripts.items():
        words = set(normalise_english(text).split())
        own = set(normalise_english(references[DEMO_UTTERANCES[i]]).split())
        others = [set(normalise_english(references[u]).split()) for u in DEMO_UTTERANCES if u != DEMO_UTTERANCES[i]]
        # Its own sentence's words, more of them than of any other demo sentence's.
        assert len(words & own) > max(len(words & other) for other in others), (i, text)
    assert [transcripts[i] for i in range(6)] != batched_transcripts
    assert word_error_rate(references, {DEMO_UTTERANCES[i]: t for i, t in transcripts.items()}).wer < 60.0


def test_packed_window_without_speech_leaves_its_utterances_to_be_decoded_alone(packed_whisper):
    silence = np.zeros(16000, dtype=np.float32)
    assert packed_whisper._decode_packed([[silence, silence], [silence] * 3]) == [[None, None], [None] * 3]


def test_pack_windows_fills_30_second_windows_in_order():
    second = 16000
    assert pack_windows([]) == []
    assert pack_windows([10 * second, 9 * second, 9 * second, 2 * second]) == [[0, 1, 2], [3]]
    # Exactly full: 3 x 9.33 s plus two gaps of one second.
    third = (WHISPER_WINDOW_SAMPLES - 2 * PACK_GAP_SAMPLES) // 3
    assert pack_windows([third] * 4) == [[0, 1, 2], [3]]
    assert pack_windows([third + 1] * 3) == [[0, 1], [2]]
    assert pack_windows([WHISPER_WINDOW_SAMPLES, 1]) == [[0], [1]]


def word(text, start, end, tokens):
    return {"word": text, "start": start, "end": end, "tokens": tokens}


def test_assign_words_gives_words_to_the_utterance_that_holds_them():
    spans = [(0.0, 2.0), (3.0, 5.0), (6.0, 8.0)]
    words = [word(" The", 0.1, 0.4, [1]), word(" box", 0.4, 1.9, [2]), word(".", 1.9, 3.1, [3]),
             word(" A", 3.1, 4.0, [4]), word(" tusk", 4.0, 5.2, [5]),   # ends in the gap, its middle inside
             word(" is", 6.2, 6.5, [6]), word(" used", 6.5, 7.9, [7]), word(".", 7.9, 8.3, [8])]
    owned, unsure = assign_words(words, spans)
    assert owned == [[1, 2, 3], [4, 5], [6, 7, 8]]
    assert unsure == set()


def test_assign_words_doubts_words_in_the_silence_and_stretched_or_missing_utterances():
    spans = [(0.0, 2.0), (3.0, 5.0), (6.0, 8.0), (9.0, 11.0)]
    # " voiced" lies in the silence between the first two: both are in doubt, the others not.
    owned, unsure = assign_words([word(" fence", 0.5, 1.5, [1]), word(" voiced", 2.2, 2.8, [2]),
                                  word(" the", 3.2, 3.5, [3]), word(" load", 6.5, 7.0, [4]),
                                  word(" now", 9.5, 10.0, [5])], spans)
    assert unsure == {0, 1} and owned[2] == [4] and owned[3] == [5]
    # A word stretched over 3.4 s: the decoder skipped speech; the utterances it covers are in doubt.
    _, unsure = assign_words([word(" The", 0.0, 3.4, [1]), word(" box", 3.4, 4.0, [2]), word(" is", 6.5, 7.0, [3]),
                              word(" here", 9.5, 10.0, [4])], spans)
    assert unsure == {0, 1}
    # An utterance without a word: it and its neighbours (whose words may have been stretched over it).
    _, unsure = assign_words([word(" a", 0.5, 1.0, [1]), word(" b", 3.5, 4.0, [2]), word(" d", 9.5, 10.0, [4])], spans)
    assert unsure == {1, 2, 3}
    # A word past the last utterance.
    _, unsure = assign_words([word(" a", 0.5, 1.0, [1]), word(" b", 3.5, 4.0, [2]), word(" c", 6.5, 7.0, [3]),
                              word(" d", 9.5, 10.0, [4]), word(" e", 11.5, 12.5, [5])], spans)
    assert unsure == {3}


def test_whisper_decoding_setting_is_checked():
    with pytest.raises(ValueError, match="decoding must be one of packed, per-utterance"):
        WhisperASR(decoding="together")


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
    # Every frame's choice leads by far more than a batch shape's rounding: the texts are equal on any CPU.
    import torch

    with torch.inference_mode():
        for signal in equal_length:
            scores = random_model._model.encode_batch(torch.from_numpy(signal)[None], torch.ones(1))[0]
            assert smallest_decision_margin(scores) > 1e-3
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
