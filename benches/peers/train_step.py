"""PyTorch peer of benches/train.rs's anchor: one training step of an MLP 784-1024-1024-10 (ReLU,
plain SGD lr 0.01, cross-entropy) on a random batch of 256, in fp32 and under bf16 autocast.

    benches/peers/run.sh train --threads 2

Prints the median time per step over --steps steps after --warmup steps, for each mode. A mode
whose steps are slow (bf16 autocast on a CPU without AVX-512 BF16 takes over a second a step)
stops warming up after 2 s and measuring after --max-seconds, with at least 5 steps measured. Needs
torch (run.sh takes it from scripts/python-env); reports/perf/train.md records its output beside
`cargo bench --bench train` measured in the same session, in interleaved rounds.
"""

import argparse
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--max-seconds", type=float, default=10.0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.rand(256, 784)
    y = torch.randint(0, 10, (256,))
    loss_fn = torch.nn.CrossEntropyLoss()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for mode in ["fp32", "bf16-autocast"]:
        times = []
        start = time.perf_counter()
        warmup = args.warmup
        for i in range(args.warmup + args.steps):
            spent = time.perf_counter() - start
            if i < warmup and i > 0 and spent > 2.0:
                warmup = i
            if len(times) >= 5 and spent > args.max_seconds:
                break
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=(mode != "fp32")):
                loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        print(f"{mode}: median {statistics.median(times) * 1e3:.2f} ms per step ({len(times)} steps)")


if __name__ == "__main__":
    main()
