"""Learners of one run in parallel worker processes (the ``jobs`` key of ``simulate``).

The learners of a run are independent: each starts from its own initial weights and its
own generator seeded with ``loop_seed``, on the same env. ``jobs=N`` therefore runs them in
``N`` spawned processes at once. Each worker receives the run's :class:`~torchroute.run.
experiment.Job` (the env built once by the parent) when it starts, sets torch's intra-op
threads to :func:`threads_per_job`, and takes the next learner when it finishes one;
it writes that learner's ``runs/<learner>/``, checkpoints and decision logs itself, and
sends back its summary and curve. A learner's numbers are those of a single process run
with the same number of threads.

The workers receive the env's tensors in shared memory (torch's pickling for processes),
one copy for all of them: an env keeps what a run writes (e.g. a scenario's per-round
trace) in tensors the run allocates, never in place in the tensors it was built with.

A worker ends with the process that started it: a parent killed by a signal that leaves
it no time to shut its pool down (``kill``'s ``SIGTERM``, ``SIGKILL``, out of memory)
would otherwise leave its workers waiting for work that never comes, each holding its
copy of the learners and the env; a worker checks every :data:`PARENT_CHECK_S` seconds
that its parent is alive and exits when it is not.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any, TypeVar

import torch

from torchroute.console import ConsoleFormatter

log = logging.getLogger(__name__)

T = TypeVar("T")

_payload: Any = None  # the worker's Job, set once by _start_worker
#: how often a worker checks that the process that started it is alive, in seconds
PARENT_CHECK_S = 1.0


def threads_per_job(jobs: int, threads: int | None = None) -> int:
    """Intra-op threads of each of ``jobs`` workers: ``threads`` (default torch's current
    setting) shared out, at least one."""
    threads = torch.get_num_threads() if threads is None else threads
    return max(1, threads // jobs)


@contextmanager
def worker_threads(jobs: int, learners: int) -> Iterator[None]:
    """Inside: torch's intra-op threads of a worker (:func:`threads_per_job`) when a run of
    ``learners`` learners spreads them over ``jobs > 1`` processes, restored after; else
    torch's setting unchanged. What a run does for a learner outside its worker (its
    pacing plan; the learner itself when a resumed run has one left to run here) then
    gives the numbers its worker gives (a fit's numbers can depend on the threads)."""
    threads = torch.get_num_threads()
    workers = jobs > 1 and learners > 1
    if workers:
        torch.set_num_threads(threads_per_job(jobs, threads))
    try:
        yield
    finally:
        if workers:
            torch.set_num_threads(threads)


def _start_worker(payload: Any, threads: int, level: int, parent: int) -> None:
    global _payload
    watch = threading.Thread(target=_exit_with, args=(parent,), name="parent-watch", daemon=True)
    watch.start()
    torch.set_num_threads(threads)
    handler = logging.StreamHandler()
    handler.setFormatter(ConsoleFormatter(verbose=level <= logging.DEBUG))
    logging.basicConfig(level=level, handlers=[handler])
    _payload = payload


def _exit_with(parent: int) -> None:
    """Exit this worker at once (status 1) when ``parent`` (the pid of the process that
    started it) is no longer its parent: that process has ended (its orphans are adopted by
    another process), before this worker started or since."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_S)
    os._exit(1)


def _call(fn: Callable[[Any, str], T], name: str) -> T:
    return fn(_payload, name)


def map_in_processes(
    fn: Callable[[Any, str], T], payload: Any, names: list[str], jobs: int
) -> dict[str, T]:
    """``{name: fn(payload, name)}``, the calls spread over ``jobs`` spawned processes.

    ``fn`` must be importable (a module-level function) and ``payload`` picklable; the
    payload is sent once per worker. The first call that raises (in ``names`` order) cancels
    the calls not yet started, is logged at once, and is raised here once the running calls
    end (a learner that was running finishes and keeps its results); a worker that dies
    (killed, out of memory) is a :class:`ChildProcessError` naming the calls that did not
    finish.
    """
    threads = threads_per_job(jobs)
    workers = min(jobs, len(names))
    log.info(
        "%d learners in %d processes of %d intra-op thread(s) each", len(names), workers, threads
    )
    context = multiprocessing.get_context("spawn")
    level = logging.getLogger().getEffectiveLevel()
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=_start_worker,
        initargs=(payload, threads, level, os.getpid()),
    ) as pool:
        futures = {pool.submit(_call, fn, name): name for name in names}
        done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f for f in futures if f in done and f.exception() is not None]
        if failed:
            for future in pending:
                future.cancel()
            running = sorted(futures[f] for f in pending if not f.cancelled())
            log.error(
                "%s failed (%s); waiting for %s to finish (their results are kept)",
                futures[failed[0]],
                failed[0].exception(),
                running or "no other learner",
            )
            wait(pending)
            error = failed[0].exception()
            if isinstance(error, BrokenProcessPool):
                unfinished = [n for f, n in futures.items() if not _finished(f)]
                raise ChildProcessError(
                    f"jobs={jobs}: a worker process died before {unfinished} finished "
                    "(killed, or out of memory: try fewer jobs)"
                ) from error
            raise error  # type: ignore[misc]
    return {futures[f]: f.result() for f in futures}


def _finished(future: Any) -> bool:
    return future.done() and not future.cancelled() and future.exception() is None


__all__ = ["PARENT_CHECK_S", "map_in_processes", "threads_per_job", "worker_threads"]
