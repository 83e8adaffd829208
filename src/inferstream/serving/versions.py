"""The versions of its repository models that a worker serves: the newest K of each (its version
policy: `model_versions`, or a card's `[versions] latest`), loaded at start (`start_models`)
and, while it runs, as version folders come and go (`RepositoryWatch`).

The watch looks at the repository every `repository_poll_s` and on SIGHUP (`look_now`). A new
version is loaded on a thread beside the served ones, checked on a synthetic batch and its
forward pass prepared (the loader's), then served and announced (`ServedModels.add`). A
version that falls outside the policy (older than the newest K) is retired: it still answers
the tasks that name it, so that a job that runs on it keeps its version, and is unloaded once
none has come for `retired_version_idle_s` (`ServedModels.retire`; back in service where it
is among the newest K again). A version whose folder is gone takes no new task and is unloaded
once none of its tasks is in flight (`ServedModels.withdraw`). A version that fails is logged
in one line and not served, the others serving on; it is tried again once its folder's files
change (a copy still being written) or on SIGHUP. A model whose folder cannot be read is left
as it is served (one line, once per problem).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from inferstream.config import WorkerConfig
from inferstream.models import LoadedModel, ModelError
from inferstream.models.repository import (
    ModelCard,
    ModelEntry,
    ModelVersion,
    Repository,
    RepositoryError,
    open_repository,
)
from inferstream.schemas.records import model_ref, split_ref
from inferstream.serving.loader import ModelLoader

if TYPE_CHECKING:
    from inferstream.serving.served import ServedModels

log = logging.getLogger(__name__)

#: Seconds between two looks for versions to unload while one waits for its tasks (or, a
#: retired one, for `retired_version_idle_s` with no task).
UNLOAD_CHECK_S = 1.0
#: A version folder's files as last tried: (name, size, modification time) of each.
Signature = tuple[tuple[str, int, int], ...]


def version_policy(settings: WorkerConfig, card: ModelCard) -> int:
    """How many of a model's newest versions are served at once."""
    return card.versions.latest or settings.model_versions


def newest(numbers: Iterable[int], latest: int) -> list[int]:
    """The newest `latest` of `numbers`, oldest first."""
    return sorted(numbers)[-latest:]


def start_models(settings: WorkerConfig, loader: ModelLoader) -> list[LoadedModel]:
    """The models a worker starts with: each built-in by name, and the newest versions of
    each repository model by its policy, newest first. The newest must load (the worker does
    not start without it); an older one that does not is logged in one line and left out."""
    repository = open_repository(settings.model_repository) if settings.model_repository \
        else None
    models = []
    for name in dict.fromkeys(settings.models):
        if repository is None or name not in repository:
            models.append(loader(name))
            continue
        entry = repository.model(name)
        wanted = newest((v.number for v in entry.versions), version_policy(settings, entry.card))
        models.append(loader(model_ref(name, wanted[-1])))
        for number in reversed(wanted[:-1]):
            try:
                models.append(loader(model_ref(name, number)))
            except Exception as exc:  # a model's own code raises anything
                log.warning("version %d of model %s not served: %s", number, name,
                            one_line(exc))
    return models


class RepositoryWatch:
    """Keeps the versions `served` serves of the repository models `names` as the
    repository's folders say (see the module's doc); `run()` until cancelled."""

    def __init__(self, settings: WorkerConfig, served: ServedModels, loader: ModelLoader,
                 names: Iterable[str], repository: Repository | None = None) -> None:
        self.settings = settings
        self.served = served
        self.loader = loader
        self.names = list(names)
        self.repository = repository or open_repository(settings.model_repository)
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        #: the versions that failed, with their folder's files as they were then
        self._failed: dict[str, Signature] = {}
        #: the problem last logged of each model whose folder could not be read
        self._problems: dict[str, str] = {}

    def look_now(self) -> None:
        """Look at the repository now, trying again the versions that failed (SIGHUP).
        Thread-safe; nothing before `run()`."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._hangup)

    def _hangup(self) -> None:
        self._failed.clear()
        self._wake.set()

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        poll_s = self.settings.repository_poll_s or math.inf  # 0: on SIGHUP only
        next_look = time.monotonic() + poll_s
        while True:
            wait_s = next_look - time.monotonic()
            if self.served.retiring:
                wait_s = min(wait_s, UNLOAD_CHECK_S)
            try:
                await asyncio.wait_for(self._wake.wait(),
                                       None if math.isinf(wait_s) else max(0.0, wait_s))
            except TimeoutError:
                pass
            if self._wake.is_set() or time.monotonic() >= next_look:
                self._wake.clear()
                await self.look()
                next_look = time.monotonic() + poll_s
            self.served.unload_idle()

    async def look(self) -> None:
        """Each model's new versions loaded and served; those outside its policy retired,
        those whose folder is gone taken out of service."""
        for name in self.names:
            entry = await asyncio.to_thread(self._entry, name)
            if entry is None:
                continue
            latest = version_policy(self.settings, entry.card)
            available = {v.number: v for v in entry.versions}
            for number in reversed(newest(available, latest)):
                if model_ref(name, number) not in self.served.pipelines:
                    await self._load(available[number])
            served = {v: model_ref(name, v) for v in self.served.versions().get(name, [])}
            keep = newest((v for v in served if v in available), latest)
            self.served.withdraw(ref for v, ref in served.items() if v not in available)
            self.served.retire(ref for v, ref in served.items()
                               if v in available and v not in keep)
            self.served.restore(served[v] for v in keep)

    def _entry(self, name: str) -> ModelEntry | None:
        """Model `name`'s card and versions; None (logged once per problem) where its folder
        cannot be read now."""
        try:
            entry = self.repository.model(name)
        except RepositoryError as exc:
            if self._problems.get(name) != str(exc):
                self._problems[name] = str(exc)
                log.warning("model %s: its served versions are kept: %s", name, exc)
            return None
        self._problems.pop(name, None)
        return entry

    async def _load(self, version: ModelVersion) -> None:
        """Load, check and serve `version`; one line where it fails."""
        ref = model_ref(version.name, version.number)
        signature = await asyncio.to_thread(_signature, version.folder)
        if self._failed.get(ref) == signature:
            return
        log.info("loading version %d of model %s beside %s", version.number, version.name,
                 ", ".join(r for r in self.served.references
                           if split_ref(r)[0] == version.name) or "none")
        try:
            model = await asyncio.get_running_loop().run_in_executor(None, self.loader, ref)
        except Exception as exc:  # a model's own code raises anything
            self._failed[ref] = signature
            log.warning("version %d of model %s not served: %s", version.number,
                        version.name, one_line(exc))
            return
        self._failed.pop(ref, None)
        self.served.add(model)
        log.info("serving model %s", ref)


def _signature(folder: Path) -> Signature:
    try:
        found = [(p.name, p.stat()) for p in folder.iterdir()]
    except OSError:
        return ()
    return tuple(sorted((name, st.st_size, st.st_mtime_ns) for name, st in found))


def one_line(exc: BaseException) -> str:
    """An error in one line: a RepositoryError as it is, anything else its type and first
    line."""
    if isinstance(exc, ModelError):
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    return f"{type(exc).__name__}: {first}"
