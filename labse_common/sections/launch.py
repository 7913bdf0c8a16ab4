"""The ``launch:`` section: how ``python -m pipelines.run`` starts its training stages
(``labse_model pretrain`` and ``train``): torchrun workers per node and the rendezvous."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from labse_common.config_values import ConfigError, option, shown

# A host name's labels: letters, digits, hyphens (not at either end) and, as many cluster
# schedulers write them, underscores.
_LABEL = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")


def node_counts(nnodes: str) -> tuple[int, int]:
    """``"N"`` -> (N, N), ``"MIN:MAX"`` -> (MIN, MAX); ValueError unless 1 <= MIN <= MAX are
    whole numbers (torchrun would fail on anything else once training starts)."""
    parts = str(nnodes).split(":")
    if len(parts) > 2 or not all(re.fullmatch(r"[0-9]+", p) for p in parts):
        raise ValueError("must be a whole number of nodes >= 1, or MIN:MAX")
    lo, hi = int(parts[0]), int(parts[-1])
    if lo < 1:
        raise ValueError("must be >= 1 (nodes)")
    if lo > hi:
        raise ValueError(f"MIN {lo} is above MAX {hi}")
    return lo, hi


def check_endpoint(endpoint: str) -> None:
    """``HOST:PORT`` (an IPv6 host in brackets), the port 1..65535, the host a valid name or
    address; ValueError otherwise. Checked by syntax only: a name that does not resolve is the
    rendezvous's to report, but a malformed one made torchrun retry DNS for minutes."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host:
        raise ValueError("must be HOST:PORT")
    if not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"port {shown(port)} is not a number in 1..65535")
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise ValueError(f"{host} is not an IPv6 address") from None
        return
    labels = host.removesuffix(".").split(".")
    if len(host) > 253 or not all(_LABEL.match(label) for label in labels):
        raise ValueError(f"host {shown(host)} is not a host name or address (HOST:PORT)")


@dataclass
class LaunchConfig:
    nproc_per_node: int = option(
        1, min=1, help="worker processes per node (GPUs per node); > 1 starts torchrun"
    )
    nnodes: str = option("1", help="nodes, or MIN:MAX for an elastic run")
    node_rank: int | None = option(None, min=0, help="this node's rank (static rendezvous only)")
    rdzv_endpoint: str | None = option(None, help="HOST:PORT of the rendezvous for several nodes")
    rdzv_id: str | None = option(None, help="job id every node shares (several nodes)")
    max_restarts: int = option(
        0, min=0, help="times the elastic agent restarts the workers after a failure"
    )

    def validate(self) -> None:
        """Checked at load, so the dry run refuses what torchrun would fail on (a traceback, or
        minutes of DNS retries) once training starts."""
        try:
            _, hi = node_counts(self.nnodes)
        except ValueError as e:
            raise ConfigError(f"launch.nnodes={shown(self.nnodes)} {e}") from None
        if self.node_rank is not None and self.node_rank >= hi:
            raise ConfigError(
                f"launch.node_rank={self.node_rank} must be below launch.nnodes={shown(self.nnodes)} "
                f"(ranks 0..{hi - 1})"
            )
        if self.rdzv_endpoint is not None:
            try:
                check_endpoint(self.rdzv_endpoint)
            except ValueError as e:
                raise ConfigError(
                    f"launch.rdzv_endpoint={shown(self.rdzv_endpoint)}: {e}"
                ) from None
        elif hi > 1:
            raise ConfigError(
                f"launch.nnodes={shown(self.nnodes)} needs launch.rdzv_endpoint HOST:PORT "
                "(where the nodes meet)"
            )

    def args(self) -> list[str]:
        """The options as ``labse_model pretrain|train`` arguments."""
        out = ["--nproc-per-node", str(self.nproc_per_node), "--nnodes", str(self.nnodes)]
        if self.node_rank is not None:
            out += ["--node-rank", str(self.node_rank)]
        if self.rdzv_endpoint:
            out += ["--rdzv-endpoint", self.rdzv_endpoint]
        if self.rdzv_id:
            out += ["--rdzv-id", self.rdzv_id]
        if self.max_restarts:
            out += ["--max-restarts", str(self.max_restarts)]
        return out


CONFIG = LaunchConfig
