"""Training loops, each a ``voxanon train`` subcommand: the HiFi-GAN vocoder (:mod:`.vocoder`), the
semi-informed attacker's ECAPA-TDNN (:mod:`.asv`) and the zero-LLR sex flow (:mod:`.sex_flow`). Device,
precision and the checkpoints' RNG state are handled once, in :mod:`.checkpointing`."""
