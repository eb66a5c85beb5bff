"""Every shell command and Python snippet of README.md, docs/*.md and notebooks/README.md, run as
the page writes it.

How a page is read (docs/index.md repeats this for contributors):

* Fences. ```bash / ```sh / ```shell / ```console blocks hold commands; ```python blocks run
  (found by pytest-examples' `find_examples`, run by its `eval_example`); ```text blocks are output
  or listings and are not run. A fence with no tag, or another tag, fails `test_every_fence_is_tagged`.
* Commands. Each logical line of a shell block is one command (in ```console, each line after a
  `$ ` prompt; the other lines are output): a trailing `\\` joins the next
  line, `#` starts a comment (a line that is only a comment is skipped), `&&` chains commands,
  and `NAME=value` words before the program are its environment. `catsim …` and `python -m catsim …`
  run in this process (`catsim.cli.main.main`); anything else runs in bash. Each must exit 0
  without a deprecation line (a page uses today's flag spellings).
* One folder per page. A page's commands and snippets run in order, in one fresh folder holding a
  copy of those of the repository's figures/, benchmarks/ and notebooks/ that the page names, so a
  path a page uses must exist there or be made by an earlier command of the same page.
* `# long`. A command whose trailing comment starts with the word `long` (`cmd   # long`,
  `cmd   # long: ~6 min`) runs with the flags of SMALLER[command] appended (argparse keeps the
  last value of a repeated flag). A Python line ending in such a comment is replaced by
  SMALLER[line]. A `# long` command without an entry fails, and so does an entry that names no
  command of any page.
* SKIPPED[command, or any line of a snippet] = why it cannot run here (it installs packages, needs a
  GPU or a cluster, names the authors' folders, or another test runs it as written).
  A key ending in " …" names every command that starts with the rest of it. `test_skipped_table`
  prints the table; an entry that names nothing in the docs fails. A skipped command's tests/,
  benchmarks/, figures/ and notebooks/ paths must still exist.
* docs/index.md links every page of docs/ (`test_index_lists_every_page`).

Tables are keyed by the command as the page writes it, whitespace collapsed, comment dropped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest_examples = pytest.importorskip("pytest_examples", reason="the 'dev' extra (pytest-examples) is absent")

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS, ROOT / "notebooks" / "README.md"]
SHELL_TAGS = {"bash", "sh", "shell", "console"}
PYTHON_TAGS = {"python", "py"}
TEXT_TAGS = {"text"}
DEPRECATED = "is deprecated; use"  # the line a hidden old flag spelling prints (catsim.cli.vocabulary)
COPIED = ("figures", "benchmarks", "notebooks")  # committed inputs a page may read; copied, so runs cannot touch them

# A tiny warm-up: the model size, steps and evaluation every `catsim llm sft … # long` runs with.
TINY_SFT = ("--steps 4 --batch-size 4 --warmup-steps 1 --hidden 16 --layers 1 --heads 2 "
            "--n-heldout 8 --eval-prompts 2 --eval-samples 0 --no-progress")
PIPELINE = ("--quick --tasks paths --runs grpo:2 --seeds 0 --rl-steps 2 --rollouts-per-step 4 --eval-samples 4 "
            "--eval-prompts 4")
TINY_RL = ("--steps 2 --prompts-per-step 2 --group-size 2 --max-new-tokens 8 "
           "--heldout-every 0 --no-progress")

SMALLER: dict[str, str] = {
    # docs/which-rule.md: the screen at N = 8, a few steps of every rule
    "catsim sweep --study methods --group-size 8 --seeds 4 --out runs/screen":
        "--num-actions 64 --num-correct 8 --steps 4 --log-every 1 --seeds 1 --no-progress",
    # README.md's tour and the commands around it
    "catsim reproduce --quick": "--skip mass,verify,sim,llm",
    "catsim llm rl --base figures/maze-study/cpu/s0/base --out runs/tour/grpo --method grpo --steps 400 "
    "--prompts-per-step 32 --warmup-steps 2 --save-every 50": TINY_RL + " --warmup-steps 1",
    "catsim llm rl --base figures/maze-study/cpu/s0/base --out runs/tour/f-grpo --method f-grpo --gamma 1 "
    "--steps 400 --prompts-per-step 32 --warmup-steps 2 --save-every 50": TINY_RL + " --warmup-steps 1",
    "catsim llm eval runs/tour/grpo/model runs/tour/f-grpo/model figures/maze-study/cpu/s0/base --samples 64 "
    "--k 1,8,64 --test --save runs/tour/eval.json": "--samples 4 --k 1,4 --prompts 4",
    # the simulator: fewer steps, seeds and group sizes
    "catsim simulate --group-size 2,256,131072 --gamma 0,1 --seeds 4 --format json":
        "--group-size 2,256 --seeds 1 --steps 20",
    "catsim sweep": "--group-size 2,32 --seeds 1 --steps 20",
    "catsim sweep --scenario paper-literal": "--group-size 2,32 --seeds 1 --steps 20",
    "catsim sweep --scenario brorl": "--group-size 4,8 --seeds 1 --steps 20",
    "catsim sweep --scenario paper-literal --group-size 2,32,256,8192,131072 --seeds 1 --log-every 50 "
    "--out runs/app-j/literal": "--group-size 2,32 --steps 50",
    "catsim sweep --scenario paper-adam-linear --group-size 2,32,256,8192,131072 --seeds 1 --log-every 50 "
    "--out runs/app-j/adam-linear": "--group-size 2,32 --steps 50",
    "catsim sweep --scenario paper --group-size 2,32,256,8192,131072 --seeds 1 --log-every 50 "
    "--out runs/app-j/paper": "--group-size 2,32 --steps 50",
    "catsim sweep --study horizons --out runs/horizons": "--group-size 8 --seeds 1 --steps 20",
    'res = simulate(scenario("paper"), group_sizes=[2, 256, 131072], gammas=[0, 1], seeds=4)':
        'res = simulate(__import__("dataclasses").replace(scenario("paper"), steps=20), '
        "group_sizes=[2, 256], gammas=[0, 1], seeds=1)",
    "PYTHONPATH=. python benchmarks/bench_vs_jax_loop.py": "--cells 8:20",
    # the trainer: a tiny warm-up, two RL steps, a few samples
    "PYTHONPATH=. python -m catsim llm sft --task maze --out runs/maze7": TINY_SFT,
    "catsim llm sft --task maze --out runs/base": TINY_SFT,
    "catsim llm sft --task paths --out runs/warmup": TINY_SFT,
    "catsim llm sft --task paths --out runs/paths-sft": TINY_SFT,
    "catsim llm sft --task maze --size 17 --steps 1500 --batch-size 32 --lr 5e-4 --schedule constant "
    "--hidden 256 --layers 4 --heads 8 --out runs/maze17-paper": TINY_SFT + " --size 5",
    "catsim llm rl --base runs/base --out runs/grpo --method grpo --group-size 8": TINY_RL,
    "catsim llm sft --task paths --out runs/sft --log-to tensorboard": TINY_SFT,
    "catsim llm rl --base runs/sft --out runs/rl --log-to tensorboard,wandb": TINY_RL,
    'run_rl("runs/base", "runs/fgrpo", cfg)':
        'run_rl("runs/base", "runs/fgrpo", cfg.replace(steps=2, prompts_per_step=2, group_size=2, '
        "max_new_tokens=8, heldout_every=0), progress=False)",
    "catsim llm eval runs/base runs/grpo/model runs/fgrpo/model --samples 64 --k 1,4,16,64 --base runs/base "
    "--test --ledger --save eval.json": "--samples 4 --k 1,4 --prompts 4 --rare-prompts 2 --rare-samples 4",
    "catsim llm pipeline --out runs/pipeline": PIPELINE,
    "catsim llm pipeline --out runs/p --tasks maze --base-model maze=runs/base "
    "--runs grpo:8,f-grpo:8,grpo-lowlr:8 --seeds 0,1,2": "--quick --runs grpo:2,f-grpo:2 --seeds 0 --rl-steps 2 "
                                                          "--rollouts-per-step 4 --eval-samples 4 --eval-prompts 4",
    "catsim llm advise --model runs/warmup --task paths --samples 64 --group-size 2,4,8,16,32,64":
        "--samples 4 --prompts 4 --group-size 2,4",
    "catsim llm advise --model runs/warmup --rare tail:0.2 --format json > advice.json": "--samples 4 --prompts 4",
    "XLA_FLAGS=--xla_force_host_platform_device_count=8 python benchmarks/plan_recipes.py":
        "--models Qwen2.5-0.5B --meshes 1x8 --batch 8 --seq 64",
    "catsim llm plan --model benchmarks/configs/Qwen2.5-0.5B/config.json --batch 1 --seq 8192 --remat "
    "--dtype bfloat16 --format json": "--seq 64",
    "catsim llm plan --model benchmarks/configs/Qwen2.5-0.5B/config.json --batch 8 --seq 4096 --remat "
    "--dtype bfloat16 --format json": "--batch 2 --seq 64",
    "PYTHONPATH=. python benchmarks/bench_rollout.py": "--repeats 1 --new-tokens 8",
}

GPU = "needs a GPU"
CLUSTER = "needs a GPU cluster (several nodes, /models and /shared on them)"
RECIPE = "the GPU recipe: a 1.5B checkpoint in /models and the user's math file"
INSTALL = "installs packages (the suite runs in an environment that has them)"
SKIPPED: dict[str, str] = {
    "catsim llm maze-study --out figures/maze-study/cpu --preset cpu --arms grpo-20000,f-grpo-g0.5-20000 --jobs 2 "
    "--max-runs 2 --stop-after 7000":
        "a 40-minute piece of the 20,000-step horizon; tests/test_maze_carry.py runs --stop-after, --max-runs and "
        "the continuation on a fresh clone on the tiny preset",
    "catsim llm maze-study --out figures/maze-study/cpu --arms my-rule --jobs 2":
        "an arm of the reader's own (one row added to arm_table first), hours of training; "
        "tests/test_maze_parallel.py runs arms in jobs on the tiny preset",
    'pip install -e ".[dev]"': INSTALL,
    'pip install -e ".[test]"': INSTALL,
    "pip install -e .": INSTALL,
    'pip install "verl[vllm]==0.9.1" -e ".[verl]"': INSTALL,
    "pip install torch==2.13.0": INSTALL,
    'pip install -e ".[verl]" pytest hypothesis': INSTALL,
    "pip install 'catsim[tensorboard,wandb]'": INSTALL,
    "python -m pytest -n 2 -q": "the test suite itself",
    "XLA_FLAGS=--xla_cpu_max_isa=SSE4_2 python -m pytest -n 2 -q -m published":
        "the test suite itself (CI's published step)",
    "python -m pytest -q tests/test_integrations_host.py tests/test_integrations_trl.py":
        "the test suite runs these files",
    "/path/to/verl-venv/bin/python -m pytest -q tests/test_integrations_verl.py tests/test_integrations_host.py":
        "a verl venv of the user's (the suite runs these files where verl is installed)",
    "/path/to/tunix-venv/bin/python -m pytest -q tests/test_integrations_tunix.py tests/test_integrations_host.py":
        "a Tunix venv of the user's (the suite runs these files where Tunix is installed)",
    "PYTHONPATH=. python -m pytest tests/test_llm_model.py tests/test_llm_checkpoint.py "
    "tests/test_llm_rollout.py tests/test_llm_tokenizer.py tests/test_llm_sharding.py tests/test_llm_cli.py "
    "tests/test_llm_attention.py tests/test_llm_mixed_precision.py -q": "the test suite runs these files",
    "python -m verl.trainer.main_ppo algorithm.adv_estimator=fgrpo +algorithm.fgrpo.gamma=0.5 "
    "algorithm.use_kl_in_reward=False actor_rollout_ref.rollout.n=8 ...":
        "a fragment of the user's own verl command (`...`), on GPUs",
    "import catsim.integrations.tunix as catsim_tunix": "needs the tunix extra (its own venv) and elides "
                                                         "GRPOConfig's other arguments (`...`)",
    # docs/cluster.md
    "catsim llm maze-study --out runs/maze-study --preset cpu --jobs 2":
        "the CPU study (hours); tests/test_maze_parallel.py runs --jobs 2 on the tiny preset",
    "PYTHONPATH=. python benchmarks/maze_jobs.py --out runs/maze-jobs.json --jobs 2,4,8,16":
        "a benchmark of 300-step runs (minutes per layout), for an otherwise idle machine",
    "sbatch …": "needs a SLURM cluster (the page's local two-part array runs instead)",
    # the simulator
    'catsim sweep --scenario paper --seeds 16 --out /shared/runs/fig2-16seeds --part '
    '"${SLURM_ARRAY_TASK_ID}/${SLURM_ARRAY_TASK_COUNT}" --no-progress': "a SLURM job-array script",
    "for i in 0 1 2 3; do": "a loop over 4 GPUs (one process each)",
    "CUDA_VISIBLE_DEVICES=$i catsim sweep --scenario paper --out runs/fig2 --no-progress --distributed "
    "--coordinator localhost:12345 --num-processes 4 --process-id $i &": "4 GPUs, one process each",
    "done; wait": "the end of the 4-GPU loop",
    'reproduce("runs/reproduce", quick=True)': "a reduced Fig. 2 sweep (minutes); "
        "tests/test_sim_sweep.py::test_reproduce_entry_point runs it on a tiny scenario",
    "catsim sweep --study horizons --group-size 8,256 --steps 2000 --seeds 2 --out runs/h-small":
        "with the smaller flags of the page's `--study horizons` command it is that run again (another --out)",
    "PYTHONPATH=. python benchmarks/bench_vs_jax_loop.py --cells fig2":
        "with the smaller --cells 8:20 in place of fig2 it is the command above, run again",
    "PYTHONPATH=. python benchmarks/bench_vs_jax_loop.py --full-grid --keep /tmp/grid":
        "the full Fig. 2 grid on both sides (hours)",
    "PYTHONPATH=. python benchmarks/bench_vs_jax_loop.py --platform cuda": GPU,
    "catsim verify": "every check at full size (minutes); tests/test_cli_lemma.py runs `catsim verify --quick`",
    "catsim verify --quick": "run by tests/test_cli_lemma.py::test_verify_quick_passes_and_reports",
    "catsim reproduce --quick --write-references --figures /tmp/figs --runs /tmp/runs-quick":
        "publishes into the checkout's figures/reference (it would overwrite the committed references); "
        "tests/test_publish_copies.py checks what publishing copies",
    "catsim reproduce --skip lemma,mass,verify,sim --write-references --runs /work/runs/v5":
        "a record of how the published run was made (the authors' /work/runs, publishing into figures/)",
    # the trainer
    "catsim llm pipeline --out runs/quick --quick":
        "with the smaller flags (which include --quick) it is the page's previous pipeline run again (another --out)",
    "catsim llm advise-study --out runs/advise-study --figures figures/advise-study":
        "tests/test_llm_advise.py's `study` fixture runs it with --quick (the same run, ~30 s)",
    "catsim llm maze-study --out figures/maze-study/cpu --preset cpu --max-runs 4":
        ("resumes the published CPU study in figures/ (minutes, even with every run done); "
         "tests/test_maze_study_published.py checks its numbers"),
    "catsim llm maze-study --out runs/maze-paper --preset paper": GPU,
    "git worktree add /tmp/at COMMIT": "a template: COMMIT, STUDY and the flags are a run's recorded ones",
    "cd /tmp/at": "inside a second checkout of an older commit",
    'XLA_FLAGS="..." catsim llm maze-study --out STUDY --preset cpu ...':
        "a template: COMMIT, STUDY and the flags are a run's recorded ones",
    "git worktree add /tmp/at 87f11f1": "a second checkout of an older commit (needs the git history)",
    "PYTHONPATH=. python benchmarks/regenerate_run.py --check-reference /tmp/ref.json":
        "runs in a checkout of commit 87f11f1 on an Intel Xeon (the measurement the page asks for)",
    "catsim llm rl --distributed --coordinator node0:12355 …": CLUSTER,
    "catsim llm sft --task maze --size 17 --out /shared/runs/sft …": CLUSTER,
    "catsim llm eval /shared/runs/sft /shared/runs/qwen-fgrpo/model …": CLUSTER,
    "catsim llm sample --model /shared/runs/qwen-fgrpo/model …": CLUSTER,
    "catsim llm pipeline --out /shared/runs/pipeline …": CLUSTER,
    "catsim llm plan --model /models/Qwen2.5-Math-1.5B …": "reads the user's download of Qwen2.5-Math-1.5B",
    "catsim llm rl --base /models/Qwen2.5-Math-1.5B …": RECIPE,
    "catsim llm eval runs/qwen-grpo/model runs/qwen-fgrpo/model …": RECIPE,
    "from catsim.experiments.llm_pipeline import run_pipeline, PipelineConfig":
        "a record of how the published seeds 2 and 3 were made (the authors' /work/runs)",
    "PYTHONPATH=. python benchmarks/bench_llm_load.py --model-dir /tmp/qwen2-24 --layers 24 --baseline /work/main":
        "a timing against another checkout (/work/main) of a 24-layer model",
    "tensorboard --logdir runs/rl": "starts a server",
    "PYTHONPATH=. python benchmarks/bench_rollout.py --workload rl --repeats 3":
        "a timing of fixed workloads (minutes; its table on the page is a recorded run)",
    "python benchmarks/bench_llm_scale.py --layers 4 --repeat 3":
        "a timing at Qwen2.5-0.5B's width against PyTorch (minutes even at one layer)",
    "wandb sync runs/rl/wandb/latest-run": "uploads to W&B (network)",
    "srun --nodes=4 --ntasks-per-node=1 --gpus-per-node=8 python my_rollout_script.py": CLUSTER,
    'initialize_distributed(coordinator_address="node0:1234", num_processes=4, '
    'process_id=int(os.environ["RANK"]))': "one process of 4 on a cluster",
}


# --------------------------------------------------------------------------------------------
# Reading the pages


@dataclasses.dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    tag: str
    source: str


@dataclasses.dataclass(frozen=True)
class Command:
    page: Path
    line: int
    text: str  # as the page writes it: continuations joined, whitespace collapsed, comment dropped
    long: bool


FENCE = re.compile(r"(^ *```)( *)(.*?)\n(.*?)\1", flags=re.M | re.S)  # pytest-examples' pattern


def blocks(page: Path) -> list[Block]:
    text = page.read_text("utf-8")
    return [Block(page, text[:m.start()].count("\n") + 1, m.group(3).strip().lower(), m.group(4))
            for m in FENCE.finditer(text)]


def unquoted(text: str):
    """(index, character) of each character of `text` outside '...' and "..." quotes."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        else:
            yield i, ch


