"""B3's speaker side on random weights, CPU: our style embedding, WGAN generator and target assignment against
the transcribed recipe code (``tests/reference/toucan/{gst,wgan}.py``) given the same draws, the Silero cut
against the ``silero-vad`` package's own ``get_speech_timestamps`` (its network transcribed in
``tests/reference/silero.py``, with the weights the package ships), and the published files (written as their
publishers' code writes them) read as data, checked key by key."""
from __future__ import annotations

import copy
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers.sttts_speaker_fixtures import (EMBEDDING_FILE, WGAN_FILE, reference_style, write_speaker_release,
                                                  write_wgan)
from tests.reference import silero as silero_ref
from tests.reference.toucan import gst as gst_ref
from tests.reference.toucan import wgan as wgan_ref
from voxanon.models.checkpoints.safe import CheckpointError, UnsafeCheckpointError, built_with_weights
from voxanon.models.checkpoints.sttts_speaker import (build_style, build_vad, build_wgan, convert_style, convert_vad,
                                                      convert_wgan, packaged_vad_path, random_style, random_vad,
                                                      random_wgan, read_style, read_vad, read_wgan)
from voxanon.models.nets.tts import style
from voxanon.models.nets.tts.style import embed_windows, style_embedding, style_window
from voxanon.models.nets.tts.vad import speech_probabilities, speech_segments, speech_span
from voxanon.models.nets.tts.wgan import assign_targets, generate_vectors

pytestmark = pytest.mark.usefixtures("one_torch_thread")

RELATIVE = 1e-5


def relative_error(ours: np.ndarray, reference: np.ndarray) -> float:
    return float(np.max(np.abs(ours - reference)) / np.max(np.abs(reference)))


def utterance(seconds: float, seed: int) -> np.ndarray:
    """Noise-excited tones with silence before and after, at 16 kHz."""
    rng = np.random.default_rng(seed)
    speech = int(seconds * 16000)
    t = np.arange(speech) / 16000
    voiced = (np.sin(2 * np.pi * 140 * t) + 0.3 * np.sin(2 * np.pi * 1130 * t)) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
    voiced = 0.2 * voiced + 0.02 * rng.standard_normal(speech)
    pad = 0.0005 * rng.standard_normal(4000)
    return np.concatenate([pad, voiced, pad]).astype(np.float32)


def demo_utterance(index: int) -> np.ndarray:
    """A demo-corpus utterance at 16 kHz: real speech, with silence the VAD cuts."""
    from voxanon.data_prep.audio import load_audio
    from voxanon.data_prep.corpus import read_data_dir
    from voxanon.data_prep.demo_corpus import demo_corpus_dir

    data = read_data_dir(demo_corpus_dir())
    return load_audio(data.audio_path(sorted(data.utterances)[index]), 16000).samples.astype(np.float32)


def reference_cut(network):
    from silero_vad.utils_vad import get_speech_timestamps

    model = silero_ref.ChunkedModel(network)
    return lambda wave: silero_ref.cut_silence_from_audio(wave, model, get_speech_timestamps)


def reference_extraction(embed, audio: np.ndarray, rng: np.random.Generator, monkeypatch, cut) -> np.ndarray:
    """The recipe's ``normalize_wave`` + ``extract_vector`` (extractor in training mode), its window start drawn
    from ``rng``."""
    monkeypatch.setattr(gst_ref.numpy.random, "randint", lambda low, high: rng.integers(low, high))
    embed.train()
    wave = gst_ref.normalize_wave(torch.from_numpy(audio).unsqueeze(0), 16000, "cpu")
    return gst_ref.extract_vector(embed, wave, cut).numpy()


@pytest.fixture(scope="module")
def vad_state():
    path = packaged_vad_path()
    return convert_vad(read_vad(path), path)[0]


@pytest.fixture(scope="module")
def vad(vad_state):
    return built_with_weights(lambda: build_vad({}), vad_state)


@pytest.fixture(scope="module")
def vad_reference(vad_state):
    network = silero_ref.TinySileroVAD()
    network.load_state_dict(vad_state)
    return network.eval()


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> dict[str, Path]:
    """Tiny files under a recipe ``models_dir``, written once for the module (the tests never change them)."""
    return write_speaker_release(tmp_path_factory.mktemp("release") / "exp" / "sttts_models", size="tiny")


@pytest.fixture(scope="module")
def style_model():
    state, config = random_style("full", 3)
    return built_with_weights(lambda: build_style(config), state)


@pytest.mark.parametrize("source", ["tones 6 s", "demo 0", "demo 1"])
def test_style_embedding_matches_the_recipe_extraction(style_model, vad, vad_reference, source, monkeypatch):
    """Tones (no speech for Silero: nothing cut; longer than the window), and demo speech (silence cut; shorter
    than the window, so tiled)."""
    kind, value = source.split()[:2]
    audio = utterance(float(value), seed=7) if kind == "tones" else demo_utterance(int(value))
    ours = style_embedding(style_model, audio, np.random.default_rng(7), vad)
    reference = reference_extraction(reference_style("full", 3), audio, np.random.default_rng(7), monkeypatch,
                                     reference_cut(vad_reference))
    assert ours.shape == (128,) and ours.dtype == np.float32
    assert relative_error(ours, reference) < RELATIVE


