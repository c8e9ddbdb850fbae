"""SmolLM2-135M-Instruct on CPU: float32 vs bfloat16 weights, for choosing the dtype the conversion saves.

Measures, in one run on the same machine, with the converted checkpoint (``hf_meds_cliff.real_models.smollm2_135m``):
sampled generation of ``--batch`` x ``--new_tokens`` tokens (as GRPO rollouts), and one forward + backward over the
generated sequences (as a training step's policy pass). Reports the seconds and the bf16/fp32 ratio of each.

    PYTHONPATH=src python benchmarks/bench_smollm2_dtype.py --batch 8 --new_tokens 128
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hf_meds_cliff.real_models import smollm2_135m


def measure(path, dtype, tokenizer, batch: int, new_tokens: int, repeats: int) -> dict[str, float]:
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    messages = [{"role": "user", "content": "What is 17 + 25? Put the final answer in \\boxed{}."}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    input_ids = prompt["input_ids"].repeat(batch, 1)
    generate_s, train_s = [], []
    for repeat in range(repeats):
        torch.manual_seed(repeat)
        start = time.perf_counter()
        with torch.no_grad():
            output = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=new_tokens,
                                    min_new_tokens=new_tokens, do_sample=True, temperature=0.7)  # fmt: skip
        generate_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        loss = model(output, labels=output).loss
        loss.backward()
        model.zero_grad(set_to_none=True)
        train_s.append(time.perf_counter() - start)
    return {"generate_s": min(generate_s), "forward_backward_s": min(train_s),
            "tokens_per_s": batch * new_tokens / min(generate_s)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--new_tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    path = smollm2_135m()
    tokenizer = AutoTokenizer.from_pretrained(path)
    fp32 = measure(path, torch.float32, tokenizer, args.batch, args.new_tokens, args.repeats)
    bf16 = measure(path, torch.bfloat16, tokenizer, args.batch, args.new_tokens, args.repeats)
    result = {
        "float32": fp32,
        "bfloat16": bf16,
        "ratio_bf16_over_fp32": {key: bf16[key] / fp32[key] for key in ("generate_s", "forward_backward_s")},
        "torch_threads": torch.get_num_threads(),
        "settings": vars(args),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