def split_comment(line: str) -> tuple[str, str]:
    """(code, comment) of one shell line: the first `#` outside quotes that starts a word."""
    for i, ch in unquoted(line):
        if ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def is_long(comment: str) -> bool:
    return re.match(r"long\b", comment) is not None


def split_and(code: str) -> list[str]:
    """`a && b` -> [a, b] (outside quotes)."""
    parts, start = [], 0
    for i, _ in unquoted(code):
        if code.startswith("&&", i):
            parts.append(code[start:i])
            start = i + 2
    parts.append(code[start:])
    return [" ".join(p.split()) for p in parts if p.strip()]


def commands(block: Block) -> list[Command]:
    """The block's commands; in a ```console block only lines after a `$ ` prompt (the rest is output)."""
    out, pending, first = [], "", 0
    for offset, raw in enumerate(block.source.splitlines()):
        if not pending:
            first = block.line + 1 + offset
            if block.tag == "console":
                if not raw.startswith("$ "):
                    continue
                raw = raw[2:]
        code, comment = split_comment(raw)
        if code.endswith("\\"):
            pending += code[:-1] + " "
            continue
        code, pending = pending + code, ""
        out += [Command(block.page, first, text, is_long(comment)) for text in split_and(code)]
    return out


def python_examples(page: Path):
    return [ex for ex in pytest_examples.find_examples(page) if ex.prefix.split()[0] in PYTHON_TAGS]


