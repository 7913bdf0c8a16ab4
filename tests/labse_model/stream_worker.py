"""One rank of test_stream's global-batch check: the first six pretraining micro-batches.

Run in the test's own process for one rank (no process group) and in two forked processes
with torchrun's environment for two; each rank saves, per micro-batch and part (MLM 0, TLM 1), the sequences it holds with their labels
and token types, its stream cursors, the scan's counts and how many TLM rows it built.
"""

from __future__ import annotations

import torch

from labse_common.config import from_dict
from labse_common.sections.pretrain import PretrainConfig
from labse_model import stream
from labse_model.distributed import init_from_env, shutdown
from labse_model.model import load_tokenizer
from labse_model.pretrain import PretrainObjective
from labse_model.train_state import TrainState

MICRO_BATCHES = 6


def first_batches(
    sents: str, pairs: str, vocab: str, out: str, micro: int = 0, pack: bool = True
) -> None:
    """Write ``out/rank<r>.pt`` for this rank (rank 0 when run alone)."""
    info = init_from_env()
    cfg = from_dict(
        PretrainConfig,
        {
            "mlm_batch_size": 8,
            "tlm_batch_size": 8,
            "lanes": 4,
            "max_seq_length": 64,
            "stages": 1,
            "stage_steps": [1],
            "block_rows": 100,
            "pack_pairs": pack,
            # As the scans below: a record they counted is a record the lanes read.
            "heldout_fraction": 0.0,
        },
        "pretrain",
    )
    s = stream.scan_distributed(stream.expand_inputs([sents]), stream.SENTENCES, 100, 0.0, 0, info)
    p = stream.scan_distributed(stream.expand_inputs([pairs]), stream.PAIRS, 100, 0.0, 0, info)
    obj = PretrainObjective(cfg, s, p, load_tokenizer(vocab), info, torch.device("cpu"), 64)
    it = obj.batches(TrainState(None, None, micro=micro))
    rows: dict[tuple[int, int], list] = {}
    packed_rows = 0
    for m in range(MICRO_BATCHES):
        b = next(it)
        t = b.tensors
        for i in range(len(t["part"])):
            # One entry per MLM row and per TLM pair: a packed TLM row holds several
            # (segments 1, 2, ...).
            tlm = int(t["part"][i]) == 1
            seg = t["segment_ids"][i] if (tlm and "segment_ids" in t) else t["attention_mask"][i]
            packed_rows += tlm
            for sid in sorted(set(seg.tolist()) - {0}):
                keep = seg == sid
                if tlm and "position_ids" in t:
                    assert t["position_ids"][i][keep].tolist() == list(range(int(keep.sum())))
                rows.setdefault((m, int(t["part"][i])), []).append(
                    (
                        t["input_ids"][i][keep].tolist(),
                        t["labels"][i][keep].tolist(),
                        t["token_type_ids"][i][keep].tolist(),
                    )
                )
    torch.save(
        {"rows": rows, "cursors": b.cursors, "counts": s.counts, "tlm_rows": packed_rows},
        f"{out}/rank{info.rank}.pt",
    )
    shutdown()
