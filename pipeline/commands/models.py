"""``voxanon models``: list installed model sets, download the published releases, import them into our format."""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

from ...data_prep.errors import VoxanonError
from ...models.checkpoints.catalogue import CATALOGUE, importable
from ...models.checkpoints.sa_toolkit_tags import SA_TOOLKIT_TAGS
from ..systems.recipes import available_systems, build_system, load_system_config

log = logging.getLogger(__name__)

def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("models", help="list and import model checkpoints",
                                   description="Model sets live in $VOXANON_HOME/models (default "
                                               "~/.cache/voxanon/models) as safetensors + JSON + sha256 manifest.")
    actions = parser.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="installed model sets and what each system needs")
    listing.set_defaults(run=run_list)
    importing = actions.add_parser("import", help="convert a published release into a model set",
                                   description="Read a published release and write its model set: "
                                               + "; ".join(f"{name}: {CATALOGUE[name].source}" for name in importable())
                                               + ". The zLLR-VC sex flow is imported separately "
                                                 "(voxanon zllr import). --random-init writes random weights "
                                                 "instead (for tests and speed measurements only).")
    importing.add_argument("name", choices=importable(), help="model set to import")
    importing.add_argument("source", nargs="?", help="the unpacked release folder (hubert-soft: the .pt file; "
                                                     "sa-toolkit: final.pt or its folder)")
    importing.add_argument("--hubert", help="ssl-sas, zllr-vc: hubert_base_ls960.pt, checked against the "
                                            "release's content model")
    importing.add_argument("--vocoder-dir", metavar="SUBDIR",
                           help="ssl-sas, zllr-vc: the HiFi-GAN/<model> folder inside the release (default: "
                                "ssl-sas HiFi-GAN/libri_tts_clean_100_fbank_xv_ssl_freeze; zllr-vc the only one)")
    importing.add_argument("--random-init", action="store_true",
                           help="random weights with the published shapes; marked random in the manifest")
    importing.add_argument("--name", dest="set_name", metavar="NAME",
                           help="sa-toolkit: the model set's name (default: the tag the file's folder is named after; "
                                "with --random-init, the tag); nac: default nac")
    importing.add_argument("--tag", choices=SA_TOOLKIT_TAGS, metavar="TAG",
                           help="sa-toolkit with --random-init: the tag whose shapes to use (one of "
                                f"{', '.join(SA_TOOLKIT_TAGS)})")
    importing.add_argument("--size", choices=("full", "tiny"), default="full",
                           help="with --random-init: 'tiny' writes small models for plumbing tests")
    importing.add_argument("--seed", type=int, default=0, help="with --random-init: the torch seed")
    importing.set_defaults(run=run_import)
    checking = actions.add_parser("check", help="inspect an unpacked release, one checkpoint file or an installed set",
                                  description="Report what a release folder (pretrained_models_anon_xv) or a "
                                              "checkpoint file holds: its components and their key counts, keys "
                                              "no component holds, the vocoder config, and whether voxanon models "
                                              "import would succeed (run as the import runs it, writing nothing; "
                                              "files are read safely, no code in them is run). Given the name of an "
                                              "installed model set: every file against its manifest checksum, and "
                                              "every component loaded as a run loads it (each key and shape). "
                                              "Exit 0 when all is well, 1 when something is wrong.")
    checking.add_argument("path", help="the unpacked release folder, or a g_*, soft_model.pt, embedding_model.ckpt, "
                                       "hubert_base_ls960.pt, hubert-soft checkpoint or SA-toolkit final.pt file, or "
                                       "the name of an installed model set")
    checking.set_defaults(run=run_check)
    fetching = actions.add_parser("fetch", help="download a published release (needs internet)",
                                  description="Download into $VOXANON_HOME/downloads/NAME, resuming partial "
                                              "downloads, checking sizes and checksums, unpacking archives "
                                              "safely. " + "; ".join(f"{e.name}: {e.description} [{e.licence}]"
                                                                     for e in CATALOGUE.values()))
    fetching.add_argument("name", choices=list(CATALOGUE), help="what to download")
    fetching.add_argument("--url", help="download this URL instead of the catalogue's (a mirror)")
    fetching.add_argument("--sha256", metavar="HEX", help="the expected sha256 of the file (pins an unverified one)")
    fetching.add_argument("--import", dest="install", action="store_true",
                          help="then import it as a model set (ssl-sas, zllr-vc, hubert-soft)")
    fetching.add_argument("--attempts", type=int, default=4, help="tries per file, each resuming the last (default 4)")
    fetching.set_defaults(run=run_fetch)
    warming = actions.add_parser("warm-up", help="compile the fast YAAPT's kernels ahead of a run",
                                 description="Compile numba's kernels of the fast YAAPT (its CPU version and those its "
                                             "GPU version calls) into the user's cache folder "
                                             "($XDG_CACHE_HOME/voxanon/numba, or NUMBA_CACHE_DIR where set): about "
                                             "45 s once per machine, then every run loads them in well under a "
                                             "second.")
    warming.set_defaults(run=run_warm_up)