def code_lines(source: str) -> set[str]:
    """A snippet's lines, comments dropped: a SKIPPED key names a snippet by any one of them."""
    return {split_comment(line)[0].strip() for line in source.splitlines()} - {""}


def long_python_lines(source: str) -> list[str]:
    return [split_comment(line)[0].strip() for line in source.splitlines()
            if is_long(split_comment(line)[1])]


def all_commands() -> list[Command]:
    return [c for page in PAGES for b in blocks(page) if b.tag in SHELL_TAGS for c in commands(b)]


def all_python_keys() -> tuple[set[str], set[str]]:
    """(the lines of the Python snippets, their `# long` lines)."""
    lines, longs = set(), set()
    for page in PAGES:
        for ex in python_examples(page):
            lines |= code_lines(ex.source)
            longs.update(long_python_lines(ex.source))
    return lines, longs


def rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


def skipped(text: str) -> bool:
    """Whether SKIPPED names this command: exactly, or by a key ending in " …" that it starts with."""
    return text in SKIPPED or any(k.endswith(" …") and text.startswith(k[:-1]) for k in SKIPPED)


def names_a_command(key: str, texts: set[str]) -> bool:
    return key in texts or (key.endswith(" …") and any(t.startswith(key[:-1]) for t in texts))


# --------------------------------------------------------------------------------------------
# The tables and the fences


