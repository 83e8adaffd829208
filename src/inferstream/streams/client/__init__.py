"""The client role: the Python SDK (`Client`, `Job`), job ids, job listing, result reading.

    from inferstream.streams.client import Client
"""

from inferstream.streams.client.client import Client, Job, JobStatus

__all__ = ["Client", "Job", "JobStatus"]