@pytest.mark.parametrize("samples", [255 * 256, 256 * 256, 300 * 256 + 77])
def test_window_edges_match_the_recipe(style_model, samples, monkeypatch):
    """Exactly 256 frames (taken whole), 257 (one start possible) and more, nothing cut."""
    audio = utterance(samples / 16000, seed=samples)[4000:4000 + samples]
    monkeypatch.setattr(style, "speech_span", lambda vad, wave: (0, len(wave)))
    ours = style_embedding(style_model, audio, np.random.default_rng(3), None)
    reference = reference_extraction(reference_style("full", 3), audio, np.random.default_rng(3), monkeypatch,
                                     lambda wave: wave)
    assert relative_error(ours, reference) < RELATIVE


def test_style_embedding_draws_its_window_from_the_given_generator(style_model, vad):
    audio = utterance(6.0, seed=1)
    first = style_embedding(style_model, audio, np.random.default_rng(1), vad)
    assert np.array_equal(first, style_embedding(style_model, audio, np.random.default_rng(1), vad))
    assert not np.allclose(first, style_embedding(style_model, audio, np.random.default_rng(2), vad))


def test_a_batch_of_windows_embeds_each_as_alone(style_model, vad):
    rng = np.random.default_rng(9)
    windows = np.stack([style_window(utterance(seconds, seed=i), rng, vad)
                        for i, seconds in enumerate([0.8, 2.5, 7.0])])
    batched = embed_windows(style_model, windows)
    for window, row in zip(windows, batched):
        assert relative_error(row, embed_windows(style_model, window[np.newaxis])[0]) < 1e-6


@pytest.mark.parametrize("weights", ["packaged", "random"])
def test_vad_probabilities_match_the_package_network_chunk_by_chunk(vad, vad_reference, weights):
    if weights == "random":
        state, _ = random_vad("full", 6)
        vad = built_with_weights(lambda: build_vad({}), state)
        vad_reference = silero_ref.TinySileroVAD()
        vad_reference.load_state_dict(state)
    audio = utterance(2.3, seed=2)[:-100]
    model = silero_ref.ChunkedModel(vad_reference.eval())
    chunks = torch.from_numpy(np.pad(audio, (0, -len(audio) % 512))).split(512)
    reference = np.array([model(chunk, 16000).item() for chunk in chunks])
    ours = speech_probabilities(vad, audio)
    assert ours.shape == reference.shape and np.max(np.abs(ours - reference)) < 1e-5


def test_speech_rules_equal_get_speech_timestamps_on_random_probabilities():
    from silero_vad.utils_vad import get_speech_timestamps_from_probs

    rng = np.random.default_rng(0)
    for trial in range(300):
        chunks = int(rng.integers(1, 120))
        # Runs of speech and silence with probabilities near both thresholds.
        levels = rng.choice([0.05, 0.34, 0.36, 0.49, 0.5, 0.9], size=chunks)
        probabilities = np.repeat(levels, rng.integers(1, 12, size=chunks))[:chunks]
        length = chunks * 512 - int(rng.integers(0, 512))
        expected = get_speech_timestamps_from_probs(list(probabilities), audio_length_samples=length)
        segments = speech_segments(probabilities, length)
        assert len(segments) == len(expected), trial
        if expected:
            with_padding = (int(max(0, segments[0][0] - 480)), int(min(length, segments[-1][1] + 480)))
            assert with_padding == (expected[0]["start"], expected[-1]["end"]), trial


def test_speech_span_is_the_recipe_cut(vad, vad_reference):
    cut = 0
    for index in range(3):
        audio = demo_utterance(index)
        audio = audio / np.abs(audio).max()
        start, end = speech_span(vad, audio)
        reference = reference_cut(vad_reference)(torch.from_numpy(audio)).numpy()
        assert np.array_equal(audio[start:end], reference)
        cut += len(audio) - (end - start)
    assert cut > 4000, "the demo utterances have silence to cut"
    assert speech_span(vad, np.zeros(16000, np.float32)) == (0, 16000)


def test_wgan_vectors_match_the_recipe_generator(tmp_path):
    path = write_wgan(tmp_path / "style-embed_wgan.pt", size="full", seed=4)
    state, config = convert_wgan(read_wgan(path), path)
    model = built_with_weights(lambda: build_wgan(config), state)
    ours = generate_vectors(model, model.mean, model.std, 300, torch.Generator().manual_seed(11))
    reference_generator = wgan_ref.EmbeddingsGenerator(gan_path=path, device=torch.device("cpu"))
    with torch.random.fork_rng():
        torch.manual_seed(11)
        reference = reference_generator.generate_embeddings(n=300).numpy()
    assert ours.shape == (300, 128) and ours.dtype == np.float32
    assert relative_error(ours, reference) < RELATIVE


