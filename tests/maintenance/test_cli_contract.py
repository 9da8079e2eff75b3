"""The command line as scripts use it (issue 36, item 10): with ``--json`` every result and every error is one JSON
object on stdout (an error: ``ok`` false, ``error``, ``type``); one exit-code rule for every command (0 ok, 1
problems found or the operation failed, 2 a usage or input error), checked command by command; and docs/cli.md
documents exactly the options each command has (checked against the parser behind ``--help``)."""

from __future__ import annotations

import argparse
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from parquet_sink import doctor, errors, read_committed, write_batch
from parquet_sink.cli.main import build_parser, main

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
COMMON = {"--storage-option", "--storage-options-file", "--json", "--verbose", "-v"}


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("contract")
    good, broken = base / "good", base / "broken"
    for root in (good, broken):
        for version in range(2):
            write_batch(root, pa.table({"id": [version]}), app_id="a", version=version)
    next(broken.glob("part-*.parquet")).unlink()  # a committed file gone: verify finds a problem
    ckpt = base / "ckpt"
    (ckpt / "offsets").mkdir(parents=True)
    (ckpt / "metadata").write_text('{"id":"another-query"}')  # a new checkpoint on an old output: not safe
    return {"good": good, "broken": broken, "nowhere": base / "nowhere", "ckpt": ckpt, "corrupt": _corrupt(base)}


def _corrupt(base: Path) -> Path:
    root = base / "corrupt"
    write_batch(root, pa.table({"id": [1]}), app_id="a", version=0)
    (root / "_spark_metadata" / "0").write_text("v1\n{not json")
    return root


# command -> (args giving 0, args giving 1, args giving 2); {name} is replaced by the path of that name
CASES = {
    "ls": (["{good}"], ["{nowhere}"], ["{good}", "--rows", "--bogus"]),
    "show": (["{good}", "1"], ["{good}", "9"], ["{good}", "one"]),
    "verify": (["{good}"], ["{broken}"], ["{good}", "--compact-interval", "x"]),
    "vacuum": (["{good}", "--dry-run"], ["{corrupt}", "--dry-run"], ["{good}", "--older-than", "1d"]),
    "delta-sync": (["{good}"], ["{nowhere}"], ["{good}", "--time-zone"]),
    "optimize": (["{good}", "--dry-run"], ["{nowhere}"], ["{good}", "--target-file-size"]),
    "iceberg-sync": (["{good}"], ["{nowhere}"], ["{good}", "--table"]),
    "doctor": (["{good}", "--app-id", "a", "--version", "2"], ["{good}", "--checkpoint", "{ckpt}"], ["{good}"]),
}


def _run(capsys, command: str, args: list[str], paths: dict[str, Path], as_json: bool) -> tuple[int, str, str]:
    argv = [command, *(a.format(**{k: str(v) for k, v in paths.items()}) for a in args)] + (["--json"] if as_json else [])
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("command", list(CASES))
def test_every_command_follows_the_exit_code_and_json_rule(capsys, paths, command):
    assert set(CASES) == set(build_parser()._subparsers._group_actions[0].choices)  # every command is here
    for expected, args in enumerate(CASES[command]):
        code, out, err = _run(capsys, command, args, paths, as_json=True)
        assert code == expected, (command, args, out, err)
        data = json.loads(out)  # one JSON object on stdout, whatever happened
        assert err == "", err
        assert data["ok"] is (expected == 0), data
        found = expected == 1 and command in ("verify", "doctor")  # problems found: the report itself says so
        if found:
            assert data["problems" if command == "verify" else "message"]
        elif expected:
            assert set(data) == {"ok", "error", "type"} and data["error"] and data["type"].endswith("Error")
            if expected == 2 and command not in ("vacuum", "doctor"):
                assert data["type"] == "UsageError"
        code, out, err = _run(capsys, command, args, paths, as_json=False)
        assert code == expected
        if expected and not found:
            assert out == "" and err.rstrip().splitlines()[-1].startswith("parquet-sink")
            assert ": error: " in err


