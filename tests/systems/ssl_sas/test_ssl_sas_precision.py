"""The opt-in bfloat16 precision of the content and vocoder stages, on random tiny models."""
from __future__ import annotations

import json

import numpy as np
import pytest

from voxanon.data_prep.errors import VoxanonError
from voxanon.pipeline.cli import main
from voxanon.pipeline.systems.ssl_sas.chain import ContentStage, VocoderStage
from voxanon.pipeline.systems.ssl_sas.loader import load_model
from voxanon.pipeline.systems.recipes import build_system, load_system_config

from tests.helpers.corpora import make_corpus
from tests.helpers.device_checks import MIN_CONTENT_COSINE, MIN_CONTENT_SNR_DB, MIN_WAVE_SNR_DB, voiced_waves

# Measured on these tiny random models (seed 0) and the two utterances below, bfloat16 against
# float32: content per-frame cosine similarity >= 0.99975 and SNR 36.8-37.1 dB (HuBERT-soft units
# also about 37 dB; full-size HuBERT 37 dB); waveform SNR 54 dB (full-size vocoder 38 dB). The bounds
# keep 4-9 dB of margin for other CPUs' kernels. A float32 output fails the "not equal" checks; a
# path that keeps two or more fewer mantissa bits than bfloat16 (about 6 dB per bit) falls below them.


@pytest.fixture
def voxanon_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("VOXANON_HOME", str(home))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert main(["models", "import", "ssl-sas", "--random-init", "--size", "tiny"]) == 0
    return home


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(reference.astype(np.float64) ** 2)
                               / np.sum((reference.astype(np.float64) - other) ** 2)))


def resynth(precision: dict[str, str]):
    overrides = [f"{stage}.precision={value}" for stage, value in precision.items()]
    system = build_system(load_system_config("resynth", overrides))
    batch = [system.new_utterance(f"u{i}", "spk", None, wave) for i, wave in enumerate(voiced_waves())]
    for stage in system.stages:
        stage.process_batch(batch)
    return batch


def test_float32_is_the_plain_model_output(voxanon_home):
    import torch
    import torch.nn.functional as F

    explicit, default = resynth({"content": "float32", "vocoder": "float32"}), resynth({})
    content_model, vocoder = load_model("ssl-sas", "content"), load_model("ssl-sas", "vocoder")
    for utt, same in zip(explicit, default):
        assert np.array_equal(utt.audio, same.audio)
        with torch.inference_mode():
            source = voiced_waves()[int(utt.utt_id[1:])]
            wave = torch.from_numpy(source / np.max(np.abs(source)) * np.float32(0.95))[None]
            x = F.normalize(content_model.features(wave), dim=1)
            logits = F.linear(x, F.normalize(content_model.W, dim=1))
            content = F.pad(logits.transpose(1, 2), (0, 1), mode="replicate").transpose(1, 2)[0].numpy()
            frames = vocoder.layout.frames(torch.from_numpy(content), torch.from_numpy(utt.features["f0"]),
                                           torch.from_numpy(utt.features["speaker"]))
            audio = vocoder.generator(frames[None])[0, 0].numpy()
        assert utt.features["content"].dtype == np.float32
        assert np.array_equal(utt.features["content"], content)
        assert np.array_equal(utt.audio, (audio / np.max(np.abs(audio)) * 0.95).astype(np.float32))


def test_bfloat16_content_is_close_to_float32_but_not_equal(voxanon_home):
    waves = voiced_waves()
    full = ContentStage(precision="float32")
    reduced = ContentStage(precision="bfloat16")
    batches = []
    for stage in (full, reduced):
        batch = [build_system({"name": "t", "stages": []}).new_utterance(f"u{i}", "spk", None, w)
                 for i, w in enumerate(waves)]
        stage.process_batch(batch)
        batches.append(batch)
    for exact, approximate in zip(*batches):
        a, b = exact.features["content"], approximate.features["content"]
        assert b.dtype == np.float32 and b.shape == a.shape == (len(exact.audio) // 320, 200)
        assert not np.array_equal(a, b)
        cosine = np.sum(a * b, axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        assert cosine.min() > MIN_CONTENT_COSINE
        assert snr_db(a, b) > MIN_CONTENT_SNR_DB


def test_bfloat16_vocoder_is_close_to_float32_but_not_equal(voxanon_home):
    exact, approximate = resynth({}), resynth({"vocoder": "bfloat16"})
    for a, b in zip(exact, approximate):
        assert np.array_equal(a.features["content"], b.features["content"])
        assert b.audio.dtype == np.float32 and len(b.audio) == len(a.audio)
        assert not np.array_equal(a.audio, b.audio)
        assert snr_db(a.audio, b.audio) > MIN_WAVE_SNR_DB


def test_lower_precision_leaves_the_cached_model_as_it_was(voxanon_home):
    import torch

    resynth({"content": "bfloat16", "vocoder": "bfloat16"})
    content_model = load_model("ssl-sas", "content")
    assert all(not module._forward_pre_hooks for module in content_model.modules())
    assert all(p.dtype == torch.float32 for p in content_model.parameters())
    assert all(p.dtype == torch.float32 for p in load_model("ssl-sas", "vocoder").generator.parameters())


def test_normalisations_run_in_float32_under_autocast_and_hooks_go_away():
    import torch
    from torch import nn

    from voxanon.models.nets.precision import float32_normalisations

    model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8), nn.Linear(8, 8))
    x = torch.randn(3, 8)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert model[1](model[0](x)).dtype == torch.bfloat16
        with float32_normalisations(model):
            assert model[1](model[0](x)).dtype == torch.float32
        assert model[1](model[0](x)).dtype == torch.bfloat16
    assert not model[1]._forward_pre_hooks


