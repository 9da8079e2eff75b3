"""One rule for every duration a user gives (``retention``, ``cleanup_delay``, ``vacuum``'s ``older_than``,
``sync_delta_log``'s ``log_retention``, the CLI's ``--older-than``): a whole number with its unit, or a
``timedelta``. A bare number (``retention="7"``, Spark's 7 ms) is refused at every entry point with a typed error
naming the parameter, the value and an example; and ``verify`` warns when retention left no committed file while
data files exist (issue 36, item 1)."""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
import time

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parquet_sink import MetadataLog, ParquetSink, read_committed, sync_delta_log, vacuum, write_batch
from parquet_sink.errors import ParameterError
from parquet_sink.log.compaction import LogOptions, parse_duration_ms
from parquet_sink.maintenance import verify

UNITS = {
    1: ["ms", "millisecond", "milliseconds"],
    1000: ["s", "sec", "second", "seconds"],
    60_000: ["m", "min", "minute", "minutes"],
    3_600_000: ["h", "hour", "hours"],
    86_400_000: ["d", "day", "days"],
    604_800_000: ["w", "week", "weeks"],
}
BARE = ["7", " 7 ", "0", "7.5", "-1", 7, 7.0, 0, -5]
BAD = ["7.5d", "-1d", "soon", "", "d", "7 fortnights", "7d7h", True, None, [7]]


@given(
    number=st.integers(0, 10_000),
    unit=st.sampled_from([(ms, name) for ms, names in UNITS.items() for name in names]),
    space=st.sampled_from(["", " ", "  "]),
    upper=st.booleans(),
    interval=st.booleans(),
)
@settings(max_examples=60, deadline=None)
def test_durations_with_a_unit_parse(number, unit, space, upper, interval):
    ms, name = unit
    text = ("interval " if interval else "") + f"{number}{space}{name.upper() if upper else name}"
    assert parse_duration_ms(text) == number * ms
    assert parse_duration_ms(dt.timedelta(milliseconds=number * ms)) == number * ms


@pytest.mark.parametrize("value", BARE + BAD, ids=repr)
def test_bare_numbers_and_garbage_refused_naming_parameter_value_and_example(value):
    with pytest.raises(ParameterError) as info:
        parse_duration_ms(value, "retention")
    message = str(info.value)
    assert message.startswith(f"retention={value!r}") and "'7d'" in message
    if value in BARE and not isinstance(value, bool):
        assert "bare number is refused" in message


def test_negative_timedelta_refused():
    with pytest.raises(ParameterError, match="must not be negative"):
        parse_duration_ms(dt.timedelta(seconds=-1), "cleanup_delay")


# how a refusal begins: an entry point on an output names the call and the output first
_CALL = r"(?:(?:MetadataLog|ParquetSink|vacuum|sync_delta_log)\('[^']*'\): )"


def _entry_points(tmp_path):
    """Each public entry point of a duration, as a call taking the value."""
    out = tmp_path / "out"
    write_batch(str(out), pa.table({"id": [1]}), app_id="a", version=0)
    return {
        "LogOptions(retention)": lambda v: LogOptions(retention=v),
        "LogOptions(cleanup_delay)": lambda v: LogOptions(cleanup_delay=v),
        "MetadataLog(retention)": lambda v: MetadataLog(str(out), retention=v),
        "ParquetSink(retention)": lambda v: ParquetSink(str(tmp_path / "s"), retention=v, check_storage=False),
        "ParquetSink(cleanup_delay)": lambda v: ParquetSink(str(tmp_path / "s"), cleanup_delay=v, check_storage=False),
        "vacuum(older_than)": lambda v: vacuum(str(out), v, dry_run=True, allow_short_retention=True),
        "sync_delta_log(log_retention)": lambda v: sync_delta_log(str(out), log_retention=v),
    }


@pytest.mark.parametrize("value", ["1000000000000d", "5000000000w"], ids=repr)
def test_every_entry_point_refuses_a_duration_no_instant_can_hold(tmp_path, value):
    """A retention of a trillion days was accepted, then every compaction batch failed (its cutoff, now minus the
    retention, overflowed int64 milliseconds in pyarrow): refused where it enters, as every duration rule is."""
    for name, call in _entry_points(tmp_path).items():
        parameter = name.split("(")[1].rstrip(")")
        on_output = "(" in name and not name.startswith("LogOptions")
        with pytest.raises(ParameterError, match=f"^{_CALL if on_output else ''}{re.escape(parameter)}={re.escape(repr(value))}: a duration must be at most"):
            call(value)
    log = MetadataLog(str(tmp_path / "new"), compact_interval=2, retention=dt.timedelta.max)  # the longest: works
    assert log.add(0, []) and log.add(1, []) and log.latest_batch_id() == 1


@pytest.mark.parametrize("value", ["7", 7, "7.5d"], ids=repr)
def test_every_entry_point_refuses_a_bare_number(tmp_path, value):
    for name, call in _entry_points(tmp_path).items():
        parameter = name.split("(")[1].rstrip(")")
        on_output = not name.startswith("LogOptions")
        with pytest.raises(ParameterError, match=f"^{_CALL if on_output else ''}{re.escape(parameter)}={re.escape(repr(value))}") as info:
            call(value)
        assert "'7d'" in str(info.value), name
    assert not (tmp_path / "s").exists() and not (tmp_path / "out" / "_delta_log").exists()


def test_every_entry_point_accepts_units_and_timedelta(tmp_path):
    for name, call in _entry_points(tmp_path).items():
        call("7 days")
        call(dt.timedelta(days=8))


def test_cli_refuses_a_bare_older_than(tmp_path):
    write_batch(str(tmp_path), pa.table({"id": [1]}), app_id="a", version=0)
    for value in ("7", "7.5d", "-1d"):  # "-1d" after a space: the option's value, not an option of its own
        result = subprocess.run(
            [sys.executable, "-m", "parquet_sink", "vacuum", str(tmp_path), "--older-than", value, "--dry-run"],
            capture_output=True, text=True, timeout=120,
        )
        assert result.returncode == 2 and f"--older-than={value!r}" in result.stderr and "'7d'" in result.stderr
        assert ("must not be negative" in result.stderr) == value.startswith("-")
    result = subprocess.run(
        [sys.executable, "-m", "parquet_sink", "vacuum", str(tmp_path), "--older-than", "8 days", "--dry-run"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr


def test_verify_warns_when_retention_left_no_committed_file(tmp_path):
    """A retention far too short (here 1 ms, given with its unit) drops every entry at the next compaction: the
    data files are still there, but every reader sees 0 rows; ``verify`` stays without problems (the log is
    intact) but warns, so no one vacuums the data away as orphans."""
    root = str(tmp_path)
    for version in range(2):
        write_batch(root, pa.table({"id": [version]}), app_id="a", version=version, compact_interval=3, retention="1ms")
    assert verify(root).warnings == []
    time.sleep(0.01)
    MetadataLog(root).add(2, [])  # compacts with the output's short retention
    assert read_committed(root).num_rows == 0
    report = verify(root)
    assert report.ok and report.latest_batch == 2 and report.files == 0
    assert len(report.warnings) == 1 and "commits no data file" in report.warnings[0]
    assert "2 Parquet data file(s)" in report.warnings[0] and "do not vacuum" in report.warnings[0]


def test_verify_does_not_warn_for_an_output_of_empty_batches(tmp_path):
    root = str(tmp_path)
    write_batch(root, pa.table({"id": pa.array([], pa.int64())}), app_id="a", version=0)
    report = verify(root)
    assert report.ok and report.latest_batch == 0 and report.warnings == []


