"""What the controller keeps of each issued task it waits for (`Outstanding`), and what
`deadlines` says of one that is late (`Late`)."""

from __future__ import annotations

from dataclasses import dataclass

from inferstream.schemas.records import Task


@dataclass
class Outstanding:
    """An issued task this controller waits for."""

    task: Task
    home: int
    partition: int
    owner: str | None
    issued_ms: int
    #: items queued on its worker when it was issued, its own included
    backlog_items: int = 0
    #: the worker's seconds per item as first known (then frozen: a worker that slows
    #: down must not stretch the deadlines of what it already holds)
    per_item_s: float | None = None

    @property
    def key(self) -> tuple[str, int]:
        return self.task["job_id"], self.task["task_id"]

    @property
    def items(self) -> int:
        return len(self.task["items"])

    def deadline_ms(self, slack: float, floor_s: float) -> int | None:
        if self.per_item_s is None:
            return None
        return self.issued_ms + int((self.backlog_items * self.per_item_s * slack + floor_s)
                                    * 1000)


@dataclass(frozen=True)
class Late:
    """A task to issue again (on `partition`) or, with `partition` None, to fail; or, where
    `unplaced`, to place as a declined task is (no worker is known to serve its model)."""

    outstanding: Outstanding
    reason: str
    partition: int | None
    unplaced: bool = False
