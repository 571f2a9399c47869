"""FFT convolutions (models/nets/spectral.py) and HuBERT's positional convolution through them."""
from __future__ import annotations

import pytest
import torch

from voxanon.models.nets.hubert import HubertBackboneConfig, PositionalConvEmbedding, plain_hubert
from voxanon.models.nets.spectral import FftConvolution, fft_form


@pytest.mark.parametrize("kernel,padding,groups", [(128, 64, 16), (33, 16, 1), (40, 20, 4), (32, 31, 2)])
@pytest.mark.parametrize("bias", [True, False])
def test_fft_convolution_equals_the_direct_convolution(kernel, padding, groups, bias):
    torch.manual_seed(kernel + padding + groups)
    conv = torch.nn.Conv1d(32, 48, kernel, padding=padding, groups=groups, bias=bias)
    fft = FftConvolution(conv)
    with torch.no_grad():
        for length in (1, 7, fft.hop, fft.hop + 1, 3 * fft.hop - 1, 500):
            x = torch.randn(32, length)
            expected = conv(x[None])[0, :, :length]
            got = fft(x)
            assert got.shape == (48, length)
            assert (got - expected).abs().max() <= 2e-6 * expected.abs().max(), (length, kernel)


def test_fft_convolution_refuses_what_it_cannot_compute():
    with pytest.raises(ValueError, match="stride 1"):
        FftConvolution(torch.nn.Conv1d(4, 4, 64, stride=2))
    with pytest.raises(ValueError, match="stride 1"):
        FftConvolution(torch.nn.Conv1d(4, 4, 64, dilation=2))
    with pytest.raises(ValueError, match="same"):
        FftConvolution(torch.nn.Conv1d(4, 4, 64, padding=0))


def test_fft_form_only_for_single_float32_cpu_inputs_without_gradients_and_rebuilt_for_new_weights():
    conv = torch.nn.Conv1d(16, 16, 64, padding=32, groups=4)
    one = torch.randn(1, 16, 100)
    with torch.no_grad():
        plan = fft_form(conv, one)
        assert plan is not None and fft_form(conv, one) is plan
        assert fft_form(conv, one.expand(2, -1, -1)) is None
        assert fft_form(conv, one.double()) is None
        assert fft_form(torch.nn.Conv1d(16, 16, 16, padding=8), one) is None
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert fft_form(conv, one) is None
    assert fft_form(conv, one) is None   # gradients on: training runs the direct convolution
    with torch.no_grad():
        conv.weight.mul_(2.0)
        rebuilt = fft_form(conv, one)
        assert rebuilt is not plan
        torch.testing.assert_close(rebuilt(one[0]), conv(one)[0, :, :100], rtol=0, atol=2e-6 * 100)


def test_hubert_positional_convolution_uses_the_fft_form_with_the_same_output():
    torch.manual_seed(0)
    embedding = PositionalConvEmbedding(96, 128, 16).eval()
    x = torch.randn(1, 300, 96)
    calls = []
    counted = type("Counted", (FftConvolution,),
                   {"__call__": lambda self, v: calls.append(1) or FftConvolution.__call__(self, v)})
    with torch.no_grad():
        fft_form(embedding.conv, x).__class__ = counted
        spectral = embedding(x)
    direct = embedding(x).detach()   # gradients on: the direct convolution
    assert calls == [1]
    torch.testing.assert_close(spectral, direct, rtol=0, atol=1e-5)


def test_hubert_backbone_output_is_unchanged_by_the_fft_form():
    config = HubertBackboneConfig(hidden_size=96, num_layers=2, num_heads=4, intermediate_size=192,
                                  conv_channels=64, pos_conv_kernel=128, pos_conv_groups=16)
    torch.manual_seed(1)
    model = plain_hubert(config)
    wave = torch.randn(1, 16000)
    with torch.no_grad():
        spectral = model(wave)
    direct = model(wave).detach()
    torch.testing.assert_close(spectral, direct, rtol=0, atol=2e-5)
