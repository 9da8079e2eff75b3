"""Commits: exclusive create (put-if-absent), the one operation a commit of the log needs, and the probe that
proves a store honours it before the first commit there.

Local disk writes a temp file and ``os.link``\\ s it into place; object stores send a conditional PUT
(``pipe_file(mode="create")``) and read the object back when the answer to a PUT that succeeded was lost.
The counterpart of Spark's ``CheckpointFileManager.createAtomic(overwriteIfPossible=false)`` and of
delta-rs's ``put_if_absent`` log store.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ..errors import StorageError, UnsafeStorageError
from ..failpoints import failpoint
from .paths import temporary_name
from .reachability import store_key

if TYPE_CHECKING:
    from .filesystem import Storage

# s3fs's pipe_file switches to a multipart upload, whose completion carries no If-None-Match, from twice
# its chunk size on: a log file is written with a chunk size above its own size, as one PutObject (the
# request the probe proved exclusive), which S3 allows up to 5 GiB.
_S3_MIN_CHUNK = 50 * 2**20
_S3_MAX_PUT = 5 * 2**30
# The first release of each package whose pipe_file(mode="create") really is exclusive (the floors in
# pyproject.toml); older ones overwrite (fsspec's memory/base, adlfs) or reject the argument (s3fs).
EXCLUSIVE_CREATE_SINCE = {"fsspec": "2024.12.0", "adlfs": "2024.12.0", "s3fs": "2024.12.0"}
_PROBED: dict[tuple[str, ...], bool] = {}  # by store_key()
_PROBE_LOCK = threading.Lock()


def _release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version string: ``"2024.12.0"`` -> ``(2024, 12, 0)``."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


@contextlib.contextmanager
def local_temp(path: str, data: bytes | memoryview | Iterable[bytes], durable: bool) -> Iterator[str]:
    """A temporary file next to ``path`` holding ``data`` (fsynced if ``durable``), removed on the way
    out: the caller links or renames it into place. Its name is :func:`~.paths.temporary_name`'s."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = temporary_name(path)
    try:
        with open(tmp, "wb") as fh:
            for chunk in [data] if isinstance(data, (bytes, memoryview)) else data:
                fh.write(chunk)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        yield tmp
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def create_exclusive(storage: Storage, path: str, data: bytes | Iterable[bytes], publish_failpoint: bool = False) -> bool:
    """Create ``path`` with ``data`` unless it exists (see :meth:`Storage.put_if_absent`), without the probe."""
    if storage.is_local:
        return _create_local(path, data, publish_failpoint)
    payload = data if isinstance(data, bytes) else b"".join(data)
    options: dict[str, Any] = {}
    if storage.protocol == "s3":
        if len(payload) >= _S3_MAX_PUT:
            raise StorageError(
                f"cannot create {storage.display(path)} exclusively: {len(payload)} bytes exceed S3's largest "
                "single PUT (5 GiB), and a multipart upload is not exclusive. Compact the log more often "
                "(a smaller compact_interval) or write fewer, larger files per batch."
            )
        options["chunksize"] = max(_S3_MIN_CHUNK, len(payload))
    if publish_failpoint:
        failpoint("commit_publish")
    for attempt in range(5):
        try:
            storage.fs.pipe_file(path, payload, mode="create", **options)
            return True
        except FileExistsError:
            # The answer to a PUT that succeeded may have been lost and retried: identical bytes
            # (payloads carry a unique token) mean this writer is the one that created it.
            try:
                return storage.read_bytes(path) == payload
            except FileNotFoundError:
                continue
        except OSError as exc:
            # s3fs: a 409 ConditionalRequestConflict (EIO) or a bare 412 (EINVAL) is a race with
            # another writer; re-check and retry.
            if exc.errno not in (errno.EIO, errno.EINVAL) or attempt == 4:
                raise
            if storage.exists(path):
                return storage.read_bytes(path) == payload
            time.sleep(0.05 * (attempt + 1))
    raise StorageError(f"exclusive create of {storage.display(path)} kept racing with deletes; retry later")


def _create_local(path: str, data: bytes | Iterable[bytes], publish_failpoint: bool) -> bool:
    with local_temp(path, data, durable=True) as tmp:
        if publish_failpoint:
            failpoint("commit_publish")
        try:
            os.link(tmp, path)  # atomic, never overwrites
        except FileExistsError:
            return False
        dir_fd = os.open(os.path.dirname(path), os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return True


def probe(storage: Storage) -> None:
    """Once per store (:func:`~parquet_sink.storage.reachability.store_key`) and process: check that a second
    exclusive create really fails. When it does not (or the create itself fails) and an fsspec package older
    than exclusive create is installed, the error says to upgrade it rather than blaming the store."""
    key = store_key(storage)
    if _PROBED.get(key):
        return
    with _PROBE_LOCK:
        if _PROBED.get(key):
            return
        path = storage.join("_spark_metadata", f".parquet-sink-probe.{uuid.uuid4().hex}.tmp")
        try:
            first = create_exclusive(storage, path, b"probe-1")
            try:
                second = create_exclusive(storage, path, b"probe-2")
            finally:
                storage.delete(path)
        except Exception as exc:
            if outdated := _outdated_packages(storage):
                raise UnsafeStorageError(_upgrade_advice(storage, outdated, f"the create failed: {exc!r}")) from exc
            raise
        if not first or second:
            what = "a second create of the same object succeeded"
            if outdated := _outdated_packages(storage):
                raise UnsafeStorageError(_upgrade_advice(storage, outdated, what))
            raise UnsafeStorageError(
                f"{storage.protocol}:// storage at {storage.url} does not honour exclusive create "
                f"({what}), so two writers could both commit one batch. Use a store with conditional "
                "writes (local disk, Azure Blob/ADLS, S3, GCS)."
            )
        _PROBED[key] = True


def _outdated_packages(storage: Storage) -> list[str]:
    """The installed packages behind this filesystem that predate exclusive create, as ``"adlfs 2024.7.0"``."""
    names = {"fsspec", type(storage.fs).__module__.split(".", 1)[0]}
    outdated = []
    for name in sorted(names & EXCLUSIVE_CREATE_SINCE.keys()):
        installed = str(getattr(sys.modules.get(name), "__version__", ""))  # the code actually running
        if installed and _release(installed) < _release(EXCLUSIVE_CREATE_SINCE[name]):
            outdated.append(f"{name} {installed}")
    return outdated


def _upgrade_advice(storage: Storage, outdated: list[str], what: str) -> str:
    names = [package.split()[0] for package in outdated]
    return storage.redact(
        f"exclusive create on {storage.protocol}:// storage at {storage.url} does not work ({what}): the installed "
        f"{', '.join(outdated)} predate{'s' if len(outdated) == 1 else ''} exclusive create "
        f"(pipe_file(mode='create')). Upgrade {' and '.join(names)}: pip install --upgrade "
        + " ".join(f'"{name}>={EXCLUSIVE_CREATE_SINCE[name]}"' for name in names)
    )
