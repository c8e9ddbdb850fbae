"""MEDSGRPOTrainer end to end on the toy world: penalties applied, metrics logged, resume, 2 processes."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import MixedGroupsReward, free_port, mix_script_rewards

from hf_meds_cliff.meds.config import MEDSConfig

REPO_ROOT = Path(__file__).resolve().parents[1]
DRIVER = REPO_ROOT / "tests" / "multiproc" / "meds_driver.py"

EXPECTED_METRICS = (
    "meds/frac_with_feature",
    "meds/num_without_feature",
    "meds/mean_penalty",
    "meds/frac_penalized",
    "meds/time_features_s",
    "meds/time_clustering_s",
    "meds/top1_eigen_ratio",
    "meds/clusters_per_key",
    "meds/noise_fraction",
    "meds/mean_cluster_size",
    "meds/max_cluster_size",
    "meds/memory_rows",
    "meds/advantage_shift",
    "meds/frac_groups_differentiated",
    "rewards/meds_penalty/mean",
)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """One torch thread: on the shared 2-core CI box two OpenMP threads spin against each other and every
    tiny matmul of the toy model gets 10-100x slower (measured: ~30 us vs 1-8 ms per 16x64x256 linear)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def exact_answer_reward(completions, answer, **kwargs):
    """1.0 when the last \\boxed{} integer equals the ground truth (the toy world's exact check)."""
    from hf_meds_cliff.data import completion_text
    from hf_meds_cliff.toy.warmup import boxed_integer

    return [1.0 if boxed_integer(completion_text(c)) == int(a) else 0.0 for c, a in zip(completions, answer)]


def _config(output_dir, **overrides) -> MEDSConfig:
    values = {
        "output_dir": str(output_dir),
        "use_cpu": True,
        "bf16": False,
        "seed": 0,
        "max_steps": 2,
        "learning_rate": 1e-3,
        "per_device_train_batch_size": 8,  # 2 prompts x 4 completions per step
        "num_generations": 4,
        "max_completion_length": 72,
        "temperature": 1.0,
        "beta": 0.0,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        "dataloader_num_workers": 0,
    }
    values.update(overrides)
    return MEDSConfig(**values)


