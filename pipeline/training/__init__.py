"""Training loops, each a ``voxanon train`` subcommand: the HiFi-GAN vocoder (:mod:`.vocoder`), the
semi-informed attacker's ECAPA-TDNN (:mod:`.asv`, the run, with its settings, data, loader, trainer and
exported model in :mod:`.asv_settings`, :mod:`.asv_data`, :mod:`.asv_loader`, :mod:`.asv_trainer` and
:mod:`.asv_export`) and the zero-LLR sex flow (:mod:`.sex_flow`). Device, precision and the checkpoints'
RNG state are handled once, in :mod:`.checkpointing`."""
