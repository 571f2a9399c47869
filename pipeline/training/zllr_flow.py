"""Training the zero-LLR flow and its LDA and global-average baselines on labelled vectors, into a flow folder
(``voxanon zllr train`` and ``voxanon train sex-flow``)."""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file as load_arrays, save_file as save_arrays

from ...data_prep.atomic import atomic_path, atomic_write_text
from ...data_prep.errors import VoxanonError
from ...data_prep.vectors import l2_normalise
from ...models.nets.flow_config import PROTECTION_METHODS, FlowConfig, TrainingConfig
from ...models.speakers.lda import LinearDiscriminant, balanced_global_average
from ..labelled_vectors import read_labelled_vectors


BASELINES_FILE = "baselines.safetensors"


TRAINING_FILE = "training.json"


def default_hidden_width(dim: int) -> int:
    """The next power of two at or above ``dim`` (512 for x-vectors, 256 for 192-d ECAPA)."""
    return 1 << max(0, int(dim - 1).bit_length())


def run_train(args: argparse.Namespace) -> int:
    from ...models.nets.flow import save_flow, train_zero_llr_flow

    vectors, is_female, speakers = read_labelled_vectors(args.vectors, args.utt2spk, args.spk2gender)
    config = FlowConfig(dim=vectors.dim, hidden=args.hidden or default_hidden_width(vectors.dim),
                        n_layers=args.layers, zero_init=not args.no_zero_init, l2_normalise_input=args.l2_normalise)
    training = TrainingConfig(mu_strategy=args.mu_strategy, alpha=args.alpha, learning_rate=args.lr,
                              batch_size=args.batch_size, max_epochs=args.epochs, patience=args.patience,
                              initial_mu=args.mu0, seed=args.seed)
    model, history = train_zero_llr_flow(vectors.matrix, is_female, config, training, groups=speakers,
                                         progress=not args.quiet)
    inputs = l2_normalise(vectors.matrix) if args.l2_normalise else vectors.matrix
    lda = LinearDiscriminant.fit(inputs, is_female)
    sexes = ["f" if female else "m" for female in is_female]
    average = balanced_global_average(inputs, speakers, sexes)
    if args.l2_normalise:
        average = l2_normalise(average[None])[0]
    save_flow(model, args.out)
    arrays = {f"lda_{name}": value for name, value in lda.to_arrays().items()}
    arrays["global_average"] = average
    with atomic_path(args.out / BASELINES_FILE) as tmp:
        save_arrays({name: np.ascontiguousarray(value) for name, value in arrays.items()}, str(tmp))
    atomic_write_text(args.out / TRAINING_FILE, json.dumps(
        {"vectors": str(args.vectors), "n_vectors": len(vectors), "n_speakers": len(set(speakers)),
         "training": asdict(training), "history": asdict(history), "final_mu": model.mu}, indent=2) + "\n")
    print(f"zero-LLR flow: {len(vectors)} vectors of {len(set(speakers))} speakers, dimension {vectors.dim}; "
          f"best epoch {history.best_epoch}, validation NLL {history.validation_nll[history.best_epoch - 1]:.3f}, "
          f"μ = {model.mu:.3f} -> {args.out}")
    return 0


class Protections:
    """The methods a model folder offers, each mapping an ``(n, d)`` array to protected vectors."""

    def __init__(self, directory: Path):
        from ...models.nets.flow import load_flow

        self.directory = directory
        self.flow = load_flow(directory)
        self.lda: LinearDiscriminant | None = None
        self.global_average: np.ndarray | None = None
        if (directory / BASELINES_FILE).is_file():
            arrays = load_arrays(str(directory / BASELINES_FILE))
            self.lda = LinearDiscriminant.from_arrays({k[4:]: v for k, v in arrays.items() if k.startswith("lda_")})
            self.global_average = arrays["global_average"]

    @property
    def available(self) -> tuple[str, ...]:
        return ("zllr",) if self.lda is None else PROTECTION_METHODS

    def _input(self, vectors: np.ndarray) -> np.ndarray:
        return l2_normalise(vectors) if self.flow.config.l2_normalise_input else np.asarray(vectors, np.float64)

    def protect(self, method: str, vectors: np.ndarray) -> np.ndarray:
        if method not in self.available:
            raise VoxanonError(f"{self.directory}: no {method!r} protection here "
                               f"(available: {', '.join(self.available)}); imported flows carry no baselines")
        if method == "zllr":
            return self.flow.protect_numpy(vectors)
        if method == "lda":
            return self.lda.protect(self._input(vectors))
        return np.tile(self.global_average, (len(vectors), 1))
