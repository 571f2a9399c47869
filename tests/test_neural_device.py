"""The neural stages' device setting and the GPU code paths, run on CPU by the same functions.

No CUDA device is needed: ``encode_on_device`` and ``Vocoder.synthesise_padded`` are what the content
and vocoder stages call off the CPU, and compute the same values on it; only the ``.to(device)``
and autocast device-type lines differ on a GPU.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from voxanon.data_prep.errors import VoxanonError
from voxanon.models.hifigan import ConditioningLayout, GeneratorConfig, HifiganGenerator, Vocoder
from voxanon.models.hubert import SoftContentEncoder, encode_on_device
from voxanon.models.precision import built_with_weights, length_groups
from voxanon.pipeline import neural_stages
from voxanon.pipeline.cli import main
from voxanon.pipeline.neural_stages import ContentStage, SpeakerStage, VocoderStage, load_model, resolve_device
from voxanon.pipeline.runner import Job, _parallel_batches
from voxanon.pipeline.systems import build_system, device_overrides, load_system_config

from tests.conftest import make_corpus

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def tiny_ssl_sas(voxanon_home):
    assert main(["models", "import", "ssl-sas", "--random-init", "--size", "tiny"]) == 0
    return voxanon_home


def voiced(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000) // 320 * 320) / 16000
    wave = np.sin(2 * np.pi * np.cumsum(110 + 30 * np.sin(2 * np.pi * t)) / 16000) + 0.05 * rng.standard_normal(len(t))
    return (wave / np.max(np.abs(wave)) * 0.95).astype(np.float32)


def test_length_groups_sort_longest_first_and_bound_padding_and_size():
    lengths = [100, 400, 390, 120, 380, 110, 395]
    groups = length_groups(lengths, max_items=2)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert groups == [[1, 6], [2, 4], [3, 5], [0]]
    assert length_groups(lengths) == [[1, 6, 2, 4], [3, 5, 0]]  # 100 is within 25 % of 120
    assert length_groups([], 4) == []
    with pytest.raises(ValueError, match="max_items"):
        length_groups([1], 0)


@pytest.mark.usefixtures("one_torch_thread")
def test_batched_content_equals_one_utterance_at_a_time(tiny_ssl_sas):
    encoder = load_model("ssl-sas", "content")
    assert isinstance(encoder, SoftContentEncoder)
    waves = [voiced(seconds, seed) for seed, seconds in enumerate((0.9, 0.5, 0.88, 0.3))]
    alone = encoder.encode(waves)
    for max_items in (None, 3):
        batched = encode_on_device(encoder, waves, max_items=max_items)
        for one, other in zip(alone, batched):
            assert other.shape == one.shape and other.dtype == np.float32
            np.testing.assert_allclose(other, one, atol=2e-5, rtol=1e-4)
    # Without the per-item GroupNorm statistics, padding would show: the shortest item changes.
    padded = torch.zeros(2, len(waves[0]))
    padded[0], padded[1, :len(waves[3])] = torch.from_numpy(waves[0]), torch.from_numpy(waves[3])
    with torch.inference_mode():
        plain = encoder.hubert(padded)[1, :len(alone[3]) - 1]
        own = encoder.features(torch.from_numpy(waves[3])[None])[0]
    assert not torch.allclose(plain, own, atol=1e-3)


@pytest.mark.usefixtures("one_torch_thread")
def test_batched_content_under_lower_precision_is_close_to_float32(tiny_ssl_sas):
    encoder = load_model("ssl-sas", "content", "bfloat16")
    waves = [voiced(0.6, 0), voiced(0.55, 1)]
    exact = load_model("ssl-sas", "content").encode(waves)
    for one, other in zip(exact, encode_on_device(encoder, waves, torch.bfloat16)):
        cosine = np.sum(one * other, axis=1) / np.linalg.norm(one, axis=1) / np.linalg.norm(other, axis=1)
        assert not np.array_equal(one, other) and cosine.min() > 0.999


@pytest.mark.usefixtures("one_torch_thread")
def test_padded_vocoder_batches_equal_windowed_one_at_a_time():
    torch.manual_seed(0)
    config = GeneratorConfig(in_channels=ConditioningLayout(content_dim=8, speaker_dim=4).channels,
                             upsample_rates=(4, 4, 2, 5), upsample_kernel_sizes=(8, 8, 4, 11),
                             upsample_initial_channel=16)
    vocoder = Vocoder(HifiganGenerator(config).eval(), ConditioningLayout(content_dim=8, speaker_dim=4))
    items = [(torch.randn(n, 8), torch.rand(2 * n) * 200, torch.randn(4)) for n in (37, 150, 12, 140)]
    alone = vocoder.synthesise(items)
    for max_items in (None, 2):
        padded = vocoder.synthesise_padded(items, max_items=max_items)
        for one, other in zip(alone, padded):
            assert other.shape == one.shape == (one.shape[0],)
            np.testing.assert_allclose(other, one, atol=1e-5)


def test_device_setting_is_checked_and_auto_resolves_where_it_runs(monkeypatch):
    for stage in (ContentStage, SpeakerStage, VocoderStage):
        assert stage(device="cuda").device == "cuda"
        with pytest.raises(ValueError, match=rf"{stage.name}\.device must be one of cpu, cuda, auto"):
            stage(device="gpu")
    with pytest.raises(VoxanonError, match=r"content\.device must be one of"):
        build_system(load_system_config("resynth", ["content.device=tpu"]))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == "cuda" and resolve_device("cpu") == "cpu"


def test_device_overrides_name_every_stage_that_has_the_setting():
    assert device_overrides(load_system_config("resynth"), "cuda") == [
        "content.device=cuda", "speaker.device=cuda", "vocoder.device=cuda"]
    with pytest.raises(VoxanonError, match="no stage with a device setting"):
        device_overrides(load_system_config("b2"), "cuda")


@pytest.mark.usefixtures("one_torch_thread")
def test_load_models_loads_cpu_models_only(tiny_ssl_sas, monkeypatch):
    monkeypatch.setattr(neural_stages, "_loaded", {})
    ContentStage(device="auto").load_models()
    VocoderStage(device="cuda").load_models()
    assert neural_stages._loaded == {}  # a GPU model is each worker's to load: CUDA does not survive a fork
    SpeakerStage().load_models()
    VocoderStage().load_models()
    assert sorted(key[-1] for key in neural_stages._loaded if len(key) == 3) == ["speaker", "vocoder"]


def test_models_load_without_random_initialisation_and_refuse_missing_weights():
    state = {"weight": torch.full((3, 2), 0.5), "bias": torch.zeros(3)}
    layer = built_with_weights(lambda: torch.nn.Linear(2, 3), state)
    assert layer.weight.data_ptr() == state["weight"].data_ptr() and not layer.training

    class WithBuffer(torch.nn.Linear):
        def __init__(self):
            super().__init__(2, 3)
            self.register_buffer("scale", torch.ones(3), persistent=False)

    with pytest.raises(RuntimeError, match=r"no weights given for \['scale'\]"):
        built_with_weights(WithBuffer, state)


def test_parallel_batches_give_every_worker_several_and_keep_every_job():
    cpu = load_system_config("resynth")
    jobs = [Job(f"u{i}", "s", None, f"{i}.wav", f"o{i}.wav") for i in range(20)]
    batches = [jobs[i:i + 4] for i in range(0, 20, 4)]
    assert _parallel_batches(batches, 2, cpu) == [[job] for job in jobs]
    many = [Job(f"u{i}", "s", None, f"{i}.wav", f"o{i}.wav") for i in range(200)]
    split = _parallel_batches([many[i:i + 4] for i in range(0, 200, 4)], 2, cpu)
    assert [len(b) for b in split] == [4] * 50 and [j for b in split for j in b] == many
    # Padded device batches equal one at a time only to float rounding: the user's batches stay as they are,
    # so the output does not depend on the worker count or the backend.
    on_gpu = load_system_config("resynth", device_overrides(cpu, "cuda"))
    assert _parallel_batches(batches, 2, on_gpu) == batches
    assert _parallel_batches(batches, 2, load_system_config("resynth", device_overrides(cpu, "auto"))) == batches


def test_weights_keep_the_modules_dtype():
    state = {"weight": torch.ones(3, 2, dtype=torch.float16), "bias": torch.zeros(3, dtype=torch.float16)}
    layer = built_with_weights(lambda: torch.nn.Linear(2, 3), state)
    assert layer.weight.dtype == torch.float32 and layer.bias.dtype == torch.float32
    assert layer(torch.ones(1, 2)).dtype == torch.float32


def test_anonymise_device_option_sets_every_stage_that_has_one(tiny_ssl_sas, tmp_path, capsys):
    data = make_corpus(tmp_path, n_speakers=1, n_utts=2, seconds=0.5)
    out = tmp_path / "out"
    assert main(["anonymise", "--system", "resynth", "--data", str(data.path), "--out", str(out), "--workers", "1",
                 "--quiet", "--device", "cpu", "--precision", "bfloat16"]) == 0
    config = json.loads((out / f"{data.name}_resynth" / "run.json").read_text())["config"]
    assert [config[name]["device"] for name in ("content", "speaker", "vocoder")] == ["cpu"] * 3
    assert config["content"]["precision"] == "bfloat16" and "device" not in config["f0"]
    assert main(["anonymise", "--system", "b2", "--data", str(data.path), "--out", str(out), "--quiet",
                 "--device", "cuda"]) == 2
    assert "no stage with a device setting" in capsys.readouterr().err


def test_gpu_benchmark_without_cuda_says_so_in_one_line_and_exits_2():
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU visible, also on a machine with one
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py")], capture_output=True, text=True,
                         timeout=120, env=environment)
    assert run.returncode == 2, run.stderr
    assert run.stdout.count("\n") == 1 and run.stderr == ""
    assert "no CUDA device" in run.stdout and "no GPU figures were measured; exit code 2" in run.stdout
