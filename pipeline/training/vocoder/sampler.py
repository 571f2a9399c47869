"""The vocoder training's data order: seeded epochs of utterances and segment starts."""
from __future__ import annotations

from ....data_prep.errors import VoxanonError


class SegmentSampler:
    """Seeded epochs of utterance indices and segment starts; its state makes a resumed run draw the same."""

    def __init__(self, n_items: int, batch_size: int, seed: int):
        import torch

        if n_items < batch_size:
            raise VoxanonError(f"only {n_items} usable utterance(s) for a batch size of {batch_size}; "
                               "add data or lower --batch-size")
        self.n_items, self.batch_size = n_items, batch_size
        self.generator = torch.Generator().manual_seed(seed)
        self.epoch, self.position = 0, 0
        self.order = torch.randperm(n_items, generator=self.generator)

    @property
    def steps_per_epoch(self) -> int:
        return self.n_items // self.batch_size

    @property
    def epoch_finished(self) -> bool:
        return self.position >= self.steps_per_epoch

    def start_next_epoch(self) -> None:
        import torch

        self.epoch += 1
        self.position = 0
        self.order = torch.randperm(self.n_items, generator=self.generator)

    def next_batch(self, n_choices: list[int]) -> list[tuple[int, int]]:
        """(item, start) pairs for the next batch; ``n_choices[item]`` is the number of possible starts."""
        import torch

        items = self.order[self.position * self.batch_size:(self.position + 1) * self.batch_size].tolist()
        self.position += 1
        return [(item, int(torch.randint(n_choices[item], (1,), generator=self.generator))) for item in items]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "order": self.order.clone(),
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self.order = state["order"].clone()
        self.generator.set_state(state["generator"])
