"""math-verify scoring of one batch: the batch path (`MathFileTask.rewards`: exact matches
in-process, a pool of workers, one time budget per batch) against the one-at-a-time path it
replaced (one isolated worker, `math_verify_match` per completion, each with the hard deadline
3 × timeout + 2 s), side by side in one process on the same completions.

Two workloads: ordinary answers that need math-verify (equal values written differently), and
hostile ones (LaTeX power towers and deep nesting that run into the per-check deadline). Reported:
wall seconds of each path, the ratio one-at-a-time / batch, and the batch's unverified count.
Worker start-up and math-verify's import are excluded from both (a warm-up call first), as in
the RL steps after the first.

    python benchmarks/bench_verify_batch.py --normal 64 --hostile 8 --timeout 1 --budget 5
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from catsim.llm.tasks import make_task, math_file
from catsim.llm.tasks.isolated import IsolatedFunction

NORMAL = ["$0.75$", "\\boxed{\\frac{6}{8}}", "It is 3/4", "\\boxed{0.750}", "\\boxed{0.8}", "$\\frac{3}{5}$"]
HOSTILE = ["\\boxed{9^{9^{9^{9^{9}}}}}", "\\boxed{" + "(" * 2000 + "1" + ")" * 2000 + "}",
           "$" + "\\frac{1}{" * 300 + "2" + "}" * 300 + "$"]


def one_at_a_time(task, prompt, texts) -> tuple[list[float], float]:
    cfg = task.config
    fn = IsolatedFunction(math_file.MATH_VERIFY_TARGET, deadline=3 * cfg.timeout_seconds + 2.0)
    fn.start()
    try:
        gold = math_file._as_latex(prompt.answers[0])
        fn.call(gold, NORMAL[0], cfg.timeout_seconds)  # warm: math-verify is imported on first use
        t0 = time.perf_counter()
        scores = [1.0 if fn.call(gold, t, cfg.timeout_seconds) is True else 0.0 for t in texts]
        return scores, time.perf_counter() - t0
    finally:
        fn.close()


def batched(task, prompt, texts) -> tuple[list[float], float, int]:
    warm = [NORMAL[0]] * (4 * task.config.verify_workers)  # every worker imports math-verify
    task.rewards([prompt] * len(warm), warm)
    task.take_unscored()
    t0 = time.perf_counter()
    scores = task.rewards([prompt] * len(texts), texts)
    return scores, time.perf_counter() - t0, task.take_unscored()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--normal", type=int, default=64, help="ordinary completions (default 64)")
    ap.add_argument("--hostile", type=int, default=8, help="hostile completions (default 8)")
    ap.add_argument("--timeout", type=int, default=1, help="math-verify timeout_seconds (default 1)")
    ap.add_argument("--budget", type=float, default=5.0, help="batch_budget_seconds (default 5)")
    ap.add_argument("--workers", type=int, default=2, help="verify_workers (default 2)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "m.jsonl"
        data.write_text(json.dumps({"question": "3/4 as a decimal?", "answer": "\\frac{3}{4}"}) + "\n")
        task = make_task("math", path=str(data), heldout_fraction=0.0, timeout_seconds=args.timeout,
                         batch_budget_seconds=args.budget, verify_workers=args.workers)
        prompt = task.prompt("train", 0, 0)
        rows = []
        for name, count, pool in (("normal", args.normal, NORMAL), ("hostile", args.hostile, HOSTILE)):
            if count < 1:
                continue
            texts = [pool[i % len(pool)] for i in range(count)]
            base_scores, base_s = one_at_a_time(task, prompt, texts)
            new_scores, new_s, unverified = batched(task, prompt, texts)
            agree = sum(a == b for a, b in zip(base_scores, new_scores))
            rows.append((name, count, base_s, new_s, base_s / new_s, unverified, agree))
    print(f"workers {args.workers}, timeout_seconds {args.timeout} (deadline {3 * args.timeout + 2} s per "
          f"check), budget {args.budget:g} s per batch")
    print(f"{'workload':<9} {'count':>5} {'one-at-a-time s':>16} {'batch s':>8} {'ratio':>6} "
          f"{'unverified':>10} {'same score':>10}")
    for name, count, base_s, new_s, ratio, unverified, agree in rows:
        print(f"{name:<9} {count:>5} {base_s:>16.2f} {new_s:>8.2f} {ratio:>6.2f} {unverified:>10} {agree:>5}/{count}")


if __name__ == "__main__":
    main()
