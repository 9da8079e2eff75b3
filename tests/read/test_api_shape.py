"""The Python API as its neighbours shape theirs (issue 36, item 9): a negative batch id is refused, not an empty
snapshot; ``as_of_time`` also takes an ISO-8601 string with its offset (delta-rs's ``load_as_version`` takes an
RFC 3339 string; a time without a zone is refused, like a naive datetime); ``read_committed`` is typed by its
overloads (a ``pyarrow.Table`` without ``spark=``, a DataFrame with it), so the README's own code type-checks
under mypy; paths take ``os.PathLike``; ``storage_options`` is keyword-only."""

from __future__ import annotations

import datetime as dt
import importlib.util
import inspect
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import parquet_sink
from parquet_sink import committed_files, history, read_committed, snapshot, write_batch
from parquet_sink import errors
from parquet_sink.errors import ParameterError
from parquet_sink.maintenance import read_output

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("api") / "out"
    for v in range(3):
        write_batch(root, pa.table({"id": [v]}), app_id="a", version=v)  # a Path, not a str
        time.sleep(0.01)
    return root


@pytest.mark.parametrize("value", [-1, -5, 1.0, True, "2"], ids=repr)
def test_a_bad_batch_id_is_refused(out, value):
    for call in (lambda: read_committed(out, as_of_batch=value), lambda: committed_files(out, batches=(value, 2)),
                 lambda: committed_files(out, batches=(0, value))):
        with pytest.raises(ParameterError, match=r"a batch id is an integer >= 0"):
            call()
    with pytest.raises(ParameterError, match="batches="):
        committed_files(out, batches="0-2")  # type: ignore[arg-type]


@given(offset_minutes=st.integers(-14 * 60, 14 * 60), form=st.sampled_from(["T", " "]), z=st.booleans())
@settings(max_examples=30, deadline=None)
def test_as_of_time_takes_an_iso_string_with_its_offset(out, offset_minutes, form, z):
    times = history(out).column("commit_time").to_pylist()[::-1]  # oldest first, aware UTC datetimes
    for batch, committed in enumerate(times):
        zone = dt.timezone(dt.timedelta(minutes=0 if z else offset_minutes))
        local = committed.astimezone(zone)
        text = local.isoformat(sep=form)
        if z:
            text = text.replace("+00:00", "Z")
        expected = read_committed(out, as_of_time=committed)
        assert read_committed(out, as_of_time=text).equals(expected)
        assert sorted(expected.column("id").to_pylist()) == list(range(batch + 1))


@pytest.mark.parametrize("value", ["2026-11-24T06:00:00", "2026-11-24", "yesterday", "", 1795000000, dt.date(2026, 1, 1),
                                   dt.datetime(2026, 1, 1)], ids=repr)
def test_as_of_time_without_a_zone_or_not_a_time_is_refused(out, value):
    with pytest.raises(ParameterError, match=r"^\w+\('[^']*'\): as_of_time=.*(no time zone|ISO-8601|aware datetime)"):
        read_committed(out, as_of_time=value)


def test_paths_take_os_pathlike_and_storage_options_is_keyword_only(out):
    assert read_committed(out).num_rows == 3 and read_output(out).latest == 2
    # the functions of the API, the sink and the log; Storage, the store's own seam, takes (url, storage_options)
    # as fsspec's filesystems do
    public = [getattr(parquet_sink, name) for name in parquet_sink.__all__]
    public = [f for f in public if inspect.isfunction(f)] + [
        parquet_sink.ParquetSink.__init__, parquet_sink.MetadataLog.__init__, read_output,
    ]
    assert len(public) >= 12
    for function in public:
        parameters = inspect.signature(function).parameters
        option = parameters.get("storage_options")
        if option is not None:
            assert option.kind is inspect.Parameter.KEYWORD_ONLY, f"{function.__qualname__}: storage_options positional"
        path = parameters.get("path") or parameters.get("url")
        if path is not None:
            assert "PathLike" in str(path.annotation), f"{function.__qualname__}({path.name}: {path.annotation})"


def _mypy() -> list[str]:
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install mypy: the tests dependency group has it)")
    return [sys.executable, "-m", "mypy"]