def _trainer(policy_path, args, num_prompts=2, memory_groups=None, correctness=exact_answer_reward):
    """MEDS on ``num_prompts`` toy prompts; the exact reward made to mix every group (``MixedGroupsReward``), so
    every step has non-zero advantages and every prompt's memory gains a wrong row each round, whatever this
    machine's warm-up solves."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_meds_cliff.meds.trainer import MEDSGRPOTrainer
    from hf_meds_cliff.toy import make_toy_dataset

    tokenizer = AutoTokenizer.from_pretrained(policy_path)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(policy_path)
    dataset = make_toy_dataset("train", num_prompts, seed=0)  # few prompts: they recur, the memory hits
    if memory_groups is not None:  # distinct prompts sharing memory keys through the id column
        dataset = dataset.add_column(
            "memory_group", [f"group-{i % memory_groups}" for i in range(num_prompts)]
        )
    return MEDSGRPOTrainer(
        model=model,
        reward_funcs=[MixedGroupsReward(correctness, args.num_generations)],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )


def _assert_penalised_and_logged(trainer, parameters_before, feature_source):
    logs = [record for record in trainer.state.log_history if "meds/frac_penalized" in record]
    assert logs, "no MEDS metrics were logged"
    for key in EXPECTED_METRICS:
        assert key in logs[-1], f"missing metric {key}"
    # The first generation meets an empty memory; later ones are penalised by the earlier clusters.
    assert logs[0]["meds/frac_penalized"] == 0.0
    assert logs[-1]["meds/frac_penalized"] > 0.0
    assert logs[-1]["rewards/meds_penalty/mean"] < 0.0
    assert logs[-1]["meds/frac_with_feature"] > 0.0

    # The penalty (target "wrong") of every row of the last batch, from its cluster size and its correctness:
    # min(α·log(|C|+1), β) on an incorrect row with a feature, 0 on a correct one and on one without a feature.
    sizes, penalties = trainer.meds_last_cluster_sizes, trainer.meds_last_penalties
    args = trainer.args
    correctness_name = trainer.reward_func_names[args.meds_correctness_reward_index]
    is_correct = np.array(list(trainer._logs["rewards"][correctness_name])) >= args.meds_correctness_threshold
    assert len(is_correct) == len(sizes) == len(penalties)
    has_feature = sizes >= 0
    expected = np.where(
        has_feature & ~is_correct,
        -np.minimum(args.meds_alpha * np.log(np.maximum(sizes, 0) + 1.0), args.meds_beta),
        0.0,
    )
    assert (expected < 0).any(), "no incorrect row met its memory in the last batch"
    np.testing.assert_allclose(penalties, expected, rtol=1e-6, atol=0)
    assert trainer.meds_memory.num_rows == sum(int(r["meds/rows"]) for r in logs)
    assert trainer._meds_last_feature_source == feature_source

    # A group is differentiated when its wrong rows got different penalties; only then can MEDS move advantages
    # under group scaling, and then it must.
    groups = np.arange(len(penalties)) // trainer.num_generations
    differentiated = [
        np.ptp(penalties[(groups == g) & ~is_correct]) > 1e-9
        if ((groups == g) & ~is_correct).sum() > 1
        else False
        for g in np.unique(groups)
    ]
    assert logs[-1]["meds/frac_groups_differentiated"] == pytest.approx(np.mean(differentiated))
    for record in logs:
        if record["meds/frac_groups_differentiated"] > 0:
            assert record["meds/advantage_shift"] > 0.0, record

    # The diagnostics' advantage formula reproduces TRL's own advantages of the last generation batch.
    from hf_meds_cliff.meds.diagnostics import trl_advantages

    columns = np.array([list(trainer._logs["rewards"][name]) for name in trainer.reward_func_names]).T
    group_ids = np.arange(len(columns)) // trainer.num_generations
    weights = trainer.reward_weights.numpy()
    with_penalty = trl_advantages(columns, weights, group_ids, trainer.scale_rewards)
    np.testing.assert_allclose(with_penalty, list(trainer._logs["advantages"]), rtol=1e-5, atol=1e-5)
    # ... so the advantage shift of the last batch is TRL's advantages with and without the penalty column.
    without = columns.copy()
    without[:, trainer.reward_func_names.index("meds_penalty")] = 0.0
    shift = np.abs(with_penalty - trl_advantages(without, weights, group_ids, trainer.scale_rewards)).mean()
    assert logs[-1]["meds/advantage_shift"] == pytest.approx(shift, rel=1e-5, abs=1e-6)
    if (
        trainer.scale_rewards != "group"
    ):  # no group std to absorb it: a penalised mixed group moves advantages
        for record in logs:
            if record["meds/frac_penalized"] > 0:
                assert record["meds/advantage_shift"] > 0.0, record

    changed = [
        n for n, p in trainer.model.named_parameters() if not torch.equal(p.detach(), parameters_before[n])
    ]
    assert changed, "no parameter changed"


@pytest.mark.slow
def test_train_meds_script_grpo_end_to_end(toy_policy_path, tmp_path, monkeypatch):
    """scripts/train_meds.py (toy recipe, loss grpo, 2 steps): penalties applied, outputs written."""
    import importlib.util

    from transformers import AutoModelForCausalLM

    from hf_meds_cliff.script_utils import parse_script_args

    mix_script_rewards(monkeypatch)  # the test is about the script, not about what this policy solves
    spec = importlib.util.spec_from_file_location("train_meds", REPO_ROOT / "scripts" / "train_meds.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    argv = [
        "--model_name_or_path", str(toy_policy_path), "--dataset_name", "toy", "--toy_train_size", "2",
        "--use_cpu", "true", "--bf16", "false", "--report_to", "none", "--save_strategy", "no",
        "--max_steps", "2", "--per_device_train_batch_size", "8", "--num_generations", "4",
        "--max_completion_length", "72", "--learning_rate", "1e-3", "--loss_type", "grpo",
        "--logging_steps", "1", "--output_dir", str(tmp_path / "out"),
    ]  # fmt: skip
    trainer = script.main(*parse_script_args(MEDSConfig, "meds", argv=argv))
    initial = dict(AutoModelForCausalLM.from_pretrained(toy_policy_path).named_parameters())
    _assert_penalised_and_logged(trainer, {n: p.detach() for n, p in initial.items()}, "forward")
    for name in ("metrics.jsonl", "meds_metrics.png", "meds_memory", "model.safetensors"):
        assert (tmp_path / "out" / name).exists(), name
    assert script.plot_meds_metrics([], tmp_path / "none.png") is None


@pytest.mark.slow
def test_dr_grpo_with_two_iterations_reuses_trl_forward(toy_policy_path, tmp_path):
    """num_iterations=2: TRL runs its old-log-prob forward, and the features come from it (hooks): they equal
    MEDS's own forward over the same prompts and completions on the same weights."""
    from hf_meds_cliff.meds.features import answer_logit_features

    trainer = _trainer(toy_policy_path, _config(tmp_path, loss_type="dr_grpo", num_iterations=2, max_steps=4))
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    recomputed = []
    local_features = trainer._meds_local_features

    def features_and_recomputation(completion_ids_list):
        # Called after TRL's forward and before any optimizer step of this batch: the weights of that forward.
        prompt_ids, locations = list(trainer._meds_prompt_ids), list(trainer._meds_locations)
        features, has_feature, source = local_features(completion_ids_list)
        with torch.no_grad():
            again, again_has_feature, _ = answer_logit_features(
                trainer.model, prompt_ids, completion_ids_list, locations, trainer._meds_layer_indices,
                pad_token_id=trainer.processing_class.pad_token_id, logit_lens=trainer.args.meds_logit_lens,
                use_layer_diff=trainer.args.meds_use_layer_diff,
            )  # fmt: skip
        recomputed.append((source, features, has_feature, again, again_has_feature))
        return features, has_feature, source

    trainer._meds_local_features = features_and_recomputation
    trainer.train()
    _assert_penalised_and_logged(trainer, before, "captured")
    assert len(recomputed) == 2  # 4 steps, a generation every 2 (num_iterations=2)
    for source, features, has_feature, again, again_has_feature in recomputed:
        assert source == "captured"
        assert has_feature.any() and torch.equal(has_feature, again_has_feature)
        torch.testing.assert_close(features[has_feature], again[has_feature], rtol=1e-4, atol=1e-5)


