"""Per-sentence counting rules shared by the Beam job and the in-process builder.

Both paths must drop and count exactly the same things, so the decisions live here once.
"""

from __future__ import annotations

import zlib

from labse_common.stats import StageCounter
from labse_model.vocab.pretokenize import pretokenize

SENT = "sentences"
WORDS = "words"


def is_heldout(text: str, fraction: float) -> bool:
    """Deterministic held-out split by a hash of the text: same answer on every worker."""
    if fraction <= 0.0:
        return False
    h = zlib.crc32(text.encode("utf-8", "surrogatepass")) / 2**32
    return h < fraction


def sentence_words(
    text: object, counter: StageCounter, max_word_length: int, heldout_fraction: float = 0.0
) -> tuple[str, list[str] | str | None]:
    """Classify one sentence and count it.

    Returns ``("count", words)`` for a sentence to count, ``("heldout", cleaned_text)`` for one
    kept back for evaluation, and ``("dropped", None)`` otherwise; every branch is recorded in
    ``counter`` (sentences in/out/dropped, word occurrences in/out/too_long, cleaning events).
    """
    counter.add_in(SENT)
    if not isinstance(text, str):
        counter.add_dropped(SENT, "malformed")
        return "dropped", None
    res = pretokenize(text)
    if res.control_removed:
        counter.add_event(SENT, "control_chars_cleaned")
    if res.surrogates_removed:
        counter.add_event(SENT, "unpaired_surrogates_removed")
    if not res.words:
        counter.add_dropped(SENT, "empty")
        return "dropped", None
    if is_heldout(text, heldout_fraction):
        counter.add_dropped(SENT, "held_out_for_eval")
        # Surrogates cannot be written to Parquet; the cleaned words are what the tokenizer sees.
        return "heldout", " ".join(res.words) if res.surrogates_removed else text
    counter.add_out(SENT)
    counter.add_in(WORDS, len(res.words))
    kept = [w for w in res.words if len(w) <= max_word_length]
    if len(kept) != len(res.words):
        counter.add_dropped(WORDS, "too_long", len(res.words) - len(kept))
    return "count", kept
