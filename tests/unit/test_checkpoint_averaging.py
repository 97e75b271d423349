"""Checkpoint averaging: the average is the mean of the parameters, the last checkpoints
are found in fairseq's save order, and bad sets are refused without writing anything."""

import pytest
import torch

from sparse_attn_experiments.checkpoint_averaging import (
    AveragingError,
    average_checkpoints,
    average_last,
    saved_checkpoints,
)


def save(path, seed, **extra):
    g = torch.Generator().manual_seed(seed)
    model = {"w": torch.randn(3, 4, generator=g), "half": torch.randn(5, generator=g).half(),
             "steps": torch.tensor([7]), **extra}
    torch.save({"model": model, "optimizer_history": [{"num_updates": seed}]}, path)
    return model


def test_average_is_the_mean_of_the_parameters(tmp_path):
    models = [save(tmp_path / f"checkpoint_1_{i}.pt", i) for i in (10, 20, 30)]
    out = average_checkpoints([tmp_path / f"checkpoint_1_{i}.pt" for i in (10, 20, 30)],
                              tmp_path / "avg.pt")
    averaged = torch.load(out, weights_only=False)
    torch.testing.assert_close(averaged["model"]["w"],
                               torch.stack([m["w"] for m in models]).mean(0))
    torch.testing.assert_close(averaged["model"]["half"],
                               torch.stack([m["half"].double() for m in models]).mean(0).half())
    assert averaged["model"]["half"].dtype == torch.float16
    assert averaged["model"]["steps"].tolist() == [7]
    assert averaged["optimizer_history"] == [{"num_updates": 30}]       # the newest's


def test_one_checkpoint_averages_to_itself(tmp_path):
    model = save(tmp_path / "checkpoint3.pt", 1)
    averaged = torch.load(average_checkpoints([tmp_path / "checkpoint3.pt"], tmp_path / "a.pt"),
                          weights_only=False)["model"]
    assert all(torch.equal(averaged[k], model[k]) for k in model)


def test_saved_checkpoints_come_in_fairseq_save_order(tmp_path):
    names = ["checkpoint_2_900.pt", "checkpoint10.pt", "checkpoint2.pt", "checkpoint_1_100.pt",
             "checkpoint_10_1200.pt", "checkpoint_last.pt", "checkpoint_best.pt",
             "checkpoint_avg5.pt", "checkpoint1.pt"]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in saved_checkpoints(tmp_path)] == [
        "checkpoint_1_100.pt", "checkpoint1.pt", "checkpoint_2_900.pt", "checkpoint2.pt",
        "checkpoint_10_1200.pt", "checkpoint10.pt"]


def test_average_last_takes_the_newest(tmp_path):
    models = {i: save(tmp_path / f"checkpoint_1_{i}.pt", i) for i in (50, 100, 150)}
    out = average_last(tmp_path, 2)
    assert out.name == "checkpoint_avg2.pt"
    torch.testing.assert_close(torch.load(out, weights_only=False)["model"]["w"],
                               (models[100]["w"] + models[150]["w"]) / 2)


def test_too_few_checkpoints_is_one_line_naming_the_fix(tmp_path):
    save(tmp_path / "checkpoint_1_50.pt", 1)
    with pytest.raises(AveragingError, match=r"last 3 checkpoints needs 3, but .* holds 1: "
                                             r"save more \(--save-interval-updates"):
        average_last(tmp_path, 3)
    assert not list(tmp_path.glob("*avg*"))


@pytest.mark.parametrize("extra,message", [
    ({"other": torch.zeros(1)}, "does not hold the same parameters"),
    ({"steps": torch.tensor([8])}, "integer tensor steps differs"),
])
def test_checkpoints_of_different_models_are_refused_and_nothing_is_written(tmp_path, extra,
                                                                              message):
    save(tmp_path / "a.pt", 1)
    g = torch.Generator().manual_seed(2)
    torch.save({"model": {"w": torch.randn(3, 4, generator=g),
                          "half": torch.zeros(5).half(), "steps": torch.tensor([7]), **extra}},
               tmp_path / "b.pt")
    with pytest.raises(AveragingError, match=message):
        average_checkpoints([tmp_path / "a.pt", tmp_path / "b.pt"], tmp_path / "avg.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pt", "b.pt"]
