"""SIGTERM (a cluster's preemption signal) saves the training state like Ctrl-C: a real
`catsim llm sft` process is terminated mid-run, reports it on one line (exit 143), and the rerun
resumes from the saved step and finishes."""

import json
import os
import signal
import subprocess
import sys
import time


def test_sigterm_saves_sft_state_and_the_rerun_resumes(tmp_path):
    out = tmp_path / "sft"
    cmd = [sys.executable, "-m", "catsim", "llm", "sft", "--task", "maze", "--out", str(out), "--steps", "4000",
           "--hidden", "16", "--layers", "1", "--heads", "2", "--batch-size", "4", "--save-every", "100000",
           "--eval-prompts", "0", "--no-progress"]
    env = {**os.environ, "CATSIM_NO_COMPILE_CACHE": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    log = out / "train_log.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if log.is_file() and len(log.read_text().splitlines()) >= 5:
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "terminated (SIGTERM)" in err and "Traceback" not in err
    steps = [json.loads(line)["step"] for line in log.read_text().splitlines()]
    saved = sorted(int(p.name) for p in (out / "train_state").iterdir() if p.name.isdigit())
    assert saved and saved[-1] == steps[-1] >= 5  # the state of the last logged step was saved
    # the rerun resumes there (no step logged twice) and stops where asked
    done = subprocess.run(cmd[:-1] + ["--stop-after", str(steps[-1] + 3)], capture_output=True, text=True,
                          env=env, timeout=240)
    assert done.returncode == 0, done.stderr
    again = [json.loads(line)["step"] for line in log.read_text().splitlines()]
    assert again == list(range(1, steps[-1] + 4))
