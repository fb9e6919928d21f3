#!/usr/bin/env python3
"""make bench-cifar's PyTorch peer: cifar_keras.py's model written in torch, trained in
eager mode on the CPU with torch's default threads on the same DIR/cifar.npz, with the
same optimizer, batch and epochs. Prints one JSON object.

  cifar_torch.py DIR EPOCHS STEPS
      samples/s and CPU time per sample of epochs 2..EPOCHS

Equivalent layer for layer: Conv2d without bias (padding 1: Keras's "same" for a 3x3
kernel), BatchNorm2d with Keras's epsilon 1e-3 and momentum (torch's 0.01 is Keras's
0.99), ReLU, MaxPool2d(2), the mean over H and W, Dropout(0.3), Linear(128, 10) to
logits. The images go to NCHW float in [0, 1] once, before training (the Keras model's
Rescaling), and each batch is gathered by index from a fresh shuffled order per pass, as
torch_peer.py does.
"""
import ast
import json
import os
import sys
import time
import warnings
import zipfile

# The venv has no numpy, which torch only mentions; nothing here converts to numpy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402
from torch import nn  # noqa: E402

BATCH = 64
LR, MOMENTUM = 0.01, 0.9  # cifar_keras.py's
FILTERS = (32, 32, "pool", 64, 64, "pool", 128)  # cifar_keras.py's


def npz_array(z, name):
    """Array `name` of an opened .npz of uint8 arrays as a torch tensor (the .npy header
    read without numpy: magic, version, header length, a dict literal)."""
    raw = z.read(name + ".npy")
    major = raw[6]
    hlen_size = 2 if major == 1 else 4
    hlen = int.from_bytes(raw[8:8 + hlen_size], "little")
    header = ast.literal_eval(raw[8 + hlen_size:8 + hlen_size + hlen].decode("latin1"))
    if header["descr"] != "|u1" or header["fortran_order"]:
        sys.exit("cifar_torch.py: %s: want C-ordered uint8, got %s" % (name, header))
    data = bytearray(raw[8 + hlen_size + hlen:])
    return torch.frombuffer(data, dtype=torch.uint8).reshape(header["shape"])


class SpatialMean(nn.Module):
    """GlobalAveragePooling2D: the mean over H and W of NCHW."""

    def forward(self, x):
        return x.mean(dim=(2, 3))


def build():
    stack, channels = [], 3
    for f in FILTERS:
        if f == "pool":
            stack.append(nn.MaxPool2d(2))
            continue
        stack += [nn.Conv2d(channels, f, 3, padding=1, bias=False),
                  nn.BatchNorm2d(f, eps=1e-3, momentum=0.01), nn.ReLU()]
        channels = f
    stack += [SpatialMean(), nn.Dropout(0.3), nn.Linear(channels, 10)]
    return nn.Sequential(*stack)


def throughput(data, epochs, steps):
    with zipfile.ZipFile(os.path.join(data, "cifar.npz")) as z:
        x = npz_array(z, "x_train").permute(0, 3, 1, 2).float().div(255.0).contiguous()
        y = npz_array(z, "y_train").long()
    torch.manual_seed(1)
    model = build()
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    loss_fn = nn.CrossEntropyLoss()
    per_pass = x.shape[0] // BATCH
    order, pos = None, per_pass
    wall, cpu = [], []
    for _ in range(epochs):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(steps):
            if pos == per_pass:  # a new pass over the training set, newly shuffled
                order, pos = torch.randperm(x.shape[0]), 0
            idx = order[pos * BATCH:(pos + 1) * BATCH]
            pos += 1
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
        loss.item()  # the last step's result, so that nothing is left pending
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    timed = steps * BATCH * (epochs - 1)
    return {"torch": torch.__version__, "threads": torch.get_num_threads(), "batch": BATCH,
            "epochs": epochs, "steps_per_epoch": steps, "epoch_seconds": wall,
            "epoch_cpu_seconds": cpu, "samples_per_sec": timed / sum(wall[1:]),
            "cpu_ms_per_sample": 1e3 * sum(cpu[1:]) / timed}


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: cifar_torch.py DIR EPOCHS STEPS")
    epochs, steps = int(sys.argv[2]), int(sys.argv[3])
    if epochs < 2 or steps < 1:
        sys.exit("cifar_torch.py: EPOCHS must be >= 2 (the first is not timed), STEPS >= 1")
    print(json.dumps(throughput(sys.argv[1], epochs, steps)))


if __name__ == "__main__":
    main()
