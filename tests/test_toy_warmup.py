"""Toy model and warm-up: loadable output, cache reuse, atomic writes, reproducibility, metrics."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from hf_meds_cliff.estimators import pass_at_k
from hf_meds_cliff.toy import (
    ToyModelConfig,
    build_toy_model,
    first_mistake_index,
    make_toy_dataset,
    warmup_toy_model,
)
from hf_meds_cliff.toy import warmup as warmup_module
from hf_meds_cliff.toy.task import ToyProblem
from hf_meds_cliff.toy.warmup import WarmupSettings, boxed_integer, supervised_batch

TINY = {
    "max_steps": 3,
    "eval_start_step": 2,
    "eval_every_steps": 1,
    "num_validation_problems": 4,
    "num_test_problems": 3,
    "num_samples": 2,
    "max_new_tokens": 6,
    "target_greedy_accuracy": 1.0,
    "model_config": ToyModelConfig(hidden_size=32, intermediate_size=64, head_dim=8),
    "num_threads": 1,
}


def test_build_toy_model_is_a_seeded_four_layer_qwen3(toy_tokenizer):
    model = build_toy_model(toy_tokenizer, seed=3)
    again = build_toy_model(toy_tokenizer, seed=3)
    assert model.config.model_type == "qwen3" and model.config.num_hidden_layers == 4
    assert model.config.vocab_size == len(toy_tokenizer)
    assert model.config.eos_token_id == toy_tokenizer.eos_token_id
    assert model.generation_config.do_sample is True
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    other = build_toy_model(toy_tokenizer, seed=4)
    assert not torch.equal(model.model.embed_tokens.weight, other.model.embed_tokens.weight)


def test_model_config_validation():
    with pytest.raises(ValueError, match="multiple of num_key_value_heads"):
        ToyModelConfig(num_attention_heads=4, num_key_value_heads=3)
    with pytest.raises(ValueError, match="head_dim must be even"):
        ToyModelConfig(head_dim=7)


def test_supervised_batch_masks_everything_but_solution_and_eos(toy_tokenizer):
    problems = [
        ToyProblem.from_operations(7, (("+", 5), ("*", 3))),
        ToyProblem.from_operations(2, (("-", 9),)),
    ]
    batch = supervised_batch(toy_tokenizer, problems)
    for row, problem in enumerate(problems):
        labels = batch["labels"][row]
        target = labels[labels != -100].tolist()
        assert target[-1] == toy_tokenizer.eos_token_id
        assert toy_tokenizer.decode(target[:-1]) == problem.solution
        length = int(batch["attention_mask"][row].sum())
        prompt = toy_tokenizer.decode(batch["input_ids"][row, : length - len(target)].tolist())
        assert prompt == f"<|im_start|>user\n{problem.question}<|im_end|>\n<|im_start|>assistant\n"
    assert batch["attention_mask"][1, -1].item() == 0  # the shorter row is right-padded


def test_pass_at_k_and_boxed_integer():
    assert pass_at_k(8, 0, 1) == 0.0
    assert pass_at_k(8, 2, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(8, 1, 8) == 1.0
    assert boxed_integer("\\boxed{3} then \\boxed{-12}.") == -12
    assert boxed_integer("\\boxed{x}") is None


def test_learning_rate_schedule():
    settings = WarmupSettings(max_steps=130, lr_warmup_steps=30, min_lr_ratio=0.1)
    factors = [warmup_module._learning_rate_factor(step, settings) for step in (0, 29, 30, 80, 130, 500)]
    assert factors == pytest.approx([1 / 30, 1.0, 1.0, 0.55, 0.1, 0.1])


def test_settings_validation_and_unknown_settings(tmp_path):
    with pytest.raises(ValueError, match="target_greedy_accuracy"):
        WarmupSettings(target_greedy_accuracy=1.5)
    with pytest.raises(ValueError, match="time_budget_s"):
        WarmupSettings(time_budget_s=0)
    with pytest.raises(TypeError, match="Unknown warm-up setting"):
        warmup_toy_model(tmp_path, learning_rat=1e-3)


def test_cache_key_covers_every_setting():
    base = WarmupSettings()
    assert base.cache_key() == WarmupSettings().cache_key()
    assert base.cache_key() != WarmupSettings(seed=1).cache_key()
    assert base.cache_key() != WarmupSettings(model=ToyModelConfig(hidden_size=32, head_dim=8)).cache_key()
    assert base.cache_key() != WarmupSettings(target_greedy_accuracy=0.6).cache_key()
    assert base.cache_key() == WarmupSettings(time_budget_s=5.0).cache_key()  # capped runs are never reused


@pytest.mark.slow
def test_short_warmup_writes_a_loadable_reusable_reproducible_policy(tmp_path, monkeypatch):
    path = warmup_toy_model(tmp_path / "policy", **TINY)
    metrics = json.loads((path / "warmup_metrics.json").read_text())
    assert metrics["steps"] == 3 and metrics["stop_reason"] == "max_steps"
    assert len(metrics["validation_history"]) == 2
    assert {"greedy_accuracy", "pass@1", "pass@2", "boxed_fraction"} <= set(metrics["test_split"])
    assert metrics["test_split"]["num_problems"] == 3

    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    assert model.config.num_hidden_layers == 4 and model.config.hidden_size == 32
    assert GenerationConfig.from_pretrained(path).do_sample is True
    prompt = tokenizer.apply_chat_template(
        make_toy_dataset("test", 1)["prompt"][0], tokenize=False, add_generation_prompt=True
    )
    output = model.generate(
        **tokenizer(prompt, return_tensors="pt", add_special_tokens=False), max_new_tokens=5
    )
    assert output.shape[1] > len(tokenizer(prompt, add_special_tokens=False)["input_ids"])

    # reused, not retrained
    def fail(*args, **kwargs):
        raise AssertionError("retrained a cached warm-up")

    with monkeypatch.context() as patch:
        patch.setattr(warmup_module, "_train_and_save", fail)
        assert warmup_toy_model(tmp_path / "policy", **TINY) == path

    # a folder holding another warm-up is not overwritten
    with pytest.raises(ValueError, match="not empty"):
        warmup_toy_model(tmp_path / "policy", **{**TINY, "max_steps": 4})

    # the same seed gives the same weights
    again = warmup_toy_model(tmp_path / "again", **TINY)
    reloaded = AutoModelForCausalLM.from_pretrained(again)
    for (name, a), b in zip(model.state_dict().items(), reloaded.state_dict().values()):
        assert torch.equal(a, b), name


def test_cache_folder_and_a_crash_leaves_no_partial_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_MEDS_CLIFF_CACHE", str(tmp_path / "cache"))

    def crash(settings, key, folder):
        (folder / "config.json").write_text("{}")
        raise RuntimeError("killed mid-training")

    monkeypatch.setattr(warmup_module, "_train_and_save", crash)
    with pytest.raises(RuntimeError, match="killed"):
        warmup_toy_model(**TINY)
    toy_cache = tmp_path / "cache" / "toy"
    assert [p.name for p in toy_cache.iterdir() if not p.name.endswith(".lock")] == []

    stop_reasons = ["time_budget", "max_steps"]
    trained = []

    def fake_train(settings, key, folder):  # the real training is covered above; here only the cache logic
        trained.append(key)
        (folder / "warmup_metrics.json").write_text(
            json.dumps({"cache_key": key, "stop_reason": stop_reasons.pop(0)})
        )

    monkeypatch.setattr(warmup_module, "_train_and_save", fake_train)
    tiny_settings = {k: v for k, v in TINY.items() if k not in ("model_config", "num_threads")}
    key = WarmupSettings(model=TINY["model_config"], **tiny_settings).cache_key()
    (toy_cache / f".{key}.tmp-killed").mkdir()  # what a SIGKILLed run leaves behind
    path = warmup_toy_model(**TINY)
    assert path == toy_cache / key
    assert [p.name for p in toy_cache.iterdir() if not p.name.endswith(".lock")] == [key]
    # a run cut short by the time cap is redone; a finished one is reused
    assert warmup_toy_model(**TINY) == path and warmup_toy_model(**TINY) == path
    assert trained == [key, key]
    assert json.loads((path / "warmup_metrics.json").read_text())["stop_reason"] == "max_steps"


@pytest.mark.slow
def test_cached_toy_policy_gives_mixed_groups_of_boxed_answers(toy_policy_path):
    metrics = json.loads((toy_policy_path / "warmup_metrics.json").read_text())
    test_metrics = metrics["test_split"]
    assert 0.0 < test_metrics["pass@1"] < test_metrics["pass@8"]
    model = AutoModelForCausalLM.from_pretrained(toy_policy_path)
    tokenizer = AutoTokenizer.from_pretrained(toy_policy_path)
    dataset = make_toy_dataset("test", 8, seed=0)
    questions = [row[0]["content"] for row in dataset["prompt"]]
    completions = warmup_module.generate_completions(
        model, tokenizer, questions, num_samples=8, do_sample=True, seed=1
    )
    correct_counts = []
    for question, answer, group in zip(questions, dataset["answer"], completions):
        correct = [boxed_integer(text) == int(answer) for text in group]
        correct_counts.append(sum(correct))
        for text, is_correct in zip(group, correct):
            if first_mistake_index(question, text) is None:
                assert is_correct, text  # a completion the checker passes has the right answer
    assert sum(boxed_integer(t) is not None for group in completions for t in group) >= 0.8 * 64
    assert any(0 < c < 8 for c in correct_counts), correct_counts


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "accuracy", "steps", "stop_reason"),
    [
        ({"max_steps": 5}, 1.0, 2, "target_greedy_accuracy"),  # first check at eval_start_step=2
        ({"max_steps": 5, "time_budget_s": 1e-9}, 0.0, 1, "time_budget"),
    ],
)
def test_stop_rules(tmp_path, monkeypatch, overrides, accuracy, steps, stop_reason):
    monkeypatch.setattr(warmup_module, "greedy_accuracy", lambda *args, **kwargs: accuracy)
    path = warmup_toy_model(tmp_path / "policy", **{**TINY, **overrides})
    metrics = json.loads((path / "warmup_metrics.json").read_text())
    assert (metrics["steps"], metrics["stop_reason"]) == (steps, stop_reason)


def test_progress_bar_leaves_the_cache_key_alone():
    """The progress display changed no result, so the cache key of the default warm-up (the policy every test,
    script and README number uses, cached under this key) must stay what it was."""
    assert warmup_module.WARMUP_CODE_VERSION == 1
    assert WarmupSettings().cache_key() == "449da3e03fe6f7df"


@pytest.mark.slow
def test_warmup_shows_progress_with_held_out_accuracy_and_no_deprecation_warning(
    tmp_path, capsys, monkeypatch
):
    """A newcomer's first run: a progress bar with the held-out accuracy on stderr (no logging set up), no
    deprecation warning from our code, and the same weights as a run without the bar."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shown = warmup_toy_model(tmp_path / "shown", **TINY)
    deprecations = [w for w in caught if issubclass(w.category, (DeprecationWarning, FutureWarning))]
    assert not deprecations, [f"{w.filename}:{w.lineno}: {w.message}" for w in deprecations]
    err = capsys.readouterr().err
    assert "Toy policy warm-up" in err and "3/3" in err
    assert "held-out greedy accuracy 0.00 (stops at 1.00)" in err and "test pass@1" in err

    import functools

    import tqdm.auto

    monkeypatch.setattr(tqdm.auto, "tqdm", functools.partial(tqdm.auto.tqdm, disable=True))
    hidden = warmup_toy_model(tmp_path / "hidden", **TINY)
    assert "Toy policy warm-up" not in capsys.readouterr().err
    shown_weights = AutoModelForCausalLM.from_pretrained(shown).state_dict()
    for name, value in AutoModelForCausalLM.from_pretrained(hidden).state_dict().items():
        assert torch.equal(value, shown_weights[name]), name
    assert (
        json.loads((shown / "warmup_metrics.json").read_text())["cache_key"]
        == json.loads((hidden / "warmup_metrics.json").read_text())["cache_key"]
    )


