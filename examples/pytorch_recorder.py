"""Records a small transformer trained with automatic mixed precision and a GradScaler, then
renders the run's report.

    pip install ./python torch
    cargo build --release
    python examples/pytorch_recorder.py runs/pytorch      # then open runs/pytorch-report/index.html

Runs on the CPU (autocast in float16, GradScaler on the CPU); on a machine with CUDA it trains
there instead, and the recorder forms its histograms on the GPU.
"""

import argparse
import pathlib
import shutil
import subprocess
import sys

import torch

from mixprec.torch import Recorder


class TinyTransformer(torch.nn.Module):
    """Classifies token sequences by whether their mean token id is above the middle of the
    vocabulary: embedding, two encoder layers, mean pooling, a linear head."""

    def __init__(self, vocab=64, d=64, heads=4, layers=2):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        layer = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d, 2)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)).mean(dim=1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=pathlib.Path, help="the run directory to write (new)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--every", type=int, default=50, help="capture every N steps")
    parser.add_argument("--mixprec", default="target/release/mixprec", help="the mixprec binary")
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = TinyTransformer().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    # A high initial scale, as GradScaler's default 2^16 is for large models: the first steps
    # overflow and are skipped while the scaler backs off, which the report shows.
    scaler = torch.amp.GradScaler(device, init_scale=2.0**24)
    g = torch.Generator(device="cpu").manual_seed(1)

    with Recorder(model, out=args.out, format="fp16", every=args.every, optimizer=opt,
                  scaler=scaler) as rec:
        for step in range(args.steps):
            x = torch.randint(0, 64, (32, 16), generator=g).to(device)
            y = (x.float().mean(dim=1) > 31.5).long()
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device, dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            rec.step(loss)  # after scaler.step, before scaler.update
            scaler.update()
            if step % 50 == 0:
                print(f"step {step:4d}  loss {loss.item():.4f}  scale {scaler.get_scale():g}")

    page = args.out.with_name(args.out.name + "-report")
    mixprec = shutil.which(args.mixprec) or args.mixprec
    done = subprocess.run([mixprec, "report", str(args.out), "--out", str(page)])
    if done.returncode == 0:
        print(f"report: {page / 'index.html'}")
    sys.exit(done.returncode)


if __name__ == "__main__":
    main()
