"""Speaker encoders: speechbrain ECAPA-TDNN (SSL-SAS and spkrec-ecapa-voxceleb configs) and GE2E.

ECAPA front end, as both published systems use it: speechbrain ``Fbank(n_mels=80)``
(25 ms / 10 ms, 400-point FFT) -> sentence mean normalisation (``InputNormalization(
norm_type='sentence', std_norm=False)``) -> ``ECAPA_TDNN`` -> 192-d vector. :class:`EcapaEncoder`
computes it with our own modules (:mod:`voxanon.models.nets.ecapa`: speechbrain's maths to float rounding,
its ``ECAPA_TDNN`` state-dict keys, about 1.5x faster on one thread), so embedding never imports
speechbrain; :func:`ecapa_front_end` and :func:`speechbrain_ecapa_tdnn` build speechbrain's own
classes where they are wanted as such (the ASV attacker's training, the release importer's
front-end reference).

* SSL-SAS (``pretrained_models_anon_xv/ECAPA-TDNN/embedding_model.ckpt``): channels
  512×4 and 1536, the raw ``fc`` output (no L2, no embedding normalisation).
* ``speechbrain/spkrec-ecapa-voxceleb``: channels 1024×4 and 3072, plus
  ``mean_var_norm_emb.ckpt`` (global mean subtraction, no std). speechbrain's
  ``encode_batch`` applies it only with ``normalize=True``; ``embedding_mean_norm``
  makes that choice explicit here.

ECAPA's convolutions pad by reflection, so plain zero-padded batches would change the
vectors: on CPU utterances are embedded one at a time (ECAPA is cheap next to HuBERT). On a GPU,
where one utterance at a time would be a few hundred small kernels each, :meth:`EcapaEncoder.embed_on_device`
runs padded batches whose every per-utterance step sees only the item's own frames
(:class:`~voxanon.models.nets.ecapa.FrameCounts`), in float32: the same vectors to float rounding.
GE2E (``resemblyzer``, bundled weights) is :class:`voxanon.models.nets.ge2e.GE2EEncoder`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from .ecapa import EcapaTdnn, Fbank, FrameCounts, sentence_mean_normalised
from .precision import device_groups, staging_zeros, to_device



@dataclass(frozen=True)
class EcapaConfig:
    channels: tuple[int, ...] = (512, 512, 512, 512, 1536)
    lin_neurons: int = 192
    n_mels: int = 80
    kernel_sizes: tuple[int, ...] = (5, 3, 3, 3, 1)
    dilations: tuple[int, ...] = (1, 2, 3, 4, 1)
    attention_channels: int = 128
    res2net_scale: int = 8
    se_channels: int = 128
    embedding_mean_norm: bool = False

    @classmethod
    def from_dict(cls, values: dict) -> "EcapaConfig":
        values = dict(values)
        for key in ("channels", "kernel_sizes", "dilations"):
            if key in values:
                values[key] = tuple(values[key])
        return cls(**values)

    def to_dict(self) -> dict:
        return asdict(self)



SSL_SAS_ECAPA = EcapaConfig()
SPKREC_ECAPA_VOXCELEB = EcapaConfig(channels=(1024, 1024, 1024, 1024, 3072), embedding_mean_norm=True)


def ecapa_front_end(n_mels: int = 80):
    """speechbrain's own ``Fbank(n_mels)`` and sentence mean normalisation, built as both published systems build
    them (imports speechbrain)."""
    from speechbrain.lobes.features import Fbank
    from speechbrain.processing.features import InputNormalization

    return Fbank(n_mels=n_mels), InputNormalization(norm_type="sentence", std_norm=False)


def speechbrain_ecapa_tdnn(config: EcapaConfig):
    """speechbrain's own ``ECAPA_TDNN`` of these sizes (imports speechbrain), for training in its recipe layout."""
    from speechbrain.lobes.models.ECAPA_TDNN import ECAPA_TDNN

    return ECAPA_TDNN(config.n_mels, lin_neurons=config.lin_neurons, channels=list(config.channels),
                      kernel_sizes=list(config.kernel_sizes), dilations=list(config.dilations),
                      attention_channels=config.attention_channels, res2net_scale=config.res2net_scale,
                      se_channels=config.se_channels)


