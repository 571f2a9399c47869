"""``voxanon pool``: the speaker-vector pools B1 draws its pseudo-speakers from.

* ``pool build``: ECAPA vectors of every utterance of labelled data directories (a model
  set's speaker encoder, cached per audio content, so an interrupted build resumes), their
  speaker means, sexes and balanced global vector;
* ``pool import``: the SSL-SAS pool release (``libritts_train_other_500_xvector.tar.gz``
  unpacked: Kaldi ``xvector.scp/.ark``), speaker-level or utterance-level vectors;
* ``pool info``: what a pool holds.

Pools live at ``$VOXANON_HOME/pools/<name>`` (or a path); the folder format is described in
:mod:`voxanon.models.speakers.pseudo_speaker`.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ...data_prep.corpus import read_mapping
from ...data_prep.errors import VoxanonError
from ...models.checkpoints.registry import asset_dir
from .options import add_backend_arguments, add_embedding_arguments, backend_from_args

UTTERANCE_LEVEL_NAMES = ("xvector.scp", "xvector.ark")
SPEAKER_LEVEL_NAMES = ("spk_xvector.scp", "spk_xvector.ark")


def add_parser(subparsers) -> None:

    parser = subparsers.add_parser(
        "pool", help="build, import or inspect a speaker-vector pool (B1 pseudo-speakers)",
        description="Speaker-vector pools for B1's pseudo-speaker selection: speaker-level means of ECAPA "
                    "vectors with each speaker's sex and a balanced global vector.")
    actions = parser.add_subparsers(dest="pool_command", metavar="ACTION", required=True)

    build = actions.add_parser(
        "build", help="embed labelled data directories into a pool",
        description="ECAPA vectors (the model set's speaker encoder; 16 kHz, 80 Fbanks, sentence mean "
                    "normalisation, raw output) of every utterance of the data directories; pool vectors are "
                    "the speakers' arithmetic means; the global vector is the speaker-then-sex balanced "
                    "average of the L2-normalised utterance vectors, L2-normalised. Every speaker needs a sex "
                    "in spk2gender. Vectors are cached per audio content, so a rerun resumes.")
    add_embedding_arguments(build, "pool name (under $VOXANON_HOME/pools) or folder path",
                            "build without utterances whose audio cannot be used (listed) instead of failing")
    build.add_argument("--speaker-level-only", action="store_true",
                       help="do not keep the utterance vectors (smaller pool; no PLDA affinity)")
    build.add_argument("--quiet", action="store_true", help="no progress bar")
    add_backend_arguments(build, "Ray actors embedding utterances (default: as many as the cluster's CPUs/GPUs "
                                 "hold); the local backend embeds in this process")
    build.set_defaults(run=run_build)

    imported = actions.add_parser(
        "import", help="import Kaldi x-vector files (the SSL-SAS pool release) as a pool",
        description="Import speaker-level vectors (keys are speakers) or utterance-level vectors (with --utt2spk "
                    "or --speaker-from-id) from a Kaldi .scp/.ark or .npy file, or from a folder holding "
                    f"{', '.join(UTTERANCE_LEVEL_NAMES + SPEAKER_LEVEL_NAMES)} (searched recursively). Utterance "
                    "vectors are averaged per speaker and kept for PLDA.")
    imported.add_argument("source", type=Path, metavar="DIR_OR_FILE")
    imported.add_argument("--spk2gender", required=True, type=Path, metavar="FILE",
                          help="sex (f/m) of every pool speaker")
    level = imported.add_mutually_exclusive_group()
    level.add_argument("--utt2spk", type=Path, metavar="FILE", help="the vectors are utterance-level: their speakers")
    level.add_argument("--speaker-from-id", metavar="SEP",
                       help="the vectors are utterance-level and the speaker is the id's part before the first "
                            "SEP (LibriTTS ids such as 1006_135212_000001_000000: SEP is _)")
    imported.add_argument("--out", required=True, metavar="NAME_OR_PATH")
    imported.add_argument("--models", default="ssl-sas",
                          help="the model set whose speaker encoder made the vectors (recorded; default ssl-sas)")
    imported.set_defaults(run=run_import)

    info = actions.add_parser("info", help="show what a pool holds")
    info.add_argument("pool", metavar="NAME_OR_PATH")
    info.add_argument("--json", action="store_true", help="print pool.json")
    info.set_defaults(run=run_info)


def run_build(args: argparse.Namespace) -> int:
    from ...models.speakers.pseudo_speaker import pool_from_utterances, save_pool
    from ..systems.ssl_sas.corpus_embeddings import cache_from_option, embed_data_dirs, read_labelled_data_dirs

    backend = backend_from_args(args)
    data_dirs, sex = read_labelled_data_dirs(args.data)
    cache = cache_from_option(args.cache)
    embeddings = embed_data_dirs(data_dirs, args.models, cache, allow_failures=args.allow_failures,
                                 backend=backend, batch_size=args.batch_size, progress=not args.quiet)
    pool = pool_from_utterances(embeddings.vectors, embeddings.utt2spk, sex,
                                keep_utterances=not args.speaker_level_only)
    directory = asset_dir("pools", args.out)
    metadata = {
        "name": Path(args.out).name, "kind": "built",
        "sources": [str(path.resolve()) for path in args.data], "models": args.models,
        "random_models": embeddings.random_models, "encoder": embeddings.encoder_tag,
        "global": "balanced average (utterance -> speaker -> sex) of L2-normalised utterance vectors, L2-normalised",
        "failed_utterances": sorted(embeddings.failures),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    save_pool(directory, pool, metadata)
    _print_summary(directory)
    return 0


def _find_source(path: Path, utterance_level: bool) -> Path:
    if path.is_file():
        return path
    if not path.is_dir():
        raise VoxanonError(f"{path}: no such file or folder")
    names = UTTERANCE_LEVEL_NAMES if utterance_level else SPEAKER_LEVEL_NAMES
    for name in names:
        found = sorted(path.rglob(name))
        if len(found) > 1:
            raise VoxanonError(f"{path}: several {name} files ({', '.join(map(str, found[:4]))}); "
                               "give the file itself")
        if found:
            return found[0]
    other = UTTERANCE_LEVEL_NAMES if not utterance_level else SPEAKER_LEVEL_NAMES
    hint = (" (utterance-level files are there: give --utt2spk or --speaker-from-id)"
            if any(next(path.rglob(name), None) for name in other) else "")
    raise VoxanonError(f"{path}: none of {', '.join(names)} found{hint}")


def run_import(args: argparse.Namespace) -> int:
    from ...data_prep.vectors import read_vectors
    from ...models.speakers.pseudo_speaker import pool_from_speakers, pool_from_utterances, save_pool

    utterance_level = args.utt2spk is not None or args.speaker_from_id is not None
    source = _find_source(args.source, utterance_level)
    vectors = read_vectors(source)
    sex = {spk: label.lower() for spk, label in read_mapping(args.spk2gender, key_kind="speaker").items()}
    if utterance_level:
        if args.utt2spk is not None:
            utt2spk = read_mapping(args.utt2spk, key_kind="utterance", value_kind="speaker")
            missing = [key for key in vectors.ids if key not in utt2spk]
            if missing:
                raise VoxanonError(f"{args.utt2spk}: no speaker for {len(missing)} vector(s) of {source}, e.g. "
                                   f"{', '.join(missing[:5])}")
        else:
            utt2spk = {key: key.split(args.speaker_from_id, 1)[0] for key in vectors.ids}
        pool = pool_from_utterances(vectors, utt2spk, sex)
    else:
        unknown = [key for key in vectors.ids if key not in sex]
        if unknown:
            raise VoxanonError(f"{source}: {len(unknown)} key(s) are not speakers of {args.spk2gender}, e.g. "
                               f"{', '.join(unknown[:5])}; for utterance-level vectors give --utt2spk or "
                               "--speaker-from-id")
        pool = pool_from_speakers(vectors, sex)
    directory = asset_dir("pools", args.out)
    metadata = {
        "name": Path(args.out).name, "kind": "imported", "sources": [str(source.resolve())],
        "spk2gender": str(args.spk2gender.resolve()), "models": args.models, "random_models": False,
        "global": ("balanced average (utterance -> speaker -> sex) of L2-normalised utterance vectors, L2-normalised"
                   if utterance_level else
                   "balanced average (speaker -> sex) of L2-normalised speaker vectors, L2-normalised "
                   "(the source has no utterance vectors)"),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    save_pool(directory, pool, metadata)
    _print_summary(directory)
    return 0


def _print_summary(directory: Path) -> None:
    from ...models.speakers.pseudo_speaker import DEFAULT_WORLD, POOL_MANIFEST, SEXES

    manifest = json.loads((directory / POOL_MANIFEST).read_text(encoding="utf-8"))
    counts = manifest["speakers_per_sex"]
    utterances = manifest.get("utterances")
    print(f"pool {directory}: {manifest['speakers']} speakers ({', '.join(f'{counts[s]} {s}' for s in SEXES)}), "
          f"{'no utterance vectors (cosine affinity only)' if utterances is None else f'{utterances} utterance vectors'}, "
          f"dimension {manifest['dim']}, encoder of model set {manifest.get('models')!r}"
          + (" (RANDOM WEIGHTS: plumbing only)" if manifest.get("random_models") else ""))
    short = [s for s in SEXES if counts[s] < DEFAULT_WORLD]
    if short:
        print(f"note: fewer than {DEFAULT_WORLD} speakers of sex {', '.join(short)}: B1 selection needs "
              "--set pseudo_speaker.world=N pseudo_speaker.region=M with N no larger than the count")


def run_info(args: argparse.Namespace) -> int:
    import numpy as np

    from ...models.speakers.pseudo_speaker import load_pool

    directory = asset_dir("pools", args.pool)
    pool = load_pool(directory, with_utterances=False)
    if args.json:
        print(json.dumps(pool.metadata, indent=2))
        return 0
    _print_summary(directory)
    meta = pool.metadata
    print(f"kind: {meta.get('kind')}; sources: {', '.join(meta.get('sources', []))}")
    print(f"global vector: {meta.get('global')}; norm {np.linalg.norm(pool.global_vector):.4f}")
    if meta.get("failed_utterances"):
        print(f"{len(meta['failed_utterances'])} utterance(s) could not be embedded when it was built")
    return 0
