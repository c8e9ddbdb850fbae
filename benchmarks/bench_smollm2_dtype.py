"""SmolLM2-135M-Instruct on CPU: float32 vs bfloat16 weights, for choosing the dtype the conversion saves.

Measures, in one run on the same machine, with the converted checkpoint (``hf_meds_cliff.real_models.smollm2_135m``):
sampled generation of ``--batch`` x ``--new_tokens`` tokens (as GRPO rollouts), and one forward + backward over the
generated sequences (as a training step's policy pass), the two dtypes interleaved ``--repeats`` times. Reports the
best seconds of each and the bf16/fp32 ratios.

    PYTHONPATH=src python benchmarks/bench_smollm2_dtype.py --batch 8 --new_tokens 128
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hf_meds_cliff.real_models import smollm2_135m


def one_pass(model, input_ids, new_tokens: int, seed: int) -> tuple[float, float]:
    """Seconds of one sampled generation and of one forward + backward over its output."""
    torch.manual_seed(seed)
    start = time.perf_counter()
    with torch.no_grad():
        output = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=new_tokens,
                                min_new_tokens=new_tokens, do_sample=True, temperature=0.7)  # fmt: skip
    generate_s = time.perf_counter() - start
    start = time.perf_counter()
    model(output, labels=output).loss.backward()
    model.zero_grad(set_to_none=True)
    return generate_s, time.perf_counter() - start


def machine() -> dict:
    """What the numbers depend on: CPU model and its bf16-related flags, cores, torch and transformers versions, and
    the command (the first data file of this benchmark recorded none of them)."""
    import os

    import transformers

    from hf_meds_cliff.machine import cpu_model_and_flags

    model, flags = cpu_model_and_flags()
    return {
        "cpu": model,
        "cpu_flags_bf16": sorted(f for f in flags if "bf16" in f or f.startswith(("amx", "avx512f", "avx2"))),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--new_tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    path = smollm2_135m()
    tokenizer = AutoTokenizer.from_pretrained(path)
    messages = [{"role": "user", "content": "What is 17 + 25? Put the final answer in \\boxed{}."}]
    prompt = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    input_ids = prompt["input_ids"].repeat(args.batch, 1)
    models = {name: AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
              for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16))}  # fmt: skip
    times: dict[str, dict[str, list[float]]] = {
        name: {"generate_s": [], "forward_backward_s": []} for name in models
    }
    for repeat in range(args.repeats):  # interleaved: a change of load falls on both dtypes alike
        for name, model in models.items():
            generate_s, train_s = one_pass(model, input_ids, args.new_tokens, repeat)
            times[name]["generate_s"].append(generate_s)
            times[name]["forward_backward_s"].append(train_s)
            print(f"repeat {repeat} {name}: generate {generate_s:.2f} s, forward+backward {train_s:.2f} s", flush=True)
    best = {name: {key: min(values) for key, values in measured.items()} for name, measured in times.items()}
    for values in best.values():
        values["tokens_per_s"] = args.batch * args.new_tokens / values["generate_s"]
    result = {
        **best,
        "ratio_bf16_over_fp32": {
            key: best["bfloat16"][key] / best["float32"][key] for key in ("generate_s", "forward_backward_s")
        },
        "all_times": times,
        "torch_threads": torch.get_num_threads(),
        "settings": vars(args),
        "machine": machine(),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