def test_readme_python_examples_type_check(tmp_path):
    """Each README Python block that is Python as written (not the streaming one with its `...`), checked by
    mypy against this package's annotations: ``read_committed(...)`` without ``spark=`` is a ``pyarrow.Table``."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    files = []
    for number, block in enumerate(blocks):
        try:
            compile(block, f"block{number}", "exec")
        except SyntaxError:
            continue
        path = tmp_path / f"readme_block_{number}.py"
        path.write_text(block)
        files.append(str(path))
    assert len(files) >= 4
    typing_check = tmp_path / "overloads.py"
    typing_check.write_text(
        "from typing import assert_type\n"
        "from pathlib import Path\n"
        "import pyarrow as pa\n"
        "from pyspark.sql import DataFrame, SparkSession\n"
        "from parquet_sink import read_committed\n"
        "def check(spark: SparkSession) -> None:\n"
        "    assert_type(read_committed(Path('/data/events')), pa.Table)\n"
        "    assert_type(read_committed('/data/events', spark=spark), DataFrame)\n"
        "    assert_type(read_committed('/data/events', as_of_time='2026-11-24T06:00:00Z'), pa.Table)\n"
    )
    files.append(str(typing_check))
    env = {**os.environ, "MYPYPATH": str(ROOT / "src")}
    result = subprocess.run(
        [*_mypy(), "--ignore-missing-imports", "--no-incremental", "--cache-dir", os.devnull,
         "--follow-imports", "silent", *files],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_inputs_a_user_gets_wrong_get_typed_errors(out, tmp_path):
    """The attack checklist's inputs: a string where a list is meant, a column that is not there, the log
    directory instead of the output, a negative ``after``, a non-positive ``max_records_per_file``."""
    with pytest.raises(ParameterError, match=r"columns must be a list .* write columns=\['id'\]"):
        read_committed(out, columns="id")  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match=r"columns \['nope'\] are not in the committed data .* \['id'\]"):
        read_committed(out, columns=["nope"])
    from parquet_sink import iter_batches
    from parquet_sink.errors import NotAnOutputError

    with pytest.raises(NotAnOutputError, match="is a log directory: give its parent"):
        read_committed(out / "_spark_metadata")
    with pytest.raises(ParameterError, match=r"^iter_batches\('[^']*'\): after=-5"):
        list(iter_batches(out, after=-5))
    for bad in (0, -1):
        with pytest.raises(ParameterError, match="max_records_per_file must be a positive integer"):
            write_batch(tmp_path / "o", pa.table({"id": [1]}), app_id="a", version=0, max_records_per_file=bad)
    assert not (tmp_path / "o").exists()


def test_an_unknown_keyword_names_the_function_called(out):
    """Readers pass their options on to ``snapshot``: a keyword none of them takes (``columns`` on a count, a typo)
    is refused in the name of the function the user called, with the one meant where it is close."""
    from parquet_sink import committed_dataset, count_committed

    cases = [
        (lambda: count_committed(out, columns=["id"]), r"^count_committed\(.*unknown keyword argument 'columns'; it takes filter"),
        (lambda: read_committed(out, colums=["id"]), r"^read_committed\(.*'colums' \(did you mean 'columns'\?\)"),
        (lambda: committed_files(out, as_of=1), r"^committed_files\(.*'as_of' \(did you mean 'as_of_"),
        (lambda: committed_dataset(out, timezone="UTC"), r"^committed_dataset\(.*'timezone' \(did you mean 'time_zone'\?\)"),
    ]
    for call, match in cases:
        with pytest.raises(ParameterError, match=match):
            call()
    assert count_committed(out, as_of_batch=1) == 2  # the options they do take still reach snapshot


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def test_spark_users_keywords_are_named_back_in_ours(tmp_path):
    """Issue 56, item 2: ``ParquetSink(out, partitionBy=[...])`` and every public callable's keywords in Spark's
    camelCase are a typed KeywordError (a TypeError, as Python's own) naming the call and our keyword, before
    anything is read or written."""
    out = str(tmp_path / "out")
    callables = [getattr(parquet_sink, name) for name in parquet_sink.__all__]
    callables = [c for c in callables if inspect.isfunction(c) or c in (parquet_sink.ParquetSink, parquet_sink.SinkOutput)]
    checked = 0
    for target in callables:
        signature = inspect.signature(target.__init__ if inspect.isclass(target) else target)
        names = [p.name for p in signature.parameters.values() if "_" in p.name and p.kind is p.KEYWORD_ONLY]
        first = next(iter(signature.parameters.values()))
        if not names or first.name not in ("path", "self"):
            continue
        camel = _camel(names[0])
        with pytest.raises(errors.KeywordError) as refused:
            target(out, **{camel: None})
        assert isinstance(refused.value, TypeError)
        assert f"unknown keyword argument {camel!r} (did you mean {names[0]!r}?)" in str(refused.value), str(refused.value)
        assert repr(out) in str(refused.value)
        checked += 1
    assert checked >= 12 and not (tmp_path / "out").exists()


def test_a_cli_option_spelled_as_python_names_the_command_and_the_option(capsys):
    from parquet_sink.cli.main import main

    assert main(["vacuum", "/nowhere", "--older_than", "1d"]) == 2
    said = capsys.readouterr().err
    assert "usage: parquet-sink vacuum" in said and "--older_than: did you mean --older-than?" in said, said
