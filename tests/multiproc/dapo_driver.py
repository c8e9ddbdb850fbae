"""DAPO dynamic sampling under 2 processes (groups split across ranks), run by tests/test_dapo.py:

    ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 tests/multiproc/dapo_driver.py OUT.json

Each rank records the batches it trained on; rank 0 writes what both ranks saw.
"""

import json
import sys
import tempfile

import torch
from accelerate.utils import gather_object
from datasets import Dataset
from transformers import AutoTokenizer

from hf_meds_cliff.dapo import DAPOConfig, DAPOTrainer
from hf_meds_cliff.toy.model import build_toy_model
from hf_meds_cliff.toy.tokenizer import build_toy_tokenizer

torch.set_num_threads(1)


def parity_reward(completions, **kwargs):
    return [float(len(c[0]["content"]) % 2 == 0) for c in completions]


def main(out_path: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        tokenizer = build_toy_tokenizer(folder)
        build_toy_model(tokenizer, seed=0).save_pretrained(folder)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        tokenizer.padding_side = "left"
        dataset = Dataset.from_dict(
            {"prompt": [[{"role": "user", "content": f"Compute {i} + 1."}] for i in range(64)]}
        )
        args = DAPOConfig(
            output_dir=folder,
            use_cpu=True,
            bf16=False,
            max_steps=2,
            per_device_train_batch_size=6,
            num_generations=4,
            max_completion_length=8,
            logging_steps=1,
            report_to="none",
            save_strategy="no",
            dynamic_sampling=True,
            seed=0,
        )
        trainer = DAPOTrainer(
            model=folder,
            reward_funcs=parity_reward,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
        )
        batches = []
        original = DAPOTrainer._generate_and_score_completions

        def spy(self, inputs):
            output = original(self, inputs)
            batches.append(
                {
                    "rows": int(output["completion_ids"].shape[0]),
                    "advantages": output["advantages"].tolist(),
                    # Each row's prompt tokens (padding dropped): the test checks the groups are whole.
                    "prompts": [
                        ids[mask.bool()].tolist()
                        for ids, mask in zip(output["prompt_ids"], output["prompt_mask"])
                    ],
                    "num_items_in_batch": float(output["num_items_in_batch"]),
                    "mask_sum": float(output["completion_mask"].sum()),
                }
            )
            return output

        DAPOTrainer._generate_and_score_completions = spy
        trainer.train()
        rounds = [
            r["dynamic_sampling/rounds"] for r in trainer.state.log_history if "dynamic_sampling/rounds" in r
        ]
        everything = gather_object(
            [{"rank": trainer.accelerator.process_index, "batches": batches, "rounds": rounds}]
        )
        if trainer.accelerator.is_main_process:
            with open(out_path, "w") as handle:
                json.dump(everything, handle)
        # destroys the process group: a rank that exits with it alive can abort in gloo's teardown
        # ("terminate called without an active exception"), failing a run whose results are written
        trainer.accelerator.wait_for_everyone()
        trainer.accelerator.end_training()


if __name__ == "__main__":
    main(sys.argv[1])
