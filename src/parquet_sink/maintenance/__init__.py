"""Maintenance: inspect, verify, vacuum and doctor an output, as a library (the ``parquet-sink`` command line only
parses arguments and prints what these return). Like pyiceberg's ``table/maintenance/`` and delta-rs's
``DeltaTable.vacuum``; Spark's file sink has no counterpart.

``inspect`` reads an output's log attributed to batches and verifies it; ``vacuum`` removes orphan files;
``doctor`` predicts what a restart or a rerun will do; ``optimize`` compacts small data files in one atomic swap.

Example::

    >>> from parquet_sink.maintenance import doctor, vacuum, verify
    >>> verify("/data/events").ok
    True
    >>> vacuum("/data/events", "7d", dry_run=True).plan.orphans
    []
"""

from .doctor import Checkpoint, Diagnosis, RestartPlan, doctor
from .inspect import Batch, Output, VerifyReport, count_rows, read_output, verify
from .optimize import OptimizePlan, OptimizeResult, optimize
from .vacuum import VacuumPlan, VacuumResult, vacuum

__all__ = [
    "Batch",
    "Checkpoint",
    "Diagnosis",
    "OptimizePlan",
    "OptimizeResult",
    "Output",
    "RestartPlan",
    "VacuumPlan",
    "VacuumResult",
    "VerifyReport",
    "count_rows",
    "doctor",
    "optimize",
    "read_output",
    "vacuum",
    "verify",
]
