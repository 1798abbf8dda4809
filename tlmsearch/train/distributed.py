"""Data-parallel training of one proxy on N processes: rank facts, rendezvous and reductions.

N workers train the model one worker trains, to the order of float sums: every rank draws the whole
optimizer step's window starts from the generator one worker uses (same seed, same calls) and
keeps its contiguous 1/N of the step's sequences; each rank's loss is the mean over its equal
share, so the mean of the ranks' gradients is the one-worker gradient: torch's
DistributedDataParallel takes it, all-reducing buckets of gradients while the last micro-batch's
backward still runs (``Trainer`` in :mod:`tlmsearch.train.trainer`); the learning rate and step
count do not change; the train losses (once per eval window) and the validation NLL (each rank
evaluates a slice of the validation windows) are reduced here; rank 0 alone reports, and its stop
is every rank's. The initial weights are keyed by seed (models.build_model): every rank builds
them.

The rendezvous store listens on the address it is given only (torch's own ``init_method`` listens
on every interface), and gloo's connections use the interface of that address (loopback for the
embedded Ray), so a run on 127.0.0.1 stays on loopback.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from tlmsearch.errors import ConfigError

TIMEOUT_S = 1800  # a collective that waits this long means a rank died: fail, do not hang


@dataclass(frozen=True)
class DistInfo:
    """This process's place in a data-parallel group (the default process group)."""

    rank: int
    world: int
    device: str = "cpu"  # where collectives run (cuda for nccl)

    @property
    def main(self) -> bool:
        return self.rank == 0

    # -- the data -------------------------------------------------------------------------------

    def local_shape(self, micro: int, accum: int, max_micro: int) -> tuple[int, int]:
        """(micro batch, accumulation) of this rank's share of a ``micro x accum`` step.

        >>> DistInfo(0, 4).local_shape(8, 16, 8)  # 128 sequences: 32 per rank, 4 x 8
        (8, 4)
        """
        seqs = micro * accum
        if seqs % self.world:
            raise ConfigError(
                f"ray.workers_per_trial: {self.world} workers cannot share a step of {seqs} "
                f"sequences (train.batch_tokens / data.seq_len); make it a multiple of "
                f"{self.world}"
            )
        share = seqs // self.world
        local = max(d for d in range(1, min(max_micro, share) + 1) if share % d == 0)
        return local, share // local

    def step_batches(
        self, batches: Any, micro: int, accum: int, local_micro: int, device: Any = None
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """This rank's micro-batches of one step: its slice of the one-worker step's sequences
        (on ``device`` when given, as :meth:`Batches.next` puts them)."""
        starts = [batches.starts(micro) for _ in range(accum)]  # the 1-worker draws, in order
        share = micro * accum // self.world
        mine = np.concatenate(starts)[self.rank * share : (self.rank + 1) * share]
        for i in range(0, share, local_micro):
            yield batches.windows(mine[i : i + local_micro], device)

    def rows(self, n: int) -> slice:
        """This rank's contiguous slice of ``n`` rows (validation windows)."""
        return slice(self.rank * n // self.world, (self.rank + 1) * n // self.world)

    # -- reductions -----------------------------------------------------------------------------

    def sum(self, value: float) -> float:
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return float(t.item())

    def mean_each(self, values: Sequence[float]) -> list[float]:
        """Each value's mean over ranks, in one all-reduce (a window of step losses)."""
        t = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return [v / self.world for v in t.tolist()]

    def agree(self, flag: bool) -> bool:
        """Rank 0's ``flag`` on every rank (e.g. its caller said stop)."""
        t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=self.device)
        dist.broadcast(t, src=0)
        return bool(t.item())

    def gather(self, text: str) -> list[str]:
        """``text`` of every rank, by rank (e.g. each rank's node)."""
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, text)
        return [str(x) for x in out]


# -------------------------------------------------------------------------------------------------
# Rendezvous


def listen(host: str, port: int = 0) -> socket.socket:
    """Rank 0's rendezvous socket on ``host`` alone (port 0: a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def init_group(
    rank: int,
    world: int,
    host: str,
    port: int,
    device: torch.device,
    listener: socket.socket | None = None,
    timeout_s: int = TIMEOUT_S,
) -> DistInfo:
    """Join the group whose rank 0 listens on ``host:port`` (rank 0 passes its ``listener``)."""
    backend = backend_for(device)
    if backend == "gloo" and "GLOO_SOCKET_IFNAME" not in os.environ:
        iface = interface_of(host)
        if iface:
            os.environ["GLOO_SOCKET_IFNAME"] = iface
    timeout = timedelta(seconds=timeout_s)
    store = dist.TCPStore(
        host,
        port,
        world,
        rank == 0,
        timeout=timeout,
        master_listen_fd=listener.detach() if listener is not None else None,
        use_libuv=True,
    )
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    return DistInfo(rank, world, str(device) if backend == "nccl" else "cpu")


def close_group(together: bool = False) -> None:
    """Leave the group. ``together`` (a rank that finished its work normally): a barrier first,
    so no rank tears its side down (rank 0 hosts the store) while another is still in a
    collective. A rank leaving on an error skips it: the others may be in another collective,
    and a barrier could then wait out the whole timeout instead of failing them at once.

    A spawned gloo rank still dies by SIGABRT now and then ("terminate called without an active
    exception"): 2 in 11 runs before the barrier on an idle machine, 0 in 40 after, but once
    more in CI under load; tests/test_distributed.py runs such a case once more.
    """
    if dist.is_initialized():
        try:
            if together:
                dist.barrier()
        finally:
            dist.destroy_process_group()


def interface_of(host: str) -> str | None:
    """The loopback interface for a loopback ``host`` (gloo binds to an interface, not an
    address); None elsewhere, where gloo takes the address the host name resolves to, or
    GLOO_SOCKET_IFNAME."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        return None
    names = [name for _, name in socket.if_nameindex()]
    return next((n for n in names if n in ("lo", "lo0")), None)
