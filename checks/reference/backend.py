"""The reference backend: the tiny decoder, its paged cache, a scheduler step, decode graphs.

This is the "engine" the reference-level checks drive.  Planted-fault tests
subclass it (or :class:`DecodeGraph`, via ``graph_class``) to break one thing
at a time; nothing here has a switch that breaks it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from .tiny_decoder import PAD_BLOCK, BlockAllocator, PagedKVCache, TinyConfig, TinyDecoder


@dataclass
class Request:
    rid: int
    tokens: list[int]
    prompt_len: int
    cached: int = 0
    blocks: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.prompt_len:]


@dataclass(frozen=True)
class Batch:
    """One forward call: every request's uncached tokens, flattened."""

    tokens: torch.Tensor
    positions: torch.Tensor
    slots: torch.Tensor
    block_tables: torch.Tensor
    kv_lens: torch.Tensor
    q_req: torch.Tensor
    last_rows: torch.Tensor
    prefill_tokens: int
    decode_requests: int

    @property
    def is_decode_only(self) -> bool:
        return self.prefill_tokens == 0

    @property
    def is_mixed(self) -> bool:
        return self.prefill_tokens > 0 and self.decode_requests > 0


class DecodeGraph:
    """A decode step over static buffers for ``batch_size`` rows; on CUDA a captured graph.

    ``load`` copies a batch into the buffers (padding unused rows), ``replay``
    runs the step on whatever the buffers hold.  Off CUDA, ``replay`` re-runs the
    same function on the same buffers, so the replay logic is still exercised.
    """

    def __init__(self, backend: "ReferenceBackend", batch_size: int) -> None:
        dev = backend.device
        self.backend = backend
        self.batch_size = batch_size
        self.pad_slot = PAD_BLOCK * backend.cfg.block_size
        self.tokens = torch.zeros(batch_size, dtype=torch.long, device=dev)
        self.positions = torch.zeros(batch_size, dtype=torch.long, device=dev)
        self.slots = torch.full((batch_size,), self.pad_slot, dtype=torch.long, device=dev)
        self.block_tables = torch.full((batch_size, backend.max_blocks), PAD_BLOCK,
                                       dtype=torch.long, device=dev)
        self.kv_lens = torch.ones(batch_size, dtype=torch.long, device=dev)
        self.q_req = torch.arange(batch_size, dtype=torch.long, device=dev)
        self.hidden: torch.Tensor | None = None
        self.graph: "torch.cuda.CUDAGraph | None" = None
        self.replays = 0

    def _run(self) -> torch.Tensor:
        return self.backend.model.forward(self.backend.cache, self.tokens, self.positions,
                                          self.slots, self.block_tables, self.kv_lens, self.q_req)

    def capture(self) -> None:
        if self.backend.device.type != "cuda":
            return
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self._run()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.hidden = self._run()

    def load(self, batch: Batch) -> None:
        n, width = batch.block_tables.shape
        self.tokens.zero_()
        self.positions.zero_()
        self.slots.fill_(self.pad_slot)
        self.block_tables.fill_(PAD_BLOCK)
        self.kv_lens.fill_(1)
        self.tokens[:n].copy_(batch.tokens)
        self.positions[:n].copy_(batch.positions)
        self.slots[:n].copy_(batch.slots)
        self.block_tables[:n, :width].copy_(batch.block_tables)
        self.kv_lens[:n].copy_(batch.kv_lens)

    def replay(self, n: int) -> torch.Tensor:
        if self.graph is not None:
            self.graph.replay()
        else:
            self.hidden = self._run()
        self.replays += 1
        assert self.hidden is not None
        return self.hidden[:n].clone()


