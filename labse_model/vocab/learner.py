"""Top-down wordpiece learner (the tensorflow/text ``wordpiece_vocab`` algorithm), vectorised.

The algorithm is that of ``tensorflow_text/tools/wordpiece_vocab/wordpiece_tokenizer_learner_lib``:

1. Words longer than ``max_token_length`` (or equal to a reserved token) are dropped; the
   alphabet is every character whose (smoothed) count reaches ``char_min_count``, at most
   ``max_unique_chars`` of them; words with other characters are dropped; the ``max_input_words``
   most frequent words are kept.
2. For a frequency threshold T, ``num_iterations`` times: count every substring that starts at
   a split point of a word (every position in the first iteration; afterwards the starts of the
   greedy longest-match segmentation with the previous iteration's vocabulary); substrings not
   at the word start carry the ``##`` joiner. Then, from the longest length down to 1, keep
   the substrings whose count is >= T and subtract each substring's count from all its
   prefixes. Every character and its ``##`` form is always added back.
3. T is found by a search so that the vocabulary size lands within ``slack_ratio`` below the
   requested size.

What differs, and why:

* Speed. The reference counts substrings with Python dict loops, per word, per threshold. Here
  the substrings of all words are numbered once: level by level, the id of a substring of
  length l is the rank of ``(id of its length l-1 prefix, next character)`` (``np.unique``),
  which builds an exact trie with no hashing. A learning pass at any threshold is then a few
  ``np.bincount`` calls per level, and the greedy segmentation is a vectorised walk over all
  words at once. The trie is reused by every step of the threshold search.
* The threshold search. Smoothed counts are real numbers, and on small corpora the integer
  threshold search of the reference jumps over the requested size. The search here bisects
  a real threshold geometrically; if no threshold lands inside the slack window, the smallest
  vocabulary above the target is trimmed to the target by dropping its least frequent
  multi-character tokens. On large corpora both searches find the same threshold.
* Exact size. The reference stops anywhere inside the slack window (up to 5 % short). Here,
  when the chosen vocabulary is short of the target and the search also ran a lower
  threshold (a bigger vocabulary), the shortfall is filled with that bigger vocabulary's
  tokens that are missing, most frequent first (its counts, ties by string), so the result
  has exactly the requested size. The chosen vocabulary itself is kept whole, so it stays
  the published algorithm's output at its threshold; only the appended tail is extra.
* ``skip_unreachable_joiners`` (default on): CJK ideographs and punctuation get no ``##``
  form, because the pre-tokeniser always makes them words of their own and the tokenizer can
  never look the ``##`` form up. With a CJK alphabet this frees thousands of entries.
* ``decrement="selected"`` (an option, not the default) subtracts only the counts of kept
  substrings from their prefixes, as the prose description of the algorithm reads; the default
  ``"all"`` reproduces the published code, which subtracts every substring's count.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np

from labse_common.sections.vocab import LearnerConfig
from labse_model.vocab.pretokenize import has_words, is_bert_punctuation, is_cjk

log = logging.getLogger(__name__)

RESERVED_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
JOINER = "##"


class VocabTooSmall(ValueError):
    """vocab_size cannot hold the reserved tokens and the alphabet (a usage error)."""


def char_tokens(code_points: np.ndarray, params: LearnerParams) -> int:
    """Tokens the alphabet ``code_points`` takes: each character and its ``##`` form, less the
    ``##`` forms that can never be looked up."""
    return 2 * len(code_points) - int(_isolated(code_points, params).sum())


@dataclass
class LearnerParams:
    """One learning run: the target size, the ``vocab.learner`` section as loaded (its keys and
    their defaults are declared there, once), and the algorithm's fixed internals, which are
    not configuration."""

    vocab_size: int
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    reserved_tokens: tuple[str, ...] = RESERVED_TOKENS
    lower_thresh: float = 1.0
    upper_thresh: float = 1e7
    max_search_steps: int = 40
    # CJK ideographs and punctuation are always split off by the pre-tokeniser, so their ##
    # forms can never be looked up; leaving them out frees vocabulary for real pieces.
    skip_unreachable_joiners: bool = True


