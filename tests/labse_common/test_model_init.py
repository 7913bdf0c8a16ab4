"""labse_common.model_init: model.init given the Hugging Face cache folder of the
released LaBSE is its snapshot, and a user's run without model.init that trains the demo's small
shape gets one warning line naming the shape and model.init."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from labse_common.config import from_dict, read_preset
from labse_common.errors import InputError
from labse_common.model_init import demo_shape_warning, resolve_init
from labse_common.sections.model import ModelConfig
from labse_common.sections.sources import SourcesConfig
from tests.support.hf_cache import COMMIT, as_hf_cache


def _encoder_folder(path: Path) -> Path:
    """The files of a sentence-transformers LaBSE folder (contents beside the point here)."""
    for name in ("config.json", "modules.json", "tokenizer.json", "vocab.txt"):
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text("{}\n", encoding="utf-8")
    (path / "2_Dense").mkdir()
    (path / "2_Dense" / "config.json").write_text("{}\n", encoding="utf-8")
    return path


def test_a_plain_encoder_folder_is_itself(tmp_path):
    folder = _encoder_folder(tmp_path / "LaBSE")
    assert resolve_init(folder) == folder.resolve()


def test_the_hf_cache_folder_is_the_snapshot_refs_main_names(tmp_path):
    repo = as_hf_cache(_encoder_folder(tmp_path / "src"), tmp_path / "hub")
    snap = repo / "snapshots" / COMMIT
    assert resolve_init(repo) == snap
    assert resolve_init(tmp_path / "hub") == snap  # the hub cache holding that one model
    assert resolve_init(snap) == snap
    assert (resolve_init(repo) / "2_Dense" / "config.json").is_file()


def test_a_cache_folder_without_refs_is_its_only_snapshot_and_several_are_refused(tmp_path):
    repo = as_hf_cache(_encoder_folder(tmp_path / "src"), tmp_path / "hub")
    (repo / "refs" / "main").unlink()
    assert resolve_init(repo) == repo / "snapshots" / COMMIT
    (repo / "snapshots" / "0123abcd").mkdir()
    with pytest.raises(InputError, match=r"^model\.init .*2 snapshots and no refs/main") as e:
        resolve_init(repo)
    assert "\n" not in str(e.value)


def test_what_is_not_an_encoder_is_left_for_the_caller_to_refuse(tmp_path):
    assert resolve_init(tmp_path / "missing") == (tmp_path / "missing").resolve()
    (tmp_path / "empty").mkdir()
    assert resolve_init(tmp_path / "empty") == (tmp_path / "empty").resolve()


def _values(preset: str, **model: object) -> dict:
    cfg = read_preset(preset)
    return {
        "model": dataclasses.asdict(
            from_dict(ModelConfig, {**(cfg.get("model") or {}), **model}, prefix="model")
        ),
        "sources": dataclasses.asdict(
            from_dict(SourcesConfig, cfg.get("sources") or {}, prefix="sources")
        ),
    }


def test_a_users_run_on_the_demo_shape_is_warned_once_naming_shape_and_model_init():
    root = Path(__file__).resolve().parents[2]
    warning = demo_shape_warning(_values(str(root / "configs" / "own-data.yaml")))
    assert warning is not None and "\n" not in warning
    assert "hidden_size 128" in warning and "model.init" in warning
    assert "docs/own-data.md" in warning


@pytest.mark.parametrize(
    "preset, model",
    [
        ("demo", {}),  # the demo's own sources: its shape is the point
        ("configs/own-data.yaml", {"init": "/models/LaBSE"}),
        ("configs/own-data.yaml", {"hidden_size": 768, "num_attention_heads": 12}),
        ("paper", {}),
    ],
)
def test_no_warning_for_the_demo_an_init_or_a_wider_shape(preset, model):
    root = Path(__file__).resolve().parents[2]
    path = preset if preset in ("demo", "paper") else str(root / preset)
    values = _values(path, **model)
    if preset == "paper":
        values["sources"]["demo"] = None
    assert demo_shape_warning(values) is None, json.dumps(values["model"])
