"""Properties every policy's decisions keep, on random small clusters, queues and jobs.

The snapshots are built the way the server builds them: running jobs hold placements
that ``place_gang`` produced and ``FreeResources.reserve`` accepted, so they never
overlap; some are stopping, some elastic. Each property is one clause of the contract
in ``mlyard.scheduler``'s docstring, of a policy's description in ``policies.py`` (who may
preempt whom), or of ``place_gang``'s (a gang that can be packed is placed). A sequence of
rounds feeds each round's decisions into the next snapshot the way the controller does.
"""

from __future__ import annotations

import copy
import math
import pickle
import random
import re
from bisect import bisect_right
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace

import pytest
from factories import GIB, cpu_fits, node, running_job
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from mlyard.scheduler import (
    POLICIES,
    UNLIMITED,
    Amounts,
    ClusterSnapshot,
    Decisions,
    FreeResources,
    Node,
    PendingJob,
    Queue,
    ReplicaPlacement,
    ReplicaRequest,
    RunningJob,
    SchedulerConfig,
    decide,
    cycle,
    place_gang,
    unschedulable_reason,
)

MODELS = ("A100", "H100")
QUEUE_NAMES = ("default", "research", "prod")
USERS = ("ana", "ben", "cy")
ROUNDS = 20

# No shrinking: on these nested worlds it runs into Hypothesis' five-minute cap and the suite's
# 300 s timeout. A failure reports its snapshot compactly instead (see ``checked``), with a
# reproduce blob, so no example database is kept either. Derandomized: the suite's verdict is the
# same on every run; exploring further is a matter of raising max_examples locally.
SINGLE = settings(
    max_examples=70, deadline=None, database=None, print_blob=True, derandomize=True,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
MULTI = settings(SINGLE, max_examples=12)


# ----------------------------------------------------------------- strategies
@st.composite
def clusters(draw) -> tuple[Node, ...]:
    count = draw(st.integers(1, 6))
    racked = draw(st.booleans())
    nodes = []
    for position in draw(st.permutations(range(count))):
        gpus = draw(st.integers(0, 8))
        cores = draw(st.integers(1, 16))
        # Ids need not start at 0 nor come sorted: the OS numbers them.
        first_core = draw(st.integers(0, 2))
        cpu_ids = tuple(range(first_core, first_core + cores))
        if draw(st.booleans()):
            cpu_ids = cpu_ids[::-1]
        labels = {"rack": draw(st.sampled_from(("r1", "r2", "r3")))} if racked else {}
        model = draw(st.sampled_from(("", *MODELS))) if gpus else ""
        nodes.append(Node(f"n{position}", f"n{position}.local", cpu_ids, draw(st.integers(2, 64)) * GIB,
                          tuple(range(gpus)), labels, model))
    return tuple(nodes)


@st.composite
def shapes(draw) -> tuple[int, float, int, tuple[str, ...]]:
    """(gpus, cpu, memory bytes, accepted GPU models) of one replica."""
    gpu = draw(st.integers(0, 4))
    cpu = draw(st.sampled_from((0, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4)))
    memory = draw(st.integers(0, 16)) * GIB // 2
    models = draw(st.sampled_from(((), (), ("A100",), ("H100",), MODELS))) if gpu else ()
    return gpu, cpu, memory, models


@st.composite
def gangs(draw, most: int = 4) -> tuple[ReplicaRequest, ...]:
    count = draw(st.integers(1, most))
    if draw(st.booleans()):
        shape = draw(shapes())
        return tuple(ReplicaRequest("worker", i, shape[1], shape[2], shape[0], shape[3]) for i in range(count))
    # A mixed gang: a chief and workers, each of its own size.
    replicas = []
    for i in range(count):
        gpu, cpu, memory, models = draw(shapes())
        role, index = ("chief", 0) if i == 0 else ("worker", i - 1)
        replicas.append(ReplicaRequest(role, index, cpu, memory, gpu, models))
    return tuple(replicas)


def constraints() -> st.SearchStrategy[tuple[bool, str | None]]:
    """(same_node, same_topology) of a job: mostly none."""
    return st.sampled_from(((False, None),) * 4 + ((True, None), (False, "rack"), (True, "rack")))


@st.composite
def queue_sets(draw) -> tuple[Queue, ...]:
    def optional(top: int):
        return st.one_of(st.none(), st.integers(0, top))

    queues = []
    for name in draw(st.lists(st.sampled_from(QUEUE_NAMES), unique=True, max_size=3)):
        quota = draw(st.one_of(st.none(), st.builds(
            lambda gpu, cpu: Amounts.limit(gpu=gpu, cpu=cpu), optional(16), optional(32))))
        borrow = draw(st.one_of(st.none(), st.builds(
            lambda gpu, cpu: Amounts.limit(gpu=gpu, cpu=cpu), optional(8), optional(16))))
        queues.append(Queue(name, quota=quota, borrow_limit=borrow, weight=draw(st.sampled_from((0.5, 1.0, 2.0)))))
    return tuple(queues)


@dataclass
class JobRecord:
    """What the simulated server knows of a job across rounds: its full replica list."""

    job_id: int
    replicas: tuple[ReplicaRequest, ...]
    queue: str
    priority: int
    user: str
    submitted_at: float
    max_runtime: float | None
    expected_duration: float | None
    min_replicas: int | None
    arrives: int = 0
    same_node: bool = False
    same_topology: str | None = None


@dataclass
class World:
    nodes: tuple[Node, ...]
    queues: tuple[Queue, ...]
    now: float
    running: list[RunningJob]
    pending: list[PendingJob]
    records: dict[int, JobRecord] = field(default_factory=dict)


def _times(draw, now: float) -> tuple[float, float | None, float | None]:
    submitted = float(draw(st.integers(0, int(now))))
    max_runtime = draw(st.one_of(st.none(), st.integers(60, 50_000).map(float)))
    expected = draw(st.one_of(st.none(), st.integers(30, 50_000).map(float)))
    return submitted, max_runtime, expected


@st.composite
def worlds(draw, pending_most: int = 8, pending_least: int = 0) -> World:
    nodes = draw(clusters())
    queues = draw(queue_sets())
    now = float(draw(st.integers(0, 200_000)))
    free = FreeResources.from_nodes(nodes)
    topology = draw(st.sampled_from(("rack", "")))
    records: dict[int, JobRecord] = {}
    running = []
    # More attempts than fit, so clusters are often full and pending jobs must preempt.
    for job_id in range(1, draw(st.integers(0, 10)) + 1):
        replicas = draw(gangs())
        min_replicas = draw(st.integers(1, len(replicas))) if draw(st.booleans()) else None
        current = len(replicas) if min_replicas is None else draw(st.integers(min_replicas, len(replicas)))
        same_node, same_topology = draw(constraints())
        placements = place_gang(free, replicas[:current], topology_key=topology, same_node=same_node,
                                same_topology=same_topology)
        if placements is None:
            continue
        free.reserve(placements)
        submitted, max_runtime, expected = _times(draw, now)
        started = float(draw(st.integers(int(submitted), int(now))))
        record = JobRecord(job_id, replicas, draw(st.sampled_from(QUEUE_NAMES)), draw(st.integers(-2, 2)),
                           draw(st.sampled_from(USERS)), submitted, max_runtime, expected, min_replicas,
                           same_node=same_node, same_topology=same_topology)
        records[job_id] = record
        running.append(RunningJob(
            job_id, placements, record.queue, record.priority, started, submitted, record.user,
            attained_service=float(draw(st.integers(0, 60_000))), attained_time=float(draw(st.integers(0, 20_000))),
            max_runtime=max_runtime, expected_duration=expected,
            stopping=draw(st.integers(0, 4)) == 0, min_replicas=min_replicas,
            grow_replicas=replicas[current:] if min_replicas is not None else (),
            same_node=same_node, same_topology=same_topology, preemptions=draw(st.integers(0, 3)),
        ))
    pending = []
    for job_id in range(100, 100 + draw(st.integers(pending_least, pending_most))):
        replicas = draw(gangs())
        min_replicas = draw(st.integers(1, len(replicas))) if len(replicas) > 1 and draw(st.booleans()) else None
        submitted, max_runtime, expected = _times(draw, now)
        attained_time = float(draw(st.integers(0, 20_000)))
        record = JobRecord(job_id, replicas, draw(st.sampled_from(QUEUE_NAMES)), draw(st.integers(-2, 2)),
                           draw(st.sampled_from(USERS)), submitted, max_runtime, expected, min_replicas,
                           arrives=draw(st.integers(0, ROUNDS - 1)))
        record.same_node, record.same_topology = draw(constraints())
        records[job_id] = record
        queued_since = float(draw(st.integers(int(submitted), int(now)))) if attained_time else None
        pending.append(PendingJob(
            job_id, submitted, replicas, record.queue, record.priority, record.user,
            attained_service=float(draw(st.integers(0, 60_000))) if attained_time else 0.0,
            attained_time=attained_time, queued_since=queued_since,
            max_runtime=max_runtime, expected_duration=expected, min_replicas=min_replicas,
            same_node=record.same_node, same_topology=record.same_topology,
        ))
    return World(nodes, queues, now, running, pending, records)


@st.composite
def configs(draw, policy: str) -> SchedulerConfig:
    return SchedulerConfig(
        policy=policy,
        explain=draw(st.integers(0, 4)) > 0,
        fair_share=draw(st.booleans()),
        topology_key=draw(st.sampled_from(("rack", ""))),
        min_run_before_preempt=float(draw(st.sampled_from((0, 300, 5_000)))),
        preemption_budget=draw(st.sampled_from((None, 0, 1, 3))),
        balanced_margin=draw(st.sampled_from((1, 2))),
    )


# ----------------------------------------------------------------- properties
def cores_held(placement: ReplicaPlacement) -> float:
    return placement.cpu_millicores / 1000 if placement.cpu_millicores else len(placement.cpu_ids)


def held(placements) -> Amounts:
    return Amounts(float(sum(len(p.gpu_ids) for p in placements)), float(sum(cores_held(p) for p in placements)),
                   float(sum(p.memory_bytes for p in placements)))


def grown_placements(snapshot: ClusterSnapshot, decisions: Decisions) -> dict[int, tuple[ReplicaPlacement, ...]]:
    """The placements each resize adds on top of what its job already holds (empty for a shrink)."""
    running = {run.job_id: run for run in snapshot.running}
    added = {}
    for resize in decisions.resizes:
        before = running[resize.job_id].placements
        added[resize.job_id] = resize.placements[len(before):] if len(resize.placements) > len(before) else ()
    return added


def assert_matches(replica: ReplicaRequest, placement: ReplicaPlacement, node: Node, owner: str) -> None:
    assert (placement.role, placement.index) == (replica.role, replica.index), f"{owner}: replicas out of order"
    assert placement.cpu_millicores == replica.millicores, f"{owner}: share of a core"
    cores = 1 if replica.millicores else replica.cores  # a share names its one core
    assert len(placement.cpu_ids) == len(set(placement.cpu_ids)) == cores, f"{owner}: core count"
    assert len(placement.gpu_ids) == len(set(placement.gpu_ids)) == replica.gpu, f"{owner}: GPU count"
    assert placement.memory_bytes == replica.memory_bytes, f"{owner}: memory"
    if replica.gpu and replica.gpu_models:
        assert node.gpu_model in replica.gpu_models, f"{owner}: GPU model {node.gpu_model!r} on {node.name}"


def assert_no_overcommit(snapshot: ClusterSnapshot, decisions: Decisions, now: float = 0.0) -> None:
    """(a) Running jobs (victims and stopping ones included: they still hold everything)
    plus every start and every resize's new replicas share no core or GPU and fit in memory;
    a core is either one replica's whole or shared, by shares that add up to one core at most."""
    nodes = {node.name: node for node in snapshot.nodes}
    owners: dict[tuple[str, str, int], str] = {}
    memory: Counter[str] = Counter()
    shares: Counter[tuple[str, int]] = Counter()

    def hold(placement: ReplicaPlacement, owner: str) -> None:
        node = nodes.get(placement.node)
        assert node is not None, f"{owner} placed on unknown node {placement.node}"
        whole = placement.cpu_ids
        if placement.cpu_millicores:
            whole = ()
            (core,) = placement.cpu_ids
            assert core in node.cpu_ids, f"{owner}: core {core} does not exist on {node.name}"
            assert (node.name, "core", core) not in owners, \
                f"core {core} on {node.name} is {owners.get((node.name, 'core', core))}'s whole and shared by {owner}"
            shares[(node.name, core)] += placement.cpu_millicores
            assert shares[(node.name, core)] <= 1000, f"core {core} on {node.name} over-committed by {owner}"
        for kind, ids, exists in (("core", whole, node.cpu_ids), ("GPU", placement.gpu_ids, node.gpu_ids)):
            for resource_id in ids:
                assert resource_id in exists, f"{owner}: {kind} {resource_id} does not exist on {node.name}"
                key = (node.name, kind, resource_id)
                assert key not in owners, f"{kind} {resource_id} on {node.name} given to {owners.get(key)} and {owner}"
                assert kind == "GPU" or (node.name, resource_id) not in shares, \
                    f"core {resource_id} on {node.name} is shared and {owner}'s whole"
                owners[key] = owner
        memory[node.name] += placement.memory_bytes

    for run in snapshot.running:
        for placement in run.placements:
            hold(placement, f"running job {run.job_id}")
    for start in decisions.starts:
        for placement in start.placements:
            hold(placement, f"started job {start.job_id}")
    for job_id, added in grown_placements(snapshot, decisions).items():
        for placement in added:
            hold(placement, f"grown job {job_id}")
    for name, used in memory.items():
        assert used <= nodes[name].memory_bytes, f"node {name}: {used} bytes of memory handed out"


def assert_whole_gangs(snapshot: ClusterSnapshot, decisions: Decisions, now: float = 0.0) -> None:
    """(b) A start is the job's replicas in order (elastic: a prefix of at least min_replicas),
    each with exactly the cores, GPUs and memory it asked for, on a GPU model it accepts."""
    pending = {job.job_id: job for job in snapshot.pending}
    nodes = {node.name: node for node in snapshot.nodes}
    started = [start.job_id for start in decisions.starts]
    assert len(started) == len(set(started)), f"a job started twice: {started}"
    for start in decisions.starts:
        assert start.job_id in pending, f"started job {start.job_id} is not pending"
        job = pending[start.job_id]
        count = len(start.placements)
        if job.min_replicas is None:
            assert count == len(job.replicas), f"job {job.job_id}: {count} of {len(job.replicas)} replicas started"
        else:
            assert job.min_replicas <= count <= len(job.replicas), f"elastic job {job.job_id}: {count} replicas"
        for replica, placement in zip(job.replicas, start.placements, strict=False):
            assert_matches(replica, placement, nodes[placement.node], f"started job {job.job_id}")
        assert_constraint(job, start.placements, nodes, f"started job {job.job_id}")


def assert_constraint(job: PendingJob | RunningJob, placements, nodes: dict[str, Node], owner: str) -> None:
    """The placements keep the job's constraints: one node, or one value of the label."""
    if job.same_node:
        assert len({p.node for p in placements}) <= 1, f"{owner}: same_node on {[p.node for p in placements]}"
    if job.same_topology:
        values = [nodes[p.node].labels.get(job.same_topology) for p in placements]
        assert None not in values and len(set(values)) <= 1, f"{owner}: {job.same_topology} values {values}"


def assert_quotas(snapshot: ClusterSnapshot, decisions: Decisions, now: float = 0.0) -> None:
    """(c) What each queue holds once the starts and growths are added stays within
    quota plus borrowing limit; a queue already beyond it gets nothing more."""
    queues = {queue.name: queue for queue in snapshot.queues}
    queue_of = {job.job_id: job.queue for job in (*snapshot.running, *snapshot.pending)}
    before: dict[str, Amounts] = defaultdict(Amounts)
    for run in snapshot.running:
        before[run.queue] += held(run.placements)
    after = dict(before)
    for start in decisions.starts:
        after[queue_of[start.job_id]] = after.get(queue_of[start.job_id], Amounts()) + held(start.placements)
    for job_id, added in grown_placements(snapshot, decisions).items():
        after[queue_of[job_id]] = after.get(queue_of[job_id], Amounts()) + held(added)
    for name, total in after.items():
        ceiling = queues[name].ceiling if name in queues else UNLIMITED
        previous = before.get(name, Amounts())
        if previous.fits_in(ceiling):
            assert total.fits_in(ceiling), f"queue {name} holds {total} after the round, ceiling {ceiling}"
        else:
            assert total == previous, f"queue {name} was past its ceiling {ceiling} and still got more: {total}"


def assert_victims(snapshot: ClusterSnapshot, decisions: Decisions, now: float = 0.0) -> None:
    """(d) Preempted and resized jobs are running, not stopping, each named once; a
    preemption frees capacity for a pending job that waits for it; a resize keeps a
    prefix of at least min_replicas or adds the job's next grow_replicas."""
    running = {run.job_id: run for run in snapshot.running}
    pending = {job.job_id: job for job in snapshot.pending}
    nodes = {node.name: node for node in snapshot.nodes}
    started = {start.job_id for start in decisions.starts}
    preempted = [p.job_id for p in decisions.preemptions]
    resized = [r.job_id for r in decisions.resizes]
    assert len(preempted) == len(set(preempted)), f"preempted twice: {preempted}"
    assert len(resized) == len(set(resized)), f"resized twice: {resized}"
    assert not set(preempted) & set(resized), f"both preempted and resized: {set(preempted) & set(resized)}"
    for job_id in (*preempted, *resized):
        assert job_id in running, f"job {job_id} is preempted or resized but not running"
        assert not running[job_id].stopping, f"job {job_id} is preempted or resized while stopping"
    for preemption in decisions.preemptions:
        assert preemption.reason
        if preemption.for_job is not None:
            assert preemption.for_job in pending, f"preempted for unknown job {preemption.for_job}"
            assert preemption.for_job not in started, f"job {preemption.for_job} started before its victims stopped"
        # The reason is shown to the victim's owner: every job it names is the one it stops for.
        named = {int(job_id) for job_id in re.findall(r"\bjob (\d+)", preemption.reason)}
        assert named <= {preemption.for_job}, f"job {preemption.job_id}: {preemption.reason!r}"
    for resize in decisions.resizes:
        run = running[resize.job_id]
        assert run.min_replicas is not None, f"job {run.job_id} is not elastic but was resized"
        assert resize.reason
        count, now_held = len(resize.placements), len(run.placements)
        if count < now_held:
            assert count >= run.min_replicas, f"job {run.job_id} shrunk below min_replicas to {count}"
            assert resize.placements == run.placements[:count], f"job {run.job_id}: shrink is not a prefix"
            named = {int(job_id) for job_id in re.findall(r"\bjob (\d+)", resize.reason)}
            assert len(named) <= 1 and not named & started and named <= set(pending), \
                f"job {run.job_id}: {resize.reason!r}"
        else:
            assert count > now_held, f"job {run.job_id}: a resize that changes nothing"
            assert resize.placements[:now_held] == run.placements, f"job {run.job_id}: grew by moving replicas"
            extra = resize.placements[now_held:]
            assert len(extra) <= len(run.grow_replicas), f"job {run.job_id} grew past its grow_replicas"
            for replica, placement in zip(run.grow_replicas, extra, strict=False):
                assert_matches(replica, placement, nodes[placement.node], f"grown job {run.job_id}")
            assert_constraint(run, resize.placements, nodes, f"grown job {run.job_id}")


def _classes(policy: str, config: SchedulerConfig, job: PendingJob, run: RunningJob, now: float):
    """(pending class, running class) as the policies document them; lower is more important."""
    gpus = sum(replica.gpu for replica in job.smallest_gang)
    job_rate = gpus or sum(replica.cores + replica.millicores / 1000 for replica in job.smallest_gang) or 1
    run_rate = held(run.placements).gpu or held(run.placements).cpu or 1
    ran = max(0.0, now - run.started_at)
    if policy == "priority":
        return -job.priority, -run.priority
    if policy == "srtf-oracle":
        mine = math.inf if job.expected_duration is None else \
            job_rate * max(0.0, job.expected_duration - job.attained_time)
        theirs = math.inf if run.expected_duration is None else \
            run_rate * max(0.0, run.expected_duration - run.attained_time - ran)
        return mine, theirs
    if policy == "las":
        thresholds = config.las_thresholds
    else:
        thresholds = [config.balanced_base * config.balanced_ratio**k for k in range(config.balanced_levels - 1)]
    waited = now - job.waiting_since
    starving = job.attained_time > 0 and waited >= max(config.starvation_min_wait,
                                                       config.starvation_factor * job.attained_time)
    mine = 0 if starving else bisect_right(thresholds, job.attained_service)
    return mine, bisect_right(thresholds, run.attained_service + run_rate * ran)


def assert_preemptions_justified(snapshot: ClusterSnapshot, decisions: Decisions, now: float) -> None:
    """A victim is one the policy ranks below the job it is preempted for and that is still
    within its preemption budget (``balanced``: ``balanced_margin`` levels below it, and has
    run ``min_run_before_preempt``; from another queue with a quota: only while that queue is
    over it), or a job of another queue that borrows beyond its
    quota while the job's own queue has a quota to reclaim."""
    config = snapshot.config
    running = {run.job_id: run for run in snapshot.running}
    pending = {job.job_id: job for job in snapshot.pending}
    queues = {queue.name: queue for queue in snapshot.queues}
    usage: dict[str, Amounts] = defaultdict(Amounts)
    for run in snapshot.running:
        usage[run.queue] += held(run.placements)
    for start in decisions.starts:
        usage[pending[start.job_id].queue] += held(start.placements)
    for preemption in decisions.preemptions:
        run, job = running[preemption.job_id], pending.get(preemption.for_job)
        assert job is not None, f"job {run.job_id} preempted for no pending job"
        theirs = queues.get(run.queue)
        reclaim = (
            run.queue != job.queue and job.queue in queues and queues[job.queue].quota is not None
            and theirs is not None and (theirs.quota is not None or theirs.borrow_limit is not None)
            and not usage[run.queue].fits_in(theirs.nominal)
        )
        ranked = False
        if config.policy not in ("fifo", "backfill"):
            mine, their_class = _classes(config.policy, config, job, run, now)
            ranked = their_class > mine
            if config.policy == "balanced":
                ranked = (their_class >= mine + config.balanced_margin
                          and now - run.started_at >= config.min_run_before_preempt)
            budget = config.preemption_budget
            ranked = ranked and (budget is None or run.preemptions < budget)
            if run.queue != job.queue and theirs is not None and theirs.quota is not None:
                ranked = ranked and not usage[run.queue].fits_in(theirs.nominal)  # its quota is guaranteed
        assert reclaim or ranked, f"job {run.job_id} preempted for job {job.job_id} without cause: {preemption.reason}"


def assert_work_conserving(snapshot: ClusterSnapshot, decisions: Decisions, now: float = 0.0) -> None:
    """Under the non-strict policies, a job its queue has room for and whose gang fits
    what the round leaves idle does not wait. Only checked when nothing is stopping or
    being preempted: then no spot is held back for a job that waits for others to stop."""
    if snapshot.config.policy in ("fifo", "backfill") or decisions.preemptions or decisions.resizes:
        return
    if any(run.stopping for run in snapshot.running):
        return
    free = FreeResources.from_nodes(snapshot.nodes)
    for placements in (*(run.placements for run in snapshot.running), *(s.placements for s in decisions.starts)):
        free.reserve(placements)
    queues = {queue.name: queue for queue in snapshot.queues}
    usage: dict[str, Amounts] = defaultdict(Amounts)
    pending = {job.job_id: job for job in snapshot.pending}
    for run in snapshot.running:
        usage[run.queue] += held(run.placements)
    for start in decisions.starts:
        usage[pending[start.job_id].queue] += held(start.placements)
    started = {start.job_id for start in decisions.starts}
    for job in snapshot.pending:
        if job.job_id in started:
            continue
        gang = job.smallest_gang
        demand = Amounts(float(sum(r.gpu for r in gang)), float(sum(r.cores + r.millicores / 1000 for r in gang)),
                         float(sum(r.memory_bytes for r in gang)))
        ceiling = queues[job.queue].ceiling if job.queue in queues else UNLIMITED
        if not (usage[job.queue] + demand).fits_in(ceiling):
            continue
        fits = place_gang(free, gang, topology_key=snapshot.config.topology_key, same_node=job.same_node,
                          same_topology=job.same_topology)
        assert fits is None, f"job {job.job_id} waits ({decisions.waiting.get(job.job_id)}) but fits idle capacity"


def assert_explained(snapshot: ClusterSnapshot, decisions: Decisions, now: float = 0.0) -> None:
    """(e) Every pending job that does not start says why; a started one does not."""
    started = {start.job_id for start in decisions.starts}
    if not snapshot.config.explain:
        assert decisions.waiting == {}
        return
    for job in snapshot.pending:
        if job.job_id in started:
            assert job.job_id not in decisions.waiting, f"job {job.job_id} started and waits"
        else:
            reason = decisions.waiting.get(job.job_id)
            assert isinstance(reason, str) and reason.strip(), f"job {job.job_id} waits without a reason"
            assert "\n" not in reason


def assert_round(snapshot: ClusterSnapshot, decisions: Decisions, now: float = 0.0) -> None:
    assert_no_overcommit(snapshot, decisions)
    assert_whole_gangs(snapshot, decisions)
    assert_quotas(snapshot, decisions)
    assert_victims(snapshot, decisions)
    assert_explained(snapshot, decisions)


def _gib(size: float) -> str:
    return f"{size / GIB:g}G"


def describe(snapshot: ClusterSnapshot, now: float, decisions: Decisions) -> str:
    """The snapshot and decisions in a few lines per job, for failure messages."""
    config = snapshot.config
    lines = [(f"now={now:g} policy={config.policy} explain={config.explain} fair_share={config.fair_share} "
              f"topology_key={config.topology_key!r} min_run_before_preempt={config.min_run_before_preempt:g}")]
    for item in snapshot.nodes:
        lines.append(f"node {item.name}: {len(item.gpu_ids)} GPUs {item.gpu_model or '-'}, {len(item.cpu_ids)} cores, "
                     f"{_gib(item.memory_bytes)}, labels {dict(item.labels)}")
    for queue in snapshot.queues:
        lines.append(f"queue {queue.name}: quota {queue.quota}, borrow_limit {queue.borrow_limit}, "
                     f"weight {queue.weight:g}")
    for run in snapshot.running:
        held_text = ", ".join(f"{p.node}[gpus {p.gpu_ids} cores {p.cpu_ids} {_gib(p.memory_bytes)}]"
                              for p in run.placements)
        lines.append(f"running {run.job_id} queue={run.queue} priority={run.priority} started={run.started_at:g} "
                     f"service={run.attained_service:g} stopping={run.stopping} min_replicas={run.min_replicas} "
                     f"grow={len(run.grow_replicas)}: {held_text}")
    for job in snapshot.pending:
        wants = ", ".join(f"{r.gpu} GPUs{' ' + '|'.join(r.gpu_models) if r.gpu_models else ''} {r.cores} cores "
                          f"{_gib(r.memory_bytes)}" for r in job.replicas)
        lines.append(f"pending {job.job_id} queue={job.queue} priority={job.priority} submitted={job.submitted_at:g} "
                     f"service={job.attained_service:g} ran={job.attained_time:g} min_replicas={job.min_replicas}: "
                     f"{wants}")
    for start in decisions.starts:
        lines.append(f"-> start {start.job_id}: " + ", ".join(
            f"{p.node}[gpus {p.gpu_ids} cores {p.cpu_ids}]" for p in start.placements))
    lines += [f"-> preempt {p.job_id} for {p.for_job}: {p.reason}" for p in decisions.preemptions]
    lines += [f"-> resize {r.job_id} to {len(r.placements)}: {r.reason}" for r in decisions.resizes]
    lines += [f"-> {job_id} waits: {reason}" for job_id, reason in sorted(decisions.waiting.items())]
    return "\n".join(lines)


def checked(snapshot: ClusterSnapshot, now: float, decisions: Decisions, *checks, label: str = "") -> None:
    """Run ``check(snapshot, decisions, now)`` for each check; a failure carries the whole
    round so it can be rebuilt by hand."""
    try:
        for check in checks:
            check(snapshot, decisions, now)
    except AssertionError as failure:
        raise AssertionError(f"{label}{failure}\n{describe(snapshot, now, decisions)}") from None


def snapshot_of(world: World, config: SchedulerConfig) -> ClusterSnapshot:
    return ClusterSnapshot(world.nodes, tuple(world.running), tuple(world.pending), world.queues, config)


# ----------------------------------------------------------------- tests
@pytest.mark.parametrize("policy", POLICIES)
@SINGLE
@given(data=st.data())
def test_one_round_keeps_the_contract(policy: str, data) -> None:
    world = data.draw(worlds(), label="world")
    snapshot = snapshot_of(world, data.draw(configs(policy), label="config"))
    decisions = decide(snapshot, world.now)
    checked(snapshot, world.now, decisions, assert_round, assert_preemptions_justified, assert_work_conserving)


@pytest.mark.parametrize("policy", POLICIES)
@settings(SINGLE, max_examples=25)
@given(data=st.data())
def test_decisions_are_deterministic_and_leave_the_input_alone(policy: str, data) -> None:
    world = data.draw(worlds(), label="world")
    snapshot = snapshot_of(world, data.draw(configs(policy), label="config"))
    pristine = copy.deepcopy(snapshot)
    first = decide(snapshot, world.now)
    assert snapshot == pristine
    assert decide(snapshot, world.now) == first
    # A copy that shares no objects with the original (ids, caches) decides the same.
    assert decide(pickle.loads(pickle.dumps(snapshot)), world.now) == first
    # The order the caller lists nodes and pending jobs in is an accident of its storage.
    shuffled = replace(snapshot, nodes=tuple(data.draw(st.permutations(snapshot.nodes), label="node order")),
                       pending=tuple(data.draw(st.permutations(snapshot.pending), label="pending order")))
    again = decide(shuffled, world.now)
    assert (again.starts, again.preemptions, again.resizes) == (first.starts, first.preemptions, first.resizes)


@pytest.mark.parametrize("policy", POLICIES)
@settings(SINGLE, max_examples=30)
@given(data=st.data())
def test_settling_alike_jobs_in_bulk_changes_no_decision(policy: str, data) -> None:
    """Copies of each pending job (same gang, queue and class) exercise the round's fast path,
    which must decide and explain exactly like the plain walk, job by job."""
    world = data.draw(worlds(pending_least=1), label="world")
    copies = data.draw(st.integers(2, 5), label="copies")
    pending = [replace(job, job_id=job.job_id + 1_000 * copy, submitted_at=job.submitted_at + copy)
               for job in world.pending for copy in range(copies)]
    snapshot = replace(snapshot_of(world, data.draw(configs(policy), label="config")), pending=tuple(pending))
    fast = decide(snapshot, world.now)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cycle, "FAST_PATH", False)
        slow = decide(snapshot, world.now)
    assert fast == slow
    assert list(fast.waiting.items()) == list(slow.waiting.items())


