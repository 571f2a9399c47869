"""Faithful SA-toolkit ``final.pt`` fixtures: small networks built by the test-only reference
(``reference_sa_toolkit.py``: SA-toolkit's own module tree, so every key, buffer and duplicate of the
release is there), random weights, saved as SA-toolkit's ``save_model`` saves them."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tests.reference import sa_toolkit as ref
import torch


TINY_WAV2VEC2 = {**ref.WAV2VEC2_LARGE, "extractor_conv_layer_config": [[32, 10, 5]] + [[32, 3, 2]] * 4 + [[32, 2, 2]] * 2,
                 "encoder_embed_dim": 64, "encoder_pos_conv_kernel": 16, "encoder_pos_conv_groups": 4,
                 "encoder_num_layers": 2, "encoder_num_heads": 1, "encoder_ff_interm_features": 96}
"""wav2vec2 large's layout (layer-norm feature encoder, pre-norm layers) at a test size; one head of 64 keeps
the release's 64-wide heads, which the importer assumes."""
TINY_WIDTHS = {"hidden_dim": 64, "bottleneck_dim": 32}
"""TDNN-F widths at a test size; the bottleneck stays 256 wide, as ``hifigan.py`` hard-codes it."""
OUTPUT_DIM = 40
SPEAKERS = ("1034", "19", "6081", "7800", "911")
CONFIG_FILES = {("wav2vec2", True): "local/chain/tuning/tdnnf_wav2vec2_vq.py",
                ("wav2vec2", False): "local/chain/tuning/tdnnf_wav2vec2.py",
                ("fbank", True): "local/chain/tuning/tdnnf_vq.py", ("fbank", False): "local/chain/tuning/tdnnf.py"}
TAGS = {("wav2vec2", True): "wav2vec2_vq_48_v1", ("wav2vec2", False): "wav2vec2_100h_aug_v1",
        ("fbank", True): "600h_vq_48_v1", ("fbank", False): "600h_aug_v1"}


def reference_asr(front_end: str, vq: bool = True, seed: int = 0, codebook: int = 48):
    """SA-toolkit's ASR (``Net`` of its config) at test size, random weights and batch-norm statistics."""
    torch.manual_seed(seed)
    net_class = ref.build_asr(ref.asr_args(codebook if vq else None), front_end, vq,
                              TINY_WAV2VEC2 if front_end == "wav2vec2" else None)
    net = net_class(output_dim=OUTPUT_DIM, **TINY_WIDTHS)
    with torch.no_grad():
        for name, buffer in net.named_buffers():
            if name.endswith("running_mean"):
                buffer.normal_(0.0, 0.1)
            elif name.endswith("running_var"):
                buffer.uniform_(0.5, 2.0)
        for name, parameter in net.named_parameters():
            if name.startswith("preprocessor.") and parameter.ndim == 1:
                parameter.normal_(0.0, 0.05).add_(1.0 if "norm" in name and name.endswith("weight") else 0.0)
    net.eval()
    if vq:
        _codebook_from_speech(net, seed)
    return net


def _codebook_from_speech(net, seed: int) -> None:
    """Codebook rows drawn from the network's own bottleneck frames on a speech-like signal, the bottleneck
    bias shifted to centre them. With its random normal codebook every frame of random weights picks the same
    row (the quantiser would go untested), and uncentred frames, nearly equal and far from the origin, would
    leave the nearest rows closer together than float32 can tell apart."""
    from tests.helpers.corpora import synthetic_vowel

    layer = net.tdnnfs[-2]
    captured = []
    hook = layer.tdnn.linearB.register_forward_hook(lambda module, inputs, output: captured.append(output))
    wave = torch.from_numpy(synthetic_vowel(150.0, [(700, 80), (1200, 100), (2600, 150)], 1.5, seed=seed))
    with torch.no_grad():
        net.extract_bn(wave[None])
    hook.remove()
    frames = captured[0][0]
    centre = frames.mean(0)
    quant = layer.tdnn.bottleneck_func.quant
    rows = torch.randperm(len(frames), generator=torch.Generator().manual_seed(seed))[:quant._num_embeddings]
    with torch.no_grad():
        layer.tdnn.linearB.inner_nat.bias.sub_(centre)
        quant._embedding.weight.copy_(frames[rows] - centre)


def reference_converter(front_end: str, vq: bool = True, seed: int = 0):
    """SA-toolkit's anonymisation ``Net`` (``hifigan.py``) around a test-size ASR, random weights."""
    asr = reference_asr(front_end, vq, seed)
    args = SimpleNamespace(asrbn_model=f"../../asr/librispeech/exp/chain/bn_tdnnf_{TAGS[front_end, vq]}/final.pt",
                           f0_transformation="")
    utt2spk = {f"{speaker}_{i:03d}": speaker for speaker in SPEAKERS for i in range(3)}
    torch.manual_seed(seed + 1)
    net = ref.build_hifigan(args, {"upsample_initial_channel": 32})(utt2spk, asr)
    return net.eval(), args, utt2spk


def write_asr_release(folder: Path, front_end: str, vq: bool = True, seed: int = 0, **entries) -> Path:
    """``<folder>/final.pt`` of a ``bn_tdnnf_*`` tag; ``entries`` replace the dict's entries."""
    net = reference_asr(front_end, vq, seed)
    folder.mkdir(parents=True, exist_ok=True)
    args = {"freeze_encoder": "False", "codebook_size": 48} if vq else {}
    save = dict(base_model_path=CONFIG_FILES[front_end, vq], base_model_params={"output_dim": OUTPUT_DIM},
                base_model_args=args, task_path="/egs/asr/librispeech")
    ref.save_final_pt(folder / "final.pt", net, **{**save, **entries})
    return folder / "final.pt"


def write_converter_release(folder: Path, front_end: str, vq: bool = True, seed: int = 0, **entries) -> Path:
    """``<folder>/final.pt`` of a ``hifigan_bn_tdnnf_*`` tag; ``entries`` replace the dict's entries."""
    net, args, utt2spk = reference_converter(front_end, vq, seed)
    folder.mkdir(parents=True, exist_ok=True)
    save = dict(base_model_path="local/tuning/hifigan.py", base_model_params={"utt2spk": utt2spk},
                base_model_args=vars(args), task_path="/egs/vc/libritts")
    ref.save_final_pt(folder / "final.pt", net, **{**save, **entries})
    return folder / "final.pt"


def tamper(path: Path, change) -> Path:
    """Rewrite ``path``'s dict after ``change(checkpoint)`` (keeping its layout otherwise)."""
    checkpoint = torch.load(path, weights_only=True)
    change(checkpoint)
    torch.save(checkpoint, path)
    return path
