"""The SSL-SAS release layout in small sizes: its configs and a writer of a random-weight release folder."""
from __future__ import annotations

import json

import torch
from speechbrain.lobes.models.ECAPA_TDNN import ECAPA_TDNN

from tests.helpers.hubert import TINY as TINY_CONTENT, random_fairseq_soft_model
from tests.reference.hifigan import Generator as ReferenceGenerator


SSL_SAS_VOCODER = "libri_tts_clean_100_fbank_xv_ssl_freeze"


ZLLR_VOCODER = "libri_tts_clean_100_fbank_xv_ssl_freeze_xvnorm"
"""A stand-in name: the importer takes the zLLR-VC release's only vocoder folder, whatever its name."""


RELEASE_CONFIG = {
    "input_training_file": "scp/libri/train.lst", "input_validation_file": "scp/libri/dev.lst",
    "soft_model_path": "pretrained_models_anon_xv/HuBERT_soft/soft_model.pt",
    "hubert_model_path": "pretrained_models_anon_xv/hubert_base_ls960.pt",
    "ecapa_fbank_model_path": "pretrained_models_anon_xv/ECAPA-TDNN/embedding_model.ckpt",
    "ssl_freeze": True, "xv_freeze": True, "model_in_dim": 393, "resblock": "1", "num_gpus": 0, "batch_size": 32,
    "learning_rate": 0.0002, "adam_b1": 0.8, "adam_b2": 0.99, "lr_decay": 0.999, "seed": 1234,
    "upsample_rates": [5, 4, 2, 2, 2], "upsample_kernel_sizes": [11, 8, 4, 4, 4],
    "upsample_initial_channel": 32,  # 512 in the release; the key structure does not depend on it
    "resblock_kernel_sizes": [3, 7, 11], "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
    "segment_size": 8960, "latent": True, "f0": True, "f0_interp": False, "xv": True, "num_mels": 80,
    "num_freq": 1025, "n_fft": 1024, "hop_size": 256, "win_size": 1024, "sampling_rate": 16000, "fmin": 0,
    "fmax": 8000, "fmax_for_loss": None, "num_workers": 4,
    "dist_config": {"dist_backend": "nccl", "dist_url": "env://"}}


ZLLR_CONFIG = {**RELEASE_CONFIG, "xv_disentanglement": False,
               "xv_disentanglement_model": "xv_disentanglement_model/model.pt", "xv_protect_dis": True,
               "f0conv": True, "xv_protect_glob": False, "consistency_loss": True}


HUBERT = {"conv_channels": 32, "hidden": 64, "ffn": 96, "layers": 2, "pos_kernel": 16, "pos_groups": 4,
          "final_dim": 16, "classes": 504}
"""A tiny fairseq HuBERT (base: 512, 768, 3072, 12, 128, 16, 256, 504)."""


ECAPA = {"channels": [32, 32, 32, 32, 96], "attention_channels": 16, "se_channels": 16, "res2net_scale": 4}


def write_release(root, *, embed_submodels: bool = True, payload=None,
                  vocoder_subdir: str = "libri_tts_clean_100_fbank_xv_ssl_freeze"):
    torch.manual_seed(7)
    generator = ReferenceGenerator(GENERATOR_JSON, 393)
    _, content_state = random_fairseq_soft_model(TINY_CONTENT, seed=2)
    ecapa = ECAPA_TDNN(80, channels=[32, 32, 32, 32, 96], attention_channels=16, se_channels=16, res2net_scale=4)
    state = dict(generator.state_dict())
    if embed_submodels:
        state.update({f"latent_encoder.{k}": v for k, v in content_state.items()})
        state.update({f"xv_model.{k}": v for k, v in ecapa.state_dict().items()})
    vocoder_dir = root / "HiFi-GAN" / vocoder_subdir
    vocoder_dir.mkdir(parents=True)
    (vocoder_dir / "config.json").write_text(json.dumps(GENERATOR_JSON))
    checkpoint = {"generator": state}
    if payload is not None:
        checkpoint["payload"] = payload
    torch.save({"generator": {}}, vocoder_dir / "g_00050000")
    torch.save(checkpoint, vocoder_dir / "g_00100000")
    (root / "HuBERT_soft").mkdir(exist_ok=True)
    torch.save(content_state, root / "HuBERT_soft" / "soft_model.pt")
    (root / "ECAPA-TDNN").mkdir(exist_ok=True)
    torch.save(ecapa.state_dict(), root / "ECAPA-TDNN" / "embedding_model.ckpt")
    return generator.eval(), content_state, ecapa.eval()


GENERATOR_JSON = {"resblock": "1", "num_gpus": 0, "batch_size": 32, "learning_rate": 0.0002,
                  "upsample_rates": [5, 4, 2, 2, 2], "upsample_kernel_sizes": [11, 8, 4, 4, 4],
                  "upsample_initial_channel": 32, "resblock_kernel_sizes": [3, 7, 11],
                  "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]], "model_in_dim": 393,
                  "num_mels": 80, "segment_size": 8960, "sampling_rate": 16000}
