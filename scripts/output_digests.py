"""Runs every shipped system on demo-corpus utterances and prints a sha256 for every output file.

Used to show that a change kept behaviour: run it before and after, then compare the two files::

    python scripts/output_digests.py --out before.tsv          # on the old commit
    python scripts/output_digests.py --compare before.tsv      # on the new one: exit 1 on any difference

Model sets are written by ``voxanon models import ... --random-init --size tiny`` (seeded), the B1
pool by ``voxanon pool build`` and the zLLR sex flow by ``voxanon train sex-flow``, exactly as a user
would, into a temporary VOXANON_HOME; each system then anonymises 8 utterances (one per speaker) with
one worker. ``run.json`` and ``.journal.jsonl`` are left out: they record times, input identities and a
configuration hash that names the (temporary) model folders.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import sys
import tempfile
from pathlib import Path

SKIPPED = {"run.json", ".journal.jsonl"}


def _digests(folder: Path) -> dict[str, str]:
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file() and path.name not in SKIPPED}


def _write_subset(demo, folder: Path, utterances: list[str]) -> Path:
    from voxanon.data_prep.corpus import write_data_dir

    subset = demo.subset(utterances)
    write_data_dir(dataclasses.replace(subset, wav=subset.absolute_wav(), name=folder.name, path=None), folder)
    return folder


def collect(work: Path, systems: set[str] | None = None) -> dict[str, str]:
    """Every output file's digest, by system (``systems``: only these; default every shipped system)."""
    os.environ["VOXANON_HOME"] = str(work / "home")
    os.environ["OMP_NUM_THREADS"] = "1"
    from voxanon.data_prep.corpus import read_data_dir
    from voxanon.data_prep.demo_corpus import demo_corpus_dir
    from voxanon.pipeline.cli import main
    from voxanon.pipeline.systems.recipes import available_systems, load_system_config

    demo = read_data_dir(demo_corpus_dir())
    speakers = ["de1", "de3", "slt", "us1", "awb", "joe", "kal", "ked"]
    training = _write_subset(demo, work / "demo24", [u for s in speakers for u in sorted(demo.spk2utt[s])[1:4]])
    data = _write_subset(demo, work / "demo8", [sorted(demo.spk2utt[s])[0] for s in speakers])

    def run(arguments: list[str]) -> None:
        if main(arguments) != 0:
            sys.exit(f"output_digests: 'voxanon {' '.join(arguments)}' failed")

    for name in ("ssl-sas", "zllr-vc", "nac", "sttts"):
        run(["models", "import", name, "--random-init", "--size", "tiny"])
    for tag in ("hifigan_bn_tdnnf_wav2vec2_vq_48_v1", "hifigan_bn_tdnnf_600h_vq_48_v1"):
        run(["models", "import", "sa-toolkit", "--random-init", "--tag", tag, "--size", "tiny"])
    run(["pool", "build", "--data", str(training), "--out", "libritts-other-500", "--models", "ssl-sas", "--quiet"])
    run(["train", "sex-flow", "--data", str(training), "--out", "sex", "--models", "zllr-vc", "--epochs", "2",
         "--held-out", "0", "--quiet"])

    digests = {}
    for system in available_systems():
        if systems is not None and system not in systems:
            continue
        stages = load_system_config(system)["stages"]
        overrides = ["--set", "pseudo_speaker.world=3", "--set", "pseudo_speaker.region=2"] \
            if "pseudo_speaker" in stages else []
        out = work / "out" / system
        run(["anonymise", "--system", system, "--data", str(data), "--out", str(out), "--workers", "1", "--quiet",
             *overrides])
        for name, digest in _digests(out).items():
            digests[f"{system}/{name}"] = digest
    return digests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--out", type=Path, help="write the digests to this file")
    group.add_argument("--compare", type=Path, help="compare with digests written earlier; exit 1 on a difference")
    parser.add_argument("--systems", help="only these systems, comma-separated (default: every shipped one, or with "
                                          "--compare every one the earlier file has)")
    args = parser.parse_args()
    chosen = set(args.systems.split(",")) if args.systems else None
    earlier = dict(line.split("\t") for line in args.compare.read_text().splitlines()) if args.compare else None
    with tempfile.TemporaryDirectory(prefix="voxanon-digests-") as work:
        # Compared with an earlier run: the systems it had (a system added since has nothing to compare with).
        digests = collect(Path(work), chosen or ({name.split("/")[0] for name in earlier} if earlier else None))
    if earlier and chosen:
        earlier = {name: digest for name, digest in earlier.items() if name.split("/")[0] in chosen}
    if args.out:
        args.out.write_text("".join(f"{name}\t{digest}\n" for name, digest in digests.items()))
        print(f"{len(digests)} output files digested into {args.out}")
        return 0
    differing = sorted(name for name in set(earlier) | set(digests) if earlier.get(name) != digests.get(name))
    for name in differing:
        print(f"differs: {name} ({'missing now' if name not in digests else 'new' if name not in earlier else 'bytes'})")
    print(f"{len(digests)} output files, {len(differing)} differ from {args.compare}")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
