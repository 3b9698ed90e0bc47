import torch
import torch.nn as nn


class Model(nn.Module):
    """y = relu(a @ b + bias) in fp32 (TF32 disabled)."""

    def __init__(self, k=1024, n=2048):
        super().__init__()
        self.b = nn.Parameter(torch.randn(k, n) / 32)
        self.bias = nn.Parameter(torch.randn(n) * 0.5)

    def forward(self, a):
        return torch.relu(a @ self.b + self.bias)


def get_inputs():
    return [torch.randn(2048, 1024)]


def get_init_inputs():
    return [1024, 2048]
