"""``voxanon train asv``: the VoicePrivacy 2024 ECAPA-TDNN attacker. A training is planned (:func:`.run.plan_training`:
settings, data, identity, memory, whether it is done already) and then run (:func:`.run.train_planned`); its settings,
data, loader, trainer and exported model each have their module."""
