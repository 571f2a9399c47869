"""What the training loops share: the precision a run trains in (its device is
:func:`voxanon.pipeline.model_service.torch_device`), and the RNG state a
checkpoint keeps so that a resumed run continues bit for bit (on the CPU)."""
from __future__ import annotations

from ...data_prep.errors import VoxanonError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")


def resolve_precision(name: str, device) -> str:
    """``auto``: bf16 on a GPU that has it, else fp16 on a GPU (with gradient scaling), fp32 on the CPU."""
    import torch

    if name not in PRECISIONS:
        raise VoxanonError(f"--precision must be one of {', '.join(PRECISIONS)}, got {name!r}")
    if name == "auto":
        if device.type != "cuda":
            return "fp32"
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if name == "fp16" and device.type != "cuda":
        raise VoxanonError("--precision fp16 needs a CUDA device (use fp32 or bf16 on the CPU)")
    return name


def autocast_dtype(precision: str):
    """The autocast dtype of a resolved precision; None for fp32 (no autocast)."""
    import torch

    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def rng_state() -> dict:
    """torch's CPU (and, where present, every CUDA device's) random state, for a checkpoint."""
    import torch

    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict) -> None:
    """The random state :func:`rng_state` saved (the CUDA part only where a CUDA device is present)."""
    import torch

    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
