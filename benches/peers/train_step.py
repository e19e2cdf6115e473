"""PyTorch peer of benches/train.rs's anchor: one training step of an MLP 784-1024-1024-10 (ReLU,
plain SGD lr 0.01, cross-entropy) on a random batch of 256, in fp32 and under bf16 autocast.

    benches/peers/run.sh train --threads 2

Prints the median time per step over --steps steps after --warmup steps, for each mode. Needs
torch (run.sh installs it); reports/perf/train.md records its output beside
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
        for i in range(args.warmup + args.steps):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=(mode != "fp32")):
                loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            if i >= args.warmup:
                times.append(time.perf_counter() - t0)
        print(f"{mode}: median {statistics.median(times) * 1e3:.2f} ms per step")


if __name__ == "__main__":
    main()
