"""The ``beam:`` section: the Beam runner every Beam stage of ``python -m pipelines.run`` uses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labse_common.config import option


@dataclass
class BeamConfig:
    runner: str | None = option(
        None,
        help="Beam runner of every Beam stage (FlinkRunner, DataflowRunner, DaskRunner, ...); "
        "null = the local runner (every core of this machine, no download)",
    )
    options: dict[str, Any] = option(
        {},
        help="pipeline options given to every Beam stage as --KEY=VALUE (true: a bare --KEY), e.g. "
        "{flink_master: host:8081, parallelism: 8} or {dask_client_address: 127.0.0.1:8786}",
    )

    def args(self) -> list[str]:
        """The options as Beam command-line arguments."""
        out = [f"--runner={self.runner}"] if self.runner else []
        for key, value in self.options.items():
            if value is True:
                out.append(f"--{key}")
            elif value is not False and value is not None:
                out.append(f"--{key}={value}")
        return out


CONFIG = BeamConfig
