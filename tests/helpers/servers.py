"""Real object-store servers on loopback for tests (no mocks).

Two context managers start a real server as a child process in its own process
group, wait until it answers HTTP, yield a small description of it, and always
stop it again by killing that process group (SIGTERM, then SIGKILL):

* :func:`azurite` runs the Azure Blob emulator Azurite (npm package ``azurite``,
  installed by ``npm ci`` in the repository root) for ``adlfs``.
* :func:`moto_s3` runs moto's S3 server (``python -m moto.server``) for ``s3fs``.

Both are separate processes listening on 127.0.0.1, so Spark executor processes
can reach them too. Only loopback addresses are ever used.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any, Callable, Iterator, Optional, Sequence

logger = logging.getLogger(__name__)

#: Repository root (the parent of ``tests/``).
REPO_ROOT: Path = Path(__file__).resolve().parents[2]

#: Azurite's blob-service launcher installed by ``npm ci``.
AZURITE_BLOB_BIN: Path = REPO_ROOT / "node_modules" / ".bin" / "azurite-blob"

LOOPBACK: str = "127.0.0.1"

#: Azurite's well-known development account and its public key (documented by Microsoft).
AZURITE_ACCOUNT_NAME: str = "devstoreaccount1"
AZURITE_ACCOUNT_KEY: str = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

#: Dummy credentials moto accepts.
MOTO_ACCESS_KEY: str = "testing"
MOTO_SECRET_KEY: str = "testing"
MOTO_REGION: str = "us-east-1"

_AZURITE_LISTEN_RE = re.compile(r"successfully listens on http://[^:\s]+:(\d+)")

DEFAULT_STARTUP_TIMEOUT: float = 60.0
_STOP_GRACE_SECONDS: float = 5.0


# --------------------------------------------------------------------------- helpers


def _free_loopback_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _read_log(log_path: Path) -> str:
    """Return the text a server wrote to its log file so far ("" if none)."""
    try:
        return log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _http_answers(url: str, timeout: float = 2.0) -> bool:
    """True when something answers HTTP at ``url`` (any status code counts)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (loopback only)
            response.read()
        return True
    except urllib.error.HTTPError:
        return True  # an HTTP error status is still an HTTP answer
    except (urllib.error.URLError, OSError):
        return False


def _start_process(args: Sequence[str], log_path: Path, cwd: Path) -> "tuple[subprocess.Popen[bytes], IO[bytes]]":
    """Start ``args`` in a new session (own process group), output to ``log_path``."""
    log_file = open(log_path, "wb")  # noqa: SIM115 (closed by _stop_process)
    try:
        proc = subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=str(cwd),
            start_new_session=True,
        )
    except BaseException:
        log_file.close()
        raise
    logger.debug("started pid %d: %s", proc.pid, " ".join(args))
    return proc, log_file


