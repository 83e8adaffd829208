"""Which version of a repository model a job runs on, chosen once (guarantee 6).

A job pinned to a version (`submit --model NAME:VERSION`) runs on it. Otherwise, when the
controller accepts a job of a repository model, it chooses the newest version among the
pool's live workers: the members of the pool's group that own task partitions (the
controller's describe), crossed with the versions each announces it serves (its SERVING
`WorkerAnnouncement`, followed by `announcements`). Where no live worker of the model is known
yet, the job's tasks are held (`waiting`) and the version is chosen before the first of them
goes to a worker. The choice is in the job's ledger entry, so a replica that takes the job over
keeps it, and in its events; a version that appears later changes nothing for the job. Built-in
and simulated models have no versions. A newest version above `MAX_VERSION` (announced by a
worker of a release that did not check its version folders) cannot be written in the job's
tasks: the job fails, saying so, instead of the controller.
"""

from __future__ import annotations

import logging
from typing import Protocol

from inferstream.config import Config
from inferstream.controller.declines import PoolView
from inferstream.controller.ledger import JobState
from inferstream.models.names import MAX_VERSION, has_versions, is_version
from inferstream.schemas.records import model_ref

log = logging.getLogger(__name__)


class ServedVersions(Protocol):
    """The versions workers announce they serve (`announcements.WorkerAnnouncements`)."""

    def versions(self, pool: str, model: str) -> dict[str, list[int]]:
        """The versions of `model` that each worker of `pool` serves, by worker id."""
        ...


class _NoVersions:
    def versions(self, pool: str, model: str) -> dict[str, list[int]]:
        return {}


#: For a controller that follows no announcements.
NO_VERSIONS: ServedVersions = _NoVersions()


class JobVersions:
    """Chooses the version of each job of a repository model."""

    def __init__(self, config: Config, pools: PoolView, served: ServedVersions) -> None:
        self.config = config
        self.pools = pools
        self.served = served

    def choose(self, state: JobState) -> bool:
        """Whether the job has what its tasks need: no version (not a repository model),
        the one it was pinned to or given, or else the newest among its pool's live workers,
        given it now (the job's next event and ledger entry say it); False while no live
        worker of the model is known, or where the newest one cannot be written in a task
        (the job's `failure` says so)."""
        job = state.job
        if state.model_version is not None or not has_versions(job["model"]):
            return True
        if job["model_version"] is not None:
            state.model_version = job["model_version"]
            return True
        newest = self.newest(job["pool"], job["model"])
        if newest is None:
            return False
        if not is_version(newest):
            state.failure = (f"version {newest} of model {job['model']!r}, the newest its "
                             f"live workers serve, is above {MAX_VERSION}, the highest a "
                             "task can carry: renumber its version folder")
            return False
        state.model_version, state.changed = newest, True
        log.info("job %s runs on version %d of model %s, the newest among the live workers "
                 "of pool %s", state.job_id, newest, job["model"], job["pool"])
        return True

    def newest(self, pool: str, model: str) -> int | None:
        """The newest version of `model` that a live worker of `pool` serves (a member of
        its group that owns task partitions); None where none is known."""
        live = self.live(pool, model)
        return max((v for versions in live.values() for v in versions), default=None)

    def live(self, pool: str, model: str) -> dict[str, list[int]]:
        """The versions of `model` that each live worker of `pool` announces. Each counts as
        served by it, and a decline of it as outdated (the worker loaded it since): a held
        task goes to a worker that serves its version rather than one that would decline it."""
        if not has_versions(model):
            return {}
        members = self.pools.members(self.config.worker_group(pool)) or {}
        announced = self.served.versions(pool, model)
        live = {worker: announced[worker] for worker, owned in members.items()
                if owned and worker in announced}
        for worker, versions in live.items():
            refs = {model_ref(model, v) for v in versions}
            self.pools.served.setdefault(worker, set()).update(refs)
            self.pools.declined.get(worker, set()).difference_update(refs)
        return live
