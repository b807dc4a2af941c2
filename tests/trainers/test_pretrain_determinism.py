"""Pre-training is bit-reproducible whatever the caller's torch thread count, and the table's
own validation split is never read while fitting."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.trainers.test_pretrain import _cfg, tiny_table
from torchroute.models.oracles import load_oracle
from torchroute.trainers import RoutingDataModule
from torchroute.trainers.pretrain import run_pretrain


@pytest.fixture
def restore_threads():
    previous = torch.get_num_threads()
    yield
    torch.set_num_threads(previous)


@pytest.mark.slow
def test_weights_identical_with_one_and_two_caller_threads(tmp_path, restore_threads, caplog):
    # MiniLM-sized embeddings, RouterBench's K and 256-query batches: at this size the weights
    # after 3 epochs differ by ~4e-8 between 1 and 2 caller threads with train.threads=null
    table = tiny_table(n=800, d=384, k=11)
    states = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        cfg = _cfg(table, tmp_path / str(threads), data_module={"batch_size": 256})
        with caplog.at_level("INFO", logger="torchroute.trainers.pretrain"):
            metrics = run_pretrain(cfg)
        assert torch.get_num_threads() == threads  # the caller's setting is restored
        assert metrics["threads"] == 1  # the packaged train.threads
        states.append(load_oracle(tmp_path / str(threads) / "oracle.pt").state_dict())
    assert "fitting on 1 torch intra-op thread" in caplog.text
    assert states[0].keys() == states[1].keys()
    for key in states[0]:
        assert torch.equal(states[0][key], states[1][key]), key


def test_fitting_never_reads_the_tables_val_split():
    table = tiny_table(n=160)
    val = set(np.flatnonzero(np.asarray(table.split) == "val").tolist())
    dm = RoutingDataModule(table, batch_size=16, val_fraction=0.25, seed=3)
    dm.setup()
    seen = {
        name: {i for batch in loader for i in batch["index"].tolist()}
        for name, loader in (("fit", dm.train_dataloader()), ("stop", dm.val_dataloader()))
    }
    train = set(np.flatnonzero(np.asarray(table.split) == "train").tolist())
    assert seen["fit"] | seen["stop"] == train  # every train query, nothing else
    assert not seen["fit"] & seen["stop"] and not (seen["fit"] | seen["stop"]) & val
    assert len(seen["stop"]) == round(0.25 * len(train))
    assert set(dm.rows("val").tolist()) == val
