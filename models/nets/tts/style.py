"""B3's speaker embedding: IMS-Toucan's GST style embedding (``TrainingInterfaces/Spectrogram_to_Embedding/
{GST.py,StyleEmbedding.py}``, the ESPnet style encoder of Skerry-Ryan/Wang et al.'s global style tokens) with the
state-dict keys of ``tts/Embedding/embedding_function.pt``'s ``style_emb_func``, and :func:`style_embedding`, the
recipe's per-utterance extraction (``speaker_embeddings/extraction/embedding_methods/style_embeddings.py`` after
``speaker_extraction.py``'s ``normalize_wave``).

Two things the recipe does that a reader would not expect, both kept:

- the extractor is never put in eval mode, so its batch norms normalise with the statistics of the utterance's
  own 256-frame window (training mode on a batch of one), not with the running statistics the file holds;
  :class:`StyleEmbedding` computes exactly that, whatever its module mode, as an instance norm, so that a batch
  of windows gives each the result it gets alone (the running statistics stay in the state dict, unused, so
  the published file loads strictly);
- utterances shorter than 256 frames are tiled ``ceil(512 / frames)`` times, and the window's start is drawn
  from ``[0, frames - 256)`` (the last possible start never comes).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .audio import HOP_LENGTH, N_FFT, log_mel, normalise_loudness
from .vad import SileroVad, speech_span

WINDOW_FRAMES = 256
CONV_KERNEL = 3
CONV_STRIDE = 2


@dataclass(frozen=True)
class StyleConfig:
    n_mels: int = 80
    conv_channels: tuple[int, ...] = (32, 32, 64, 64, 128, 128)
    gru_units: int = 128
    tokens: int = 10
    token_dim: int = 128
    heads: int = 4

    def to_dict(self) -> dict:
        return {**asdict(self), "conv_channels": list(self.conv_channels)}

    @classmethod
    def from_dict(cls, values: dict) -> StyleConfig:
        return cls(**{**values, "conv_channels": tuple(values["conv_channels"])})


class ReferenceEncoder(nn.Module):
    """Six stride-2 conv2d + batch norm + ReLU over (time, mel), then a GRU whose last state is the reference
    embedding. ``convs`` keeps the published Sequential's indices (conv 3i, norm 3i+1, ReLU 3i+2)."""

    def __init__(self, config: StyleConfig):
        super().__init__()
        layers: list[nn.Module] = []
        channels_in = 1
        for channels in config.conv_channels:
            layers += [nn.Conv2d(channels_in, channels, CONV_KERNEL, stride=CONV_STRIDE, padding=CONV_KERNEL // 2,
                                 bias=False),
                       nn.BatchNorm2d(channels), nn.ReLU()]
            channels_in = channels
        self.convs = nn.Sequential(*layers)
        mel_bins = config.n_mels
        for _ in config.conv_channels:
            mel_bins = (mel_bins - 1) // CONV_STRIDE + 1
        self.gru = nn.GRU(mel_bins * channels_in, config.gru_units, 1, batch_first=True)

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        hidden = windows.unsqueeze(1)
        for conv, norm in zip(self.convs[0::3], self.convs[1::3]):
            # Each window's own statistics: the recipe's training-mode batch norm on a batch of one.
            hidden = F.relu(F.instance_norm(conv(hidden), weight=norm.weight, bias=norm.bias, eps=norm.eps))
        hidden = hidden.transpose(1, 2)
        _, last = self.gru(hidden.reshape(hidden.size(0), hidden.size(1), -1))
        return last[-1]


class TokenAttention(nn.Module):
    """Multi-head attention of the reference embedding (one query) over the tanh'd style tokens."""

    def __init__(self, config: StyleConfig):
        super().__init__()
        token_part = config.token_dim // config.heads
        self.heads = config.heads
        self.linear_q = nn.Linear(config.gru_units, config.token_dim)
        self.linear_k = nn.Linear(token_part, config.token_dim)
        self.linear_v = nn.Linear(token_part, config.token_dim)
        self.linear_out = nn.Linear(config.token_dim, config.token_dim)

    def forward(self, query: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        batch, width = query.size(0), self.linear_out.in_features
        head_dim = width // self.heads
        q = self.linear_q(query).view(batch, 1, self.heads, head_dim).transpose(1, 2)
        k = self.linear_k(tokens).view(1, -1, self.heads, head_dim).transpose(1, 2)
        v = self.linear_v(tokens).view(1, -1, self.heads, head_dim).transpose(1, 2)
        weights = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(head_dim), dim=-1)
        return self.linear_out(torch.matmul(weights, v).transpose(1, 2).reshape(batch, width))


