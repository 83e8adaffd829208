"""`inferstream results` of a job that did not complete, as docs/cli.md says: the lines of
the items done, then, for a failed job, an error naming why (exit 2), and for a cancelled or
running job a line on standard error saying whose items they are."""

from __future__ import annotations

from pathlib import Path

from inferstream.jobs.ids import new_job_id
from inferstream.schemas.records import JobEventType
from inferstream.testing import MemoryKafkaClients
from tests.unit.client.conftest import Cli
from tests.unit.support.memory import make_config
from tests.unit.support.records import put_event, put_results


def test_results_of_a_failed_job_write_its_lines_and_exit_2_naming_why(
        clients: MemoryKafkaClients, cli: Cli, tmp_path: Path) -> None:
    """It exited 0, as though the lines of the tasks done before it failed were the job's."""
    config, job_id = make_config(), new_job_id()
    put_results(clients, config, job_id, tasks=3, chunk=2, order=[0, 1])
    put_event(clients, config, job_id, JobEventType.FAILED, tasks=3, chunk=2,
              reason="its input cannot be read to its end: No such file or directory: /l")
    code, out, err = cli("results", job_id)
    assert (code, len(out.splitlines())) == (2, 4)
    assert err == (f"inferstream: error: job {job_id} failed: its input cannot be read to its "
                   "end: No such file or directory: /l (the 4 lines written are the items "
                   "done before it failed)\n")
    code, _, err = cli("results", job_id, "--format", "npz", "--output", str(tmp_path / "o"))
    assert code == 2 and "(the 4 rows written are the items done before it failed)" in err


def test_results_of_a_cancelled_or_running_job_say_whose_items_the_lines_are(
        clients: MemoryKafkaClients, cli: Cli) -> None:
    config = make_config()
    for kind, said in ((JobEventType.CANCELLED, "was cancelled: the 2 lines written are the "
                        "items done before the cancel"),
                       (JobEventType.PROGRESS, "is still running (progress): the 2 lines "
                        "written are the items done so far")):
        job_id = new_job_id()
        put_results(clients, config, job_id, tasks=3, chunk=2, order=[1])
        put_event(clients, config, job_id, kind, tasks=3, chunk=2)
        code, out, err = cli("results", job_id)
        assert (code, len(out.splitlines())) == (0, 2)
        assert err == f"job {job_id} {said}\n"
