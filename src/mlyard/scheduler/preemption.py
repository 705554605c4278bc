"""Finding victims for a blocked job: shrink elastic jobs, preempt lower-ranked ones,
reclaim a queue's quota from borrowers — and never more than the job needs."""

from __future__ import annotations

import math
from collections.abc import Sequence

from .quotas import held_amounts, reclaim_victim_order
from .reasons import count_of, job_list
from .snapshot import Amounts, PendingJob, Preempt, ReplicaRequest, Resize, RunningJob
from .state import RoundState, Victim


def find_victims(state: RoundState, job: PendingJob, klass: float, demand) -> list[Victim]:
    """Candidates in the order they are taken: shrinking elastic jobs first, then
    whole jobs the policy ranks below this one, then quota borrowers to reclaim from."""
    policy, now, config = state.policy, state.now, state.config
    by_policy: list[tuple[tuple[float, ...], RunningJob]] = []
    if policy.preemptive:
        victim_pool(state)
        memo = state.eligible.get(klass)
        if memo is None or memo[0] != len(state.taken):
            memo = (len(state.taken), [(key, run) for key, theirs, run in state.victim_pool
                                       if run.job_id not in state.taken
                                       and policy.may_preempt(klass, run, theirs, now, config)])
            state.eligible[klass] = memo
        by_policy = memo[1]
    whole = [run for _, run in by_policy]
    if config.preemption_budget is not None:
        # Past its budget a job is left alone by the ordering: shrinking is a restart too on a
        # server. A queue reclaiming its quota may still take it (below).
        whole = [run for run in whole if run.preemptions < config.preemption_budget]
    victims: list[Victim] = [
        Victim(run, run.placements[run.min_replicas :], run.placements[: run.min_replicas], "policy")
        for run in whole if run.min_replicas is not None and len(run.placements) > run.min_replicas
    ]
    victims += _whole(state, whole, "policy")
    if state.may_reclaim(job, demand):
        seen = {run.job_id for run in whole}
        if state.reclaim_pool is None:  # borrowers as the round began: victims stay in the book
            state.reclaim_pool = reclaim_victim_order(state.book, state.snapshot.running)
        borrowers = [run for run in state.reclaim_pool
                     if run.job_id not in seen and run.job_id not in state.taken and run.queue != job.queue]
        shrinkable = [Victim(run, run.placements[run.min_replicas :], run.placements[: run.min_replicas], "reclaim")
                      for run in borrowers if run.min_replicas is not None and len(run.placements) > run.min_replicas]
        victims = shrinkable + victims + _whole(state, borrowers, "reclaim")
    return victims


def _whole(state: RoundState, runs: list[RunningJob], why: str) -> list[Victim]:
    """Victims that go whole, one record per running job and reason for the whole round:
    every plan lists hundreds of them again."""
    made = state.whole_victims.setdefault(why, {})
    victims = []
    for run in runs:
        victim = made.get(id(run))
        if victim is None:
            victim = made[id(run)] = Victim(run, run.placements, None, why)
        victims.append(victim)
    return victims


def _held(state: RoundState, run: RunningJob) -> tuple[int, int, int]:
    """(GPUs, cores, memory bytes) ``run`` holds, counted once per round; a share of a core counts
    as the core (what its going may free at most)."""
    held = state.held_by_run.get(id(run))
    if held is None:
        gpus = cores = memory = 0
        for placement in run.placements:
            gpus += len(placement.gpu_ids)
            cores += len(placement.cpu_ids)
            memory += placement.memory_bytes
        held = state.held_by_run[id(run)] = (gpus, cores, memory)
    return held


def victim_pool(state: RoundState) -> list[tuple[tuple[float, ...], float, RunningJob]]:
    """Running jobs that are not stopping, with their class, least important first."""
    if state.victim_pool is None:
        policy = state.policy
        runs = [run for run in state.snapshot.running if not run.stopping]
        classes = policy.running_classes(runs, state.now, state.config)
        pool = [(policy.victim_key(run, theirs), theirs, run) for run, theirs in zip(runs, classes, strict=True)]
        pool.sort(key=lambda item: item[0])
        state.victim_pool = pool
        state.top_victim_class = max((theirs for _, theirs, _ in pool), default=-math.inf)
    return state.victim_pool


def _candidates(state: RoundState, job: PendingJob, klass: float, demand: Amounts,
                reclaim: str | None) -> tuple[list[Victim], list[int]]:
    """``find_victims`` for the job, and what the future view would have free if all of them
    went: worked out again whenever a preemption took victims or changed the future view.

    Victims are only ever added to ``state.taken`` during a round, and every part of
    ``find_victims`` merely filters its candidates by it: the list found first for this
    class and reclaiming queue, less the jobs taken since, is the list it would find now.
    Filtering that list costs little next to finding it again (hundreds of running jobs,
    each asked whether the policy lets it go)."""
    stamp = (len(state.taken), state.future_generation)
    cached = state.victim_cache.get((klass, reclaim))
    if cached is not None and cached[0] == stamp:
        return cached[1], cached[2]
    taken = state.taken
    if cached is None:
        victims = find_victims(state, job, klass, demand)
    else:
        victims = [victim for victim in cached[1] if victim.job.job_id not in taken]
    gpus, cores, memory = state.future_view().totals()
    known = state.held_by_run
    for victim in victims:  # hundreds of running jobs: summed in place, no Amounts each
        if victim.keep is None:  # then it releases all it holds
            held = known.get(id(victim.job)) or _held(state, victim.job)
            gpus += held[0]
            cores += held[1]
            memory += held[2]
    have = [gpus, cores, memory]
    state.victim_cache[(klass, reclaim)] = (stamp, victims, have)
    return victims, have


