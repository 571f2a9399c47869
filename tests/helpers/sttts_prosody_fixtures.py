"""B3's aligner file written as its publisher's code writes it, from random weights:
``tts/Aligner/aligner.pt``, the dict IMS-Toucan's ``autoaligner_train_loop`` saves after a training pass
(``asr_model``, its RAdam ``optimizer``, the reconstruction ``tts_model`` (TinyTTS) and its ``tts_optimizer``,
``step_counter``): the transcribed loop body runs one step on a random batch, then saves as the loop does.
"""
from __future__ import annotations

from pathlib import Path

import torch

from tests.reference.toucan import aligner as aligner_ref
from voxanon.models.checkpoints.sttts_prosody import random_aligner

ALIGNER_FILE = Path("tts/Aligner/aligner.pt")
SPEAKER_EMBEDDING_DIM = 192  # TinyTTS's default, the training data's ECAPA speaker embeddings
TRAINING_STEPS_BEFORE = 42_000


def reference_sizes(config: dict) -> dict:
    """The transcribed ``Aligner``'s constructor arguments for one of our configs."""
    return {"n_mels": config["n_mels"], "num_symbols": config["num_symbols"], "lstm_dim": config["lstm_dim"],
            "conv_dim": config["conv_dim"]}


def write_aligner(path: Path, size: str = "tiny", seed: int = 0) -> Path:
    """``aligner.pt`` at ``path`` after one transcribed training step from ``random_aligner(size, seed)``."""
    state, config = random_aligner(size, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + 1)
        asr_model = aligner_ref.Aligner(**reference_sizes(config))
        asr_model.load_state_dict(state)
        tiny_tts = aligner_ref.TinyTTS(n_mels=config["n_mels"], num_symbols=config["num_symbols"],
                                       speaker_embedding_dim=SPEAKER_EMBEDDING_DIM, lstm_dim=config["lstm_dim"])
        mel_len = torch.tensor([40, 33])
        tokens_len = torch.tensor([9, 7])
        batch = (torch.randint(0, config["num_symbols"] - 1, (2, 9)), tokens_len,
                 torch.randn(2, 40, config["n_mels"]), mel_len, torch.randn(2, SPEAKER_EMBEDDING_DIM))
        aligner_ref.train_step_and_save(asr_model, tiny_tts, batch, path, step_counter=TRAINING_STEPS_BEFORE)
    return path
