"""Bytes a device holds, measured the same way by every level's clean-memory check (torch)."""

from __future__ import annotations

import gc
from typing import Callable, TypeVar

import torch

T = TypeVar("T")


def sample_rounds(run: Callable[[], object], sample: Callable[[], T], rounds: int) -> list[T]:
    """One warm-up ``run``, then ``sample``; then ``rounds`` more runs, sampling after each.
    Every level's clean-memory check judges its samples from here (steady = all equal)."""
    run()
    samples = [sample()]
    for _ in range(rounds):
        run()
        samples.append(sample())
    return samples


def held_bytes(device: torch.device) -> int:
    """Bytes held on ``device``: the CUDA caching allocator's count, or on a CPU the
    storage bytes of every live (gc-tracked) tensor there."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return int(torch.cuda.memory_allocated(device))
    gc.collect()
    storages: dict[int, int] = {}
    for obj in gc.get_objects():
        # type(), not isinstance(): isinstance falls back to __class__, which some lazy
        # module attributes (torch.distributed.reduce_op) turn into a warning
        if issubclass(type(obj), torch.Tensor) and obj.device.type == device.type:
            try:
                st = obj.untyped_storage()
            except (RuntimeError, NotImplementedError):
                continue
            storages[st.data_ptr()] = st.nbytes()
    return sum(storages.values())