def test_toy_policy_variable_names_another_warmed_up_policy(tmp_path, monkeypatch):
    """``$HF_MEDS_CLIFF_TOY_POLICY`` replaces the cached warm-up wherever ``toy`` is resolved (fixture and scripts)."""
    from hf_meds_cliff.dapo import DAPOConfig
    from hf_meds_cliff.script_utils import parse_script_args, resolve_model_path
    from hf_meds_cliff.toy import toy_policy

    (tmp_path / "warmup_metrics.json").write_text("{}")
    monkeypatch.setenv("HF_MEDS_CLIFF_TOY_POLICY", str(tmp_path))
    assert toy_policy(seed=3) == tmp_path
    script_args, _, model_args = parse_script_args(DAPOConfig, "grpo", argv=[])
    assert model_args.model_name_or_path == "toy" and resolve_model_path(script_args, model_args) == str(
        tmp_path
    )
    monkeypatch.setenv("HF_MEDS_CLIFF_TOY_POLICY", str(tmp_path / "missing"))
    with pytest.raises(
        ValueError, match=r"HF_MEDS_CLIFF_TOY_POLICY='.*missing' is not a warmed-up toy policy.*--seed 1"
    ):
        toy_policy()


def test_vllm_toy_policy_only_widens_the_heads_and_has_its_own_cache_key(tmp_path, monkeypatch):
    """The vLLM variant (head_dim 32, accepted by vLLM's CPU attention and FlashAttention) changes nothing else about
    the model, warms up on its own short schedule under its own key, and leaves the studies' policy (and key) alone;
    ``$HF_MEDS_CLIFF_VLLM_TOY_POLICY`` names another one."""
    from dataclasses import replace

    from hf_meds_cliff.toy import VLLM_TOY_MODEL, ToyModelConfig, WarmupSettings, vllm_toy_policy
    from hf_meds_cliff.toy.warmup import VLLM_TOY_WARMUP

    assert ToyModelConfig().head_dim == 16 and VLLM_TOY_MODEL.head_dim == 32
    assert replace(VLLM_TOY_MODEL, head_dim=16) == ToyModelConfig()
    vllm_settings = WarmupSettings(model=VLLM_TOY_MODEL, **VLLM_TOY_WARMUP)
    assert vllm_settings.cache_key() != WarmupSettings().cache_key()
    assert vllm_settings.max_steps < WarmupSettings().max_steps

    (tmp_path / "warmup_metrics.json").write_text("{}")
    monkeypatch.setenv("HF_MEDS_CLIFF_VLLM_TOY_POLICY", str(tmp_path))
    assert vllm_toy_policy() == tmp_path
    monkeypatch.setenv("HF_MEDS_CLIFF_VLLM_TOY_POLICY", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match=r"HF_MEDS_CLIFF_VLLM_TOY_POLICY='.*missing' is not a warmed-up.*--vllm"):
        vllm_toy_policy()
