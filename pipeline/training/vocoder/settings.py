"""``voxanon train vocoder``'s settings, its files' names, and the base model set they are checked against."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from ....data_prep.errors import VoxanonError
from ...systems.ssl_sas.chain import SSL_SAS_MULTIPLE
from ..checkpointing import PRECISIONS

SAMPLE_RATE = 16000
CHECKPOINT_FORMAT = "voxanon-vocoder-training-1"
TRAIN_LOG = "train.log"
SKIPPED_FILE = "skipped.txt"
OPTIONS_FILE = "training.json"
JIK876_CONFIG = "config.json"
# Settings a resumed run must share with the checkpoint for the continuation to be exact.
RESUME_KEYS = ("models", "batch_size", "segment", "seed", "lambda_xv", "layout", "learning_rate", "adam_betas",
               "lr_decay", "init", "discriminator_width_divisor", "data_digest")


@dataclass(frozen=True)
class VocoderTrainingOptions:
    out: Path
    models: str = "ssl-sas"
    steps: int = 100_000
    batch_size: int = 32
    segment: int = 8960
    checkpoint_interval: int = 10_000
    log_interval: int = 100
    lambda_xv: float = 0.0
    learning_rate: float = 2e-4
    adam_betas: tuple[float, float] = (0.8, 0.99)
    lr_decay: float = 0.999
    seed: int = 1234
    device: str = "auto"
    precision: str = "auto"
    feature_cache: Path | None = None
    layout: dict = field(default_factory=dict)
    init: str = "random"
    keep_last: int = 0
    validation_items: int = 4
    discriminator_width_divisor: int = 1
    workers: int = 1
    progress: bool = True

    def __post_init__(self):
        problems = []
        if self.steps < 0:
            problems.append(f"--steps must be at least 0, got {self.steps}")
        if self.batch_size < 1:
            problems.append(f"--batch-size must be at least 1, got {self.batch_size}")
        if self.segment < 2 * SSL_SAS_MULTIPLE or self.segment % SSL_SAS_MULTIPLE:
            problems.append(f"--segment must be a multiple of {SSL_SAS_MULTIPLE} samples (one content frame) and at "
                            f"least {2 * SSL_SAS_MULTIPLE}, got {self.segment}")
        if self.checkpoint_interval < 1 or self.log_interval < 1:
            problems.append("--checkpoint-interval and --log-interval must be at least 1")
        if self.lambda_xv < 0:
            problems.append(f"--lambda-xv must be non-negative, got {self.lambda_xv}")
        if self.precision not in PRECISIONS:
            problems.append(f"--precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.init not in ("random", "base"):
            problems.append(f"--init must be 'random' or 'base', got {self.init!r}")
        if self.discriminator_width_divisor not in (1, 2, 4, 8):
            problems.append(f"--discriminator-divisor must be 1, 2, 4 or 8, got {self.discriminator_width_divisor}")
        if self.workers < 1:
            problems.append(f"--workers must be at least 1, got {self.workers}")
        if self.keep_last < 0:
            problems.append(f"--keep-last must be at least 0, got {self.keep_last}")
        if problems:
            raise VoxanonError("vocoder training options: " + "; ".join(problems))

    @property
    def cache_root(self) -> Path:
        return self.feature_cache if self.feature_cache is not None else self.out / "feature_cache"


def _produced_width(config: dict, component: str) -> int | None:
    """The dimension of the vectors a model set's content or speaker model produces, when its config says."""
    values = config.get(component) or {}
    return values.get("lin_neurons") if component == "speaker" else values.get("units_dim", values.get("n_centroids"))


def resolve_training_models(options: VocoderTrainingOptions):
    """The base model set (verified against its manifest), the conditioning layout (with ``--layout`` overrides)
    and the generator config, checked against each other: a bad option fails before the feature pass."""
    from ....models.nets.hifigan import ConditioningLayout, GeneratorConfig
    from ....models.checkpoints.registry import load_model_set

    base = load_model_set(options.models)
    if "generator" not in base.config or "layout" not in base.config:
        raise VoxanonError(f"model set {options.models!r} has no vocoder to take the generator shape and "
                           "conditioning layout from (e.g. use ssl-sas)")
    try:
        layout = replace(ConditioningLayout.from_dict(base.config["layout"]), **options.layout)
    except (TypeError, ValueError) as error:
        raise VoxanonError(f"--layout: {error} (fields: {sorted(ConditioningLayout.__dataclass_fields__)})") from None
    generator_config = GeneratorConfig.from_dict({**base.config["generator"], "in_channels": layout.channels})
    if options.init == "base" and generator_config.in_channels != GeneratorConfig.from_dict(
            base.config["generator"]).in_channels:
        raise VoxanonError(f"--init base: the base generator takes {base.config['generator'].get('in_channels')} "
                           f"input channels, the layout gives {layout.channels}; use --init random")
    if generator_config.hop_length * layout.content_repeat != SSL_SAS_MULTIPLE:
        raise VoxanonError(f"model set {options.models!r}: generator hop {generator_config.hop_length} × "
                           f"content repeat {layout.content_repeat} is not the {SSL_SAS_MULTIPLE}-sample "
                           "content hop of the SSL-SAS layout")
    for component, width in (("content", layout.content_dim), ("speaker", layout.speaker_dim)):
        produced = _produced_width(base.config, component)
        if produced is not None and produced != width:
            raise VoxanonError(f"--layout: {component}_dim {width} differs from the {produced}-d {component} "
                               f"model of set {options.models!r}")
    return base, layout, generator_config
