"""ops/prometheus/prometheus-https.yml, the scrape config for roles behind TLS and a bearer
token, is valid to `promtool check config` with its token and CA files in place, and every job
in it scrapes by https with both."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from tests.unit.ops.test_prometheus_rules import PROMETHEUS, promtool
from tests.unit.support.tls import make_certificates

CONFIG = PROMETHEUS / "prometheus-https.yml"


def test_the_https_scrape_config_is_valid_with_its_files_in_place(tmp_path: Path) -> None:
    # promtool checks that the token and CA files exist: put them where the example says
    shutil.copy(CONFIG, tmp_path / CONFIG.name)
    shutil.copy(PROMETHEUS / "rules.yml", tmp_path / "rules.yml")
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "http.token").write_text("token\n")
    (tmp_path / "tls").mkdir()
    assert make_certificates(tmp_path / "tls").ca == tmp_path / "tls" / "ca.pem"
    out = promtool("check", "config", str(tmp_path / CONFIG.name))
    assert "1 rule files found" in out


def test_every_job_scrapes_by_https_with_the_token_and_the_ca() -> None:
    jobs = CONFIG.read_text().split("- job_name: ")[1:]
    assert {job.split()[0] for job in jobs} == {
        "inferstream-controller", "inferstream-worker", "inferstream-sysinfo",
        "inferstream-stream"}
    for job in jobs:
        assert re.search(r"scheme: https\n", job), job
        assert "credentials_file: secrets/http.token" in job, job
        assert "ca_file: tls/ca.pem" in job, job
