"""Tiny speechbrain ASR folders in the published layout, with random weights."""
from __future__ import annotations

from pathlib import Path


def write_tiny_encoder_asr(directory: Path, favoured_label: str | None = None) -> Path:
    """A randomly initialised SpeechBrain EncoderASR (Fbank -> linear -> log-softmax, CTC).

    With ``favoured_label`` the linear layer's weights are zero and its bias picks that
    label, so every frame decodes to it and the CTC transcript is exactly that label.
    """
    import torch
    from hyperpyyaml import load_hyperpyyaml
    from speechbrain.dataio.encoder import CTCTextEncoder

    directory.mkdir(parents=True)
    (directory / "hyperparams.yaml").write_text("""
n_tokens: 5
compute_features: !new:speechbrain.lobes.features.Fbank
    n_mels: 20
head: !new:speechbrain.nnet.linear.Linear
    input_size: 20
    n_neurons: !ref <n_tokens>
encoder: !new:speechbrain.nnet.containers.LengthsCapableSequential
    compute_features: !ref <compute_features>
    head: !ref <head>
    log_softmax: !new:speechbrain.nnet.activations.Softmax
        apply_log: True
tokenizer: !new:speechbrain.dataio.encoder.CTCTextEncoder
decoding_function: !name:speechbrain.decoders.ctc_greedy_decode
    blank_id: 0
modules:
    encoder: !ref <encoder>
pretrainer: !new:speechbrain.utils.parameter_transfer.Pretrainer
    loadables:
        encoder: !ref <encoder>
        tokenizer: !ref <tokenizer>
""")
    tokenizer = CTCTextEncoder()
    tokenizer.insert_blank(index=0)
    tokenizer.update_from_iterable(["A", "B", "C", " "])
    tokenizer.save(directory / "tokenizer.ckpt")
    torch.manual_seed(0)
    encoder = load_hyperpyyaml((directory / "hyperparams.yaml").read_text())["encoder"]
    if favoured_label is not None:
        with torch.no_grad():
            encoder.head.w.weight.zero_()
            encoder.head.w.bias.zero_()
            encoder.head.w.bias[tokenizer.lab2ind[favoured_label]] = 5.0
    torch.save(encoder.state_dict(), directory / "encoder.ckpt")
    return directory


def smallest_decision_margin(scores) -> float:
    """The smallest lead of a frame's best class over its second in (frames, classes) ``scores``. Where it exceeds
    twice the rounding that another batch shape or another CPU's kernels may bring to each score, greedy CTC
    decodes the same text from either: a comparison of texts across batches then holds on any CPU."""
    top = scores.topk(2, dim=-1).values
    return float((top[..., 0] - top[..., 1]).min())
