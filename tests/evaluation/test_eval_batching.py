"""The evaluation's models on a device: padded batches by length whose every item equals its one-at-a-time
result (wav2vec2 CTC ASR, SER), each model's weights loaded once, and the device a model runs on.

No GPU here: the padded-batch functions the CUDA path runs are run on the CPU."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.asr_dirs import smallest_decision_margin
from tests.helpers.speechbrain_layouts import trained_looking_batch_norms, write_asr_dir, write_ser_dir
from voxanon.models.recognisers.asr import Wav2Vec2CTCASR, load_asr

pytestmark = pytest.mark.usefixtures("one_torch_thread")

RNG = np.random.default_rng(11)
# How far a padded batch's log-probabilities may stray from each utterance's own (float rounding).
ROUNDING = 1e-5
# Lengths chosen so that padded groups hold several utterances of different lengths (up to 25 % padding).
LENGTHS = (16000, 13000, 12400, 9000, 7200, 6400)
SIGNALS = [(0.3 * np.sin(2 * np.pi * (150 + 170 * k) * np.arange(n) / 16000)
            + 0.05 * RNG.standard_normal(n)).astype(np.float32) for k, n in enumerate(LENGTHS)]


@pytest.fixture(scope="module")
def asr_dir(tmp_path_factory):
    return write_asr_dir(tmp_path_factory.mktemp("asr") / "asr-wav2vec2-librispeech")


@pytest.fixture(scope="module")
def ser_dir(tmp_path_factory):
    return write_ser_dir(tmp_path_factory.mktemp("ser") / "fold_1")


def padded(signals):
    wavs = torch.zeros(len(signals), max(len(s) for s in signals))
    for row, signal in enumerate(signals):
        wavs[row, :len(signal)] = torch.from_numpy(signal)
    return wavs, torch.tensor([len(s) for s in signals])


def test_wav2vec2_ctc_padded_batch_equals_each_utterance_alone(asr_dir):
    asr = load_asr(asr_dir)
    assert isinstance(asr, Wav2Vec2CTCASR)
    wavs, samples = padded(SIGNALS)
    with torch.inference_mode():
        batched = asr._model(wavs, samples)
        frames = asr._model.wav2vec2.frame_counts(samples)
        for row, signal in enumerate(SIGNALS):
            alone = asr._model(torch.from_numpy(signal)[None])[0]
            assert alone.shape[0] == frames[row]
            assert torch.allclose(batched[row, :frames[row]], alone, atol=ROUNDING), \
                float((batched[row, :frames[row]] - alone).abs().max())
            # No frame's choice is within rounding of another: the texts below are equal on any CPU.
            assert smallest_decision_margin(alone) > 2 * ROUNDING
    asr.batch_size = 4
    assert asr.transcribe_many(SIGNALS) == [asr.transcribe(signal) for signal in SIGNALS]


def test_wav2vec2_ctc_loader_loads_the_wav2vec2_weights_once(asr_dir, monkeypatch):
    loads = []
    original = torch.nn.Module.load_state_dict

    def counting(module, state, *args, **kwargs):
        loads.append(sorted(state))
        return original(module, state, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "load_state_dict", counting)
    load_asr(asr_dir)
    wav2vec2_loads = [keys for keys in loads if any("feature_extractor" in key for key in keys)]
    assert len(wav2vec2_loads) == 1, [keys[:2] for keys in wav2vec2_loads]


def test_ser_padded_batches_equal_each_utterance_alone(ser_dir, monkeypatch):
    from voxanon.models.recognisers.ser import EmotionClassifier

    classifier = EmotionClassifier(ser_dir)
    # The SER layout is base-style wav2vec2: a group-norm feature extractor, normalised over each item's frames.
    assert classifier._model.wav2vec2.model.config.feat_extract_norm == "group"
    alone = np.concatenate([classifier.log_probabilities([signal]) for signal in SIGNALS])
    batch_sizes = []
    forward = type(classifier._model).forward

    def counting(module, wav, samples=None):
        batch_sizes.append(wav.shape[0])
        return forward(module, wav, samples)

    monkeypatch.setattr(type(classifier._model), "forward", counting)
    batched = classifier.log_probabilities(SIGNALS)
    assert max(batch_sizes) > 1 and sum(batch_sizes) == len(SIGNALS)
    np.testing.assert_allclose(batched, alone, atol=1e-5)
    assert np.ptp(batched, axis=0).max() > 1e-2  # the scores depend on the input


def write_ecapa_dir(directory):
    """A speechbrain ECAPA model folder (embedding_model.ckpt with ECAPA_TDNN's keys): small, random weights and
    batch-norm statistics, so that a misplaced mask or reflection moves the vectors far past float rounding."""
    from voxanon.models.nets.speaker import EcapaConfig, ecapa_tdnn
    from voxanon.models.checkpoints.ecapa import EMBEDDING_FILE

    config = EcapaConfig(channels=(32, 32, 32, 32, 96), lin_neurons=24, attention_channels=16, se_channels=8,
                         res2net_scale=4)
    torch.manual_seed(5)
    model = trained_looking_batch_norms(ecapa_tdnn(config))
    directory.mkdir(parents=True)
    torch.save(model.state_dict(), directory / EMBEDDING_FILE)
    return directory


def test_ecapa_embedder_on_a_device_runs_padded_batches_equal_to_the_cpu_vectors(tmp_path, monkeypatch):
    from voxanon.models.nets.speaker import EcapaEncoder
    from voxanon.pipeline.evaluation.computations import make_embedder

    spec = f"ecapa:{write_ecapa_dir(tmp_path / 'ecapa')}"
    on_cpu = np.stack(make_embedder({}, spec, device="cpu").compute(SIGNALS))
    batch_sizes = []
    forward_padded = EcapaEncoder.forward_padded

    def counting(encoder, waves, lengths):
        batch_sizes.append(len(lengths))
        return forward_padded(encoder, waves, lengths)

    monkeypatch.setattr(EcapaEncoder, "forward_padded", counting)
    # cpu:0 runs the code path of a GPU (padded groups of similar length) on the CPU.
    on_device = np.stack(make_embedder({}, spec, device="cpu:0").compute(SIGNALS))
    assert max(batch_sizes) > 1
    np.testing.assert_allclose(on_device, on_cpu, rtol=1e-4, atol=1e-5 * np.abs(on_cpu).max())
    assert np.ptp(on_cpu, axis=0).max() > 1e-2


def test_ge2e_embedder_on_a_device_gives_the_cpu_vectors():
    from voxanon.pipeline.evaluation.computations import make_embedder

    on_cpu = np.stack(make_embedder({}, "ge2e", device="cpu").compute(SIGNALS[:3]))
    on_device = np.stack(make_embedder({}, "ge2e", device="cpu:0").compute(SIGNALS[:3]))
    np.testing.assert_allclose(on_device, on_cpu, atol=1e-6)


def test_whisper_runs_on_cuda_only_where_ctranslate2_sees_it(monkeypatch, caplog):
    import ctranslate2

    from voxanon.models.recognisers.asr import whisper_device

    assert whisper_device("cpu") == whisper_device("cpu:0") == ("cpu", 0)
    monkeypatch.setattr(ctranslate2, "get_cuda_device_count", lambda: 0)
    assert whisper_device("cuda") == ("cpu", 0)
    assert "Whisper runs on the CPU" in caplog.text
    monkeypatch.setattr(ctranslate2, "get_cuda_device_count", lambda: 2)
    assert whisper_device("cuda") == ("cuda", 0) and whisper_device("cuda:1") == ("cuda", 1)


def test_whisper_decodings_are_tagged_apart_and_chosen_by_the_protocol(monkeypatch):
    from voxanon.data_prep.errors import VoxanonError
    from voxanon.models.recognisers import asr
    from voxanon.pipeline.evaluation.computations import PACKED_ASR_BATCH, make_transcriber
    from voxanon.pipeline.evaluation.protocols import load_protocol

    assert load_protocol("vpc2022")["asr_decoding"] == "per-utterance"
    protocol = load_protocol("vpc2022")
    loaded = []
    monkeypatch.setattr(asr, "WhisperASR", lambda *args, **options: loaded.append(options) or
                        type("Stub", (), {"transcribe_many": lambda self, waves: ["x"] * len(waves)})())
    before = make_transcriber(protocol["asr"], decoding=protocol["asr_decoding"])
    packed = make_transcriber("whisper-tiny.en", decoding="packed")
    short_window = make_transcriber("whisper-tiny.en", decoding="short-window")
    # Today's decoding keeps its tag, so its cached transcripts stay valid; the others are cached apart.
    assert (before.tag, before.batch_size) == ("whisper-tiny.en", 8)
    assert (packed.tag, packed.batch_size) == ("whisper-tiny.en-packed", PACKED_ASR_BATCH)
    assert (short_window.tag, short_window.batch_size) == ("whisper-tiny.en-short-window", 8)
    assert before.compute([SIGNALS[0]]) == packed.compute([SIGNALS[0]]) == short_window.compute([SIGNALS[0]]) == ["x"]
    assert [options["decoding"] for options in loaded] == ["per-utterance", "packed", "short-window"]
    with pytest.raises(VoxanonError, match="asr_decoding 'joined': expected one of packed, per-utterance"):
        make_transcriber("whisper-tiny.en", decoding="joined")


COMMANDS = {
    "evaluate": ["evaluate", "--orig", "{data}", "--anon", "{data}", "--out", "{out}", "--cache", "{cache}"],
    "benchmark": ["benchmark", "--systems", "b2", "--data", "{data}", "--out", "{out}", "--cache", "{cache}"],
    "challenge": ["challenge", "--system", "b2", "--train", "{data}", "--data", "{data}", "--out", "{out}",
                  "--cache", "{cache}"],
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_cuda_without_a_cuda_device_is_one_error_before_any_work(name, tmp_path, capsys, voxanon_home):
    from tests.helpers.corpora import make_corpus
    from voxanon.pipeline.cli import main

    assert not torch.cuda.is_available()  # this test is about machines without one
    data = make_corpus(tmp_path, n_speakers=4, n_utts=2, seconds=0.3)
    argv = [part.format(data=data.path, out=tmp_path / "out", cache=tmp_path / "cache") for part in COMMANDS[name]]
    assert main(argv + ["--device", "cuda"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "device 'cuda'" in lines[0] and "no CUDA device" in lines[0], lines
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()
    with pytest.raises(SystemExit) as exit_:
        main(argv + ["--device", "gpu"])
    assert exit_.value.code == 2
    assert "expected cpu, cuda, auto, cuda:N or cpu:N" in capsys.readouterr().err


def test_computations_batch_utterances_of_similar_length(tmp_path):
    """Whatever the files' order, each batch a model gets holds utterances of similar length (longest first)."""
    import soundfile

    from voxanon.pipeline.feature_cache import CachedComputation, ContentCache

    files = {}
    for k, n in enumerate((4000, 16000, 4800, 15000, 8000, 9000)):
        files[f"u{k}"] = tmp_path / f"u{k}.wav"
        soundfile.write(files[f"u{k}"], 0.1 * np.ones(n, np.float32), 16000)
    batches = []

    def lengths(waves):
        batches.append([len(w) for w in waves])
        return [np.full(1, len(w)) for w in waves]

    found = CachedComputation("lengths", lengths, batch_size=2, progress=False).run(files, ContentCache(None), "x")
    assert batches == [[16000, 15000], [9000, 8000], [4800, 4000]]
    assert list(found) == list(files) and [int(v[0]) for v in found.values()] == [4000, 16000, 4800, 15000, 8000, 9000]


def test_benchmark_and_challenge_move_a_systems_models_only_where_they_are_not(tmp_path):
    """--device reaches the systems they anonymise with, without touching a CPU run's configuration (its hash
    names the finished outputs and the attacker trained on them)."""
    import yaml

    from voxanon.pipeline.evaluation.computations import anonymisation_device
    from voxanon.pipeline.systems.recipes import load_system_config

    def placed(system: str, device: str, overrides=()):
        return load_system_config(system, list(overrides), device=device, keep_placed=True)

    resynth = load_system_config("resynth")
    assert placed("b2", "cuda") == load_system_config("b2")                          # McAdams: no models
    assert placed("resynth", "cpu") == resynth
    assert placed("resynth", anonymisation_device("auto")) == resynth               # no CUDA here: the CPU
    on_gpu = placed("resynth", "cuda:0")
    stages = [stage for stage in resynth["stages"] if (on_gpu.get(stage) or {}) != (resynth.get(stage) or {})]
    assert {"content", "speaker", "vocoder"} <= set(stages)
    assert all(on_gpu[stage]["device"] == "cuda:0" for stage in stages)
    recipe = tmp_path / "resynth.yaml"  # a recipe whose stages are on the GPU already
    recipe.write_text(yaml.safe_dump(on_gpu))
    assert placed(str(recipe), "cuda:0") == on_gpu
    assert placed(str(recipe), "cpu") == on_gpu | {stage: {**on_gpu[stage], "device": "cpu"} for stage in stages}
    # An explicit --set wins over the device.
    assert placed("resynth", "cuda:0", ["vocoder.device=cpu"])["vocoder"]["device"] == "cpu"
    # Under Ray each actor resolves auto for itself.
    assert anonymisation_device("auto", backend=object()) == "auto"
    assert all(placed("resynth", "auto")[stage]["device"] == "auto" for stage in stages)
