"""``voxanon systems``: what each system does and what it needs."""
from __future__ import annotations

import argparse

from voxanon.pipeline.systems import available_systems, load_system_config


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("systems", help="list anonymisation systems and what each needs",
                                   description="List the systems (recipes/systems/*.yaml), their stages "
                                               "and what each needs before it can run.")
    parser.set_defaults(run=run)


def describe_needs(needs: list[str]) -> str:
    return "needs: nothing beyond the install" if not needs else "needs: " + ", ".join(needs)


def run(args: argparse.Namespace) -> int:
    for name in available_systems():
        config = load_system_config(name)
        print(f"{name}")
        print(f"    {' '.join(str(config.get('description', '')).split())}")
        print(f"    stages: {' -> '.join(config.get('stages', []))}")
        print(f"    {describe_needs(config.get('needs', []))}")
    return 0
