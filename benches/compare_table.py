#!/usr/bin/env python3
"""Markdown tables of benches/compare.sh's measurements, against the goals of issue 11.

Usage: benches/compare_table.py RESULTS.tsv ANALYZE_MIB CAPTURE_STEPS [PROFILES_DIR]
       benches/compare_table.py RESULTS.tsv ANALYZE_MIB CAPTURE_STEPS PROFILES_DIR --splice TABLE.md NOTE

The second form (`compare.sh --only analyze`) prints TABLE.md with section (b) and the analyze
profiles of (e) replaced by this run's, NOTE (the run's date, load and commit) heading (b).

RESULTS.tsv: one measurement a line: section, name, round, value (milliseconds for criterion and
the peers; "wall_s cpu_s peak_rss_kib" for the timed commands; "ratio a_ms b_ms" for the
alternating pairs of `benches/train.rs --pairs`). Every ratio is formed within a round (both
sides measured minutes apart, or step by step for the pairs) and the table gives its median over
the rounds, with the range; times are medians over the rounds. PROFILES_DIR holds ID.what (a description) and ID.txt
(`perf report --stdio --no-children --sort symbol -q`) for each profile.
"""
import collections
import contextlib
import io
import os
import statistics
import sys


def load(path):
    data = collections.defaultdict(dict)
    for line in open(path):
        section, name, rnd, value = line.rstrip("\n").split("\t")
        nums = [float(v) for v in value.split()]
        data[section, name][int(rnd)] = nums if len(nums) > 1 else nums[0]
    return data


def spread(values, fmt="{:.2f}"):
    values = list(values)
    if not values:
        return "n/a"
    med = fmt.format(statistics.median(values))
    if len(values) == 1:
        return med
    return f"{med} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def ratios(a, b, pick=lambda v: v):
    """Per-round ratios a/b over the rounds both were measured in."""
    return [pick(a[r]) / pick(b[r]) for r in sorted(a) if r in b and pick(b[r]) > 0]


def verdict(values, limit, under=False):
    """Whether the median is at most `limit` (below it with `under`)."""
    if not values:
        return "n/a"
    m = statistics.median(values)
    return "met" if (m < limit if under else m <= limit) else "**missed**"


def rounding(d):
    print("## (a) Rounding 16M gradient-like f32 in place, one thread\n")
    print("Log-uniform magnitudes over 2^-30..2^10, both signs. mixprec: `benches/round.rs`")
    print("(criterion median); peers: `benches/peers/quantize_peers.py` (best of 3, a round trip")
    print("to the format and back to f32, into new arrays). Ratios to a plain copy of the same")
    print("buffer by the same tool in the same round; goal: 1.25x for nearest-even, 2x for")
    print("stochastic rounding.\n")
    print("| case | ms, median (range) | x plain copy | goal |")
    print("|---|---:|---:|---|")
    copy = d.get(("round", "mixprec plain copy"), {})
    print(f"| mixprec plain copy | {spread(copy.values())} | 1.00 | |")
    ours = sorted(k[1] for k in d if k[0] == "round" and k[1] != "mixprec plain copy")
    for name in ours:
        r = ratios(d["round", name], copy)
        limit = 1.25 if name.endswith("nearest-even") else 2.0
        print(f"| {name} | {spread(d['round', name].values())} | {spread(r)} | "
              f"{verdict(r, limit)} ({limit}x) |")
    print()
    print("| peer | ms, median (range) | x its plain copy | x mixprec, same format, nearest-even |")
    print("|---|---:|---:|---:|")
    peers = [k[1] for k in d if k[0] == "round-peer"]
    pcopy = d.get(("round-peer", "plain copy (np.copyto)"), {})
    for name in peers:
        fmt = next((f for f in ["fp16", "bf16", "fp8-e4m3", "fp8-e5m2"] if f in name), None)
        ours_same = d.get(("round", f"mixprec {fmt}/nearest-even"), {})
        vs_ours = ratios(d["round-peer", name], ours_same) if fmt else []
        print(f"| {name} | {spread(d['round-peer', name].values(), '{:.1f}')} | "
              f"{spread(ratios(d['round-peer', name], pcopy))} | {spread(vs_ours, '{:.1f}')} |")
    print()


