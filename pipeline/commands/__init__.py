"""CLI sub-commands, one module each.

Every module here but ``options`` (the options several commands share) defines
``add_parser(subparsers)``, which registers its parser and sets ``run=<function(args) -> int>``
as a default; ``voxanon.pipeline.cli`` finds them by listing this package, so adding a command
touches no other file. A command parses and prints: what it runs lives below ``commands/``, and
no command imports another.

Every command module is imported to build the parser, for ``voxanon --help`` as for any
command, so a command module imports heavy modules lazily: NumPy (with kaldiio, soundfile and
tqdm), torch, torchaudio, speechbrain, transformers, scikit-learn, SciPy, librosa, matplotlib, Ray,
pandas, faster-whisper (and what imports them: models, metrics, the runner, the evaluation) go inside the functions that need
them, never at the top of a command module or of a module it imports at start-up. Constants a
parser needs (choices, defaults) live in modules that import none of these.
``tests/test_cli_startup.py`` checks every command's ``--help`` and holds ``voxanon --help`` under
0.5 s of CPU time; ``benchmarks/cli.py`` times the start-up.
"""
