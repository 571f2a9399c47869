"""The NAC family's networks (VoicePrivacy 2024 B4): Bark's GPTs (:mod:`.bark`), EnCodec's decoder (:mod:`.encodec`), and
the semantic front end, HuBERT through the quantiser's LSTM (:mod:`.semantic`)."""