def analyze(d, mib):
    print(f"## (b) `mixprec analyze` of a {mib} MiB f32 safetensors file\n")
    print("Four tensors of log-uniform magnitudes over 2^-30..2^10, both signs, read from the page")
    print("cache (the file is read once before); `analyze FILE` prints every default output")
    print("(to /dev/null). `/usr/bin/time`: wall, user + system CPU, peak resident memory. Goals")
    print("(issue 28): within 3x of reading the file on one thread, 2x on two.\n")
    print("| command | wall s | CPU s | peak RSS MB | wall x cat | CPU x cat | goal (wall) |")
    print("|---|---:|---:|---:|---:|---:|---|")
    cat = d.get(("analyze", "cat FILE > /dev/null"), {})
    for (section, name), runs in d.items():
        if section != "analyze":
            continue
        wall = ratios(runs, cat, lambda v: v[0])
        cpu = ratios(runs, cat, lambda v: max(v[1], 0.01))
        is_cat = runs is cat
        print(f"| `{name}` | {spread([v[0] for v in runs.values()])} | "
              f"{spread([v[1] for v in runs.values()])} | "
              f"{spread([v[2] / 1024 for v in runs.values()], '{:.0f}')} | "
              f"{'1' if is_cat else spread(wall, '{:.1f}')} | {'1' if is_cat else spread(cpu, '{:.1f}')} | "
              f"{'' if is_cat else verdict(wall, 3.0 if '1 thread' in name else 2.0)} |")
    print()


def pair(d, threads, name):
    """The `--pairs` comparison's rounds: (median ratio of the pairs, ms of side a, ms of side b)."""
    return d.get(("pairs", f"{threads}:{name}"), {})