def _requeue(record: JobRecord, run: RunningJob, now: float) -> PendingJob:
    rate = sum(len(p.gpu_ids) for p in run.placements) or sum(cores_held(p) for p in run.placements) or 1
    ran = max(0.0, now - run.started_at)
    return PendingJob(
        record.job_id, record.submitted_at, record.replicas, record.queue, record.priority, record.user,
        attained_service=run.attained_service + rate * ran, attained_time=run.attained_time + ran,
        queued_since=now, max_runtime=record.max_runtime, expected_duration=record.expected_duration,
        min_replicas=record.min_replicas, same_node=record.same_node, same_topology=record.same_topology,
    )


def _finished(run: RunningJob, now: float, rng: random.Random) -> bool:
    ran = run.attained_time + max(0.0, now - run.started_at)
    if run.expected_duration is not None:
        return ran >= run.expected_duration
    return rng.random() < 0.25


@pytest.mark.parametrize("policy", POLICIES)
@MULTI
@given(data=st.data())
def test_rounds_in_sequence_keep_the_contract(policy: str, data) -> None:
    """Starts become running jobs, victims stop over one round and requeue, jobs end and arrive."""
    world = data.draw(worlds(pending_most=16, pending_least=6), label="world")
    config = data.draw(configs(policy), label="config")
    rng = data.draw(st.randoms(use_true_random=False), label="rng")
    steps = data.draw(st.lists(st.integers(30, 3_000), min_size=ROUNDS, max_size=ROUNDS), label="steps")
    records = world.records
    later = sorted((job for job in world.pending if records[job.job_id].arrives > 0), key=lambda job: job.job_id)
    pending = {job.job_id: job for job in world.pending if records[job.job_id].arrives == 0}
    running = {run.job_id: run for run in world.running}
    now = world.now
    requeue: set[int] = set()
    preempted_times = {run.job_id: run.preemptions for run in world.running}
    for round_number in range(ROUNDS):
        for job in later:
            if records[job.job_id].arrives == round_number:
                pending[job.job_id] = replace(job, submitted_at=now, queued_since=None, attained_service=0.0,
                                              attained_time=0.0)
        snapshot = ClusterSnapshot(world.nodes, tuple(running.values()), tuple(pending.values()),
                                   world.queues, config)
        decisions = decide(snapshot, now)
        checked(snapshot, now, decisions, assert_no_overcommit, assert_whole_gangs, assert_quotas, assert_victims,
                assert_preemptions_justified, label=f"round {round_number}: ")

        # Jobs that were stopping have stopped: preempted ones go back to the queue.
        for run in [run for run in running.values() if run.stopping]:
            del running[run.job_id]
            if run.job_id in requeue:
                pending[run.job_id] = _requeue(records[run.job_id], run, now)
        for preemption in decisions.preemptions:
            running[preemption.job_id] = replace(running[preemption.job_id], stopping=True)
            preempted_times[preemption.job_id] = preempted_times.get(preemption.job_id, 0) + 1
        requeue = {preemption.job_id for preemption in decisions.preemptions}
        for resize in decisions.resizes:
            run, record = running[resize.job_id], records[resize.job_id]
            running[resize.job_id] = replace(run, placements=resize.placements,
                                             grow_replicas=record.replicas[len(resize.placements):])
        for start in decisions.starts:
            job, record = pending.pop(start.job_id), records[start.job_id]
            running[start.job_id] = RunningJob(
                start.job_id, start.placements, job.queue, job.priority, now, job.submitted_at, job.user,
                job.attained_service, job.attained_time, job.max_runtime, job.expected_duration,
                min_replicas=job.min_replicas,
                grow_replicas=record.replicas[len(start.placements):] if job.min_replicas is not None else (),
                same_node=job.same_node, same_topology=job.same_topology,
                preemptions=preempted_times.get(start.job_id, 0),
            )
        now += steps[round_number]
        for run in [run for run in running.values() if not run.stopping]:
            if _finished(run, now, rng):
                del running[run.job_id]


