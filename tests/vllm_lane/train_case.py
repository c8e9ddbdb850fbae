"""One trainer of the vLLM lane, 2 steps with ``use_vllm=True, vllm_mode="colocate"``, in its own process.

    python tests/vllm_lane/train_case.py --case meds --policy DIR --output result.json

Each case runs in a fresh process: the colocate engine lives in the trainer's process (``external_launcher``)
and sets up torch.distributed, so two engines in one pytest process would share global state; a process also
frees the engine's memory when it ends. The JSON written to ``--output`` is what ``tests/test_vllm_lane.py``
asserts on:

- ``parameters_changed``: parameters whose values differ after the 2 steps (of ``parameters_total``);
- ``logprob_gap_*``: mean absolute difference between vLLM's log-probabilities of one fixed completion (a toy
  solution after its chat prompt, read with ``prompt_logprobs``) and the trained model's own (float32 forward):
  ``start`` before training (both hold the same weights: the bf16-vs-fp32 baseline), ``stale`` after training
  but before the last sync (vLLM holds the weights of step 1, the model those of step 2), ``synced`` after
  ``VLLMGeneration.sync_weights()``; ``logprob_drift`` is how far the model's own log-probs moved in training;
- ``feature_source``: for MEDS, which feature path ran (``"captured"``: hooks in TRL's old-log-prob forward);
- ``metrics``: the logged records.

``--no_shim`` skips the CPU shim (``tests/vllm_cpu_shim.py``), to show the sync fails without it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

CASES = ("grpo", "meds", "cliff")
NUM_GENERATIONS = 4


def build_trainer(case: str, policy: str, output_dir: str, steps: int):
    from helpers import MixedGroupsReward
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from hf_meds_cliff import CliffConfig, CliffGRPOTrainer, MEDSConfig, MEDSGRPOTrainer
    from hf_meds_cliff.rewards import MathAnswerReward
    from hf_meds_cliff.toy import make_toy_dataset

    config_cls, trainer_cls = {
        "grpo": (GRPOConfig, GRPOTrainer),
        "meds": (MEDSConfig, MEDSGRPOTrainer),
        "cliff": (CliffConfig, CliffGRPOTrainer),
    }[case]
    settings = {
        "output_dir": output_dir,
        "max_steps": steps,
        "per_device_train_batch_size": 8,
        "num_generations": NUM_GENERATIONS,
        "max_completion_length": 64,
        "learning_rate": 1e-3,  # large enough that 2 steps move the log-probs far past the bf16 gap
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "bf16": False,
        "use_cpu": True,
        "seed": 0,
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_max_model_length": 256,
        # TRL's default: the old-log-prob forward runs, and MEDS captures its features there.
        "vllm_importance_sampling_correction": True,
    }
    tokenizer = AutoTokenizer.from_pretrained(policy)
    tokenizer.padding_side = "left"
    # Learning signal by construction (every group mixed), whatever this policy samples (tests/helpers.py).
    reward = MixedGroupsReward(MathAnswerReward(), NUM_GENERATIONS)
    return trainer_cls(
        model=policy,
        reward_funcs=[reward],
        args=config_cls(**settings),
        train_dataset=make_toy_dataset("train", 64, seed=0),
        processing_class=tokenizer,
    )


def fixed_sequence(tokenizer) -> tuple[list[int], int]:
    """Token ids of one toy test problem's chat prompt followed by its worked solution and eos; and where the
    completion starts."""
    from hf_meds_cliff.toy import make_toy_dataset

    row = make_toy_dataset("test", 1, seed=0)[0]
    prompt = list(tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True)["input_ids"])
    completion = tokenizer.encode(row["solution"], add_special_tokens=False) + [tokenizer.eos_token_id]
    return prompt + completion, len(prompt)


def vllm_logprobs(llm, ids: list[int], start: int) -> list[float]:
    from vllm import SamplingParams

    (output,) = llm.generate(
        [{"prompt_token_ids": ids}], SamplingParams(max_tokens=1, prompt_logprobs=0), use_tqdm=False
    )
    return [output.prompt_logprobs[i][ids[i]].logprob for i in range(start, len(ids))]


def model_logprobs(model, ids: list[int], start: int) -> list[float]:
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids], device=model.device)).logits[0].float()
    logps = torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(ids[1:]).unsqueeze(1)).squeeze(1)
    return logps[start - 1 :].tolist()


def mean_gap(a: list[float], b: list[float]) -> float:
    if len(a) != len(b):
        raise ValueError(f"log-prob lists of different lengths: {len(a)} vs {len(b)}")
    return sum(abs(x - y) for x, y in zip(a, b)) / len(a)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=CASES, required=True)
    parser.add_argument("--policy", required=True, help="A toy policy vLLM can load (head_dim >= 32).")
    parser.add_argument("--output", required=True)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--no_shim", action="store_true", help="Leave CPU vLLM's prepacked weights in place.")
    args = parser.parse_args(argv)
    import torch
    import vllm_cpu_shim

    torch.set_num_threads(1)
    shim = False if args.no_shim else vllm_cpu_shim.install()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = build_trainer(args.case, args.policy, output_dir, args.steps)
        engine_seconds = time.perf_counter() - started
        model = trainer.accelerator.unwrap_model(trainer.model)
        llm = trainer.vllm_generation.llm
        ids, start = fixed_sequence(trainer.processing_class)
        before = {name: p.detach().clone() for name, p in model.named_parameters()}
        model_start = model_logprobs(model, ids, start)
        gap_start = mean_gap(vllm_logprobs(llm, ids, start), model_start)
        trainer.train()
        train_seconds = time.perf_counter() - started - engine_seconds
        model_end = model_logprobs(model, ids, start)
        gap_stale = mean_gap(vllm_logprobs(llm, ids, start), model_end)
        trainer.vllm_generation.sync_weights()
        gap_synced = mean_gap(vllm_logprobs(llm, ids, start), model_end)
        changed = sum(not torch.equal(before[n], p.detach()) for n, p in model.named_parameters())
        result = {
            "case": args.case,
            "shim": shim,
            "steps": trainer.state.global_step,
            "parameters_changed": changed,
            "parameters_total": len(before),
            "logprob_gap_start": gap_start,
            "logprob_gap_stale": gap_stale,
            "logprob_gap_synced": gap_synced,
            "logprob_drift": mean_gap(model_start, model_end),
            "completion_tokens": len(ids) - start,
            "feature_source": getattr(trainer, "_meds_last_feature_source", None),
            "engine_start_seconds": engine_seconds,
            "train_seconds": train_seconds,
            "metrics": trainer.state.log_history,
            "vllm_kvcache_space": os.environ.get("VLLM_CPU_KVCACHE_SPACE"),
        }
    Path(args.output).write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
