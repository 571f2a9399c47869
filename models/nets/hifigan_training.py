"""HiFi-GAN training parts (jik876/hifi-gan, MIT): discriminators, losses and the loss mel spectrogram.

* :class:`MultiPeriodDiscriminator` (periods 2, 3, 5, 7, 11) and :class:`MultiScaleDiscriminator`
  (3 scales, the first with spectral norm, then ×2 average-pooled copies) with jik876's module
  names and its normalisation API (``torch.nn.utils.weight_norm`` / ``spectral_norm``), so
  their state dicts use the ``weight_g``/``weight_v`` and ``weight_orig``/``weight_u``/``weight_v``
  keys of published ``do_*`` checkpoints and load strictly in both directions. ``width_divisor``
  narrows every hidden layer (same keys, smaller shapes) for smoke tests on a CPU; 1 is jik876's.
* Losses as jik876 ``models.py``: least-squares GAN losses, feature matching (L1 over every
  feature map, ×2) and the mel L1 (weighted by :data:`MEL_LOSS_WEIGHT` in the generator loss),
  plus the x-vector consistency loss of the ICASSP 2023 zLLR-VC vocoder
  (nii-yamagishilab/speaker_sex_attribute_privacy).
* :class:`LossMelSpectrogram`: jik876 ``mel_spectrogram``: reflect padding of (n_fft − hop)/2
  each side, ``center=False`` STFT with a Hann window, magnitude ``sqrt(re² + im² + 1e-9)``,
  librosa Slaney mel basis, natural log clamped at 1e-5.

Every loss is computed in float32, whatever precision the networks ran in.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .hifigan import LRELU_SLOPE

MPD_PERIODS = (2, 3, 5, 7, 11)
MEL_LOSS_WEIGHT = 45.0
FEATURE_MATCHING_WEIGHT = 2.0


def _normalised(module: nn.Module, spectral: bool = False) -> nn.Module:
    """jik876's ``weight_norm`` / ``spectral_norm`` (the pre-parametrization API, for its key names)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return nn.utils.spectral_norm(module) if spectral else nn.utils.weight_norm(module)


WIDTH_DIVISORS = (1, 2, 4, 8)
"""Channel-width divisors the discriminators accept (the MSD's 16 groups bound it); 1 is jik876's size."""


def _checked_divisor(width_divisor: int) -> int:
    if width_divisor not in WIDTH_DIVISORS:
        raise ValueError(f"discriminator width divisor must be one of {WIDTH_DIVISORS}, got {width_divisor}")
    return width_divisor


def _padding(kernel_size: int, dilation: int = 1) -> int:
    return (kernel_size * dilation - dilation) // 2


def _scores_and_feature_maps(x: torch.Tensor, convs: nn.ModuleList,
                             conv_post: nn.Module) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The shared tail of both discriminators: each layer's activations kept for feature matching."""
    feature_maps = []
    for conv in convs:
        x = F.leaky_relu(conv(x), LRELU_SLOPE)
        feature_maps.append(x)
    x = conv_post(x)
    feature_maps.append(x)
    return torch.flatten(x, 1, -1), feature_maps


