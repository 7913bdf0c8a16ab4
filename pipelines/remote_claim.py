"""A Beam job's claim on an output on object storage: what killed jobs left is taken over.

The corpus jobs resumable by shard (``--resume``, :mod:`pipelines.corpus_resume`) keep their
shards in ``OUTPUT/_partial`` (:class:`labse_common.resume_shards.Shards`, local or remote alike);
on object storage that folder sits beside the job's temporary folder (which is new for every job)
and goes once the output is committed. Before the claim, a killed job's claim is taken over, and
after it the temporary folders killed jobs left are removed, as a local claim does.
"""

from __future__ import annotations

import logging

from labse_common import claim_lock, filesystems
from labse_common.claim_lock import CLAIM, TMP_PREFIX
from labse_common.filesystems import join

log = logging.getLogger(__name__)


def _files(prefix: str) -> list[str]:
    return sorted(filesystems.match(prefix.rstrip("/") + "/**"))


def remove_stale_tmp(output: str, mine: str) -> None:
    """Delete the temporary folders killed jobs left in ``output`` (this job holds its claim,
    and an interrupted commit was finished when it took it), as a local claim does."""
    prefix = output.rstrip("/") + "/"
    mine = mine.rstrip("/") + "/"
    stale = [
        p
        for p in _files(output)
        if p[len(prefix) :].startswith(TMP_PREFIX) and not p.startswith(mine)
    ]
    if stale:
        log.info("%s: removing %d object(s) left by jobs that were stopped", output, len(stale))
        filesystems.delete(stale)


def take_stale_claim(output: str) -> None:
    """A claim a killed job of this host left on ``output`` is removed (the rule the runner
    applies to a remote run folder's claim); a live job's, or another host's, stays."""
    path = join(output, CLAIM)
    if not filesystems.exists(path):
        return
    with filesystems.open_read(path) as f:
        text = f.read().decode("utf-8", "replace").strip()
    if not claim_lock.held_elsewhere(text):
        log.warning("%s: taking over the claim of a job that is gone (%s)", output, text)
        filesystems.delete([path])
