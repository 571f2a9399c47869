"""``voxanon models``: list installed model sets and import published checkpoints into our format."""
from __future__ import annotations

import argparse
import logging

from voxanon.data_prep.errors import VoxanonError
from voxanon.pipeline.systems import available_systems, build_system, load_system_config

log = logging.getLogger(__name__)

IMPORTABLE = ("ssl-sas",)


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("models", help="list and import model checkpoints",
                                   description="Model sets live in $VOXANON_HOME/models (default "
                                               "~/.cache/voxanon/models) as safetensors + JSON + sha256 manifest.")
    actions = parser.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="installed model sets and what each system needs")
    listing.set_defaults(run=run_list)
    importing = actions.add_parser("import", help="convert a published release into a model set",
                                   description="Read the unpacked SSL-SAS release (pretrained_models_anon_xv) and "
                                               "write the ssl-sas model set. --random-init writes random weights "
                                               "instead (for tests and speed measurements only).")
    importing.add_argument("name", choices=IMPORTABLE, help="model set to import")
    importing.add_argument("source", nargs="?", help="the unpacked release folder")
    importing.add_argument("--hubert", help="hubert_base_ls960.pt, checked against the release's content model")
    importing.add_argument("--random-init", action="store_true",
                           help="random weights with the published shapes; marked random in the manifest")
    importing.add_argument("--size", choices=("full", "tiny"), default="full",
                           help="with --random-init: 'tiny' writes small models for plumbing tests")
    importing.add_argument("--seed", type=int, default=0, help="with --random-init: the torch seed")
    importing.set_defaults(run=run_import)


def run_list(args: argparse.Namespace) -> int:
    from voxanon.models.registry import installed, models_dir

    sets = installed()
    print(f"models directory: {models_dir()}")
    if not sets:
        print("    no model sets installed")
    for name, manifest in sets.items():
        flag = "  RANDOM WEIGHTS (plumbing only)" if manifest.get("random") else ""
        print(f"    {name}: {', '.join(manifest.get('components', []))}{flag}")
        print(f"        source: {manifest.get('source')}")
    print("systems:")
    for system in available_systems():
        needs = [n for n in build_system(load_system_config(system)).needs if n.startswith("checkpoint:")]
        if not needs:
            print(f"    {system}: no checkpoints needed")
            continue
        state = ", ".join(f"{n[len('checkpoint:'):]} ({'installed' if n[len('checkpoint:'):] in sets else 'MISSING'})"
                          for n in needs)
        print(f"    {system}: {state}")
    return 0


def run_import(args: argparse.Namespace) -> int:
    from voxanon.models.checkpoints import import_ssl_sas, random_ssl_sas
    from voxanon.models.registry import write_model_set

    if args.random_init == bool(args.source):
        raise VoxanonError("give either the release folder or --random-init")
    if args.random_init:
        components, config = random_ssl_sas(args.size, args.seed)
        source = f"random-init size={args.size} seed={args.seed}"
        log.warning("writing RANDOM weights for %r: outputs will be noise (plumbing and speed tests only)", args.name)
    else:
        components, config = import_ssl_sas(args.source, args.hubert)
        source = f"SSL-SAS release {args.source}" + (f" + {args.hubert}" if args.hubert else "")
    path = write_model_set(args.name, components, config, source=source, random=args.random_init)
    print(f"installed {args.name} in {path}")
    return 0
