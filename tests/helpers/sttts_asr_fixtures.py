"""B3's recogniser release file, ``asr_branchformer_tts-phn_en.zip``, written as ``espnet_model_zoo`` packs an
ESPnet model (``espnet2.main_funcs.pack_funcs.pack``): ``meta.yaml`` at the root, and the recipe's files under
their recipe-relative paths: the training ``config.yaml`` (every field ESPnet 202511's ``ASRTask`` writes, the
published training settings of ``conf/tuning/train_asr_branchformer.yaml`` and ``run.sh`` on top), the averaged
model ``valid.acc.ave.pth`` (``torch.save`` of the state dict), the feature statistics ``feats_stats.npz``
(``collect_stats``' count / sum / sum_square) and the sentencepiece model ``bpe.model``, from random weights.
"""
from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import torch
import yaml

from voxanon.models.checkpoints.sttts_asr import random_asr, random_stats
from voxanon.models.nets.tts.recogniser import RecogniserConfig

EXP = "exp/asr_train_asr_raw_en_bpe100_sp"
CONFIG_NAME = f"{EXP}/config.yaml"
MODEL_NAME = f"{EXP}/valid.acc.ave.pth"
STATS_NAME = "exp/asr_stats_raw_en_bpe100_sp/train/feats_stats.npz"
BPE_NAME = "data/en_token_list/bpe_unigram100/bpe.model"

ESPNET_DEFAULTS = """\
config: null
print_config: false
log_level: INFO
drop_last_iter: false
dry_run: false
iterator_type: sequence
valid_iterator_type: null
output_dir: exp/asr_train_asr_raw_en_bpe100_sp
ngpu: 1
seed: 0
num_workers: 1
num_att_plot: 3
dist_backend: nccl
dist_init_method: env://
dist_world_size: null
dist_rank: null
local_rank: 0
dist_master_addr: null
dist_master_port: null
dist_launcher: null
multiprocessing_distributed: false
unused_parameters: false
sharded_ddp: false
use_deepspeed: false
deepspeed_config: null
gradient_as_bucket_view: true
ddp_comm_hook: null
cudnn_enabled: true
cudnn_benchmark: false
cudnn_deterministic: true
use_tf32: false
collect_stats: false
write_collected_feats: false
max_epoch: 70
patience: 5
val_scheduler_criterion:
- valid
- loss
early_stopping_criterion:
- valid
- loss
- min
best_model_criterion:
- - valid
  - acc
  - max
keep_nbest_models: 10
nbest_averaging_interval: 0
grad_clip: 5.0
grad_clip_type: 2.0
grad_noise: false
accum_grad: 8
no_forward_run: false
resume: true
train_dtype: float32
use_amp: true
log_interval: null
use_matplotlib: true
use_tensorboard: true
create_graph_in_tensorboard: false
use_wandb: false
wandb_project: null
wandb_id: null
wandb_entity: null
wandb_name: null
wandb_model_log_interval: -1
detect_anomaly: false
use_adapter: false
adapter: lora
save_strategy: all
adapter_conf: {}
pretrain_path: null
init_param: []
ignore_init_mismatch: false
freeze_param: []
num_iters_per_epoch: null
batch_size: 20
valid_batch_size: null
batch_bins: 10000000
valid_batch_bins: null
category_sample_size: 10
upsampling_factor: 0.5
category_upsampling_factor: 0.5
dataset_upsampling_factor: 0.5
dataset_scaling_factor: 1.2
max_batch_size: null
min_batch_size: 1
train_shape_file:
- exp/asr_stats_raw_en_bpe100_sp/train/speech_shape
- exp/asr_stats_raw_en_bpe100_sp/train/text_shape.bpe
valid_shape_file:
- exp/asr_stats_raw_en_bpe100_sp/valid/speech_shape
- exp/asr_stats_raw_en_bpe100_sp/valid/text_shape.bpe
batch_type: numel
valid_batch_type: null
fold_length:
- 80000
- 150
sort_in_batch: descending
shuffle_within_batch: false
sort_batch: descending
multiple_iterator: false
chunk_length: 500
chunk_shift_ratio: 0.5
num_cache_chunks: 1024
chunk_excluded_key_prefixes: []
chunk_default_fs: null
chunk_max_abs_length: null
chunk_discard_short_samples: true
train_data_path_and_name_and_type:
- - dump/raw/train-600_sp/wav.scp
  - speech
  - kaldi_ark
- - dump/raw/train-600_sp/text
  - text
  - text
valid_data_path_and_name_and_type:
- - dump/raw/dev/wav.scp
  - speech
  - kaldi_ark
- - dump/raw/dev/text
  - text
  - text
multi_task_dataset: false
allow_variable_data_keys: false
max_cache_size: 0.0
max_cache_fd: 32
allow_multi_rates: false
valid_max_cache_size: null
exclude_weight_decay: false
exclude_weight_decay_conf: {}
optim: adam
optim_conf:
  lr: 0.005
  weight_decay: 1.0e-06
scheduler: warmuplr
scheduler_conf:
  warmup_steps: 40000
token_list: null
init: null
input_size: null
ctc_conf:
  dropout_rate: 0.0
  ctc_type: builtin
  reduce: true
  ignore_nan_grad: null
  zero_infinity: true
  brctc_risk_strategy: exp
  brctc_group_strategy: end
  brctc_risk_factor: 0.0
joint_net_conf: null
use_preprocessor: true
use_lang_prompt: false
use_nlp_prompt: false
token_type: bpe
bpemodel: data/en_token_list/bpe_unigram100/bpe.model
non_linguistic_symbols: null
cleaner: null
g2p: null
speech_volume_normalize: null
rir_scp: null
rir_apply_prob: 1.0
noise_scp: null
noise_apply_prob: 1.0
noise_db_range: '13_15'
short_noise_thres: 0.5
aux_ctc_tasks: []
frontend: default
frontend_conf:
  n_fft: 512
  hop_length: 160
  fs: 16k
specaug: specaug
specaug_conf:
  apply_time_warp: true
  time_warp_window: 5
  time_warp_mode: bicubic
  apply_freq_mask: true
  freq_mask_width_range:
  - 0
  - 27
  num_freq_mask: 2
  apply_time_mask: true
  time_mask_width_ratio_range:
  - 0.0
  - 0.05
  num_time_mask: 10
normalize: global_mvn
normalize_conf:
  stats_file: exp/asr_stats_raw_en_bpe100_sp/train/feats_stats.npz
model: espnet
model_conf:
  ctc_weight: 0.6
  lsm_weight: 0.1
  length_normalized_loss: false
preencoder: null
preencoder_conf: {}
encoder: branchformer
encoder_conf:
  output_size: 512
  use_attn: true
  attention_heads: 8
  attention_layer_type: rel_selfattn
  pos_enc_layer_type: rel_pos
  rel_pos_type: latest
  use_cgmlp: true
  cgmlp_linear_units: 3072
  cgmlp_conv_kernel: 31
  use_linear_after_conv: false
  gate_activation: identity
  merge_method: concat
  cgmlp_weight: 0.5
  attn_branch_drop_rate: 0.0
  num_blocks: 18
  dropout_rate: 0.1
  positional_dropout_rate: 0.1
  attention_dropout_rate: 0.1
  input_layer: conv2d
  stochastic_depth_rate: 0.0
postencoder: null
postencoder_conf: {}
decoder: transformer
decoder_conf:
  attention_heads: 8
  linear_units: 2048
  num_blocks: 6
  dropout_rate: 0.1
  positional_dropout_rate: 0.1
  self_attention_dropout_rate: 0.1
  src_attention_dropout_rate: 0.1
preprocessor: default
preprocessor_conf: {}
required:
- output_dir
- token_list
version: '202511'
distributed: false
"""
"""ESPnet 202511's ``ASRTask`` arguments (its parser's defaults) with the published training settings, in the
order ESPnet writes them; the network sizes are replaced by the model's own in :func:`training_config`."""