def try_preemption(state: RoundState, job: PendingJob, klass: float, gang: Sequence[ReplicaRequest], demand,
                    shape: int) -> bool:
    memo = (shape, klass, job.queue)
    if state.plans_left <= 0 or state.attempts_left <= 0 or memo in state.failed_plans:
        return False
    state.attempts_left -= 1
    reclaim = job.queue if state.may_reclaim(job, demand) else None
    victims, have = _candidates(state, job, klass, demand, reclaim)
    if not victims:
        state.failed_plans.add(memo)
        return False
    future = state.future_view()
    # Whole cores only: shares of cores may fit cores in sharing mode, which the totals do not count.
    need = (int(demand.gpu), sum(replica.cores for replica in gang), int(demand.memory))
    if not all(n <= h for n, h in zip(need, have, strict=True)):
        state.failed_plans.add(memo)
        return False
    state.plans_left -= 1
    widest = max(replica.gpu for replica in gang)
    trial = future.copy()
    chosen: list[Victim] = []
    placements = None
    reclaimed: dict[str, Amounts] = {}
    book = state.book
    for victim in victims:
        run = victim.job
        if victim.keep is None and any(c.job is run and c.keep is None for c in chosen):
            continue
        guarded = run.queue != job.queue and book.queue(run.queue).quota is not None
        if guarded:
            # Another queue's quota is guaranteed: a reclaim, and a policy preemption alike,
            # may only take from that queue while it is still over its quota. Otherwise
            # the two queues would take the same capacity from each other forever.
            used = reclaimed.get(run.queue, book.used(run.queue))
            if used.fits_in(book.queue(run.queue).nominal):
                continue
        release = victim.release
        if victim.keep is None:
            shrunk = next((c for c in chosen if c.job is run), None)
            if shrunk is not None:  # shrinking was not enough: it goes whole after all
                chosen.remove(shrunk)
                release = run.placements[: run.min_replicas or 0]
        if guarded:
            reclaimed[run.queue] = used - held_amounts(release)
        trial.release(release)
        chosen.append(victim)
        if all(n <= h for n, h in zip(need, trial.totals(), strict=True)) and trial.max_gpus() >= widest:
            placements = state.place(trial, job, gang)
            if placements is not None:
                break
    if placements is None:
        state.failed_plans.add(memo)
        return False
    placements = _reprieve(state, trial, chosen, job, gang, placements)
    _commit(state, job, trial, chosen, placements)
    return True


def _reprieve(state: RoundState, trial, chosen: list[Victim], job: PendingJob, gang: Sequence[ReplicaRequest],
              placements):
    """Gives back victims (most important first) the job can do without; the placements after."""
    if 1 < len(chosen) <= 16:
        for victim in list(reversed(chosen[:-1])):
            trial.take_available(victim.release)
            again = state.place(trial, job, gang)
            if again is None:
                trial.release(victim.release)
            else:
                chosen.remove(victim)
                placements = again
    return placements


def _commit(state: RoundState, job: PendingJob, trial, chosen: list[Victim], placements) -> None:
    """The plan holds: the job's placements are reserved in the future view and its victims stop."""
    trial.reserve(placements)
    state.future = trial
    state.future_generation += 1
    state.failed_later.clear()  # the victims' resources are in the future view now
    state.free.take_available(placements)
    if state.reservation is not None:
        state.reservation.extra.take_available(placements)
    state.version += 1
    # Victims stay in the quota book: they hold their resources until they have stopped.
    for victim in chosen:
        run = victim.job
        state.taken.add(run.job_id)
        why = (f"queue {job.queue} reclaims its quota" if victim.why == "reclaim"
               else f"the {state.policy.name} policy ranks job {job.job_id} higher")
        if victim.keep is None:
            state.preemptions[run.job_id] = Preempt(run.job_id, f"preempted for job {job.job_id}: {why}", job.job_id)
        else:
            state.resizes[run.job_id] = Resize(
                run.job_id, victim.keep, f"shrunk to {count_of(len(victim.keep), 'replica')} for job {job.job_id}: {why}",
            )
    state.book.add(job.queue, job.user, held_amounts(placements))
    state.waiting[job.job_id] = (
        f"waiting for {job_list(sorted(v.job.job_id for v in chosen))} to stop (preempted or shrunk for it)"
    )