class DiscriminatorP(nn.Module):
    """One period of the MPD: the waveform folded to (T/period, period) and 2-D convolved along time."""

    def __init__(self, period: int, kernel_size: int = 5, stride: int = 3, spectral: bool = False,
                 width_divisor: int = 1):
        super().__init__()
        self.period = period
        widths = (1,) + tuple(c // _checked_divisor(width_divisor) for c in (32, 128, 512, 1024))
        convs = [nn.Conv2d(c_in, c_out, (kernel_size, 1), (stride, 1), padding=(_padding(5), 0))
                 for c_in, c_out in zip(widths, widths[1:])]
        convs.append(nn.Conv2d(widths[-1], widths[-1], (kernel_size, 1), 1, padding=(2, 0)))
        self.convs = nn.ModuleList(_normalised(conv, spectral) for conv in convs)
        self.conv_post = _normalised(nn.Conv2d(widths[-1], 1, (3, 1), 1, padding=(1, 0)), spectral)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        batch, channels, samples = x.shape
        if samples % self.period:
            n_pad = self.period - samples % self.period
            x = F.pad(x, (0, n_pad), "reflect")
            samples += n_pad
        x = x.view(batch, channels, samples // self.period, self.period)
        return _scores_and_feature_maps(x, self.convs, self.conv_post)


class DiscriminatorS(nn.Module):
    """One scale of the MSD: strided, grouped 1-D convolutions on the waveform."""

    def __init__(self, spectral: bool = False, width_divisor: int = 1):
        super().__init__()
        c128, c256, c512, c1024 = (c // _checked_divisor(width_divisor) for c in (128, 256, 512, 1024))
        convs = [nn.Conv1d(1, c128, 15, 1, padding=7),
                 nn.Conv1d(c128, c128, 41, 2, groups=4, padding=20),
                 nn.Conv1d(c128, c256, 41, 2, groups=16, padding=20),
                 nn.Conv1d(c256, c512, 41, 4, groups=16, padding=20),
                 nn.Conv1d(c512, c1024, 41, 4, groups=16, padding=20),
                 nn.Conv1d(c1024, c1024, 41, 1, groups=16, padding=20),
                 nn.Conv1d(c1024, c1024, 5, 1, padding=2)]
        self.convs = nn.ModuleList(_normalised(conv, spectral) for conv in convs)
        self.conv_post = _normalised(nn.Conv1d(c1024, 1, 3, 1, padding=1), spectral)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        return _scores_and_feature_maps(x, self.convs, self.conv_post)


DiscriminatorOutputs = tuple[list[torch.Tensor], list[torch.Tensor], list[list[torch.Tensor]], list[list[torch.Tensor]]]
"""(real scores, generated scores, real feature maps, generated feature maps), one entry per sub-discriminator."""


class MultiPeriodDiscriminator(nn.Module):
    def __init__(self, periods: tuple[int, ...] = MPD_PERIODS, width_divisor: int = 1):
        super().__init__()
        self.discriminators = nn.ModuleList(DiscriminatorP(period, width_divisor=width_divisor) for period in periods)

    def forward(self, real: torch.Tensor, generated: torch.Tensor) -> DiscriminatorOutputs:
        """``real`` and ``generated`` are (B, 1, samples) waveforms."""
        outputs: DiscriminatorOutputs = ([], [], [], [])
        for discriminator in self.discriminators:
            _append(outputs, discriminator(real), discriminator(generated))
        return outputs


class MultiScaleDiscriminator(nn.Module):
    def __init__(self, width_divisor: int = 1):
        super().__init__()
        self.discriminators = nn.ModuleList([DiscriminatorS(spectral=True, width_divisor=width_divisor),
                                             DiscriminatorS(width_divisor=width_divisor),
                                             DiscriminatorS(width_divisor=width_divisor)])
        self.meanpools = nn.ModuleList([nn.AvgPool1d(4, 2, padding=2), nn.AvgPool1d(4, 2, padding=2)])

    def forward(self, real: torch.Tensor, generated: torch.Tensor) -> DiscriminatorOutputs:
        outputs: DiscriminatorOutputs = ([], [], [], [])
        for i, discriminator in enumerate(self.discriminators):
            if i:
                real = self.meanpools[i - 1](real)
                generated = self.meanpools[i - 1](generated)
            _append(outputs, discriminator(real), discriminator(generated))
        return outputs


def _append(outputs: DiscriminatorOutputs, real, generated) -> None:
    outputs[0].append(real[0])
    outputs[1].append(generated[0])
    outputs[2].append(real[1])
    outputs[3].append(generated[1])


def discriminator_loss(real_scores: list[torch.Tensor], generated_scores: list[torch.Tensor]) -> torch.Tensor:
    """Least-squares GAN: Σ over sub-discriminators of mean((1 − D(real))²) + mean(D(generated)²)."""
    return sum(torch.mean((1 - real.float()) ** 2) + torch.mean(generated.float() ** 2)
               for real, generated in zip(real_scores, generated_scores))


def generator_loss(generated_scores: list[torch.Tensor]) -> torch.Tensor:
    """Least-squares GAN: Σ over sub-discriminators of mean((1 − D(generated))²)."""
    return sum(torch.mean((1 - generated.float()) ** 2) for generated in generated_scores)


def feature_loss(real_maps: list[list[torch.Tensor]], generated_maps: list[list[torch.Tensor]]) -> torch.Tensor:
    """Feature matching: Σ of mean |real − generated| over every layer of every sub-discriminator, ×2.

    The real feature maps are targets; jik876 does not detach them either (the discriminator's
    gradients from this loss are cleared before its next step), so neither do we.
    """
    total = sum(torch.mean(torch.abs(real.float() - generated.float()))
                for real_layers, generated_layers in zip(real_maps, generated_maps)
                for real, generated in zip(real_layers, generated_layers))
    return total * FEATURE_MATCHING_WEIGHT


def xvector_consistency_loss(generated_vectors: torch.Tensor, target_vectors: torch.Tensor) -> torch.Tensor:
    """Mean over the batch of the Euclidean (L2) distance between (B, D) speaker vectors."""
    if generated_vectors.shape != target_vectors.shape or generated_vectors.ndim != 2:
        raise ValueError(f"speaker vectors must both be (batch, dim), got {tuple(generated_vectors.shape)} and "
                         f"{tuple(target_vectors.shape)}")
    return torch.linalg.vector_norm(generated_vectors.float() - target_vectors.float(), dim=1).mean()


@dataclass(frozen=True)
class MelConfig:
    """The loss mel spectrogram; defaults are the SSL-SAS config's (``fmax_for_loss`` null = fmax 8 kHz)."""

    sample_rate: int = 16000
    n_fft: int = 1024
    hop_length: int = 256
    win_length: int = 1024
    n_mels: int = 80
    f_min: float = 0.0
    f_max: float = 8000.0

    def __post_init__(self):
        if self.win_length > self.n_fft:
            raise ValueError(f"win_length {self.win_length} exceeds n_fft {self.n_fft}")
        if (self.n_fft - self.hop_length) % 2:
            raise ValueError("n_fft - hop_length must be even (it is split into two reflect paddings)")


class LossMelSpectrogram(nn.Module):
    """(B, samples) waveform -> (B, n_mels, frames) log mel, as jik876 ``mel_spectrogram``.

    frames = (samples + n_fft − hop − n_fft) // hop + 1 = samples // hop for the defaults; the
    input must be longer than the (n_fft − hop)/2 reflect padding.
    """

    def __init__(self, config: MelConfig = MelConfig()):
        super().__init__()
        import librosa

        self.config = config
        basis = librosa.filters.mel(sr=config.sample_rate, n_fft=config.n_fft, n_mels=config.n_mels,
                                    fmin=config.f_min, fmax=config.f_max)
        self.register_buffer("mel_basis", torch.from_numpy(basis).float(), persistent=False)
        self.register_buffer("window", torch.hann_window(config.win_length), persistent=False)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        config = self.config
        pad = (config.n_fft - config.hop_length) // 2
        if audio.ndim != 2 or audio.shape[-1] <= pad:
            raise ValueError(f"mel spectrogram needs (batch, samples) with more than {pad} samples, "
                             f"got {tuple(audio.shape)}")
        audio = F.pad(audio.float()[:, None], (pad, pad), mode="reflect")[:, 0]
        spec = torch.stft(audio, config.n_fft, hop_length=config.hop_length, win_length=config.win_length,
                          window=self.window, center=False, normalized=False, onesided=True, return_complex=True)
        magnitude = torch.sqrt(spec.real ** 2 + spec.imag ** 2 + 1e-9)
        return torch.log(torch.clamp(torch.matmul(self.mel_basis, magnitude), min=1e-5))


_PARAMETRIZED_WEIGHT = re.compile(r"^(.*)\.parametrizations\.weight\.original([01])$")


def to_jik876_generator_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A weight-normed generator's state with jik876's ``weight_g``/``weight_v`` names.

    ``torch.nn.utils.parametrizations.weight_norm`` (what :meth:`HifiganGenerator.apply_weight_norm`
    uses) stores g and v as ``parametrizations.weight.original0/1``; it loads the old names back
    through its compatibility hook, so the values round-trip bit for bit.
    """
    renamed = {}
    for key, value in state.items():
        match = _PARAMETRIZED_WEIGHT.match(key)
        renamed[f"{match[1]}.weight_{'g' if match[2] == '0' else 'v'}" if match else key] = value
    return renamed