@pytest.mark.parametrize("spread", [0.0, 3.0])
def test_assign_targets_equals_the_recipe_loop(spread, monkeypatch):
    """``spread`` 0: vectors near the originals, so most draws are refused, runs of 20 tries keep the last;
    3: most first draws accepted. 40 utterances over 9 vectors reset the unused pool several times."""
    rng = np.random.default_rng(5)
    base = rng.standard_normal(16).astype(np.float32)
    vectors = (base + spread * rng.standard_normal((9, 16))).astype(np.float32)
    originals = [(base + 0.3 * rng.standard_normal(16)).astype(np.float32) for _ in range(40)]
    ours = assign_targets(originals, vectors, np.random.default_rng(21))
    draws = np.random.default_rng(21)
    monkeypatch.setattr(wgan_ref.np.random, "choice", draws.choice)
    reference = wgan_ref.select_gan_vectors([torch.from_numpy(o) for o in originals], torch.from_numpy(vectors))
    assert ours == reference
    assert len(set(ours[:9])) == 9


def test_published_files_convert_and_load_strictly(release):
    paths = release
    assert paths["style"].as_posix().endswith(EMBEDDING_FILE.as_posix())
    assert paths["wgan"].as_posix().endswith(WGAN_FILE.as_posix())
    published = torch.load(paths["wgan"], weights_only=True)
    assert {"gen_optimizer_state_dict", "critic_optimizer_state_dict", "iterations"} <= set(published)
    assert published["gen_optimizer_state_dict"]["state"], "the fixture holds a trained optimizer's moments"
    for read, convert, build, random_weights in ((read_style, convert_style, build_style, random_style),
                                                 (read_wgan, convert_wgan, build_wgan, random_wgan)):
        path = paths["style"] if read is read_style else paths["wgan"]
        state, config = convert(read(path), path)
        model = build(config)
        model.load_state_dict(state, strict=True)
        assert config == random_weights("tiny", 0)[1]


def test_full_size_random_weights_have_the_published_shapes():
    style_state, style_config = random_style("full", 0)
    assert style_state["gst.ref_enc.gru.weight_ih_l0"].shape == (384, 256)
    assert style_state["gst.stl.gst_embs"].shape == (10, 32)
    assert style_state["gst.stl.mha.linear_k.weight"].shape == (128, 32)
    wgan_state, _ = random_wgan("full", 0)
    assert wgan_state["fc_out.weight"].shape == (128, 192) and wgan_state["fc.weight"].shape == (256, 16)


class Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.makedirs, (str(self.marker),))


@pytest.mark.parametrize("read", [read_style, read_wgan])
def test_a_reduce_payload_is_refused_and_never_run(tmp_path, read, release):
    checkpoint = torch.load(release["style"], weights_only=True)
    path = tmp_path / "embedding_function.pt"
    checkpoint["default_emb"] = Payload(tmp_path / "ran")
    torch.save(checkpoint, path, pickle_protocol=pickle.DEFAULT_PROTOCOL)
    with pytest.raises(UnsafeCheckpointError, match="os.makedirs|posix.makedirs|makedirs"):
        read(path)
    assert not (tmp_path / "ran").exists()


def test_a_wrong_shape_is_refused_naming_its_key(release):
    style_path = release["style"]
    checkpoint = read_style(style_path)
    checkpoint["style_emb_func"]["gst.stl.mha.linear_v.bias"] = torch.zeros(3)
    with pytest.raises(CheckpointError, match=r"embedding_function\.pt.*gst\.stl\.mha\.linear_v\.bias \(3,\)"):
        convert_style(checkpoint, style_path)
    wgan_path = release["wgan"]
    checkpoint = read_wgan(wgan_path)
    checkpoint["generator_state_dict"]["module.resnet.0.conv_1.weight"] = torch.zeros(1, 1, 3, 3)
    with pytest.raises(CheckpointError, match=r"style-embed_wgan\.pt.*resnet\.0\.conv_1\.weight \(1, 1, 3, 3\)"):
        convert_wgan(checkpoint, wgan_path)


def test_missing_entries_and_keys_are_refused_naming_them(release, tmp_path):
    wgan_path = release["wgan"]
    checkpoint = read_wgan(wgan_path)
    without_std = copy.copy(checkpoint)
    del without_std["std"]
    with pytest.raises(CheckpointError, match="'std'"):
        convert_wgan(without_std, wgan_path)
    del checkpoint["generator_state_dict"]["module.fc_out.bias"]
    with pytest.raises(CheckpointError, match=r"missing fc_out\.bias"):
        convert_wgan(checkpoint, wgan_path)
    with pytest.raises(CheckpointError, match="style_emb_func"):
        convert_style({"model": {}}, tmp_path / "embedding_function.pt")


def test_a_fastspeech2_style_checkpoint_gives_its_embedding_function(release):
    """``run_weight_averaging.save_model_for_use`` writes ``model``, ``default_emb`` and ``style_emb_func`` in one
    file: the embedding function is taken, the rest dropped."""
    checkpoint = read_style(release["style"])
    state, config = convert_style({"model": {"encoder.weight": torch.zeros(2, 2)}, "default_emb": torch.zeros(16),
                                   **checkpoint}, release["style"])
    assert state.keys() == checkpoint["style_emb_func"].keys() and config == random_style("tiny", 0)[1]