def test_a_block_reads_as_its_commands():
    """How a shell block splits: continuations, `&&`, comments, `# long`, quotes, a console prompt."""
    source = ("# a comment line\n"
              "pip install -e \".[dev]\" && catsim reproduce --quick   # long: a while\n"
              "catsim llm rl --base b \\\n"
              "    --out o   # long\n"
              "XLA_FLAGS=\"--a --b\" catsim simulate --task-opt 'x=# not a comment'   # longer than it looks\n")
    got = [(c.line, c.text, c.long) for c in commands(Block(ROOT / "x.md", 1, "bash", source))]
    assert got == [(3, 'pip install -e ".[dev]"', True), (3, "catsim reproduce --quick", True),
                   (4, "catsim llm rl --base b --out o", True),
                   (6, "XLA_FLAGS=\"--a --b\" catsim simulate --task-opt 'x=# not a comment'", False)]
    console = commands(Block(ROOT / "x.md", 1, "console", "$ catsim lemma --peaks\n  tau  mu_pos\n"))
    assert [c.text for c in console] == ["catsim lemma --peaks"]
    assert in_process(shlex.split("PYTHONPATH=. python -m catsim llm sft --out o > f.txt")) == (
        ["llm", "sft", "--out", "o"], Path("f.txt"))
    assert in_process(shlex.split("XLA_FLAGS=x catsim sweep")) is None  # needs a process of its own


