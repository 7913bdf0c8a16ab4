"""The one registry of FAISS index kinds: the name ``mining.index`` takes, and its sizing rule.

Every path that builds an index (bounded and in-memory mining, evaluation, BUCC, margin
scoring; the planner's predictions) turns ``mining.index`` into a FAISS factory string here,
with one sizing rule per kind, so a name valid for one path is valid for all of them:

* a kind of :data:`KINDS` (or an alias of :data:`ALIASES`), sized for the base side's rows:
  each kind registers its factory rule below in the mining section's ``INDEX_KINDS`` registry,
  the one place its name is declared (the config reference lists them from there);
* ``ivfNNN``: ``IVFNNN,Flat``, NNN lists as given;
* any other text: a FAISS factory string, used as given once FAISS has parsed it (a wrong one
  is the user's: a ConfigError, one line, exit 2);
* ``auto``: the planner's choice for the sizes and ``mining.mem_gb``
  (:func:`mining.plan.index_choice`, which comes back here for the factory strings).

FAISS itself is imported only to parse a factory string, so the planner stays light.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from labse_common.config_values import ConfigError
from labse_common.sections.mining import INDEX_KINDS

AUTO = "auto"


@dataclass(frozen=True)
class Sizing:
    """What a kind's factory string is sized by: IVF lists, PQ sub-quantizers, the PQ code
    spelling for the training size, and the dimension."""

    nlist: int
    m: int
    pq: str
    dim: int


@dataclass(frozen=True)
class IndexKind:
    """A kind's factory string for a :class:`Sizing`; ``auto``: the planner may choose it."""

    factory: Callable[[Sizing], str]
    auto: bool = False


# In order of accuracy; "auto" never picks opq_ivf_pq by itself: on CPUs its training costs
# ~9 PQ trainings (OPQ alternates 50 rotations with short PQ trainings); ask for it by name.
# ivf_pqfs is IVF-PQ with 4-bit codes scanned by FAISS's SIMD "fast scan": as many code bytes
# as ivf_pq (d/8) in twice the sub-quantizers, ~5-7x faster to scan than SQ8 or 8-bit PQ on
# AVX2 (recall of the true top-4 among 16 candidates 0.78 vs SQ8's 1.00 on the bench's data;
# the exact re-score then orders them). CPU only: faiss-gpu has no fast-scan index.
INDEX_KINDS.add("flat", IndexKind(lambda s: "Flat"))
INDEX_KINDS.add("ivf_flat", IndexKind(lambda s: f"IVF{s.nlist},Flat", auto=True))
INDEX_KINDS.add("ivf_sq8", IndexKind(lambda s: f"IVF{s.nlist},SQ8", auto=True))
INDEX_KINDS.add("ivf_pq", IndexKind(lambda s: f"IVF{s.nlist},{s.pq}", auto=True))
INDEX_KINDS.add("ivf_pqfs", IndexKind(lambda s: f"IVF{s.nlist},PQ{pqfs_m(s.dim)}x4fs", auto=True))
INDEX_KINDS.add("opq_ivf_pq", IndexKind(lambda s: f"OPQ{s.m},IVF{s.nlist},{s.pq}"))
KINDS: tuple[str, ...] = INDEX_KINDS.names()
AUTO_KINDS: tuple[str, ...] = tuple(name for name, kind in INDEX_KINDS.items() if kind.auto)
#: The short names of earlier releases (and FAISS's "FlatIP"), each a kind of :data:`KINDS`
#: with that kind's sizing.
ALIASES: dict[str, str] = {
    "flatip": "flat",
    "ivf": "ivf_flat",
    "ivfsq": "ivf_sq8",
    "ivfpq": "ivf_pq",
    "opq": "opq_ivf_pq",
}
_IVF_LISTS = re.compile(r"ivf(\d+)")


def kind_of(spec: str) -> str | None:
    """The kind a name stands for (case-insensitive, aliases resolved); None for ``auto``,
    ``ivfNNN`` and FAISS factory strings."""
    s = spec.strip().lower()
    return s if s in KINDS else ALIASES.get(s)


def is_flat(spec: str) -> bool:
    """Whether ``spec`` asks for exact search by name (``auto`` may still choose it)."""
    return kind_of(spec) == "flat"


def pow2_near(x: float) -> int:
    return 1 << max(0, round(math.log2(max(x, 1.0))))


def ivf_lists(n: int, train_size: int) -> int:
    """~4*sqrt(n) lists (FAISS's rule of thumb), a power of two, with >= 39 training points
    each (FAISS warns below that) and >= 1."""
    nlist = pow2_near(4 * math.sqrt(max(n, 1)))
    cap = max(1, min(n, train_size) // 39)
    while nlist > cap and nlist > 1:
        nlist //= 2
    return nlist


def pq_m(dim: int) -> int:
    """Sub-quantizers: d/8 (8 bytes of a 768-d vector per 64 dims), the largest divisor of d
    at most d/8 otherwise."""
    for m in range(max(1, dim // 8), 0, -1):
        if dim % m == 0:
            return m
    return 1


def pqfs_m(dim: int) -> int:
    """Fast-scan sub-quantizers: d/4 of 4 bits (the bytes of ``pq_m``'s 8-bit codes), the
    largest even divisor of d at most d/4 (fast scan packs two codes per byte)."""
    for m in range(max(2, dim // 4), 1, -1):
        if dim % m == 0 and m % 2 == 0:
            return m
    return 2 if dim % 2 == 0 else 1


def factory_for(kind: str, n: int, dim: int, train_size: int = 200_000) -> str:
    """The FAISS factory string of an index kind (or alias) for ``n`` base vectors."""
    name = kind_of(kind) or kind
    if name not in KINDS:
        raise ValueError(f"unknown index kind {kind!r}; choose from {KINDS}")
    entry: IndexKind = INDEX_KINDS.get(name)
    m = pq_m(dim)
    # 8-bit codebooks need ~39*256 training points; fewer get 4-bit codes. "np": no
    # polysemous training (slow, and only for Hamming filtering, which is not used here).
    pq = f"PQ{m}{'' if min(n, train_size) >= 39 * 256 else 'x4'}np"
    return entry.factory(Sizing(ivf_lists(n, train_size), m, pq, dim))


def factory(spec: str, n: int, dim: int, train_size: int = 200_000) -> str:
    """The factory string of any ``mining.index`` value but ``auto`` for ``n`` base vectors of
    ``dim``; a text that is no kind and that FAISS cannot parse is a ConfigError."""
    kind = kind_of(spec)
    if kind is not None:
        return factory_for(kind, n, dim, train_size)
    m = _IVF_LISTS.fullmatch(spec.strip().lower())
    if m:
        return f"IVF{int(m.group(1))},Flat"
    if spec.strip().lower() == AUTO:
        raise ValueError("'auto' is chosen by mining.plan.index_choice, not sized here")
    check_factory(spec, dim)
    return spec


def check_factory(spec: str, dim: int) -> None:
    """Parse a FAISS factory string before any work: a wrong ``mining.index`` is one line."""
    from mining.faiss_lib import faiss

    try:
        faiss.index_factory(max(1, dim), spec, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as e:
        msg = str(e).splitlines()[-1].split(": ")[-1]
        raise ConfigError(
            f"mining.index={spec!r}: not an index kind ({', '.join(KINDS)}, "
            f"{AUTO}, {', '.join(ALIASES)}, ivfNNN) nor a FAISS factory string "
            f"({msg})"
        ) from None
