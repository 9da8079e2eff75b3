"""Storage options for the command line: from the environment, a JSON file and ``--storage-option KEY=VALUE``,
never printed (they hold credentials)."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from ..errors import ParameterError

OPTIONS_ENV = "PARQUET_SINK_STORAGE_OPTIONS"
OPTIONS_HELP = (
    f"Storage options (fsspec, e.g. credentials) come from three places, merged key by key; later ones win: "
    f"the environment variable {OPTIONS_ENV} (a JSON object), then --storage-options-file PATH (a JSON "
    "object), then each --storage-option KEY=VALUE. Pass secrets by the first two: a command line is visible "
    "to other users (ps) and lands in shell history. Options are never printed."
)


def storage_options(args: argparse.Namespace) -> dict[str, Any]:
    """The storage options of a command, key by key from lowest to highest precedence: the
    ``PARQUET_SINK_STORAGE_OPTIONS`` environment variable, ``--storage-options-file``, ``--storage-option``.

    Example: with ``PARQUET_SINK_STORAGE_OPTIONS='{"account_name": "a", "anon": false}'`` and
    ``--storage-option account_name=b``, the options are ``{"account_name": "b", "anon": False}``.
    """
    from_env: dict[str, Any] = {}
    if os.environ.get(OPTIONS_ENV, "").strip():
        try:
            from_env = json.loads(os.environ[OPTIONS_ENV])
        except ValueError as exc:  # the message names a position, never the (secret) text
            raise ParameterError(
                f"{OPTIONS_ENV} is not valid JSON ({exc}); set it to an object like "
                '\'{"account_name": "acct", "account_key": "..."}\''
            ) from None
        if not isinstance(from_env, dict):
            raise ParameterError(
                f"{OPTIONS_ENV} must hold a JSON object of storage options, not a {type(from_env).__name__}"
            )
    return {**from_env, **(args.storage_options_file or {}), **dict(args.storage_option)}


def parse_storage_option(text: str) -> tuple[str, Any]:
    """``key=value`` -> (key, value): ``true``/``false`` and integers are converted, a value starting with
    ``{`` or ``[`` is JSON (``client_kwargs={"endpoint_url": "http://minio:9000"}``). Errors never echo the
    value: it may be a secret."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise argparse.ArgumentTypeError("expected key=value")
    if value.lower() in ("true", "false"):
        return key, value.lower() == "true"
    if value.isdigit() and value.isascii():
        return key, int(value)
    if value.startswith(("{", "[")):
        try:
            return key, json.loads(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"the value of {key!r} starts like JSON but is not valid JSON") from None
    return key, value


def read_options_file(path: str) -> dict[str, Any]:
    """The storage options in a JSON file (an object); errors name the file, never its content."""
    try:
        with open(path, encoding="utf-8") as fh:
            options = json.load(fh)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(options, dict):
        raise argparse.ArgumentTypeError(f"{path} must hold a JSON object of storage options")
    return options
