"""ASV attacker training speed: utterances/s of ``voxanon train asv`` with the challenge's full-size ECAPA.

The VoicePrivacy 2024 ECAPA-TDNN (channels 512x4/1536, 192-d, AAM softmax over 921 speakers,
Adam + cyclic LR) on random 3 s chunks of synthetic 16 kHz WAV utterances (timing does not depend
on the audio), batch 32 by default, on the CPU (or ``--device cuda``, where ``--precision auto``
means bf16 autocast). Two figures, measured side by side in one process:

* ``train asv``: :class:`voxanon.pipeline.training.asv.AsvTrainer`'s epoch loop, reading chunks
  from the WAV files (first epoch is the warm-up, the second is timed);
* ``speechbrain step``: the recipe's bare step (Fbank, sentence mean norm, ECAPA_TDNN,
  Classifier, LogSoftmaxWrapper(AdditiveAngularMargin), backward, Adam) on the same batches held
  in memory, i.e. what speechbrain's ``Brain.fit_batch`` computes without data loading.

Then one epoch of train-clean-360 is extrapolated: 104,014 utterances (921 speakers); the
challenge trains on all of them (``num_utt: ALL``) minus its 10 % validation split, so
93,613 training utterances per epoch, and 10 epochs.

    .venv/bin/python benchmarks/train_asv.py [--batch-size 32] [--batches 3] [--device cpu]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile
import torch

TRAIN_CLEAN_360_UTTERANCES = 104_014
TRAIN_CLEAN_360_TRAINING = TRAIN_CLEAN_360_UTTERANCES - round(0.1 * TRAIN_CLEAN_360_UTTERANCES)
CHALLENGE_SPEAKERS = 921


def synthetic_set(root: Path, n_utterances: int, n_speakers: int, seconds: float, seed: int = 0) -> Path:
    from voxanon.data_prep.corpus import DataDir, write_data_dir

    rng = np.random.default_rng(seed)
    wav, utt2spk = {}, {}
    (root / "audio").mkdir(parents=True)
    for i in range(n_utterances):
        speaker = f"{i % n_speakers:04d}"
        utt = f"{speaker}-1-{i:05d}"
        path = root / "audio" / f"{utt}.wav"
        soundfile.write(path, (0.1 * rng.standard_normal(int(seconds * 16000))).astype(np.float32), 16000,
                        subtype="PCM_16")
        wav[utt], utt2spk[utt] = str(path), speaker
    write_data_dir(DataDir(name="synthetic", wav=wav, utt2spk=utt2spk, path=root / "data"), root / "data")
    return root / "data"


def speechbrain_step_rate(trainer, batches: int) -> float:
    """Utterances/s of the bare recipe step on in-memory batches of the trainer's size and network."""
    from speechbrain.lobes.features import Fbank
    from speechbrain.lobes.models.ECAPA_TDNN import ECAPA_TDNN, Classifier
    from speechbrain.nnet.losses import AdditiveAngularMargin, LogSoftmaxWrapper
    from speechbrain.processing.features import InputNormalization

    h, device = trainer.h, trainer.device
    features, norm = Fbank(n_mels=h["n_mels"]).to(device), InputNormalization(norm_type="sentence", std_norm=False)
    embedding = ECAPA_TDNN(h["n_mels"], channels=h["channels"], kernel_sizes=h["kernel_sizes"],
                           dilations=h["dilations"], attention_channels=h["attention_channels"],
                           lin_neurons=h["lin_neurons"]).to(device)
    classifier = Classifier(h["lin_neurons"], out_neurons=CHALLENGE_SPEAKERS).to(device)
    loss_fn = LogSoftmaxWrapper(AdditiveAngularMargin(margin=h["margin"], scale=h["scale"]))
    optimizer = torch.optim.Adam([*embedding.parameters(), *classifier.parameters()], lr=h["lr"],
                                 weight_decay=h["weight_decay"])
    waves = torch.randn(h["batch_size"], trainer.chunk, device=device) * 0.1
    labels = torch.randint(CHALLENGE_SPEAKERS, (h["batch_size"], 1), device=device)
    lens = torch.ones(h["batch_size"], device=device)

    def step():
        feats = norm(features(waves), lens)
        with torch.autocast(device.type, dtype=trainer.autocast_dtype, enabled=trainer.autocast_dtype is not None):
            outputs = classifier(embedding(feats, lens))
        loss = loss_fn(outputs.float(), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    step()
    _synchronise(device)
    started = time.perf_counter()
    for _ in range(batches):
        step()
    _synchronise(device)
    return batches * h["batch_size"] / (time.perf_counter() - started)


def _synchronise(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    from voxanon.pipeline.training.asv import AsvTrainer, prepare_training_data, read_training_sets, resolve_hparams

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=3, help="timed batches (one epoch), after a warm-up epoch")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16", "fp16"))
    parser.add_argument("--workers", type=int, help="data-loading processes (default: 0 on the CPU, 8 on a GPU)")
    args = parser.parse_args()

    # The training speakers of the synthetic set are padded to the challenge's 921 classifier outputs below.
    hparams = resolve_hparams({"batch_size": args.batch_size, "valid_ratio": 0.0, "number_of_epochs": 2})
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = synthetic_set(Path(tmp), args.batch_size * args.batches, n_speakers=16, seconds=5.0)
        data = prepare_training_data(read_training_sets([data_dir]), hparams, progress=False)
        data.speakers = data.speakers + [f"pad{i}" for i in range(CHALLENGE_SPEAKERS - len(data.speakers))]
        trainer = AsvTrainer(hparams, data, Path(tmp) / "model", device=args.device, precision=args.precision,
                             workers=args.workers, progress=False)
        parameters = sum(p.numel() for p in trainer.model.parameters())
        print(f"device {trainer.device}, precision {trainer.precision}, {torch.get_num_threads()} threads; "
              f"ECAPA {hparams['channels']} + classifier over {CHALLENGE_SPEAKERS} speakers: "
              f"{parameters / 1e6:.2f} M parameters; batch {args.batch_size} x {hparams['sentence_len']:g} s chunks")
        trainer.train_epoch()
        trainer.finish_epoch()
        trainer.train_epoch()
        ours = trainer.running["count"] / trainer.running["seconds"]
    reference = speechbrain_step_rate(trainer, args.batches)
    print(f"train asv (chunks read from WAV files): {ours:.2f} utterances/s, "
          f"{args.batch_size / ours:.2f} s per batch of {args.batch_size}")
    print(f"speechbrain step (in-memory batch):      {reference:.2f} utterances/s; ratio ours/speechbrain "
          f"{ours / reference:.2f}")
    epoch_seconds = TRAIN_CLEAN_360_TRAINING / ours
    print(f"one epoch of train-clean-360 ({TRAIN_CLEAN_360_TRAINING} training utterances = all {TRAIN_CLEAN_360_UTTERANCES} "
          f"less the 10 % validation split): {epoch_seconds:.0f} s = {epoch_seconds / 3600:.1f} h; "
          f"10 epochs {10 * epoch_seconds / 3600:.1f} h")


if __name__ == "__main__":
    main()