def _packing_exists(free: FreeResources, gang: tuple[ReplicaRequest, ...], same_node: bool = False,
                    same_topology: str | None = None) -> bool:
    """Brute force: can each replica go on some node, per-node sums fitting (shares of cores
    packed as ``cpu_fits`` models it), models per replica, constraints kept?"""
    views = free.nodes
    if same_topology:
        views = tuple(view for view in views if same_topology in view.labels)
    rooms = [[len(view.gpu_ids), view, view.memory_bytes, view.gpu_model, []] for view in views]

    def place(position: int) -> bool:
        if position == len(gang):
            return True
        replica = gang[position]
        used = [room for room in rooms if room[4]]
        for room in rooms:
            if replica.gpu and replica.gpu_models and room[3] not in replica.gpu_models:
                continue
            if same_node and used and room is not used[0]:
                continue
            if same_topology and used and room[1].labels[same_topology] != used[0][1].labels[same_topology]:
                continue
            view = room[1]
            if room[0] >= replica.gpu and room[2] >= replica.memory_bytes \
                    and cpu_fits(len(view.cpu_ids), view.shared.values(), [*room[4], replica]):
                room[0] -= replica.gpu
                room[2] -= replica.memory_bytes
                room[4].append(replica)
                found = place(position + 1)
                room[0] += replica.gpu
                room[2] += replica.memory_bytes
                room[4].pop()
                if found:
                    return True
        return False

    return place(0)


