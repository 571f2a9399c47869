"""The model ``voxanon train asv`` leaves (:mod:`voxanon.pipeline.training.asv`): speechbrain's ``EncoderClassifier``
files, and whether a folder already holds the finished model for given settings and data."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ....data_prep.atomic import atomic_path, atomic_write_text
from .settings import FREE_SETTINGS, TRAINING_FILE

HYPERPARAMS_FILE = "hyperparams.yaml"
CLASSIFIER_FILE = "classifier.ckpt"
LABEL_ENCODER_FILE = "label_encoder.txt"
PRETRAINER_LABEL_ENCODER_FILE = "label_encoder.ckpt"
# Every file export_model writes ("embedding_model.ckpt" is models.checkpoints.ecapa.EMBEDDING_FILE, which imports torch).
MODEL_FILES = (HYPERPARAMS_FILE, "embedding_model.ckpt", CLASSIFIER_FILE, LABEL_ENCODER_FILE,
               PRETRAINER_LABEL_ENCODER_FILE)


def _yaml_list(values) -> str:
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


def inference_hyperparams(h: dict, n_speakers: int) -> str:
    """speechbrain ``EncoderClassifier`` hyperparameters for the saved model (the spkrec-ecapa layout)."""
    return f"""# Written by voxanon train asv. speechbrain EncoderClassifier layout:
#   EncoderClassifier.from_hparams(source=THIS_FOLDER) -> encode_batch(wavs) gives the 192-d (lin_neurons) vectors;
#   voxanon evaluate ... --set asv.encoder=ecapa:THIS_FOLDER gives the same vectors.

n_mels: {h['n_mels']}
out_n_neurons: {n_speakers}

compute_features: !new:speechbrain.lobes.features.Fbank
    n_mels: !ref <n_mels>

mean_var_norm: !new:speechbrain.processing.features.InputNormalization
    norm_type: sentence
    std_norm: False

embedding_model: !new:speechbrain.lobes.models.ECAPA_TDNN.ECAPA_TDNN
    input_size: !ref <n_mels>
    channels: {_yaml_list(h['channels'])}
    kernel_sizes: {_yaml_list(h['kernel_sizes'])}
    dilations: {_yaml_list(h['dilations'])}
    attention_channels: {h['attention_channels']}
    res2net_scale: {h['res2net_scale']}
    se_channels: {h['se_channels']}
    lin_neurons: {h['lin_neurons']}

classifier: !new:speechbrain.lobes.models.ECAPA_TDNN.Classifier
    input_size: {h['lin_neurons']}
    out_neurons: !ref <out_n_neurons>

modules:
    compute_features: !ref <compute_features>
    mean_var_norm: !ref <mean_var_norm>
    embedding_model: !ref <embedding_model>
    classifier: !ref <classifier>

label_encoder: !new:speechbrain.dataio.encoder.CategoricalEncoder

# Files are looked up as <source>/<name>.ckpt (label_encoder.ckpt is label_encoder.txt).
pretrainer: !new:speechbrain.utils.parameter_transfer.Pretrainer
    loadables:
        embedding_model: !ref <embedding_model>
        classifier: !ref <classifier>
        label_encoder: !ref <label_encoder>
"""


def export_model(model, h: dict, speakers: list[str], out_dir: Path) -> None:
    """The speechbrain model files, each written atomically."""
    from speechbrain.dataio.encoder import CategoricalEncoder

    from ....models.checkpoints.safe import atomic_torch_save
    from ....models.checkpoints.ecapa import EMBEDDING_FILE

    for name, module in ((EMBEDDING_FILE, model.embedding_model), (CLASSIFIER_FILE, model.classifier)):
        atomic_torch_save({k: v.detach().cpu() for k, v in module.state_dict().items()}, out_dir / name)
    encoder = CategoricalEncoder()
    encoder.update_from_iterable(speakers)
    for name in (LABEL_ENCODER_FILE, PRETRAINER_LABEL_ENCODER_FILE):
        with atomic_path(out_dir / name) as tmp:
            encoder.save(tmp)
    atomic_write_text(out_dir / HYPERPARAMS_FILE, inference_hyperparams(h, len(speakers)))


# A finished model ------------------------------------------------------------------------------------


def attacker_identity(hparams: dict, train_sets: list[dict]) -> str:
    """A name part for a model folder: a hash of the settings that shape the weights and of the training data's
    :func:`data_identity` (the number of epochs is left out, so raising it trains the same model further)."""
    shaping = {k: v for k, v in hparams.items() if k not in FREE_SETTINGS}
    data = [_comparable(entry) for entry in train_sets]
    return hashlib.sha256(json.dumps([shaping, data], sort_keys=True).encode()).hexdigest()[:12]


def finished_attacker(model_dir: Path, hparams: dict, train_sets: list[dict], allow_missing: bool = False) -> bool:
    """Whether ``model_dir`` holds a complete model trained with these settings on these data (each set's
    :func:`data_identity`, its place aside); one trained without unreadable files counts only under
    ``allow_missing``."""
    path = Path(model_dir) / TRAINING_FILE
    if not path.is_file() or not all((Path(model_dir) / name).is_file() for name in MODEL_FILES):
        return False
    try:
        training = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    if training.get("status") != "complete" or training.get("hparams") != hparams:
        return False
    if training.get("unreadable_utterances") and not allow_missing:
        return False
    return [_comparable(e) for e in training.get("data") or []] == [_comparable(e) for e in train_sets]


def _comparable(entry: dict) -> dict:
    """A training set's identity without its place (a moved output folder keeps its model) or run status."""
    anonymisation = entry.get("anonymisation")
    return ({k: v for k, v in entry.items() if k not in ("anonymisation", "path")}
            | {"anonymisation": None if not anonymisation else {"system": anonymisation["system"],
                                                                 "config_hash": anonymisation["config_hash"]}})
