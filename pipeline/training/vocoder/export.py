"""What a vocoder training run leaves besides its checkpoints: jik876's ``config.json`` beside them, and the trained
generator installed as a model set."""
from __future__ import annotations

from pathlib import Path

from .trainer import VocoderTrainer


def jik876_config(trainer: VocoderTrainer) -> dict:
    """The checkpoint folder's ``config.json`` in SSL-SAS/jik876 key names, beside our own."""
    from ....models.nets.hifigan_training import MelConfig

    options, generator, mel = trainer.options, trainer.generator_config, MelConfig()
    return {"resblock": generator.resblock, "num_gpus": 0, "batch_size": options.batch_size,
            "learning_rate": options.learning_rate, "adam_b1": options.adam_betas[0], "adam_b2": options.adam_betas[1],
            "lr_decay": options.lr_decay, "seed": options.seed, "model_in_dim": generator.in_channels,
            "upsample_rates": list(generator.upsample_rates),
            "upsample_kernel_sizes": list(generator.upsample_kernel_sizes),
            "upsample_initial_channel": generator.upsample_initial_channel,
            "resblock_kernel_sizes": list(generator.resblock_kernel_sizes),
            "resblock_dilation_sizes": [list(d) for d in generator.resblock_dilation_sizes],
            "segment_size": options.segment, "num_mels": mel.n_mels, "n_fft": mel.n_fft, "hop_size": mel.hop_length,
            "win_size": mel.win_length, "sampling_rate": mel.sample_rate, "fmin": mel.f_min, "fmax": mel.f_max,
            "fmax_for_loss": None, "lambda_xv": options.lambda_xv,
            "discriminator_width_divisor": options.discriminator_width_divisor, "layout": trainer.layout.to_dict(),
            "generator": generator.to_dict()}


def install_trained_generator(trainer: VocoderTrainer, name: str) -> Path:
    """Install the trained generator (weight norm folded) with the base set's encoders as model set ``name``."""
    from ....models.checkpoints.ssl_sas import split_ssl_sas_generator
    from ....models.nets.hifigan import HifiganGenerator, Vocoder
    from ....models.nets.hifigan_training import to_jik876_generator_state
    from ....models.checkpoints.registry import write_model_set

    folded = split_ssl_sas_generator({"generator": to_jik876_generator_state(trainer.generator.state_dict())},
                                     "trained generator")["generator"]
    folded = {key: value.detach().float().cpu() for key, value in folded.items()}
    Vocoder(HifiganGenerator(trainer.generator_config), trainer.layout).generator.load_state_dict(folded)
    config = {**trainer.base.config, "layout": trainer.layout.to_dict(),
              "vocoder_training": {"base": trainer.options.models, "steps": trainer.steps,
                                   "checkpoints": str(trainer.options.out.resolve()),
                                   "lambda_xv": trainer.options.lambda_xv, "segment": trainer.options.segment,
                                   "batch_size": trainer.options.batch_size, "data_digest": trainer.features.digest}}
    components = {"generator": folded, "content": trainer.base.tensors("content"),
                  "speaker": trainer.base.tensors("speaker")}
    source = (f"voxanon train vocoder: {trainer.steps} steps from base set {trainer.options.models!r} "
              f"(checkpoints in {trainer.options.out.resolve()})")
    return write_model_set(name, components, config, source=source, random=trainer.base.random)