def training_config(config: RecogniserConfig) -> dict:
    values = yaml.safe_load(ESPNET_DEFAULTS)
    values["token_list"] = list(config.token_list)
    values["encoder_conf"].update(output_size=config.output_size, attention_heads=config.attention_heads,
                                  cgmlp_linear_units=config.cgmlp_linear_units,
                                  cgmlp_conv_kernel=config.cgmlp_conv_kernel, num_blocks=config.num_blocks)
    values["decoder_conf"].update(attention_heads=config.decoder_attention_heads,
                                  linear_units=config.decoder_linear_units, num_blocks=config.decoder_num_blocks)
    return values


def sentencepiece_model(token_list: list[str]) -> bytes:
    """A unigram sentencepiece model whose pieces are the token list's (less ESPnet's <blank> and <sos/eos>), as
    ``spm_train`` lays it out: <unk>, <s>, </s> first, then the pieces; nmt_nfkc normalisation flags."""
    from sentencepiece import sentencepiece_model_pb2 as model_pb2
    model = model_pb2.ModelProto()
    for piece, kind in [("<unk>", model_pb2.ModelProto.SentencePiece.UNKNOWN),
                        ("<s>", model_pb2.ModelProto.SentencePiece.CONTROL),
                        ("</s>", model_pb2.ModelProto.SentencePiece.CONTROL)]:
        entry = model.pieces.add()
        entry.piece, entry.type, entry.score = piece, kind, 0.0
    for index, piece in enumerate(token_list[2:-1]):
        entry = model.pieces.add()
        entry.piece, entry.type, entry.score = piece, model_pb2.ModelProto.SentencePiece.NORMAL, -1.0 - index / 10
    model.trainer_spec.model_type = model_pb2.TrainerSpec.UNIGRAM
    model.trainer_spec.vocab_size = len(model.pieces)
    model.trainer_spec.character_coverage = 1.0
    model.trainer_spec.unk_id, model.trainer_spec.bos_id, model.trainer_spec.eos_id = 0, 1, 2
    model.normalizer_spec.name = "nmt_nfkc"
    model.normalizer_spec.add_dummy_prefix = True
    model.normalizer_spec.remove_extra_whitespaces = True
    return model.SerializeToString()