def test_every_fence_is_tagged():
    bad = [f"{rel(b.page)}:{b.line} ```{b.tag}" for page in PAGES for b in blocks(page)
           if b.tag not in SHELL_TAGS | PYTHON_TAGS | TEXT_TAGS]
    assert not bad, ("tag every fence: ```bash (commands), ```python (runs) or ```text (output, "
                     f"listings): {bad}")


def test_every_long_command_has_a_smaller_entry():
    missing = [f"{rel(c.page)}:{c.line} {c.text}" for c in all_commands()
               if c.long and c.text not in SMALLER and not skipped(c.text)]
    missing += sorted(line for line in all_python_keys()[1] if line not in SMALLER)
    assert not missing, f"a `# long` command needs a SMALLER entry (what it runs here): {missing}"


def test_every_table_entry_names_a_doc_command():
    texts = {c.text for c in all_commands()}
    lines, long_lines = all_python_keys()
    stale_smaller = sorted(k for k in SMALLER if k not in texts and k not in long_lines)
    not_long = sorted(c.text for c in all_commands() if c.text in SMALLER and not c.long)
    stale_skipped = sorted(k for k in SKIPPED if not names_a_command(k, texts) and k not in lines)
    assert not stale_smaller, f"SMALLER entries that name no doc command: {stale_smaller}"
    assert not not_long, f"SMALLER entries whose command is not marked `# long`: {not_long}"
    assert not stale_skipped, f"SKIPPED entries that name no doc command or snippet: {stale_skipped}"


