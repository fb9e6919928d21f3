#!/usr/bin/env python3
"""The PyTorch peer of make bench-gpu: tutorial-cnn (Conv2D(32,3,relu) -> Flatten ->
Dense(128,relu) -> Dense(10), from logits), SGD lr 0.001, on one CUDA device, batches of
Fashion-MNIST taken in a shuffled order from pinned host memory and copied per step, as
kubetrain-trainer does. Prints one JSON object: samples/s over the timed steps. The model
and the data loading are torch_peer.py's (the CPU peer of make bench-trainer).

  torch_gpu_peer.py DATA_DIR BATCH WARMUP_STEPS TIMED_STEPS eager|compile
"""
import json
import sys
import time

import torch
from torch_peer import load, tutorial_cnn  # trainer/bench/torch_peer.py, beside this script


def main():
    data_dir, batch, warmup, timed, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
        int(sys.argv[4]), sys.argv[5]
    x, y = load(data_dir, "train")
    g = torch.Generator().manual_seed(1)
    order = torch.randperm(x.shape[0], generator=g)
    x = (x[order].float() / 255.0).pin_memory()
    y = y[order].pin_memory()
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False  # kubetrain computes in FP32
    torch.backends.cudnn.allow_tf32 = False
    model = tutorial_cnn().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(xb, yb):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    if mode == "compile":
        step = torch.compile(step)
    n = x.shape[0] // batch

    def run(steps, start):
        for i in range(start, start + steps):
            j = i % n
            xb = x[j * batch:(j + 1) * batch].to(dev, non_blocking=True)
            yb = y[j * batch:(j + 1) * batch].to(dev, non_blocking=True)
            step(xb, yb)

    run(warmup, 0)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    run(timed, warmup)
    torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    print(json.dumps({"mode": mode, "batch": batch, "steps": timed, "seconds": secs,
                      "samples_per_sec": timed * batch / secs,
                      "torch": torch.__version__, "cuda": torch.version.cuda,
                      "cudnn": torch.backends.cudnn.version(),
                      "device": torch.cuda.get_device_name(0)}))


if __name__ == "__main__":
    main()
