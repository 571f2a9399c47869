"""Random-weight speechbrain model directories in the published layouts, for the loader tests.

Every file is what speechbrain's own Pretrainer reads: ``wav2vec2.ckpt`` is the state dict
of speechbrain's wav2vec2 wrapper (a transformers ``Wav2Vec2Model`` under ``model.``), the
other checkpoints are the state dicts of the speechbrain modules the YAML names. The
wav2vec2 ``source`` is a local transformers folder (config, feature-extractor config and
weights *different* from ``wav2vec2.ckpt``), so speechbrain can build the reference offline.
"""
from __future__ import annotations

import io
from pathlib import Path

import torch


ASR_HPARAMS = """\
sample_rate: 16000
wav2vec2_hub: {hub}
wav2vec2_folder: {save}
dnn_neurons: 24
output_neurons: {n_tokens}
blank_index: 0

enc: !new:speechbrain.nnet.containers.Sequential
    input_shape: [null, null, 64]
    linear1: !name:speechbrain.nnet.linear.Linear
        n_neurons: !ref <dnn_neurons>
        bias: True
    bn1: !name:speechbrain.nnet.normalization.BatchNorm1d
    activation: !new:torch.nn.LeakyReLU
    drop: !new:torch.nn.Dropout
        p: 0.15
    linear2: !name:speechbrain.nnet.linear.Linear
        n_neurons: !ref <dnn_neurons>
        bias: True
    bn2: !name:speechbrain.nnet.normalization.BatchNorm1d
    activation2: !new:torch.nn.LeakyReLU
    drop2: !new:torch.nn.Dropout
        p: 0.15
    linear3: !name:speechbrain.nnet.linear.Linear
        n_neurons: !ref <dnn_neurons>
        bias: True
    bn3: !name:speechbrain.nnet.normalization.BatchNorm1d
    activation3: !new:torch.nn.LeakyReLU

wav2vec2: !new:speechbrain.lobes.models.huggingface_transformers.wav2vec2.Wav2Vec2
    source: !ref <wav2vec2_hub>
    output_norm: True
    freeze: True
    save_path: !ref <wav2vec2_folder>

ctc_lin: !new:speechbrain.nnet.linear.Linear
    input_size: !ref <dnn_neurons>
    n_neurons: !ref <output_neurons>

log_softmax: !new:speechbrain.nnet.activations.Softmax
    apply_log: True

ctc_cost: !name:speechbrain.nnet.losses.ctc_loss
    blank_index: !ref <blank_index>

asr_model: !new:torch.nn.ModuleList
    - [!ref <enc>, !ref <ctc_lin>]

tokenizer: !new:sentencepiece.SentencePieceProcessor

encoder: !new:speechbrain.nnet.containers.LengthsCapableSequential
    wav2vec2: !ref <wav2vec2>
    enc: !ref <enc>
    ctc_lin: !ref <ctc_lin>
    log_softmax: !ref <log_softmax>

decoding_function: !name:speechbrain.decoders.ctc_greedy_decode
    blank_id: !ref <blank_index>

modules:
    encoder: !ref <encoder>

pretrainer: !new:speechbrain.utils.parameter_transfer.Pretrainer
    loadables:
        wav2vec2: !ref <wav2vec2>
        asr: !ref <asr_model>
        tokenizer: !ref <tokenizer>
"""

ASR_HPARAMS_VANILLA = ASR_HPARAMS.split("enc: !new:")[0] + """\
activation: !name:torch.nn.LeakyReLU
    negative_slope: 0.2

enc: !new:speechbrain.lobes.models.VanillaNN.VanillaNN
    input_shape: [null, null, 64]
    activation: !ref <activation>
    dnn_blocks: 2
    dnn_neurons: !ref <dnn_neurons>

wav2vec2: !new:""" + ASR_HPARAMS.split("wav2vec2: !new:", 1)[1]
"""The LibriSpeech CTC recipe's ``enc``: speechbrain's VanillaNN (linear, act, linear_0, act_0)."""

ASR_HPARAMS_CTC_TEXT = ASR_HPARAMS.replace("tokenizer: !new:sentencepiece.SentencePieceProcessor",
                                           "tokenizer: !new:speechbrain.dataio.encoder.CTCTextEncoder")
"""A character CTCTextEncoder as the tokenizer, as the recipe's checkpointer saves it."""

