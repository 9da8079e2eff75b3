"""Storage options for the command line without putting secrets on it: from the environment
(``PARQUET_SINK_STORAGE_OPTIONS``, JSON) and from a file (``--storage-options-file``), with documented
precedence (environment < file < ``--storage-option``), against a real S3 output on moto."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from parquet_sink import MetadataLog
from parquet_sink.cli.main import build_parser
from parquet_sink.cli.options import OPTIONS_ENV, storage_options
from tests.helpers.cli_util import run_cli

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: object, env: dict[str, str] | None = None, process: bool = False) -> subprocess.CompletedProcess[str]:
    """The command line with only ``env``'s options in the environment: in this process (tests/helpers/cli_util.py),
    or with ``process`` in a new one (``python -m parquet_sink``), which inherits them as a user's shell passes them."""
    if not process:
        return run_cli(*args, env={OPTIONS_ENV: None, **(env or {})})
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO)]))
    environment.pop(OPTIONS_ENV, None)
    environment.update(env or {})
    command = [sys.executable, "-m", "parquet_sink", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=environment)


@pytest.fixture
def s3_output(moto_server):
    """An S3 output on moto with one committed (empty) batch, and a secret moto accepts."""
    bucket = f"b{uuid.uuid4().hex[:12]}"
    moto_server.make_bucket(bucket)
    url = f"s3://{bucket}/out"
    MetadataLog(url, storage_options=moto_server.storage_options).add(0, [])
    secret = "env-s3cr3t-" + uuid.uuid4().hex  # moto accepts any credentials
    options = {"key": moto_server.access_key, "secret": secret,
               "client_kwargs": moto_server.storage_options["client_kwargs"]}
    return url, options, secret


def test_options_from_the_environment(s3_output):
    url, options, secret = s3_output
    result = _cli("verify", url, env={OPTIONS_ENV: json.dumps(options)}, process=True)  # through a real process
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"OK: {url}: log intact up to batch 0")
    assert secret not in result.stdout + result.stderr


def test_options_from_a_file(s3_output, tmp_path):
    url, options, secret = s3_output
    path = tmp_path / "options.json"
    path.write_text(json.dumps(options))
    path.chmod(0o600)
    result = _cli("ls", url, "--storage-options-file", path, "--json")
    assert result.returncode == 0, result.stderr
    assert [b["batch"] for b in json.loads(result.stdout)["batches"]] == [0]
    assert secret not in result.stdout + result.stderr


def test_command_line_option_wins_over_the_environment(s3_output):
    """The environment reaches moto, but --storage-option points client_kwargs at a closed loopback port."""
    url, options, secret = s3_output
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    endpoint = json.dumps({"endpoint_url": f"http://127.0.0.1:{closed}"})
    # botocore's retries of the refused connection only repeat it: one attempt (a key only the environment gives)
    env = {OPTIONS_ENV: json.dumps({**options, "config_kwargs": {"retries": {"total_max_attempts": 1}}})}
    result = _cli("verify", url, "--storage-option", f"client_kwargs={endpoint}", env=env)
    assert result.returncode == 1 and f"127.0.0.1:{closed}" in result.stderr, result.stderr
    assert secret not in result.stdout + result.stderr


def test_precedence_environment_then_file_then_command_line(tmp_path, monkeypatch):
    path = tmp_path / "options.json"
    path.write_text(json.dumps({"account_name": "from-file", "anon": True, "sas_token": "file-token"}))
    monkeypatch.setenv(OPTIONS_ENV, json.dumps({"account_name": "from-env", "anon": False, "account_key": "env-key"}))
    args = build_parser().parse_args(
        ["ls", "abfs://c/out", "--storage-options-file", str(path), "--storage-option", "sas_token=cli-token"]
    )
    expected = {"account_name": "from-file", "anon": True, "account_key": "env-key", "sas_token": "cli-token"}
    assert storage_options(args) == expected
    monkeypatch.delenv(OPTIONS_ENV)
    only_cli = build_parser().parse_args(["ls", "abfs://c/out", "--storage-option", "anon=true"])
    assert storage_options(only_cli) == {"anon": True}


@pytest.mark.parametrize(
    "content, problem", [("{not json", "is not valid JSON"), ('["a"]', "must hold a JSON object")]
)
def test_bad_options_file_is_a_usage_error_that_does_not_echo_it(tmp_path, content, problem):
    path = tmp_path / "options.json"
    path.write_text(content.replace("not", "s3cr3t"))
    result = _cli("ls", tmp_path, "--storage-options-file", path)
    assert result.returncode == 2 and problem in result.stderr and str(path) in result.stderr
    assert "s3cr3t" not in result.stderr


@pytest.mark.parametrize(
    "content, problem", [('{"account_key": s3cr3t}', "is not valid JSON"), ('"s3cr3t"', "JSON object")]
)
def test_bad_environment_options_are_an_error_that_does_not_echo_them(tmp_path, content, problem):
    result = _cli("ls", tmp_path, env={OPTIONS_ENV: content})
    assert result.returncode == 2 and OPTIONS_ENV in result.stderr and problem in result.stderr  # an input error
    assert "s3cr3t" not in result.stderr


def test_help_says_where_secrets_go():
    result = _cli("ls", "--help")
    text = " ".join(result.stdout.split())
    assert "--storage-options-file PATH" in text and OPTIONS_ENV in text
    assert "later ones win" in text and "shell history" in text
