"""The ASR-BN family (SA-toolkit's anonymisation, VoicePrivacy 2024 B5 and B6): :mod:`.stages`."""

STAGES = {
    "asrbn_target": ".stages:AsrBnTargetStage",
    "asrbn_bn": ".stages:AsrBnStage",
    "asrbn_vocoder": ".stages:AsrBnVocoderStage",
}