def test_skipped_commands_name_files_that_exist():
    """A command the test cannot run still names real files: its tests/, benchmarks/, figures/ and
    notebooks/ paths exist in the repository."""
    named = [(c, word) for c in all_commands() if skipped(c.text)
             for word in shlex.split(c.text.replace("$", ""))
             if re.match(r"(tests|benchmarks|figures|notebooks)/", word)]
    missing = [f"{rel(c.page)}:{c.line} {word}" for c, word in named if not (ROOT / word).exists()]
    assert not missing, f"skipped doc commands name files that do not exist: {missing}"


def test_index_lists_every_page():
    index = (ROOT / "docs" / "index.md").read_text("utf-8")
    missing = [p.name for p in DOCS if p.name != "index.md" and f"]({p.name})" not in index]
    assert not missing, f"docs/index.md has no line for {missing}"


def test_skipped_table(capsys):
    """What the doc test does not run, and why (`pytest -s -k skipped_table` prints it)."""
    with capsys.disabled():
        print("\ndoc commands and snippets not run here:")
        for key, why in sorted(SKIPPED.items()):
            print(f"  {key}\n      -> {why}")
        print("doc commands run with smaller flags:")
        for key, flags in sorted(SMALLER.items()):
            print(f"  {key}\n      + {flags}")
    assert all(why.strip() for why in SKIPPED.values())


# --------------------------------------------------------------------------------------------
# Running a page


