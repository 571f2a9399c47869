"""Silero VAD (snakers4/silero-vad, MIT) as B3 uses it: where speech begins and ends in an utterance, the span
the recipe keeps when it cuts leading and trailing silence (IMS-Toucan's ``cut_silence_from_audio`` and the
prosody extractor: from the first speech segment's start to the last one's end).

:class:`SileroVad` is the 16 kHz network with the keys of ``silero_vad_16k.safetensors`` (shipped in the
``silero-vad`` package; read as data by ``models/checkpoints/sttts_speaker.py``): a 256-point STFT as a fixed
convolution, four conv1d layers, an LSTM cell carried from chunk to chunk, and a sigmoid head, on 512-sample
chunks each preceded by the previous chunk's last 64 samples. The convolutions of every chunk run at once, then
the LSTM cell runs through them in one sequence call. :func:`speech_span` applies ``get_speech_timestamps``' rules
at its defaults (threshold 0.5, exit threshold 0.35, speech of 250 ms at least, 100 ms of silence to end a
segment, 30 ms of padding; no maximum length), keeping the whole utterance when no speech is found, as the recipe
does.

A stated difference: the recipe loads Silero with ``torch.hub`` from the repository's moving default branch, so
its model is whichever version was current when a machine first downloaded it (4 until mid 2024, then 5); this
is the version the ``silero-vad`` package pins.
"""
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

SAMPLE_RATE = 16000
CHUNK = 512
CONTEXT = 64
N_FFT = 256
STFT_HOP = 128
BINS = N_FFT // 2 + 1
HIDDEN = 128
THRESHOLD = 0.5
EXIT_THRESHOLD = THRESHOLD - 0.15
MIN_SPEECH_SAMPLES = SAMPLE_RATE * 250 / 1000
MIN_SILENCE_SAMPLES = SAMPLE_RATE * 100 / 1000
SPEECH_PAD_SAMPLES = SAMPLE_RATE * 30 / 1000


class SileroVad(nn.Module):
    def __init__(self):
        super().__init__()
        self.stft_conv = nn.Conv1d(1, 2 * BINS, N_FFT, stride=STFT_HOP, bias=False)
        self.conv1 = nn.Conv1d(BINS, 128, 3, padding=1)
        self.conv2 = nn.Conv1d(128, 64, 3, stride=2, padding=1)
        self.conv3 = nn.Conv1d(64, 64, 3, stride=2, padding=1)
        self.conv4 = nn.Conv1d(64, HIDDEN, 3, padding=1)
        self.lstm_cell = nn.LSTMCell(HIDDEN, HIDDEN)
        self.final_conv = nn.Conv1d(HIDDEN, 1, 1)

    def encode(self, chunks: torch.Tensor) -> torch.Tensor:
        """(n, 576) context-prefixed chunks -> (n, 128) features; independent of the other chunks."""
        spectrum = self.stft_conv(F.pad(chunks.unsqueeze(1), (0, CONTEXT), mode="reflect"))
        hidden = torch.sqrt(spectrum[:, :BINS] ** 2 + spectrum[:, BINS:] ** 2)
        for conv in (self.conv1, self.conv2, self.conv3, self.conv4):
            hidden = F.relu(conv(hidden))
        return hidden.squeeze(-1)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        """(samples,) 16 kHz audio -> (chunks,) speech probabilities, one per 512 samples (the last chunk
        zero-padded), the recurrent state starting at zero."""
        chunks = -(-len(audio) // CHUNK)
        padded = F.pad(audio, (CONTEXT, chunks * CHUNK - len(audio)))
        features = self.encode(padded.unfold(0, CHUNK + CONTEXT, CHUNK))
        zeros = features.new_zeros(1, 1, HIDDEN)
        cell = self.lstm_cell
        # The cell stepped through the chunks in one call: torch's sequence LSTM on the cell's weights.
        hidden = torch.lstm(features.unsqueeze(1), (zeros, zeros),
                            [cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh], True, 1, 0.0, False, False,
                            False)[0]
        return torch.sigmoid(self.final_conv(F.relu(hidden.reshape(-1, HIDDEN, 1)))).reshape(-1)


def speech_probabilities(vad: SileroVad, audio: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return vad(torch.from_numpy(np.asarray(audio, dtype=np.float32))).numpy()


def speech_segments(probabilities: np.ndarray, length: int) -> list[tuple[int, int]]:
    """``get_speech_timestamps``' (start, end) segments before padding, at its defaults without a maximum."""
    segments = []
    start = None
    silence_from = 0
    for index, probability in enumerate(probabilities.tolist()):
        sample = CHUNK * index
        if probability >= THRESHOLD and silence_from:
            silence_from = 0
        if probability >= THRESHOLD and start is None:
            start = sample
            continue
        if probability < EXIT_THRESHOLD and start is not None:
            if not silence_from:
                silence_from = sample
            if sample - silence_from < MIN_SILENCE_SAMPLES:
                continue
            if silence_from - start > MIN_SPEECH_SAMPLES:
                segments.append((start, silence_from))
            start, silence_from = None, 0
    if start is not None and length - start > MIN_SPEECH_SAMPLES:
        segments.append((start, length))
    return segments


def speech_span(vad: SileroVad, audio: np.ndarray) -> tuple[int, int]:
    """(start, end) sample indices from the first speech segment's padded start to the last one's padded end in
    16 kHz ``audio``; (0, len(audio)) when there is no speech."""
    segments = speech_segments(speech_probabilities(vad, audio), len(audio))
    if not segments:
        return 0, len(audio)
    return int(max(0, segments[0][0] - SPEECH_PAD_SAMPLES)), int(min(len(audio), segments[-1][1] + SPEECH_PAD_SAMPLES))
