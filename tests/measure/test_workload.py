"""speedlab.measure.workload: the samples in a batch, read from its shape alone."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from speedlab.measure.workload import batch_size_of, samples_of


@dataclasses.dataclass
class Pair:
    x: torch.Tensor
    y: torch.Tensor


@pytest.mark.parametrize(
    ("batch", "size"),
    [
        (torch.zeros(7, 3), 7),
        ((torch.zeros(5, 2), torch.zeros(5)), 5),
        ({"image": torch.zeros(3, 1), "label": torch.zeros(3)}, 3),
        ([[torch.zeros(4)], 1], 4),
        (torch.tensor(1.0), 1),
        ([], 0),
        ((["a", "b", "c"], torch.zeros(3, 2)), 3),  # the first tensor, past a list of names
        ((None, {"x": torch.zeros(6)}), 6),
        (Pair(torch.zeros(2, 2), torch.zeros(2)), 2),
        ([torch.zeros(0, 3), torch.zeros(5)], 5),  # an empty first tensor: the next one's
        ((torch.tensor(2.0), torch.zeros(4)), 1),  # a scalar first: one sample, as alone
    ],
)
def test_batch_size_of(batch: object, size: int) -> None:
    assert batch_size_of(batch) == size


def test_samples_of_several_loaders_add_up() -> None:
    pair = (torch.zeros(4, 3), torch.zeros(4))
    other = {"x": torch.zeros(2, 3)}
    loaders = {"a": "loader a", "b": "loader b"}
    assert samples_of({"a": pair, "b": other}, loaders) == 6
    assert samples_of([pair, other], ["loader a", "loader b"]) == 6
    assert samples_of({"a": pair, "b": None}, loaders) == 4  # mode "max_size": b is done
    assert samples_of(pair, "one loader") == 4
