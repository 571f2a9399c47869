"""Speech emotion recognition for the SER utility evaluation (UAR on original vs anonymised speech).

The VoicePrivacy 2024 SER model is speechbrain's ``emotion-recognition-wav2vec2-IEMOCAP``
recipe, trained once per leave-one-session-out fold and used through its
``CustomEncoderWav2vec2Classifier``: wav2vec2 (speechbrain's wrapper) -> average over the
frames (``StatisticsPooling(return_std=False)``) -> ``output_mlp`` (a linear layer) ->
log-softmax over the labels of ``label_encoder.txt`` (neu, ang, hap, sad).

A model directory holds ``hyperparams.yaml``, ``wav2vec2.ckpt`` (the wrapper's ``model.*``
keys), ``model.ckpt`` (``ModuleList [output_mlp]``: ``0.w.weight``, ``0.w.bias`` when the
layer has one) and ``label_encoder.txt``. The YAML is read as data only
(:mod:`voxanon.models.speechbrain_dirs`); the weights load key for key into our modules.

Two deliberate differences from speechbrain, both below the checkpoint's precision:
speechbrain's ``StatisticsPooling`` adds random noise of 1e-5 to 9e-5 to every pooled mean
(not done here: scores are reproducible), and utterances are classified one at a time as
the challenge does (padding would change the wrapper's whole-signal normalisations).
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from voxanon.models.speechbrain_dirs import (HPARAMS_FILE, WAV2VEC2_WRAPPERS, ModelDirError, Tagged, arguments,
                                             entry, read_hparams, read_label_encoder, require_files, resolve)

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


def model_identity(model_dir: str | Path) -> str:
    """sha256 over a model directory's files: a cache key that changes with any weight or label."""
    from voxanon.data_prep.digest import sha256_file

    return hashlib.sha256("".join(sha256_file(Path(model_dir) / name) for name in SER_FILES).encode()).hexdigest()


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

    @property
    def identity(self) -> str:
        return model_identity(self.model_dir)

    def log_probabilities(self, audios: Sequence[np.ndarray], progress: bool = False) -> np.ndarray:
        """(n, n_labels) log-probabilities, each utterance classified on its own."""
        import torch

        checked = [_checked_audio(audio, i) for i, audio in enumerate(audios)]
        rows = []
        with torch.inference_mode():
            for samples in tqdm(checked, desc="SER", unit="utt", disable=not progress):
                rows.append(self._model(torch.from_numpy(samples)[None].to(self.device))[0].cpu().numpy())
        return np.stack(rows).astype(np.float32) if rows else np.zeros((0, len(self.labels)), np.float32)

    def classify(self, audios: Sequence[np.ndarray]) -> list[str]:
        return [self.labels[i] for i in self.log_probabilities(audios).argmax(axis=1)]


def _classifier_module(directory: Path, hparams: dict, n_labels: int):
    import torch

    from voxanon.models.checkpoints import CheckpointError, safe_load
    from voxanon.models.speechbrain_dirs import load_wav2vec2

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
        """(1, samples) -> (1, n_labels) log-probabilities."""

        def __init__(self):
            super().__init__()
            self.wav2vec2 = wav2vec2
            self.output_mlp = torch.nn.Linear(weight.shape[1], weight.shape[0], bias="0.w.bias" in state)

        def forward(self, wav: torch.Tensor) -> torch.Tensor:
            pooled = self.wav2vec2(wav).mean(dim=1)
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
