"""The ``expert`` demo job: a mixture-of-experts layer whose tokens travel by ``all_to_all_single``.

Takes the ``torch`` module, the rank, the world size (even, at least 4) and a seed; gives the rank's
:class:`~timeline.capture.jobs.base.Training`.

The mesh: ``init_device_mesh("cpu", (2, world_size // 2), mesh_dim_names=("dp", "ep"))``; with 4
ranks the ``dp`` groups are {0, 2} and {1, 3}, the ``ep`` groups {0, 1} and {2, 3}. Each ``ep``
group holds 2 experts per rank (MLPs 32 → 64 → 32); a router (one linear layer, the same on every
rank) sends each of the rank's 32 tokens to one expert (top-1), so the splits are uneven. A step on
one rank runs, on gloo:

1. ``all_to_all_single`` of the token counts per expert (int64, even splits) on ``ep``;
2. ``all_to_all_single`` of the tokens to the experts' ranks (uneven splits, through
   ``_functional_collectives.all_to_all_single_autograd``) on ``ep``;
3. the local experts, then ``all_to_all_single`` of their outputs back (splits reversed) on ``ep``;
4. backward: two more ``all_to_all_single`` on ``ep`` (the gradients of steps 2 and 3);
5. one all-reduce of the flattened expert gradients on ``dp`` (the ranks holding the same experts)
   and one of the flattened router gradients on the default group (every rank), as expert-parallel
   training does; then SGD.
"""

from __future__ import annotations

from types import ModuleType

from timeline.capture.jobs.base import Training, mesh_2d, torch_module

__all__ = ["setup_expert"]

_WIDTH = 32
_HIDDEN = 64
_LOCAL_EXPERTS = 2
_TOKENS = 32


def setup_expert(torch: ModuleType, *, rank: int, world_size: int, seed: int) -> Training:
    """Build this rank's router and experts on a ``("dp", "ep")`` mesh; return its training step.

    The ``expert`` job's :class:`~timeline.capture.jobs.base.JobSetup`. Seeds: the router ``seed``
    (every rank), the experts ``seed + 1 + ep rank`` (the same on the ranks of one ``dp`` group),
    the tokens ``seed + 100 + rank``. The returned training's model is a module holding the router
    and the local experts.
    """
    mesh = mesh_2d(torch, world_size=world_size, names=("dp", "ep"))
    dist = torch.distributed
    exchange = torch_module("torch.distributed._functional_collectives").all_to_all_single_autograd
    ep_group, dp_group = mesh.get_group("ep"), mesh.get_group("dp")
    ep_size = world_size // 2
    nn = torch.nn
    torch.manual_seed(seed)
    router = nn.Linear(_WIDTH, ep_size * _LOCAL_EXPERTS)
    torch.manual_seed(seed + 1 + mesh["ep"].get_local_rank())
    experts = nn.ModuleList(
        nn.Sequential(nn.Linear(_WIDTH, _HIDDEN), nn.ReLU(), nn.Linear(_HIDDEN, _WIDTH))
        for _ in range(_LOCAL_EXPERTS)
    )
    optimizer = torch.optim.SGD([*router.parameters(), *experts.parameters()], lr=0.01)
    tokens = torch.randn(_TOKENS, _WIDTH, generator=torch.Generator().manual_seed(seed + 100 + rank))
    flatten = torch_module("torch._utils")

    def all_reduce_grads(params: list[object], group: object) -> None:
        grads = [p.grad for p in params]  # type: ignore[attr-defined]  # torch parameters
        flat = flatten._flatten_dense_tensors(grads)
        dist.all_reduce(flat, group=group)
        for grad, reduced in zip(grads, flatten._unflatten_dense_tensors(flat, grads), strict=True):
            grad.copy_(reduced)

    def step(i: int) -> None:
        del i  # one fixed batch
        optimizer.zero_grad(set_to_none=True)
        logits = router(tokens)
        choice = logits.argmax(dim=1)  # the expert of each token, numbered across the ep group
        order = torch.argsort(choice, stable=True)
        weight = torch.softmax(logits, dim=1).gather(1, choice[:, None])
        sent = (tokens * weight)[order]
        per_expert = torch.bincount(choice, minlength=ep_size * _LOCAL_EXPERTS)
        got_per_expert = torch.empty_like(per_expert)
        dist.all_to_all_single(got_per_expert, per_expert, group=ep_group)
        send_splits = per_expert.view(ep_size, _LOCAL_EXPERTS).sum(dim=1).tolist()
        got_counts = got_per_expert.view(ep_size, _LOCAL_EXPERTS)
        recv_splits = got_counts.sum(dim=1).tolist()
        received = exchange(sent, recv_splits, send_splits, ep_group)
        outputs = []
        for source, chunk in enumerate(received.split(recv_splits)):
            pieces = chunk.split(got_counts[source].tolist())
            outputs += [expert(piece) for expert, piece in zip(experts, pieces, strict=True)]
        returned = exchange(torch.cat(outputs), send_splits, recv_splits, ep_group)
        combined = torch.empty_like(returned).index_copy(0, order, returned)
        combined.pow(2).mean().backward()
        all_reduce_grads(list(experts.parameters()), dp_group)
        all_reduce_grads(list(router.parameters()), None)
        optimizer.step()

    return Training(step=step, model=nn.ModuleDict({"router": router, "experts": experts}))