@dataclass
class LearnResult:
    vocab: list[str]
    threshold: float
    counts: dict[str, int] = field(default_factory=dict)  # word_types in/out/dropped
    search: list[tuple[float, int]] = field(default_factory=list)  # (threshold, size) tried
    seconds: float = 0.0
    # The lower threshold whose extra tokens filled the vocabulary up to the target (None: no
    # fill), and how many tokens the fill added.
    fill_threshold: float | None = None
    filled: int = 0


class _SubstringTrie:
    """Every substring (up to max_token_length) of every input word, numbered exactly."""

    def __init__(
        self,
        words: list[str],
        weights: np.ndarray,
        max_len: int,
        isolated: np.ndarray | None = None,
        isolated_alphabet: np.ndarray | None = None,
    ) -> None:
        self.n_words = len(words)
        self.joined = "".join(words)
        cps = np.frombuffer(self.joined.encode("utf-32-le"), dtype=np.uint32)
        lengths = np.fromiter((len(w) for w in words), dtype=np.int64, count=len(words))
        self.word_start = np.zeros(len(words) + 1, dtype=np.int64)
        np.cumsum(lengths, out=self.word_start[1:])
        self.word_end = self.word_start[1:]
        self.word_start = self.word_start[:-1]
        n_pos = int(lengths.sum())
        word_of_pos = np.repeat(np.arange(len(words), dtype=np.int64), lengths)
        offset = np.arange(n_pos, dtype=np.int64) - self.word_start[word_of_pos]
        remaining = lengths[word_of_pos] - offset
        self.pos_weight = weights[word_of_pos]
        self.alphabet, char_ids = np.unique(cps, return_inverse=True)
        n_chars = np.int64(len(self.alphabet))
        self.max_len = min(max_len, int(lengths.max()) if len(words) else 0)

        # Per level l (1-based): start positions of the substrings of length l, their ids,
        # the id of each unique substring's length l-1 prefix, and one occurrence of each.
        self.pos: list[np.ndarray] = []
        self.ids: list[np.ndarray] = []
        self.parent: list[np.ndarray] = []
        self.first: list[np.ndarray] = []
        cur_pos = np.arange(n_pos, dtype=np.int64)
        prev = (offset > 0).astype(np.int64)  # level-0 "id": 1 means the ## (non-initial) form
        for level in range(1, self.max_len + 1):
            if level > 1:
                keep = remaining[cur_pos] >= level
                cur_pos = cur_pos[keep]
                prev = prev[keep]
            key = prev * n_chars + char_ids[cur_pos + level - 1]
            uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
            self.pos.append(cur_pos.astype(np.int32 if n_pos < 2**31 else np.int64))
            self.ids.append(inv.astype(np.int32))
            self.parent.append((uniq // n_chars).astype(np.int32))
            self.first.append(cur_pos[first])
            prev = inv.astype(np.int64)
        self.is_start_of_word = offset == 0
        self._all_counts: list[np.ndarray] | None = None
        # Level-1 ids: the ## form of a char that must stay out (see skip_unreachable_joiners).
        self.level1_allowed = np.ones(self.n_ids(1) if self.max_len else 0, dtype=bool)
        if self.max_len and isolated is not None and isolated.any():
            bad_cps = isolated_alphabet[isolated]
            first = self.first[0]
            joined_form = ~self.is_start_of_word[first]
            self.level1_allowed = ~(joined_form & np.isin(cps[first], bad_cps))

    def n_ids(self, level: int) -> int:
        return len(self.parent[level - 1])

    def token(self, level: int, sid: int) -> str:
        p = int(self.first[level - 1][sid])
        text = self.joined[p : p + level]
        return text if self.is_start_of_word[p] else JOINER + text

    def count(self, start_mask: np.ndarray | None) -> list[np.ndarray]:
        """Weighted counts of the substrings starting at the masked positions, per level."""
        if start_mask is None and self._all_counts is not None:
            return self._all_counts  # the first iteration does not depend on the threshold
        out = []
        for level in range(1, self.max_len + 1):
            pos, ids = self.pos[level - 1], self.ids[level - 1]
            if start_mask is None:
                w = self.pos_weight[pos]
                c = np.bincount(ids, weights=w, minlength=self.n_ids(level))
            else:
                m = start_mask[pos]
                c = np.bincount(
                    ids[m], weights=self.pos_weight[pos[m]], minlength=self.n_ids(level)
                )
            out.append(c)
        if start_mask is None:
            self._all_counts = out
        return out

    def select(
        self, counts: list[np.ndarray], thresh: float, decrement: str
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Top-down selection: per level, the kept ids and their prefix-decremented counts."""
        pending = np.zeros(self.n_ids(self.max_len)) if self.max_len else None
        kept: list[tuple[np.ndarray, np.ndarray]] = [None] * self.max_len  # type: ignore[list-item]
        for level in range(self.max_len, 0, -1):
            eff = counts[level - 1] - pending
            sel = eff >= thresh
            kept[level - 1] = (np.flatnonzero(sel), eff[sel])
            if level > 1:
                contrib = eff if decrement == "all" else np.where(sel, eff, 0.0)
                pending = np.bincount(
                    self.parent[level - 1],
                    weights=contrib + pending,
                    minlength=self.n_ids(level - 1),
                )
        return kept

    def split_starts(self, in_vocab: list[np.ndarray]) -> np.ndarray:
        """Start positions of the greedy longest-match-first segmentation of every word.

        Words that cannot be segmented contribute no starts (the reference skips them).
        """
        n_pos = len(self.pos_weight)
        longest = np.zeros(n_pos, dtype=np.int32)
        for level in range(1, self.max_len + 1):
            pos, ids = self.pos[level - 1], self.ids[level - 1]
            hit = in_vocab[level - 1][ids]
            longest[pos[hit]] = level
        mask = np.zeros(n_pos, dtype=bool)
        cur = self.word_start.copy()
        end = self.word_end
        active = np.flatnonzero(cur < end)
        failed = np.zeros(self.n_words, dtype=bool)
        visited: list[tuple[np.ndarray, np.ndarray]] = []
        while active.size:
            p = cur[active]
            step = longest[p]
            bad = step == 0
            if bad.any():
                failed[active[bad]] = True
            visited.append((p, active))
            cur[active] = p + step
            active = active[(~bad) & (cur[active] < end[active])]
        for p, w in visited:
            ok = ~failed[w]
            mask[p[ok]] = True
        return mask


def _prepare_input(
    words: list[str], counts: np.ndarray, params: LearnerParams, stats: dict[str, int]
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Filter words as the reference does; return (words, counts, alphabet code points)."""
    stats["word_types/in"] = len(words)
    # The float sums below (character and substring counts) depend on the order of the words,
    # and ties in the vocabulary follow them: learning in one canonical order makes the result
    # independent of the input's row order (runners, shards, a reload of saved counts).
    order = sorted(range(len(words)), key=words.__getitem__)
    words = [words[i] for i in order]
    counts = np.asarray(counts)[order] if len(order) else np.asarray(counts)
    reserved = set(params.reserved_tokens)
    keep_idx = [i for i, w in enumerate(words) if 0 < len(w) <= params.learner.max_token_length]
    stats["word_types/dropped/too_long_for_learner"] = len(words) - len(keep_idx)
    good = [i for i in keep_idx if words[i] not in reserved]
    stats["word_types/dropped/reserved"] = len(keep_idx) - len(good)
    words = [words[i] for i in good]
    counts = np.asarray(counts, dtype=np.float64)[good]
    # A word the tokenizer cleans to nothing (only zero-width/control characters, from a
    # counts table not made by our counting) would give tokens no text can ever produce.
    empty = np.fromiter((not has_words(w) for w in words), dtype=bool, count=len(words))
    if empty.any():
        stats["word_types/dropped/empty_after_normalisation"] = int(empty.sum())
        words = [w for w, bad in zip(words, empty) if not bad]
        counts = counts[~empty]
    nonpos = ~(counts > 0)  # also catches NaN
    if nonpos.any():
        stats["word_types/dropped/non_positive_count"] = int(nonpos.sum())
        words = [w for w, bad in zip(words, nonpos) if not bad]
        counts = counts[~nonpos]
    if not words:
        return words, counts, np.zeros(0, dtype=np.uint32)

    joined = "".join(words)
    cps = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32)
    lengths = np.fromiter((len(w) for w in words), dtype=np.int64, count=len(words))
    word_of_pos = np.repeat(np.arange(len(words)), lengths)
    alphabet, inv = np.unique(cps, return_inverse=True)
    char_count = np.bincount(inv, weights=counts[word_of_pos], minlength=len(alphabet))
    # Most frequent first, then by code point (the reference sorts by count, then the char).
    order = np.lexsort((alphabet, -char_count))
    order = order[char_count[order] >= params.learner.char_min_count][
        : params.learner.max_unique_chars
    ]
    allowed = np.zeros(len(alphabet), dtype=bool)
    allowed[order] = True
    word_ok = np.bincount(word_of_pos, weights=~allowed[inv], minlength=len(words)) == 0
    stats["word_types/dropped/rare_characters"] = int((~word_ok).sum())
    idx = np.flatnonzero(word_ok)
    idx = idx[np.argsort(-counts[idx], kind="stable")]
    stats["word_types/dropped/beyond_max_input_words"] = max(
        0, len(idx) - params.learner.max_input_words
    )
    idx = np.sort(idx[: params.learner.max_input_words])
    stats["word_types/out"] = len(idx)
    return [words[i] for i in idx], counts[idx], np.sort(alphabet[allowed])


def _isolated(alphabet: np.ndarray, params: LearnerParams) -> np.ndarray:
    """Characters whose ## form is unreachable (always a word of their own)."""
    if not params.skip_unreachable_joiners:
        return np.zeros(len(alphabet), dtype=bool)
    return np.array(
        [is_cjk(chr(int(c))) or is_bert_punctuation(chr(int(c))) for c in alphabet], dtype=bool
    )


def _learn_with_thresh(
    trie: _SubstringTrie, thresh: float, params: LearnerParams
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """One run of the iterative algorithm; returns per-level kept-id masks and counts."""
    start_mask = None
    in_vocab: list[np.ndarray] = []
    eff_counts: list[np.ndarray] = []
    for _ in range(params.learner.num_iterations):
        counts = trie.count(start_mask)
        kept = trie.select(counts, thresh, params.learner.decrement)
        in_vocab, eff_counts = [], []
        for level, (ids, eff) in enumerate(kept, start=1):
            m = np.zeros(trie.n_ids(level), dtype=bool)
            m[ids] = True
            c = np.zeros(trie.n_ids(level))
            c[ids] = eff
            in_vocab.append(m)
            eff_counts.append(c)
        # Characters (both forms, less unreachable ones) are always in.
        in_vocab[0][:] = trie.level1_allowed
        start_mask = trie.split_starts(in_vocab)
    return in_vocab, eff_counts


def _size(in_vocab: list[np.ndarray], n_reserved: int, n_char_tokens: int) -> int:
    # Every alphabet character comes in both forms (less unreachable ones), seen or not.
    return n_reserved + n_char_tokens + int(sum(int(m.sum()) for m in in_vocab[1:]))


def _assemble(
    trie: _SubstringTrie,
    in_vocab: list[np.ndarray],
    eff_counts: list[np.ndarray],
    params: LearnerParams,
    alphabet: np.ndarray,
    limit: int | None,
    fill_from: list[str] | None = None,
) -> list[str]:
    """Reserved tokens, then every bare character, then tokens by count (ties by string).

    Above ``limit`` the least frequent learned tokens are trimmed; below it, with
    ``fill_from`` (a bigger vocabulary in its own order), its missing tokens are appended.
    """
    reserved = list(params.reserved_tokens)
    chars = [chr(int(c)) for c in alphabet]
    scored: list[tuple[float, str]] = []
    for level in range(1, trie.max_len + 1):
        ids = np.flatnonzero(in_vocab[level - 1])
        cnt = eff_counts[level - 1][ids]
        for sid, c in zip(ids.tolist(), cnt.tolist()):
            scored.append((c, trie.token(level, sid)))
    # The alphabet may include characters that only occur in one position; both forms stay.
    present = {t for _, t in scored}
    isolated = _isolated(alphabet, params)
    for ch, iso in zip(chars, isolated.tolist()):
        for t in (ch,) if iso else (ch, JOINER + ch):
            if t not in present:
                scored.append((1.0, t))
    scored.sort(key=lambda x: (-x[0], x[1]))
    vocab = list(dict.fromkeys(reserved + sorted(chars) + [t for _, t in scored]))
    if fill_from is not None and limit is not None and len(vocab) < limit:
        # Exact size: append the missing tokens of the bigger (lower threshold) vocabulary,
        # in its order (by its counts, ties by string), until the target is reached.
        have = set(vocab)
        extra = [t for t in fill_from if t not in have]
        vocab += extra[: limit - len(vocab)]
        return vocab
    if limit is not None and len(vocab) > limit:
        # Trim the least frequent tokens that are not reserved or characters.
        protected = set(reserved) | set(chars) | {JOINER + c for c in chars}
        extra = len(vocab) - limit
        drop: set[str] = set()
        for _, t in reversed(scored):
            if len(drop) >= extra:
                break
            if t not in protected:
                drop.add(t)
        vocab = [t for t in vocab if t not in drop]
    return vocab


class _ThresholdSearch:
    """Runs the learner at thresholds and keeps the two results around the target size: the
    largest vocabulary at most the target and the smallest above it."""

    def __init__(
        self, trie: _SubstringTrie, params: LearnerParams, n_res: int, n_char_tokens: int
    ) -> None:
        self.trie, self.params = trie, params
        self.n_res, self.n_char_tokens = n_res, n_char_tokens
        self.target = params.vocab_size
        self.tried: list[tuple[float, int]] = []
        self.below: tuple | None = None  # (size, thresh, result): the largest vocab <= target
        self.above: tuple | None = None  # (size, thresh, result): the smallest vocab > target

    def run(self, th: float) -> int:
        res = _learn_with_thresh(self.trie, th, self.params)
        size = _size(res[0], self.n_res, self.n_char_tokens)
        self.tried.append((th, size))
        log.debug("threshold %.4g -> %d tokens", th, size)
        if size <= self.target and (self.below is None or size > self.below[0]):
            self.below = (size, th, res)
        if size > self.target and (self.above is None or size < self.above[0]):
            self.above = (size, th, res)
        return size

    def search(self, max_count: float) -> None:
        """Bisect the threshold (geometrically, then log-log interpolated) until a vocabulary
        lands in the slack window below the target."""
        params, target = self.params, self.target
        slack = max(0.0, params.learner.slack_ratio * target)
        lo = max(params.lower_thresh, 1e-9)
        hi = max(lo, min(params.upper_thresh, max_count * 2))
        # The lowest threshold bounds what the data can give; if even that is too small, stop.
        size_lo, size_hi = self.run(lo), None
        if size_lo <= target:
            return
        for _ in range(params.max_search_steps):
            if self.below is not None and target - self.below[0] <= slack:
                break
            if hi / lo < 1.0 + 1e-6:
                break
            mid = math.sqrt(lo * hi)
            if size_hi is not None and size_hi > 0:
                # Size falls roughly as a power of the threshold: interpolate in log-log,
                # kept inside the bracket's middle so the search always shrinks it.
                f = (math.log(size_lo) - math.log(target - slack / 2)) / (
                    math.log(size_lo) - math.log(size_hi)
                )
                f = min(0.9, max(0.1, f))
                mid = math.exp(math.log(lo) + f * (math.log(hi) - math.log(lo)))
            size = self.run(mid)
            if size > target:
                lo, size_lo = mid, size
            else:
                hi, size_hi = mid, size

    def vocabulary(self, alphabet: np.ndarray) -> tuple[list[str], float, float | None, int]:
        """(vocab, its threshold, the fill's threshold or None, tokens filled): the result in
        the window (or the largest below with nothing above), filled to the exact size from
        the next larger one; else the smallest above, trimmed."""
        trie, params, target = self.trie, self.params, self.target
        slack = max(0.0, params.learner.slack_ratio * target)
        below, above = self.below, self.above
        if below is None or (target - below[0] > slack and above is not None):
            _, th, (in_vocab, eff) = above
            return _assemble(trie, in_vocab, eff, params, alphabet, target), th, None, 0
        _, th, (in_vocab, eff) = below
        if above is None or below[0] >= target:
            return _assemble(trie, in_vocab, eff, params, alphabet, target), th, None, 0
        # ``above`` is the smallest vocabulary above the target the search ran: the closest
        # lower threshold, so its extra tokens are the next ones the data offers.
        _, fill_th, (up_vocab, up_eff) = above
        fill_from = _assemble(trie, up_vocab, up_eff, params, alphabet, None)
        vocab = _assemble(trie, in_vocab, eff, params, alphabet, target, fill_from)
        return vocab, th, fill_th, len(vocab) - below[0]


def learn_vocab(
    words: list[str], counts: np.ndarray | list[float], params: LearnerParams
) -> LearnResult:
    """Learn a wordpiece vocabulary of at most ``params.vocab_size`` tokens from word counts."""
    t0 = time.perf_counter()
    stats: dict[str, int] = {}
    words, counts_arr, alphabet = _prepare_input(list(words), np.asarray(counts), params, stats)
    n_res = len(params.reserved_tokens)
    isolated = _isolated(alphabet, params)
    n_char_tokens = char_tokens(alphabet, params)
    min_size = n_res + n_char_tokens
    if params.vocab_size < min_size:
        raise VocabTooSmall(
            f"vocab_size {params.vocab_size} is smaller than the reserved tokens plus the "
            f"alphabet with its ## forms ({min_size}); raise vocab_size or lower max_unique_chars"
        )
    if not words:
        vocab = list(params.reserved_tokens)
        return LearnResult(vocab, math.inf, stats, [], time.perf_counter() - t0)

    trie = _SubstringTrie(words, counts_arr, params.learner.max_token_length, isolated, alphabet)
    log.info(
        "learner: %d words, %d characters, trie built in %.1fs",
        len(words),
        len(alphabet),
        time.perf_counter() - t0,
    )
    search = _ThresholdSearch(trie, params, n_res, n_char_tokens)
    search.search(float(counts_arr.max()))
    vocab, th, fill_th, filled = search.vocabulary(alphabet)
    secs = time.perf_counter() - t0
    log.info(
        "learner: %d tokens at threshold %.4g (%d filled from threshold %s) in %.1fs",
        len(vocab),
        th,
        filled,
        "-" if fill_th is None else f"{fill_th:.4g}",
        secs,
    )
    return LearnResult(vocab, th, stats, search.tried, secs, fill_th, filled)