def stats_npz(n_mels: int, seed: int) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **random_stats(n_mels, np.random.default_rng(seed)))
    return buffer.getvalue()


def state_bytes(state: dict) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def meta_yaml() -> str:
    return yaml.safe_dump({"espnet": "202308", "files": {"asr_model_file": MODEL_NAME},
                           "python": "3.10.8 (main, Nov 14 2022, 00:00:00) [GCC 11.3.1 20220421 (Red Hat 11.3.1-3)]",
                           "timestamp": 1697245329.0, "torch": "2.0.1+cu118",
                           "yaml_files": {"asr_train_config": CONFIG_NAME}})


def write_asr_zip(path: Path, size: str = "tiny", seed: int = 0, state_override: dict | None = None,
                  model_bytes: bytes | None = None) -> Path:
    """The release zip from :func:`random_asr` weights; ``state_override`` replaces entries of the state dict,
    ``model_bytes`` the whole ``.pth`` (for refusal tests)."""
    state, config_dict = random_asr(size, seed)
    config = RecogniserConfig.from_dict(config_dict)
    state.update(state_override or {})
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("meta.yaml", meta_yaml())
        archive.writestr(CONFIG_NAME, yaml.safe_dump(training_config(config), allow_unicode=True, sort_keys=False))
        archive.writestr(MODEL_NAME, model_bytes if model_bytes is not None else state_bytes(state))
        archive.writestr(STATS_NAME, stats_npz(config.n_mels, seed))
        archive.writestr(BPE_NAME, sentencepiece_model(list(config.token_list)))
    return path


def espnet_speech2text(path: Path, workdir: Path):
    """ESPnet's own ``Speech2Text`` on the zip, built as ``ims_asr.py`` builds it (None where ESPnet is not
    installed: it is no dependency of voxanon's), from the zip unpacked into ``workdir``."""
    try:
        from espnet2.bin.asr_inference import Speech2Text
    except ImportError:
        return None
    with zipfile.ZipFile(path) as archive:
        archive.extractall(workdir)
    # espnet_model_zoo's unpack rewrites the config's recipe-relative paths to the unpacked files.
    config_path = workdir / CONFIG_NAME
    values = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    values["normalize_conf"]["stats_file"] = str(workdir / values["normalize_conf"]["stats_file"])
    values["bpemodel"] = str(workdir / values["bpemodel"])
    config_path.write_text(yaml.safe_dump(values, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return Speech2Text(asr_train_config=str(config_path), asr_model_file=str(workdir / MODEL_NAME), device="cpu",
                       minlenratio=0.0, maxlenratio=0.0, ctc_weight=0.2, beam_size=15, batch_size=1, nbest=1,
                       quantize_asr_model=False)


def benchmark_recogniser(path: Path, audios: list[np.ndarray], workdir: Path) -> dict:
    """Seconds to recognise ``audios`` (16 kHz float32) one thread, side by side on the same weights: ours,
    the transcription of ESPnet (tests/reference/espnet_asr.py) and ESPnet's ``Speech2Text`` itself where
    installed; each checked to give the same phone strings. Returns the audio's length and the three costs."""
    import time

    from tests.reference.espnet_asr import Speech2Text as TranscribedSpeech2Text
    from voxanon.models.checkpoints.sttts_asr import build_asr, convert_asr, read_asr
    from voxanon.models.nets.tts.recogniser import recognise
    torch.set_num_threads(1)
    checkpoint = read_asr(path)
    state, config = convert_asr(checkpoint, path)
    ours = build_asr(config)
    ours.load_state_dict(state)
    ours.eval()
    systems = {"ours": lambda audio: recognise(ours, audio)}
    transcribed = TranscribedSpeech2Text(config, state, checkpoint["bpe_model"])
    systems["transcription"] = lambda audio: "~" + transcribed(torch.tensor(audio))[0][0] + "~#"
    espnet = espnet_speech2text(path, workdir)
    if espnet is not None:
        systems["espnet"] = lambda audio: "~" + espnet(torch.tensor(audio))[0][0] + "~#"
    costs, texts = {}, {}
    for name, run in systems.items():
        start = time.perf_counter()
        texts[name] = [run(audio) for audio in audios]
        costs[f"{name}_s"] = time.perf_counter() - start
    if any(values != texts["ours"] for values in texts.values()):
        raise AssertionError(f"the recognisers disagree: {texts}")
    return {"audio_s": sum(len(audio) for audio in audios) / 16000, **costs}
