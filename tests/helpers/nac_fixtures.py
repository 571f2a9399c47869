"""Faithful B4 release fixtures at a test size, random weights, each file in its published layout: Bark's
``coarse_2.pt``/``fine_2.pt`` (nanoGPT training checkpoints: ``model_args``, ``_orig_mod.``-prefixed nanoGPT
``model``, ``best_val_loss`` a numpy scalar, ``optimizer`` (AdamW's state dict, both moments of every parameter),
``iter_num`` and ``config``; built by the transcribed reference ``tests/reference/bark.py``), EnCodec's ``encodec_24khz-d7cc33bc.th`` (the
``encodec`` package's own model, weight-norm ``weight_g``/``weight_v``, the encoder and k-means buffers included),
the quantiser ``.pth`` with its ``<name>/.info``, transformers' ``HubertModel`` ``pytorch_model.bin`` and Bark
``.npz`` voice prompts in per-voice folders, as ``nac_speaker_mappings.zip`` unpacks."""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import torch

from tests.reference import bark as ref

COARSE_ARGS = dict(n_layer=2, n_head=2, n_embd=32, block_size=1024, bias=False, input_vocab_size=12_096,
                   output_vocab_size=12_096, dropout=0.0)
FINE_ARGS = dict(n_layer=2, n_head=2, n_embd=32, block_size=1024, bias=False, input_vocab_size=1056,
                 output_vocab_size=1056, dropout=0.0, n_codes_total=8, n_codes_given=1)
