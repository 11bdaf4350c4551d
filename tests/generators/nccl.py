"""Multi-rank, multi-group NCCL profiler traces of a DeviceMesh job, written as torch writes them.

Takes a mesh (``(("dp", 2), ("tp", 4))``: 8 ranks, row-major as ``init_device_mesh``), a schedule of
collectives on its dimensions and point-to-point transfers along one of them, and gives one Kineto
trace per rank (:class:`Job`: the JSON documents and the ground truth of every collective and
pair, in plain Python, for tests to compute expected figures from).

Where each field comes from (copied field for field, in the writers' order):

- ``distributedInfo``: ``torch.profiler.profile._get_distributed_info`` (``torch/profiler/profiler.py``)
  — ``backend``, ``rank``, ``world_size``, ``pg_count`` (every group created, ``_world.group_count``),
  ``pg_config`` (``distributed_c10d._get_all_pg_configs``: the groups of the rank's own ``pg_map``,
  each ``{pg_name, pg_desc, backend_config, pg_size, ranks}`` with ``ranks`` a JSON list),
  ``nccl_version``. Checked against the 2024 trace ``hta_nccl_parser_config`` (one ``default_pg``
  group) and a torch 2.13 gloo FSDP2 + TP capture on a 2 × 2 mesh, whose ``pg_config`` on rank 0
  lists ``0/default_pg [0,1,2,3]``, ``1/mesh_dp [0,2]``, ``3/mesh_tp [0,1]``: group names are
  numbers given in creation order, world first, then each mesh dimension's groups in order.
- the CPU side of a collective (torch 2.x, ``ProcessGroupNCCL.cpp``): ``c10d::allreduce_`` (the
  dispatcher op, ``cpu_op``) ⊃ ``record_param_comms`` (``cpu_op``, ``RECORD_PARAM_COMMS_DATA``)
  ⊃ ``nccl:all_reduce`` (``user_annotation``, the work's profiling title) ⊃
  ``cudaLaunchKernelExC`` (``cuda_runtime``, with the kernel's ``correlation``); nesting and
  names as in ``hta_nccl_parser_config``. ``record_param_comms``' args follow
  ``AddGenericMetadata`` (``torch/csrc/profiler/standalone/execution_trace_observer`` /
  ``collection``): ``Collective name``, ``dtype``, ``In msg nelems``, ``Out msg nelems``,
  ``In split size``, ``Out split size``, ``Global rank start``, ``Global rank stride``,
  ``Group size``, ``Process Group Name``, ``Process Group Description``, ``Process Group
  Ranks`` (a string, ``formatList``: ``"[0, 2]"``), ``Rank``, ``Dst Rank`` / ``Src Rank``
  (``saveNcclMeta``: the peer's global rank), ``Seq``, ``Is asynchronized op``, ``Comms Id``,
  then ``Record function id``; ``External id`` first (Kineto).
- the kernel (``ChromeTraceLogger::handleActivity`` + ``appendCollectiveArgs`` of Kineto):
  ``External id`` (the ``record_param_comms``' one), the CUPTI fields (``queued``, ``device``,
  ``context``, ``stream``, ``correlation``, ``registers per thread``, ``shared memory``,
  ``blocks per SM``, ``warps per SM``, ``grid``, ``block``, ``est. achieved occupancy %``), then
  ``Collective name``, ``In msg nelems``, ``Out msg nelems``, ``Group size``, ``dtype``,
  ``In split size``, ``Out split size``, ``Process Group Name``, ``Process Group Description``,
  ``Process Group Ranks``, ``Dst Rank`` / ``Src Rank``, ``Seq``, ``Comms Id``.
- ``Seq``: ``seqCollective_ + 1`` of the group for collectives (the same on every member),
  ``seqP2P_`` of the calling rank for sends and receives (a per-rank counter); ``Comms Id``:
  ``c10::get_hash(pg name, seq, is p2p, global rank start, stride, group size)`` (torch ≥ 2.10,
  ``saveNcclMeta``), a ``size_t``: written here as SHA-256's first 8 bytes of the same inputs
  (the same on every rank of one collective, spread over the whole unsigned 64-bit range).
- kernel names of NCCL 2.19-2.27 (``ncclDevKernel_<Coll>[_<Op>_<type>]_RING_LL``, argument
  ``ncclDevKernelArgsStorage<4096ul>``), ``ncclDevKernel_SendRecv`` for point-to-point; one stream
  per process group; ``pid`` the device, ``tid`` the stream.
- times: µs with three decimals relative to ``baseTimeNanoseconds`` (torch ≥ 2.4).

Timing model: every rank runs the same schedule; a collective's kernels start when each rank gets
there and all end when the last has arrived plus the transfer (``bytes / bandwidth`` of the
dimension): the last rank's duration is the transfer, the others' the wait plus the transfer.
A send and its receive end together likewise.

Variants for the tests: ``names=False`` drops the ``Process Group *`` args (the group is then named
only by ``pg_config``, as on gloo), ``sizes=False`` drops ``Group size``, ``seq=False`` drops
``Seq`` and ``Comms Id`` (torch < 2.10).
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

__all__ = [
    "DTYPE_BYTES",
    "Collective",
    "CollectiveTruth",
    "Group",
    "Job",
    "PairTruth",
    "Step",
    "Transfer",
    "default_schedule",
    "device_mesh_job",
    "mesh_groups",
    "write_job",
]

DTYPE_BYTES = {"BFloat16": 2, "Float": 4}
_KERNEL_ARGS_TYPE = "(ncclDevKernelArgsStorage<4096ul>)"
_BASE_NS = 1_790_000_000_000_000_000  # a multiple of 7,889,238 s is not needed: any ns base reads the same
_US = 1_000
_SHORT_TYPE = {"BFloat16": "bf16", "Float": "f32"}


@dataclass(frozen=True)
class Group:
    """A process group: its name (``pg_name``), description and global ranks (in group order)."""

    name: str
    desc: str
    ranks: tuple[int, ...]

    @property
    def ranks_text(self) -> str:
        """``Process Group Ranks`` as torch writes it."""
        return str(list(self.ranks))


@dataclass(frozen=True)
class Collective:
    """A collective every group of mesh dimension ``dim`` runs: ``nelems`` elements in (per rank)."""

    dim: str
    kind: str  # all_reduce, all_gather, reduce_scatter, all_to_all, broadcast
    nelems: int
    dtype: str = "BFloat16"
    only: int | None = None
    """Run on the dimension's ``only``-th group alone (in :func:`mesh_groups`' order); None: on every one."""


@dataclass(frozen=True)
class Transfer:
    """Point-to-point along dimension ``dim``: position i of each group sends to i + ``shift``."""

    dim: str
    nelems: int
    shift: int = 1
    dtype: str = "BFloat16"


Step = Collective | Transfer


@dataclass
class CollectiveTruth:
    """One collective as the generator made it: group, kind, per-rank kernel times, bytes."""

    group: str
    dim: str
    kind: str
    seq: int
    ranks: tuple[int, ...]
    in_bytes: int
    out_bytes: int
    start_ns: dict[int, int]
    end_ns: dict[int, int]
    step: int


@dataclass
class PairTruth:
    """One send and its receive as the generator made them."""

    group: str
    dim: str
    src: int
    dst: int
    index: int
    nbytes: int
    send: tuple[int, int]
    recv: tuple[int, int]
    step: int


@dataclass
class Job:
    """The traces of every rank and the ground truth behind them."""

    traces: dict[int, dict[str, Any]]
    groups: list[Group]
    collectives: list[CollectiveTruth] = field(default_factory=list)
    pairs: list[PairTruth] = field(default_factory=list)


def mesh_groups(dims: Sequence[tuple[str, int]]) -> list[Group]:
    """Return the groups of a DeviceMesh, world first, named in creation order as torch names them.

    The mesh holds ``range(W)`` in row-major order; a dimension's groups are its 1-D slices.

    Examples
    --------
    >>> [(g.name, g.desc, g.ranks) for g in mesh_groups([("dp", 2), ("tp", 2)])][1:]
    [('1', 'mesh_dp', (0, 2)), ('2', 'mesh_dp', (1, 3)), ('3', 'mesh_tp', (0, 1)), ('4', 'mesh_tp', (2, 3))]
    """
    shape = [size for _, size in dims]
    world = 1
    for size in shape:
        world *= size
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    groups = [Group("0", "default_pg", tuple(range(world)))]
    for axis, (name, size) in enumerate(dims):
        others = [range(s) for i, s in enumerate(shape) if i != axis]
        for index in itertools.product(*others):
            fixed = list(index)
            fixed.insert(axis, 0)
            base = sum(f * st for f, st in zip(fixed, strides, strict=True))
            ranks = tuple(base + k * strides[axis] for k in range(size))
            groups.append(Group(str(len(groups)), f"mesh_{name}", ranks))
    return groups


def default_schedule(dims: Sequence[tuple[str, int]]) -> list[Step]:
    """FSDP all-gathers and reduce-scatters on ``dp``, TP all-reduces on ``tp``, PP sends on ``pp``."""
    names = {name for name, _ in dims}
    steps: list[Step] = []
    for layer in range(2):
        if "pp" in names and layer == 0:
            steps.append(Transfer("pp", 524_288))
        if "dp" in names:
            steps.append(Collective("dp", "all_gather", 2_097_152 * (layer + 1)))
        if "tp" in names:
            steps.append(Collective("tp", "all_reduce", 1_048_576))
    if "tp" in names:
        steps.append(Collective("tp", "all_reduce", 1_048_576))
    if "dp" in names:
        steps.append(Collective("dp", "reduce_scatter", 4_194_304))
    if "ep" in names:
        steps.append(Collective("ep", "all_to_all", 262_144))
    return steps


_C10D_OP = {
    "all_reduce": ("c10d::allreduce_", "allreduce", "nccl:all_reduce", "AllReduce", True),
    "all_gather": ("c10d::_allgather_base_", "_allgather_base", "nccl:_all_gather_base", "AllGather", False),
    "reduce_scatter": (
        "c10d::_reduce_scatter_base_",
        "_reduce_scatter_base",
        "nccl:_reduce_scatter_base",
        "ReduceScatter",
        True,
    ),
    "all_to_all": ("c10d::alltoall_base_", "all_to_all", "nccl:all_to_all", "SendRecv", False),
    "broadcast": ("c10d::broadcast_", "broadcast", "nccl:broadcast", "Broadcast", False),
}
_BANDWIDTH = {"tp": 300e9, "dp": 25e9, "pp": 25e9, "ep": 50e9, "cp": 50e9}  # bytes per second


def _kernel_name(kind: str, dtype: str) -> str:
    _, _, _, coll, reduces = _C10D_OP[kind]
    if coll == "SendRecv":
        return f"ncclDevKernel_SendRecv{_KERNEL_ARGS_TYPE}"
    op = f"_Sum_{_SHORT_TYPE[dtype]}" if reduces else ""
    return f"ncclDevKernel_{coll}{op}_RING_LL{_KERNEL_ARGS_TYPE}"


def _comms_id(group: Group, seq: int, p2p: bool) -> int:
    """A stand-in for ``c10::get_hash(name, seq, isP2P, start, stride, size)``: unsigned 64-bit."""
    start, stride = _start_stride(group)
    text = f"{group.name}|{seq}|{int(p2p)}|{start}|{stride}|{len(group.ranks)}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


def _start_stride(group: Group) -> tuple[int, int]:
    ranks = group.ranks
    stride = ranks[1] - ranks[0] if len(ranks) > 1 else 1
    even = all(b - a == stride for a, b in itertools.pairwise(ranks))
    return (ranks[0], stride) if even else (-1, -1)


class _Writer:
    """The events of one rank, with its id counters and its CPU and GPU clocks (ns since the epoch)."""

    def __init__(self, rank: int, gpus_per_node: int) -> None:
        self.rank = rank
        self.device = rank % gpus_per_node
        self.pid = 4000 + rank
        self.events: list[dict[str, Any]] = []
        self.external = itertools.count(100)
        self.correlation = itertools.count(5000)
        self.function_id = itertools.count(90)
        self.cpu_ns = _START_NS
        self.gpu_ns = _START_NS
        self.p2p_seq: dict[str, int] = {}
        self.coll_seq: dict[str, int] = {}

    def complete(
        self, cat: str, name: str, span: tuple[int, int], where: tuple[int, int], args: dict[str, Any]
    ) -> None:
        """Add a complete (``X``) event; times in ns since the epoch, written as µs from the base."""
        start, end = span
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": where[0],
                "tid": where[1],
                "ts": _us(start - _BASE_NS),
                "dur": _us(end - start),
                "args": args,
            }
        )

    def launch(self, at: int, correlation: int, external: int) -> None:
        """Add the runtime launch of a kernel (``cudaLaunchKernelExC``, as NCCL launches) and its flow."""
        self.complete(
            "cuda_runtime",
            "cudaLaunchKernelExC",
            (at, at + 5 * _US),
            (self.pid, self.pid),
            {"External id": external, "cbid": 430, "correlation": correlation},
        )

    def kernel(
        self, name: str, span: tuple[int, int], stream: int, correlation: int, extra: dict[str, Any]
    ) -> None:
        """Add a kernel with the CUPTI fields Kineto writes, then ``extra`` (the collective args)."""
        args = {
            "External id": extra.pop("External id"),
            "queued": 0,
            "device": self.device,
            "context": 1,
            "stream": stream,
            "correlation": correlation,
            "registers per thread": 96,
            "shared memory": 87568,
            "blocks per SM": 0.121212,
            "warps per SM": 1.939394,
            "grid": [16, 1, 1],
            "block": [512, 1, 1],
            "est. achieved occupancy %": 0,
            **extra,
        }
        self.complete("kernel", name, span, (self.device, stream), args)

    def compute(self, duration: int) -> None:
        """Run a compute kernel (launched now from the CPU) on stream 7."""
        correlation, external = next(self.correlation), next(self.external)
        self.complete(
            "cpu_op",
            "aten::mm",
            (self.cpu_ns, self.cpu_ns + 12 * _US),
            (self.pid, self.pid),
            {"External id": external},
        )
        self.complete(
            "cuda_runtime",
            "cudaLaunchKernel",
            (self.cpu_ns + 2 * _US, self.cpu_ns + 8 * _US),
            (self.pid, self.pid),
            {"External id": external, "cbid": 211, "correlation": correlation},
        )
        start = max(self.gpu_ns, self.cpu_ns + 10 * _US)
        self.kernel(
            "sm90_xmma_gemm_bf16bf16_bf16f32",
            (start, start + duration),
            7,
            correlation,
            {"External id": external},
        )
        self.gpu_ns = start + duration
        self.cpu_ns += 20 * _US


_START_NS = _BASE_NS + 4_000_000_000


def _us(ns: int) -> float:
    """Nanoseconds as µs with three decimals (exact: the values stay far below 2**53)."""
    return round(ns / _US, 3)


@dataclass(frozen=True)
class _Options:
    names: bool
    sizes: bool
    seq: bool
    costs: dict[str, tuple[int, float]] | None = None
    """Per dimension ``(α ns, β ns per bus byte)``: a collective's transfer is ``α + β · S · bus factor``."""


