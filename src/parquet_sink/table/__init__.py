"""The output as an object: :class:`~parquet_sink.table.sink_output.SinkOutput`, opened once with its path and
storage options, with a method for every operation the free functions offer (like delta-rs's ``DeltaTable`` and
pyiceberg's ``Table``). A layer above maintenance (it calls every layer), below the CLI."""

from .sink_output import SinkOutput

__all__ = ["SinkOutput"]
