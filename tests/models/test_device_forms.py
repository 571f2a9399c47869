"""The neural stages' device setting and the GPU code paths, run on CPU by the same functions.

No CUDA device is needed: ``encode_on_device``, ``EcapaEncoder.embed_on_device`` and
``Vocoder.synthesise_padded`` are what the content, speaker and vocoder stages call off the CPU, on models
in the direct form (``prepared_for_device``), and compute the same values on it (``cpu:0`` runs that path
on the CPU); only the moves to the device (pinned memory, asynchronous copies) differ on a GPU. Which form
each device gets is checked on the preparation itself (``meta`` stands for a GPU: every tensor moved,
nothing run).
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
from voxanon.models.nets.hifigan import ConditioningLayout, GeneratorConfig, HifiganGenerator, Vocoder
from voxanon.models.nets.hubert import SoftContentConfig, SoftContentEncoder, encode_on_device
from voxanon.models.nets.precision import length_groups, prepared_for_device
from voxanon.models.checkpoints.safe import built_with_weights
from voxanon.pipeline import model_service
from voxanon.pipeline.cli import main
from voxanon.pipeline.model_service import resolve_device
from voxanon.pipeline.systems.ssl_sas.chain import ContentStage, SpeakerStage, VocoderStage
from voxanon.pipeline.systems.ssl_sas.loader import load_model
from voxanon.pipeline.systems.recipes import build_system, device_overrides, load_system_config

from tests.helpers.corpora import make_corpus
from tests.helpers.device_checks import MIN_CONTENT_COSINE, MIN_CONTENT_SNR_DB, MIN_WAVE_SNR_DB, voiced_waves

ROOT = Path(__file__).resolve().parents[2]


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


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    reference = reference.astype(np.float64)
    return float(10 * np.log10(np.sum(reference ** 2) / np.sum((reference - other) ** 2)))


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_device_form_in_lower_precision_agrees_with_float32(tiny_ssl_sas, precision):
    """The direct (GPU) form run on the CPU in a lower precision, through the stages as a device run calls
    them, against the CPU float32 chain: the bounds tests/systems/ssl_sas/test_ssl_sas_precision.py documents for CPU autocast, on
    its utterances (where the direct form's values equal CPU autocast's)."""
    waves = voiced_waves()
    chains = {}
    for device, stage_precision in (("cpu", "float32"), ("cpu:0", precision)):
        batch = [build_system({"name": "t", "stages": []}).new_utterance(f"u{i}", "spk", None, w)
                 for i, w in enumerate(waves)]
        for stage in (ContentStage(precision=stage_precision, device=device), SpeakerStage(device=device)):
            stage.process_batch(batch)
        chains[device] = batch
    content = load_model("ssl-sas", "content", precision, "cpu:0")
    assert content.hubert.encoder.layers[0].feed_forward.output_dense.weight.dtype == getattr(torch, precision)
    for exact, approximate in zip(chains["cpu"], chains["cpu:0"]):
        one, other = exact.features["content"], approximate.features["content"]
        assert other.dtype == np.float32 and other.shape == one.shape and not np.array_equal(one, other)
        cosine = np.sum(one * other, axis=1) / np.linalg.norm(one, axis=1) / np.linalg.norm(other, axis=1)
        assert cosine.min() > MIN_CONTENT_COSINE and snr_db(one, other) > MIN_CONTENT_SNR_DB
        # The speaker encoder runs in float32 everywhere: batched, the same vector to float rounding.
        np.testing.assert_allclose(approximate.features["speaker"], exact.features["speaker"], atol=1e-5, rtol=1e-4)
        approximate.features["content"] = exact.features["content"]  # the vocoder alone is compared below
        frames = 2 * len(exact.features["content"])
        f0 = (120 + 30 * np.sin(np.arange(frames) / 9)).astype(np.float32)
        exact.features["f0"] = approximate.features["f0"] = f0
    for device, stage_precision in (("cpu", "float32"), ("cpu:0", precision)):
        VocoderStage(precision=stage_precision, device=device).process_batch(chains[device])
    for exact, approximate in zip(chains["cpu"], chains["cpu:0"]):
        assert approximate.audio.shape == exact.audio.shape and not np.array_equal(exact.audio, approximate.audio)
        assert snr_db(exact.audio, approximate.audio) > MIN_WAVE_SNR_DB


def test_each_device_gets_its_form(tiny_ssl_sas, monkeypatch):
    from voxanon.models.nets.hifigan import spectral_convolutions

    monkeypatch.setattr(model_service, "_loaded", {})
    # On a GPU ("meta" here: the preparation moves every tensor, and nothing runs), the set's weights go
    # straight into the direct form: no float32 CPU copy is kept, no spectral plan is built.
    for component in ("content", "vocoder"):
        load_model("ssl-sas", component, "bfloat16", "meta")
    assert not [key for key in model_service._loaded if len(key) == 3]
    assert len(spectral_convolutions) == 0
    generator = load_model("ssl-sas", "vocoder", "bfloat16", "meta").generator
    assert not generator.cpu_forms
    convolutions = [m for m in generator.modules() if isinstance(m, (torch.nn.Conv1d, torch.nn.ConvTranspose1d))]
    assert all(c.weight.dtype == torch.bfloat16 and c.weight.is_meta for c in convolutions)
    content = load_model("ssl-sas", "content", "bfloat16", "meta")
    hubert = content.hubert
    assert not hubert.encoder.pos_conv_embed.cpu_forms
    assert hubert.encoder.pos_conv_embed.conv.weight.dtype == torch.bfloat16
    assert hubert.feature_projection.layer_norm.weight.dtype == torch.bfloat16
    # The float32 islands: the residual stream's layer norms, the utterance-wide GroupNorm, the centroids.
    assert hubert.encoder.layers[0].final_layer_norm.weight.dtype == torch.float32
    assert hubert.feature_extractor.conv_layers[0].layer_norm.weight.dtype == torch.float32
    assert content.W.dtype == torch.float32 and content.W.is_meta
    speaker = load_model("ssl-sas", "speaker", device="meta")
    assert all(p.dtype == torch.float32 and p.is_meta for p in speaker.parameters())
    assert speaker.fbank.window.is_meta
    # On the CPU, today's forms (the spectral plans are tested below, on sizes that have them).
    assert load_model("ssl-sas", "vocoder").generator.cpu_forms
    lowered = load_model("ssl-sas", "vocoder", "bfloat16").generator
    assert lowered.cpu_forms and lowered.conv_pre.weight.dtype == torch.bfloat16
    assert load_model("ssl-sas", "content").hubert.encoder.pos_conv_embed.cpu_forms


def test_preparing_for_a_device_copies_and_leaves_the_model_as_it_was():
    model = SoftContentEncoder(SoftContentConfig(hidden_size=16, num_layers=1, num_heads=1, intermediate_size=8,
                                                 conv_channels=8, pos_conv_kernel=8, pos_conv_groups=2))
    assert prepared_for_device(model, "cpu") is model
    prepared = prepared_for_device(model, "cuda", torch.float16, move=False)
    assert prepared is not model and prepared.training is False
    assert model.hubert.encoder.pos_conv_embed.cpu_forms and not prepared.hubert.encoder.pos_conv_embed.cpu_forms
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert prepared.hubert.encoder.layers[0].attention.q_proj.weight.dtype == torch.float16
    # Unconverted tensors (float32 islands, not moved) are shared, not copied.
    assert prepared.W.data_ptr() == model.W.data_ptr()


def spectral_sized_models():
    """A content encoder and a vocoder small enough for a test but wide enough for the CPU's spectral forms
    (a positional kernel of 32; residual kernels of 7 and 11 at 128 channels)."""
    torch.manual_seed(0)
    encoder = SoftContentEncoder(SoftContentConfig(hidden_size=32, num_layers=1, num_heads=1, intermediate_size=16,
                                                   conv_channels=16, pos_conv_kernel=32, pos_conv_groups=4))
    torch.nn.init.normal_(encoder.W)
    layout = ConditioningLayout(content_dim=encoder.config.n_centroids, speaker_dim=4)
    generator = HifiganGenerator(GeneratorConfig(in_channels=layout.channels, upsample_rates=(4, 2),
                                                 upsample_kernel_sizes=(8, 4), upsample_initial_channel=256))
    return encoder.eval(), Vocoder(generator.eval(), layout)


@pytest.mark.usefixtures("one_torch_thread")
def test_the_cpu_gets_spectral_forms_and_the_direct_form_plain_convolutions(monkeypatch):
    """One float32 utterance, where the CPU form takes its FFT and spectral convolutions on channels-last
    activations: the form prepared for CUDA, run on this CPU, takes none of them, with the same outputs."""
    from voxanon.models.nets import hifigan, spectral

    encoder, vocoder = spectral_sized_models()
    wave = voiced(0.5, 3)
    content = torch.from_numpy(encoder.encode([wave])[0])
    item = [(content, torch.full((2 * len(content),), 120.0), torch.randn(4))]
    used = []
    for owner, form in ((spectral.FftConvolution, "__call__"), (hifigan.SpectralConvolution, "__call__")):
        original = getattr(owner, form)
        monkeypatch.setattr(owner, form, lambda self, x, _run=original, _name=owner.__name__: used.append(_name)
                            or _run(self, x))
    expected_content, expected_wave = encoder.encode([wave])[0], vocoder.synthesise(item)[0]
    assert {"FftConvolution", "SpectralConvolution"} <= set(used)  # the CPU form uses both
    direct_encoder = prepared_for_device(encoder, "cuda", move=False)
    direct = Vocoder(prepared_for_device(vocoder.generator, "cuda", move=False), vocoder.layout)
    hifigan.plan_spectral_convolutions(direct.generator)
    assert not any(conv in hifigan.spectral_convolutions for conv in direct.generator.modules())

    def refused(*args, **kwargs):
        raise AssertionError("a CPU-only form ran")

    for name in ("conv2d", "conv_transpose2d"):
        monkeypatch.setattr(hifigan.F, name, refused)
    monkeypatch.setattr(spectral.FftConvolution, "__call__", refused)
    monkeypatch.setattr(hifigan.SpectralConvolution, "__call__", refused)
    np.testing.assert_allclose(encode_on_device(direct_encoder, [wave])[0], expected_content, atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(direct.synthesise(item)[0], expected_wave, atol=1e-5)
    with torch.inference_mode():
        direct_encoder(torch.from_numpy(wave)[None])  # even one utterance on its own: no FFT form
    with pytest.raises(AssertionError, match="CPU-only form"):
        vocoder.synthesise(item)


@pytest.mark.usefixtures("one_torch_thread")
def test_device_paths_queue_every_group_before_reading_a_result(tiny_ssl_sas, monkeypatch):
    """No host wait inside the batch loop: every padded group is queued on the device before the first
    result is copied back (a copy to the host waits for the device)."""
    events = []
    content = load_model("ssl-sas", "content", device="cpu:0")
    speaker = load_model("ssl-sas", "speaker", device="cpu:0")
    vocoder = load_model("ssl-sas", "vocoder", device="cpu:0")
    for model, method in ((content, "forward_batch"), (speaker, "forward_padded"), (vocoder.generator, "forward")):
        original = getattr(model, method)
        monkeypatch.setattr(model, method, lambda *args, _run=original, **kwargs: events.append("run")
                            or _run(*args, **kwargs))
    copy_back = torch.Tensor.cpu
    monkeypatch.setattr(torch.Tensor, "cpu", lambda self, *a, **k: events.append("read") or copy_back(self, *a, **k))
    waves = [voiced(seconds, seed) for seed, seconds in enumerate((0.3, 0.9, 0.35, 0.8, 0.5))]
    encoded = encode_on_device(content, waves)
    items = [(torch.from_numpy(c), torch.full((2 * len(c),), 110.0), torch.zeros(vocoder.layout.speaker_dim))
             for c in encoded]
    for run in (lambda: encode_on_device(content, waves), lambda: speaker.embed_on_device(waves),
                lambda: vocoder.synthesise(items)):
        events.clear()
        run()
        runs = events.count("run")
        assert runs >= 2 and events == ["run"] * runs + ["read"] * (len(events) - runs), events


def test_padded_shapes_come_from_a_grid():
    from voxanon.models.nets.precision import device_groups, padded_length, padded_rows

    rng = np.random.default_rng(0)
    lengths = rng.integers(16000, 35 * 16000, size=2000)
    padded = {padded_length(int(n), 320) for n in lengths}
    assert all(p % 320 == 0 for p in padded) and len(padded) <= 45   # about 8 lengths per octave
    assert all(int(n) <= padded_length(int(n), 320) <= 1.125 * n + 320 for n in lengths)
    assert [padded_rows(n) for n in range(1, 13)] == [1, 2, 3, 4, 6, 6, 8, 8, 12, 12, 12, 12]
    assert padded_rows(33) == 48 and padded_rows(48) == 48 and padded_rows(49) == 64
    groups = device_groups([100, 400, 390, 120, 380, 110, 395], max_items=3)
    assert [(g.indices, g.length, g.rows) for g in groups] == [([1, 6, 2], 416, 3), ([4], 384, 1),
                                                               ([3, 5, 0], 120, 3)]
    assert device_groups([100] * 5, max_items=4)[1].rows == 1 and device_groups([100] * 5)[0].rows == 6


@pytest.mark.usefixtures("one_torch_thread")
def test_batched_speaker_vectors_equal_one_at_a_time(tiny_ssl_sas):
    speaker = load_model("ssl-sas", "speaker")
    waves = [voiced(seconds, seed) for seed, seconds in enumerate((0.9, 0.5, 0.88, 0.3))]
    alone = speaker.embed(waves)
    on_device = load_model("ssl-sas", "speaker", device="cpu:0")
    for max_items in (None, 3):
        np.testing.assert_allclose(on_device.embed_on_device(waves, max_items=max_items), alone, atol=1e-5, rtol=1e-4)
    # Without each item's own frames (reflection at its own end, its own means and attention), padding would show.
    padded = torch.zeros(2, len(waves[0]))
    padded[0], padded[1, :len(waves[3])] = torch.from_numpy(waves[0]), torch.from_numpy(waves[3])
    with torch.inference_mode():
        assert not np.allclose(speaker(padded)[1].numpy(), alone[3], atol=1e-3)


@pytest.mark.parametrize("layout", [ConditioningLayout(content_dim=8, speaker_dim=4),
                                    ConditioningLayout(content_dim=8, speaker_dim=4, standardise_content=True,
                                                       l2_normalise_speaker=True, layer_norm_speaker=False,
                                                       order=("f0", "speaker", "content"))])
def test_conditioning_frames_built_on_the_device_equal_the_cpus(layout):
    torch.manual_seed(0)
    items = [(torch.randn(n, 8) * 3 + 1, torch.rand(2 * n) * 200, torch.randn(4)) for n in (37, 30, 12)]
    frames, lengths = layout.device_batch(items, 80, 4, torch.device("cpu"))
    assert frames.shape == (4, layout.channels, 80) and lengths == [74, 60, 24, 80]
    for row, item in enumerate(items):
        np.testing.assert_allclose(frames[row, :, :lengths[row]], layout.frames(*item), atol=2e-5, rtol=1e-5)
    assert torch.isfinite(frames).all()  # padding rows and frames: finite, masked by the generator
    with pytest.raises(ValueError, match="misaligned conditioning"):
        layout.device_batch([(torch.randn(5, 8), torch.rand(9), torch.randn(4))], 16, 1, torch.device("cpu"))


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
    assert device_overrides(load_system_config("resynth"), "cuda") == [  # F0 stays in the CPU pool
        "content.device=cuda", "speaker.device=cuda", "vocoder.device=cuda"]
    with pytest.raises(VoxanonError, match="no stage with a device setting"):
        device_overrides(load_system_config("b2"), "cuda")


@pytest.mark.usefixtures("one_torch_thread")
def test_load_models_loads_cpu_models_only(tiny_ssl_sas, monkeypatch):
    monkeypatch.setattr(model_service, "_loaded", {})
    ContentStage(device="auto").load_models()
    VocoderStage(device="cuda").load_models()
    assert model_service._loaded == {}  # a GPU model is each worker's to load: CUDA does not survive a fork
    SpeakerStage().load_models()
    VocoderStage().load_models()
    assert sorted(key[-1] for key in model_service._loaded if len(key) == 3) == ["speaker", "vocoder"]


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
    assert [config[name]["device"] for name in ("f0", "content", "speaker", "vocoder")] == ["cpu"] * 4
    assert config["content"]["precision"] == "bfloat16" and "precision" not in config["f0"]
    assert main(["anonymise", "--system", "b2", "--data", str(data.path), "--out", str(out), "--quiet",
                 "--device", "cuda"]) == 2
    assert "no stage with a device setting" in capsys.readouterr().err


@pytest.mark.parametrize("script", ["gpu.py", pytest.param("gpu_pipeline.py", marks=pytest.mark.slow), pytest.param("device.py", marks=pytest.mark.slow)])
def test_device_benchmarks_without_cuda_say_so_in_one_line_and_exit_2(script):
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU visible, also on a machine with one
    run = subprocess.run([sys.executable, "-m", f"benchmarks.{script.removesuffix('.py')}"], capture_output=True,
                         text=True, timeout=120, env=environment, cwd=ROOT)
    assert run.returncode == 2, run.stderr
    assert run.stdout.count("\n") == 1 and run.stderr == ""
    assert f"benchmarks/{script}: no CUDA device" in run.stdout
    assert "no GPU figures were measured; exit code 2" in run.stdout


def test_gpu_benchmark_whose_budget_runs_out_in_its_set_up_reports_partial_and_exits_cleanly(tmp_path):
    """gpu.py's budget counts its own set-up: a budget of 1 s runs out while the random model set is imported (on
    cpu:0, the device code path, so that this runs without a GPU); it says so in one PARTIAL line, exit code 0, and
    leaves no temporary model home."""
    run = subprocess.run([sys.executable, "-m", "benchmarks.gpu", "--device", "cpu:0", "--size", "tiny", "--utterances",
                          "1", "--batch-sizes", "1", "--budget-s", "1"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TMPDIR": str(tmp_path)}, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("GPU stages on the CPU (cpu:0: not GPU figures)") and len(lines) == 2, lines
    assert lines[-1].startswith("benchmarks/gpu.py: PARTIAL: its 1 s budget ran out while importing the random model "
                                "set of resynth"), lines
    assert not list(tmp_path.glob("voxanon-device-*"))


@pytest.mark.usefixtures("one_torch_thread")
def test_b1_embeds_its_set_on_the_runs_device(tiny_ssl_sas, tmp_path, monkeypatch):
    """B1's set embedding (its prepare_set, before the first utterance) follows --device: padded batches on the
    device instead of one utterance at a time on the CPU, the same vectors to float rounding."""
    from voxanon.models.nets.speaker import EcapaEncoder
    from voxanon.pipeline.systems.ssl_sas.corpus_embeddings import embed_data_dirs
    from voxanon.pipeline.feature_cache import ContentCache

    assert "pseudo_speaker.device=cuda" in device_overrides(load_system_config("b1"), "cuda")
    data = make_corpus(tmp_path, n_speakers=2, n_utts=2, seconds=0.6)
    batched = []
    original = EcapaEncoder.embed_on_device
    monkeypatch.setattr(EcapaEncoder, "embed_on_device",
                        lambda self, waves, **options: batched.append(len(waves)) or original(self, waves, **options))
    on_device = embed_data_dirs([data], "ssl-sas", ContentCache(tmp_path / "device"), progress=False, device="cpu:0")
    assert sum(batched) == len(data.wav)
    on_cpu = embed_data_dirs([data], "ssl-sas", ContentCache(tmp_path / "cpu"), progress=False)
    assert sum(batched) == len(data.wav) and on_device.vectors.ids == on_cpu.vectors.ids
    np.testing.assert_allclose(on_device.vectors.matrix, on_cpu.vectors.matrix, atol=1e-5, rtol=1e-4)
