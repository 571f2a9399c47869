"""Speech emotion recognition for the SER utility evaluation (UAR on original vs anonymised speech).

The VoicePrivacy 2024 SER model is speechbrain's ``emotion-recognition-wav2vec2-IEMOCAP``
recipe, trained once per leave-one-session-out fold and used through its
``CustomEncoderWav2vec2Classifier``: wav2vec2 (speechbrain's wrapper) -> average over the
frames (``StatisticsPooling(return_std=False)``) -> ``output_mlp`` (a linear layer) ->
log-softmax over the labels of ``label_encoder.txt`` (neu, ang, hap, sad).

A model directory holds ``hyperparams.yaml``, ``wav2vec2.ckpt`` (the wrapper's ``model.*``
keys), ``model.ckpt`` (``ModuleList [output_mlp]``: ``0.w.weight``, ``0.w.bias`` when the
layer has one) and ``label_encoder.txt``. The YAML is read as data only
(:mod:`voxanon.models.checkpoints.speechbrain_dirs`); the weights load key for key into our modules.

Utterances run in zero-padded batches of similar length, each item masked to its own samples and
frames (the wrapper's normalisations, the base models' group-norm feature extractor, the attention and
the pooled mean), so each score is the one the utterance gets alone, as the challenge classifies them.
One deliberate difference from speechbrain, below the checkpoint's precision: its ``StatisticsPooling``
adds random noise of 1e-5 to 9e-5 to every pooled mean (not done here: scores are reproducible).
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..checkpoints.speechbrain_dirs import (HPARAMS_FILE, WAV2VEC2_WRAPPERS, ModelDirError, Tagged, arguments, entry,
                                            read_hparams, read_label_encoder, require_files, resolve)

SAMPLE_RATE = 16000
IEMOCAP_EMOTIONS = ("neu", "ang", "hap", "sad")
SER_FILES = (HPARAMS_FILE, "wav2vec2.ckpt", "model.ckpt", "label_encoder.txt")
FOLD_PREFIX = "fold_"


def _checked_audio(audio: np.ndarray, index: int) -> np.ndarray:
    samples = np.asarray(audio)
    if samples.ndim != 1 or samples.size == 0 or not np.issubdtype(samples.dtype, np.floating):
        raise ValueError(f"audio {index}: expected non-empty mono float samples, got {samples.dtype} "
                         f"{samples.shape}")
    if not np.isfinite(samples).all():
        raise ValueError(f"audio {index}: contains NaN or Inf samples")
    return np.ascontiguousarray(samples, dtype=np.float32)


def model_identity(model_dir: str | Path, digest=None) -> str:
    """sha256 over a model directory's files: a cache key that changes with any weight or label.
    ``digest`` (path -> sha256 hex) may serve the files' digests from a cache; default: hash them."""
    if digest is None:
        from ...data_prep.digest import sha256_file as digest

    return hashlib.sha256("".join(digest(Path(model_dir) / name) for name in SER_FILES).encode()).hexdigest()


class EmotionClassifier:
    """One fold's wav2vec2 emotion classifier; 16 kHz float32 mono waves -> log-probabilities."""

    sample_rate = SAMPLE_RATE

    def __init__(self, model_dir: str | os.PathLike, device: str = "cpu"):
        self.model_dir = Path(model_dir)
        self.device = device
        require_files(self.model_dir, SER_FILES, "speechbrain wav2vec2 emotion classifier")
        self.labels = read_label_encoder(self.model_dir / "label_encoder.txt")
        self._model = _classifier_module(self.model_dir, read_hparams(self.model_dir / HPARAMS_FILE),
                                         len(self.labels)).to(device)

    def log_probabilities(self, audios: Sequence[np.ndarray], progress: bool = False,
                          max_batch: int = 16) -> np.ndarray:
        """(n, n_labels) log-probabilities, each as the utterance gets alone: padded batches of up to
        ``max_batch`` utterances of similar length (:func:`voxanon.models.nets.precision.length_groups`)."""
        import torch

        from ..nets.precision import length_groups

        checked = [_checked_audio(audio, i) for i, audio in enumerate(audios)]
        rows = np.zeros((len(checked), len(self.labels)), np.float32)
        with torch.inference_mode(), tqdm(total=len(checked), desc="SER", unit="utt", disable=not progress) as bar:
            for group in length_groups([len(samples) for samples in checked], max_batch):
                samples = torch.tensor([len(checked[i]) for i in group])
                wavs = torch.zeros(len(group), int(samples.max()))
                for row, i in enumerate(group):
                    wavs[row, :len(checked[i])] = torch.from_numpy(checked[i])
                rows[group] = self._model(wavs.to(self.device), samples).float().cpu().numpy()
                bar.update(len(group))
        return rows

    def classify(self, audios: Sequence[np.ndarray]) -> list[str]:
        return [self.labels[i] for i in self.log_probabilities(audios).argmax(axis=1)]


