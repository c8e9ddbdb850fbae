"""What the default demo prints: a progress bar with reward and loss, not TRL's metrics dict at every step."""

from __future__ import annotations

import json


def test_the_toy_demo_shows_reward_and_loss_on_its_bar_not_a_dict_per_step(tmp_path, capsys):
    from hf_meds_cliff.scripts.train_grpo import main, parse_args

    argv = [
        "--model_name_or_path", "toy", "--dataset_name", "toy", "--toy_train_size", "4", "--max_steps", "3",
        "--per_device_train_batch_size", "8", "--num_generations", "4", "--max_completion_length", "16",
        "--logging_steps", "1", "--use_cpu", "true", "--bf16", "false", "--report_to", "none",
        "--save_strategy", "no", "--output_dir", str(tmp_path / "out"),
    ]  # fmt: skip
    trainer = main(*parse_args(argv))
    printed = capsys.readouterr()
    lines = (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()
    assert sum("reward" in json.loads(line) for line in lines) == 3  # every step still logged
    assert "{'loss'" not in printed.err + printed.out and "'reward':" not in printed.err + printed.out
    bars = [c for c in trainer.callback_handler.callbacks if type(c).__name__ == "CompactProgressCallback"]
    assert len(bars) == 1