@settings(SINGLE, max_examples=120)
@given(data=st.data())
def test_placement_finds_a_packing_whenever_one_exists(data) -> None:
    """On small clusters, empty (the submission check) or partly used, a gang that can be packed
    is placed; GPU models constrain only the replicas that ask for them (``ReplicaRequest``)."""
    world = data.draw(worlds(pending_most=0), label="world")
    gang = data.draw(gangs(), label="gang")
    topology = data.draw(st.sampled_from(("rack", "")), label="topology key")
    same_node, same_topology = data.draw(constraints(), label="constraints")
    if _packing_exists(FreeResources.from_nodes(world.nodes), gang, same_node, same_topology):
        assert unschedulable_reason(world.nodes, gang, same_node=same_node, same_topology=same_topology) is None
    free = FreeResources.from_nodes(world.nodes)
    for run in world.running:
        free.reserve(run.placements)
    placements = place_gang(free, gang, topology_key=topology, same_node=same_node, same_topology=same_topology)
    if _packing_exists(free, gang, same_node, same_topology):
        assert placements is not None, "a packing exists but place_gang found none"
    if placements is not None:
        nodes = {node.name: node for node in world.nodes}
        for replica, placement in zip(gang, placements, strict=True):
            assert_matches(replica, placement, nodes[placement.node], "gang")
        assert_constraint(PendingJob(0, 0.0, gang, same_node=same_node, same_topology=same_topology), placements,
                          nodes, "gang")
        free.reserve(placements)  # raises if anything was not free


