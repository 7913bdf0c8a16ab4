"""Hard rules for sentence pairs, each a :class:`filters.steps.Step` with named drop reasons.

A rule is one small :class:`Rule` class whose ``name`` is the one used in the preset's
``pair_rules.steps`` list and whose ``from_context`` builds it from the config; each class
registers itself in :data:`RULES` (the config section's registry, so the name is declared here
only, and the order of the classes below is the default order), and :func:`build_chain` turns
the preset into a :class:`Chain`. Lengths
are in *length units*: characters, with the characters of the scripts in
``pair_rules.script_units`` (Han, kana, Hangul) weighted so that a Chinese sentence is not three
times "shorter" than its English translation.

=========  ====================================================================================
rule       reasons
=========  ====================================================================================
empty      ``empty_src``, ``empty_trg``: nothing but white space
identical  ``identical``: the same text on both sides (case, spaces and punctuation aside)
length     ``too_short_src|trg``, ``too_long_src|trg``: outside ``min_length..max_length``
ratio      ``length_ratio``: longer/shorter > ``max_ratio`` (once the longer side has
           ``ratio_min_length`` units)
markup     ``markup_only_src|trg``: only URLs, e-mail addresses, tags or entities;
           ``no_letters_src|trg``: no letter at all
numbers    ``number_mismatch``: both sides have numbers and neither side's set of numbers
           contains the other's (digits of any script; 1,000 = 1000); numbers spelled out on
           one side ("30" / "thirty", "June 18" / "6月18日") do not count against a pair
repeats    ``repeated_tokens_src|trg``: a 3-50 character unit repeated > ``max_repeats`` times
copy       ``untranslated_copy``: word-set Jaccard overlap > ``max_overlap``
script     ``wrong_script_src|trg``: under ``min_script_ratio`` of the letters are in the
           declared language's script (languages of unknown script are not checked)
lang       ``wrong_lang_src|trg``: fastText LID (corpus pipelines' model) names another language
           with probability >= ``lid_threshold`` and gives the declared one (or its confusable
           group) < ``lid_declared_min``; sides shorter than ``lid_min_length`` skip
=========  ====================================================================================
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import regex

from filters.bitext.scripts import LengthUnits, base_lang, script_ratio, scripts_of
from filters.langid import CONFUSABLE_GROUPS, LanguageIdentifier
from filters.steps import Chain, KeepSummary, Step, chain_report
from labse_common.sections.pair_rules import RULES, PairRulesConfig
from labse_common.stats import StageCounter

UNIT = "pairs"


class Pair:
    """One pair travelling through the chain; ``index`` is its row in the input batch."""

    __slots__ = ("src", "trg", "src_lang", "trg_lang", "index", "cds_score", "_units")

    def __init__(self, src: str, trg: str, src_lang: str, trg_lang: str, index: int = 0) -> None:
        self.src, self.trg, self.src_lang, self.trg_lang, self.index = (
            src,
            trg,
            src_lang,
            trg_lang,
            index,
        )
        self.cds_score: float | None = None
        self._units: tuple[float, float] | None = None

    def units(self, measure: LengthUnits) -> tuple[float, float]:
        if self._units is None:
            self._units = (measure(self.src), measure(self.trg))
        return self._units


# --- the rules ---------------------------------------------------------------------------------


class Rule(Step):
    """A pair rule: ``name`` is its key in ``pair_rules.steps``; ``from_context`` builds it from
    the config (rules without settings need no override)."""

    name: str

    @classmethod
    def from_context(cls, ctx: RuleContext) -> Rule:
        return cls()


@RULES.register()
class Empty(Rule):
    name = "empty"

    def __call__(self, p: Pair) -> str | None:
        if not p.src.strip():
            return "empty_src"
        if not p.trg.strip():
            return "empty_trg"
        return None


_NON_WORD = regex.compile(r"[\p{P}\p{S}\s]+")


def _norm(text: str) -> str:
    return _NON_WORD.sub("", text).casefold()


@RULES.register()
class Identical(Rule):
    name = "identical"

    def __call__(self, p: Pair) -> str | None:
        if p.src == p.trg or _norm(p.src) == _norm(p.trg):
            return "identical"
        return None


@RULES.register()
class Length(Rule):
    name = "length"

    @classmethod
    def from_context(cls, ctx: RuleContext) -> Length:
        return cls(ctx.units, ctx.cfg.min_length, ctx.cfg.max_length)

    def __init__(self, units: LengthUnits, min_length: float, max_length: float) -> None:
        self.measure, self.lo, self.hi = units, min_length, max_length

    def __call__(self, p: Pair) -> str | None:
        for side, n in zip(("src", "trg"), p.units(self.measure)):
            if n < self.lo:
                return f"too_short_{side}"
            if n > self.hi:
                return f"too_long_{side}"
        return None


@RULES.register()
class Ratio(Rule):
    name = "ratio"

    @classmethod
    def from_context(cls, ctx: RuleContext) -> Ratio:
        return cls(ctx.units, ctx.cfg.max_ratio, ctx.cfg.ratio_min_length)

    def __init__(self, units: LengthUnits, max_ratio: float, min_length: float) -> None:
        self.measure, self.max_ratio, self.min_length = units, max_ratio, min_length

    def __call__(self, p: Pair) -> str | None:
        a, b = p.units(self.measure)
        lo, hi = min(a, b), max(a, b)
        if hi < self.min_length:
            return None
        if lo == 0 or hi / lo > self.max_ratio:
            return "length_ratio"
        return None


_URL = r"(?:https?|ftp)://\S+|www\.\S+"
_EMAIL = r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
_MARKUP = r"<[^<>]{1,200}>|&(?:#\d+|#x[0-9a-fA-F]+|\w+);|\[\[|\]\]|\{\{|\}\}"
_MARKUP_RE = regex.compile(f"{_URL}|{_EMAIL}|{_MARKUP}")
_HAS_LETTER = regex.compile(r"\p{L}")


_MARKUP_HINTS = ("://", "www.", "@", "<", "&", "[[", "{{", "]]", "}}")


@RULES.register()
class Markup(Rule):
    name = "markup"

    def __call__(self, p: Pair) -> str | None:
        for side, text in (("src", p.src), ("trg", p.trg)):
            # The regex is costly at every position; most text has none of its anchors.
            rest = _MARKUP_RE.sub(" ", text) if any(h in text for h in _MARKUP_HINTS) else text
            if not _HAS_LETTER.search(rest):
                return f"markup_only_{side}" if rest != text else f"no_letters_{side}"
        return None


# A number: digits of any script, with thousands/decimal separators between digits folded away.
_NUMBER = re.compile(r"\d+(?:[.,\u00a0\u202f' ]\d+)*")
_SEPARATORS = re.compile(r"[.,\u00a0\u202f' ]")


def numbers(text: str) -> list[str]:
    out = []
    for m in _NUMBER.finditer(text):
        digits = _SEPARATORS.sub("", m.group())
        if not digits.isascii():  # Arabic-Indic, Devanagari, full-width... -> ASCII
            digits = "".join(str(unicodedata.digit(c)) for c in digits)
        out.append(digits.lstrip("0") or "0")
    return sorted(out)


@RULES.register()
class Numbers(Rule):
    name = "numbers"

    def __call__(self, p: Pair) -> str | None:
        # Both sides must have digits: one side may spell a number out ("30" / "thirty").
        if not (any(c.isdigit() for c in p.src) and any(c.isdigit() for c in p.trg)):
            return None
        a, b = set(numbers(p.src)), set(numbers(p.trg))
        # A date may spell its month on one side ("6月18日" / "June 18"): subsets are fine.
        if not (a <= b or b <= a):
            return "number_mismatch"
        return None


@RULES.register()
class Repeats(Rule):
    name = "repeats"

    @classmethod
    def from_context(cls, ctx: RuleContext) -> Repeats:
        return cls(ctx.cfg.max_repeats)

    def __init__(self, max_repeats: int) -> None:
        self.times = max_repeats + 1
        self.pattern = re.compile(r"(\S.{2,49}?)" + r"\s*\1" * max_repeats)

    def _repeats(self, text: str) -> bool:
        # A unit of >= 3 characters seen `times` times in a row means its first 3 characters
        # occur `times` times: a cheap necessary test before the backtracking regex.
        if len(text) < 3 * self.times:
            return False
        if max(Counter(zip(text, text[1:], text[2:])).values()) < self.times:
            return False
        return self.pattern.search(text) is not None

    def __call__(self, p: Pair) -> str | None:
        for side, text in (("src", p.src), ("trg", p.trg)):
            if self._repeats(text):
                return f"repeated_tokens_{side}"
        return None


_WORD = regex.compile(r"\w+")


@RULES.register()
class Copy(Rule):
    name = "copy"

    @classmethod
    def from_context(cls, ctx: RuleContext) -> Copy:
        return cls(ctx.cfg.max_overlap, ctx.cfg.copy_min_tokens)

    def __init__(self, max_overlap: float, min_tokens: int) -> None:
        self.max_overlap, self.min_tokens = max_overlap, min_tokens

    def __call__(self, p: Pair) -> str | None:
        a = set(_WORD.findall(p.src.casefold()))
        if len(a) < self.min_tokens:
            return None
        b = set(_WORD.findall(p.trg.casefold()))
        if len(b) < self.min_tokens:
            return None
        inter = len(a & b)
        if inter and inter / (len(a) + len(b) - inter) > self.max_overlap:
            return "untranslated_copy"
        return None


@RULES.register()
class Script(Rule):
    name = "script"

    @classmethod
    def from_context(cls, ctx: RuleContext) -> Script:
        return cls(ctx.cfg.min_script_ratio)

    def __init__(self, min_ratio: float) -> None:
        self.min_ratio = min_ratio
        self._scripts: dict[str, tuple[str, ...] | None] = {}

    def _of(self, lang: str) -> tuple[str, ...] | None:
        if lang not in self._scripts:
            self._scripts[lang] = scripts_of(lang) if lang else None
        return self._scripts[lang]

    def __call__(self, p: Pair) -> str | None:
        for side, text, lang in (("src", p.src, p.src_lang), ("trg", p.trg, p.trg_lang)):
            scripts = self._of(lang)
            if scripts is None:
                continue
            r = script_ratio(text, scripts)
            if r is not None and r < self.min_ratio:
                return f"wrong_script_{side}"
        return None


_GROUP_OF = {lang: g for g in CONFUSABLE_GROUPS for lang in g}


def same_language(declared: str, predicted: str) -> bool:
    a, b = base_lang(declared), base_lang(predicted)
    return a == b or (a in _GROUP_OF and b in _GROUP_OF[a])


@RULES.register()
class Lang(Rule):
    """Batched fastText LID of both sides (annotate), then a per-pair decision: a side is in the
    wrong language when LID's best guess is another language with probability >= ``threshold``
    and the declared language (with its confusable group) gets less than ``declared_min``."""

    name = "lang"
    top_k = 5

    @classmethod
    def from_context(cls, ctx: RuleContext) -> Lang:
        c = ctx.cfg
        return cls(ctx.lid, ctx.units, c.lid_threshold, c.lid_declared_min, c.lid_min_length)

    def __init__(
        self,
        lid: LanguageIdentifier,
        units: LengthUnits,
        threshold: float,
        declared_min: float,
        min_length: float,
    ) -> None:
        self.lid, self.measure, self.min_length = lid, units, min_length
        self.threshold, self.declared_min = threshold, declared_min
        self._verdict: dict[int, str] = {}

    def _declared_prob(self, declared: str, labels: Sequence[str], probs: Sequence[float]) -> float:
        return float(sum(p for lab, p in zip(labels, probs) if same_language(declared, lab[9:])))

    def annotate(self, records: Sequence[Pair]) -> None:
        jobs: list[tuple[int, str, str]] = []  # (id(pair), side, declared)
        texts: list[str] = []
        for p in records:
            a, b = p.units(self.measure)
            if p.src_lang and a >= self.min_length:
                jobs.append((id(p), "src", p.src_lang))
                texts.append(p.src)
            if p.trg_lang and b >= self.min_length:
                jobs.append((id(p), "trg", p.trg_lang))
                texts.append(p.trg)
        self._verdict = {}
        if not texts:
            return
        labels, probs = self.lid.model.predict([t.replace("\n", " ") for t in texts], k=self.top_k)
        for (key, side, declared), labs, ps in zip(jobs, labels, probs):
            if key in self._verdict or not len(labs):
                continue  # the source side already failed
            top = labs[0][9:]  # "__label__xx"
            if (
                ps[0] >= self.threshold
                and not same_language(declared, top)
                and self._declared_prob(declared, labs, ps) < self.declared_min
            ):
                self._verdict[key] = f"wrong_lang_{side}"

    def __call__(self, p: Pair) -> str | None:
        return self._verdict.get(id(p))


class CdsStep(Step):
    """Score the pairs that passed the rules with a trained CDS scorer (``filters.bitext.cds``'s
    ``CdsScorer``: ``score(src_list, trg_list) -> list[float]``), batched; with a threshold,
    drop pairs scoring below it as ``cds_below_threshold``."""

    name = "cds"

    def __init__(self, scorer: object, threshold: float | None = None) -> None:
        self.scorer, self.threshold = scorer, threshold

    def annotate(self, records: Sequence[Pair]) -> None:
        scores = self.scorer.score([p.src for p in records], [p.trg for p in records])
        for p, s in zip(records, scores):
            p.cds_score = float(s)

    def __call__(self, p: Pair) -> str | None:
        if self.threshold is not None and not (p.cds_score >= self.threshold):
            return "cds_below_threshold"
        return None


# --- the registry and the chain ------------------------------------------------------------------


class RuleContext:
    """What the rule factories share: the config, one length measure, one LID model."""

    def __init__(self, cfg: PairRulesConfig) -> None:
        self.cfg = cfg
        self.units = LengthUnits(cfg.script_units)
        self._lid: LanguageIdentifier | None = None

    @property
    def lid(self) -> LanguageIdentifier:
        if self._lid is None:
            self._lid = LanguageIdentifier(self.cfg.lid_model)
        return self._lid


def build_chain(cfg: PairRulesConfig) -> Chain:
    """The preset's ``steps`` as a Chain over :class:`Pair` records (unit ``pairs``)."""
    ctx = RuleContext(cfg)
    return Chain(
        [RULES.get(name, "pair_rules.steps").from_context(ctx) for name in cfg.steps], unit=UNIT
    )


