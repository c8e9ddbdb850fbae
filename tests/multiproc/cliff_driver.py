"""Cliff trainer run on scripted rollouts, for the 1-process vs 2-process equality test.

    python tests/multiproc/cliff_driver.py --output OUT.pt --per_device_batch 12
    ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 tests/multiproc/cliff_driver.py --output OUT.pt \
        --per_device_batch 6

Generation is replaced by a deterministic ``rollout_func``: global row ``r`` of a step gets a completion that
depends only on its prompt and on ``r`` (correct, wrong from sentence 1, wrong from sentence 0), so both runs see
exactly the same data however the rows are split over processes. With 4 generations and 6 rows per process the
middle group is split across the two processes. The teacher is an exact arithmetic checker. Rank 0 saves the
gathered (B, T) token advantages of every step, the logged metrics and the final parameters.
"""

from __future__ import annotations

import argparse
import re
import tempfile

import torch

from hf_meds_cliff.cliff import CliffConfig, CliffGRPOTrainer, Judgment
from hf_meds_cliff.cliff.protocol import problem_text
from hf_meds_cliff.toy.model import build_toy_model
from hf_meds_cliff.toy.task import ToyProblem, make_toy_dataset, parse_question
from hf_meds_cliff.toy.tokenizer import build_toy_tokenizer

NUM_GENERATIONS = 4
STEP = re.compile(r"^\s*\(?(-?\d+)\)?\s*([-+*])\s*\(?(-?\d+)\)?\s*=\s*(-?\d+)\.\s*$")
BOXED = re.compile(r"\\boxed\{(-?\d+)\}")


def wrong_from(problem: ToyProblem, sentence: int) -> str:
    """The solution with step ``sentence`` off by one and every later step consistent with the error."""
    value, parts = problem.first_operand, []
    for index, (op, right) in enumerate(problem.operations):
        result = {"+": value + right, "-": value - right, "*": value * right}[op]
        if index == min(sentence, len(problem.operations) - 1):
            result += 1
        parts.append(f"{value} {op} {right} = {result}.")
        value = result
    return " ".join([*parts, f"The answer is \\boxed{{{value}}}."])


def scripted_completion(problem: ToyProblem, row: int) -> str:
    group, member = divmod(row, NUM_GENERATIONS)
    if group % 3 == 2 or member in (0, 3):  # every third group is all correct (zero variance)
        return problem.solution
    return wrong_from(problem, 1 if member == 1 else 0)


def rollout_func(prompts, trainer):
    tokenizer = trainer.processing_class
    offset = trainer.accelerator.process_index * len(prompts)
    prompt_ids, completion_ids = [], []
    for index, prompt in enumerate(prompts):
        problem = parse_question(problem_text(prompt))
        text = scripted_completion(problem, offset + index)
        prompt_ids.append(
            list(tokenizer.apply_chat_template(prompt, add_generation_prompt=True)["input_ids"])
        )
        completion_ids.append(tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id])
    return {
        "prompt_ids": prompt_ids,
        "completion_ids": completion_ids,
        "logprobs": [[0.0] * len(ids) for ids in completion_ids],
    }


def exact_answer_reward(completions, answer, **kwargs):
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    found = [BOXED.findall(text) for text in texts]
    return [1.0 if f and f[-1] == str(a) else 0.0 for f, a in zip(found, answer)]


def first_wrong_sentence(question: str, sentences) -> int | None:
    """Index of the first sentence whose step is wrong or not chained to the previous result; None if none."""
    value = parse_question(question).first_operand
    for index, sentence in enumerate(sentences):
        match = STEP.match(sentence)
        if match is None:
            continue
        left, op, right, result = int(match[1]), match[2], int(match[3]), int(match[4])
        expected = {"+": left + right, "-": left - right, "*": left * right}[op]
        if left != value or result != expected:
            return index
        value = result
    return None


class ArithmeticTeacher:
    """Exact checker of toy arithmetic chains (a test double independent of the toy world's own checker)."""

    name = "arithmetic"

    async def solve(self, problem):
        return parse_question(problem).solution

    async def judge(self, problem, reference, sentences):
        mistake = first_wrong_sentence(problem, sentences)
        return Judgment(first_mistake=mistake, verdict_correct=mistake is None, status="ok")

    async def aclose(self):
        pass


class RecordingCliffTrainer(CliffGRPOTrainer):
    """Records the gathered (B, T) token advantages of every generation step."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.recorded = []

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.model.training:
            padded = self.accelerator.pad_across_processes(output["advantages"], dim=1, pad_index=0.0)
            self.recorded.append(self.accelerator.gather(padded).cpu())
        return output


def build_trainer(
    output_dir: str,
    per_device_batch: int,
    steps: int = 2,
    num_prompts: int = 32,
    teacher=None,
    reward_funcs=None,
    **config_overrides,
):
    """A Cliff trainer on scripted rollouts (SGD, so that 1- and 2-process runs match to float precision)."""
    tokenizer = build_toy_tokenizer()
    model = build_toy_model(tokenizer, seed=0)
    dataset = make_toy_dataset("train", num_prompts, seed=0)
    settings = {
        "output_dir": output_dir,
        "per_device_train_batch_size": per_device_batch,
        "num_generations": NUM_GENERATIONS,
        "max_completion_length": 64,
        "max_steps": steps,
        "optim": "sgd",
        "learning_rate": 0.5,
        "lr_scheduler_type": "constant",
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "bf16": False,
        "use_cpu": True,
        "activation_checkpointing": False,
        "seed": 0,
        "cliff_teacher": "rule",
    }
    settings.update(config_overrides)
    return RecordingCliffTrainer(
        model=model,
        reward_funcs=reward_funcs if reward_funcs is not None else [exact_answer_reward],
        args=CliffConfig(**settings),
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=rollout_func,
        teacher=teacher if teacher is not None else ArithmeticTeacher(),
        reference_verifier=lambda solution, truth: BOXED.findall(solution)[-1:] == [truth],
    )


def run(output_dir: str, per_device_batch: int, steps: int = 2) -> dict:
    """Train and return (on every rank) what the equality test compares."""
    trainer = build_trainer(output_dir, per_device_batch, steps)
    trainer.train()
    trainer.close_teacher()
    return {
        "advantages": trainer.recorded,
        "log_history": trainer.state.log_history,
        "parameters": {k: v.detach().cpu().clone() for k, v in trainer.model.state_dict().items()},
        "num_processes": trainer.accelerator.num_processes,
        "accelerator": trainer.accelerator,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", required=True)
    parser.add_argument("--per_device_batch", type=int, required=True)
    parser.add_argument("--steps", type=int, default=2)
    cli = parser.parse_args()
    with tempfile.TemporaryDirectory() as output_dir:
        result = run(output_dir, cli.per_device_batch, cli.steps)
    accelerator = result.pop("accelerator")
    if accelerator.is_main_process:
        torch.save(result, cli.output)
    accelerator.wait_for_everyone()
    accelerator.end_training()  # destroys the process group (see dapo_driver.py)


if __name__ == "__main__":
    main()