def solves_everything(completions, **kwargs):
    return [1.0] * len(completions)


def solves_nothing(completions, **kwargs):
    return [0.0] * len(completions)


@pytest.mark.slow
@pytest.mark.parametrize("verdict", [solves_everything, solves_nothing])
def test_trainer_set_up_has_signal_whatever_the_policy_solves(toy_policy_path, tmp_path, verdict):
    """The guard: the set-up above gives learning signal even where the policy's groups are all right or
    all wrong (a warm-up that stopped much later or earlier than this machine's): the dr_grpo run's checks hold."""
    trainer = _trainer(
        toy_policy_path,
        _config(tmp_path, loss_type="dr_grpo", num_iterations=2, max_steps=4),
        correctness=verdict,
    )
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train()
    _assert_penalised_and_logged(trainer, before, "captured")
    reward = trainer.reward_funcs[0]
    assert reward.flipped == 2 * 2  # every group of both generation rounds was uniform, and made mixed


@pytest.mark.slow
def test_dapo_run_and_resume_give_the_same_cluster_sizes(toy_policy_path, tmp_path):
    """The third loss type (dapo, batch-scaled rewards) end to end, then checkpoint -> resume equality, resumed in
    a later epoch: 4 prompts at 2 a step, so checkpoint-2 ends the first epoch and step 3 opens the second (the
    trainers' sampler gives it the second epoch's order, where TRL's own would restart at the first)."""
    common = {
        "loss_type": "dapo", "scale_rewards": "batch", "max_steps": 3, "save_strategy": "steps", "save_steps": 2,
        "meds_prompt_id_column": "memory_group",
    }  # fmt: skip
    uninterrupted = _trainer(
        toy_policy_path, _config(tmp_path / "a", **common), num_prompts=4, memory_groups=2
    )
    before = {name: p.detach().clone() for name, p in uninterrupted.model.named_parameters()}
    uninterrupted.train()
    _assert_penalised_and_logged(uninterrupted, before, "forward")
    checkpoint = tmp_path / "a" / "checkpoint-2"
    assert (checkpoint / "meds_memory").is_dir()

    # Resume from a copy, so the uninterrupted run's later files cannot leak in.
    shutil.copytree(checkpoint, tmp_path / "b" / "checkpoint-2")
    resumed = _trainer(toy_policy_path, _config(tmp_path / "b", **common), num_prompts=4, memory_groups=2)
    resumed.train(resume_from_checkpoint=str(tmp_path / "b" / "checkpoint-2"))

    assert resumed.state.global_step == 3
    assert (uninterrupted.meds_last_cluster_sizes > 0).any(), "the resumed step must meet a non-empty memory"
    np.testing.assert_array_equal(resumed.meds_last_cluster_sizes, uninterrupted.meds_last_cluster_sizes)
    np.testing.assert_array_equal(resumed.meds_last_penalties, uninterrupted.meds_last_penalties)
    assert resumed.meds_memory.state_equal(uninterrupted.meds_memory)
    # meds_summary() covers the whole run: the totals of steps 1-2 came back from the checkpoint
    assert sum(uninterrupted.meds_totals.values()) > 0
    assert resumed.meds_totals == uninterrupted.meds_totals
    assert resumed.meds_summary() == uninterrupted.meds_summary()


