"""SA-toolkit's ASR-BN anonymisation networks (VoicePrivacy 2024 B5/B6), for parity tests only.

Transcribed module by module from deep-privacy/SA-toolkit at commit
22c298edfa3ef92accf347053cd00826702a2c0d (Apache License 2.0; Copyright Pierre Champion and the
SA-toolkit authors; http://www.apache.org/licenses/LICENSE-2.0):

* ``satools/satools/chain/nn.py``: ``NaturalAffineTransform`` (its inference branch,
  ``OnlineNaturalGradient_apply`` of ``chain/objf.py``), ``OrthonormalLinear``, ``PassThrough``, ``TDNNF``,
  ``TDNNFBatchNorm``, ``VectorQuantizerEMA`` (forward; the EMA update runs in training only);
* ``satools/satools/chain/model.py``: ``ChainE2EModel.get_padding``;
* ``satools/satools/kaldifeature.py``: ``fbank`` and its helpers (run eagerly, not through
  ``torch.jit.script``; the VTLN branch, off at warp 1.0, is left out);
* ``satools/satools/cmvn.py``: ``UttCMVN``;
* ``egs/asr/librispeech/local/chain/tuning/tdnnf_wav2vec2_vq.py``, ``tdnnf_vq.py`` and their non-VQ twins
  ``tdnnf_wav2vec2.py``, ``tdnnf.py``: ``build(args)``'s ``Net`` (its ``__init__`` and ``extract_bn``; the
  training-only methods and the ``validate_model`` call at the end of ``__init__``, a training-shape check
  that runs the whole chain model on 2 s of a ramp, are left out). The wav2vec2 front end is torchaudio's
  ``wav2vec2_model``, as ``satools.utils.import_fairseq_model.wav2vec2_model`` builds it; tests may pass a
  smaller wav2vec2 configuration and smaller layer widths (the ``Net`` constructor's own arguments);
* ``satools/satools/hifigan/nn.py``: ``ResBlock1``, ``init_weights``, ``get_padding``;
  ``satools/satools/hifigan/archi.py``: ``CoreHifiGan`` (its waveform output);
* ``egs/vc/libritts/local/tuning/hifigan.py``: ``build(args)``'s ``Net`` (``__init__`` with the
  extractor passed in instead of loaded through ``infer_helper.load_model``, ``_forward``, ``get_bn``,
  ``get_spk_id``, ``extract_features`` and ``convert`` with the F0 given, as the VoicePrivacy recipe sets it);
* ``save_model`` of ``chain/model.py`` and ``hifigan/model.py``: :func:`save_final_pt` writes the same dict.

``torch.amp.autocast('cuda')`` blocks are kept: on CPU they change nothing.
"""
from __future__ import annotations

import math
import warnings
from types import SimpleNamespace
from typing import List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchaudio
from torch import Tensor

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torch.nn.utils import weight_norm

SOURCE_COMMIT = "22c298edfa3ef92accf347053cd00826702a2c0d"


# satools/satools/chain/objf.py, nn.py -----------------------------------------------------------------

def OnlineNaturalGradient_apply(x, weight, bias):
    if x.dim() == 2 and bias is not None:
        return torch.addmm(bias, x, weight.t())
    else:
        output = x.matmul(weight.t())
        if bias is not None:
            output += bias
        return output


class NaturalAffineTransform(nn.Module):
    def __init__(self, feat_dim, out_dim, bias=True):
        super().__init__()
        self.feat_dim = feat_dim
        self.out_dim = out_dim
        self.weight = nn.Parameter(torch.Tensor(out_dim, feat_dim))
        self.bias = None
        if bias:
            self.bias = nn.Parameter(torch.Tensor(1, out_dim))
        else:
            self.register_parameter("bias", None)
        self.init_parameters()

    def init_parameters(self):
        self.weight.data.normal_()
        self.weight.data.mul_(1.0 / pow(self.feat_dim * self.out_dim, 0.5))
        self.bias.data.normal_()

    def forward(self, x):
        return OnlineNaturalGradient_apply(x, self.weight, self.bias)


class OrthonormalLinear(nn.Module):
    def __init__(self, feat_dim, out_dim, bias=True, scale=0.0):
        super().__init__()
        self.inner_nat = NaturalAffineTransform(feat_dim, out_dim, bias=bias)
        self.scale = torch.tensor(scale, requires_grad=False)

    def forward(self, input):
        return self.inner_nat.forward(input)


class PassThrough(nn.Module):
    def __init__(self):
        super().__init__()
        self.output_dim = "same"

    def forward(self, x: Tensor) -> Tensor:
        return x


