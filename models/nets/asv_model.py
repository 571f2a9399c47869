"""The speaker-classification network an ASV attacker is trained as (VoicePrivacy 2024 ``ASV_eval^anon``).

speechbrain's speaker-recognition recipe, as the challenge's ``train_ecapa_tdnn_small.yaml``
sets it: ``Fbank`` -> sentence mean normalisation -> ``ECAPA_TDNN`` (the embedding, the
front end and network that :class:`voxanon.models.nets.speaker.EcapaEncoder` computes) -> speechbrain's
cosine ``Classifier`` over the training speakers, trained with additive angular margin
softmax (``LogSoftmaxWrapper(AdditiveAngularMargin(margin, scale))``).

The front end always runs in float32 (the STFT and the mean are where half precision loses
most); ``forward`` can run the embedding network and classifier under autocast. The
sub-modules are speechbrain's own classes, so ``embedding_model.state_dict()`` and
``classifier.state_dict()`` have exactly the keys speechbrain's checkpointer writes.
"""
from __future__ import annotations

import contextlib
import math

import torch

from .speaker import EcapaConfig, ecapa_front_end, speechbrain_ecapa_tdnn


class SpeakerClassifier(torch.nn.Module):
    """16 kHz waveform chunks -> cosine similarities to each training speaker, shape (B, 1, n_speakers)."""

    def __init__(self, config: EcapaConfig, n_speakers: int):
        super().__init__()
        from speechbrain.lobes.models.ECAPA_TDNN import Classifier

        if config.embedding_mean_norm:
            raise ValueError("the training network has no embedding mean normalisation")
        self.config = config
        self.fbank, self.mean_norm = ecapa_front_end(config.n_mels)
        self.embedding_model = speechbrain_ecapa_tdnn(config)
        self.classifier = Classifier(config.lin_neurons, out_neurons=n_speakers)

    def features(self, wave: torch.Tensor) -> torch.Tensor:
        """(B, samples) -> sentence-mean-normalised (B, frames, n_mels) Fbank, always float32."""
        with torch.autocast(wave.device.type, enabled=False):
            feats = self.fbank(wave.float())
            return self.mean_norm(feats, torch.ones(wave.shape[0], device=wave.device))

    def forward(self, wave: torch.Tensor, autocast_dtype: torch.dtype | None = None) -> torch.Tensor:
        feats = self.features(wave)
        context = (torch.autocast(wave.device.type, dtype=autocast_dtype) if autocast_dtype is not None
                   else contextlib.nullcontext())
        with context:
            embedding = self.embedding_model(feats, torch.ones(wave.shape[0], device=wave.device))
            return self.classifier(embedding).float()


def aam_softmax_loss(margin: float, scale: float) -> torch.nn.Module:
    """speechbrain's AAM-softmax: ``loss(cosines (B, 1, N), labels (B, 1))`` -> mean cross-entropy."""
    from speechbrain.nnet.losses import AdditiveAngularMargin, LogSoftmaxWrapper

    return LogSoftmaxWrapper(AdditiveAngularMargin(margin=margin, scale=scale))


def cyclic_learning_rate(step: int, base_lr: float, max_lr: float, step_size: float) -> float:
    """speechbrain's ``CyclicLRScheduler`` (triangular) after ``step`` calls of ``on_batch_end``.

    In speechbrain's recipe ``on_batch_end`` runs inside ``compute_objectives``, before the
    optimiser step, so training batch ``k`` (counting from 1) is taken with ``lr(k)``.
    """
    cycle = math.floor(1 + step / (2 * step_size))
    x = abs(step / step_size - 2 * cycle + 1)
    return base_lr + (max_lr - base_lr) * max(0.0, 1.0 - x)
