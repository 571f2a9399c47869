"""IMS-Toucan's FastSpeech2 as B3 runs it (``InferenceInterfaces/InferenceArchitectures/InferenceFastSpeech2.py``):
articulatory phone vectors, the durations, pitch and energy given per phone and a 128-d utterance (style)
embedding -> an 80-bin log-mel spectrogram. The state-dict keys are the published ``prosody_cloning.pt``'s
``model``.

B3 clones prosody, so the duration, pitch and energy predictors are never run (the reference computes the two
variance predictors and throws their output away); they are held so that the published state dict loads key by
key. As the reference does, the given pitch is set to 0 on every phone whose vector has 0 in its voicing
dimension (:data:`VOICED_DIM`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from .conformer import Conformer, frame_mask, masked, masked_group_norm

VOICED_DIM = 61
"""The articulatory vector's dimension that is 0 for unvoiced phones (Toucan zeroes their pitch)."""


@dataclass(frozen=True)
class FastSpeech2Config:
    """Toucan's FastSpeech2 sizes; the defaults are the published model's."""

    idim: int = 62
    odim: int = 80
    adim: int = 384
    aheads: int = 4
    elayers: int = 6
    eunits: int = 1536
    dlayers: int = 6
    dunits: int = 1536
    conformer_enc_kernel_size: int = 7
    conformer_dec_kernel_size: int = 31
    postnet_layers: int = 5
    postnet_chans: int = 256
    postnet_filts: int = 5
    duration_predictor_layers: int = 2
    duration_predictor_chans: int = 256
    duration_predictor_kernel_size: int = 3
    pitch_predictor_layers: int = 5
    pitch_predictor_chans: int = 256
    pitch_predictor_kernel_size: int = 5
    energy_predictor_layers: int = 2
    energy_predictor_chans: int = 256
    energy_predictor_kernel_size: int = 3
    utt_embed_dim: int = 128

    @classmethod
    def from_dict(cls, values: dict) -> "FastSpeech2Config":
        return cls(**{key: int(value) for key, value in values.items()})

    def to_dict(self) -> dict:
        return asdict(self)


