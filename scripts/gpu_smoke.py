"""GPU smoke test: MEDS, Cliff and the GRPO baseline for a few steps each on one CUDA GPU in bf16.

    python scripts/gpu_smoke.py                 # on a machine with a CUDA GPU
    python scripts/gpu_smoke.py --policy DIR    # skip the CPU warm-up: DIR holds a warmed-up toy policy
    python scripts/gpu_smoke.py --device cpu --steps 1 --cases grpo meds cliff   # the same code path on CPU

The policy is the project's toy Qwen3 in its vLLM variant (head_dim 32: vLLM's attention backends refuse the
studies' head_dim 16; :func:`hf_meds_cliff.toy.vllm_toy_policy`), built from a config and warmed up locally (no
download), so the smoke test exercises the real Qwen3 modelling code, the layer hooks, the fused LM head, LoRA
through peft, bf16 autocast and (when vLLM is importable) vLLM colocate generation. The warm-up takes a few CPU
minutes on first use; on a bare GPU machine copy a warmed-up policy folder there (``~/.cache/hf_meds_cliff/toy/<key>``,
or the one ``$HF_MEDS_CLIFF_CACHE`` points at) and pass it as ``--policy``, or point ``$HF_MEDS_CLIFF_CACHE`` at a
copied cache. The CPU vLLM lane (docs/vllm_lane.md) runs the same three trainers on vLLM without a GPU.

MEDS runs on both of its feature paths: ``meds`` / ``meds_gradacc`` use MEDS's own no-grad forward (the latter
with ``gradient_accumulation_steps=2``: a generation batch twice the per-device batch, run in several chunks,
the configuration that used to crash), ``meds_vllm`` / ``meds_vllm_gradacc`` capture the features from TRL's
old-log-prob forward, which vLLM's importance-sampling correction runs. Each MEDS case checks which path ran.

Each case prints one line ``PASS <case> <seconds per step>`` or ``FAIL <case>: <error>``; the last line is the
MEDS / GRPO step-time ratio measured in this run. Exit status 1 when any case failed. The whole default run
(8 cases x 4 steps, tiny model) takes a few minutes on one GPU, plus vLLM's start-up per vLLM case.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
import traceback

CASES = ("grpo", "meds", "meds_gradacc", "meds_lora", "cliff", "cliff_lora", "meds_vllm", "meds_vllm_gradacc")
FEATURE_SOURCE = {
    "meds": "forward",
    "meds_gradacc": "forward",
    "meds_lora": "forward",
    "meds_vllm": "captured",
    "meds_vllm_gradacc": "captured",
}
"""Which MEDS feature path each case must take ("forward": MEDS's own; "captured": hooks in TRL's forward)."""


def build_case(case: str, policy: str, output_dir: str, device: str, steps: int):
    from peft import LoraConfig
    from transformers import AutoTokenizer

    from hf_meds_cliff import CliffConfig, CliffGRPOTrainer, MEDSConfig, MEDSGRPOTrainer
    from hf_meds_cliff.dapo import DAPOConfig, DAPOTrainer
    from hf_meds_cliff.rewards import MathAnswerReward
    from hf_meds_cliff.toy import make_toy_dataset

    method = case.split("_")[0]
    config_cls, trainer_cls = {
        "grpo": (DAPOConfig, DAPOTrainer),
        "meds": (MEDSConfig, MEDSGRPOTrainer),
        "cliff": (CliffConfig, CliffGRPOTrainer),
    }[method]
    on_gpu = device == "cuda"
    settings = dict(
        output_dir=output_dir,
        max_steps=steps,
        per_device_train_batch_size=32,
        num_generations=8,
        max_completion_length=64,
        learning_rate=1e-4,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        bf16=on_gpu,
        use_cpu=not on_gpu,
        activation_checkpointing=on_gpu,
        seed=0,
    )
    if "gradacc" in case:  # TRL's default steps_per_generation = 2: one generation of 64 rows, 2 chunks of 32
        settings.update(gradient_accumulation_steps=2)
    if "vllm" in case:
        # vLLM's importance-sampling correction (TRL's default) runs the old-log-prob forward: MEDS captures there.
        settings.update(
            use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=0.2,
            vllm_importance_sampling_correction=True,
        )  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(policy)
    tokenizer.padding_side = "left"
    peft_config = None
    if case.endswith("lora"):
        peft_config = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM")
    kwargs = {"peft_config": peft_config} if peft_config is not None else {}
    trainer = trainer_cls(
        model=policy,
        reward_funcs=[MathAnswerReward()],
        args=config_cls(**settings),
        train_dataset=make_toy_dataset("train", 512, seed=0),
        processing_class=tokenizer,
        **kwargs,
    )
    if on_gpu and not next(trainer.model.parameters()).is_cuda:
        raise RuntimeError("the model is not on the GPU")
    return trainer


def run_case(case: str, policy: str, device: str, steps: int) -> tuple[bool, float | None, str]:
    with tempfile.TemporaryDirectory() as output_dir:
        try:
            trainer = build_case(case, policy, output_dir, device, steps)
            start = time.perf_counter()
            trainer.train()
            elapsed = time.perf_counter() - start
            step_times = [r["step_time"] for r in trainer.state.log_history if "step_time" in r]
            if not any("loss" in r for r in trainer.state.log_history):
                return False, None, "no loss was logged"
            method = case.split("_")[0]
            if method in ("meds", "cliff") and not any(
                any(key.startswith(f"{method}/") for key in r) for r in trainer.state.log_history
            ):
                return False, None, f"no {method}/ metrics were logged"
            expected_source = FEATURE_SOURCE.get(case)
            if expected_source and trainer._meds_last_feature_source != expected_source:
                source = trainer._meds_last_feature_source
                return False, None, f"MEDS features came from {source!r}, expected {expected_source!r}"
            if hasattr(trainer, "close_teacher"):
                trainer.close_teacher()
            # The first step pays for compilation/caches: time the later ones when there are any.
            per_step = statistics.mean(step_times[1:] or step_times) if step_times else elapsed / steps
            return True, per_step, ""
        except Exception as err:  # a smoke test reports every case, whatever fails
            return False, None, f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=4)}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument(
        "--policy",
        default=None,
        help="Folder of a warmed-up toy policy (model + tokenizer; head_dim >= 32 for the vLLM cases); default: "
        "$HF_MEDS_CLIFF_VLLM_TOY_POLICY, else warm up the vLLM variant of the toy policy (or reuse the cache).",
    )
    args = parser.parse_args(argv)

    import torch

    from hf_meds_cliff.toy import vllm_toy_policy

    if args.device == "cuda" and not torch.cuda.is_available():
        print("FAIL setup: no CUDA GPU is visible (use --device cpu for the CPU code path)")
        return 1
    print(
        f"torch {torch.__version__}, device {args.device}"
        + (f" ({torch.cuda.get_device_name(0)})" if args.device == "cuda" else "")
    )
    policy = args.policy or str(vllm_toy_policy())
    results = {}
    failed = False
    for case in args.cases:
        if "vllm" in case and (args.device != "cuda" or importlib.util.find_spec("vllm") is None):
            print(f"SKIP {case}: needs vLLM and a CUDA GPU")
            continue
        ok, per_step, error = run_case(case, policy, args.device, args.steps)
        results[case] = per_step
        failed |= not ok
        print(f"PASS {case} {per_step:.3f} s/step" if ok else f"FAIL {case}: {error}", flush=True)
    if results.get("meds") and results.get("grpo"):
        print(f"MEDS/GRPO step-time ratio: {results['meds'] / results['grpo']:.3f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
