"""FSDP2 driver for ``tests/test_meds_features.py::test_fsdp2_ranks_with_different_answer_counts``.

    ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 tests/multiproc/meds_fsdp2_driver.py \\
        --output_dir <dir> --scenarios 8,0:layers 8,3:body

A tiny Qwen3 is sharded with FSDP2 over 2 CPU (gloo) ranks: every decoder layer is a unit, so every
forward of the body is a collective, and the root holds the rest. With ``--layout body`` the decoder body
(embeddings + final norm) is also a unit that reshards after each forward: outside a forward the final norm
is then a ``DTensor`` shard.
In a scenario ``LOCATED:LAYOUT`` rank ``r`` gets 8 completions of which ``LOCATED[r]`` have an answer location
(the others: none), and runs MEDS's own feature forward with ``batch_size=2``, the chunk count agreed over ranks
as the trainer does. Each rank compares its features with an unsharded copy of the model and writes
``<layout>_rank<r>.json``.
Before the fix, the ranks ran 4 vs 0 (or 4 vs 2) forwards and hung until the collective timeout, and the
sharded final norm failed with "got mixed torch.Tensor and DTensor".
"""

from __future__ import annotations

import argparse
import copy
import json
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from hf_meds_cliff.meds.features import AnswerLocation, answer_logit_features, forward_chunk_count

ROWS = 8
BATCH_SIZE = 2


def tiny_qwen3():
    import transformers

    torch.manual_seed(0)  # the same weights on every rank
    config = transformers.Qwen3Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=128, tie_word_embeddings=False,
    )  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for module in model.modules():
            if "RMSNorm" in type(module).__name__:
                module.weight.uniform_(0.5, 1.5)  # the final norm matters
    return model.eval()


def rank_batch(rank: int, located: int):
    generator = torch.Generator().manual_seed(100 + rank)
    prompts, completions, locations = [], [], []
    for row in range(ROWS):
        prompt = torch.randint(
            2, 64, (int(torch.randint(3, 9, (1,), generator=generator)),), generator=generator
        )
        completion = torch.randint(
            2, 64, (int(torch.randint(4, 12, (1,), generator=generator)),), generator=generator
        )
        query = int(torch.randint(-1, len(completion) - 1, (1,), generator=generator))
        prompts.append(prompt.tolist())
        completions.append(completion.tolist())
        locations.append(
            AnswerLocation(query, query + 1, int(completion[query + 1])) if row < located else None
        )
    return prompts, completions, locations


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output_dir", required=True)
    parser.add_argument(
        "--scenarios", nargs="+", default=["8,0:layers"], help="LOCATED:LAYOUT, e.g. 8,3:body (layers|body)"
    )
    cli = parser.parse_args()

    dist.init_process_group("gloo", timeout=timedelta(seconds=45))
    for scenario in cli.scenarios:
        located, layout = scenario.split(":")
        run_scenario(int(located.split(",")[dist.get_rank()]), layout, Path(cli.output_dir))
    dist.destroy_process_group()


def run_scenario(located: int, layout: str, output_dir: Path) -> None:
    if layout not in ("layers", "body"):
        raise ValueError(f"unknown layout {layout!r}; use 'layers' or 'body'.")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = tiny_qwen3()
    reference = copy.deepcopy(model)
    mesh = init_device_mesh("cpu", (world,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    if layout == "body":
        fully_shard(model.model, mesh=mesh)  # embeddings + final norm: resharded after each forward
    fully_shard(model, mesh=mesh)  # root (LM head)
    with torch.no_grad():  # a root forward first, as generation does (FSDP2's lazy init picks the root)
        model(input_ids=torch.tensor([[3, 4, 5]]))

    prompts, completions, locations = rank_batch(rank, located)
    local_chunks = torch.tensor([forward_chunk_count(located, BATCH_SIZE)])
    dist.all_reduce(local_chunks, op=dist.ReduceOp.MAX)  # what MEDSGRPOTrainer._meds_num_chunks agrees on
    features, has_feature, logits = answer_logit_features(
        model, prompts, completions, locations, [1, 2, 3], batch_size=BATCH_SIZE, num_chunks=int(local_chunks)
    )
    ref_features, ref_has, ref_logits = answer_logit_features(
        reference, prompts, completions, locations, [1, 2, 3], batch_size=BATCH_SIZE
    )
    result = {
        "rank": rank,
        "num_chunks": int(local_chunks),
        "has_feature": has_feature.tolist(),
        "max_abs_logit_error": float((logits - ref_logits).abs().max()),
        "max_abs_feature_error": float((features - ref_features).abs().max()),
        "same_mask": bool(torch.equal(has_feature, ref_has)),
        "norm_is_sharded": hasattr(model.model.norm.weight, "full_tensor"),
    }
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / f"{layout}_rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()


if __name__ == "__main__":
    main()