class ReferenceBackend:
    graph_class: type[DecodeGraph] = DecodeGraph
    graph_batch_sizes: tuple[int, ...] = (1, 2, 4)

    def __init__(self, cfg: TinyConfig | None = None, seed: int = 0,
                 device: str | torch.device = "cpu") -> None:
        self.cfg = cfg or TinyConfig()
        self.device = torch.device(device)
        self.seed = seed
        self.model = TinyDecoder(self.cfg, seed, self.device)
        self.cache = self._make_cache()
        self.allocator = BlockAllocator(self.cfg.num_blocks)
        self.max_blocks = min(self.cfg.max_positions // self.cfg.block_size, self.cfg.num_blocks)
        self.graphs: dict[int, DecodeGraph] = {}
        self.events: list[str] = []
        self.stats = {"eager_steps": 0, "graph_steps": 0, "mixed_steps": 0}
        self._next_rid = 0

    # -- lifecycle ---------------------------------------------------------------------

    def _make_cache(self) -> PagedKVCache:
        return PagedKVCache(self.cfg, self.device)

    def load_scales(self, v_scales: Sequence[float]) -> None:
        self.cache.load_scales(v_scales)
        self.events.append("scales_loaded")

    def start(self, v_scales: Sequence[float]) -> None:
        """Load scales, then build the decode graphs (captured on CUDA), like an engine start."""
        self.load_scales(v_scales)
        for bs in self.graph_batch_sizes:
            graph = self.graph_class(self, bs)
            graph.capture()
            self.graphs[bs] = graph
        self.events.append("graphs_captured" if self.uses_cuda_graphs else "graphs_built_eager")

    @property
    def uses_cuda_graphs(self) -> bool:
        return any(g.graph is not None for g in self.graphs.values())

    def scales_in_effect(self) -> list[float]:
        return [float(x) for x in self.cache.v_scales.tolist()]

    def kv_caches(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return self.cache.tensors()

    # -- requests ----------------------------------------------------------------------

    def add_request(self, prompt: Sequence[int]) -> Request:
        req = Request(self._next_rid, list(prompt), len(prompt))
        self._next_rid += 1
        return req

    def release(self, req: Request) -> None:
        self.allocator.free(req.blocks)
        req.blocks = []

    def prepare(self, reqs: Sequence[Request]) -> Batch:
        """Allocate blocks for every uncached token and describe the forward call."""
        bs = self.cfg.block_size
        toks, pos, slots, q_req, last = [], [], [], [], []
        prefill = decode = 0
        for r, req in enumerate(reqs):
            total = len(req.tokens)
            if total > self.cfg.max_positions:
                raise ValueError(f"request {req.rid}: {total} tokens > {self.cfg.max_positions}")
            while len(req.blocks) * bs < total:
                req.blocks.append(self.allocator.allocate())
            new = range(req.cached, total)
            if len(new) == 1 and req.cached > 0:
                decode += 1
            else:
                prefill += len(new)
            for p in new:
                toks.append(req.tokens[p])
                pos.append(p)
                slots.append(req.blocks[p // bs] * bs + p % bs)
                q_req.append(r)
            last.append(len(toks) - 1)
        width = max(len(req.blocks) for req in reqs)
        tables = [req.blocks + [PAD_BLOCK] * (width - len(req.blocks)) for req in reqs]

        def t(x: list[int] | list[list[int]]) -> torch.Tensor:
            return torch.tensor(x, dtype=torch.long, device=self.device)

        return Batch(t(toks), t(pos), t(slots), t(tables), t([len(r.tokens) for r in reqs]),
                     t(q_req), t(last), prefill, decode)

    def _compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.logits(hidden)

    def run_eager(self, batch: Batch) -> torch.Tensor:
        hidden = self.model.forward(self.cache, batch.tokens, batch.positions, batch.slots,
                                    batch.block_tables, batch.kv_lens, batch.q_req)
        self.stats["eager_steps"] += 1
        if batch.is_mixed:
            self.stats["mixed_steps"] += 1
        return self._compute_logits(hidden[batch.last_rows])

    def graph_for(self, batch: Batch) -> DecodeGraph | None:
        if not batch.is_decode_only:
            return None
        n = int(batch.tokens.shape[0])
        fits = [bs for bs in self.graphs if bs >= n]
        return self.graphs[min(fits)] if fits else None

    def run_graph(self, batch: Batch) -> torch.Tensor:
        graph = self.graph_for(batch)
        if graph is None:
            raise RuntimeError("no decode graph fits this batch")
        graph.load(batch)
        hidden = graph.replay(int(batch.tokens.shape[0]))
        self.stats["graph_steps"] += 1
        return self._compute_logits(hidden)

    def commit(self, reqs: Sequence[Request]) -> None:
        for req in reqs:
            req.cached = len(req.tokens)

    def step(self, reqs: Sequence[Request]) -> torch.Tensor:
        """One scheduler step: decode-only batches go through a graph when one fits."""
        batch = self.prepare(reqs)
        logits = self.run_graph(batch) if self.graph_for(batch) is not None else self.run_eager(batch)
        self.commit(reqs)
        return logits

    def sample(self, reqs: Sequence[Request], logits: torch.Tensor) -> None:
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        chosen = torch.argmax(logprobs, dim=-1)
        picked = logprobs.gather(1, chosen[:, None])[:, 0]
        for req, tok, lp in zip(reqs, chosen.tolist(), picked.tolist()):
            req.tokens.append(int(tok))
            req.logprobs.append(float(lp))

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int
                 ) -> list[tuple[list[int], list[float]]]:
        """Greedy generation for all prompts together; blocks are released at the end."""
        reqs = [self.add_request(p) for p in prompts]
        try:
            for _ in range(max_new_tokens):
                self.sample(reqs, self.step(reqs))
        finally:
            for req in reqs:
                self.release(req)
        return [(req.generated, list(req.logprobs)) for req in reqs]
