"""voxanon from Python: anonymise speech with a recipe or your own stages, and evaluate it.

>>> import voxanon
>>> system = voxanon.load_system("b2")                   # a recipe, by name or file, or your own stages
>>> audio, rate = system(samples, 16000, utt_id="u1", speaker="s1")
>>> run = voxanon.anonymise("data/dev", system, out="anon/dev", workers=4)
>>> voxanon.evaluate("data/dev", run.out_dir, out="evaluation").figures
>>> voxanon.metrics.eer(target_scores, nontarget_scores)

``import voxanon`` loads nothing heavy (no NumPy, no torch): each name below is imported when it is first used, so
a script that only lists systems or reads metadata starts as fast as the command line. docs/api.md is the guide.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import metrics
    from .corpus import Corpus
    from .data_prep.errors import VoxanonError
    from .pipeline.api import (AnonymiseResult, EvaluateResult, Failure, System, UtteranceFailed, anonymise, evaluate,
                               load_system)
    from .pipeline.systems.stage import Stage, Utterance

__version__ = "0.1.0"

# Public name -> (module, attribute); the attribute None: the module itself.
_LAZY = {
    **{name: (".pipeline.api", name) for name in ("AnonymiseResult", "EvaluateResult", "Failure", "System",
                                                  "UtteranceFailed", "anonymise", "evaluate", "load_system")},
    "Corpus": (".corpus", "Corpus"),
    "Stage": (".pipeline.systems.stage", "Stage"),
    "Utterance": (".pipeline.systems.stage", "Utterance"),
    "VoxanonError": (".data_prep.errors", "VoxanonError"),
    "metrics": (".metrics", None),
}

__all__ = ["AnonymiseResult", "Corpus", "EvaluateResult", "Failure", "Stage", "System", "Utterance", "UtteranceFailed",
           "VoxanonError", "anonymise", "evaluate", "load_system", "metrics"]


def __getattr__(name: str) -> Any:
    try:
        module_name, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    module = importlib.import_module(module_name, __name__)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value  # the next look-up is an ordinary one
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