def run_list(args: argparse.Namespace) -> int:
    from ...models.checkpoints.registry import installed, models_dir

    sets = installed()
    print(f"models directory: {models_dir()}")
    if not sets:
        print("    no model sets installed")
    print(f"downloadable with voxanon models fetch: {', '.join(CATALOGUE)}")
    for name, manifest in sets.items():
        flag = "  RANDOM WEIGHTS (plumbing only)" if manifest.get("random") else ""
        print(f"    {name}: {', '.join(manifest.get('components', []))}{flag}")
        print(f"        source: {manifest.get('source')}")
    print("systems:")
    for system in available_systems():
        needs = build_system(load_system_config(system)).needs
        checkpoints = [n.partition(":")[2] for n in needs if n.startswith("checkpoint:")]
        others = [n for n in needs if not n.startswith("checkpoint:")]
        state = ", ".join(f"{name} ({'installed' if name in sets else 'MISSING'})" for name in checkpoints)
        also = f"; also needs {', '.join(others)} (see voxanon systems)" if others else ""
        print(f"    {system}: {state or 'no checkpoints needed'}{also}")
    return 0


IMPORT_OPTIONS = {"hubert": "--hubert", "vocoder_dir": "--vocoder-dir", "name": "--name", "tag": "--tag"}


def install(release_name: str, source: str | Path | None, *, random_init: bool = False, size: str = "full",
            seed: int = 0, **options) -> tuple[str, Path]:
    """Import a release (or random weights of its layout, marked random) and write its model set; (name, folder).
    ``options``: the release's ``models import`` options that were given."""
    from ...models.checkpoints.catalogue import release
    from ...models.checkpoints.registry import write_model_set

    entry = release(release_name)
    given = {key: value for key, value in options.items() if value}
    wrong = sorted(set(given) - entry.import_options - ({"tag"} if random_init else set()))
    if wrong:
        raise VoxanonError(f"{', '.join(IMPORT_OPTIONS[key] for key in wrong)} do(es) not apply to {release_name}")
    if random_init:
        imported = entry.random_init(size, seed, **given)
        log.warning("writing RANDOM weights for %r: outputs will be noise (plumbing and speed tests only)",
                    imported.name)
    else:
        imported = entry.importer(source, **given)
    return imported.name, write_model_set(imported.name, imported.components, imported.config,
                                          source=imported.origin, random=random_init)


def run_import(args: argparse.Namespace) -> int:
    if args.random_init == bool(args.source):
        raise VoxanonError(f"give either {CATALOGUE[args.name].source} or --random-init")
    if args.tag and not args.random_init:
        raise VoxanonError("--tag goes with --random-init; an imported final.pt is named by --name or its folder")
    if args.tag and "tag" not in CATALOGUE[args.name].import_options:
        raise VoxanonError(f"--tag does not apply to {args.name}")
    name, path = install(args.name, args.source, random_init=args.random_init, size=args.size, seed=args.seed,
                         hubert=args.hubert, vocoder_dir=args.vocoder_dir, name=args.set_name, tag=args.tag)
    print(f"installed {name} in {path}")
    return 0