def run_catsim(argv: list[str], stdout_to: Path | None) -> None:
    from catsim.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except SystemExit as exit_:  # argparse's own exits
        code = exit_.code if isinstance(exit_.code, int) else 1
    if stdout_to is not None:
        stdout_to.write_text(out.getvalue())
    assert code == 0, f"catsim {shlex.join(argv)} -> exit {code}\n{err.getvalue()[-3000:]}"
    old = [line for line in err.getvalue().splitlines() if DEPRECATED in line]
    assert not old, f"catsim {shlex.join(argv)}: the docs use an old spelling: {old}"


def in_process(words: list[str]) -> tuple[list[str], Path | None] | None:
    """The catsim argv and stdout file of a command this process can run, or None."""
    env = []
    while words and re.match(r"[A-Za-z_][A-Za-z0-9_]*=", words[0]):  # NAME=value before the program
        env, words = env + [words[0]], words[1:]
    if any(not w.startswith("PYTHONPATH=") for w in env):
        return None  # an environment the running process cannot take (XLA_FLAGS, ...)
    if any(w in ("|", "<", ">>", ";", "&") for w in words):
        return None
    target = None
    if ">" in words:
        i = words.index(">")
        if len(words) != i + 2:
            return None
        words, target = words[:i], Path(words[i + 1])
    if words[:1] == ["catsim"]:
        return words[1:], target
    if words[:3] == ["python", "-m", "catsim"]:
        return words[3:], target
    return None


def run_command(cmd: Command, folder: Path) -> None:
    if cmd.long and cmd.text not in SMALLER:
        pytest.fail(f"{rel(cmd.page)}:{cmd.line} `{cmd.text}` is marked `# long` and has no SMALLER entry")
    extra = SMALLER[cmd.text] if cmd.long else ""
    words = shlex.split(cmd.text, posix=True)
    job = in_process(words)
    if job is not None:
        argv, target = job
        run_catsim(argv + shlex.split(extra), folder / target if target else None)
        return
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(["bash", "-c", f"{cmd.text} {extra}".strip()], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (f"{rel(cmd.page)}:{cmd.line} `{cmd.text}` -> exit {proc.returncode}\n"
                                  f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    old = [line for line in proc.stderr.splitlines() if DEPRECATED in line]
    assert not old, f"{rel(cmd.page)}:{cmd.line} `{cmd.text}` uses an old spelling: {old}"


def run_snippet(example, eval_example) -> None:
    source = example.source
    for line in long_python_lines(source):
        if line not in SMALLER:
            pytest.fail(f"{example}: `{line}` is marked `# long` and has no SMALLER entry")
        source = "\n".join(SMALLER[line] if split_comment(raw)[0].strip() == line else raw
                           for raw in source.splitlines()) + "\n"
    example = dataclasses.replace(example, source=source)
    main_module = sys.modules.get("__main__")
    try:
        eval_example.run(example)
    finally:
        sys.modules["__main__"] = main_module  # run_code installs the snippet as __main__


def page_steps(page: Path):
    """The page's commands and snippets in the order the page gives them."""
    snippets = {ex.start_line: ex for ex in python_examples(page)}
    for b in blocks(page):
        if b.tag in SHELL_TAGS:
            for c in commands(b):
                yield c.line, ("command", c)
        elif b.tag in PYTHON_TAGS and b.line in snippets:
            yield b.line, ("python", snippets[b.line])


@pytest.fixture
def page_folder(page, tmp_path, monkeypatch):
    folder = tmp_path / "page"
    folder.mkdir()
    text = page.read_text("utf-8")
    for name in COPIED:
        if f"{name}/" in text:  # only what the page names (figures/ alone is 21 MB)
            shutil.copytree(ROOT / name, folder / name)
    monkeypatch.chdir(folder)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    for name in ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"):
        if name in os.environ:  # catsim's main() sets them: restored to what they were after the page
            monkeypatch.setenv(name, os.environ[name])
        else:
            monkeypatch.delenv(name, raising=False)
    return folder


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_page_runs(page, page_folder, eval_example):
    """The page's commands and snippets, in order, in one folder (`-s` prints each one's time)."""
    for line, (kind, item) in page_steps(page):
        start = time.perf_counter()
        if kind == "command":
            if skipped(item.text):
                continue
            run_command(item, page_folder)
        else:
            if code_lines(item.source) & set(SKIPPED):
                continue
            run_snippet(item, eval_example)
        print(f"{time.perf_counter() - start:6.1f} s  {rel(page)}:{line}  "
              f"{item.text if kind == 'command' else 'python'}")
