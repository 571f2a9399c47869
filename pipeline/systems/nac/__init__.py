"""The NAC family (VoicePrivacy 2024 B4: HuBERT semantic tokens, Bark, EnCodec): :mod:`.stages`."""

STAGES = {
    "nac_voice": ".stages:NacVoiceStage",
    "nac_semantic": ".stages:NacSemanticStage",
    "nac_coarse": ".stages:NacCoarseStage",
    "nac_fine": ".stages:NacFineStage",
    "nac_decode": ".stages:NacDecodeStage",
}
