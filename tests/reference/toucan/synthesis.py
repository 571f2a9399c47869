"""Test-only reference for B3's synthesis, transcribed (not imported): the VoicePrivacy 2024 recipe's
``anonymization/modules/sttts/tts/ims_tts.py`` (``ImsTTS.read_text``; voice-privacy-challenge, GPL-3.0) and the
vendored IMS-Toucan ``InferenceInterfaces/AnonFastSpeech2.py`` (DigitalPhonetics/IMS-Toucan, Apache-2.0, Copyright the
IMS Toucan authors). Left out: the text front end (the phones come as Toucan's articulatory vectors, which
``string_to_tensor`` would give), the style-embedding function (B3 always sets the target embedding), plotting and
noise reduction (off in the recipe) and the logging; the model files are read with ``weights_only=False`` as the
recipe's torch did (test fixtures only), and the networks' sizes can be given (the tests' tiny ones)."""
import resampy
import torch

from .fastspeech2 import FastSpeech2
from .hifigan import HiFiGANGenerator


class AnonFastSpeech2(torch.nn.Module):

    def __init__(self, path_to_hifigan_model, path_to_fastspeech_model, device="cpu", hifigan_channels=512,
                 **fastspeech2_sizes):
        super().__init__()
        self.device = device
        checkpoint = torch.load(path_to_fastspeech_model, map_location='cpu', weights_only=False)
        self.use_lang_id = False
        self.phone2mel = FastSpeech2(weights=checkpoint["model"], **fastspeech2_sizes).to(torch.device(device))
        self.mel2wav = HiFiGANGenerator(path_to_weights=path_to_hifigan_model,
                                        channels=hifigan_channels).to(torch.device(device))
        self.default_utterance_embedding = checkpoint["default_emb"].to(self.device)
        self.phone2mel.eval()
        self.mel2wav.eval()
        self.lang_id = None
        self.to(torch.device(device))

    def forward(self, phones, durations=None, pitch=None, energy=None):
        with torch.inference_mode():
            phones = phones.to(torch.device(self.device))
            mel, durations, pitch, energy = self.phone2mel(phones,
                                                           return_duration_pitch_energy=True,
                                                           utterance_embedding=self.default_utterance_embedding,
                                                           durations=durations,
                                                           pitch=pitch,
                                                           energy=energy,
                                                           lang_id=self.lang_id)
            mel = mel.transpose(0, 1)
            wave = self.mel2wav(mel)
        return wave


class ImsTTS:

    def __init__(self, hifigan_path, fastspeech_path, device, output_sr=16000, hifigan_channels=512,
                 **fastspeech2_sizes):
        self.device = device
        self.output_sr = output_sr
        self.model = AnonFastSpeech2(device=self.device, path_to_hifigan_model=hifigan_path,
                                     path_to_fastspeech_model=fastspeech_path, hifigan_channels=hifigan_channels,
                                     **fastspeech2_sizes)

    def read_text(self, phones, speaker_embedding, duration=None, pitch=None, energy=None,
                  start_silence=None, end_silence=None):
        speaker_embedding = speaker_embedding.to(self.device)
        self.model.default_utterance_embedding = speaker_embedding
        wav = self.model(phones, durations=duration, pitch=pitch, energy=energy)

        i = 0
        while wav.shape[0] < 24000:  # 0.5 s
            # sometimes, the speaker embedding is so off that it leads to a practically empty audio
            # then, we need to sample a new embedding
            if i > 0 and i % 10 == 0:
                mask = torch.zeros(speaker_embedding.shape[0]).float().random_(-40, 40).to(self.device)
            else:
                mask = torch.zeros(speaker_embedding.shape[0]).float().random_(-2, 2).to(self.device)
            speaker_embedding = speaker_embedding * mask
            self.model.default_utterance_embedding = speaker_embedding.to(self.device)
            wav = self.model(phones, durations=duration, pitch=pitch, energy=energy)
            i += 1
            if i > 30:
                break

        # start and end silence are computed for 16000, so we have to adapt this to different output sr
        factor = self.output_sr // 16000
        if start_silence is not None:
            start_sil = torch.zeros([start_silence * factor]).to(self.device)
            wav = torch.cat((start_sil, wav), dim=0)
        if end_silence is not None:
            end_sil = torch.zeros([end_silence * factor]).to(self.device)
            wav = torch.cat((wav, end_sil), dim=0)

        if self.output_sr != 48000:
            wav = resampy.resample(wav.cpu().numpy(), 48000, self.output_sr)
        else:
            wav = wav.cpu().numpy()

        return wav
