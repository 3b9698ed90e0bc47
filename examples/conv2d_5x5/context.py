import torch
import torch.nn as nn


class Model(nn.Module):
    """Single-channel 5x5 convolution, padding 2, no bias."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 1, 5, padding=2, bias=False)

    def forward(self, x):
        return self.conv(x.unsqueeze(1)).squeeze(1)


def get_inputs():
    return [torch.randn(4, 2048, 2048)]


def get_init_inputs():
    return []