def _classifier_module(directory: Path, hparams: dict, n_labels: int):
    import torch

    from ..checkpoints.safe import CheckpointError, safe_load
    from ..checkpoints.speechbrain_dirs import load_wav2vec2

    where = directory / HPARAMS_FILE
    layout = {name: resolve(hparams, hparams.get(name)) for name in ("wav2vec2", "avg_pool", "output_mlp")}
    targets = {name: node.target if isinstance(node, Tagged) else "" for name, node in layout.items()}
    if (targets["wav2vec2"] not in WAV2VEC2_WRAPPERS
            or targets["avg_pool"] != "speechbrain.nnet.pooling.StatisticsPooling"
            or targets["output_mlp"] != "speechbrain.nnet.linear.Linear"):
        raise ModelDirError(f"{where}: not the speechbrain wav2vec2 emotion-classifier layout voxanon knows "
                            f"(wav2vec2 wrapper, StatisticsPooling avg_pool, Linear output_mlp); found {targets}")
    pooling = arguments(hparams, layout["avg_pool"])
    if pooling.get("return_std", True) or not pooling.get("return_mean", True):
        raise ModelDirError(f"{where}: avg_pool must pool the mean only (return_std: False)")
    wav2vec2 = load_wav2vec2(directory, hparams, entry(hparams, "wav2vec2", where))
    mlp_path = directory / "model.ckpt"
    state = safe_load(mlp_path)
    if not isinstance(state, dict) or "0.w.weight" not in state or set(state) - {"0.w.weight", "0.w.bias"}:
        raise ModelDirError(f"{mlp_path}: expected the ModuleList [output_mlp] entries 0.w.weight (and 0.w.bias), "
                            f"got {sorted(state) if isinstance(state, dict) else type(state).__name__}")
    weight = state["0.w.weight"]
    if weight.shape[0] != n_labels:
        raise ModelDirError(f"{mlp_path}: {weight.shape[0]} outputs but label_encoder.txt has {n_labels} labels")

    class Wav2Vec2EmotionClassifier(torch.nn.Module):
        """Waves -> log-probabilities over the labels."""

        def __init__(self):
            super().__init__()
            self.wav2vec2 = wav2vec2
            self.output_mlp = torch.nn.Linear(weight.shape[1], weight.shape[0], bias="0.w.bias" in state)

        def forward(self, wav: torch.Tensor, samples: torch.Tensor | None = None) -> torch.Tensor:
            """(B, samples) zero-padded, each item's sample count (None: all full) -> (B, n_labels)."""
            hidden = self.wav2vec2(wav, samples)
            if samples is None:
                pooled = hidden.mean(dim=1)
            else:
                frames = self.wav2vec2.frame_counts(samples).to(hidden.device)
                valid = torch.arange(hidden.shape[1], device=hidden.device)[None] < frames[:, None]
                pooled = hidden.masked_fill(~valid[..., None], 0.0).sum(dim=1) / frames[:, None].to(hidden.dtype)
            return torch.log_softmax(self.output_mlp(pooled), dim=-1)

    model = Wav2Vec2EmotionClassifier()
    try:
        model.output_mlp.load_state_dict({key[len("0.w."):]: value for key, value in state.items()})
    except RuntimeError as error:
        raise CheckpointError(f"{mlp_path}: {str(error).splitlines()[0]}") from None
    return model.eval()


def fold_model_dirs(root: str | os.PathLike) -> dict[str, Path]:
    """Fold name -> model directory under ``root``: ``root/fold_<k>`` as the challenge lays them out,
    the directory itself or, as the challenge's training leaves it, its last ``CKPT*`` folder."""
    root = Path(root)
    if not root.is_dir():
        raise ModelDirError(f"{root}: SER model directory not found")
    folds = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith(FOLD_PREFIX))
    if not folds:
        raise ModelDirError(f"{root}: no {FOLD_PREFIX}<k> folders (one SER model per fold)")
    found = {}
    for fold in folds:
        directory = fold
        if not (fold / HPARAMS_FILE).is_file():
            checkpoints = sorted(p for p in fold.glob("CKPT*") if p.is_dir())
            directory = checkpoints[-1] if checkpoints else fold
        found[fold.name[len(FOLD_PREFIX):]] = directory
    return found