def run_check(args: argparse.Namespace) -> int:
    from ...models.checkpoints.release_check import check

    report = check(args.path)
    print("\n".join(report.lines()))
    return 0 if report.ok else 1


def run_fetch(args: argparse.Namespace) -> int:
    from ...models.checkpoints.catalogue import release
    from ...models.checkpoints.fetch import downloads_dir, fetch, find_release_root

    entry = release(args.name)
    if args.install and not entry.model_sets:
        raise VoxanonError(f"{args.name} is not a model set, so there is nothing to --import; fetch it without "
                           "--import and use the downloaded files directly")
    if args.attempts < 1:
        raise VoxanonError(f"--attempts must be at least 1, got {args.attempts}")
    fetched = fetch(args.name, url=args.url, sha256=args.sha256, attempts=args.attempts)
    for path in fetched.files:
        digest = path.with_name(path.name + ".sha256").read_text(encoding="utf-8").split()[0]
        print(f"downloaded {path}\n    sha256 {digest}")
    for folder in fetched.folders:
        print(f"unpacked {folder}")
    if not args.install:
        if entry.name == "ssl-sas-pool":
            print("import the pool with: voxanon pool import FOLDER --spk2gender FILE --out NAME (the speakers' "
                  "sexes are in the SSL-SAS repository's LibriTTS train-other-500 spk2gender)")
        return 0
    if entry.name == "nac":
        source = downloads_dir() / entry.name
    elif entry.name == "hubert-soft":
        models = [p for p in fetched.files if p.suffix == ".pt"]
        if len(models) != 1:
            raise VoxanonError(f"expected one .pt file among {', '.join(map(str, fetched.files))}")
        source = models[0]
    else:
        source = find_release_root(fetched.folders)
    hubert = downloads_dir() / "hubert-base" / "hubert_base_ls960.pt"
    use_hubert = "hubert" in entry.import_options and hubert.is_file()
    name, path = install(entry.name, source, hubert=hubert if use_hubert else None)
    print(f"installed {name} in {path}")
    if entry.name == "zllr-vc":
        install_release_flow(fetched.folders)
    return 0


RELEASE_FLOW_NAME = "sex"
"""The flow the zllr recipes need (``flow:sex``)."""


def install_release_flow(folders: tuple[Path, ...]) -> None:
    """Import the zLLR-VC release's pickled sex flow as the ``sex`` flow, unless one is installed already."""
    from ...models.nets.flow import save_flow
    from ...models.checkpoints.zllr_flow import import_reference_flow
    from ...models.checkpoints.registry import asset_dir

    pickles = sorted({p for folder in folders for p in folder.rglob("xv_disentanglement_model/*.pt")})
    if len(pickles) != 1:
        print(f"no single xv_disentanglement_model/*.pt in the release ({len(pickles)} found): import the sex "
              "flow with voxanon zllr import --pickle FILE --out FLOW")
        return
    target = asset_dir("flows", RELEASE_FLOW_NAME)
    if target.exists():
        print(f"{target} exists and is kept; to use the release's flow instead: voxanon zllr import --pickle "
              f"{pickles[0]} --out DIR")
        return
    save_flow(import_reference_flow(pickles[0]), target)
    print(f"installed the release's sex flow ({pickles[0]}) as flow {RELEASE_FLOW_NAME!r} in {target}")


def run_warm_up(args: argparse.Namespace) -> int:
    import time

    from ...models.f0.numba_cache import numba_cache_dir

    began = time.perf_counter()
    print(f"compiling the fast YAAPT's kernels into {numba_cache_dir()} (about 45 s the first time; then loaded)",
          flush=True)
    from ...models.f0.yaapt import warm_up

    warm_up()
    print(f"fast YAAPT kernels ready in {numba_cache_dir()} ({time.perf_counter() - began:.1f} s)")
    return 0
