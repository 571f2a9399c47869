"""``voxanon systems``: what each system does, what it needs, and whether that is installed."""
from __future__ import annotations

import argparse

from ..systems.plugins import ENTRY_POINT_GROUP, entry_point_stages
from ..systems.recipes import available_systems, build_system, load_system_config, missing_needs


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("systems", help="list anonymisation systems and what each needs",
                                   description="List the systems (recipes/systems/*.yaml), their stages, "
                                               "what each needs before it can run and how to install what "
                                               "is missing; then the plugin stages that installed packages "
                                               f"offer (entry points of {ENTRY_POINT_GROUP}), each with where it "
                                               "comes from.")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    for name in available_systems():
        system = build_system(load_system_config(name))
        print(f"{name}")
        print(f"    {' '.join(str(system.config.get('description', '')).split())}")
        print(f"    stages: {' -> '.join(system.config.get('stages', []))}")
        needs = system.needs
        print("    needs: " + (", ".join(needs) if needs else "nothing beyond the install"))
        for message in missing_needs(system):
            print(f"    MISSING: {message}")
    plugins = entry_point_stages()
    print(f"plugin stages ({ENTRY_POINT_GROUP} entry points; a recipe may also name any stage class as "
          f"module:Class): {'none installed' if not plugins else ''}".rstrip())
    for name, entry_point in sorted(plugins.items()):
        source = f" (from {entry_point.dist.name} {entry_point.dist.version})" if entry_point.dist else ""
        print(f"    {name}: {entry_point.value}{source}")
    return 0
