"""Evaluation orchestration: finding the sets (:mod:`.sets`), scoring trials from embeddings
(:mod:`.scoring`), the semi-informed attacker's model (:mod:`.attackers`), every metric of a protocol
over the sets (:mod:`.evaluate`), emotion (SER) utility (:mod:`.ser`) and the whole VoicePrivacy 2024
evaluation in one command (:mod:`.challenge`). The metrics themselves are pure functions in
:mod:`voxanon.eval`."""