def ecapa_tdnn(config: EcapaConfig) -> EcapaTdnn:
    return EcapaTdnn(config.n_mels, lin_neurons=config.lin_neurons, channels=config.channels,
                     kernel_sizes=config.kernel_sizes, dilations=config.dilations,
                     attention_channels=config.attention_channels, res2net_scale=config.res2net_scale,
                     se_channels=config.se_channels)


class EcapaEncoder(torch.nn.Module):
    """16 kHz waveforms -> (n, lin_neurons) float32 speaker vectors.

    ``embedding_model`` (an :class:`~voxanon.models.nets.ecapa.EcapaTdnn`, randomly initialised unless given) holds
    exactly the keys of speechbrain's ``ECAPA_TDNN``: its ``embedding_model.ckpt`` loads into it as it is."""

    def __init__(self, config: EcapaConfig = SSL_SAS_ECAPA, embedding_model: EcapaTdnn | None = None):
        super().__init__()
        self.config = config
        self.fbank = Fbank(config.n_mels)
        self.embedding_model = ecapa_tdnn(config) if embedding_model is None else embedding_model
        self.register_buffer("embedding_mean", torch.zeros(config.lin_neurons))
        self.eval()

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        """(B, samples) of equal length -> (B, lin_neurons)."""
        embedding = self.embedding_model(sentence_mean_normalised(self.fbank(wave)))
        return embedding - self.embedding_mean if self.config.embedding_mean_norm else embedding

    def forward_padded(self, waves: torch.Tensor, lengths: list[int]) -> torch.Tensor:
        """Zero-padded (B, samples) waveforms on the model's device and their lengths -> (B, lin_neurons), each
        item's vector as :meth:`forward` gives it for the item alone (to float rounding)."""
        hop = self.fbank.hop_length
        frames = FrameCounts([n // hop + 1 for n in lengths], waves.shape[1] // hop + 1, waves.device)
        embedding = self.embedding_model(sentence_mean_normalised(self.fbank(waves, frames), frames), frames)
        return embedding - self.embedding_mean if self.config.embedding_mean_norm else embedding

    @torch.inference_mode()
    def embed_on_device(self, waves: list[np.ndarray], *, max_items: int | None = None) -> np.ndarray:
        """:meth:`embed` on whatever device the encoder is on (the GPU path of the speaker stage; on CPU the same
        values, which is how it is tested): groups of similar length as padded batches
        (:func:`~voxanon.models.nets.precision.device_groups`, at most ``max_items`` each), every group queued
        before the host waits for the first result."""
        device = self.embedding_mean.device
        vectors = np.zeros((len(waves), self.config.lin_neurons), dtype=np.float32)
        queued = []
        for group in device_groups([len(w) for w in waves], max_items, multiple=self.fbank.hop_length):
            padded = staging_zeros(group.rows, group.length, device=device)
            lengths = [group.length] * group.rows  # padding rows: silence of the full length
            for row, i in enumerate(group.indices):
                padded[row, :len(waves[i])] = torch.from_numpy(np.asarray(waves[i], dtype=np.float32))
                lengths[row] = len(waves[i])
            queued.append((group.indices, self.forward_padded(to_device(padded, device), lengths)))
        for indices, embeddings in queued:
            vectors[indices] = embeddings[:len(indices)].float().cpu().numpy()
        return vectors

    @torch.inference_mode()
    def embed(self, waves: list[np.ndarray]) -> np.ndarray:
        if not waves:
            return np.zeros((0, self.config.lin_neurons), dtype=np.float32)
        return np.stack([self(torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32))[None])[0].numpy()
                         for w in waves]).astype(np.float32)
