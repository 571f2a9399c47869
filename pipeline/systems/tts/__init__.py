"""The TTS family (VoicePrivacy 2024 B3, STTTS: phone recognition, a WGAN speaker, prosody cloning, FastSpeech2
and HiFi-GAN): :mod:`.stages`."""

STAGES: dict[str, str] = {}
