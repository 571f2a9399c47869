"""IMS-Toucan's CTC aligner as B3's prosody extraction uses it (``TrainingInterfaces/Text_to_Spectrogram/
AutoAligner/Aligner.py`` of the VoicePrivacy 2024 recipe's vendored IMS-Toucan, after DeepForcedAligner; Apache-2.0),
with the published ``aligner.pt``'s ``asr_model`` keys.

A log-mel (frames, 80) goes through five conv(3)-ReLU-BatchNorm blocks (dropout 0.5 after each in training), a
bidirectional LSTM and a projection to 145 CTC states (144: blank). Per utterance the recipe fine-tunes the network
for three SGD steps (lr 0.1, gradient norm clipped to 1) on that utterance's CTC loss, in training mode (dropout
active, BatchNorm on the utterance's statistics, its running statistics updated), then aligns the phones to the
frames by monotonic alignment search over the raw scores of the utterance's phones (:func:`monotonic_path`).
:func:`fine_tuned_copy` does the steps on a copy, never on the shared network, with every dropout mask drawn from
an explicit ``torch.Generator`` (the recipe draws from the global generator, unseeded). The SGD step is written
out (``parameter -= lr * grad``, what ``torch.optim.SGD`` does without momentum): constructing a torch optimiser
imports ``torch._dynamo``, seconds per process.
"""
from __future__ import annotations

import copy
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

FINE_TUNING_STEPS = 3
FINE_TUNING_LEARNING_RATE = 0.1
GRADIENT_NORM_LIMIT = 1.0
DROPOUT = 0.5
CTC_BLANK = 144
CONV_BLOCKS = 5


@dataclass(frozen=True)
class AlignerConfig:
    n_mels: int = 80
    num_symbols: int = 145
    lstm_dim: int = 512
    conv_dim: int = 512

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> AlignerConfig:
        return cls(**values)


class BatchNormConv(nn.Module):
    """Conv1d (no bias, 'same' padding), ReLU, then BatchNorm, over (batch, frames, channels)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, stride=1, padding=kernel_size // 2, bias=False)
        self.bnorm = nn.BatchNorm1d(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bnorm(torch.relu(self.conv(x.transpose(1, 2)))).transpose(1, 2)


class DropoutSlot(nn.Module):
    """Holds the place of the recipe's ``nn.Dropout`` in ``convs`` (odd indices, so the blocks keep the published
    keys ``convs.0``, ``convs.2``, ...); the dropout itself is :func:`_dropout`, with an explicit generator."""


def _dropout(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """PyTorch's CPU dropout (a Bernoulli(1 - p) mask laid out as the input, here transposed, divided by 1 - p,
    times the input), the mask drawn from ``generator`` on its own device: the same draws as ``nn.Dropout`` after
    ``torch.manual_seed`` of that seed."""
    mask = torch.empty_like(x, device=generator.device).bernoulli_(1 - DROPOUT, generator=generator)
    return x * mask.div_(1 - DROPOUT).to(x.device)


class Aligner(nn.Module):
    def __init__(self, config: AlignerConfig = AlignerConfig()):
        super().__init__()
        self.config = config
        blocks: list[nn.Module] = []
        for index in range(CONV_BLOCKS):
            blocks += [BatchNormConv(config.n_mels if index == 0 else config.conv_dim, config.conv_dim, 3),
                       DropoutSlot()]
        self.convs = nn.ModuleList(blocks)
        self.rnn = nn.LSTM(config.conv_dim, config.lstm_dim, batch_first=True, bidirectional=True)
        self.proj = nn.Linear(2 * config.lstm_dim, config.num_symbols)

    def forward(self, mel: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """(batch, frames, num_symbols) scores of (batch, frames, n_mels) log-mels; in training mode the dropout
        masks come from ``generator`` (required then)."""
        x = mel
        for block in self.convs:
            if isinstance(block, DropoutSlot):
                if self.training:
                    if generator is None:
                        raise ValueError("the aligner in training mode needs a torch.Generator for its dropout")
                    x = _dropout(x, generator)
            else:
                x = block(x)
        x, _ = self.rnn(x)
        return self.proj(x)


def fine_tuned_copy(aligner: Aligner, mel: torch.Tensor, tokens: torch.Tensor,
                    generator: torch.Generator) -> Aligner:
    """A copy of ``aligner`` after the recipe's three SGD steps on one utterance's CTC loss (``mel``: (frames,
    n_mels); ``tokens``: the phones' CTC IDs), in evaluation mode."""
    model = copy.deepcopy(aligner)
    parameters = list(model.parameters())
    batch = mel.unsqueeze(0)
    frames = torch.tensor([mel.shape[0]], dtype=torch.long)
    token_count = torch.tensor([len(tokens)], dtype=torch.long)
    model.train()
    with torch.enable_grad():
        for _ in range(FINE_TUNING_STEPS):
            scores = model(batch, generator)
            loss = nn.functional.ctc_loss(scores.transpose(0, 1).log_softmax(2), tokens, frames, token_count,
                                          blank=CTC_BLANK, zero_infinity=True)
            for parameter in parameters:
                parameter.grad = None
            loss.backward()
            torch.nn.utils.clip_grad_norm_(parameters, GRADIENT_NORM_LIMIT)
            with torch.no_grad():
                for parameter in parameters:  # torch.optim.SGD's step without momentum, the same operation
                    parameter.add_(parameter.grad, alpha=-FINE_TUNING_LEARNING_RATE)
    model.eval()
    return model


def monotonic_path(scores: np.ndarray) -> np.ndarray:
    """The phone index of each frame on the best monotonic path through (frames, phones) float32 ``scores``
    (the aligner's raw scores of the utterance's phones), as the recipe's ``binarize_alignment`` (NVIDIA FastPitch's
    MAS) finds it: scores shifted positive and logged, the path starting at the first phone, each frame staying on
    its phone or moving to the next (the next preferred on ties), backtracked from the last phone. Row by row in
    float32 as the recipe's scalar loop, so every sum and every tie is the same."""
    shifted = scores + (np.abs(scores).max() + 1.0)
    log_scores = np.log(shifted)
    log_scores[0, 1:] = -np.inf
    frames, phones = log_scores.shape
    best = np.empty_like(log_scores)
    best[0] = log_scores[0]
    moved = np.zeros(log_scores.shape, dtype=bool)
    for frame in range(1, frames):
        previous = best[frame - 1]
        moved[frame, 1:] = previous[:-1] >= previous[1:]
        came_from = previous.copy()
        came_from[1:] = np.where(moved[frame, 1:], previous[:-1], previous[1:])
        best[frame] = log_scores[frame] + came_from
    path = np.empty(frames, dtype=np.int64)
    phone = phones - 1
    for frame in range(frames - 1, -1, -1):
        path[frame] = phone
        phone -= int(moved[frame, phone])
    # The recipe also marks the first phone in the first frame; its durations take each frame's first mark.
    path[0] = 0
    return path


def path_durations(path: np.ndarray, phones: int) -> np.ndarray:
    """Frames per phone (int64) of a frame-to-phone path."""
    return np.bincount(path, minlength=phones).astype(np.int64)


def aligned_durations(aligner: Aligner, mel: torch.Tensor, tokens: torch.Tensor) -> np.ndarray:
    """Frames per token of the (evaluation-mode) ``aligner``'s monotonic alignment of ``tokens`` to ``mel``."""
    with torch.inference_mode():
        scores = aligner(mel.unsqueeze(0))[0].cpu().numpy()
    return path_durations(monotonic_path(scores[:, tokens.cpu().numpy()]), len(tokens))