class TDNNF(nn.Module):
    def __init__(self, feat_dim, output_dim, bottleneck_dim, context_len=1, subsampling_factor=1,
                 orthonormal_constraint=0.0, bypass_scale=0.66, bottleneck_func=PassThrough()):
        super().__init__()
        self.bottleneck_func = bottleneck_func
        self.bottleneck_outdim = bottleneck_dim
        if self.bottleneck_func.output_dim != "same":
            self.bottleneck_outdim = self.bottleneck_func.output_dim

        self.linearB = OrthonormalLinear(feat_dim * context_len, bottleneck_dim, scale=orthonormal_constraint)
        self.linearA = nn.Linear(self.bottleneck_outdim, output_dim)
        self.output_dim = torch.tensor(output_dim, requires_grad=False)
        self.bottleneck_dim = torch.tensor(bottleneck_dim, requires_grad=False)
        self.feat_dim = torch.tensor(feat_dim, requires_grad=False)
        self.subsampling_factor = torch.tensor(subsampling_factor, requires_grad=False)
        self.context_len = torch.tensor(context_len, requires_grad=False)
        self.orthonormal_constraint = torch.tensor(orthonormal_constraint, requires_grad=False)

        self.bypass_scale = torch.tensor(bypass_scale, requires_grad=False)
        self.identity_lidx = torch.tensor(0, requires_grad=False)  # Start
        self.identity_ridx = None  # End
        self.use_bypass = False
        self.indices = torch.tensor(0, requires_grad=False)
        if bypass_scale > 0.0 and feat_dim == output_dim:
            self.use_bypass = True
            if self.context_len > 1:
                if self.context_len % 2 == 1:
                    self.identity_lidx = torch.div(self.context_len, 2, rounding_mode="trunc")
                    self.identity_ridx = -self.identity_lidx
                else:
                    self.identity_lidx = torch.div(self.context_len, 2, rounding_mode="trunc")
                    self.identity_ridx = -self.identity_lidx + 1
                if self.context_len == 2:
                    self.identity_lidx = torch.tensor(1, requires_grad=False)  # Start
                    self.identity_ridx = None  # End
            self.indices = torch.arange(0, 16000 * 100, 1.5, requires_grad=False).long()

    def forward(self, input, return_bottleneck: bool = False):
        mb, T, D = input.shape
        padded_input = (
            input.reshape(mb, -1)
            .unfold(1, D * self.context_len, int(D * self.subsampling_factor))
            .contiguous()
        )
        x = self.linearB(padded_input)
        x = self.bottleneck_func(x)
        if return_bottleneck:
            return x
        x = self.linearA(x)
        if self.use_bypass:
            if self.subsampling_factor == 1.5:
                x = self.add_padd(x, input, self.indices.to(device=x.device), self.bypass_scale)
            else:
                x = (x + input[:, self.identity_lidx: self.identity_ridx: self.subsampling_factor, :]
                     * self.bypass_scale)
        return x

    def add_padd(self, x, input, indices, bypass_scale):
        y = torch.index_select(input, 1, indices[:int(input.shape[1] / 1.5)]) * bypass_scale
        if x.size(1) < y.size(1):
            x = torch.nn.functional.pad(x, [0, 0, 0, y.size(1) - x.size(1), 0, 0])
        else:
            y = torch.nn.functional.pad(y, [0, 0, 0, x.size(1) - y.size(1), 0, 0])
        x = torch.broadcast_tensors(x, y)[0] + y
        return x


class TDNNFBatchNorm(nn.Module):
    def __init__(self, feat_dim, output_dim, bottleneck_dim, context_len=1, subsampling_factor=1,
                 orthonormal_constraint=0.0, bypass_scale=0.66, bottleneck_func=PassThrough()):
        super().__init__()
        self.in_dim = feat_dim
        self.out_dim = output_dim
        self.bottleneck_dim = bottleneck_dim
        self.bottleneck_func = bottleneck_func
        self.tdnn = TDNNF(feat_dim, output_dim, bottleneck_dim, context_len=context_len,
                          subsampling_factor=subsampling_factor, orthonormal_constraint=orthonormal_constraint,
                          bypass_scale=bypass_scale, bottleneck_func=bottleneck_func)
        self.bn = nn.BatchNorm1d(output_dim, affine=False)
        self.output_dim = torch.tensor(output_dim, requires_grad=False)

    def forward(self, input, return_bottleneck: bool = False):
        mb, T, D = input.shape
        x = self.tdnn(input, return_bottleneck=return_bottleneck)
        if return_bottleneck:
            return x
        x = x.permute(0, 2, 1)
        x = self.bn(x)
        x = x.permute(0, 2, 1)
        x = F.relu(x)
        return x


