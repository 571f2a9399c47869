"""The ASR-BN family's networks (SA-toolkit's B5/B6): the ASR bottleneck extractor (:mod:`.bottleneck`) and the converter,
HiFi-GAN on [BN | F0 | target] (:mod:`.core_hifigan`)."""