def test_missing_or_damaged_meds_totals_resume_with_a_warning(toy_policy_path, tmp_path, caplog):
    import logging

    trainer = _trainer(toy_policy_path, _config(tmp_path / "run"))
    trainer.meds_totals.update({"groups_mixed": 3})
    checkpoint = tmp_path / "checkpoint-1"
    checkpoint.mkdir()
    for content in (None, '["not", "counts"]', '{"groups_mixed": true}'):
        if content is not None:
            (checkpoint / "meds_totals.rank0.json").write_text(content)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="hf_meds_cliff"):
            trainer._meds_load_totals(str(checkpoint))
        assert "MEDS's totals of this process not restored" in caplog.text
        assert "meds_summary() counts from this resume on" in caplog.text
        assert trainer.meds_totals == {"groups_mixed": 3}
    (checkpoint / "meds_totals.rank0.json").write_text('{"groups_mixed": 5, "groups_revisited": 2}')
    trainer._meds_load_totals(str(checkpoint))
    assert trainer.meds_totals == {"groups_mixed": 5, "groups_revisited": 2}


def test_config_validation_names_the_bad_value(tmp_path):
    with pytest.raises(ValueError, match="meds_penalty_target='bad'"):
        _config(tmp_path, meds_penalty_target="bad")
    with pytest.raises(ValueError, match="meds_alpha=-1"):
        _config(tmp_path, meds_alpha=-1)
    with pytest.raises(ValueError, match="meds_min_cluster_size=1"):
        _config(tmp_path, meds_min_cluster_size=1)
    with pytest.raises(ValueError, match="meds_use_layer_diff"):
        _config(tmp_path, meds_use_layer_diff=True, meds_num_layers=1)
    with pytest.raises(ValueError, match="meds_noise_policy='paper'"):
        _config(tmp_path, meds_noise_policy="paper")


def test_trainer_rejects_bad_setup(toy_policy_path, tmp_path):
    from trl import GRPOConfig

    from hf_meds_cliff.meds.trainer import MEDSGRPOTrainer

    with pytest.raises(TypeError, match="needs a MEDSConfig, got GRPOConfig"):
        MEDSGRPOTrainer(
            model=str(toy_policy_path),
            reward_funcs=[exact_answer_reward],
            args=GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False),
        )
    from datasets import Dataset

    # Checked against TRL's reward columns (the user's functions, then any environment-owned reward), so after
    # GRPOTrainer's own checks (a train_dataset is required without an environment_factory).
    with pytest.raises(ValueError, match=r"meds_correctness_reward_index=1 but only 1 reward function\(s\)"):
        MEDSGRPOTrainer(
            model=str(toy_policy_path),
            reward_funcs=[exact_answer_reward],
            args=_config(tmp_path, meds_correctness_reward_index=1),
            train_dataset=Dataset.from_list([{"prompt": "1+1=", "answer": "2"}]),
        )