class StyleTokenLayer(nn.Module):
    def __init__(self, config: StyleConfig):
        super().__init__()
        self.gst_embs = nn.Parameter(torch.zeros(config.tokens, config.token_dim // config.heads))
        self.mha = TokenAttention(config)

    def forward(self, reference: torch.Tensor) -> torch.Tensor:
        return self.mha(reference, torch.tanh(self.gst_embs).unsqueeze(0))


class StyleEncoder(nn.Module):
    def __init__(self, config: StyleConfig):
        super().__init__()
        self.ref_enc = ReferenceEncoder(config)
        self.stl = StyleTokenLayer(config)

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        return self.stl(self.ref_enc(windows))


class StyleEmbedding(nn.Module):
    """(batch, 256, n_mels) log-mel windows -> (batch, token_dim) style embeddings; keys ``gst.*``."""

    def __init__(self, config: StyleConfig = StyleConfig()):
        super().__init__()
        self.config = config
        self.gst = StyleEncoder(config)

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        return self.gst(windows)


def window_log_mel(audio: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The recipe's 256-frame log-mel window of ``audio``: a spectrogram shorter than the window is tiled
    ``ceil(512 / frames)`` times first; the window's start is drawn from ``rng`` whenever the (tiled) spectrogram
    is longer than the window.

    For a long utterance only the window's frames are computed: frame ``t`` of the centred STFT sees samples
    ``[256 t, 256 t + 1024)`` of the audio reflect-padded by 512, so the window is frames 2..257 of the
    spectrogram of that stretch of the padded audio (each frame the same 1024 samples, hence the same values)."""
    frames = 1 + len(audio) // HOP_LENGTH
    if frames <= WINDOW_FRAMES:
        spectrogram = log_mel(audio)
        if frames < WINDOW_FRAMES:
            spectrogram = np.tile(spectrogram, (math.ceil(2 * WINDOW_FRAMES / frames), 1))
        if len(spectrogram) == WINDOW_FRAMES:
            return spectrogram
        start = int(rng.integers(0, len(spectrogram) - WINDOW_FRAMES))
        return spectrogram[start:start + WINDOW_FRAMES]
    start = int(rng.integers(0, frames - WINDOW_FRAMES))
    padded = np.pad(audio, N_FFT // 2, mode="reflect")
    stretch = padded[start * HOP_LENGTH:(start + WINDOW_FRAMES - 1) * HOP_LENGTH + N_FFT]
    lead = N_FFT // 2 // HOP_LENGTH
    return log_mel(stretch)[lead:lead + WINDOW_FRAMES]


def style_window(audio_16k: np.ndarray, rng: np.random.Generator, vad: SileroVad) -> np.ndarray:
    """The (256, 80) float32 log-mel window the recipe embeds for one utterance: loudness normalised (-30 LUFS,
    then peak 1), leading and trailing silence cut (``vad``), one window drawn from ``rng``
    (:func:`window_log_mel`).
    Raises ValueError for audio the loudness meter cannot measure (shorter than 0.4 s, or silent)."""
    audio = normalise_loudness(np.asarray(audio_16k, dtype=np.float32))
    start, end = speech_span(vad, audio)
    return window_log_mel(audio[start:end], rng)


def embed_windows(model: StyleEmbedding, windows: np.ndarray) -> np.ndarray:
    """(batch, token_dim) float32 style embeddings of (batch, 256, 80) windows, on the model's device; each row
    is what its window gives alone."""
    device = next(model.parameters()).device
    with torch.inference_mode():
        vectors = model(torch.from_numpy(np.ascontiguousarray(windows, dtype=np.float32)).to(device))
    return vectors.cpu().numpy().astype(np.float32)


def style_embedding(model: StyleEmbedding, audio_16k: np.ndarray, rng: np.random.Generator,
                    vad: SileroVad) -> np.ndarray:
    """The (token_dim,) float32 style embedding of one utterance, as the recipe extracts it
    (:func:`style_window`, then the model)."""
    return embed_windows(model, style_window(audio_16k, rng, vad)[np.newaxis])[0]
