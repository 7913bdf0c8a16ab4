"""``mining plan --calibrate`` (mining.plan_calibrate, split from the planner so that the planner
imports none of the miners it times): every cost is measured here and the plan uses them."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from mining.__main__ import main as mining_main
from mining.plan import MEASURED, Costs


@pytest.mark.slow
def test_calibrated_costs_are_measured_and_planned_with(capsys) -> None:
    # dim 64 keeps the FAISS runs short; the store, gather and margin steps run as at 768.
    argv = ["plan", "--n-src", "1e6", "--n-trg", "1e6", "--dim", "64", "--mem-gb", "2"]
    assert mining_main([*argv, "--calibrate", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    costs = Costs(**out["calibrated_costs"])
    for f in dataclasses.fields(Costs):
        value = getattr(costs, f.name)
        if f.name != "source":
            assert math.isfinite(value) and value > 0, f.name
    assert costs.source == out["costs"] == "per core, calibrated now on this machine"
    # The re-score beyond the page cache keeps the measured ratio to the cached cost.
    assert costs.gather_s / costs.gather_cached_s == pytest.approx(
        MEASURED.gather_s / MEASURED.gather_cached_s
    )
    assert mining_main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["costs"] == MEASURED.source
