"""Where numba keeps the fast YAAPT's compiled kernels: the user's cache folder.

numba's ``cache=True`` writes beside the sources (``__pycache__``) by default: in a site-wide or read-only
install it cannot, and every fresh environment compiled again (about 45 s). Here the kernels go to
``$XDG_CACHE_HOME/voxanon/numba`` (``~/.cache/voxanon/numba``), compiled once per machine and user and reused
by every run and checkout (numba keys each entry by its source file, its modification time and the CPU), and
``voxanon models warm-up`` fills it ahead of a run. A ``NUMBA_CACHE_DIR`` the user set is left as it is.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path


def numba_cache_dir() -> Path:
    """The folder numba's cache uses: ``NUMBA_CACHE_DIR`` where set, else the user's cache folder's."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return Path(os.environ["NUMBA_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "voxanon" / "numba"


def use_user_cache_folder() -> None:
    """Point numba's cache at :func:`numba_cache_dir`; before numba compiles (it reads the setting when a
    cached function is first declared, and again whenever a ``NUMBA_`` variable changed)."""
    os.environ["NUMBA_CACHE_DIR"] = str(numba_cache_dir())
    if "numba" in sys.modules:  # imported before us (by another library): it read its settings then
        sys.modules["numba"].core.config.reload_config()