ENCODEC = dict(dimension=16, n_filters=4)
HUBERT = dict(hidden_size=64, num_hidden_layers=9, num_attention_heads=1, intermediate_size=64, conv_dim=(16,) * 7,
              num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
QUANTISER = dict(hidden_size=16, input_size=64, output_size=10_000, version=0)
VOICES = ("en_speaker_1", "de_speaker_3", "fr_speaker_0")


def reference_coarse(seed: int = 0):
    torch.manual_seed(seed)
    return ref.GPT(ref.GPTConfig(**COARSE_ARGS)).eval()


def reference_fine(seed: int = 1):
    torch.manual_seed(seed)
    return ref.FineGPT(ref.FineGPTConfig(**FINE_ARGS)).eval()


def reference_encodec(seed: int = 2):
    """The ``encodec`` package's 24 kHz model (``EncodecModel._get_model``'s layout) at a test width."""
    from encodec.model import EncodecModel
    from encodec.modules import SEANetDecoder, SEANetEncoder
    from encodec.quantization import ResidualVectorQuantizer

    torch.manual_seed(seed)
    encoder = SEANetEncoder(channels=1, norm="weight_norm", causal=True, **ENCODEC)
    decoder = SEANetDecoder(channels=1, norm="weight_norm", causal=True, **ENCODEC)
    quantizer = ResidualVectorQuantizer(dimension=ENCODEC["dimension"], n_q=32, bins=1024)
    model = EncodecModel(encoder, decoder, quantizer, [1.5, 3.0, 6.0, 12.0, 24.0], 24000, 1, normalize=False,
                         name="encodec_24khz").eval()
    with torch.no_grad():
        for layer in model.quantizer.vq.layers:  # trained codebooks, not the zeros of an untrained one
            layer._codebook.embed.normal_()
            layer._codebook.inited.fill_(1.0)
    model.set_target_bandwidth(6.0)
    return model


def reference_hubert(seed: int = 3):
    from transformers import HubertConfig, HubertModel

    torch.manual_seed(seed)
    model = HubertModel(HubertConfig(**HUBERT)).eval()
    with torch.no_grad():  # non-trivial norms, so that a misplaced one shows
        for name, parameter in model.named_parameters():
            if "layer_norm" in name and parameter.ndim == 1:
                parameter.normal_(0.0, 0.1).add_(1.0 if name.endswith("weight") else 0.0)
    return model


def reference_quantiser(seed: int = 4):
    torch.manual_seed(seed)
    sizes = {key: QUANTISER[key] for key in ("hidden_size", "input_size", "output_size")}
    return ref.HubertTokenizer(**sizes).eval()


def reference_voice(seed: int, seconds: float = 3.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    frames = int(seconds * 75)
    return {"semantic_prompt": rng.integers(0, 10_000, int(seconds * 49.9)),
            "coarse_prompt": rng.integers(0, 1024, (2, frames)), "fine_prompt": rng.integers(0, 1024, (8, frames))}


TRAINING_CONFIG = dict(out_dir="out", eval_interval=2000, log_interval=1, eval_iters=200, eval_only=False,
                       always_save_checkpoint=True, init_from="scratch", wandb_log=False, wandb_project="bark",
                       wandb_run_name="coarse", dataset="bark", gradient_accumulation_steps=40, batch_size=12,
                       block_size=1024, n_layer=2, n_head=2, n_embd=32, dropout=0.0, bias=False,
                       learning_rate=6e-4, max_iters=600_000, weight_decay=0.1, beta1=0.9, beta2=0.95,
                       grad_clip=1.0, decay_lr=True, warmup_iters=2000, lr_decay_iters=600_000, min_lr=6e-5,
                       backend="nccl", device="cuda", dtype="bfloat16", compile=True)
"""nanoGPT's ``config`` entry: the ``train.py`` globals by name (ints, floats, bools, strings)."""
ITER_NUM = 42_000


def adamw_state(model, steps: int = ITER_NUM, seed: int = 5) -> dict:
    """AdamW's state dict as nanoGPT's ``configure_optimizers`` builds the optimizer (weight decay on the
    parameters of 2 or more dimensions, none on the rest) after ``steps`` steps: per parameter (tied ones once)
    ``step`` (a 0-d tensor) and the two moments ``exp_avg``, ``exp_avg_sq`` of its shape, random."""
    parameters = list(model.parameters())
    optimizer = torch.optim.AdamW([{"params": [p for p in parameters if p.dim() >= 2], "weight_decay": 0.1},
                                   {"params": [p for p in parameters if p.dim() < 2], "weight_decay": 0.0}],
                                  lr=6e-5, betas=(0.9, 0.95))
    generator = torch.Generator().manual_seed(seed)
    for parameter in parameters:
        optimizer.state[parameter] = {
            "step": torch.tensor(float(steps)),
            "exp_avg": torch.empty_like(parameter).normal_(0.0, 1e-3, generator=generator),
            "exp_avg_sq": torch.empty_like(parameter).uniform_(0.0, 1e-6, generator=generator)}
    return optimizer.state_dict()


def save_bark(path: Path, model, args: dict, legacy: bool = False, **replace) -> Path:
    """As Bark's training (nanoGPT's ``train.py``) saved it: the compiled model's keys (``_orig_mod.``),
    ``best_val_loss`` a numpy scalar, the optimizer's state, ``iter_num`` and ``config``; ``legacy``: torch's
    non-zip serialisation. ``replace`` sets (or, with ``None``, removes) entries."""
    checkpoint = {"model": {f"_orig_mod.{k}": v for k, v in model.state_dict().items()},
                  "optimizer": adamw_state(model), "model_args": dict(args), "iter_num": ITER_NUM,
                  "best_val_loss": np.float64(2.71828),
                  "config": {**TRAINING_CONFIG, **{k: args[k] for k in ("n_layer", "n_head", "n_embd", "bias")}}}
    checkpoint.update(replace)
    checkpoint = {key: value for key, value in checkpoint.items() if value is not None}
    torch.save(checkpoint, path, _use_new_zipfile_serialization=not legacy)
    return path


def save_quantiser(path: Path, quantiser) -> Path:
    """``HubertTokenizer.save``: the state dict, then ``<stem>/.info`` appended to the zip."""
    torch.save(quantiser.state_dict(), path)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr(f"{path.stem}/.info", json.dumps({k: QUANTISER[k] for k in
                                                           ("input_size", "hidden_size", "output_size", "version")}))
    return path


def write_release(root: Path) -> Path:
    """A folder laid out as the recipe's ``exp/nac_models`` plus the voice mappings and HuBERT."""
    root.mkdir(parents=True, exist_ok=True)
    save_bark(root / "coarse_2.pt", reference_coarse(), COARSE_ARGS)
    save_bark(root / "fine_2.pt", reference_fine(), FINE_ARGS)
    torch.save(reference_encodec().state_dict(), root / "encodec_24khz-d7cc33bc.th")
    save_quantiser(root / "tokenizer.pth", reference_quantiser())
    (root / "hubert-base-ls960").mkdir(exist_ok=True)
    torch.save(reference_hubert().state_dict(), root / "hubert-base-ls960" / "pytorch_model.bin")
    for i, name in enumerate(VOICES):
        folder = root / "nac_mappings" / "suno_voices" / "v2" / name
        folder.mkdir(parents=True, exist_ok=True)
        np.savez(folder / f"{name}.npz", **reference_voice(10 + i))
    return root


def reference_prompt(seed: int):
    voice = reference_voice(seed)
    return voice["semantic_prompt"], voice["coarse_prompt"], voice["fine_prompt"]
