"""Multi-process driver for ``tests/test_meds_trainer.py::test_two_processes_match_one_process``.

    ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 tests/multiproc/meds_driver.py \\
        --policy <toy policy dir> --output_dir <dir> [--train]

1. Fixed batches (gold toy solutions and wrong variants of them, three steps of 12 completions in
   groups of 4, so some groups straddle the two ranks) go through ``MEDSGRPOTrainer._meds_shape``, each
   rank holding its contiguous slice as TRL's sampler gives it. Every rank writes the global cluster
   sizes, penalties and memory fingerprint, and the (sharded) memory is saved to ``memory_fixed/``; the test
   runs the same functions in its own single process as the reference and reads the saved memory.
2. With ``--train``: two real ``trainer.train()`` steps with groups split across ranks, a checkpoint at each
   step (``save_total_limit=1``); each rank writes the fingerprint of the whole memory.
3. With ``--resume_from CHECKPOINT``: the memory of a checkpoint (written by any number of processes) is loaded
   through the trainer's resume hook, then the fixed batches run again; every rank writes the sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

import torch

from hf_meds_cliff.meds.config import MEDSConfig
from hf_meds_cliff.meds.trainer import MEDSGRPOTrainer

STEPS = 3
GROUP = 4
GROUPS_PER_STEP = 3


def exact_answer_reward(completions, answer, **kwargs):
    from hf_meds_cliff.data import completion_text
    from hf_meds_cliff.toy.warmup import boxed_integer

    return [1.0 if boxed_integer(completion_text(c)) == int(a) else 0.0 for c, a in zip(completions, answer)]


def fixed_steps(dataset, tokenizer):
    """STEPS lists of (prompt, problem_id, completion_ids, reward), GROUP completions per prompt."""
    rng = random.Random(0)
    steps = []
    for step in range(STEPS):
        rows = []
        for group in range(GROUPS_PER_STEP):
            example = dataset[(step + group) % len(dataset)]  # prompts recur across steps: memory hits
            gold = example["solution"]
            for member in range(GROUP):
                wrong = member % 2 == 1
                answer = int(example["answer"]) + (rng.choice([-2, -1, 1, 3]) if wrong else 0)
                text = gold[: gold.rfind("\\boxed{")] + f"\\boxed{{{answer}}}."
                ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
                rows.append((example["prompt"], example["problem_id"], ids, 0.0 if wrong else 1.0))
        steps.append(rows)
    return steps


def build_trainer(policy: str, output_dir: Path, world_size: int, save_steps: int | None = None) -> MEDSGRPOTrainer:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_meds_cliff.toy import make_toy_dataset

    tokenizer = AutoTokenizer.from_pretrained(policy)
    tokenizer.padding_side = "left"
    args = MEDSConfig(
        output_dir=str(output_dir / "trainer"),
        use_cpu=True,
        bf16=False,
        seed=0,
        max_steps=2,
        learning_rate=1e-3,
        # 12 completions per step: with 2 ranks, 6 each, so the middle group of 4 straddles the ranks.
        per_device_train_batch_size=GROUP * GROUPS_PER_STEP // world_size,
        num_generations=GROUP,
        max_completion_length=72,
        beta=0.0,
        logging_steps=1,
        report_to="none",
        save_strategy="no" if save_steps is None else "steps",
        save_steps=save_steps or 500,
        save_total_limit=1,
        disable_tqdm=True,
        # The --train phase scores real rollouts with the plain exact reward, and groups straddle the ranks (no
        # per-rank mixing is possible): memorise every featured row, so the memory grows whatever the policy solves
        # (the default leaves all-wrong and all-right groups out, as the reference does).
        meds_memory_scope="all",
    )
    return MEDSGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(policy),
        reward_funcs=[exact_answer_reward],
        args=args,
        train_dataset=make_toy_dataset("train", 4, seed=0),
        processing_class=tokenizer,
    )


def run_fixed_batches(trainer: MEDSGRPOTrainer, save_to: Path | None = None) -> dict:
    """Push the fixed steps through ``_meds_shape``, this rank holding its slice; global results."""
    tokenizer, dataset = trainer.processing_class, trainer.train_dataset
    rank, world = trainer.accelerator.process_index, trainer.accelerator.num_processes
    cluster_sizes, penalties = [], []
    for rows in fixed_steps(dataset, tokenizer):
        per_rank = len(rows) // world
        local = rows[rank * per_rank : (rank + 1) * per_rank]
        prompts = [prompt for prompt, _, _, _ in local]
        inputs = [{"prompt": prompt, "problem_id": pid} for prompt, pid, _, _ in local]
        completion_ids = [ids for _, _, ids, _ in local]
        prompt_ids = [
            tokenizer.apply_chat_template(
                prompt, add_generation_prompt=True, tokenize=True, return_dict=False
            )
            for prompt in prompts
        ]
        trainer._meds_prompt_ids = [
            list(p["input_ids"]) if isinstance(p, dict) else list(p) for p in prompt_ids
        ]
        trainer._meds_locations = None
        trainer._meds_captured_logits = None
        gathered_rewards = torch.tensor(
            [[reward, 0.0] for _, _, _, reward in rows]
        )  # as _calculate_rewards gathers
        step_penalties = trainer._meds_shape(inputs, prompts, completion_ids, gathered_rewards)
        cluster_sizes.append(trainer.meds_last_cluster_sizes.tolist())
        penalties.append(step_penalties.tolist())
    memory = trainer.meds_memory
    if save_to is not None:
        memory.save(save_to)  # a collective when sharded: every rank writes its shard
    return {
        "world_size": world,
        "cluster_sizes": cluster_sizes,
        "penalties": penalties,
        "fingerprint_fixed": memory.fingerprint(),  # of the whole memory (a collective when sharded)
        "fixed_memory_rows": memory.num_rows,
    }


def memory_contents(memory) -> dict:
    """Stored features, snippets and notes of every key of a whole (unsharded) memory, keys sorted."""
    keys = sorted(memory.keys(), key=str)
    return {
        "stored_features": [memory.stored_features(key).tolist() for key in keys],
        "snippets": [
            [None if s is None else [s.text, s.step, s.sample] for s in memory.stored_snippets(key)] for key in keys
        ],
        "notes": [memory.note(key) for key in keys],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--policy", required=True)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--train", action="store_true")
    parser.add_argument("--resume_from", default=None)
    cli = parser.parse_args()

    output_dir = Path(cli.output_dir)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = build_trainer(cli.policy, output_dir, world_size, save_steps=1 if cli.train else None)
    if cli.resume_from:
        trainer.create_optimizer_and_scheduler(num_training_steps=1)  # what train() does before it loads them
        trainer._load_optimizer_and_scheduler(cli.resume_from)  # the trainer's resume hook: memory re-sharded
        result = {"resumed_rows": trainer.meds_memory.num_rows, "resumed_fingerprint": trainer.meds_memory.fingerprint()}
        result.update(run_fixed_batches(trainer))
    else:
        result = run_fixed_batches(trainer, save_to=output_dir / "memory_fixed")
    if cli.train:
        trainer.train()
        result["fingerprint_train"] = trainer.meds_memory.fingerprint()
        result["train_memory_rows"] = trainer.meds_memory.num_rows
        result["local_train_rows"] = getattr(trainer.meds_memory, "local", trainer.meds_memory).num_rows
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / f"rank{trainer.accelerator.process_index}.json").write_text(json.dumps(result))
    trainer.accelerator.wait_for_everyone()
    exit_without_teardown()


def exit_without_teardown() -> None:
    """Leave without destroying the gloo process group: its destructor joins gloo's worker thread while holding the
    GIL, and that thread can be waiting for the GIL (gdb: ``ProcessGroupGloo::~ProcessGroupGloo`` in
    ``std::thread::join``, ``pt_gloo_runloop`` in ``take_gil``); 2 of about 10 runs hung there, after every result
    was written. Nothing is left to do at this point."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
