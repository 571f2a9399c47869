"""SA-toolkit's ``CoreHifiGan`` converter with the conditioning of its ASR-BN anonymisation models (B5/B6).

``egs/vc/libritts/local/tuning/hifigan.py`` (deep-privacy/SA-toolkit, Apache-2.0) feeds its HiFi-GAN,
frame by frame at the BN rate (50 Hz, hop 320 = 5·4·4·2·2), the channels

* the BN features (256),
* the F0 normalised over the utterance (``UttCMVN(var_norm=True, keep_zeros=True)``: voiced values
  standardised, unvoiced zeros kept; :func:`voxanon.models.f0.sa_yaapt.normalise_f0`), stretched to the BN
  frame count by ``F.interpolate``'s nearest-neighbour rule,
* the one-hot target speaker over the sorted speakers of the converter's training set.

``CoreHifiGan`` is jik876's generator (:class:`voxanon.models.nets.hifigan.HifiganGenerator`, with its residual
blocks and the CPU and batched synthesis of :class:`~voxanon.models.nets.hifigan.Vocoder`) except its output
layer, which reflects one sample in front of the last activations (``ReflectionPad1d((1, 0))``) before the
output convolution: T frames give T·320 + 1 samples, the first of them before the first frame's hop.
The VoicePrivacy recipe cuts the output to the input's length.

The conditioning is a :class:`~voxanon.models.nets.hifigan.ConditioningLayout` with the BN features as content
(no repetition, no layer norm) and the one-hot vector as the speaker vector; SA-toolkit's channel order
[BN | F0 | speaker] is the layout's default order.

SA-toolkit's recipe converts zero-padded batches: its F0 normalisation then pools the whole batch's voiced
frames, and the F0 of a shorter utterance is stretched with the padding. Here every utterance is
conditioned alone (the same as SA-toolkit converting it alone); batches only group the generator's work.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..hifigan import ConditioningLayout, GeneratorConfig, HifiganGenerator, _conv, _masked

SA_TOOLKIT_GENERATOR = {"upsample_rates": (5, 4, 4, 2, 2), "upsample_kernel_sizes": (11, 8, 8, 4, 4),
                        "upsample_initial_channel": 512, "resblock": "1", "resblock_kernel_sizes": (3, 7, 11),
                        "resblock_dilation_sizes": ((1, 3, 5), (1, 3, 5), (1, 3, 5))}
"""``CoreHifiGan`` as ``hifigan.py`` builds it; its input width is the BN width + 1 + the number of speakers."""


def generator_config(bn_dim: int, n_speakers: int, **sizes) -> GeneratorConfig:
    """The generator of a converter for ``bn_dim`` BN features and ``n_speakers`` targets (``sizes`` override
    :data:`SA_TOOLKIT_GENERATOR`, for small test models)."""
    return GeneratorConfig(in_channels=bn_dim + 1 + n_speakers, **{**SA_TOOLKIT_GENERATOR, **sizes})


class CoreHifiGan(HifiganGenerator):
    """(B, bn_dim + 1 + speakers, T) -> (B, 1, 1 + T·hop): jik876's generator with ``CoreHifiGan``'s output layer."""

    leading_samples = 1

    def output_layer(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        # leaky_relu at its default slope, as jik876; then the one reflected sample: [x1, x0, x1, x2, ...].
        x = _masked(F.leaky_relu(x, inplace=True), mask)
        x = torch.cat([x[..., 1:2], x], dim=-1)
        return torch.tanh(_conv(self.conv_post, x)).squeeze(2).contiguous()


def conditioning_layout(bn_dim: int, n_speakers: int) -> ConditioningLayout:
    """[BN | F0 | one-hot speaker] at the BN rate, nothing normalised by the layout itself."""
    return ConditioningLayout(content_dim=bn_dim, speaker_dim=n_speakers, content_repeat=1,
                              layer_norm_content=False, layer_norm_speaker=False)


def conditioning(bn: np.ndarray, f0: np.ndarray, target: int, n_speakers: int
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One utterance's (BN (T, bn_dim), F0 in Hz with 0 unvoiced, target speaker index) -> the
    (content, F0, speaker) triple of :meth:`~voxanon.models.nets.hifigan.Vocoder.synthesise`: the F0 normalised
    and stretched to T frames as SA-toolkit does, the speaker one-hot."""
    from ...f0.sa_yaapt import normalise_f0

    if not 0 <= target < n_speakers:
        raise ValueError(f"target speaker index {target} is not one of the converter's {n_speakers} speakers")
    if bn.ndim != 2 or len(bn) == 0 or np.ndim(f0) != 1 or len(f0) == 0:
        raise ValueError(f"conditioning needs BN frames (T, dim) and an F0 track, got {bn.shape} and "
                         f"{np.shape(f0)}")
    normalised = torch.as_tensor(normalise_f0(np.asarray(f0, dtype=np.float32)))
    stretched = F.interpolate(normalised[None, None], size=len(bn))[0, 0]
    speaker = torch.zeros(n_speakers)
    speaker[target] = 1.0
    return torch.from_numpy(np.ascontiguousarray(bn, dtype=np.float32)), stretched, speaker