# ----------------------------------------------------------------- minimal cases of the clauses above
@pytest.mark.parametrize("policy", POLICIES)
def test_a_victims_queue_does_not_spend_the_quota_its_victim_still_holds(policy: str) -> None:
    """Queue v borrows 4 GPUs up to its ceiling of 4. Job 10 (queue q, within its quota) needs
    an H100 GPU, so v's job 1 is preempted for it; until job 1 has stopped it still holds its
    4 GPUs, so job 11 of queue v may not start on the idle A100 node (v would hold 6 > 4)."""
    nodes = (node("n0", 8, gpus=4, model="H100"), node("n1", 8, gpus=4, model="A100"))
    borrower = running_job(1, "n0", (0,), (0, 1, 2, 3), queue="v", started_at=0.0)
    pending = (PendingJob(10, 5.0, (ReplicaRequest("worker", 0, 1, GIB, 1, ("H100",)),), "q"),
               PendingJob(11, 6.0, (ReplicaRequest("worker", 0, 1, GIB, 2),), "v"))
    queues = (Queue("q", quota=Amounts.limit(gpu=4), borrow_limit=Amounts.limit(gpu=0)),
              Queue("v", quota=Amounts.limit(gpu=0), borrow_limit=Amounts.limit(gpu=4)))
    snapshot = ClusterSnapshot(nodes, (borrower,), pending, queues,
                               SchedulerConfig(policy=policy, min_run_before_preempt=0.0))
    assert_round(snapshot, decide(snapshot, 100_000.0))


