"""PyTorch gloo all-reduce on loopback: the peer that bench-allreduce measures the
ring against. Spawns N CPU processes, all-reduces float32 tensors of the given byte
sizes, and prints one JSON object per size on stdout:
  {"size": bytes, "seconds": best time of one all-reduce (max over ranks)}

usage: allreduce_gloo.py WORLD REPEATS SIZE [SIZE ...]
"""
import json
import os
import socket
import sys
import time
import warnings

warnings.filterwarnings("ignore")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def iterations(size):
    """The same rule as the C driver: about 256 MiB of buffer per timed loop."""
    return max(5, min(1000, (256 << 20) // size))


def worker(rank, world, port, repeats, sizes, queue):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world)
    for size in sizes:
        n = size // 4
        x = torch.ones(n, dtype=torch.float32)
        iters = iterations(size)
        for _ in range(2):  # warm-up
            dist.all_reduce(x)
        best = float("inf")
        for _ in range(repeats):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(x)
            t = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            best = min(best, t.item())
        if rank == 0:
            queue.put({"size": size, "seconds": best})
    dist.destroy_process_group()


def main():
    world, repeats = int(sys.argv[1]), int(sys.argv[2])
    sizes = [int(s) for s in sys.argv[3:]]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, world, port, repeats, sizes, queue))
             for r in range(world)]
    for p in procs:
        p.start()
    for _ in sizes:
        print(json.dumps(queue.get(timeout=600)), flush=True)
    for p in procs:
        p.join()
        if p.exitcode != 0:
            sys.exit(f"gloo rank exited {p.exitcode}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