class Predictor(nn.Module):
    """Toucan's ``DurationPredictor`` / ``VariancePredictor`` layout (convolution, ReLU, layer norm per layer, then
    a linear output): its weights only, since prosody cloning gives what it would predict."""

    def __init__(self, idim: int, layers: int, channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.ModuleList(
            nn.Sequential(nn.Conv1d(idim if i == 0 else channels, channels, kernel_size, padding=(kernel_size - 1) // 2),
                          nn.ReLU(), nn.LayerNorm(channels))
            for i in range(layers))
        self.linear = nn.Linear(channels, 1)


class PostNet(nn.Module):
    """Five convolutions of 5 (group norms of 32 groups, and of 20 on the last), tanh between: a residual
    correction of the decoder's mel."""

    def __init__(self, odim: int, layers: int, channels: int, kernel_size: int):
        super().__init__()
        self.postnet = nn.ModuleList()
        for i in range(layers):
            last = i == layers - 1
            conv = nn.Conv1d(odim if i == 0 else channels, odim if last else channels, kernel_size,
                             padding=(kernel_size - 1) // 2, bias=False)
            self.postnet.append(nn.Sequential(conv, nn.GroupNorm(20 if last else 32, odim if last else channels)))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """(B, T, odim) -> (B, T, odim)."""
        for i, (conv, norm) in enumerate(self.postnet):
            x = conv(masked(x, mask).transpose(1, 2)).transpose(1, 2)
            x = masked_group_norm(norm, x, mask)
            if i < len(self.postnet) - 1:
                x = torch.tanh(x)
        return x


class FastSpeech2(nn.Module):
    def __init__(self, config: FastSpeech2Config = FastSpeech2Config()):
        super().__init__()
        c = self.config = config
        self.encoder = Conformer(c.adim, c.aheads, c.eunits, c.elayers, c.conformer_enc_kernel_size,
                                 input_dim=c.idim, utterance_dim=c.utt_embed_dim)
        self.duration_predictor = Predictor(c.adim, c.duration_predictor_layers, c.duration_predictor_chans,
                                            c.duration_predictor_kernel_size)
        self.pitch_predictor = Predictor(c.adim, c.pitch_predictor_layers, c.pitch_predictor_chans,
                                         c.pitch_predictor_kernel_size)
        self.energy_predictor = Predictor(c.adim, c.energy_predictor_layers, c.energy_predictor_chans,
                                          c.energy_predictor_kernel_size)
        self.pitch_embed = nn.Sequential(nn.Conv1d(1, c.adim, 1))
        self.energy_embed = nn.Sequential(nn.Conv1d(1, c.adim, 1))
        self.decoder = Conformer(c.adim, c.aheads, c.dunits, c.dlayers, c.conformer_dec_kernel_size)
        self.feat_out = nn.Linear(c.adim, c.odim)
        self.postnet = PostNet(c.odim, c.postnet_layers, c.postnet_chans, c.postnet_filts)

    @torch.inference_mode()
    def forward(self, phones: torch.Tensor, durations: torch.Tensor, pitch: torch.Tensor, energy: torch.Tensor,
                style: torch.Tensor) -> torch.Tensor:
        """One utterance: phones (N, idim), durations (N,) frames, pitch and energy (N,), style (utt_embed_dim,)
        -> mel (frames, odim)."""
        return self.batch([(phones, durations, pitch, energy, style)])[0]

    @torch.inference_mode()
    def batch(self, items: list[tuple[torch.Tensor, ...]]) -> list[torch.Tensor]:
        """:meth:`forward` for several utterances as one zero-padded, length-masked batch: each mel equals the
        utterance's one-at-a-time mel, to float rounding."""
        device = self.feat_out.weight.device
        items = [tuple(torch.as_tensor(x).to(device) for x in item) for item in items]
        phones = nn.utils.rnn.pad_sequence([item[0].float() for item in items], batch_first=True)
        counts = torch.tensor([len(item[0]) for item in items], device=device)
        styles = torch.stack([item[4].float().reshape(-1) for item in items])
        single = len(items) == 1
        encoded = self.encoder(phones, None if single else counts, styles)
        rows = []
        for row, (vectors, durations, pitch, energy, _) in enumerate(items):
            pitch = pitch.float().reshape(-1).masked_fill(vectors[:, VOICED_DIM] == 0, 0.0)
            energy = energy.float().reshape(-1)
            hidden = (encoded[row, :len(vectors)] + embedded(self.energy_embed[0], energy)
                      + embedded(self.pitch_embed[0], pitch))
            rows.append(torch.repeat_interleave(hidden, regulated(durations), dim=0))
        frames = torch.tensor([len(row) for row in rows], device=device)
        hidden = nn.utils.rnn.pad_sequence(rows, batch_first=True)
        lengths = None if single else frames
        decoded = self.decoder(hidden, lengths)
        before = self.feat_out(decoded)
        after = before + self.postnet(before, frame_mask(lengths, before.shape[1]))
        return [after[row, :n] for row, n in enumerate(frames.tolist())]


def embedded(conv: nn.Conv1d, values: torch.Tensor) -> torch.Tensor:
    """A kernel-1 ``Conv1d`` from one channel, on (N,) values: (N, channels)."""
    return values[:, None] * conv.weight[:, 0, 0] + conv.bias


def regulated(durations) -> torch.Tensor:
    """Frames per phone as Toucan's ``LengthRegulator`` takes them: all ones where every duration is 0."""
    durations = torch.as_tensor(durations, dtype=torch.long).reshape(-1)
    return torch.ones_like(durations) if int(durations.sum()) == 0 else durations
