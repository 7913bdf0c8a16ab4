"""Progressive stacking: exact layer copies, outputs, optimizer moments, head save/load."""

from __future__ import annotations

import torch
from transformers import BertConfig

from labse_model.mlm import MaskedLM, load_head, save_head, stack, stack_optimizer_state
from labse_model.model import SentenceEncoder, build_config, new_encoder
from labse_model.pretrain import stage_layers


def _model(layers: int = 2) -> MaskedLM:
    cfg: BertConfig = build_config(
        300,
        0,
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        dropout=0.0,
    )
    return MaskedLM(new_encoder(cfg, seed=0))


def _hidden(bert, ids, att) -> torch.Tensor:
    return bert(input_ids=ids, attention_mask=att).last_hidden_state


def test_stack_copies_layers_in_order_and_only_adds_layers():
    torch.manual_seed(0)
    small = _model(2)
    big = stack(small)
    assert big.bert.config.num_hidden_layers == 4 and small.bert.config.num_hidden_layers == 2
    s_state, b_state = small.state_dict(), big.state_dict()
    for name, value in b_state.items():
        if ".encoder.layer." in name:
            i = int(name.split(".encoder.layer.")[1].split(".")[0])
            src = name.replace(f".encoder.layer.{i}.", f".encoder.layer.{i % 2}.")
            assert torch.equal(value, s_state[src]), name  # layer i -> i and i + L/4
        else:
            assert torch.equal(value, s_state[name]), name
    # Copies, not shared tensors: training one must not move the other.
    assert (
        big.bert.encoder.layer[2].output.dense.weight
        is not big.bert.encoder.layer[0].output.dense.weight
    )
    # The head stays tied to the new model's embeddings.
    assert big.head.predictions.decoder.weight is big.bert.embeddings.word_embeddings.weight
    ids = torch.randint(5, 300, (3, 12))
    att = torch.ones_like(ids)
    small.eval()
    big.eval()
    with torch.no_grad():
        h_small = _hidden(small.bert, ids, att)
        h_big = _hidden(big.bert, ids, att)
        # Without the added layers the stacked model computes exactly stage 1's output ...
        added = big.bert.encoder.layer
        big.bert.encoder.layer = added[:2]
        h_cut = _hidden(big.bert, ids, att)
        big.bert.encoder.layer = added
    torch.testing.assert_close(h_cut, h_small, rtol=0, atol=0)
    # ... and the added layers change it.
    assert (h_big - h_small).abs().max() > 1e-3


def test_optimizer_moments_are_duplicated_like_the_layers():
    small = _model(1)
    opt = torch.optim.AdamW([p for p in small.parameters() if p.requires_grad], lr=1e-3)
    labels = torch.full((2, 8), -100)
    labels[:, 3] = 7
    ids = torch.randint(5, 300, (2, 8))
    losses, _c, _r = small(ids, torch.ones_like(ids), torch.zeros_like(ids), labels)
    losses.mean().backward()
    opt.step()
    big = stack(small)
    opt2 = torch.optim.AdamW([p for p in big.parameters() if p.requires_grad], lr=1e-3)
    stack_optimizer_state(opt, small, opt2, big)
    src = small.bert.encoder.layer[0].attention.self.query.weight
    for layer in big.bert.encoder.layer:
        dst = layer.attention.self.query.weight
        assert torch.equal(opt2.state[dst]["exp_avg"], opt.state[src]["exp_avg"])
        assert torch.equal(opt2.state[dst]["exp_avg_sq"], opt.state[src]["exp_avg_sq"])
    emb = big.bert.embeddings.word_embeddings.weight
    assert torch.equal(
        opt2.state[emb]["exp_avg"],
        opt.state[small.bert.embeddings.word_embeddings.weight]["exp_avg"],
    )
    # Pretraining never trains the pooler (the dual encoder's sentence head).
    assert big.bert.pooler.dense.weight not in opt2.state


def test_head_saved_and_loaded_and_stage_depths(tmp_path):
    a = _model(2)
    with torch.no_grad():
        a.head.predictions.transform.dense.weight.add_(1.0)
    save_head(a, str(tmp_path))
    b = MaskedLM(SentenceEncoder(a.bert))
    assert load_head(b, str(tmp_path))
    assert torch.equal(
        b.head.predictions.transform.dense.weight, a.head.predictions.transform.dense.weight
    )
    assert b.head.predictions.decoder.weight is b.bert.embeddings.word_embeddings.weight
    assert not load_head(b, str(tmp_path / "none"))
    assert stage_layers(12, 3) == [3, 6, 12] and stage_layers(2, 2) == [1, 2]
