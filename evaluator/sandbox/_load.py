"""Host contention while agent code runs: a wall-clock timeout is the agent's only when the
host let its code run.

A sandboxed call has ``wall_timeout_s`` of wall-clock time. On a host overloaded by other
work (other episodes, emulators, the rest of the machine), agent code that needs a fraction of
its budget on an idle host can still run out of wall-clock time, and that is the judge's
fault, not the agent's (developers' guide: "where the judge could itself be wrong ... the
episode is an infrastructure failure"). The parent therefore samples, while agent code runs,
how many *other* tasks were runnable per CPU: the kernel's ``procs_running`` (``/proc/stat``,
proc(5)) minus the running tasks of every sandboxed run on the host (read from their cgroups,
so an agent cannot inflate the figure: everything it starts, in this episode or in any other
concurrent episode on any worker sharing the cgroup tree, is in such a group and is
subtracted) minus the sampling thread itself. Load made by agent code therefore never
excuses a timeout: an agent that busy-loops in two concurrent episodes gets two timeouts, not
two unscored episodes (docs/metrics.md, "Infrastructure failures"). It also sums how long the
run's own tasks waited on a run queue (``run_delay`` of ``/proc/<tid>/schedstat``, the
kernel's sched-stats documentation). A timeout becomes
:class:`SandboxOverloadedError` (infrastructure, retried by the runner) only when both hold:
the mean over the call reaches :data:`OVERLOAD_RUNNABLE_PER_CPU` *and* the agent's tasks
waited for a CPU at least :data:`STARVED_SHARE` of ``wall_timeout_s``. Code that sleeps or
blocks past its budget waits on no run queue, so its timeout stays its own on a busy host.
The wait is also the honest measure where the scheduler groups tasks (``autogroup`` gives each
session, the sandbox's included, a fair share however many tasks the others run).

At 1.5 other runnable tasks per CPU the agent's tasks get at most 1/2.5 = 40% of a CPU each
under the fair scheduler, so a call that would finish in 4 s on an idle host times out at
10 s. Without a cgroup (the development override) the run's tasks cannot be told apart and no
timeout is excused.
"""

from __future__ import annotations

import os
from collections.abc import Callable

#: Mean number of other runnable tasks per CPU over a timed-out call from which the timeout
#: is the host's fault (see the module docstring for the 40% figure).
OVERLOAD_RUNNABLE_PER_CPU = 1.5
#: Share of ``wall_timeout_s`` the run's tasks must have waited on a run queue (summed over
#: its tasks) for a timeout to be the host's fault.
STARVED_SHARE = 0.25
#: Seconds between two samples while agent code runs.
SAMPLE_INTERVAL_S = 0.25
#: Fewest samples a verdict of overload rests on (more than 2.25 s of agent time at the
#: interval): a short call under a brief burst of load keeps its timeout.
MIN_SAMPLES = 10


def procs_running(stat_path: str = "/proc/stat") -> int:
    """The host's number of runnable tasks now (``procs_running`` of ``/proc/stat``).

    Raises:
        OSError: the file cannot be read; ValueError: it has no such line.
    """
    with open(stat_path, "rb") as handle:
        for line in handle:
            if line.startswith(b"procs_running "):
                return int(line.split()[1])
    raise ValueError(f"no procs_running line in {stat_path}")


def run_delay_ns(tid: int) -> int | None:
    """Nanoseconds task ``tid`` has spent runnable but waiting for a CPU (``None``: gone)."""
    try:
        with open(f"/proc/{tid}/schedstat", "rb") as handle:
            return int(handle.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


def running_tasks(tids: list[int]) -> int:
    """How many of the task ids ``tids`` are in state ``R`` (gone tasks count as not running)."""
    count = 0
    for tid in tids:
        try:
            with open(f"/proc/{tid}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        # the command name is in parentheses and may hold anything: the state follows the last ")"
        state_at = stat.rfind(b")") + 2
        count += stat[state_at : state_at + 1] == b"R"
    return count


class LoadMeter:
    """Samples of other runnable tasks per CPU during one call.

    Args:
        run_tasks: returns the task (thread) ids of the run's cgroup; called once per sample
            (their run-queue waits are the starvation measure).
        agent_tasks: returns the task ids of every sandboxed run on the host, this one's
            included (subtracted from the host's load); default: ``run_tasks``.
        cpus: CPUs this process may use (default: its affinity mask).
    """

    def __init__(
        self,
        run_tasks: Callable[[], list[int]],
        cpus: int | None = None,
        *,
        agent_tasks: Callable[[], list[int]] | None = None,
    ) -> None:
        self.run_tasks = run_tasks
        self.agent_tasks = agent_tasks or run_tasks
        self.cpus = cpus or len(os.sched_getaffinity(0)) or 1
        self.samples: list[float] = []
        self._last_s = float("-inf")
        self._delay_ns: dict[int, int] = {}

    def sample(self, now_s: float) -> None:
        """Take one sample unless the previous one is less than :data:`SAMPLE_INTERVAL_S` old."""
        if now_s - self._last_s < SAMPLE_INTERVAL_S:
            return
        self._last_s = now_s
        tids = self.run_tasks()
        for tid in tids:
            delay = run_delay_ns(tid)
            if delay is not None:
                self._delay_ns[tid] = delay
        agents = tids if self.agent_tasks is self.run_tasks else self.agent_tasks()
        try:
            others = procs_running() - running_tasks(agents) - 1  # minus this thread
        except (OSError, ValueError):
            return
        self.samples.append(max(others, 0) / self.cpus)

    def wait_s(self) -> float:
        """Seconds the run's tasks waited on a run queue, summed (last sample of each task)."""
        return sum(self._delay_ns.values()) / 1e9

    def mean(self) -> float:
        """Mean other runnable tasks per CPU over the samples (0.0 without samples)."""
        return sum(self.samples) / len(self.samples) if self.samples else 0.0

    def overloaded(self, wall_timeout_s: float) -> bool:
        """True when enough samples were taken, their mean reaches the threshold and the
        run's tasks waited at least :data:`STARVED_SHARE` of ``wall_timeout_s`` for a CPU."""
        return (
            len(self.samples) >= MIN_SAMPLES
            and self.mean() >= OVERLOAD_RUNNABLE_PER_CPU
            and self.wait_s() >= STARVED_SHARE * wall_timeout_s
        )
