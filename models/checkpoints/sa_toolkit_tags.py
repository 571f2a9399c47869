"""SA-toolkit's release tags, the names of its model sets: data that the catalogue and the importer both read."""

# SA-toolkit's hubconf.py ``anonymization`` and ``asr_bn_extractor`` tags. B5 is hifigan_bn_tdnnf_wav2vec2_vq_48_v1,
# B6 hifigan_bn_tdnnf_600h_vq_48_v1.
SA_TOOLKIT_CONVERTER_TAGS = (
    "hifigan_bn_tdnnf_wav2vec2_vq_48_v1", "hifigan_bn_tdnnf_wav2vec2_100h_aug_v1", "hifigan_bn_tdnnf_600h_aug_v1",
    "hifigan_bn_tdnnf_600h_vq_48_v1", "hifigan_bn_tdnnf_100h_vq_64_v1", "hifigan_bn_tdnnf_100h_vq_256_v1",
    "hifigan_bn_tdnnf_100h_aug_v1")
SA_TOOLKIT_EXTRACTOR_TAGS = tuple(tag[len("hifigan_"):] for tag in SA_TOOLKIT_CONVERTER_TAGS)
SA_TOOLKIT_TAGS = SA_TOOLKIT_CONVERTER_TAGS + SA_TOOLKIT_EXTRACTOR_TAGS
SA_TOOLKIT_RELEASE_URL = "https://github.com/deep-privacy/SA-toolkit/releases/download/{tag}/final.pt"
