"""`call_with_deadline`: the bounded librdkafka call the controller makes (librdkafka#5456)."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from inferstream.kafka.errors import StuckCallError
from inferstream.kafka.stuck_calls import call_with_deadline


def test_call_with_deadline_returns_the_value_and_reraises_the_error() -> None:
    assert call_with_deadline(lambda a, b: a + b, 2, 3, deadline_s=5) == 5

    def fails() -> None:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    with pytest.raises(KafkaException):
        call_with_deadline(fails, deadline_s=5)


def test_call_with_deadline_gives_up_on_a_call_that_does_not_return() -> None:
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(StuckCallError, match=r"wait did not return in 0\.3s"):
        call_with_deadline(release.wait, deadline_s=0.3)
    assert time.monotonic() - started < 5
    release.set()
