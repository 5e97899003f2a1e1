"""Where the trainer runs: one process, or one of several launched by `torchrun` (DDP or FSDP).

`setup_runtime` reads torchrun's environment (WORLD_SIZE, RANK, LOCAL_RANK), starts the process
group (nccl on CUDA, gloo on the CPU), picks the device and the autocast dtype. `Runtime` wraps the
model, reduces metrics across ranks, and gathers full model/optimizer states for checkpoints.

FSDP (`parallel="fsdp"`, meant for the `paper` size on GPUs) shards every decoder block and the root
with `torch.distributed.fsdp.fully_shard` (parameters stay float32; bf16 comes from autocast) and
gathers full model/optimizer states on rank 0 with `torch.distributed.checkpoint.state_dict`. The
test suite runs DDP and FSDP with 2 gloo processes on the CPU; nccl, bf16 and multi-node launches
are not tested here.
"""

from __future__ import annotations

import contextlib
import gc
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from phasekv.model import PhaseKVModel
from phasekv.train.config import RunConfig


@dataclass
class Runtime:
    rank: int
    world: int
    local_rank: int
    device: torch.device
    autocast_dtype: torch.dtype | None
    parallel: str
    owns_group: bool

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def autocast(self):
        """bf16 autocast where enabled, else a no-op context."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    def all_reduce_sum(self, value: torch.Tensor) -> torch.Tensor:
        """Sum of `value` over ranks (float64 on the device's reduction path, returned on the CPU)."""
        if not self.distributed:
            return value.detach().double().cpu()
        reduced = value.detach().double().to(self.device)
        dist.all_reduce(reduced)
        return reduced.cpu()

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def wrap(self, model: PhaseKVModel) -> nn.Module:
        """Move `model` to the device and wrap it for data parallelism."""
        model = model.to(self.device)
        if not self.distributed:
            return model
        if self.parallel == "fsdp":
            from torch.distributed.fsdp import fully_shard

            for block in model.layers:
                fully_shard(block)
            return fully_shard(model)
        return DistributedDataParallel(model, device_ids=[self.local_rank] if self.device.type == "cuda" else None)

    def no_sync(self, model: nn.Module, sync: bool):
        """Skip DDP's gradient all-reduce on accumulation micro-batches (sync=False)."""
        if sync or not isinstance(model, DistributedDataParallel):
            return contextlib.nullcontext()
        return model.no_sync()

    def plain(self, model: nn.Module) -> nn.Module:
        """The module to call for evaluation (DDP's inner module; FSDP modules are called as they are)."""
        return model.module if isinstance(model, DistributedDataParallel) else model

    def full_states(
        self, model: nn.Module, optimizer: torch.optim.Optimizer
    ) -> tuple[PhaseKVModel | None, dict | None]:
        """(a CPU-readable model, the optimizer state) on rank 0, (None, None) elsewhere; collective."""
        if self.parallel == "fsdp" and self.distributed:
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                get_model_state_dict,
                get_optimizer_state_dict,
            )

            options = StateDictOptions(full_state_dict=True, cpu_offload=True)
            weights = get_model_state_dict(model, options=options)
            optim_state = get_optimizer_state_dict(model, optimizer, options=options)
            if not self.is_main:
                return None, None
            with torch.device("cpu"):
                full = PhaseKVModel(model.config)
            full.load_state_dict(weights)
            return full, optim_state
        if not self.is_main:
            return None, None
        return self.plain(model), optimizer.state_dict()

    def load_optimizer(self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
        """Load an optimizer state saved by `full_states`."""
        if self.parallel == "fsdp" and self.distributed:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

            options = StateDictOptions(full_state_dict=True)
            set_optimizer_state_dict(model, optimizer, optim_state_dict=state, options=options)
        else:
            optimizer.load_state_dict(state)

    def close(self, finished: bool = True) -> None:
        """Tear down the process group this runtime started. After a run that `finished` on every rank, each
        rank collects its garbage and the ranks meet before the group goes: without that, about one
        two-process FSDP run on gloo in twenty aborted in torch's teardown at exit, after writing its files."""
        if not (self.owns_group and dist.is_initialized()):
            return
        if finished:
            gc.collect()
            dist.barrier()
        dist.destroy_process_group()


def setup_runtime(config: RunConfig) -> Runtime:
    """Threads, process group, device and precision for this process."""
    if config.threads:
        torch.set_num_threads(config.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    owns = False
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
        owns = True
    bf16 = config.precision == "bf16" or (config.precision == "auto" and cuda and torch.cuda.is_bf16_supported())
    return Runtime(rank, world, local_rank, device, torch.bfloat16 if bf16 else None, config.parallel, owns)