def test_lower_precision_copy_gives_autocast_outputs_bit_for_bit(voxanon_home):
    import torch

    from voxanon.models.nets.hubert import encode_lower_precision
    from voxanon.models.nets.precision import lower_precision_copy

    content = load_model("ssl-sas", "content")
    lowered = load_model("ssl-sas", "content", "bfloat16")
    assert lowered is load_model("ssl-sas", "content", "bfloat16") and lowered is not content
    assert lowered.hubert.encoder.layers[0].attention.q_proj.weight.dtype == torch.bfloat16
    assert lowered.hubert.encoder.layer_norm.weight.dtype == torch.float32 and lowered.W.dtype == torch.float32
    waves = voiced_waves()
    for a, b in zip(encode_lower_precision(content, waves), encode_lower_precision(lowered, waves)):
        assert np.array_equal(a, b)
    generator = load_model("ssl-sas", "vocoder").generator
    frames = torch.randn(1, generator.config.in_channels, 40)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(generator(frames), lower_precision_copy(generator, torch.bfloat16)(frames))
    with pytest.raises(ValueError, match="float32 only"):
        load_model("ssl-sas", "speaker", "bfloat16")


@pytest.mark.parametrize("stage", [ContentStage, VocoderStage])
@pytest.mark.parametrize("value", ["fp16", "bf16", "half", None])
def test_unknown_precision_is_refused(stage, value):
    with pytest.raises(ValueError, match=r"precision must be one of float32, tf32, bfloat16, float16"):
        stage(precision=value)


def test_recipe_override_with_a_bad_precision_names_the_stage():
    with pytest.raises(VoxanonError, match=r"vocoder\.precision must be one of float32, tf32, bfloat16, float16, got 'half'"):
        build_system(load_system_config("resynth", ["vocoder.precision=half"]))


def test_bfloat16_hubert_soft_units_are_close_to_float32(voxanon_home):
    assert main(["models", "import", "hubert-soft", "--random-init", "--size", "tiny"]) == 0
    system = build_system({"name": "t", "stages": []})
    outputs = []
    for precision in ("float32", "bfloat16"):
        batch = [system.new_utterance(f"u{i}", "spk", None, w) for i, w in enumerate(voiced_waves())]
        ContentStage(models="hubert-soft", precision=precision).process_batch(batch)
        outputs.append([u.features["content"] for u in batch])
    for exact, approximate in zip(*outputs):
        assert approximate.dtype == np.float32 and approximate.shape == exact.shape
        assert not np.array_equal(exact, approximate)
        assert snr_db(exact, approximate) > MIN_CONTENT_SNR_DB, snr_db(exact, approximate)


def test_anonymise_precision_option_sets_every_stage_that_has_one(voxanon_home, tmp_path, capsys):
    data = make_corpus(tmp_path, n_speakers=1, n_utts=2, seconds=0.5)
    out = tmp_path / "out"
    assert main(["anonymise", "--system", "resynth", "--data", str(data.path), "--out", str(out), "--workers", "1",
                 "--quiet", "--precision", "bfloat16", "--set", "vocoder.precision=float32"]) == 0
    config = json.loads((out / f"{data.name}_resynth" / "run.json").read_text())["config"]
    assert config["content"]["precision"] == "bfloat16"
    assert config["vocoder"]["precision"] == "float32"  # an explicit --set wins
    assert "precision" not in config["speaker"] and "precision" not in config["f0"]
    assert main(["anonymise", "--system", "b2", "--data", str(data.path), "--out", str(out), "--quiet",
                 "--precision", "bfloat16"]) == 2
    assert "no stage with a precision setting" in capsys.readouterr().err


@pytest.mark.parametrize("precision, tf32", [("float32", False), ("tf32", True), ("bfloat16", False)])
def test_each_stage_sets_cudas_float32_products_for_its_precision(voxanon_home, monkeypatch, precision, tf32):
    """float32 is strict FP32 on CUDA (torch's own defaults compute cuDNN convolutions in TF32); tf32 is float32
    weights with TF32 products. The switches are read while each device stage runs its model (``cpu:0``: the
    device path on the CPU, where they change nothing)."""
    import torch

    from voxanon.models.nets import hifigan, hubert, speaker

    seen = {}

    def recording(name, original):
        def run(*args, **kwargs):
            seen[name] = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
            return original(*args, **kwargs)
        return run

    monkeypatch.setattr(hubert, "encode_on_device", recording("content", hubert.encode_on_device))
    monkeypatch.setattr(speaker.EcapaEncoder, "embed_on_device",
                        recording("speaker", speaker.EcapaEncoder.embed_on_device))
    monkeypatch.setattr(hifigan.Vocoder, "synthesise", recording("vocoder", hifigan.Vocoder.synthesise))
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True  # a process default to undo
    overrides = [f"{stage}.device=cpu:0" for stage in ("content", "speaker", "vocoder")]
    overrides += [f"{stage}.precision={precision}" for stage in ("content", "vocoder")]
    system = build_system(load_system_config("resynth", overrides))
    batch = [system.new_utterance(f"u{i}", "spk", None, wave) for i, wave in enumerate(voiced_waves())]
    for stage in system.stages:
        stage.process_batch(batch)
    assert seen == {"content": (tf32, tf32), "speaker": (False, False), "vocoder": (tf32, tf32)}
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32  # restored after each stage
    assert all(np.isfinite(utt.audio).all() for utt in batch)
