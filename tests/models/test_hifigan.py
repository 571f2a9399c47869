"""HiFi-GAN generator: parity with the jik876 reference, batching, conditioning, g_* checkpoints."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.reference.hifigan import Generator as ReferenceGenerator
from voxanon.models.checkpoints.ssl_sas import split_ssl_sas_generator
from voxanon.models.checkpoints.safe import CheckpointError, fold_weight_norm, safe_load
from voxanon.models.nets.hifigan import (CPU_WINDOW_FRAMES, ConditioningLayout, GeneratorConfig, HifiganGenerator,
                                         SpectralConvolution, Vocoder, plan_spectral_convolutions,
                                         receptive_field_frames, spectral_convolutions, synthesis_windows)

SSL_SAS = {"resblock": "1", "upsample_rates": [5, 4, 2, 2, 2], "upsample_kernel_sizes": [11, 8, 4, 4, 4],
           "upsample_initial_channel": 512, "resblock_kernel_sizes": [3, 7, 11],
           "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]], "model_in_dim": 393}
TINY_SSL_SAS = {**SSL_SAS, "upsample_initial_channel": 32}
TINY_V1_MEL = {"resblock": "1", "upsample_rates": [8, 8, 2, 2], "upsample_kernel_sizes": [16, 16, 4, 4],
               "upsample_initial_channel": 32, "resblock_kernel_sizes": [3, 7, 11],
               "resblock_dilation_sizes": [[1, 3, 5]] * 3, "num_mels": 80}
TINY_V3_MEL = {"resblock": "2", "upsample_rates": [8, 8, 4], "upsample_kernel_sizes": [16, 16, 8],
               "upsample_initial_channel": 32, "resblock_kernel_sizes": [3, 5, 7],
               "resblock_dilation_sizes": [[1, 2], [2, 6], [3, 12]], "num_mels": 80}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def reference_and_ours(h: dict, seed: int = 0):
    torch.manual_seed(seed)
    in_channels = h.get("model_in_dim", h.get("num_mels"))
    reference = ReferenceGenerator(h, in_channels).eval()
    for name, parameter in reference.named_parameters():
        if name.endswith("weight_g"):
            parameter.data.uniform_(0.5, 1.5)
        elif name.endswith("bias"):
            parameter.data.normal_(0, 0.1)
    ours = HifiganGenerator(GeneratorConfig.from_dict(h)).eval()
    ours.load_state_dict(fold_weight_norm(reference.state_dict()))
    return reference, ours


@pytest.mark.parametrize("h", [TINY_V1_MEL, TINY_V3_MEL, TINY_SSL_SAS], ids=["v1-mel", "v3-mel", "ssl-sas"])
def test_matches_reference_generator(h):
    reference, ours = reference_and_ours(h)
    x = torch.randn(2, ours.config.in_channels, 24)
    with torch.no_grad():
        expected = reference(x)
        got = ours(x)
    assert got.shape == (2, 1, 24 * ours.config.hop_length)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert expected.abs().max() > 1e-3


def test_reference_remove_weight_norm_gives_our_weights():
    reference, ours = reference_and_ours(TINY_SSL_SAS)
    reference.remove_weight_norm()
    for key, value in reference.state_dict().items():
        torch.testing.assert_close(ours.state_dict()[key], value, atol=1e-6, rtol=1e-5)


def test_full_size_ssl_sas_generator_has_published_parameter_count():
    generator = HifiganGenerator(GeneratorConfig.from_dict(SSL_SAS))
    n_parameters = sum(p.numel() for p in generator.parameters())
    assert round(n_parameters / 1e6, 2) == 14.16
    assert generator.config.hop_length == 160
    assert [up.out_channels for up in generator.ups] == [256, 128, 64, 32, 16]


def test_batched_padded_items_equal_one_at_a_time():
    _, ours = reference_and_ours(TINY_SSL_SAS, seed=1)
    lengths = [30, 17, 9]
    items = [torch.randn(393, n) for n in lengths]
    padded = torch.zeros(3, 393, 30)
    for i, item in enumerate(items):
        padded[i, :, :item.shape[1]] = item
    with torch.no_grad():
        batched = ours(padded, torch.tensor(lengths))
        for i, item in enumerate(items):
            alone = ours(item[None])
            torch.testing.assert_close(batched[i:i + 1, :, :alone.shape[-1]], alone, atol=1e-6, rtol=0)
        unmasked = ours(padded)
    # Without the length mask the padding leaks into the end of the shorter items.
    assert (unmasked[2, 0, :9 * 160] - batched[2, 0, :9 * 160]).abs().max() > 1e-4


def test_weight_norm_round_trip_keeps_the_function():
    _, ours = reference_and_ours(TINY_V1_MEL)
    x = torch.randn(1, 80, 10)
    with torch.no_grad():
        before = ours(x)
        ours.apply_weight_norm()
        assert any("parametrizations.weight.original0" in k for k in ours.state_dict())
        during = ours(x)
        ours.remove_weight_norm()
        after = ours(x)
    torch.testing.assert_close(during, before, atol=1e-6, rtol=0)
    torch.testing.assert_close(after, before, atol=1e-6, rtol=0)
    assert set(ours.state_dict()) == set(HifiganGenerator(ours.config).state_dict())


def ssl_sas_frames_by_hand(content, f0, speaker):
    """SSL-SAS gen_vpc for a batch of one: tensor-wide layer norm, repeat ×2, [content | f0 | xv]."""
    x = F.layer_norm(content[None].transpose(1, 2), (1, content.shape[1], content.shape[0]))
    xv = F.layer_norm(speaker[None], (1, speaker.shape[0]))
    x = x.unsqueeze(3).repeat(1, 1, 1, 2).view(1, content.shape[1], -1)
    xv = xv.unsqueeze(2).repeat(1, 1, f0.shape[0])
    return torch.cat([x, f0[None, None], xv], dim=1)[0]


def test_conditioning_matches_ssl_sas_assembly():
    layout = ConditioningLayout()
    content, speaker = torch.randn(15, 200) * 3 + 1, torch.randn(192) * 0.1 + 2
    f0 = torch.tensor([0.0, 120.0] * 15)
    frames = layout.frames(content, f0, speaker)
    assert frames.shape == (393, 30)
    torch.testing.assert_close(frames, ssl_sas_frames_by_hand(content, f0, speaker))
    np.testing.assert_array_equal(frames[200].numpy(), f0.numpy())
    torch.testing.assert_close(frames[:200, 0], frames[:200, 1])


def test_conditioning_is_per_item_in_a_batch():
    layout = ConditioningLayout()
    items = [(torch.randn(10, 200), torch.rand(20) * 200, torch.randn(192)),
             (torch.randn(4, 200) * 5, torch.rand(8) * 200, torch.randn(192) * 5)]
    frames, lengths = layout.batch(items)
    assert frames.shape == (2, 393, 20) and lengths.tolist() == [20, 8]
    for i, item in enumerate(items):
        torch.testing.assert_close(frames[i, :, :lengths[i]], ssl_sas_frames_by_hand(*item))
    assert not frames[1, :, 8:].any()


def test_conditioning_layout_options():
    layout = ConditioningLayout(content_dim=256, speaker_dim=16, order=("f0", "speaker", "content"),
                                layer_norm_content=False, layer_norm_speaker=False)
    assert layout.channels == 273
    content, f0, speaker = torch.randn(5, 256), torch.rand(10), torch.randn(16)
    frames = layout.frames(content, f0, speaker)
    torch.testing.assert_close(frames[0], f0)
    torch.testing.assert_close(frames[1:17, 3], speaker)
    torch.testing.assert_close(frames[17:, 9], content[4])
    assert ConditioningLayout.from_dict(layout.to_dict()) == layout


def test_misaligned_streams_are_refused():
    with pytest.raises(ValueError, match="misaligned"):
        ConditioningLayout().frames(torch.randn(10, 200), torch.zeros(19), torch.randn(192))
    with pytest.raises(ValueError, match="order"):
        ConditioningLayout(order=("content", "f0"))
    with pytest.raises(ValueError, match="input channels"):
        Vocoder(HifiganGenerator(GeneratorConfig(in_channels=80, upsample_initial_channel=32)))


def test_vocoder_output_length_is_hop_times_f0_frames():
    _, generator = reference_and_ours(TINY_SSL_SAS)
    vocoder = Vocoder(generator)
    items = [(torch.randn(n, 200), torch.rand(2 * n) * 200, torch.randn(192)) for n in (12, 5)]
    waves = vocoder.synthesise(items)
    assert [len(w) for w in waves] == [12 * 320, 5 * 320]
    alone = vocoder.synthesise(items[1:])[0]
    np.testing.assert_allclose(waves[1], alone, atol=1e-5)


def test_vocoder_equals_reference_generator_on_each_utterance():
    reference, generator = reference_and_ours(TINY_SSL_SAS, seed=4)
    vocoder = Vocoder(generator)
    items = [(torch.randn(n, 200), torch.rand(2 * n) * 200, torch.randn(192)) for n in (9, 14, 6)]
    waves = vocoder.synthesise(items)
    for item, wave in zip(items, waves):
        with torch.no_grad():
            expected = reference(vocoder.layout.frames(*item)[None])[0, 0].numpy()
        np.testing.assert_allclose(wave, expected, atol=1e-5, rtol=0)


def test_g_checkpoint_with_submodels_loads_and_splits(tmp_path):
    reference, _ = reference_and_ours(TINY_SSL_SAS, seed=3)
    state = dict(reference.state_dict())
    state["latent_encoder.W"] = torch.randn(200, 768)
    state["latent_encoder.ssl_model.encoder.layer_norm.weight"] = torch.ones(768)
    state["xv_model.fc.conv.weight"] = torch.randn(192, 3072, 1)
    path = tmp_path / "g_00100000"
    torch.save({"generator": state}, path)
    parts = split_ssl_sas_generator(safe_load(path))
    assert set(parts["content"]) == {"W", "ssl_model.encoder.layer_norm.weight"}
    assert set(parts["speaker"]) == {"fc.conv.weight"}
    generator = HifiganGenerator(GeneratorConfig.from_dict(TINY_SSL_SAS)).eval()
    generator.load_state_dict(parts["generator"])
    x = torch.randn(1, 393, 8)
    with torch.no_grad():
        torch.testing.assert_close(generator(x), reference(x), atol=1e-5, rtol=0)


def test_broken_weight_norm_pairs_are_named():
    with pytest.raises(CheckpointError, match="conv_pre"):
        fold_weight_norm({"conv_pre.weight_g": torch.ones(4, 1, 1)})
    with pytest.raises(CheckpointError, match="generator"):
        split_ssl_sas_generator({"mpd": {}})


@pytest.mark.parametrize("n_frames", [1, 63, 64, 65, 200, 256, 257, 279, 280, 466, 467, 700, 1234])
def test_synthesis_windows_tile_the_utterance_with_margins(n_frames):
    margin = 23
    windows = synthesis_windows(n_frames, CPU_WINDOW_FRAMES, margin)
    assert windows[0].keep_from == 0 and windows[-1].keep_to == n_frames
    for window, following in zip(windows, windows[1:]):
        assert window.keep_to == following.keep_from
    for window in windows:
        assert window.size in CPU_WINDOW_FRAMES and window.start >= 0
        assert window.keep_from < window.keep_to
        assert window.keep_from == 0 or window.keep_from - window.start >= margin
        assert window.keep_to == n_frames or window.start + window.size - window.keep_to >= margin
        assert window.start + window.size <= n_frames or len(windows) == 1
    if n_frames <= max(CPU_WINDOW_FRAMES):
        assert windows[0].size == min(s for s in CPU_WINDOW_FRAMES if s >= n_frames)
    with pytest.raises(ValueError, match="twice the margin"):
        synthesis_windows(300, (32, 40), 20)


def perturbation_reach(h: dict, n_frames: int = 120) -> float:
    """Furthest an output sample depending on one input frame lies from it, in frames.

    Zero biases and zero input elsewhere make every other activation exactly zero, so each
    sample the frame reaches, however weakly, is non-zero (no rounding can hide it).
    """
    torch.manual_seed(0)
    generator = HifiganGenerator(GeneratorConfig.from_dict(h)).double().eval()
    for name, parameter in generator.named_parameters():
        if name.endswith("bias"):
            parameter.data.zero_()
    frames = torch.zeros(1, generator.config.in_channels, n_frames, dtype=torch.float64)
    frames[0, :, n_frames // 2] = torch.randn(generator.config.in_channels, dtype=torch.float64)
    with torch.no_grad():
        reached = torch.nonzero(generator(frames)[0, 0]).flatten()
    hop = generator.config.hop_length
    return max(n_frames // 2 - reached.min().item() / hop, (reached.max().item() + 1) / hop - n_frames // 2 - 1)


@pytest.mark.parametrize("h", [TINY_SSL_SAS, TINY_V1_MEL, TINY_V3_MEL], ids=["ssl-sas", "v1", "v3"])
def test_receptive_field_bounds_the_reach_of_a_perturbed_frame(h):
    bound = receptive_field_frames(GeneratorConfig.from_dict(h))
    reach = perturbation_reach(h)
    assert reach <= bound <= reach + 2, (reach, bound)


def test_windowed_synthesis_equals_one_whole_utterance_pass():
    _, generator = reference_and_ours(TINY_SSL_SAS, seed=5)
    vocoder = Vocoder(generator)
    assert receptive_field_frames(generator.config) == 23
    for n in (40, 130, 257, 610, 1100):
        frames = torch.randn(393, n)
        windows = synthesis_windows(n, CPU_WINDOW_FRAMES, 23)
        assert len(windows) == (1 if n <= 512 else 2 if n <= 978 else 3)
        with torch.no_grad():
            whole = generator(frames[None])[0, 0].numpy()
            np.testing.assert_allclose(vocoder._synthesise_in_windows(frames), whole, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kernel,dilation", [(7, 1), (7, 5), (11, 1), (11, 3), (11, 5), (9, 2)])
@pytest.mark.parametrize("bias", [True, False])
def test_spectral_convolution_equals_the_direct_convolution(kernel, dilation, bias):
    torch.manual_seed(kernel * 10 + dilation)
    conv = torch.nn.Conv1d(24, 24, kernel, dilation=dilation, padding=dilation * (kernel - 1) // 2, bias=bias)
    spectral = SpectralConvolution(conv)
    with torch.no_grad():
        for length in (1, 5, 21, 22, 23, 64, 257):
            x = torch.randn(1, 24, 1, length).contiguous(memory_format=torch.channels_last)
            expected = conv(x[:, :, 0])
            got = spectral(x)
            assert got.shape == (1, 24, 1, length)
            assert (got[:, :, 0] - expected).abs().max() <= 2e-6 * expected.abs().max(), (length, kernel, dilation)


def test_spectral_convolution_refuses_what_it_cannot_compute():
    with pytest.raises(ValueError, match="stride 1"):
        SpectralConvolution(torch.nn.Conv1d(4, 4, 7, stride=2, padding=3))
    with pytest.raises(ValueError, match="same"):
        SpectralConvolution(torch.nn.Conv1d(4, 4, 7, padding=0))
    with pytest.raises(ValueError, match="exceed the kernel"):
        SpectralConvolution(torch.nn.Conv1d(4, 4, 33, padding=16))


def _float64_error(generator, frames, output) -> float:
    """Largest difference of ``output`` from ``generator``'s float64 output: the float rounding yardstick."""
    with torch.no_grad():
        truth = copy.deepcopy(generator).double()(frames.double())
    return float((output.double() - truth).abs().max())