def _stop_process(proc: "subprocess.Popen[bytes]", log_file: IO[bytes], name: str) -> None:
    """Kill the process group led by ``proc``: SIGTERM, then SIGKILL after a grace period."""
    try:
        pgid = proc.pid  # start_new_session=True: the child leads its own group
        for sig, wait in ((signal.SIGTERM, _STOP_GRACE_SECONDS), (signal.SIGKILL, _STOP_GRACE_SECONDS)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break  # the whole group is gone already
            try:
                proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                logger.warning("%s (pid %d) did not stop on %s", name, proc.pid, sig.name)
                continue
            # The leader is gone; make sure no straggler of the group survives.
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            break
        if proc.poll() is None:
            logger.error("%s (pid %d) is still running after SIGKILL", name, proc.pid)
        else:
            logger.info("%s (pid %d) stopped", name, proc.pid)
    finally:
        log_file.close()


def _startup_error(name: str, reason: str, proc: "subprocess.Popen[bytes]", log_path: Path) -> RuntimeError:
    output = _read_log(log_path).strip() or "(no output)"
    return RuntimeError(
        f"{name} failed to start: {reason} (pid {proc.pid}, exit code {proc.poll()}).\n"
        f"--- server output ({log_path}) ---\n{output}"
    )


# --------------------------------------------------------------------------- Azurite


@dataclasses.dataclass(frozen=True)
class AzuriteServer:
    """A running Azurite blob service on 127.0.0.1."""

    host: str
    port: int
    pid: int
    location: Path
    log_path: Path
    startup_seconds: float
    account_name: str = AZURITE_ACCOUNT_NAME
    account_key: str = AZURITE_ACCOUNT_KEY

    @property
    def blob_endpoint(self) -> str:
        """Blob endpoint URL, path-style: ``http://127.0.0.1:PORT/devstoreaccount1``."""
        return f"http://{self.host}:{self.port}/{self.account_name}"

    @property
    def connection_string(self) -> str:
        """Connection string with the well-known development key."""
        return (
            "DefaultEndpointsProtocol=http;"
            f"AccountName={self.account_name};"
            f"AccountKey={self.account_key};"
            f"BlobEndpoint={self.blob_endpoint};"
        )

    @property
    def storage_options(self) -> dict[str, Any]:
        """Keyword arguments for ``adlfs.AzureBlobFileSystem`` / ``fsspec.filesystem("abfs", ...)``.

        adlfs uses the connection string when given (it wins over ``account_name``);
        ``account_name`` is passed too so the filesystem object carries it.
        """
        return {"connection_string": self.connection_string, "account_name": self.account_name}

    def filesystem(self, **extra: Any) -> Any:
        """A fresh (not instance-cached) ``adlfs.AzureBlobFileSystem`` on this server."""
        import adlfs

        return adlfs.AzureBlobFileSystem(skip_instance_cache=True, **self.storage_options, **extra)

    def make_container(self, name: str, exist_ok: bool = False) -> None:
        """Create container ``name`` (raise if it exists, unless ``exist_ok``)."""
        from azure.core.exceptions import ResourceExistsError
        from azure.storage.blob import BlobServiceClient

        with BlobServiceClient.from_connection_string(self.connection_string) as client:
            try:
                client.create_container(name)
            except ResourceExistsError:
                if not exist_ok:
                    raise
        logger.debug("Azurite container %r ready", name)


def _node_executable() -> str:
    node = shutil.which("node")
    if node is None:
        raise RuntimeError("`node` was not found on PATH; Azurite needs Node.js (e.g. apt-get install nodejs).")
    return node


@contextlib.contextmanager
def azurite(workdir: Path, startup_timeout: float = DEFAULT_STARTUP_TIMEOUT) -> Iterator[AzuriteServer]:
    """Run Azurite's blob service on 127.0.0.1 (a port the OS picks) for the ``with`` block.

    Data lives in ``workdir/azurite-data``, the server's output in ``workdir/azurite.log``.
    The server is stopped (its process group killed) when the block exits, whatever happens.
    """
    if not AZURITE_BLOB_BIN.exists():
        raise RuntimeError(
            f"{AZURITE_BLOB_BIN} is missing: run `npm ci` in {REPO_ROOT} to install Azurite (see package.json)."
        )
    node = _node_executable()
    workdir = Path(workdir)
    location = workdir / "azurite-data"
    location.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "azurite.log"
    args = [
        node,
        str(AZURITE_BLOB_BIN.resolve()),
        "--blobHost", LOOPBACK,
        "--blobPort", "0",
        "--location", str(location),
        "--silent",
        "--skipApiVersionCheck",
        "--disableTelemetry",
    ]  # fmt: skip
    started = time.monotonic()
    proc, log_file = _start_process(args, log_path, cwd=workdir)
    try:
        deadline = started + startup_timeout
        port: Optional[int] = None
        while port is None:
            match = _AZURITE_LISTEN_RE.search(_read_log(log_path))
            if match:
                port = int(match.group(1))
                break
            if proc.poll() is not None:
                raise _startup_error("Azurite", "the process exited", proc, log_path)
            if time.monotonic() > deadline:
                raise _startup_error("Azurite", f"no 'listens on' line within {startup_timeout:.0f}s", proc, log_path)
            time.sleep(0.05)
        server_url = f"http://{LOOPBACK}:{port}/{AZURITE_ACCOUNT_NAME}?comp=list"
        while not _http_answers(server_url):
            if proc.poll() is not None:
                raise _startup_error("Azurite", "the process exited", proc, log_path)
            if time.monotonic() > deadline:
                raise _startup_error("Azurite", f"no HTTP answer within {startup_timeout:.0f}s", proc, log_path)
            time.sleep(0.05)
        server = AzuriteServer(
            host=LOOPBACK,
            port=port,
            pid=proc.pid,
            location=location,
            log_path=log_path,
            startup_seconds=time.monotonic() - started,
        )
        logger.info("Azurite (pid %d) ready on port %d in %.2fs", proc.pid, port, server.startup_seconds)
        yield server
    finally:
        _stop_process(proc, log_file, "Azurite")


# --------------------------------------------------------------------------- moto S3


@dataclasses.dataclass(frozen=True)
class MotoServer:
    """A running moto server (S3 and the other mocked AWS APIs) on 127.0.0.1."""

    host: str
    port: int
    pid: int
    log_path: Path
    startup_seconds: float
    access_key: str = MOTO_ACCESS_KEY
    secret_key: str = MOTO_SECRET_KEY
    region_name: str = MOTO_REGION

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{self.host}:{self.port}"

    @property
    def storage_options(self) -> dict[str, Any]:
        """Keyword arguments for ``s3fs.S3FileSystem`` / ``fsspec.filesystem("s3", ...)``."""
        return {
            "key": self.access_key,
            "secret": self.secret_key,
            "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": self.region_name},
        }

    def filesystem(self, **extra: Any) -> Any:
        """A fresh (not instance-cached) ``s3fs.S3FileSystem`` on this server."""
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, **self.storage_options, **extra)

    def boto3_client(self) -> Any:
        """A plain boto3 S3 client on this server."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=self.region_name,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
        )

    def make_bucket(self, name: str) -> None:
        """Create bucket ``name`` (moto answers an existing bucket of ours with success)."""
        self.boto3_client().create_bucket(Bucket=name)
        logger.debug("moto bucket %r ready", name)


@contextlib.contextmanager
def moto_s3(
    workdir: Optional[Path] = None,
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
    port_attempts: int = 3,
) -> Iterator[MotoServer]:
    """Run ``python -m moto.server`` on a free 127.0.0.1 port for the ``with`` block.

    The server runs as a subprocess in its own process group (so Spark executors can
    reach it and it can be killed by pid); its output goes to ``workdir/moto.log``
    (a temporary directory when ``workdir`` is None). Stopped on exit, whatever happens.
    """
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="moto-")))
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        log_path = workdir / "moto.log"
        env = dict(os.environ)
        # The server needs no real credentials; keep it from looking for any.
        env.setdefault("AWS_ACCESS_KEY_ID", MOTO_ACCESS_KEY)
        env.setdefault("AWS_SECRET_ACCESS_KEY", MOTO_SECRET_KEY)
        env.setdefault("AWS_DEFAULT_REGION", MOTO_REGION)

        for attempt in range(1, port_attempts + 1):
            port = _free_loopback_port()
            args = [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(port)]
            started = time.monotonic()
            log_file = open(log_path, "wb")  # noqa: SIM115 (closed by _stop_process)
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=str(workdir),
                env=env,
                start_new_session=True,
            )
            stack.callback(_stop_process, proc, log_file, "moto server")
            deadline = started + startup_timeout
            url = f"http://{LOOPBACK}:{port}/"
            while not _http_answers(url):
                if proc.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            else:
                server = MotoServer(
                    host=LOOPBACK,
                    port=port,
                    pid=proc.pid,
                    log_path=log_path,
                    startup_seconds=time.monotonic() - started,
                )
                logger.info("moto server (pid %d) ready on port %d in %.2fs", proc.pid, port, server.startup_seconds)
                yield server
                return
            exited = proc.poll() is not None
            output = _read_log(log_path)
            if exited and "Address already in use" in output and attempt < port_attempts:
                logger.warning("moto port %d was taken meanwhile; retrying on another port", port)
                continue
            reason = "the process exited" if exited else f"no HTTP answer within {startup_timeout:.0f}s"
            raise _startup_error("moto server", reason, proc, log_path)


# --------------------------------------------------------------------------- proxies: a careless or a failing store


#: The faults :func:`faulty_proxy` injects: an error answer (the store throttling or failing), the answer lost
#: after the request reached the store, a connection reset before it did, a body cut short, a slow answer.
FAULTS: tuple[str, ...] = ("503", "500", "drop", "reset", "truncate", "slow")

#: Also injectable, never drawn by default: a 403 answer (a credential scoped to a prefix, asked about the bucket).
DENIED: str = "403"

_ERROR_ANSWERS = {  # status -> (reason, S3 error code, Azure error code)
    403: ("Forbidden", "AccessDenied", "AuthorizationPermissionMismatch"),
    503: ("Service Unavailable", "SlowDown", "ServerBusy"),
    500: ("Internal Server Error", "InternalError", "InternalError"),
}


@dataclasses.dataclass
class FaultPlan:
    """Which requests :func:`faulty_proxy` spoils: each request ``only(method, path)`` selects (all when None)
    gets, with probability ``rate``, one of ``faults`` (drawn from a generator seeded with ``seed``, so a run
    can be replayed); ``enabled`` switches injection off and on. ``injected`` counts what was done."""

    rate: float = 0.1
    faults: Sequence[str] = FAULTS
    seed: int = 0
    slow_seconds: float = 0.3
    only: Optional[Callable[[str, str], bool]] = None
    enabled: bool = True
    injected: "dict[str, int]" = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        import random
        import threading

        unknown = set(self.faults) - {*FAULTS, DENIED}
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {FAULTS} and {DENIED!r}")
        self._random = random.Random(self.seed)
        self._lock = threading.Lock()

    def draw(self, method: str, path: str) -> Optional[str]:
        """The fault for this request, or None (counted in ``injected``)."""
        if not self.enabled or (self.only is not None and not self.only(method, path)):
            return None
        with self._lock:
            if self._random.random() >= self.rate:
                return None
            fault = self._random.choice(list(self.faults))
            self.injected[fault] = self.injected.get(fault, 0) + 1
            return fault


@contextlib.contextmanager
def _proxy(target_port: int, header: Optional[str], only: Optional[Callable[[str, str], bool]],
           plan: Optional[FaultPlan]) -> Iterator[int]:
    """A loopback HTTP proxy (in threads of this process) forwarding every request to 127.0.0.1:``target_port``,
    without ``header`` on the requests ``only`` selects, spoiling those ``plan`` draws a fault for. Yields its port."""
    import http.client
    import http.server
    import struct
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _reset(self) -> None:
            """Close the client's connection with a TCP reset, answering nothing (more)."""
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True

        def _error_answer(self, status: int) -> None:
            reason, s3_code, azure_code = _ERROR_ANSWERS[status]
            body = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{s3_code}</Code>"
                    f"<Message>injected {status}</Message></Error>").encode()
            self.send_response_only(status, reason)
            self.send_header("x-ms-error-code", azure_code)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            fault = plan.draw(self.command, self.path) if plan is not None else None
            if fault == "reset":
                return self._reset()
            if fault in ("503", "500", DENIED):
                return self._error_answer(int(fault))
            if fault == "slow":
                time.sleep(plan.slow_seconds)  # type: ignore[union-attr]
            upstream = http.client.HTTPConnection(LOOPBACK, target_port, timeout=60)
            try:
                upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                strip = header is not None and (only is None or only(self.command, self.path))
                for name, value in self.headers.items():
                    if not (strip and name.lower() == str(header).lower()):
                        upstream.putheader(name, value)
                upstream.endheaders(body)
                response = upstream.getresponse()
                data = response.read()
            finally:
                upstream.close()
            if fault == "drop":  # the store did it; its answer is lost
                return self._reset()
            self.send_response_only(response.status, response.reason)
            for name, value in response.getheaders():
                if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(name, value)
            declared = response.getheader("Content-Length")
            self.send_header("Content-Length", declared if self.command == "HEAD" and declared else str(len(data)))
            self.end_headers()
            if self.command == "HEAD":
                return None
            if fault == "truncate" and len(data) > 1:
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                return self._reset()
            self.wfile.write(data)
            return None

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer((LOOPBACK, 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="test-proxy", daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextlib.contextmanager
def stripping_proxy(
    target_port: int, header: str = "If-None-Match", only: Optional[Callable[[str, str], bool]] = None
) -> Iterator[int]:
    """A loopback HTTP proxy (in a thread of this process) forwarding every request to 127.0.0.1:
    ``target_port`` without ``header`` (on the requests ``only(method, path)`` selects, else all): a store
    that ignores conditional writes, as an older S3-compatible store or a careless proxy does. Yields the
    proxy's port; stopped on exit.
    (Azure signs its headers with SharedKey: reach Azurite through it with a SAS, which signs none.)"""
    with _proxy(target_port, header, only, None) as port:
        yield port


@contextlib.contextmanager
def faulty_proxy(target_port: int, plan: FaultPlan) -> Iterator[int]:
    """A loopback HTTP proxy forwarding to 127.0.0.1:``target_port`` that injects the faults of ``plan``
    (:data:`FAULTS`): 503 and 500 answers (S3 and Azure error codes), answers dropped after the store did the
    request, resets before it, bodies cut in half, slow answers. Yields the proxy's port; stopped on exit.
    Reach Azurite through it with :func:`proxied_options` (a SAS: SharedKey signs the host's port)."""
    with _proxy(target_port, None, None, plan) as port:
        yield port


def proxied_options(name: str, server: Any, port: int) -> "dict[str, Any]":
    """Storage options reaching ``server`` (a :class:`MotoServer` for ``"moto"``, else an
    :class:`AzuriteServer`) through a proxy on ``port``: the same buckets and containers."""
    if name == "moto":
        options = dict(server.storage_options)
        options["client_kwargs"] = {**options["client_kwargs"], "endpoint_url": f"http://{LOOPBACK}:{port}"}
        return options
    import datetime as dt

    from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

    sas = generate_account_sas(
        server.account_name,
        server.account_key,
        ResourceTypes(service=True, container=True, object=True),
        AccountSasPermissions(read=True, write=True, delete=True, list=True, add=True, create=True),
        expiry=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1),
    )
    endpoint = f"http://{LOOPBACK}:{port}/{server.account_name}"
    return {
        "connection_string": f"BlobEndpoint={endpoint};SharedAccessSignature={sas}",
        "account_name": server.account_name,
    }
