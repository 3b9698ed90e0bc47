import torch
import torch.nn as nn

rows = 16
cols = 96


class Model(nn.Module):
    """Two inputs and two outputs: the sum of x and a residual, and that sum
    layer-normalised; the norm's parameters sit in a nested module."""

    def __init__(self, cols):
        super(Model, self).__init__()
        self.block = nn.Sequential(nn.LayerNorm(cols))
        with torch.no_grad():
            self.block[0].weight.uniform_(0.5, 1.5)
            self.block[0].bias.normal_()

    def forward(self, x, residual):
        h = x + residual
        return h, self.block(h)


def get_inputs():
    return [torch.randn(rows, cols), torch.randn(rows, cols)]


def get_init_inputs():
    return [cols]