def _torchrun(arguments: list[str]) -> subprocess.CompletedProcess:
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    if not Path(torchrun).exists():
        pytest.skip("torchrun is not available")
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [torchrun, "--nproc_per_node", "2", "--master_port", str(free_port()), str(DRIVER), *arguments]
    completed = subprocess.run(
        command, check=False, env=env, capture_output=True, text=True, timeout=600, cwd=REPO_ROOT
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    return completed


def _load_driver():
    spec = importlib.util.spec_from_file_location("meds_driver", DRIVER)
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    return driver


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_processes_match_one_process(toy_policy_path, tmp_path):
    """Groups split across 2 CPU processes, the memory split by key between them: the same cluster sizes as one
    process, and the saved halves read back as the one process's memory."""
    from hf_meds_cliff.meds.memory import ErrorMemory

    out = tmp_path / "np2"
    _torchrun(["--policy", str(toy_policy_path), "--output_dir", str(out), "--train"])
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]

    # The 1-process reference: the same driver code in this process (world size 1).
    driver = _load_driver()
    reference_trainer = driver.build_trainer(str(toy_policy_path), tmp_path / "np1", 1)
    reference = driver.run_fixed_batches(reference_trainer, save_to=tmp_path / "np1" / "memory_fixed")
    assert type(reference_trainer.meds_memory).__name__ == "ErrorMemory"

    assert reference["world_size"] == 1
    assert any(size > 0 for step in reference["cluster_sizes"] for size in step), (
        "the fixed batch never hit memory"
    )
    for rank_result in ranks:
        assert rank_result["world_size"] == 2
        assert rank_result["cluster_sizes"] == reference["cluster_sizes"]
        np.testing.assert_allclose(rank_result["penalties"], reference["penalties"], rtol=1e-6, atol=1e-7)
        assert rank_result["fixed_memory_rows"] == reference["fixed_memory_rows"]
    # Each rank saved its shard; read together they are the whole memory: the same rows, snippets and notes.
    halves = ErrorMemory.load(out / "memory_fixed")
    assert json.loads((out / "memory_fixed" / "meds_memory.json").read_text())["num_shards"] == 2
    assert halves.fingerprint() == ranks[0]["fingerprint_fixed"]
    contents, expected = driver.memory_contents(halves), driver.memory_contents(reference_trainer.meds_memory)
    assert len(contents["stored_features"]) == len(expected["stored_features"])
    for rows, reference_rows in zip(contents["stored_features"], expected["stored_features"]):
        np.testing.assert_allclose(rows, reference_rows, atol=1e-5)
    # Snippets and problem notes are gathered like the features: the owner of each key stores them.
    assert contents["snippets"] == expected["snippets"] and contents["notes"] == expected["notes"]
    assert all(note and note.startswith("Compute") for note in expected["notes"])
    assert all(s is None or s[1] == 1 for rows in expected["snippets"] for s in rows)
    assert any(s is not None for rows in expected["snippets"] for s in rows)
    rank0, rank1 = ranks
    assert rank0["fingerprint_fixed"] == rank1["fingerprint_fixed"]
    assert rank0["fingerprint_train"] == rank1["fingerprint_train"]
    assert rank0["train_memory_rows"] > reference["fixed_memory_rows"]
    # one memory per job: each rank held only its keys' rows
    assert 0 < rank0["local_train_rows"] < rank0["train_memory_rows"]
    assert rank0["local_train_rows"] + rank1["local_train_rows"] == rank0["train_memory_rows"]

    # The checkpoints of the 2-process run (save_steps=1, save_total_limit=1): the last one is complete, and a
    # 1-process trainer resumes its memory through the trainer's own hook (2 -> 1 processes: re-sharded).
    checkpoints = sorted(p.name for p in (out / "trainer").iterdir() if p.name.startswith("checkpoint-"))
    assert checkpoints == ["checkpoint-2"]
    from hf_meds_cliff.checkpointing import latest_complete_checkpoint

    resumed = driver.build_trainer(str(toy_policy_path), tmp_path / "np1-resumed", 1)
    assert latest_complete_checkpoint(out / "trainer", resumed._resume_method_files()).name == "checkpoint-2"
    resumed.create_optimizer_and_scheduler(num_training_steps=2)  # what train() does before it loads them
    resumed._load_optimizer_and_scheduler(str(out / "trainer" / "checkpoint-2"))
    assert resumed.meds_memory.fingerprint() == rank0["fingerprint_train"]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_one_process_checkpoint_resumes_on_two_processes(toy_policy_path, tmp_path):
    """1 -> 2 processes: a memory saved by one process is split over two by the trainer's resume hook, and the
    next steps give the sizes the one process gives."""
    driver = _load_driver()
    single = driver.build_trainer(str(toy_policy_path), tmp_path / "np1", 1)
    driver.run_fixed_batches(single)
    checkpoint = tmp_path / "checkpoint-3"
    single.meds_memory.save(checkpoint / "meds_memory")
    saved_fingerprint, saved_rows = single.meds_memory.fingerprint(), single.meds_memory.num_rows
    continued = driver.run_fixed_batches(single)  # the same prompts again: every key has stored rows

    out = tmp_path / "np2"
    _torchrun(["--policy", str(toy_policy_path), "--output_dir", str(out), "--resume_from", str(checkpoint)])
    for rank in range(2):
        result = json.loads((out / f"rank{rank}.json").read_text())
        assert result["resumed_rows"] == saved_rows and result["resumed_fingerprint"] == saved_fingerprint
        assert result["cluster_sizes"] == continued["cluster_sizes"]
        assert any(size > 0 for step in result["cluster_sizes"] for size in step)
