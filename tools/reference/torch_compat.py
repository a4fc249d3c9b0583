"""The few PyTorch APIs that changed between 1.13 (Debian's, here) and 2.x (the GPU machine's).

The reference scripts run on both; each difference is handled here, once:

- weight norm: `torch.nn.utils.weight_norm` is deprecated since 2.1 in favour of
  `torch.nn.utils.parametrizations.weight_norm`, which renames the parameters
  (weight_g / weight_v become parametrizations.weight.original0 / original1).
  The old function still exists in 2.x and keeps the names that locuslab's
  checkpoints, our importer's tests and models_lean.py use, so it is used on
  both, with its deprecation warning silenced.
- TF32: 2.9 added `torch.backends.cuda.matmul.fp32_precision` and
  `torch.backends.cudnn.{conv,rnn}.fp32_precision` ("tf32" or "ieee") and
  deprecated `allow_tf32`; mixing the two is refused. set_tf32 / tf32_state use
  the new API where it exists, the old one elsewhere.
"""

import warnings

import torch


def weight_norm(module, name="weight", dim=0):
    """torch.nn.utils.weight_norm (weight_g, weight_v), without 2.x's deprecation warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", UserWarning)
        return torch.nn.utils.weight_norm(module, name=name, dim=dim)


def _new_tf32_api():
    # 1.13's torch.backends.cuda.matmul raises AssertionError, not AttributeError, for an
    # unknown name, so hasattr() cannot ask.
    try:
        torch.backends.cuda.matmul.fp32_precision
    except (AttributeError, AssertionError):
        return False
    return True


def set_tf32(on):
    """TF32 on (True) or off for cuBLAS matmuls and cuDNN convolutions and RNNs."""
    if _new_tf32_api():
        mode = "tf32" if on else "ieee"
        torch.backends.cuda.matmul.fp32_precision = mode
        torch.backends.cudnn.conv.fp32_precision = mode
        torch.backends.cudnn.rnn.fp32_precision = mode
    else:
        torch.backends.cuda.matmul.allow_tf32 = on
        torch.backends.cudnn.allow_tf32 = on


def tf32_state():
    """(matmul, cudnn conv): whether each may use TF32, read through the API this PyTorch has."""
    if _new_tf32_api():
        return (torch.backends.cuda.matmul.fp32_precision == "tf32",
                torch.backends.cudnn.conv.fp32_precision == "tf32")
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