class VectorQuantizerEMA(nn.Module):
    def __init__(self, num_embeddings, embedding_dim, commitment_cost, decay, epsilon=1e-5):
        super().__init__()
        self._num_embeddings = num_embeddings
        self._embedding_dim = embedding_dim
        self._embedding = nn.Embedding(self._num_embeddings, self._embedding_dim)
        self._embedding.weight.data.normal_()
        self._commitment_cost = commitment_cost
        self.register_buffer("_ema_cluster_size", torch.zeros(num_embeddings))
        self._ema_w = nn.Parameter(torch.Tensor(num_embeddings, self._embedding_dim))
        self._ema_w.data.normal_()
        self._decay = decay
        self._epsilon = epsilon
        self.freeze = False

    def forward(self, inputs):
        input_shape = inputs.shape
        flat_input = inputs.view(-1, self._embedding_dim)
        distances = (
            torch.sum(flat_input ** 2, dim=1, keepdim=True)
            + torch.sum(self._embedding.weight ** 2, dim=1)
            - 2 * torch.matmul(flat_input, self._embedding.weight.t())
        )
        self._device = inputs.device
        encoding_indices = torch.argmin(distances, dim=1).unsqueeze(1)
        encodings = torch.zeros(encoding_indices.shape[0], self._num_embeddings, dtype=torch.float).to(self._device)
        encodings.scatter_(1, encoding_indices, 1)
        if self.training and not self.freeze:
            raise RuntimeError("the EMA codebook update is training-only and not transcribed")
        quantized = torch.matmul(encodings, self._embedding.weight).view(input_shape)
        e_latent_loss = torch.mean((quantized.detach() - inputs) ** 2)
        vq_loss = self._commitment_cost * e_latent_loss
        quantized = inputs + (quantized - inputs).detach()
        avg_probs = torch.mean(encodings, dim=0)
        perplexity = torch.exp(-torch.sum(avg_probs * torch.log(avg_probs + 1e-10)))
        return vq_loss, quantized.contiguous(), perplexity, encodings, distances, encoding_indices


def get_padding(kernel_sizes, subsampling_factors):
    pad = 0
    global_subsampling = 1
    for k, s in zip(kernel_sizes, subsampling_factors):
        pad += (k - 1) * global_subsampling
        global_subsampling *= s
    return int(pad)


# satools/satools/kaldifeature.py ----------------------------------------------------------------------

def bit_length(n: int) -> int:
    if n == 0:
        return 0
    bits = 0
    while n > 0:
        bits += 1
        n >>= 1
    return bits


def _next_power_of_2(x: int) -> int:
    return 1 if x == 0 else int(2 ** bit_length(x - 1))


