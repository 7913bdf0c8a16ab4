"""Hard negatives: never a translation of the anchor (duplicates, near-duplicates, a source
translated twice, chains of those), the loss with extra candidate columns by hand, and the
training loop mining them (with and without gradient caching)."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from labse_model.hard_negatives import NONE, HardNegativePool, mine, normalise, translation_groups
from labse_model.loss import AdditiveMarginRankingLoss

# (source, target, topic): pairs of one topic get nearly the same embedding, so the nearest
# targets of a source are its own translations first: the worst case for the filter.
POOL = [
    ("Der Hund schläft.", "The dog sleeps.", 0),
    ("Der Hund schläft.", "The dog sleeps.", 0),  # exact duplicate
    ("der  Hund schläft", "The dog is sleeping.", 0),  # near-duplicate source, other translation
    ("Ein Hund, der schläft.", "the dog sleeps", 0),  # other source, near-duplicate target
    ("Der Hund pennt.", "THE DOG IS SLEEPING!", 0),  # chained through pair 2's target
    ("Die Katze schläft.", "The cat sleeps.", 1),
    ("Die Katze schläft.", "The cat is asleep.", 1),  # the same source translated twice
    ("Le chat dort.", "The cat sleeps", 1),  # another language, near-duplicate target
    ("Ich esse Brot.", "I eat bread.", 2),
    ("Wir essen Brot.", "We eat bread.", 3),
    ("Es regnet.", "It is raining.", 4),
    ("Es schneit.", "It is snowing.", 5),
]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def _is_translation(a: int, c: int) -> bool:
    """The rule written out on texts, independently of the union-find: target c is a
    translation of anchor a's source when its normalised text is a's target's, or a target of
    any pair whose normalised source is a's (a source translated twice), or equals a's
    normalised source; and by chains of those, which here stay within one topic."""
    src = [normalise(s) for s, _, _ in POOL]
    trg = [normalise(t) for _, t, _ in POOL]
    direct = (
        trg[c] == trg[a]
        or trg[c] == src[a]
        or any(src[q] == src[a] and trg[q] == trg[c] for q in range(len(POOL)))
    )
    return direct or POOL[a][2] == POOL[c][2] and POOL[a][2] in (0, 1)


def _embeddings(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    centres = F.normalize(torch.randn(6, 16, generator=g), dim=-1)
    # Topics 0 and 1 close to each other: the dog's nearest non-translations are cats.
    centres[1] = F.normalize(centres[0] + 0.3 * centres[1], dim=-1)
    topic = torch.tensor([p[2] for p in POOL])
    src = F.normalize(centres[topic] + 0.01 * torch.randn(len(POOL), 16, generator=g), dim=-1)
    trg = F.normalize(centres[topic] + 0.01 * torch.randn(len(POOL), 16, generator=g), dim=-1)
    return src, trg


def test_normalise_joins_case_space_and_punctuation_variants():
    assert normalise("The dog sleeps.") == normalise("the  dog sleeps") == "the dog sleeps"
    assert normalise("THE DOG IS SLEEPING!") == normalise("The dog is sleeping.")
    assert normalise("Ｔｏｍ") == normalise("tom")  # NFKC: full-width letters


def test_groups_link_duplicates_near_duplicates_and_double_translations():
    groups = translation_groups([p[0] for p in POOL], [p[1] for p in POOL])
    assert len(set(groups[:5])) == 1  # the dog: duplicates, near-duplicates, a chain
    assert len(set(groups[5:8])) == 1  # the cat: one source twice, a near-duplicate target
    assert groups[0] != groups[5]
    assert len(set(groups[8:])) == 4  # unrelated pairs stay apart
    for a in range(len(POOL)):
        for c in range(len(POOL)):
            if _is_translation(a, c):
                assert groups[a] == groups[c], (POOL[a], POOL[c])


@pytest.mark.parametrize("k", [1, 3, 6])
def test_a_hard_negative_is_never_a_translation_of_its_anchor(k):
    src, trg = _embeddings()
    groups = translation_groups([p[0] for p in POOL], [p[1] for p in POOL])
    nb = mine(src, trg, groups, k, block=5)  # blocks smaller than the pool
    assert nb.shape == (len(POOL), k)
    for a in range(len(POOL)):
        found = [int(c) for c in nb[a] if c != NONE]
        assert found, POOL[a]
        for c in found:
            assert not _is_translation(a, c), (POOL[a], POOL[c])
        # One negative per group: a duplicated target is not two negatives.
        assert len({int(groups[c]) for c in found}) == len(found)
    # The nearest non-translation is taken: for every dog sentence, a cat sentence.
    assert all(POOL[int(nb[a, 0])][2] == 1 for a in range(5))
    assert all(POOL[int(nb[a, 0])][2] == 0 for a in range(5, 8))


def test_the_pool_answers_by_text_and_leaves_empty_slots():
    pool = HardNegativePool([p[0] for p in POOL], [p[1] for p in POOL])
    assert pool.negatives_of(*POOL[0][:2]) == []  # nothing mined yet
    src, trg = _embeddings()
    pool.neighbours = mine(src, trg, pool.groups, 2)
    negs = pool.negatives_of(*POOL[0][:2])
    assert negs and all(not _is_translation(0, c) for c in negs)
    assert pool.negatives_of("never seen", "nie gesehen") == []
    assert pool.group_of("never seen", "nie gesehen") == -2


def test_loss_with_extra_candidates_equals_a_hand_computation():
    g = torch.Generator().manual_seed(0)
    x = F.normalize(torch.randn(3, 8, generator=g), dim=-1)
    y = F.normalize(torch.randn(3, 8, generator=g), dim=-1)
    z = F.normalize(torch.randn(4, 8, generator=g), dim=-1)  # hard-negative targets
    src_groups = torch.tensor([10, 11, 12])
    # Column 1 is in row 1's group (a translation: never its negative), column 3 is empty.
    extra_groups = torch.tensor([20, 11, 21, -1])
    scale, m = 20.0, 0.3
    got = AdditiveMarginRankingLoss(scale, m)(x, y, z, src_groups, extra_groups).loss
    total = 0.0
    for i in range(3):  # source -> targets + allowed extra columns
        pos = scale * (float(x[i] @ y[i]) - m)
        negs = [scale * float(x[i] @ y[j]) for j in range(3) if j != i]
        negs += [
            scale * float(x[i] @ z[c])
            for c in range(4)
            if extra_groups[c] >= 0 and extra_groups[c] != src_groups[i]
        ]
        total += -(pos - math.log(math.exp(pos) + sum(math.exp(v) for v in negs))) / 3
    for i in range(3):  # target -> sources: no extra columns
        pos = scale * (float(y[i] @ x[i]) - m)
        negs = [scale * float(y[i] @ x[j]) for j in range(3) if j != i]
        total += -(pos - math.log(math.exp(pos) + sum(math.exp(v) for v in negs))) / 3
    assert float(got) == pytest.approx(total, rel=1e-5)
    # The extra columns do change the loss (they are real candidates).
    assert float(AdditiveMarginRankingLoss(scale, m)(x, y).loss) < float(got)


def test_cached_gradients_with_hard_negative_columns_equal_the_plain_batch():
    from labse_model.grad_cache import cached_forward_backward
    from tests.labse_model.test_grad_cache import _assert_same, _grads, global_batch, small_encoder

    ids, mask = global_batch(pairs=8)  # 4 pairs + 4 hard negatives x 2 (8 + 8 rows)
    src_groups = torch.tensor([0, 1, 2, 3])
    extra_groups = torch.tensor([1, 5, 0, -1, 6, 7, 3, 2])  # some in their row's group, one empty
    loss_fn = AdditiveMarginRankingLoss(20.0, 0.3)

    def loss(emb: torch.Tensor):
        out = loss_fn(emb[:4], emb[4:8], emb[8:], src_groups, extra_groups)
        return out.loss, {}

    plain = small_encoder(0.0)
    loss(plain(ids, mask))[0].backward()
    cached = small_encoder(0.0)
    cached_forward_backward(cached, ids, mask, loss, chunk_size=3)
    _assert_same(_grads(cached), _grads(plain))


def test_training_mines_hard_negatives_deterministically(tmp_path, caplog):
    from labse_common.config import load
    from labse_common.stats import check_balanced, read_report
    from labse_model.train import train
    from tests.support.two_node_util import synthetic_pairs, write_vocab

    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(synthetic_pairs(64), encoding="utf-8")
    vocab = write_vocab(tmp_path / "vocab")
    model = load(
        "model",
        None,
        flags={
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "max_position_embeddings": 32,
            "dropout": 0.0,
        },
    )
    curves = []
    caplog.set_level("INFO")
    # The producer thread runs 1 or 4 batches ahead: which mining a batch uses must not
    # depend on it. The third run goes through gradient caching with the negatives.
    for name, prefetch, chunk in (("near", 1, None), ("far", 4, None), ("cached", 4, 10)):
        cfg = load(
            "train",
            "demo",
            flags={
                "progress": False,
                "threads": 1,
                "tensorboard": False,
                "batch_size": 16,
                "log_every": 1,
                "save_every": 100,
                "vocab": vocab,
                "prefetch": prefetch,
                "chunk_size": chunk,
                "hard_negatives": 2,
                "hard_negatives_every": 2,
            },
        )
        train(model, cfg, [str(pairs)], str(tmp_path / name), max_steps=6)
        curves.append(
            [json.loads(line)["loss"] for line in open(tmp_path / name / "metrics.jsonl")]
        )
        report = read_report(str(tmp_path / name / "stats.json"))
        assert check_balanced(report) == [] and report["counts"]["pairs"]["out"] == 64
    assert "hard negatives: 128 mined for 64 pairs" in caplog.text
    assert len(curves[0]) == 6 and all(math.isfinite(x) for c in curves for x in c)
    assert curves[1] == curves[0]
    # The negatives join the batch after the first mining (step 2): the loss jumps.
    assert curves[0][2] > curves[0][1] + 0.5
    # Caching changes the weights by rounding only, but a mining on an untrained encoder is
    # full of near ties that rounding breaks differently: the steps before the first mining
    # are compared here; the cached step with negatives is compared exactly above.
    assert curves[2][:2] == pytest.approx(curves[0][:2], abs=1e-4)