def test_a_cpu_only_replica_is_not_held_to_its_siblings_gpu_model() -> None:
    """A parameter server (no GPU) and an A100 worker: the ps fits only the CPU node, the worker
    only the A100 node. ``gpu_models`` constrains only replicas with GPUs, so the gang fits."""
    nodes = (node("cpu", 8), node("gpu", 2, gpus=1, model="A100"))
    gang = (ReplicaRequest("ps", 0, 4, GIB), ReplicaRequest("worker", 0, 1, GIB, 1, ("A100",)))
    assert unschedulable_reason(nodes, gang) is None
    decisions = decide(ClusterSnapshot(nodes, (), (PendingJob(1, 0.0, gang),), (), SchedulerConfig()), 10.0)
    assert [start.job_id for start in decisions.starts] == [1]


def test_replicas_of_one_gang_may_ask_for_different_gpu_models() -> None:
    """Each GPU replica needs a node of a model it accepts, not of one every replica accepts."""
    nodes = (node("a", 2, gpus=1, model="A100"), node("h", 2, gpus=1, model="H100"))
    gang = (ReplicaRequest("worker", 0, 1, GIB, 1, ("A100",)), ReplicaRequest("worker", 1, 1, GIB, 1, ("H100",)))
    assert unschedulable_reason(nodes, gang) is None


def test_a_preemption_names_the_job_it_is_for() -> None:
    """Jobs 10 and 11 rank alike above jobs 1 and 2. Job 10 needs a whole node, which preempting
    never frees here; job 11 needs one GPU and gets job 2's. Job 2's reason names job 11 only."""
    nodes = tuple(node(name, 8, gpus=4) for name in ("n0", "n1"))
    running = (running_job(1, "n0", (0,), (0, 1), priority=0, started_at=10.0),
               running_job(2, "n1", (0,), (0, 1), priority=0, started_at=20.0),
               running_job(3, "n0", (2,), (2, 3), priority=5, started_at=30.0),
               running_job(4, "n1", (2,), (2, 3), priority=5, started_at=40.0))
    pending = (PendingJob(10, 1.0, (ReplicaRequest("worker", 0, 1, GIB, 4),), priority=3),
               PendingJob(11, 2.0, (ReplicaRequest("worker", 0, 1, GIB, 1),), priority=3))
    snapshot = ClusterSnapshot(nodes, running, pending, (), SchedulerConfig(policy="priority"))
    decisions = decide(snapshot, 1_000.0)
    assert [(p.job_id, p.for_job) for p in decisions.preemptions] == [(2, 11)]
    assert_victims(snapshot, decisions)
