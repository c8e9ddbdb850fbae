"""Evaluation resume after a kill mid-batch gives exactly the samples of an uninterrupted run (per-sample seeds)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from hf_meds_cliff.evaluation.generation import PerRowSeededSampler, counter_uniform, sample_seed
from hf_meds_cliff.evaluation.runner import EvalArguments, run_evaluation


def test_per_row_sampler_draws_from_the_tempered_top_p_distribution():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, -3.0])
    rows = 40_000
    sampler = PerRowSeededSampler(range(rows), temperature=0.7, top_p=0.9)
    picks = sampler(torch.zeros((rows, 3), dtype=torch.long), logits.repeat(rows, 1)).argmax(dim=1)
    probabilities = torch.softmax(logits / 0.7, dim=0)
    kept = torch.cumsum(probabilities, 0) - probabilities < 0.9  # the nucleus: 3 tokens here
    expected = torch.where(kept, probabilities, 0.0) / probabilities[kept].sum()
    frequencies = torch.bincount(picks, minlength=5).double() / rows
    np.testing.assert_allclose(frequencies.numpy(), expected.numpy(), atol=0.01)
    assert frequencies[~kept].sum() == 0


def test_sampler_noise_depends_only_on_row_seed_step_and_token():
    seeds = torch.tensor([5, 9, 5])
    first = counter_uniform(seeds, step=3, vocab_size=7)
    torch.testing.assert_close(first[0], first[2], rtol=0, atol=0)  # same seed, other rows around it
    torch.testing.assert_close(counter_uniform(seeds[1:2], 3, 7)[0], first[1], rtol=0, atol=0)
    assert not torch.equal(first[0], first[1]) and not torch.equal(counter_uniform(seeds, 4, 7), first)
    assert bool(((first > 0) & (first < 1)).all())
    assert sample_seed(11, 2) != sample_seed(11, 3) and sample_seed(11, 2) != sample_seed(12, 2)


@pytest.mark.slow
def test_eval_resumed_after_a_kill_mid_batch_equals_an_uninterrupted_run(tmp_path, toy_policy_path):
    torch.set_num_threads(1)

    def arguments(folder, batch_size):
        return EvalArguments(
            model_name_or_path=str(toy_policy_path),
            output_dir=str(tmp_path / folder),
            benchmarks=["toy"],
            num_samples=3,
            max_problems=5,
            backend="transformers",
            batch_size=batch_size,  # 2 problems (6 rows) per generate call
            progress=False,
            verify_timeout=20,
        )

    run_evaluation(arguments("uninterrupted", 6))
    lines = (tmp_path / "uninterrupted" / "samples.jsonl").read_text().splitlines()
    # The kill: problem 0 complete, problem 1 (same batch) cut after one and a half samples. The resumed run then
    # batches problems [1, 2] and [3, 4] instead of [0, 1], [2, 3] and [4].
    (tmp_path / "resumed").mkdir()
    shutil.copy(tmp_path / "uninterrupted" / "eval_config.json", tmp_path / "resumed")
    (tmp_path / "resumed" / "samples.jsonl").write_text("\n".join(lines[:4]) + "\n" + lines[4][:50])
    run_evaluation(arguments("resumed", 6))
    run_evaluation(arguments("other_batch_size", 4))  # and batch sizes do not matter either

    def samples(folder):
        records = [
            json.loads(line) for line in (tmp_path / folder / "samples.jsonl").read_text().splitlines()
        ]
        return sorted((r["problem_id"], r["sample_index"], r["completion"], r["num_tokens"]) for r in records)

    expected = samples("uninterrupted")
    assert len(expected) == 15 and len({s[2] for s in expected}) > 3  # real sampling, not one repeated text
    assert samples("resumed") == expected
    assert samples("other_batch_size") == expected


def test_corrupt_eval_config_names_the_file_and_the_fix(tmp_path):
    (tmp_path / "eval_config.json").write_text('{"model_name_or_path": "toy", "num_sa')  # killed mid-write
    sample = {"benchmark": "toy", "problem_id": "p0", "sample_index": 0, "correct": True}
    (tmp_path / "samples.jsonl").write_text(json.dumps(sample) + "\n")  # results the config protects
    args = EvalArguments(model_name_or_path="toy", output_dir=str(tmp_path), progress=False)
    with pytest.raises(ValueError, match=r"eval_config.json is not valid JSON.*or pass --overwrite"):
        run_evaluation(args)