def test_json_error_types_name_the_errors(capsys, paths):
    code, out, _ = _run(capsys, "ls", ["{nowhere}"], paths, as_json=True)
    assert (code, json.loads(out)["type"]) == (1, "NotAnOutputError")
    code, out, _ = _run(capsys, "vacuum", ["{good}", "--older-than", "1d"], paths, as_json=True)
    assert (code, json.loads(out)["type"]) == (2, "ParameterError") and "allow-short-retention" in out
    code, out, _ = _run(capsys, "vacuum", ["{good}", "--older-than", "7"], paths, as_json=True)
    assert (code, json.loads(out)["type"]) == (2, "UsageError") and "'7d'" in out
    code, out, _ = _run(capsys, "doctor", ["{good}"], paths, as_json=True)
    assert (code, json.loads(out)["type"]) == (2, "ParameterError")


def test_json_errors_from_the_console_script(paths):
    """The installed entry point (``python -m parquet_sink``) as a script calls it: stdout parses, stderr is empty."""
    result = subprocess.run([sys.executable, "-m", "parquet_sink", "ls", str(paths["nowhere"]), "--json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and result.stderr == ""
    assert json.loads(result.stdout)["type"] == "NotAnOutputError"
    result = subprocess.run([sys.executable, "-m", "parquet_sink", "--json"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and json.loads(result.stdout)["ok"] is False


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for action in parser._actions for o in action.option_strings if o not in ("-h", "--help")}


def test_docs_cli_md_documents_exactly_the_options_of_each_command():
    text = DOC.read_text()
    bullets = re.findall(r"^- \*\*`([a-z-]+)([^`]*)`\*\*", text, flags=re.M)
    documented: dict[str, set[str]] = {}
    for command, synopsis in bullets:
        documented.setdefault(command, set()).update(re.findall(r"--[a-z][a-z-]*", synopsis))
    intro = text.split("\n- **`", 1)[0]
    commands = build_parser()._subparsers._group_actions[0].choices
    assert set(documented) == set(commands), "a bullet per command, a command per bullet"
    for name, sub in commands.items():
        options = _options(sub)
        assert COMMON <= options, name
        assert documented[name] == options - COMMON, f"{name}: docs/cli.md {sorted(documented[name])} vs --help"
        assert f"{name} " in sub.format_help() or name in sub.prog
    for option in COMMON:
        assert f"`{option}" in intro, f"{option} is not documented in docs/cli.md"
    every = set().union(*map(_options, commands.values()))
    stale = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", text)) - every
    assert not stale, f"docs/cli.md names options no command has: {sorted(stale)}"
    for rule in ("**0**", "**1**", "**2**", "**130**", '"ok": false', '"type"'):
        assert rule in intro


def test_an_error_no_check_caught_is_one_line_not_a_traceback(capsys, paths, monkeypatch):
    """Whatever a dependency raises that no check of the package turned into a typed error (duplicate columns once
    crashed `delta-sync` with pyarrow's traceback) is one line on stderr, or one JSON object, and exit code 1."""
    from parquet_sink.cli import commands

    def broken(*args, **kwargs):
        raise KeyError("a dependency's error")

    monkeypatch.setattr(commands, "verify", broken)
    assert main(["verify", str(paths["good"])]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "KeyError" in err and str(paths["good"]) in err and "-v" in err
    assert main(["verify", str(paths["good"]), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["ok"] is False


@pytest.mark.parametrize("args", [
    ["vacuum", "{good}", "--older-than", "1d"],
    ["optimize", "{good}", "--target-file-size", "0"],
    ["optimize", "{good}", "--partition", "nope=1"],
])
def test_input_errors_speak_the_command_line_not_python(capsys, paths, args):
    """A library check the command's input fails is reported without the Python call the library names for its
    callers (``vacuum('/data/out'): ...``): the command line has no such call, and no output named twice."""
    code, out, err = _run(capsys, args[0], args[1:], paths, as_json=False)
    assert code == 2 and out == ""
    message = err.rstrip().splitlines()[-1]
    assert message.startswith("parquet-sink: error: ")
    assert not re.search(r"\w+\('", message), message


# command line with a bad input -> what its message must say, in the command's options
BAD_INPUTS = {
    "vacuum --older-than 1d": (["vacuum", "{good}", "--older-than", "1d"], ["--older-than 1d", "--allow-short-retention"]),
    "vacuum --older-than 3h --dry-run": (["vacuum", "{good}", "--older-than", "3h", "--dry-run"], ["--older-than 3h"]),
    "optimize --target-file-size 0": (["optimize", "{good}", "--target-file-size", "0"], ["--target-file-size"]),
    "optimize --target-file-size lots": (["optimize", "{good}", "--target-file-size", "lots"], ["--target-file-size 'lots'"]),
    "optimize --partition nope=1": (["optimize", "{good}", "--partition", "nope=1"], ["--partition"]),
    "optimize --sort-by nope": (["optimize", "{good}", "--sort-by", "nope"], ["--sort-by nope"]),
    "optimize --z-order nope --z-order id": (["optimize", "{good}", "--z-order", "nope", "--z-order", "id"],
                                            ["--z-order nope --z-order id"]),
    "optimize --sort-by id --z-order id": (["optimize", "{good}", "--sort-by", "id", "--z-order", "id"],
                                          ["--sort-by id", "--z-order id"]),
    "delta-sync --time-zone Mars/Base": (["delta-sync", "{good}", "--time-zone", "Mars/Base"], ["--time-zone 'Mars/Base'"]),
    "iceberg-sync --table db.events": (["iceberg-sync", "{good}", "--table", "db.events"],
                                       ["--catalog-uri (or --catalog-prop) is missing", "--table"]),
    "iceberg-sync --table events": (["iceberg-sync", "{good}", "--catalog-uri", "sqlite:///:memory:", "--table",
                                     "events"], ["--table"]),
    "vacuum --table db.events": (["vacuum", "{good}", "--table", "db.events"],
                                 ["--catalog-uri (or --catalog-prop) is missing", "--table"]),
    "vacuum --catalog-uri": (["vacuum", "{good}", "--catalog-uri", "sqlite:///:memory:"], ["--table is missing"]),
    # one rule for a table's name wherever it enters (sync_iceberg's table=, the writers' iceberg["table"])
    **{f"{command} --table events": ([command, "{good}", "--catalog-uri", "sqlite:///:memory:", "--table", "events"],
                                     ["--table is an identifier 'namespace.name', not 'events'"])
       for command in ("vacuum", "optimize")},
    "optimize --time-zone Mars/Base": (["optimize", "{good}", "--time-zone", "Mars/Base"], ["--time-zone 'Mars/Base'"]),
    "doctor --version -1": (["doctor", "{good}", "--app-id", "a", "--version", "-1"], ["--version must"]),
    "doctor --app-id ''": (["doctor", "{good}", "--app-id", "", "--version", "1"], ["--app-id must"]),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
@pytest.mark.parametrize("as_json", [False, True])
def test_input_errors_name_the_commands_options_not_the_python_parameters(capsys, paths, case, as_json):
    """A library check the command's input fails names the option the user typed, not the Python parameter it feeds
    (``older_than=1d ... Pass allow_short_retention=True``): every parameter of the library function the command
    calls that one of its options feeds is absent from the message (as ``name=`` or as a word), the options
    are there; the Python API's own message is unchanged."""
    from parquet_sink import doctor, sync_delta_log, sync_iceberg, vacuum
    from parquet_sink.maintenance import optimize

    args, expected = BAD_INPUTS[case]
    code, out, err = _run(capsys, args[0], args[1:], paths, as_json)
    message = json.loads(out)["error"] if as_json else err.strip().splitlines()[-1]
    assert code == 2, (code, out, err)
    for fragment in expected:
        assert fragment in message, (fragment, message)
    function = {"vacuum": vacuum, "optimize": optimize, "delta-sync": sync_delta_log, "doctor": doctor,
                "iceberg-sync": sync_iceberg}[args[0]]
    sub = build_parser()._subparsers._group_actions[0].choices[args[0]]
    fed = {o[2:].replace("-", "_") for o in _options(sub)} | {action.dest for action in sub._actions}
    parameters = [p for p in inspect.signature(function).parameters if p in fed]  # the parameters options feed
    assert parameters, fed
    for name in parameters:
        assert not re.search(rf"(?<![\w-]){name}(?![\w-])", message), (name, message)
    assert "(CLI:" not in message and not re.search(r"\w+\('", message), message


def test_the_python_api_keeps_naming_its_parameters(paths):
    """The command line's spelling is its own: the same refusal from the Python API names the call and its
    parameters as before."""
    from parquet_sink import vacuum
    from parquet_sink.maintenance import optimize
    from parquet_sink.errors import ParameterError

    good = str(paths["good"])
    with pytest.raises(ParameterError) as short:
        vacuum(good, "1d")
    assert str(short.value).startswith(f"vacuum({good!r}): older_than=1d is shorter")
    assert "Pass allow_short_retention=True (CLI: --allow-short-retention)" in str(short.value)
    with pytest.raises(ParameterError, match=r"pass sort_by=\['id'\] or z_order=\['id'\], not both"):
        optimize(good, sort_by=["id"], z_order=["id"])


@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_is_one_line_and_exit_code_130_not_a_traceback(tmp_path, as_json):
    """Ctrl-C mid-command (SIGINT while `verify` reads a Delta log: the process stopped at the ``delta_read``
    failpoint, interrupted, resumed) is one line on stderr, or one JSON object, exit code 130. Before, Python's
    KeyboardInterrupt traceback."""
    import os
    import signal
    import time

    out = tmp_path / "out"
    write_batch(out, pa.table({"id": [1, 2]}), app_id="a", version=0, delta_log=True)
    env = dict(os.environ, PARQUET_SINK_FAILPOINTS="delta_read=stop")
    child = subprocess.Popen(
        [sys.executable, "-m", "parquet_sink", "verify", str(out)] + (["--json"] if as_json else []),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as a terminal's foreground job gets it
    )
    deadline = time.monotonic() + 60
    while open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "T":  # stopped at the failpoint
        assert time.monotonic() < deadline and child.poll() is None, child.communicate()
        time.sleep(0.05)
    child.send_signal(signal.SIGINT)
    child.send_signal(signal.SIGCONT)
    stdout, stderr = child.communicate(timeout=60)
    assert child.returncode == 130, (stdout, stderr)
    assert "Traceback" not in stdout + stderr
    if as_json:
        data = json.loads(stdout)
        assert (data["ok"], data["type"], stderr) == (False, "KeyboardInterrupt", "")
        assert str(out) in data["error"] and "run the command again" in data["error"]
    else:
        assert stdout == "" and stderr.splitlines() == [
            f"parquet-sink: error: {out}: interrupted; nothing was half-committed (every commit is atomic): run the "
            "command again"
        ]


@pytest.mark.parametrize("batches", [(), (0,)])
def test_doctor_on_a_checkpoint_that_never_finished_a_batch(capsys, tmp_path, batches):
    """A query killed after it wrote its checkpoint's ``metadata`` (its id) and before its first offsets, or before
    the first batch's commit: doctor says so, and prints no Python ``None`` as a batch number. Before: "offsets up
    to batch None, commits up to batch None", and "there is no checkpoint yet" for a checkpoint that exists."""
    ckpt = tmp_path / "ckpt"
    (ckpt / "offsets").mkdir(parents=True)
    (ckpt / "metadata").write_text('{"id":"11111111-2222-3333-4444-555555555555"}')
    for batch in batches:
        (ckpt / "offsets" / str(batch)).write_text("v1\n{}\n{}")
    assert main(["doctor", str(tmp_path / "out"), "--checkpoint", str(ckpt)]) == 0
    text = capsys.readouterr().out
    assert "None" not in text and "no checkpoint yet" not in text
    first = text.splitlines()[0]
    if batches:
        assert first.endswith("offsets up to batch 0, no commit yet") and "Spark will re-run batch 0" in text
    else:
        assert first.endswith("no offsets yet (no batch planned)") and "the query starts at batch 0" in text
    assert "the sink will commit it as log batch 0" in text
    assert main(["doctor", str(tmp_path / "out"), "--checkpoint", str(ckpt), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["checkpoint"]["offsets"], data["checkpoint"]["commits"], data["log_batch"]) == (
        batches[0] if batches else None, None, 0)


@pytest.mark.parametrize("where", ["_spark_metadata", "_spark_metadata/", "_exactly_once", "file"])
def test_doctor_refuses_a_path_inside_an_output_as_the_writers_do(capsys, paths, where):
    """`doctor OUT/_spark_metadata` read the log directory as an empty output: "commits it as log batch 0", exit 0
    (for a checkpoint: OutputResetError, "the output was deleted or reset"), while the output's app had committed
    versions 0 and 1 and write_batch refuses that path. Now doctor refuses it as the writers do, naming the output."""
    good = paths["good"]
    target = str(next(good.glob("part-*.parquet"))) if where == "file" else f"{good}/{where}"
    for args in (["--app-id", "a", "--version", "1"], ["--checkpoint", str(paths["ckpt"])]):
        assert main(["doctor", target, *args, "--json"]) == 2
        data = json.loads(capsys.readouterr().out)
        assert (data["ok"], data["type"]) == (False, "ParameterError")
        assert (f"give {good}." if where != "file" else "is a file, not an output directory") in data["error"]
        assert not data["error"].startswith("doctor(")  # the command line's terms, not a Python call's
    with pytest.raises(errors.ParameterError, match=r"^doctor\(.*not an output"):
        doctor(target, app_id="a", version=1)
    assert main(["doctor", str(good), "--app-id", "a", "--version", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["action"] == "skip"  # the output itself: version 1 is committed


def test_the_remedy_for_an_empty_log_file_works_when_followed(capsys, tmp_path):
    """An empty log file (truncated, or a crashed writer on a store without atomic writes): verify's remedy was
    "delete it and replay the batch" for any of them, which for an older one breaks the chain for good ("log file
    1 is missing"). It now says that only the newest one can be deleted; followed literally on the newest, the
    rerun writes the batch again and every row is there once."""
    out = tmp_path / "out"
    for version in range(3):
        write_batch(out, pa.table({"id": [version * 10, version * 10 + 1]}), app_id="a", version=version)
    (out / "_spark_metadata" / "1").write_bytes(b"")
    assert main(["verify", str(out), "--json"]) == 1
    older = json.loads(capsys.readouterr().out)["problems"][0]
    assert "If it is the log's newest file, deleting it" in older and "an older one cannot be deleted" in older
    (out / "_spark_metadata" / "1").unlink()  # what the old remedy said: the chain is broken for good
    assert main(["verify", str(out), "--json"]) == 1
    assert "_spark_metadata/1 (batch 1) is missing" in json.loads(capsys.readouterr().out)["problems"][0]

    out = tmp_path / "newest"
    for version in range(3):
        write_batch(out, pa.table({"id": [version * 10, version * 10 + 1]}), app_id="a", version=version)
    (out / "_spark_metadata" / "2").write_bytes(b"")
    assert main(["verify", str(out)]) == 1
    assert "deleting it un-commits batch 2" in capsys.readouterr().out
    (out / "_spark_metadata" / "2").unlink()  # the remedy, literally
    assert main(["doctor", str(out), "--app-id", "a", "--version", "2", "--json"]) == 0
    assert (json.loads(capsys.readouterr().out)["action"]) == "commit"
    assert write_batch(out, pa.table({"id": [20, 21]}), app_id="a", version=2).committed
    assert main(["vacuum", str(out), "--older-than", "0s", "--allow-short-retention", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["files"]) == 1  # the first attempt's file, no longer committed
    assert main(["verify", str(out)]) == 0
    assert sorted(read_committed(out)["id"].to_pylist()) == [0, 1, 10, 11, 20, 21]


@pytest.mark.parametrize("command", ["vacuum", "delta-sync"])
def test_compact_interval_is_refused_where_it_would_be_ignored(capsys, paths, command):
    """vacuum and delta-sync infer the log's compaction interval: --compact-interval was accepted and ignored
    (docs/cli.md said every command takes it); now a usage error, exit 2, nothing done. (doctor takes it as the
    writer's argument: tests/write/test_output_settings.py.)"""
    code, out, _ = _run(capsys, command, ["{good}", "--compact-interval", "5"], paths, as_json=True)
    assert code == 2 and "--compact-interval" in json.loads(out)["error"], out


def test_the_options_spelling_leaves_paths_alone():
    """A partition directory named like a parameter (``version=3``, ``partitions=a``) inside a path in a message is
    part of the path: it was respelled as ``--version 3``, garbling the path the user must find."""
    from parquet_sink.errors import respell

    spelling = {"version": "--version", "older_than": "--older-than", "partitions": "--partition"}
    assert respell("cannot read /data/out/version=3/part-0.parquet: older_than=1d is short", spelling) == (
        "cannot read /data/out/version=3/part-0.parquet: --older-than 1d is short")
    assert respell("s3://b/out/partitions=a/version/x.parquet is missing; version must be >= 0", spelling) == (
        "s3://b/out/partitions=a/version/x.parquet is missing; --version must be >= 0")
    for path in ("abfs://c@a.dfs.core.windows.net/out?version=3&older_than=1d", "C:\\out\\version=3\\older_than"):
        assert respell(f"cannot read {path}: version must be >= 0", spelling) == (
            f"cannot read {path}: --version must be >= 0")