def test_generator_uses_spectral_convolutions_only_where_they_give_the_same_output():
    h = {**SSL_SAS, "upsample_initial_channel": 256}   # 128, 64, 32... channels after the upsamplings
    _, generator = reference_and_ours(h, seed=3)
    frames = torch.randn(1, 393, 30)
    with torch.no_grad():
        direct = generator(frames)
    plan_spectral_convolutions(generator)
    wide = [conv for block in generator.resblocks for conv in block.modules()
            if isinstance(conv, torch.nn.Conv1d) and conv in spectral_convolutions]
    # Kernels of 7 and 11 at 128 channels, of 11 only at 64, none below.
    assert (sorted((conv.in_channels, conv.kernel_size[0]) for conv in wide)
            == [(64, 11)] * 6 + [(128, 7)] * 6 + [(128, 11)] * 6)
    calls = []
    counted = type("Counted", (SpectralConvolution,),
                   {"__call__": lambda self, x: calls.append(1) or SpectralConvolution.__call__(self, x)})
    for conv in wide:
        spectral_convolutions[conv].__class__ = counted
    with torch.no_grad():
        spectral = generator(frames)
    assert len(calls) == 18
    # The same convolutions to float rounding: no further from float64 than the direct float32 pass.
    assert _float64_error(generator, frames, spectral) <= 2 * _float64_error(generator, frames, direct) + 1e-7
    # With gradients (training) or two utterances at once, the direct convolutions run.
    calls.clear()
    generator(frames)
    with torch.no_grad():
        generator(frames.expand(2, -1, -1))
    assert not calls
    # New weights (a loaded checkpoint) make the plans stale: they are not used, and planning rebuilds them.
    state = {k: v * 1.5 if k.startswith("resblocks") else v for k, v in generator.state_dict().items()}
    generator.load_state_dict(state)
    with torch.no_grad():
        direct = generator(frames)
        assert not calls
        plan_spectral_convolutions(generator)
        spectral = generator(frames)
    assert (spectral - direct).abs().max() > 0   # the rebuilt plans ran
    assert _float64_error(generator, frames, spectral) <= 2 * _float64_error(generator, frames, direct) + 1e-7
