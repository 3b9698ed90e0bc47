import torch
import torch.nn as nn


class Model(nn.Module):
    """Reduces everything to a 0-d tensor (stored with shape [1])."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return x.sum()


def get_inputs():
    return [torch.rand(4, 1000)]


def get_init_inputs():
    return []
