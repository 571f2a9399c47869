"""Demo-corpus subsets and the small B1 pool settings they need."""
from __future__ import annotations

import dataclasses

from voxanon.data_prep.corpus import write_data_dir


SMALL_POOL = ["--set", "pseudo_speaker.world=3", "--set", "pseudo_speaker.region=2"]


def write_demo_subset(demo, folder, utterances):
    subset = demo.subset(utterances)
    write_data_dir(dataclasses.replace(subset, wav=subset.absolute_wav(), name=folder.name, path=None), folder)
    return folder
