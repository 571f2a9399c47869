"""The TTS family (VoicePrivacy 2024 B3, STTTS: phone recognition, a WGAN speaker, prosody cloning, FastSpeech2
and HiFi-GAN): :mod:`.stages`."""

STAGES = {
    "sttts_recognise": ".stages:SttsRecogniseStage",
    "sttts_speaker": ".stages:SttsSpeakerStage",
    "sttts_prosody": ".stages:SttsProsodyStage",
    "sttts_synthesise": ".stages:SttsSynthesiseStage",
}
