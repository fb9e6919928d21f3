#!/usr/bin/env python3
"""The PyTorch CPU peer of the trainer benchmark (make bench-trainer), beside tf_peer.py:
tutorial-cnn (Conv2D(32,3,relu) -> Flatten -> Dense(128,relu) -> Dense(10), from
logits), SGD lr 0.001, batch 64, on the CPU with torch's default threads, reading the
same Debian Fashion-MNIST files. Each pass over the training set draws a fresh shuffled
order and gathers each batch by index (kubetrain-trainer, too, copies a batch's samples
out of a shuffled stream; torch's DataLoader would collate sample by sample in Python,
a cost that is not the training step's). Prints one JSON object.

  torch_peer.py throughput DATA_DIR [EPOCHS STEPS]
      EPOCHS (3) x STEPS (70) steps; samples/s and CPU time per sample of epochs 2..EPOCHS

Also the model and data loading of torch_gpu_peer.py (make bench-gpu).
"""
import gzip
import json
import os
import resource
import sys
import time
import warnings

# The venv has no numpy, which torch only mentions; nothing here converts to numpy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402
from torch import nn  # noqa: E402

BATCH = 64


def read_idx(path, offset):
    """The bytes of an IDX file (raw or .gz) after its header, as a uint8 tensor."""
    with gzip.open(path + ".gz", "rb") if os.path.exists(path + ".gz") else open(path, "rb") as f:
        data = f.read()
    return torch.frombuffer(bytearray(data[offset:]), dtype=torch.uint8)


def load(data_dir, prefix):
    """Images as (n, 784) uint8 and labels as int64 (no numpy: the torch venv has none)."""
    x = read_idx(os.path.join(data_dir, prefix + "-images-idx3-ubyte"), 16).reshape(-1, 28 * 28)
    y = read_idx(os.path.join(data_dir, prefix + "-labels-idx1-ubyte"), 8).long()
    return x, y


def tutorial_cnn():
    """tutorial-cnn on (n, 784) inputs in [0, 1]; its outputs are logits."""
    return nn.Sequential(nn.Unflatten(1, (1, 28, 28)), nn.Conv2d(1, 32, 3), nn.ReLU(),
                         nn.Flatten(), nn.Linear(26 * 26 * 32, 128), nn.ReLU(),
                         nn.Linear(128, 10))


def throughput(data_dir, epochs, steps):
    x, y = load(data_dir, "train")
    x = x.float() / 255.0
    torch.manual_seed(1)
    model = tutorial_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
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
            xb, yb = x[idx], y[idx]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
        loss.item()  # the last step's result, so that nothing is left pending
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    timed = steps * BATCH * (epochs - 1)
    return {"torch": torch.__version__, "mode": "throughput", "batch": BATCH,
            "epochs": epochs, "steps_per_epoch": steps, "threads": torch.get_num_threads(),
            "epoch_seconds": wall, "epoch_cpu_seconds": cpu,
            "samples_per_sec": timed / sum(wall[1:]),
            "cpu_ms_per_sample": 1e3 * sum(cpu[1:]) / timed,
            "last_loss": loss.item()}


def main():
    if len(sys.argv) not in (3, 5) or sys.argv[1] != "throughput":
        sys.exit("usage: torch_peer.py throughput DATA_DIR [EPOCHS STEPS]")
    epochs, steps = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) == 5 else (3, 70)
    if epochs < 2 or steps < 1:
        sys.exit("torch_peer.py: EPOCHS must be >= 2 (the first is not timed), STEPS >= 1")
    out = throughput(sys.argv[2], epochs, steps)
    out["max_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps(out))


if __name__ == "__main__":
    main()
