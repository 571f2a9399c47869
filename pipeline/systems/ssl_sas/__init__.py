"""The SSL-SAS family: the neural analysis/synthesis chain (:mod:`.chain`, its model sets' :mod:`.loader`) and
what replaces its speaker vector or its F0: B1's pseudo-speaker and the global vector (:mod:`.pseudo_speaker`,
on the set's :mod:`.corpus_embeddings`), zLLR's zero-LLR flow, neutral F0 (:mod:`.f0_targets`) and TD-PSOLA
(:mod:`.zllr`). Systems: resynth, b1, global, zllr, zllr-f0, zllr-flow, tdpsola."""

STAGES = {
    "ssl_sas_input": ".chain:SslSasInputStage",
    "content": ".chain:ContentStage",
    "speaker": ".chain:SpeakerStage",
    "vocoder": ".chain:VocoderStage",
    "pseudo_speaker": ".pseudo_speaker:PseudoSpeakerStage",
    "global_speaker": ".pseudo_speaker:GlobalSpeakerStage",
    "zero_llr": ".zllr:ZeroLLRStage",
    "f0_neutral": ".zllr:F0NeutralStage",
    "tdpsola": ".zllr:TdPsolaStage",
}
