"""B3's (STTTS) own networks: the phone recogniser, IMS-Toucan's style embedding, WGAN, aligner, FastSpeech2
and HiFi-GAN, with the published checkpoints' state-dict keys."""
