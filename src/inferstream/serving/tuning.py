"""Online batch tuning for a latency target (`latency_target_ms`): Clipper's AIMD.

Below saturation a record waits for its batch to fill (at most the wait) and then for the
batch's forward pass, so its time through the pipeline is about wait + service time. The
tuner keeps that under the target: the batch size grows by one after each batch that the
size bounded (it was full) and that one more item would not have taken past its share of
the target, and shrinks by a tenth
(at least one) after a batch that overran it (Crankshaw et al., "Clipper", NSDI 2017, 4.3);
the wait is half the slack the target leaves after the slowest recent forward passes, never
more than `max_wait_ms`, so that a batch waits for more items only while there is time to.
"""

from __future__ import annotations

import logging
import math
from collections import deque

log = logging.getLogger(__name__)

#: Batches whose forward time the slack is judged by.
WINDOW = 20
#: What a batch that overran its share keeps of the batch size.
BACKOFF = 0.9


class LatencyTuner:
    """The batch size and wait of one model's pipeline, tuned after each batch (`observe`)."""

    def __init__(self, target_s: float, max_batch: int, max_wait_s: float) -> None:
        self.target_s = target_s
        self.max_wait_s = max_wait_s
        self.ceiling = max_batch
        self.limit = max(1, max_batch // 2)
        self.wait_s = min(max_wait_s, target_s / 4)
        self._service: deque[float] = deque(maxlen=WINDOW)

    def set_ceiling(self, ceiling: int) -> None:
        """No batch above `ceiling` (the model's max_batch, or the policy's batch size)."""
        self.ceiling = max(1, ceiling)
        self.limit = min(self.limit, self.ceiling)

    def observe(self, size: int, service_s: float) -> None:
        """One batch of `size` items took `service_s` in its forward pass."""
        self._service.append(service_s)
        before, budget = self.limit, self.target_s - self.wait_s
        if service_s > budget:
            self.limit = max(1, min(self.limit - 1, math.floor(self.limit * BACKOFF)))
        elif size >= self.limit and service_s * (size + 1) / size <= budget:
            # one more item, at this batch's time per item, still fits: a probe that would
            # overrun (the last additive step) is not taken
            self.limit = min(self.ceiling, self.limit + 1)
        slowest = max(self._service)
        self.wait_s = min(self.max_wait_s, max(0.0, (self.target_s - slowest) / 2))
        if self.limit != before:
            log.debug("batch size %d -> %d (batch of %d took %.1f ms, wait %.1f ms)", before,
                      self.limit, size, service_s * 1000, self.wait_s * 1000)
