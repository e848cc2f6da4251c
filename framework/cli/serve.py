"""Serving a pipeline's services from the command line: standby, epochs, progress.

Protocol of `serve`:

1. With an election, wait to lead: every instance of one role (the acker of some shards,
   the barrier of some sinks) queues in ZooKeeper; a standby takes over when the leader's
   session ends, and at once when it proves a leader on its own host dead (kill -9).
2. Build and start the services on the current epoch's topics; print ``ready (epoch N)``.
   A start that fails on the cluster (Kafka or ZooKeeper restarting) is tried again every
   5 s for a minute before the process gives up.
3. Run them, printing progress every 10 s, until the epoch changes (a replay or a
   recovery), the leadership is lost, or Ctrl-C / SIGTERM. A service that fails with an
   error that passes with the cluster's outage (`framework.runners.startup.is_passing`:
   a transaction a broker restart broke, ZooKeeper away) is stopped and started again,
   back to step 2 (at most `_RESTARTS` times in `_RESTART_WINDOW_S`); any other failure
   ends the process.
4. Stop them. A new epoch: back to step 2. Leadership lost: back to step 1 (what the
   old leader still had in flight is fenced by Kafka: the new leader's producer uses the
   same transactional.id). Ctrl-C: done.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from framework.cli.signals import interrupt_on_signals
from framework.config import Settings
from framework.retries import Retry

if TYPE_CHECKING:
    from framework.coordination.election import LeaderElection
    from framework.runners.assembly import ServiceSet

_PROGRESS_S = 10.0
_EPOCH_CHECK_S = 2.0
# ZooKeeper session timeout: how soon a standby replaces a dead leader on another host.
_TAKEOVER_S = 6.0
_START_PAUSE_S = 5.0
_START_ATTEMPTS = 12  # a minute of a cluster that is not there yet
_RESTARTS = 5
_RESTART_WINDOW_S = 600.0


def _say(text: str) -> None:
    # Wall-clock stamps let an operator line a takeover up with a kill or an outage.
    now = time.time()
    stamp = time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"
    print(f"{stamp} {text}", file=sys.stderr, flush=True)


class EpochWatch:
    """The current epoch of ``app``, through one ZooKeeper session kept open."""

    def __init__(self, settings: Settings, app: str) -> None:
        from framework.coordination.epochs import Epochs

        self._epochs = Epochs(settings.zookeeper, app)

    def __call__(self) -> int:
        record = self._epochs.current()
        return 0 if record is None else record.epoch


def serve(
    build: Callable[[int], ServiceSet],
    describe: Callable[[ServiceSet], str],
    epoch_of: Callable[[], int],
    election: LeaderElection | None = None,
) -> int:
    """Run what ``build(epoch)`` makes; see the module docstring (``election``: step 1)."""
    interrupt_on_signals()
    try:
        while True:
            if election is None:
                _serve_epochs(build, describe, epoch_of, lambda: False)
                return 0
            # Step 1
            _say(f"standby: waiting to lead {election.path}")
            with election.lead() as leadership:
                _say(f"leader of {election.path} (fencing token {leadership.token})")
                _serve_epochs(build, describe, epoch_of, lambda: leadership.is_lost)
            _say("leadership lost: standing by again")
    except KeyboardInterrupt:
        _say("stopping")
        return 0


def election_for(settings: Settings, app: str, role: str) -> LeaderElection:
    """The leader election of ``role`` of ``app`` (identity: host, pid, namespace and start
    time, so a successor on the same host takes over from a killed leader at once)."""
    from framework.coordination.election import LeaderElection
    from framework.coordination.paths import leader_path
    from framework.coordination.processes import dead_on_this_host, process_identity

    path = leader_path(app, role)
    return LeaderElection(
        settings.zookeeper,
        path,
        process_identity(),
        timeout_s=_TAKEOVER_S,
        is_dead=dead_on_this_host,
    )


def _serve_epochs(
    build: Callable[[int], ServiceSet],
    describe: Callable[[ServiceSet], str],
    epoch_of: Callable[[], int],
    lost: Callable[[], bool],
) -> None:
    """Steps 2-4 until the leadership is lost (or forever without an election)."""
    from framework.runners.startup import is_passing

    epoch = epoch_of()
    restarts: list[float] = []
    while not lost():
        # Step 2
        started = _start_retrying(build, epoch, lost)
        if started is None:
            return
        try:
            _say(f"ready (epoch {epoch}): {describe(started)}")
            # Step 3
            changed = _until_change(started, describe, epoch, epoch_of, lost)
            started.check()
        except Exception as exc:
            now = time.monotonic()
            restarts = [t for t in restarts if now - t < _RESTART_WINDOW_S]
            if not is_passing(exc) or len(restarts) >= _RESTARTS:
                raise
            restarts.append(now)
            _say(f"a service failed ({exc}): restarting the services")
            continue
        finally:
            # Step 4
            started.stop_quietly()
        if changed is not None:
            _say(f"epoch {changed} started: restarting")
            epoch = changed


def _start_retrying(
    build: Callable[[int], ServiceSet], epoch: int, lost: Callable[[], bool]
) -> ServiceSet | None:
    """`ServiceSet.start` of ``build(epoch)``, again while the cluster fails it (None: lost)."""
    from framework.runners.startup import PASSING, is_passing

    tried = False

    def start() -> ServiceSet:
        nonlocal tried
        if tried and lost():
            raise _LeadershipLostError
        tried = True
        return build(epoch).start()

    def say(exc: BaseException, pause_s: float) -> None:
        _say(f"start failed ({exc}); trying again in {pause_s:.0f} s")

    policy = Retry(
        lambda e: isinstance(e, PASSING) and is_passing(e),
        attempts=_START_ATTEMPTS,
        first_s=_START_PAUSE_S,
    )
    try:
        return policy.call(start, say)
    except _LeadershipLostError:
        return None


class _LeadershipLostError(Exception):
    """The leadership went while a start waited to be tried again."""


def _until_change(
    services: ServiceSet,
    describe: Callable[[ServiceSet], str],
    epoch: int,
    epoch_of: Callable[[], int],
    lost: Callable[[], bool],
) -> int | None:
    """The new epoch when it changes; None when the leadership is lost."""
    last_progress = last_epoch_check = time.monotonic()
    while not lost():
        services.check()
        time.sleep(0.2)
        now = time.monotonic()
        if now - last_progress >= _PROGRESS_S:
            last_progress = now
            _say(describe(services))
        if now - last_epoch_check >= _EPOCH_CHECK_S:
            last_epoch_check = now
            current = epoch_of()
            if current != epoch:
                return current
    return None
