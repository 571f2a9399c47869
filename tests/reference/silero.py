"""Test-only reference for B3's silence cut, transcribed (not imported): Silero VAD's 16 kHz network as the
``silero-vad`` package (snakers4/silero-vad, MIT, Copyright Silero Team) defines it for its
``silero_vad_16k.safetensors`` weights (``silero_vad/tinygrad_model.py``: ``TinySileroVAD``, rewritten from
tinygrad's tensor calls to torch's, line for line), driven chunk by chunk as the package's ``OnnxWrapper``
(``utils_vad.py``) drives its models: 512-sample chunks, each preceded by the previous input's last 64 samples
(zeros first), the LSTM state carried; and IMS-Toucan's ``AudioPreprocessor.cut_silence_from_audio``
(``Preprocessing/AudioPreprocessor.py`` of the VoicePrivacy 2024 recipe's vendored IMS-Toucan, Apache-2.0) around
the package's own ``get_speech_timestamps``, which the tests import.
"""
import torch
import torch.nn.functional as F
from torch import nn


# ---- silero_vad/tinygrad_model.py ----

class TinySileroVAD(nn.Module):
    def __init__(self):
        super().__init__()
        self.n_fft = 256
        self.stride = 128
        self.pad = 64
        self.cutoff = int(self.n_fft // 2) + 1

        self.stft_conv = nn.Conv1d(1, 258, kernel_size=256, stride=self.stride, padding=0, bias=False)
        self.conv1 = nn.Conv1d(129, 128, kernel_size=3, stride=1, padding=1)
        self.conv2 = nn.Conv1d(128, 64, kernel_size=3, stride=2, padding=1)
        self.conv3 = nn.Conv1d(64, 64, kernel_size=3, stride=2, padding=1)
        self.conv4 = nn.Conv1d(64, 128, kernel_size=3, stride=1, padding=1)

        self.lstm_cell = nn.LSTMCell(128, 128)
        self.final_conv = nn.Conv1d(128, 1, 1)

    def forward(self, x, state=None):
        if state is not None:
            state = (state[0], state[1])
        x = F.pad(x, (0, self.pad), "reflect").unsqueeze(1)
        x = self.stft_conv(x)
        x = (x[:, :self.cutoff, :]**2 + x[:, self.cutoff:, :]**2).sqrt()
        x = self.conv1(x).relu()
        x = self.conv2(x).relu()
        x = self.conv3(x).relu()
        x = self.conv4(x).relu().squeeze(-1)
        h, c = self.lstm_cell(x, state)
        x = h.unsqueeze(-1)
        state = torch.stack([h, c], dim=0)
        x = x.relu()
        x = self.final_conv(x).sigmoid()
        x = x.squeeze(1).mean(axis=1).unsqueeze(1)
        return x, state


# ---- silero_vad/utils_vad.py: OnnxWrapper's chunk protocol, around TinySileroVAD ----

class ChunkedModel:
    def __init__(self, network):
        self.network = network
        self.reset_states()

    def reset_states(self, batch_size=1):
        self._state = None
        self._context = torch.zeros(0)

    def __call__(self, x, sr: int):
        if x.dim() == 1:
            x = x.unsqueeze(0)
        context_size = 64 if sr == 16000 else 32
        if not len(self._context):
            self._context = torch.zeros(x.shape[0], context_size)
        x = torch.cat([self._context, x], dim=1)
        with torch.no_grad():
            out, self._state = self.network(x, self._state)
        self._context = x[..., -context_size:]
        return out


# ---- IMS-Toucan Preprocessing/AudioPreprocessor.py ----

def cut_silence_from_audio(audio, silero_model, get_speech_timestamps, final_sr=16000):
    """
    https://github.com/snakers4/silero-vad
    """
    with torch.inference_mode():
        speech_timestamps = get_speech_timestamps(audio, silero_model, sampling_rate=final_sr)
    try:
        result = audio[speech_timestamps[0]['start']:speech_timestamps[-1]['end']]
        return result
    except IndexError:
        print("Audio might be too short to cut silences from front and back.")
    return audio
