"""Training loops, each a ``voxanon train`` subcommand: the HiFi-GAN vocoder (the package :mod:`.vocoder`: settings,
features, sampler, trainer, export, run), the semi-informed attacker's ECAPA-TDNN (the package :mod:`.asv`: a training
is planned, then run, with its settings, data, loader, trainer and exported model in their modules) and the
zero-LLR sex flow (:mod:`.sex_flow`). Device, precision and the checkpoints' RNG state are handled once, in
:mod:`.checkpointing`."""
