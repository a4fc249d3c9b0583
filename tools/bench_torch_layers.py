#!/usr/bin/env python3
"""PyTorch's side of build/bench_cudnn: nn.Conv1d (padding (K-1)*d, then the
chomp, as locuslab's TemporalBlock) and nn.LSTM at the reference models' layer
shapes, forward + backward, on one GPU, with cudnn.benchmark on, and the conv
again with cudnn.deterministic on (what determinism costs PyTorch: pytorch
issue 28777). Same table layout as bench_cudnn, so the two print side by side.

    python3 tools/bench_torch_layers.py --device cuda --precision all
"""
import argparse
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--precision", default="all", choices=["fp32", "tf32", "bf16", "all"])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--batch_size", type=int, default=32)
    ap.add_argument("--seq_len", type=int, default=400)
    a = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        sys.exit(f"bench_torch_layers: error: PyTorch is not importable ({e})")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
    from torch_compat import set_tf32  # the TF32 switch of PyTorch 1.13 and 2.x alike
    if not torch.cuda.is_available():
        sys.exit("bench_torch_layers: error: no GPU visible to PyTorch")
    dev = torch.device(a.device)
    B, T, K = a.batch_size, a.seq_len, 3
    print(f"bench_torch_layers: PyTorch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"{torch.cuda.get_device_name(dev)}, batch {B} x {T}, mean of {a.reps} calls after a warm-up")

    def mean_ms(f):
        f()
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        for _ in range(a.reps):
            f()
        torch.cuda.synchronize(dev)
        return (time.perf_counter() - t0) * 1000 / a.reps

    def settings(prec, deterministic):
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.deterministic = deterministic
        set_tf32(prec == "tf32")

    precisions = ["fp32", "tf32", "bf16"] if a.precision == "all" else [a.precision]
    print("\n| layer | precision | PyTorch ms | PyTorch deterministic ms | deterministic / not |\n|---|---|---|---|---|")
    for prec in precisions:
        autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if prec == "bf16" else None
        for cin, cout, d in [(100, 450, 1), (450, 450, 1), (450, 450, 2), (450, 450, 4)]:
            conv = torch.nn.Conv1d(cin, cout, K, padding=(K - 1) * d, dilation=d).to(dev)
            x = torch.randn(B, cin, T, device=dev, requires_grad=True)
            g = torch.randn(B, cout, T, device=dev)

            def step():
                if autocast:
                    with autocast():
                        y = conv(x)[:, :, :T]
                else:
                    y = conv(x)[:, :, :T]
                y.backward(g)
                x.grad = None
                conv.zero_grad(set_to_none=True)

            times = []
            for det in (False, True):
                settings(prec, det)
                times.append(mean_ms(step))
            print(f"| conv1d {cin}->{cout} d{d} | {prec} | {times[0]:.3f} | {times[1]:.3f} | {times[1] / times[0]:.2f} |",
                  flush=True)
        lstm = torch.nn.LSTM(100, 700, batch_first=True).to(dev)
        x = torch.randn(B, T, 100, device=dev, requires_grad=True)
        g = torch.randn(B, T, 700, device=dev)

        def lstm_step():
            if autocast:
                with autocast():
                    y = lstm(x)[0]
            else:
                y = lstm(x)[0]
            y.backward(g.to(y.dtype))
            x.grad = None
            lstm.zero_grad(set_to_none=True)

        settings(prec, False)
        t = mean_ms(lstm_step)
        print(f"| LSTM 100->700 | {prec} | {t:.3f} | - | - |", flush=True)


if __name__ == "__main__":
    main()
