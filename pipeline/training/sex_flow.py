"""``voxanon train sex-flow``: the zero-LLR sex flow of zLLR-VC, trained on a labelled corpus.

ECAPA vectors of every utterance of Kaldi data directories with ``spk2gender`` (the model
set's speaker encoder, cached per audio content: :mod:`voxanon.pipeline.systems.ssl_sas.corpus_embeddings`),
L2-normalised inside the flow (the ICASSP 2023 set-up, nii-yamagishilab/speaker_sex_attribute_privacy), trained by
``voxanon zllr train``'s code (:func:`voxanon.pipeline.training.zllr_flow.run_train`: the flow,
the LDA and global-average baselines, ``training.json``) into the flow folder
``$VOXANON_HOME/flows/<name>`` (or a path), which ``zero_llr`` stages load by name.

A share of the speakers of each sex (``--held-out``, 10 % by default) is kept out of training;
the Cllr and min Cllr of the flow's LLR coordinate on their utterances are printed and saved
in ``held_out.json``. The training vectors are kept beside the flow (``training_vectors.npy``
+ ``.ids``, ``utt2spk``, ``spk2gender``) so the run can be inspected and repeated.
"""
from __future__ import annotations

import argparse
import json

import numpy as np

from ...data_prep.atomic import atomic_write_text
from ...data_prep.corpus import write_mapping
from ...data_prep.errors import VoxanonError
from ...data_prep.vectors import write_vectors


TRAINING_VECTORS = "training_vectors.npy"
HELD_OUT_FILE = "held_out.json"


def held_out_speakers(sex: dict[str, str], fraction: float, seed: int) -> set[str]:
    """``round(fraction * n)`` speakers of each sex (at least one), drawn with ``seed``; none when
    ``fraction`` is 0 or a sex has fewer than 2 speakers (one must remain for training)."""
    if not 0.0 <= fraction < 1.0:
        raise VoxanonError(f"--held-out must lie in [0, 1), got {fraction}")
    if fraction == 0.0:
        return set()
    groups = {label: sorted(spk for spk, s in sex.items() if s == label) for label in ("f", "m")}
    if any(len(group) < 2 for group in groups.values()):
        return set()
    rng = np.random.default_rng(seed)
    chosen: set[str] = set()
    for group in groups.values():
        count = min(len(group) - 1, max(1, int(round(fraction * len(group)))))
        chosen.update(rng.permutation(group)[:count].tolist())
    return chosen


def run_sex_flow(args: argparse.Namespace) -> int:
    from ...eval.cllr import cllr, min_cllr
    from ...models.nets.flow import load_flow
    from ...models.checkpoints.registry import asset_dir
    from .zllr_flow import run_train
    from ..systems.ssl_sas.corpus_embeddings import cache_from_option, embed_data_dirs, read_labelled_data_dirs

    if not 0.0 <= args.held_out < 1.0:
        raise VoxanonError(f"--held-out must lie in [0, 1), got {args.held_out}")
    data_dirs, sex = read_labelled_data_dirs(args.data)
    embeddings = embed_data_dirs(data_dirs, args.models, cache_from_option(args.cache),
                                 allow_failures=args.allow_failures, progress=not args.quiet)
    vectors, utt2spk = embeddings.vectors, embeddings.utt2spk
    held_out = held_out_speakers({spk: sex[spk] for spk in set(utt2spk.values())}, args.held_out, args.seed)
    training_ids = [u for u in vectors.ids if utt2spk[u] not in held_out]
    directory = asset_dir("flows", args.out)
    directory.mkdir(parents=True, exist_ok=True)
    training = vectors.select(training_ids)
    write_vectors(directory / TRAINING_VECTORS, training)
    write_mapping(directory / "utt2spk", {u: utt2spk[u] for u in training_ids})
    write_mapping(directory / "spk2gender", {spk: sex[spk] for spk in sorted({utt2spk[u] for u in training_ids})})
    run_train(argparse.Namespace(
        vectors=directory / TRAINING_VECTORS, utt2spk=directory / "utt2spk", spk2gender=directory / "spk2gender",
        out=directory, hidden=args.hidden, layers=args.layers, mu_strategy=args.mu_strategy, alpha=args.alpha,
        mu0=args.mu0, lr=args.lr, batch_size=args.batch_size, epochs=args.epochs, patience=args.patience,
        l2_normalise=True, no_zero_init=args.no_zero_init, seed=args.seed, quiet=args.quiet))
    summary = {"models": args.models, "random_models": embeddings.random_models, "encoder": embeddings.encoder_tag,
               "sources": [str(path.resolve()) for path in args.data], "failed_utterances": sorted(embeddings.failures),
               "held_out_speakers": sorted(held_out), "training_utterances": len(training_ids)}
    if held_out:
        rows = [i for i, u in enumerate(vectors.ids) if utt2spk[u] in held_out]
        is_female = np.array([sex[utt2spk[vectors.ids[i]]] == "f" for i in rows])
        llr = load_flow(directory).llr_numpy(vectors.matrix[rows])
        summary.update({"held_out_utterances": len(rows), "cllr": cllr(llr[is_female], llr[~is_female]),
                        "min_cllr": min_cllr(llr[is_female], llr[~is_female], tie_order="tar_non")})
        print(f"held-out speakers ({len(held_out)}, {len(rows)} utterances): LLR coordinate Cllr "
              f"{summary['cllr']:.3f} bits, min Cllr {summary['min_cllr']:.3f} bits (female = positive LLR)")
    else:
        print("no held-out evaluation (--held-out 0, or fewer than 2 speakers of a sex)")
    if embeddings.random_models:
        print(f"note: model set {args.models!r} has RANDOM WEIGHTS; this flow is for plumbing tests only")
    atomic_write_text(directory / HELD_OUT_FILE, json.dumps(summary, indent=2) + "\n")
    return 0
