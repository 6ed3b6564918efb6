"""How the walk places each kind of plan node: one function per variant.

Why a module of its own: this is where the placement rules meet the plan's
shape, one short function per variant, so a rule is read next to the
variant it concerns; the walk's state and bookkeeping are
:mod:`scheduler.placement.walk`, and picking a worker for a new lane is
:mod:`scheduler.placement.walk_choice`.

- A Sequence's steps share its lane's worker (rule 1: no data moves inside).
- A Parallel gives each branch a worker of its own choosing (rule 2):
  filter by the branch's requirement (its own ``Remote`` target, else the
  one of the ``Remote`` around the Parallel), then rank by spread, free
  slots, capability and id (:mod:`scheduler.placement.scoring`). Each branch holds a
  slot until the parallel ends.
- A differentiable branch or Remote whose input comes from a differentiable
  node is kept on that node's worker (rule 3), unless its target forbids it.
- A Loop's body, a Branch's arms and a Step's handoffs run on their
  controller's worker; a Composite and a Stream run on one worker;
  Parallels and Remotes nested anywhere are placed on their own.
- ``Remote`` targets are hard: a ``Tag`` lands on a worker with the tag, a
  ``WorkerId`` on that worker, or :class:`PlacementError` says why not.
  Everything inside a Remote honours its target, nested Parallels included.
- Study trials go round-robin across the workers with capacity (rule 4).

Data edges follow DESIGN.md's runtime semantics: a Sequence feeds each step
into the next; every branch of a Parallel, every arm of a Branch (and the
Branch's own node) and a Loop's first pass read the input of their parent;
what follows a Parallel or Branch reads every branch's (arm's) terminal
node; a Step feeds its handoffs; Empty passes its input through; a Loop's
later passes read ``carry_from`` wherever the first pass read the Loop's
input (without ``carry_from`` every pass reads the Loop's input again), and
what follows the Loop reads ``carry_from``, else the body's terminal nodes.
Each function returns the nodes its variant's output comes from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scheduler.model.distribution import PARALLEL
from scheduler.model.plan import (
    Branch,
    Composite,
    Empty,
    Execute,
    Loop,
    Parallel,
    PlanNode,
    Remote,
    RemoteTarget,
    Sequence,
    Step,
    Stream,
)
from scheduler.placement.lanes import Ids, Lane, first_id, unique, wants_gpu
from scheduler.placement.scoring import BranchPicker
from scheduler.placement.walk_choice import choose_remote, eligible_group, load_lane, pinned_lane

if TYPE_CHECKING:
    from scheduler.placement.walk import Walk

Handler = Callable[["Walk", Any, Ids, Lane], Ids]


def _execute(walk: Walk, node: Execute, inputs: Ids, lane: Lane) -> Ids:
    node_id = node.node_id
    walk.put(node_id, lane.worker_id, lane.reason)
    if inputs:
        walk.link(inputs, node_id, lane.worker_id)
    return (node_id,)


def _fused(walk: Walk, node: Composite | Stream, inputs: Ids, lane: Lane) -> Ids:
    kind = "composite" if isinstance(node, Composite) else "stream"
    reason = f"{kind} block — one worker, one task ({lane.reason})"
    for node_id in node.node_ids_:
        walk.put(node_id, lane.worker_id, reason)
    walk.link(inputs, node.node_ids_[0], lane.worker_id)
    return (node.node_ids_[-1],)


def _empty(walk: Walk, node: Empty, inputs: Ids, lane: Lane) -> Ids:
    return inputs


def _sequence(walk: Walk, node: Sequence, inputs: Ids, lane: Lane) -> Ids:
    current = inputs
    for step in node.steps:
        current = place(walk, step, current, lane)
    return current


def _step(walk: Walk, node: Step, inputs: Ids, lane: Lane) -> Ids:
    walk.put(node.node_id, lane.worker_id, lane.reason)
    walk.link(inputs, node.node_id, lane.worker_id)
    if not node.handoffs:
        return (node.node_id,)
    outputs = [node.node_id]
    handoff_lane = lane.inner(f"handoff of step '{node.node_id}', on its worker")
    for _, plan in node.handoffs:
        outputs.extend(place(walk, plan, (node.node_id,), handoff_lane))
    return unique(outputs)


def _loop(walk: Walk, node: Loop, inputs: Ids, lane: Lane) -> Ids:
    walk.put(node.node_id, lane.worker_id, "loop controller")
    body_lane = lane.inner(f"body of loop '{node.node_id}', on its controller's worker")
    terminals = place(walk, node.body, inputs, body_lane)
    if node.carry_from is None:
        return terminals  # every pass reads the loop's input again
    carried = (node.carry_from,)
    worker_of = walk.worker_of
    walk.repeats_possible = True
    for entry in walk.front(node.body)[0]:
        walk.link(tuple(c for c in carried if c != entry), entry, worker_of[entry])
    return carried


def _branch(walk: Walk, node: Branch, inputs: Ids, lane: Lane) -> Ids:
    walk.put(node.node_id, lane.worker_id, "branch condition")
    walk.link(inputs, node.node_id, lane.worker_id)
    arm_lane = lane.inner(f"arm of branch '{node.node_id}', on its controller's worker")
    outputs: list[str] = []
    for _, arm in node.arms:
        outputs.extend(place(walk, arm, inputs, arm_lane))
    return unique(outputs)


def _remote(walk: Walk, node: Remote, inputs: Ids, lane: Lane) -> Ids:
    worker_id, reason = choose_remote(walk, node, inputs, lane)
    inner = Lane(worker_id, reason, node.target, lane.holds_slot)
    if worker_id == lane.worker_id or not lane.holds_slot:
        return place(walk, node.plan, inputs, inner)
    # The branch's slot moves to the remote's worker while the remote runs.
    walk.ledger.give_back(lane.worker_id)
    walk.ledger.take(worker_id)
    outputs = place(walk, node.plan, inputs, inner)
    walk.ledger.give_back(worker_id)
    walk.ledger.take(lane.worker_id)
    return outputs


def _parallel(walk: Walk, node: Parallel, inputs: Ids, lane: Lane) -> Ids:
    if not node.branches:
        return inputs
    phases = walk.phases
    phases.enter_parallel()
    if lane.holds_slot:
        walk.ledger.give_back(lane.worker_id)
    picker = BranchPicker(walk.ledger)
    lanes: dict[tuple[str, int, int], Lane] = {}
    # The lane's own group (any Remote around the parallel); Remote branches
    # look up their own.
    group = walk.feasibility.eligible(lane.target)
    outputs: list[str] = []
    branch_workers: list[str] = []
    pinning = bool(walk.differentiable) or walk.keep_on_lane
    for branch in node.branches:
        if isinstance(branch, Remote):
            target: RemoteTarget | None = branch.target
            inner: PlanNode = branch.plan
            branch_group = eligible_group(walk, branch, target)
        else:
            target, inner, branch_group = lane.target, branch, group
        # Rule 3 or a trial may fix the worker; otherwise load decides, and
        # branches on one worker for one reason share a Lane.
        branch_lane = pinned_lane(walk, branch, target, inputs, lane, picker) if pinning else None
        if branch_lane is None:
            worker, free = picker.pick(branch_group, wants_gpu(target))
            branch_lane = lanes.get((worker.id, free, id(branch_group)))
            if branch_lane is None:
                branch_lane = load_lane(worker, free, target, branch_group, lanes)
        branch_workers.append(branch_lane.worker_id)
        if phases.phase is PARALLEL:  # the phase names branch workers at the end
            phases.worker_id = branch_lane.worker_id
        outputs.extend(place(walk, inner, inputs, branch_lane))
    if picker.overflowed:
        walk.warnings.append(
            f"{len(node.branches)} parallel branches (first node "
            f"'{first_id(node)}') outnumber the free slots: {picker.overflowed} "
            "extra branches were spread in proportion to free slots and will queue"
        )
    picker.release_all()
    if lane.holds_slot:
        walk.ledger.take(lane.worker_id)
    phases.leave_parallel(branch_workers)
    return unique(outputs)


#: The placing function for each variant. Plain functions in a module-level
#: table (not bound methods on the walk) so that a walk holds no reference
#: cycle and is freed the moment it is done, without waiting for the garbage
#: collector to look at it.
HANDLERS: dict[type, Handler] = {
    Execute: _execute,
    Sequence: _sequence,
    Parallel: _parallel,
    Step: _step,
    Loop: _loop,
    Branch: _branch,
    Remote: _remote,
    Composite: _fused,
    Stream: _fused,
    Empty: _empty,
}


def place(walk: Walk, node: PlanNode, inputs: Ids, lane: Lane) -> Ids:
    """Place ``node`` reading from ``inputs``; return the nodes its output comes from."""
    return HANDLERS[type(node)](walk, node, inputs, lane)