# --- running the chain on record batches ------------------------------------------------------


def _lang_column(batch: pa.RecordBatch, name: str, default: str) -> list[str]:
    if name not in batch.schema.names:
        return [default] * batch.num_rows
    return [v or default for v in batch.column(batch.schema.names.index(name)).to_pylist()]


class PairRulesRunner:
    """The rules over Arrow record batches: kept rows, dropped rows (with ``step``/``reason``
    columns), the chain's per-step counts and a :class:`KeepSummary`.

    Languages come from the batch's ``src_lang``/``trg_lang`` columns where present and not
    empty (mining output), else from ``src_lang``/``trg_lang`` given here; a side with no
    language skips the script and LID rules.
    """

    def __init__(
        self,
        cfg: PairRulesConfig,
        src_lang: str = "",
        trg_lang: str = "",
        extra_steps: Sequence[Step] = (),
    ) -> None:
        self.cfg = cfg
        self.chain = build_chain(cfg)
        self.chain = Chain([*self.chain.steps, *extra_steps], unit=UNIT)
        self.scored = any(isinstance(s, CdsStep) for s in self.chain.steps)
        self.src_lang, self.trg_lang = src_lang, trg_lang
        self.summary = KeepSummary(cfg.length_buckets)

    def filter_batch(
        self, batch: pa.RecordBatch, counter: StageCounter | None = None, want_dropped: bool = False
    ) -> tuple[pa.RecordBatch, pa.RecordBatch | None]:
        src = batch.column(batch.schema.names.index("src")).to_pylist()
        trg = batch.column(batch.schema.names.index("trg")).to_pylist()
        sl = _lang_column(batch, "src_lang", self.src_lang)
        tl = _lang_column(batch, "trg_lang", self.trg_lang)
        pairs = [Pair(s, t, a, b, i) for i, (s, t, a, b) in enumerate(zip(src, trg, sl, tl))]
        outcomes = self.chain.decide(pairs, counter)
        self.summary.add_outcomes(
            self.chain.step_names,
            outcomes,
            [f"{a}-{b}" for a, b in zip(sl, tl)],
            [min(len(s), len(t)) for s, t in zip(src, trg)],
        )
        keep = pa.array([o is None for o in outcomes], pa.bool_())
        if self.scored:
            batch = batch.append_column(
                "cds_score", pa.array([p.cds_score for p in pairs], pa.float32())
            )
        kept = batch.filter(keep)
        dropped = None
        if want_dropped:
            gone = [o for o in outcomes if o is not None]
            dropped = batch.filter(pc.invert(keep))
            dropped = dropped.append_column("step", pa.array([o[0] for o in gone], pa.string()))
            dropped = dropped.append_column("reason", pa.array([o[1] for o in gone], pa.string()))
        return kept, dropped

    def report(self, stage: str, flat: dict[str, int] | None = None, **extra: object) -> dict:
        """stats.json: ``flat`` (other units' counts, e.g. the reader's ``lines``), the chain's
        ``pairs`` and per-step counts, and the language/length summary. Pass no counter to
        ``filter_batch`` when reporting this way (the chain counts the pairs itself)."""
        merged = Counter(flat or {})
        merged.update(self.chain.counts)
        rep = chain_report(stage, merged, self.chain.step_names)
        rep["summary"] = self.summary.to_dict(self.chain.step_names)
        rep.update(extra)
        return rep