def _meta(
    group: Group,
    collective_name: str,
    counts: tuple[int, int],
    dtype: str,
    *,
    rank_in_group: int,
    seq: int,
    p2p: bool,
    peer: tuple[str, int] | None,
    options: _Options,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return the args of ``record_param_comms`` and of its kernel (without ``External id``)."""
    start, stride = _start_stride(group)
    names = (
        {
            "Process Group Name": group.name,
            "Process Group Description": group.desc,
            "Process Group Ranks": group.ranks_text,
        }
        if options.names
        else {}
    )
    size = {"Group size": len(group.ranks)} if options.sizes else {}
    direction = {peer[0]: peer[1]} if peer is not None else {}
    sequence = {"Seq": seq} if options.seq else {}
    comms = {"Comms Id": _comms_id(group, seq, p2p)} if options.seq else {}
    cpu = {
        "Collective name": collective_name,
        "dtype": dtype,
        "In msg nelems": counts[0],
        "Out msg nelems": counts[1],
        "In split size": "[]",
        "Out split size": "[]",
        "Global rank start": start,
        "Global rank stride": stride,
        **size,
        **names,
        "Rank": rank_in_group,
        **direction,
        **sequence,
        "Is asynchronized op": 0,
        **comms,
    }
    kernel = {
        "Collective name": collective_name,
        "In msg nelems": counts[0],
        "Out msg nelems": counts[1],
        **size,
        "dtype": dtype,
        "In split size": "[]",
        "Out split size": "[]",
        **names,
        **direction,
        **sequence,
        **comms,
    }
    return cpu, kernel


def _issue(w: _Writer, ops: tuple[str, str], span_ns: int, cpu_args: dict[str, Any]) -> tuple[int, int, int]:
    """Emit the CPU side of a collective (c10d op ⊃ record_param_comms ⊃ nccl:* ⊃ launch).

    Returns the launch time, the kernel's correlation and the External id it carries (the
    ``record_param_comms``' one, as Kineto links them).
    """
    c10d, title = ops
    at = w.cpu_ns
    op_id, external, title_id = next(w.external), next(w.external), next(w.external)
    correlation = next(w.correlation)
    where = (w.pid, w.pid)
    w.complete("cpu_op", c10d, (at, at + span_ns), where, {"External id": op_id})
    w.complete(
        "cpu_op",
        "record_param_comms",
        (at + 2 * _US, at + span_ns - 2 * _US),
        where,
        {"External id": external, **cpu_args, "Record function id": next(w.function_id)},
    )
    w.complete(
        "user_annotation", title, (at + 5 * _US, at + span_ns - 5 * _US), where, {"External id": title_id}
    )
    launch = at + 8 * _US
    w.launch(launch, correlation, external)
    w.cpu_ns = at + span_ns + 5 * _US
    return launch, correlation, external


def _counts(kind: str, nelems: int, n: int) -> tuple[int, int]:
    """In and out element counts of a collective over ``n`` ranks (``nelems`` in per rank)."""
    if kind == "all_gather":
        return nelems, nelems * n
    if kind == "reduce_scatter":
        return nelems, nelems // n
    return nelems, nelems


def _transfer_ns(nbytes: int, dim: str) -> int:
    return max(2 * _US, int(nbytes / _BANDWIDTH.get(dim, 25e9) * 1e9))


_BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "broadcast": lambda n: 1.0,
}
"""nccl-tests' bus factors (the others: ``(n − 1) / n``), for the transfers of ``costs``."""


def _costed_ns(options: _Options, kind: str, nbytes: int, n: int, dim: str) -> int:
    """A collective's transfer: ``α + β · S · bus factor`` when the job has costs, else ``S / bandwidth``."""
    if options.costs is None or dim not in options.costs:
        return _transfer_ns(nbytes, dim)
    alpha, beta = options.costs[dim]
    factor = _BUS_FACTOR[kind](n) if kind in _BUS_FACTOR else (n - 1) / n
    return int(alpha + round(beta * nbytes * factor))


def _stream(group: Group) -> int:
    """One NCCL stream per process group (as ProcessGroupNCCL keeps one per device and group)."""
    return 20 + 4 * int(group.name)


@dataclass
class _Run:
    writers: list[_Writer]
    options: _Options
    rng: random.Random
    job: Job
    step: int = 0


def _collective(run: _Run, group: Group, op: Collective) -> None:
    """Run one collective on one group: every member's CPU side and kernel, and its ground truth."""
    n = len(group.ranks)
    counts = _counts(op.kind, op.nelems, n)
    c10d, collective_name, title, _, _ = _C10D_OP[op.kind]
    issued: dict[int, tuple[int, int, int, dict[str, Any]]] = {}
    seq = 0
    for position, rank in enumerate(group.ranks):
        w = run.writers[rank]
        seq = w.coll_seq[group.name] = w.coll_seq.get(group.name, 0) + 1
        cpu_args, kernel_args = _meta(
            group,
            collective_name,
            counts,
            op.dtype,
            rank_in_group=position,
            seq=seq,
            p2p=False,
            peer=None,
            options=run.options,
        )
        launch, correlation, external = _issue(w, (c10d, title), 40 * _US, cpu_args)
        issued[rank] = (launch, correlation, external, kernel_args)
    starts = {
        rank: max(run.writers[rank].gpu_ns, issued[rank][0] + 6 * _US) + run.rng.randrange(0, 30 * _US)
        for rank in group.ranks
    }
    size = DTYPE_BYTES[op.dtype]
    end = max(starts.values()) + _costed_ns(run.options, op.kind, max(counts) * size, n, op.dim)
    for rank in group.ranks:
        w = run.writers[rank]
        _, correlation, external, kernel_args = issued[rank]
        w.kernel(
            _kernel_name(op.kind, op.dtype),
            (starts[rank], end),
            _stream(group),
            correlation,
            {"External id": external, **kernel_args},
        )
        w.gpu_ns = end
    run.job.collectives.append(
        CollectiveTruth(
            group=group.name,
            dim=op.dim,
            kind=op.kind,
            seq=seq,
            ranks=group.ranks,
            in_bytes=counts[0] * size,
            out_bytes=counts[1] * size,
            start_ns=starts,
            end_ns=dict.fromkeys(group.ranks, end),
            step=run.step,
        )
    )


def _transfer(run: _Run, group: Group, op: Transfer) -> None:
    """Run the sends of one group: position i to i + shift, each with its receive."""
    n = len(group.ranks)
    size = DTYPE_BYTES[op.dtype]
    for position in range(n):
        target = position + op.shift
        if not 0 <= target < n:
            continue
        src, dst = group.ranks[position], group.ranks[target]
        sides: dict[int, tuple[int, int, int, dict[str, Any]]] = {}
        for rank, kind, peer_key, peer, peer_position in (
            (src, "send", "Dst Rank", dst, target),
            (dst, "recv", "Src Rank", src, position),
        ):
            w = run.writers[rank]
            seq = w.p2p_seq[group.name] = w.p2p_seq.get(group.name, 0) + 1
            cpu_args, kernel_args = _meta(
                group,
                kind,
                (op.nelems, op.nelems),
                op.dtype,
                rank_in_group=peer_position,
                seq=seq,
                p2p=True,
                peer=(peer_key, peer),
                options=run.options,
            )
            c10d = "c10d::send" if kind == "send" else "c10d::recv_"
            title = f"nccl:{kind} {src}->{dst}" if kind == "send" else f"nccl:{kind} {dst}<-{src}"
            launch, correlation, external = _issue(w, (c10d, title), 30 * _US, cpu_args)
            sides[rank] = (launch, correlation, external, kernel_args)
        starts = {r: max(run.writers[r].gpu_ns, sides[r][0] + 6 * _US) for r in (src, dst)}
        end = max(starts.values()) + _transfer_ns(op.nelems * size, op.dim)
        for rank in (src, dst):
            w = run.writers[rank]
            _, correlation, external, kernel_args = sides[rank]
            name = f"ncclDevKernel_SendRecv{_KERNEL_ARGS_TYPE}"
            w.kernel(
                name,
                (starts[rank], end),
                _stream(group) + 1,
                correlation,
                {"External id": external, **kernel_args},
            )
            w.gpu_ns = end
        index = sum(1 for p in run.job.pairs if (p.group, p.src, p.dst) == (group.name, src, dst))
        run.job.pairs.append(
            PairTruth(
                group=group.name,
                dim=op.dim,
                src=src,
                dst=dst,
                index=index,
                nbytes=op.nelems * size,
                send=(starts[src], end),
                recv=(starts[dst], end),
                step=run.step,
            )
        )


def device_mesh_job(
    dims: Sequence[tuple[str, int]],
    *,
    steps: int = 2,
    schedule: Sequence[Step] | None = None,
    names: bool = True,
    sizes: bool = True,
    seq: bool = True,
    gpus_per_node: int = 8,
    slow_rank: int | None = None,
    seed: int = 0,
    first_step: int = 10,
    costs: dict[str, tuple[int, float]] | None = None,
) -> Job:
    """Return the traces of a DeviceMesh job: every rank, ``steps`` profiler steps of ``schedule``.

    Parameters
    ----------
    dims
        The mesh, outermost first: ``(("dp", 2), ("tp", 4))`` is 8 ranks, TP groups of consecutive
        ranks (``mesh_tp`` ``[0..3]``, ``[4..7]``), DP groups strided (``mesh_dp`` ``[0, 4]``, …).
    steps
        ``ProfilerStep#N`` windows, numbered from ``first_step``.
    schedule
        What each step runs (:func:`default_schedule`: FSDP all-gathers and reduce-scatters on
        ``dp``, TP all-reduces on ``tp``, a pipeline send on ``pp``).
    names, sizes, seq
        Keep the ``Process Group Name/Description/Ranks`` args, ``Group size``, ``Seq`` and
        ``Comms Id`` (torch ≥ 2.10).
    gpus_per_node
        Ranks per host: the device index is ``rank % gpus_per_node``, the host ``node<rank // it>``.
    slow_rank
        A rank whose compute takes 1.5 times as long (the others wait for it).
    seed
        Seeds the launch jitter.
    costs
        Per dimension ``(α ns, β ns per bus byte)``: each collective's transfer is
        ``α + round(β · S · bus factor)`` (``S``: nccl-tests' bytes) instead of ``S / bandwidth``.
    """
    groups = mesh_groups(dims)
    world = len(groups[0].ranks)
    job = Job(traces={}, groups=groups)
    run = _Run(
        writers=[_Writer(rank, gpus_per_node) for rank in range(world)],
        options=_Options(names=names, sizes=sizes, seq=seq, costs=costs),
        rng=random.Random(seed),
        job=job,
    )
    plan = list(schedule) if schedule is not None else default_schedule(dims)
    for step in range(steps):
        run.step = first_step + step
        begin = {w.rank: w.cpu_ns for w in run.writers}
        for op in plan:
            for w in run.writers:
                w.compute((300 if w.rank == slow_rank else 200) * _US)
            of_dim = [g for g in groups if g.desc == f"mesh_{op.dim}"]
            for position, group in enumerate(of_dim):
                if isinstance(op, Transfer):
                    _transfer(run, group, op)
                elif op.only is None or position == op.only:
                    _collective(run, group, op)
        for w in run.writers:  # the optimizer step waits for the GPU (a .item())
            w.cpu_ns = max(w.cpu_ns, w.gpu_ns) + 20 * _US
            w.complete(
                "user_annotation", f"ProfilerStep#{run.step}", (begin[w.rank], w.cpu_ns), (w.pid, w.pid), {}
            )
            w.cpu_ns += 30 * _US
    for w in run.writers:
        job.traces[w.rank] = _document(w, groups, world, gpus_per_node)
    return job


def _document(w: _Writer, groups: list[Group], world: int, gpus_per_node: int) -> dict[str, Any]:
    """Return one rank's trace document, keys in the order torch writes them."""
    mine = [g for g in groups if w.rank in g.ranks]
    info = {
        "backend": "nccl",
        "rank": w.rank,
        "world_size": world,
        "pg_count": len(groups),
        "pg_config": [
            {
                "pg_name": g.name,
                "pg_desc": g.desc,
                "backend_config": "cuda:nccl",
                "pg_size": len(g.ranks),
                "ranks": list(g.ranks),
            }
            for g in mine
        ],
        "nccl_version": "2.27.3",
    }
    metadata = [
        {"name": "process_name", "ph": "M", "ts": 0, "pid": w.pid, "tid": 0, "args": {"name": "python3.12"}},
        {
            "name": "process_name",
            "ph": "M",
            "ts": 0,
            "pid": w.device,
            "tid": 0,
            "args": {"name": "python3.12"},
        },
        {
            "name": "process_labels",
            "ph": "M",
            "ts": 0,
            "pid": w.device,
            "tid": 0,
            "args": {"labels": f"GPU {w.device}"},
        },
    ]
    events = sorted(w.events, key=lambda e: (e["ts"], -e["dur"]))
    return {
        "schemaVersion": 1,
        "deviceProperties": [
            {
                "id": w.device,
                "name": "NVIDIA H100 80GB HBM3",
                "totalGlobalMem": 85045477376,
                "computeMajor": 9,
                "computeMinor": 0,
                "maxThreadsPerBlock": 1024,
                "maxThreadsPerMultiprocessor": 2048,
                "regsPerBlock": 65536,
                "warpSize": 32,
                "sharedMemPerBlock": 49152,
                "numSms": 132,
            }
        ],
        "distributedInfo": info,
        "record_shapes": 1,
        "trace_id": f"{w.rank:032X}",
        "host_name": f"node{w.rank // gpus_per_node}",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": _BASE_NS,
        "traceEvents": [*metadata, *events],
        "traceName": f"rank{w.rank}.pt.trace.json",
    }


def write_job(job: Job, directory: Path, *, compress: bool = False) -> list[Path]:
    """Write each rank's trace as ``rank<N>.pt.trace.json`` (``.gz`` with ``compress``); return the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank, document in sorted(job.traces.items()):
        data = msgspec.json.encode(document)
        path = directory / f"rank{rank}.pt.trace.json{'.gz' if compress else ''}"
        path.write_bytes(gzip.compress(data, mtime=0) if compress else data)
        paths.append(path)
    return paths