def train(d):
    print("## (c) The anchor training step (MLP 784-1024-1024-10, batch 256, SGD, cross-entropy)\n")
    print("`benches/train_vs_pytorch.sh THREADS 1` each round: our criterion median (fp32, then")
    print("fp16-dynamic) and `benches/peers/train_step.py` (median of up to 60 steps), ms per step.")
    print("Our fp16-dynamic step over our fp32 step: `benches/train.rs --pairs 30`, the two steps")
    print("alternating, the median of the 30 pairs' ratios in each round. Goals: our fp32 step no")
    print("slower than PyTorch's with the same threads; our fp16-dynamic step within 1.3x of our")
    print("fp32 step.\n")
    print("| threads | mixprec fp32 | PyTorch fp32 | ours / PyTorch | PyTorch bf16 autocast | "
          "mixprec fp16-dynamic | fp16-dynamic / fp32, in pairs |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for threads in ["1", "2"]:
        get = lambda name: d.get(("train", f"{threads}:{name}"), {})
        ours, torch, ours16 = get("mixprec fp32"), get("PyTorch fp32"), get("mixprec fp16-dynamic")
        vs_torch = ratios(ours, torch)
        vs_fp32 = [v[0] for v in pair(d, threads, "fp16-dynamic/fp32").values()]
        print(f"| {threads} | {spread(ours.values())} | {spread(torch.values())} | "
              f"{spread(vs_torch)}: {verdict(vs_torch, 1.0)} | "
              f"{spread(get('PyTorch bf16 autocast').values())} | {spread(ours16.values())} | "
              f"{spread(vs_fp32)}: {verdict(vs_fp32, 1.3)} |")
    print()


def capture(d, steps):
    print("## (d) Capture cost\n")
    print("The anchor step alone and with a capture (every storage point's histogram), alternating")
    print("(`benches/train.rs --pairs 30`: ms are the medians of each side's steps, the ratio the")
    print("median of the pairs' ratios, each round); a capture every 100 steps then costs")
    print("(ratio - 1) / 100 of a run. Goals: a capture every step under 1.5x a step, the default")
    print("cadence (every 100 steps) under 2% of a run.\n")
    print("| recipe | threads | step | step with a capture | ratio (goal 1.5x) | every 100 steps (goal 2%) |")
    print("|---|---:|---:|---:|---:|---:|")
    for recipe in ["fp32", "fp16-dynamic"]:
        for threads in ["1", "2"]:
            rounds = pair(d, threads, f"{recipe}+capture/{recipe}").values()
            r = [v[0] for v in rounds]
            per100 = [(x - 1) / 100 for x in r]
            print(f"| {recipe} | {threads} | {spread(v[1] for v in rounds)} | "
                  f"{spread(v[2] for v in rounds)} | {spread(r)}: {verdict(r, 1.5, True)} | "
                  f"{spread(per100, '{:.2%}')}: {verdict(per100, 0.02, True)} |")
    print()
    print(f"Whole runs: `mixprec train` of the anchor (fp16-dynamic, {steps} steps, random data of")
    print("784 features, one thread) with `--capture-every 0`, `100` and `1` (a run captures step 1")
    print("and every N-th step), wall and CPU time of the whole process (start-up, data loading,")
    print("the final evaluation and writing the run directory included).\n")
    print("| --capture-every | wall s | CPU s | wall x no capture | CPU x no capture |")
    print("|---:|---:|---:|---:|---:|")
    none = d.get(("capture-run", "0"), {})
    for every in ["0", "100", "1"]:
        runs = d.get(("capture-run", every), {})
        print(f"| {every} | {spread([v[0] for v in runs.values()])} | "
              f"{spread([v[1] for v in runs.values()])} | "
              f"{spread(ratios(runs, none, lambda v: v[0]), '{:.3f}')} | "
              f"{spread(ratios(runs, none, lambda v: v[1]), '{:.3f}')} |")
    print()


def profiles(folder):
    ids = sorted(f[:-5] for f in os.listdir(folder) if f.endswith(".what")) if folder else []
    print("## (e) Profiles\n")
    if not ids:
        print("No profiles: `perf` is not installed (Debian: linux-perf) or could not record.\n")
        return
    print("Where each comparison's time goes: `perf record -F 999` of the whole process (every")
    print("thread; on a virtual machine without hardware counters, the cpu-clock timer), self time")
    print("by symbol, symbols of at least 1.5% of the samples. `[k]` is the kernel (page faults:")
    print("`clear_page*`; reads: `*copy_to*`); the benches' setup (making the data) is sampled too.\n")
    for i in ids:
        what = open(os.path.join(folder, i + ".what")).read().strip()
        rows = []
        for line in open(os.path.join(folder, i + ".txt")):
            parts = line.split()
            if len(parts) < 3 or not parts[0].endswith("%"):
                continue
            symbol = " ".join(p for p in parts[2:] if p != "-")
            if len(symbol) > 100:
                symbol = symbol[:97] + "..."
            rows.append((parts[0], parts[1], symbol.replace("|", "\\|").replace("`", "'")))
        print(f"**{what}**\n")
        print("| share | | symbol |")
        print("|---:|---|---|")
        for share, where, symbol in rows:
            print(f"| {share} | {where} | `{symbol}` |")
        print()


def splice(table, note, analyze_section, analyze_profiles):
    """`table` with its section (b) replaced by `analyze_section` (headed by `note`) and, in (e),
    its blocks of `mixprec analyze` profiles by `analyze_profiles`."""
    sections = collections.OrderedDict()
    key = "head"
    for line in open(table).read().splitlines(keepends=True):
        if line.startswith("## ("):
            key = line[4]
        sections[key] = sections.get(key, "") + line
    title, _, body = analyze_section.partition("\n\n")
    sections["b"] = f"{title}\n\n{note}\n\n{body}"
    if "e" in sections:
        head, *blocks = sections["e"].rstrip("\n").split("\n\n**")
        new = analyze_profiles.rstrip("\n").split("\n\n**")[1:]
        old = [i for i, b in enumerate(blocks) if b.startswith("`mixprec analyze`")]
        at = old[0] if old else len(blocks)
        blocks = [b for i, b in enumerate(blocks) if i not in old]
        sections["e"] = "\n\n**".join([head] + blocks[:at] + new + blocks[at:]) + "\n"
    sys.stdout.write("".join(sections.values()))


def main():
    d = load(sys.argv[1])
    if "--splice" in sys.argv:
        at = sys.argv.index("--splice")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            analyze(d, sys.argv[2])
        section = out.getvalue()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            profiles(sys.argv[4])
        splice(sys.argv[at + 1], sys.argv[at + 2], section, out.getvalue())
        return
    rounding(d)
    analyze(d, sys.argv[2])
    train(d)
    capture(d, sys.argv[3])
    profiles(sys.argv[4] if len(sys.argv) > 4 else None)


if __name__ == "__main__":
    main()
