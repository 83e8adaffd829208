"""What the unit tests share, apart from the fixtures in `tests/unit/conftest.py`:

- `memory`: the one test configuration (`make_config`) and an in-memory broker holding its
  topics;
- `running`: workers and controllers run until the outcome a test waits for;
- `records`: records put on topics as the other roles write them, and read back;
- `pool`: a stand-in for a pool of workers that answers tasks;
- `policies`: a fixed policy view, and policy entries on the policy topic;
- `fencing`: a successor that fences a transactional id mid-commit;
- `fake_sysinfo`: the sysinfo app's HTTP API served from a thread;
- `photos`: the bundled photos, encoded.
"""
