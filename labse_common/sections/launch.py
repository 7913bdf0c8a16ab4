"""The ``launch:`` section: how ``python -m pipelines.run`` starts its training stages
(``labse_model pretrain`` and ``train``): torchrun workers per node and the rendezvous."""

from __future__ import annotations

from dataclasses import dataclass

from labse_common.config import option


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