SER_HPARAMS = """\
sample_rate: 16000
wav2vec2_hub: {hub}
wav2vec2_folder: {save}
pretrained_path: {pretrained}
encoder_dim: 64
out_n_neurons: 4

wav2vec2: !new:speechbrain.lobes.models.huggingface_transformers.wav2vec2.Wav2Vec2
    source: !ref <wav2vec2_hub>
    output_norm: True
    freeze: True
    save_path: !ref <wav2vec2_folder>

avg_pool: !new:speechbrain.nnet.pooling.StatisticsPooling
    return_std: False

output_mlp: !new:speechbrain.nnet.linear.Linear
    input_size: !ref <encoder_dim>
    n_neurons: !ref <out_n_neurons>
    bias: False

softmax: !new:speechbrain.nnet.activations.Softmax
    apply_log: True

model: !new:torch.nn.ModuleList
    - [!ref <output_mlp>]

modules:
    wav2vec2: !ref <wav2vec2>
    output_mlp: !ref <output_mlp>
    avg_pool: !ref <avg_pool>

label_encoder: !new:speechbrain.dataio.encoder.CategoricalEncoder

pretrainer: !new:speechbrain.utils.parameter_transfer.Pretrainer
    loadables:
        wav2vec2: !ref <wav2vec2>
        model: !ref <model>
        label_encoder: !ref <label_encoder>
    paths:
        wav2vec2: !ref <pretrained_path>/wav2vec2.ckpt
        model: !ref <pretrained_path>/model.ckpt
        label_encoder: !ref <pretrained_path>/label_encoder.txt
"""

IEMOCAP_LABELS = ("neu", "ang", "hap", "sad")


def tiny_wav2vec2_config(large_style: bool):
    """lv60-style (layer-norm extractor, pre-norm, conv bias) for the ASR, base-style for SER;
    64-dimensional attention heads as in every published wav2vec2."""
    from transformers import Wav2Vec2Config

    return Wav2Vec2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=1, intermediate_size=80,
                          conv_dim=[16] * 7, conv_kernel=[10, 3, 3, 3, 3, 2, 2], conv_stride=[5, 2, 2, 2, 2, 2, 2],
                          conv_bias=large_style, feat_extract_norm="layer" if large_style else "group",
                          do_stable_layer_norm=large_style, num_conv_pos_embeddings=16,
                          num_conv_pos_embedding_groups=4, hidden_dropout=0.0, attention_dropout=0.0,
                          activation_dropout=0.0, feat_proj_dropout=0.0, layerdrop=0.0)


def write_hub(directory: Path, large_style: bool, seed: int) -> None:
    """A local transformers wav2vec2 folder: config, feature-extractor config, its own weights."""
    from transformers import Wav2Vec2FeatureExtractor, Wav2Vec2Model

    torch.manual_seed(seed)
    Wav2Vec2Model(tiny_wav2vec2_config(large_style)).save_pretrained(directory)
    Wav2Vec2FeatureExtractor(do_normalize=True, return_attention_mask=large_style).save_pretrained(directory)


def wrapper_state(large_style: bool, seed: int) -> dict:
    """The state dict of speechbrain's wav2vec2 wrapper: a Wav2Vec2Model under ``model.``."""
    from transformers import Wav2Vec2Model

    torch.manual_seed(seed)
    model = Wav2Vec2Model(tiny_wav2vec2_config(large_style))
    with torch.no_grad():  # visible layer norms, not the identity they start as
        for name, value in model.named_parameters():
            if "norm" in name:
                value.add_(0.1 * torch.randn_like(value))
    return {f"model.{k}": v for k, v in model.state_dict().items()}


def write_sentencepiece(path: Path) -> int:
    """A character sentencepiece model (unk at 0, the CTC blank); returns its vocabulary size."""
    import sentencepiece

    model = io.BytesIO()
    sentences = ["THE CAT SAT ON A MAT", "A DOG AND A CAT", "NO MORE TESTS TODAY", "HELLO WORLD"] * 20
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_writer=model,
                                             model_type="char", vocab_size=20, character_coverage=1.0,
                                             unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1,
                                             hard_vocab_limit=False, minloglevel=2)
    path.write_bytes(model.getvalue())
    processor = sentencepiece.SentencePieceProcessor(model_file=str(path))
    return processor.vocab_size()


