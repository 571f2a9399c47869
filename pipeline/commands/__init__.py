"""CLI sub-commands, one module each.

Every module here defines ``add_parser(subparsers)``, which registers its parser and
sets ``run=<function(args) -> int>`` as a default; ``voxanon.pipeline.cli`` finds
them by listing this package, so adding a command touches no other file.
"""
