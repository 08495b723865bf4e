"""A tiny seeded random-weight decoder over the reference paged K16/V8 cache.

Small enough to run anywhere, real enough to exercise everything the smoke
checks look at: a block allocator, per-layer ``(k_cache, v_cache)`` tensors in
NHD layout (K bfloat16, V float8_e4m3fn), per-layer V scales, mixed
prefill/decode batches and static-shape decode steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from .. import torch_reference as ref

PAD_BLOCK = 0   # block 0 is never handed out: padded rows of a graph batch write there


@dataclass(frozen=True)
class TinyConfig:
    vocab: int = 97
    hidden: int = 64
    layers: int = 2
    q_heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    mlp: int = 128
    max_positions: int = 256
    block_size: int = 4
    num_blocks: int = 96
    k_dtype: torch.dtype = torch.bfloat16


class OutOfBlocks(RuntimeError):
    pass


class BlockAllocator:
    """Free list of cache blocks (``PAD_BLOCK`` reserved)."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks - 1, PAD_BLOCK, -1))

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def capacity(self) -> int:
        return self.num_blocks - 1

    def allocate(self) -> int:
        if not self._free:
            raise OutOfBlocks(f"all {self.capacity} cache blocks are in use")
        return self._free.pop()

    def free(self, blocks: Sequence[int]) -> None:
        for b in blocks:
            if b == PAD_BLOCK or not 0 < b < self.num_blocks or b in self._free:
                raise ValueError(f"block {b} freed twice or never allocated")
            self._free.append(b)


class PagedKVCache:
    """Per-layer ``(k_cache, v_cache)`` plus a float32 V scale per layer (default 1.0)."""

    def __init__(self, cfg: TinyConfig, device: torch.device) -> None:
        shape = (cfg.num_blocks, cfg.block_size, cfg.kv_heads, cfg.head_dim)
        self.block_size = cfg.block_size
        self.k = [torch.zeros(shape, dtype=cfg.k_dtype, device=device) for _ in range(cfg.layers)]
        self.v = [self._alloc_v(shape, device) for _ in range(cfg.layers)]
        self.v_scales = torch.ones(cfg.layers, dtype=torch.float32, device=device)

    def _alloc_v(self, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
        return torch.zeros(shape, dtype=ref.FP8, device=device)

    def load_scales(self, v_scales: Sequence[float]) -> None:
        if len(v_scales) != len(self.k):
            raise ValueError(f"{len(v_scales)} V scales for a cache of {len(self.k)} layers")
        self.v_scales.copy_(torch.tensor(list(v_scales), dtype=torch.float32))

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> None:
        ref.write_kv(self.k[layer], self.v[layer], k, v, slots, self.v_scales[layer])

    def tensors(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return list(zip(self.k, self.v))

    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.k + self.v) + self.v_scales.nbytes


class TinyDecoder:
    """Random weights from ``seed``; pre-norm attention + MLP blocks with learned positions."""

    def __init__(self, cfg: TinyConfig, seed: int, device: torch.device) -> None:
        g = torch.Generator().manual_seed(seed)

        def w(*shape: int, gain: float = 1.0) -> torch.Tensor:
            return (torch.randn(*shape, generator=g) * gain / math.sqrt(shape[0])).to(device)

        h, hq, hkv, d = cfg.hidden, cfg.q_heads, cfg.kv_heads, cfg.head_dim
        self.cfg = cfg
        self.embed = (torch.randn(cfg.vocab, h, generator=g)).to(device)
        self.pos = (torch.randn(cfg.max_positions, h, generator=g) * 0.5).to(device)
        # V projections grow with depth so each layer has its own value range (and scale).
        self.layers = [dict(wq=w(h, hq * d), wk=w(h, hkv * d), wv=w(h, hkv * d, gain=2.0 + 3.0 * i),
                            wo=w(hq * d, h), w1=w(h, cfg.mlp), w2=w(cfg.mlp, h))
                       for i in range(cfg.layers)]
        self.unembed = w(h, cfg.vocab, gain=4.0)

    @staticmethod
    def _norm(x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    def forward(self, cache: PagedKVCache, tokens: torch.Tensor, positions: torch.Tensor,
                slots: torch.Tensor, block_tables: torch.Tensor, kv_lens: torch.Tensor,
                q_req: torch.Tensor) -> torch.Tensor:
        """Hidden states ``[T, hidden]`` for new tokens; K/V written into ``cache`` first."""
        cfg = self.cfg
        t = tokens.shape[0]
        x = self.embed[tokens] + self.pos[positions]
        for i, lw in enumerate(self.layers):
            a = self._norm(x)
            q = (a @ lw["wq"]).view(t, cfg.q_heads, cfg.head_dim)
            k = (a @ lw["wk"]).view(t, cfg.kv_heads, cfg.head_dim)
            v = (a @ lw["wv"]).view(t, cfg.kv_heads, cfg.head_dim)
            cache.write(i, k, v, slots)
            o = ref.paged_attention(q, cache.k[i], cache.v[i], cache.v_scales[i], block_tables,
                                    kv_lens, q_req, positions)
            x = x + o.reshape(t, -1) @ lw["wo"]
            x = x + torch.relu(self._norm(x) @ lw["w1"]) @ lw["w2"]
        return self._norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden @ self.unembed

    def value_amax(self, tokens: torch.Tensor) -> list[float]:
        """Per-layer max |V| over a prompt run densely (for amax/448 calibration)."""
        cfg = self.cfg
        n = tokens.shape[0]
        x = self.embed[tokens] + self.pos[torch.arange(n, device=tokens.device)]
        amax = []
        for lw in self.layers:
            a = self._norm(x)
            q = (a @ lw["wq"]).view(n, cfg.q_heads, cfg.head_dim)
            k = (a @ lw["wk"]).view(n, cfg.kv_heads, cfg.head_dim)
            v = (a @ lw["wv"]).view(n, cfg.kv_heads, cfg.head_dim)
            amax.append(float(v.abs().max()))
            o = ref.dense_attention(q, k.to(cfg.k_dtype), v).float()
            x = x + o.reshape(n, -1) @ lw["wo"]
            x = x + torch.relu(self._norm(x) @ lw["w1"]) @ lw["w2"]
        return amax


def calibrate_v_scales(model: TinyDecoder, prompt: Sequence[int]) -> list[float]:
    """``amax / 448`` per layer over ``prompt`` (the statistic the scales file records)."""
    device = model.embed.device
    amax = model.value_amax(torch.tensor(list(prompt), dtype=torch.long, device=device))
    return [max(a, 1e-6) / ref.FP8_MAX for a in amax]