def write_ctc_text_encoder(path: Path) -> int:
    """speechbrain CTCTextEncoder.save format, blank at 0; returns its size."""
    from speechbrain.dataio.encoder import CTCTextEncoder

    encoder = CTCTextEncoder()
    encoder.insert_blank(index=0)
    encoder.update_from_iterable(list("THE CAT SAT ON A MAT HELLO WORLD"))
    encoder.save(path)
    return len(encoder)


def trained_looking_batch_norms(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with random running statistics and affine parameters in every batch norm (the identity they start
    as would hide a misplaced norm)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm1d):
                module.running_mean.normal_(0, 0.2)
                module.running_var.uniform_(0.5, 2.0)
                module.weight.normal_(1, 0.2)
                module.bias.normal_(0, 0.2)
                module.num_batches_tracked.fill_(1000)
    return model


def write_asr_dir(directory: Path, seed: int = 0, hparams: str = ASR_HPARAMS, vanilla: bool = False) -> Path:
    """speechbrain/asr-wav2vec2-librispeech layout with random weights and a tiny wav2vec2
    (``vanilla``: the recipe's VanillaNN ``enc``, with ``ASR_HPARAMS_VANILLA``)."""
    import functools

    from speechbrain.lobes.models.VanillaNN import VanillaNN
    from speechbrain.nnet.containers import Sequential
    from speechbrain.nnet.linear import Linear
    from speechbrain.nnet.normalization import BatchNorm1d

    directory.mkdir(parents=True)
    hub = directory.parent / f"{directory.name}-hub"
    write_hub(hub, large_style=True, seed=seed + 100)
    n_tokens = (write_ctc_text_encoder(directory / "tokenizer.ckpt") if "CTCTextEncoder" in hparams
                else write_sentencepiece(directory / "tokenizer.ckpt"))
    (directory / "hyperparams.yaml").write_text(hparams.format(hub=hub, save=directory.parent / "w2v-save",
                                                               n_tokens=n_tokens))
    torch.save(wrapper_state(True, seed), directory / "wav2vec2.ckpt")
    torch.manual_seed(seed + 1)
    enc = Sequential(input_shape=[None, None, 64])
    for i in () if vanilla else (1, 2, 3):
        suffix = "" if i == 1 else str(i)
        enc.append(Linear, n_neurons=24, bias=True, layer_name=f"linear{i}")
        enc.append(BatchNorm1d, layer_name=f"bn{i}")
        enc.append(torch.nn.LeakyReLU(), layer_name=f"activation{suffix}")
        if i < 3:
            enc.append(torch.nn.Dropout(0.15), layer_name=f"drop{suffix}")
    if vanilla:
        enc = VanillaNN(input_shape=[None, None, 64], activation=functools.partial(torch.nn.LeakyReLU, 0.2),
                        dnn_blocks=2, dnn_neurons=24)
    trained_looking_batch_norms(enc)
    ctc_lin = Linear(input_size=24, n_neurons=n_tokens)
    with torch.no_grad():  # a blank that does not win every frame, so transcripts are not empty
        ctc_lin.w.bias[0] = -3.0
    torch.save(torch.nn.ModuleList([enc, ctc_lin]).state_dict(), directory / "asr.ckpt")
    return directory


def write_label_encoder(path: Path, labels=IEMOCAP_LABELS) -> None:
    """speechbrain CategoricalEncoder.save format."""
    from speechbrain.dataio.encoder import CategoricalEncoder

    encoder = CategoricalEncoder()
    encoder.update_from_iterable(labels)
    encoder.save(path)


def write_ser_dir(directory: Path, seed: int = 0) -> Path:
    """speechbrain/emotion-recognition-wav2vec2-IEMOCAP layout with random weights, tiny wav2vec2."""
    from speechbrain.nnet.linear import Linear

    directory.mkdir(parents=True)
    hub = directory.parent / f"{directory.name}-hub"
    write_hub(hub, large_style=False, seed=seed + 100)
    (directory / "hyperparams.yaml").write_text(SER_HPARAMS.format(
        hub=hub, save=directory.parent / "w2v-save", pretrained=directory))
    torch.save(wrapper_state(False, seed), directory / "wav2vec2.ckpt")
    torch.manual_seed(seed + 1)
    output_mlp = Linear(input_size=64, n_neurons=4, bias=False)
    with torch.no_grad():
        output_mlp.w.weight.mul_(20.0)  # pooled features are small: spread the classes
    torch.save(torch.nn.ModuleList([output_mlp]).state_dict(), directory / "model.ckpt")
    write_label_encoder(directory / "label_encoder.txt")
    return directory