def NumFrames(num_samples: int, window_shift: int, window_size: int, snip_edges: bool):
    if snip_edges:
        if num_samples < window_size:
            return 0
        return 1 + ((num_samples - window_size) // window_shift)
    return (num_samples + (window_shift // 2)) // window_shift


def _get_strided(waveform: Tensor, window_size: int, window_shift: int, snip_edges: bool, channel: int = -1) -> Tensor:
    channel = max(channel, 0)
    waveform = waveform[channel, :]
    num_samples = waveform.size(0)
    strides = (window_shift * waveform.stride(0), waveform.stride(0))
    if snip_edges:
        if num_samples < window_size:
            return torch.empty((0, 0), dtype=waveform.dtype, device=waveform.device)
        m = 1 + (num_samples - window_size) // window_shift
    else:
        reversed_waveform = torch.flip(waveform, [0])
        m = (num_samples + (window_shift // 2)) // window_shift
        pad = window_size // 2 - window_shift // 2
        pad_right = reversed_waveform
        if pad > 0:
            pad_left = reversed_waveform[-pad:]
            waveform = torch.cat((pad_left, waveform, pad_right), dim=0)
        else:
            waveform = torch.cat((waveform[-pad:], pad_right), dim=0)
    sizes = (m, window_size)
    return waveform.as_strided(sizes, strides)


def _feature_window_function(window_type: str, window_size: int, blackman_coeff: float, device, dtype) -> Tensor:
    if window_type == "hanning":
        return torch.hann_window(window_size, periodic=False, device=device, dtype=dtype)
    elif window_type == "hamming":
        return torch.hamming_window(window_size, periodic=False, alpha=0.54, beta=0.46, device=device, dtype=dtype)
    elif window_type == "povey":
        return torch.hann_window(window_size, periodic=False, device=device, dtype=dtype).pow(0.85)
    elif window_type == "rectangular":
        return torch.ones(window_size, device=device, dtype=dtype)
    elif window_type == "blackman":
        a = 2 * math.pi / (window_size - 1)
        window_function = torch.arange(window_size, device=device, dtype=dtype)
        return (blackman_coeff - 0.5 * torch.cos(a * window_function)
                + (0.5 - blackman_coeff) * torch.cos(2 * a * window_function)).to(device=device, dtype=dtype)
    raise Exception("Invalid window type " + window_type)


def _get_log_energy(strided_input: Tensor, epsilon: Tensor, energy_floor: float) -> Tensor:
    device, dtype = strided_input.device, strided_input.dtype
    log_energy = torch.max(strided_input.pow(2).sum(1), epsilon).log()
    if energy_floor == 0.0:
        return log_energy
    return torch.max(log_energy, torch.tensor(math.log(energy_floor), device=device, dtype=dtype))


def _get_waveform_and_window_properties(waveform, channel, sample_frequency, frame_shift, frame_length,
                                        round_to_power_of_two, preemphasis_coefficient):
    MILLISECONDS_TO_SECONDS = 0.001
    channel = max(channel, 0)
    waveform = waveform[channel, :]
    window_shift = int(sample_frequency * frame_shift * MILLISECONDS_TO_SECONDS)
    window_size = int(sample_frequency * frame_length * MILLISECONDS_TO_SECONDS)
    padded_window_size = _next_power_of_2(window_size) if round_to_power_of_two else window_size
    assert 2 <= window_size <= len(waveform)
    return waveform, window_shift, window_size, padded_window_size


def _get_window(waveform: List[Tensor], padded_window_size, window_size, window_shift, window_type, blackman_coeff,
                snip_edges, raw_energy, energy_floor, dither, remove_dc_offset, preemphasis_coefficient,
                channel: int = -1) -> Tuple[Tensor, Tensor]:
    strided_input = [_get_strided(w, window_size, window_shift, snip_edges, channel) for w in waveform]
    strided_input = torch.cat(strided_input, dim=0)
    waveform = torch.cat(waveform, 1)
    epsilon = torch.tensor(1e-6).to(device=waveform.device, dtype=waveform.dtype)
    if dither != 0.0:
        x = torch.max(epsilon, torch.rand(strided_input.shape, device=waveform.device, dtype=waveform.dtype))
        rand_gauss = torch.sqrt(-2 * x.log()) * torch.cos(2 * math.pi * x)
        strided_input = strided_input + rand_gauss * dither
    if remove_dc_offset:
        row_means = torch.mean(strided_input, dim=1).unsqueeze(1)
        strided_input = strided_input - row_means
    signal_log_energy = torch.empty((0), device=strided_input.device, dtype=strided_input.dtype)
    if raw_energy:
        signal_log_energy = _get_log_energy(strided_input, epsilon, energy_floor)
    if preemphasis_coefficient != 0.0:
        offset_strided_input = torch.nn.functional.pad(
            strided_input.unsqueeze(0), (1, 0), mode="replicate").squeeze(0)
        strided_input = strided_input - preemphasis_coefficient * offset_strided_input[:, :-1]
    window_function = _feature_window_function(
        window_type, window_size, blackman_coeff, waveform.device, waveform.dtype).unsqueeze(0)
    strided_input = strided_input * window_function
    if padded_window_size != window_size:
        padding_right = padded_window_size - window_size
        strided_input = torch.nn.functional.pad(
            strided_input.unsqueeze(0), (0, padding_right), mode="constant").squeeze(0)
    if not raw_energy:
        signal_log_energy = _get_log_energy(strided_input, epsilon, energy_floor)
    return strided_input, signal_log_energy


def _subtract_column_mean(tensor: Tensor, subtract_mean: bool) -> Tensor:
    if subtract_mean:
        col_means = torch.mean(tensor, dim=0).unsqueeze(0)
        tensor = tensor - col_means
    return tensor


def inverse_mel_scale(mel_freq: Tensor) -> Tensor:
    return 700.0 * ((mel_freq / 1127.0).exp() - 1.0)


def mel_scale_scalar(freq: float) -> float:
    return 1127.0 * math.log(1.0 + freq / 700.0)


def mel_scale(freq: Tensor) -> Tensor:
    return 1127.0 * (1.0 + freq / 700.0).log()


def get_mel_banks(num_bins, window_length_padded, sample_freq, low_freq, high_freq, vtln_low, vtln_high,
                  vtln_warp_factor):
    assert vtln_warp_factor == 1.0, "the VTLN branch is not transcribed"
    num_fft_bins = window_length_padded / 2
    nyquist = 0.5 * sample_freq
    if high_freq <= 0.0:
        high_freq += nyquist
    fft_bin_width = sample_freq / window_length_padded
    mel_low_freq = mel_scale_scalar(low_freq)
    mel_high_freq = mel_scale_scalar(high_freq)
    mel_freq_delta = (mel_high_freq - mel_low_freq) / (num_bins + 1)
    bin = torch.arange(num_bins).unsqueeze(1)
    left_mel = mel_low_freq + bin * mel_freq_delta
    center_mel = mel_low_freq + (bin + 1.0) * mel_freq_delta
    right_mel = mel_low_freq + (bin + 2.0) * mel_freq_delta
    center_freqs = inverse_mel_scale(center_mel)
    mel = mel_scale(fft_bin_width * torch.arange(num_fft_bins)).unsqueeze(0)
    up_slope = (mel - left_mel) / (center_mel - left_mel)
    down_slope = (right_mel - mel) / (right_mel - center_mel)
    bins = torch.max(torch.zeros(1), torch.min(up_slope, down_slope))
    return bins, center_freqs


def fbank(waveform_in: Tensor, blackman_coeff: float = 0.42, channel: int = -1, dither: float = 0.0,
          energy_floor: float = 1.0, frame_length: float = 25.0, frame_shift: float = 10.0, high_freq: float = 0.0,
          htk_compat: bool = False, low_freq: float = 20.0, min_duration: float = 0.0, num_mel_bins: int = 23,
          preemphasis_coefficient: float = 0.97, raw_energy: bool = True, remove_dc_offset: bool = True,
          round_to_power_of_two: bool = True, sample_frequency: float = 16000.0, snip_edges: bool = True,
          subtract_mean: bool = False, use_energy: bool = False, use_log_fbank: bool = True, use_power: bool = True,
          vtln_high: float = -500.0, vtln_low: float = 100.0, vtln_warp: float = 1.0,
          window_type: str = "povey") -> Tensor:
    if waveform_in.shape[0] != 1:
        bbatch_n = waveform_in.shape[0]
        waveform: List[Tensor] = [w.unsqueeze(0) for w in waveform_in]
    else:
        bbatch_n = 1
        waveform: List[Tensor] = [waveform_in]
    device, dtype = waveform[0].device, waveform[0].dtype
    _, window_shift, window_size, padded_window_size = _get_waveform_and_window_properties(
        torch.cat(waveform, 1), channel, sample_frequency, frame_shift, frame_length, round_to_power_of_two,
        preemphasis_coefficient)
    num_frames_per_wave = [NumFrames(w.numel(), window_shift, window_size, snip_edges) for w in waveform]
    if len(waveform) < min_duration * sample_frequency:
        return torch.empty(0, device=device, dtype=dtype)
    strided_input, signal_log_energy = _get_window(
        waveform, padded_window_size, window_size, window_shift, window_type, blackman_coeff,
        snip_edges, raw_energy, energy_floor, dither, remove_dc_offset, preemphasis_coefficient)
    spectrum = torch.fft.rfft(strided_input).abs()
    if use_power:
        spectrum = spectrum.pow(2.)
    mel_energies, _ = get_mel_banks(num_mel_bins, padded_window_size, sample_frequency,
                                    low_freq, high_freq, vtln_low, vtln_high, vtln_warp)
    mel_energies = mel_energies.to(device=device, dtype=dtype)
    mel_energies = torch.nn.functional.pad(mel_energies, (0, 1), mode="constant")
    mel_energies = torch.mm(spectrum, mel_energies.T)
    if use_log_fbank:
        epsilon = torch.tensor(1e-6).to(device=device, dtype=dtype)
        mel_energies = torch.max(mel_energies, epsilon).log()
    if use_energy:
        signal_log_energy = signal_log_energy.unsqueeze(1)
        if htk_compat:
            mel_energies = torch.cat((mel_energies, signal_log_energy), dim=1)
        else:
            mel_energies = torch.cat((signal_log_energy, mel_energies), dim=1)
    mel_energies = _subtract_column_mean(mel_energies, subtract_mean)
    return mel_energies.view(bbatch_n, num_frames_per_wave[0], -1)


# satools/satools/cmvn.py --------------------------------------------------------------------------------

class UttCMVN(torch.nn.Module):
    def __init__(self, var_norm=False, keep_zeros=False):
        super().__init__()
        self.var_norm = var_norm
        self.keep_zeros = keep_zeros

    def forward(self, x):
        dim = x.dim()
        if dim == 1:
            x = x.unsqueeze(0)
        if self.keep_zeros:
            uv = x == 0
            vv = x != 0
            mean = x[vv].mean()
            if self.var_norm:
                std = torch.sqrt(x[vv].var() + 1e-6)
                x[vv] = x[vv] - mean
                x[vv] /= std
            else:
                x[vv] = x[uv] - mean
            x[uv] = 0
        else:
            mean = x.mean(dim=1).unsqueeze(1)
            if self.var_norm:
                std = torch.sqrt(x.var(dim=1) + 1e-6).unsqueeze(1)
                x = x - mean
                x /= std
            else:
                x = x - mean
        if dim == 1:
            x = x.squeeze(0)
        return x


# egs/asr/librispeech/local/chain/tuning/tdnnf_wav2vec2_vq.py, tdnnf_vq.py (and the non-VQ twins) ----------

WAV2VEC2_LARGE = {
    "extractor_mode": "layer_norm",
    "extractor_conv_layer_config": [[512, 10, 5], [512, 3, 2], [512, 3, 2], [512, 3, 2], [512, 3, 2], [512, 2, 2],
                                    [512, 2, 2]],
    "extractor_conv_bias": True,
    "encoder_embed_dim": 1024,
    "encoder_projection_dropout": 0.0,
    "encoder_pos_conv_kernel": 128,
    "encoder_pos_conv_groups": 16,
    "encoder_num_layers": 24,
    "encoder_num_heads": 16,
    "encoder_attention_dropout": 0.0,
    "encoder_ff_interm_features": 4096,
    "encoder_ff_interm_dropout": 0.0,
    "encoder_dropout": 0.0,
    "encoder_layer_norm_first": True,
    "encoder_layer_drop": 0.0,
    "aux_num_out": None,
}
"""The wav2vec2 configuration ``tdnnf_wav2vec2_vq.py`` hard-codes; tests pass a smaller one to run fast."""
WAV2VEC2_LAYERS = ([3, 3, 3], [1, 3, 3, 3]), ([1, 1, 1], [1.5, 1, 1, 1])
FBANK_LAYERS = ([3, 3, 3, 1, 3, 3, 3, 3, 3, 3, 3, 3], [1, 3, 3, 3]), \
    ([1, 1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1], [1.5, 1, 1, 1])


def build_asr(args, front_end: str, vq: bool, wav2vec2_config: dict | None = None):
    """``build(args)`` of ``tdnnf_wav2vec2_vq.py`` (``front_end='wav2vec2'``) or ``tdnnf_vq.py`` (``fbank``),
    or, with ``vq`` off, of ``tdnnf_wav2vec2.py`` / ``tdnnf.py`` (no ``VQLayer``, the rest the same)."""
    kernel_default, subsampling_default = WAV2VEC2_LAYERS if front_end == "wav2vec2" else FBANK_LAYERS

    class Net(nn.Module):
        def __init__(self, output_dim, hidden_dim=1024, bottleneck_dim=128, prefinal_bottleneck_dim=256,
                     kernel_size_list=kernel_default, subsampling_factor_list=subsampling_default, p_dropout=0.1):
            super().__init__()
            if front_end == "wav2vec2":
                config = dict(wav2vec2_config or WAV2VEC2_LARGE)
                self.input_dim = config["encoder_embed_dim"]  # 1024 in the release config
                self.preprocessor = torchaudio.models.wav2vec2.model.wav2vec2_model(**config)
            else:
                self.input_dim = 80
                self.cmvn = UttCMVN()
            self.output_dim = output_dim
            self.padding = get_padding(kernel_size_list[0], subsampling_factor_list[0]) // 2
            self.padding_after = get_padding(kernel_size_list[1], subsampling_factor_list[1]) // 2

            self.tdnn1 = TDNNFBatchNorm(self.input_dim, hidden_dim, bottleneck_dim=bottleneck_dim,
                                        context_len=kernel_size_list[0][0],
                                        subsampling_factor=subsampling_factor_list[0][0],
                                        orthonormal_constraint=-1.0)
            self.dropout1 = nn.Dropout(p_dropout)
            tdnnfs = []
            for i in range(1, len(kernel_size_list[0]) - 1):
                kernel_size = kernel_size_list[0][i]
                subsampling_factor = subsampling_factor_list[0][i]
                layer = TDNNFBatchNorm(hidden_dim, hidden_dim, bottleneck_dim=bottleneck_dim, context_len=kernel_size,
                                       subsampling_factor=subsampling_factor, orthonormal_constraint=-1.0)
                tdnnfs.append(layer)
                tdnnfs.append(nn.Dropout(p_dropout))

            self.acc_sum_vq = torch.tensor(0.0, requires_grad=False)
            self.acc_sum_perplexity = torch.tensor(0.0, requires_grad=False)
            self.vq_loss = torch.tensor(0.0)
            self.perplexity = torch.tensor(0.0, requires_grad=False)

            class VQLayer(nn.Module):
                def __init__(this):
                    super().__init__()
                    this.quant = VectorQuantizerEMA(args.codebook_size, prefinal_bottleneck_dim, 0.25, 0.99)
                    this.output_dim = "same"

                def forward(this, x: torch.Tensor) -> torch.Tensor:
                    (vq_loss, x, perplexity, _, _, encoding_indices) = this.quant(x)
                    return x

            kernel_size = kernel_size_list[0][i + 1]
            subsampling_factor = subsampling_factor_list[0][i + 1]
            bottleneck = dict(bottleneck_func=VQLayer()) if vq else {}
            layer = TDNNFBatchNorm(hidden_dim, hidden_dim, bottleneck_dim=prefinal_bottleneck_dim,
                                   context_len=kernel_size, subsampling_factor=subsampling_factor,
                                   orthonormal_constraint=-1.0, bypass_scale=0.0, **bottleneck)
            assert layer.tdnn.use_bypass == False  # noqa: E712 (as written there)
            tdnnfs.append(layer)
            tdnnfs.append(nn.Dropout(p_dropout))

            tdnnfs_after = []
            for i in range(0, len(kernel_size_list[1])):
                kernel_size = kernel_size_list[1][i]
                subsampling_factor = subsampling_factor_list[1][i]
                layer = TDNNFBatchNorm(hidden_dim, hidden_dim, bottleneck_dim=bottleneck_dim, context_len=kernel_size,
                                       subsampling_factor=subsampling_factor, orthonormal_constraint=-1.0)
                tdnnfs_after.append(layer)
                tdnnfs_after.append(nn.Dropout(p_dropout))

            self.tdnnfs = nn.Sequential(*tdnnfs)
            self.tdnnfs_after = nn.Sequential(*tdnnfs_after)
            self.prefinal_chain = TDNNFBatchNorm(hidden_dim, hidden_dim, bottleneck_dim=prefinal_bottleneck_dim,
                                                 context_len=1, orthonormal_constraint=-1.0)
            self.prefinal_xent = TDNNFBatchNorm(hidden_dim, hidden_dim, bottleneck_dim=prefinal_bottleneck_dim,
                                                context_len=1, orthonormal_constraint=-1.0)
            self.chain_output = NaturalAffineTransform(hidden_dim, output_dim)
            self.chain_output.weight.data.zero_()
            self.chain_output.bias.data.zero_()
            self.xent_output = NaturalAffineTransform(hidden_dim, output_dim)
            self.xent_output.weight.data.zero_()
            self.xent_output.bias.data.zero_()

        def pad_input(self, x, pad_amount: int = 0):
            if pad_amount > 0:
                N, T, C = x.shape
                left_pad = x[:, 0:1, :].repeat(1, pad_amount, 1).reshape(N, -1, C)
                right_pad = x[:, -1, :].repeat(1, pad_amount, 1).reshape(N, -1, C)
                x = torch.cat([left_pad, x, right_pad], 1)
            return x

        def extract_bn(self, x: torch.Tensor) -> torch.Tensor:
            if front_end == "wav2vec2":
                with torch.amp.autocast("cuda"):
                    p_out = self.preprocessor.extract_features(x)
                    x = p_out[0][-1]
                    x = x.transpose(2, 1)
                    x = torch.nn.functional.pad(x, (0, 1), "replicate")
                    x = x.transpose(2, 1)
                x = x.to(torch.float32)
            else:
                x *= 32768
                x = fbank(x, num_mel_bins=self.input_dim, snip_edges=False)
                x = self.cmvn(x)
            x = self.pad_input(x, pad_amount=self.padding)
            x = self.tdnn1(x)
            for i, t in enumerate(self.tdnnfs[:-2]):
                x = t.forward(x)
            x = self.tdnnfs[-2].forward(x, return_bottleneck=True)
            return x

    return Net


# satools/satools/hifigan/nn.py, archi.py ------------------------------------------------------------------

def init_weights(m, mean=0.0, std=0.01):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        m.weight.data.normal_(mean, std)


def get_conv_padding(kernel_size, dilation=1):
    return int((kernel_size * dilation - dilation) / 2)


class ResBlock1(torch.nn.Module):
    def __init__(self, channels, kernel_size=3, dilation=(1, 3, 5)):
        super().__init__()
        self.convs1 = nn.ModuleList([
            weight_norm(nn.Conv1d(channels, channels, kernel_size, 1, dilation=dilation[j],
                                  padding=get_conv_padding(kernel_size, dilation[j]))) for j in range(3)])
        self.convs1.apply(init_weights)
        self.convs2 = nn.ModuleList([
            weight_norm(nn.Conv1d(channels, channels, kernel_size, 1, dilation=1,
                                  padding=get_conv_padding(kernel_size, 1))) for _ in range(3)])
        self.convs2.apply(init_weights)

    def forward(self, x):
        for c1, c2 in zip(self.convs1, self.convs2):
            xt = F.leaky_relu(x, 0.1)
            xt = c1(xt)
            xt = F.leaky_relu(xt, 0.1)
            xt = c2(xt)
            x = xt + x
        return x


class CoreHifiGan(torch.nn.Module):
    def __init__(self, upsample_rates=[5, 4, 4, 2, 2], upsample_kernel_sizes=[11, 8, 8, 4, 4], imput_dim=256 + 1,
                 upsample_initial_channel=512, resblock_kernel_sizes=[3, 7, 11],
                 resblock_dilation_sizes=[[1, 3, 5], [1, 3, 5], [1, 3, 5]]):
        super().__init__()
        self.resblock_kernel_sizes = resblock_kernel_sizes
        self.num_kernels = len(resblock_kernel_sizes)
        self.upsample_rates = upsample_rates
        self.conv_pre = weight_norm(nn.Conv1d(imput_dim, upsample_initial_channel, 7, 1, padding=3))
        resblock = ResBlock1
        self.ups = nn.ModuleList()
        for i, (u, k) in enumerate(zip(upsample_rates, upsample_kernel_sizes)):
            self.ups.append(weight_norm(nn.ConvTranspose1d(upsample_initial_channel // (2 ** i),
                                                           upsample_initial_channel // (2 ** (i + 1)),
                                                           k, u, padding=(k - u) // 2)))
        self.resblocks = nn.ModuleList()
        for i, v in enumerate(self.ups):
            ch = upsample_initial_channel // (2 ** (i + 1))
            for j, (k, d) in enumerate(zip(resblock_kernel_sizes, resblock_dilation_sizes)):
                self.resblocks.append(resblock(ch, k, d))
        self.conv_post = weight_norm(nn.Conv1d(ch, 1, 7, 1, padding=3))
        self.ups.apply(init_weights)
        self.conv_post.apply(init_weights)
        self.reflection_pad = torch.nn.ReflectionPad1d((1, 0))

    def forward_resnet(self, x):
        x = self.conv_pre(x)
        for up_idx, up in enumerate(self.ups):
            x = F.leaky_relu(x, 0.1)
            x = up(x)
            xs = torch.zeros_like(x)
            for resblock_idx, resblock in enumerate(self.resblocks):
                if up_idx * self.num_kernels <= resblock_idx < (up_idx + 1) * self.num_kernels:
                    xs += resblock(x)
            x = xs / self.num_kernels
        x = F.leaky_relu(x)
        x = self.reflection_pad(x)
        x = self.conv_post(x)
        x = torch.tanh(x)
        return x

    def forward(self, x):
        x = self.forward_resnet(x)
        return (x, torch.empty((1)))


# egs/vc/libritts/local/tuning/hifigan.py ------------------------------------------------------------------

def build_hifigan(args, generator_sizes: dict | None = None):
    """``build(args)``; ``generator_sizes`` (tests only) shrinks ``CoreHifiGan`` (``upsample_initial_channel``)."""

    class Net(nn.Module):
        def __init__(self, utt2spk, bn_extractor):
            super().__init__()
            self.bn_extractor_model = args.asrbn_model
            self.bn_extractor = bn_extractor
            self.bn_extractor.eval()
            self.f0_yaapt_opts = {"frame_length": 35.0, "frame_space": 20.0, "nccf_thresh1": 0.25,
                                  "tda_frame_length": 25.0}
            self.f0_norm = UttCMVN(var_norm=True, keep_zeros=True)
            self.utt2spk = utt2spk
            self.spk = sorted(set([v for v in utt2spk.values()]))
            self.f0 = None
            self.hifigan = CoreHifiGan(imput_dim=256 + 1 + len(self.spk), upsample_rates=[5, 4, 4, 2, 2],
                                       upsample_kernel_sizes=[11, 8, 8, 4, 4], **(generator_sizes or {}))

        def extract_features(self, x, target):
            f0, self.f0 = self.f0, None  # set by the caller (set_f0), as the VoicePrivacy recipe does
            bn = self.get_bn(x)
            spk_id = self.get_spk_id(x, target)
            return (f0, bn, spk_id)

        def convert(self, x, target):
            (f0, bn, spk_id) = self.extract_features(x, target)
            return self._forward(f0, bn, spk_id).squeeze(0)

        def _forward(self, f0, bn, spk_id):
            f0 = self.f0_norm(f0)
            if f0.dim() == 2:
                f0 = f0.unsqueeze(0)
            f0 = f0.permute(1, 0, 2)
            f0_inter = F.interpolate(f0, bn.shape[-1])
            x = torch.cat([bn, f0_inter], dim=1)
            spk_id = spk_id.unsqueeze(2).to(torch.float32)
            spk_id_inter = F.interpolate(spk_id, x.shape[-1]).to(x.device)
            x = torch.cat([x, spk_id_inter], dim=1)
            with torch.amp.autocast("cuda", enabled=True):
                x, _ = self.hifigan(x)
            return x.to(torch.float32)

        def get_bn(self, wav):
            wav = wav.detach().clone()  # satools.utils.parse_wavinfo_wav
            return self.bn_extractor.extract_bn(wav).permute(0, 2, 1)

        def set_f0(self, f0):
            self.f0 = f0

        def get_spk_id(self, wavinfo, target=None):
            return F.one_hot(torch.tensor([self.spk.index(t) for t in ([target] if isinstance(target, str)
                                                                        else target)]),
                             num_classes=len(self.spk))

    return Net


def save_final_pt(path, net: nn.Module, *, base_model_path: str, base_model_params: dict, base_model_args: dict,
                  task_path: str, install_path: str = "/home/user/SA-toolkit") -> None:
    """``final.pt`` as ``save_model`` writes it: the state dict and the entries ``infer_helper.load_model`` reads."""
    torch.save({"base_model_state_dict": net.state_dict(),
                "task_path": task_path,
                "install_path": install_path,
                "base_model_path": base_model_path,
                "base_model_params": base_model_params,
                "base_model_args": base_model_args}, path)


def asr_args(codebook_size: int | None = 48) -> SimpleNamespace:
    """The ``args`` the ASR configs read (``--freeze-encoder``, ``--codebook-size``)."""
    return SimpleNamespace(freeze_encoder="False", codebook_size=codebook_size)
