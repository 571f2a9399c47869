"""B3's phone recogniser against ESPnet's Speech2Text (the transcription in tests/reference/espnet_asr.py; ESPnet
itself where it is installed), on the release zip as espnet_model_zoo packs it, with random weights."""
import pickle

import numpy as np
import pytest
import torch

from tests.helpers.sttts_asr_fixtures import MODEL_NAME, sentencepiece_model, state_bytes, write_asr_zip
from tests.reference.espnet_asr import Speech2Text
from voxanon.models.checkpoints.safe import CheckpointError, UnsafeCheckpointError
from voxanon.models.checkpoints.sttts_asr import build_asr, convert_asr, mel_matrix, random_asr, read_asr
from voxanon.models.nets.tts.recogniser import (RecogniserConfig, UtteranceTooShortError, decode_pieces, encode, fbank, recognise,
                                                 tokens_to_text)

SECONDS = (0.55, 0.8, 0.35, 1.0, 0.65)


def utterances(seed: int = 0) -> list[np.ndarray]:
    """Five voiced-like signals with noise, of different lengths."""
    rng = np.random.default_rng(seed)
    signals = []
    for index, seconds in enumerate(SECONDS):
        t = np.arange(int(16000 * seconds)) / 16000
        tone = 0.3 * np.sin(2 * np.pi * (120 + 40 * index) * t * (1 + 0.3 * np.sin(3 * t)))
        signals.append((tone + rng.normal(0, 0.05, t.size)).astype(np.float32))
    return signals


def models(path):
    checkpoint = read_asr(path)
    state, config = convert_asr(checkpoint, path)
    ours = build_asr(config)
    ours.load_state_dict(state)
    return ours.eval(), Speech2Text(config, state, checkpoint["bpe_model"])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch.set_num_threads(1)
    return models(write_asr_zip(tmp_path_factory.mktemp("asr") / "asr_branchformer_tts-phn_en.zip", "tiny", seed=3))


def test_fbank_bit_identical(tiny):
    ours, reference = tiny
    for audio in utterances():
        expected, _ = reference.features(torch.tensor(audio))
        assert torch.equal(fbank(ours, audio), expected)


def test_encoder_within_1e5(tiny):
    ours, reference = tiny
    for audio in utterances():
        expected = reference.encode(torch.tensor(audio))[0]
        assert torch.allclose(encode(ours, audio), expected, rtol=0, atol=1e-5)


def test_best_hypothesis_identical(tiny):
    ours, reference = tiny
    for audio in utterances():
        text, _, token_int, _ = reference(torch.tensor(audio))[0]
        assert recognise(ours, audio) == "~" + text + "~#"


def test_decode_pieces_is_sentencepieces():
    """Speech2Text's bpe text is sentencepiece's DecodePieces; ours needs no sentencepiece model at run time."""
    import sentencepiece
    _, config = random_asr("tiny", 0)
    processor = sentencepiece.SentencePieceProcessor(model_proto=sentencepiece_model(config["token_list"]))
    pieces = [token for token in config["token_list"][1:-1]]
    rng = np.random.default_rng(1)
    cases = [["\u2581", "\u2581"], ["<unk>", pieces[2]], ["\u2581", "<unk>"], [], pieces]
    cases += [list(rng.choice(pieces, size=int(rng.integers(1, 12)))) for _ in range(50)]
    for case in cases:
        assert decode_pieces(case) == processor.DecodePieces(case), case


def test_char_and_phone_tokens_join_as_espnet_does():
    _, config = random_asr("tiny", 0)
    config.update(token_list=["<blank>", "<unk>", "a", "<space>", "ˈb", "<sos/eos>"])
    assert tokens_to_text(RecogniserConfig.from_dict({**config, "token_type": "char"}), [2, 3, 4]) == "a ˈb"
    assert tokens_to_text(RecogniserConfig.from_dict({**config, "token_type": "phn"}), [2, 3, 4]) == "a<space>ˈb"


class _Payload:
    def __reduce__(self):
        return (exec, ("import pathlib; pathlib.Path('PWNED').write_text('ran')",))


def test_reduce_payload_refused_never_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    state, _ = random_asr("tiny", 0)
    path = write_asr_zip(tmp_path / "asr.zip", model_bytes=pickle.dumps({**state, "evil": _Payload()}, protocol=2))
    with pytest.raises(UnsafeCheckpointError, match=MODEL_NAME):
        read_asr(path)
    torch_zip = state_bytes({**state, "evil": _Payload()})
    with pytest.raises(UnsafeCheckpointError, match="asr2.zip"):
        read_asr(write_asr_zip(tmp_path / "asr2.zip", model_bytes=torch_zip))
    assert not (tmp_path / "PWNED").exists()


def test_wrong_shape_refused_naming_key(tmp_path):
    key = "encoder.encoders.1.cgmlp.csgu.conv.weight"
    path = write_asr_zip(tmp_path / "asr.zip", state_override={key: torch.zeros(3, 1, 7)})
    with pytest.raises(CheckpointError, match=f"{key}.*asr.zip|asr.zip.*{key}"):
        convert_asr(read_asr(path), path)


def test_missing_and_training_variant_refused(tmp_path):
    state, _ = random_asr("tiny", 0)
    del state["decoder.output_layer.bias"]
    path = write_asr_zip(tmp_path / "asr.zip", model_bytes=state_bytes(state))
    with pytest.raises(CheckpointError, match="missing decoder.output_layer.bias"):
        convert_asr(read_asr(path), path)
    checkpoint = read_asr(write_asr_zip(tmp_path / "ok.zip"))
    checkpoint["config"]["encoder_conf"]["merge_method"] = "learned_ave"
    with pytest.raises(CheckpointError, match="merge_method"):
        convert_asr(checkpoint, tmp_path / "ok.zip")


def test_too_short_utterance_is_named(tiny):
    ours, _ = tiny
    with pytest.raises(UtteranceTooShortError, match="feature frames"):
        recognise(ours, np.zeros(800, dtype=np.float32))


@pytest.mark.slow
def test_mel_matrix_is_librosas():
    import librosa
    _, config = random_asr("tiny", 0)
    expected = librosa.filters.mel(sr=16000, n_fft=512, n_mels=80, fmin=0, fmax=8000, htk=False)
    assert torch.equal(mel_matrix(RecogniserConfig.from_dict(config)), torch.from_numpy(expected.T).float())


@pytest.mark.slow
def test_full_size_parity(tmp_path):
    """The published sizes (18 Branchformer blocks, 512-d, cgMLP 3072; 6 decoder blocks): the same checks."""
    torch.set_num_threads(1)
    ours, reference = models(write_asr_zip(tmp_path / "asr.zip", "full", seed=3))
    for audio in utterances(1):
        speech = torch.tensor(audio)
        expected_features, _ = reference.features(speech)
        assert torch.equal(fbank(ours, audio), expected_features)
        assert torch.allclose(encode(ours, audio), reference.encode(speech)[0], rtol=0, atol=1e-5)
        assert recognise(ours, audio) == "~" + reference(speech)[0][0] + "~#"
