"""Writing completed jobs' output files, each on a thread of its own (a large output takes a
while), for the replica that owns the job; the job book records each file once written.

The file is part of a job's state: a replica that dies before writing it leaves it due in the
ledger, and the next owner of the job's partition writes it.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterable

from inferstream.config import Config
from inferstream.controller.ledger import JobState
from inferstream.jobs.output import write_job_output
from inferstream.kafka.clients import KafkaClients
from inferstream.schemas.records import now_ms

log = logging.getLogger(__name__)


class OutputFiles:
    """Starts the writing of output files and collects the outcomes, by job id."""

    def __init__(self, config: Config, clients: KafkaClients) -> None:
        self.config = config
        self.clients = clients
        self._writing: dict[str, threading.Thread] = {}
        self._written: queue.SimpleQueue[tuple[str, int | None]] = queue.SimpleQueue()

    def start(self, due: Iterable[JobState]) -> None:
        """Start writing the file of each job in `due` not being written already."""
        for state in due:
            if state.job_id not in self._writing:
                thread = threading.Thread(target=self._write, args=(state,),
                                          name=f"output-{state.job_id}", daemon=True)
                self._writing[state.job_id] = thread
                thread.start()

    def finished(self) -> list[tuple[str, int | None]]:
        """(job id, when its file was written in ms, or None when writing it failed) for
        each file finished since the last call."""
        done = []
        while not self._written.empty():
            job_id, at = self._written.get()
            self._writing.pop(job_id, None)
            done.append((job_id, at))
        return done

    def _write(self, state: JobState) -> None:
        path = str(state.job.get("output_path"))
        try:
            count = write_job_output(self.config, state.job_id, path, clients=self.clients,
                                     partition=state.partition)
        except Exception as exc:  # a bad path must not stop the controller
            log.error("job %s: cannot write its output to %s: %s", state.job_id, path, exc)
            self._written.put((state.job_id, None))
            return
        log.info("job %s: output written to %s (%d lines)", state.job_id, path, count)
        self._written.put((state.job_id, now_ms()))
