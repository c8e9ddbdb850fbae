"""Reward models and every other per-reward-function setting of TRL 1.16, with MEDS's own penalty column.

``MEDSGRPOTrainer`` appends a ``meds_penalty`` reward function to the user's. Everything TRL keeps per reward function
must then get an entry for it, without the user counting it: ``reward_weights`` (1.0), ``reward_processing_classes``
(``None``: TRL ignores it for a callable), ``reward_func_names``, the async split, the per-function metrics, and both
``multi_objective_aggregation`` modes. A TRL user with a reward model (a sequence-classification checkpoint and its
own tokenizer) next to a 0/1 correctness function must be able to swap ``GRPOTrainer`` for either of ours.

No downloads: the reward model is a tiny ``Qwen3ForSequenceClassification`` saved to ``tmp_path``, with a tokenizer of
its own whose token ids differ from the policy's (the toy tokenizer with other word tokens), so scores computed with
the wrong tokenizer differ and the test can tell which one TRL used.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from helpers import MixedGroupsReward, needs_qwen_tokenizer

NUM_GENERATIONS = 4
RM_WORD_TOKENS = ("answer", "boxed")
"""The reward model's tokenizer: the toy tokenizer with other word tokens, so every character id is shifted."""


@pytest.fixture(autouse=True)
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def build_reward_model(path, with_tokenizer: bool = False):
    """A tiny ``Qwen3ForSequenceClassification`` (num_labels=1) saved at ``path``; returns its tokenizer.

    Without ``with_tokenizer`` the folder holds no tokenizer, so TRL cannot load one itself: only the user's
    ``reward_processing_classes`` entry can reach the model."""
    from transformers import Qwen3Config, Qwen3ForSequenceClassification

    from hf_meds_cliff.toy import build_toy_tokenizer

    tokenizer = build_toy_tokenizer(word_tokens=RM_WORD_TOKENS)
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=0.5,  # scores spread enough to tell two tokenisations apart
    )
    Qwen3ForSequenceClassification(config).save_pretrained(str(path))
    if with_tokenizer:
        tokenizer.save_pretrained(str(path))
    return tokenizer


@pytest.fixture(scope="module")
def reward_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("reward_model")
    return path, build_reward_model(path)


@pytest.fixture(scope="module")
def policy_tokenizer():
    from hf_meds_cliff.toy import build_toy_tokenizer

    return build_toy_tokenizer()


def correct(completions, answer, **kwargs):
    """The user's 0/1 correctness: the last \\boxed{} holds the answer."""
    from hf_meds_cliff.toy.warmup import boxed_integer

    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [1.0 if boxed_integer(t) == int(a) else 0.0 for t, a in zip(texts, answer)]


def user_dataset(num_questions: int = 2):
    """The user's own data: chat prompts and an ``answer`` column (toy arithmetic, so a teacher can check it)."""
    from datasets import Dataset

    from hf_meds_cliff.toy import iter_problems

    stream = iter_problems("train", 0, unique=True)
    problems = [next(stream) for _ in range(num_questions)]
    rows = [{"prompt": [{"role": "user", "content": p.question}], "answer": str(p.answer)} for p in problems]
    return Dataset.from_list(rows * 16)


def _config(kind: str, output_dir, **overrides):
    from trl import GRPOConfig

    from hf_meds_cliff import CliffConfig, MEDSConfig

    values = {
        "output_dir": str(output_dir),
        "use_cpu": True,
        "bf16": False,
        "seed": 0,
        "max_steps": 2,
        "learning_rate": 1e-3,
        "per_device_train_batch_size": 2 * NUM_GENERATIONS,
        "num_generations": NUM_GENERATIONS,
        "max_completion_length": 48,
        "beta": 0.0,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
        **overrides,
    }
    return {"grpo": GRPOConfig, "meds": MEDSConfig, "cliff": CliffConfig}[kind](**values)


def _trainer_class(kind: str):
    from trl import GRPOTrainer

    from hf_meds_cliff import CliffGRPOTrainer, MEDSGRPOTrainer

    return {"grpo": GRPOTrainer, "meds": MEDSGRPOTrainer, "cliff": CliffGRPOTrainer}[kind]


def _build(kind, model, reward_funcs, args, *positional, **kwargs):
    extra = {}
    if kind == "cliff":  # the user's own teacher for their data (the exact step chain of toy arithmetic)
        from test_trl_compat_matrix import ChainTeacher

        extra = {"teacher": ChainTeacher()}
    return _trainer_class(kind)(model, reward_funcs, args, *positional, **kwargs, **extra)


def _random_policy(tokenizer):
    from hf_meds_cliff.toy.model import build_toy_model

    return build_toy_model(tokenizer, seed=0)


# ------------------------------------------------------------------------------------------------
# Construction: every form of reward_processing_classes GRPOTrainer accepts
# ------------------------------------------------------------------------------------------------

FORMS = ("list", "tuple", "positional", "single", "none_loaded_by_trl")


@pytest.mark.parametrize("kind", ["grpo", "meds", "cliff"])
@pytest.mark.parametrize("form", FORMS)
def test_reward_processing_classes_forms(kind, form, reward_model, policy_tokenizer, tmp_path):
    path, rm_tokenizer = reward_model
    if form == "tuple":
        pytest.skip("GRPOTrainer (and MEDS and Cliff, which pass it on) wraps a tuple as one processing class")
    if form == "none_loaded_by_trl":
        path = tmp_path / "rm_with_tokenizer"
        rm_tokenizer = None
        build_reward_model(path, with_tokenizer=True)
    reward_funcs = [correct, str(path)]
    classes = {
        "list": [None, rm_tokenizer],
        "tuple": (None, rm_tokenizer),
        "positional": [None, rm_tokenizer],
        "single": rm_tokenizer,
        "none_loaded_by_trl": None,
    }[form]
    if form == "single":  # one processing class is for one reward function: the reward model alone
        reward_funcs = str(path)
    args = _config(kind, tmp_path / "out")
    model = _random_policy(policy_tokenizer)
    dataset = user_dataset()
    if form == "positional":  # (train_dataset, eval_dataset, processing_class, reward_processing_classes)
        trainer = _build(kind, model, reward_funcs, args, dataset, None, policy_tokenizer, classes)
    else:
        trainer = _build(
            kind, model, reward_funcs, args, train_dataset=dataset, processing_class=policy_tokenizer,
            reward_processing_classes=classes,
        )  # fmt: skip
    rm_index = 0 if form == "single" else 1
    assert len(trainer.reward_processing_classes) == len(trainer.reward_funcs) == len(trainer.reward_func_names)
    assert len(trainer.reward_weights) == len(trainer.reward_funcs)
    reward_model_instance = trainer.reward_funcs[rm_index]
    assert isinstance(reward_model_instance, torch.nn.Module)
    loaded = trainer.reward_processing_classes[rm_index]
    if rm_tokenizer is not None:
        assert loaded is rm_tokenizer  # the user's processing class reaches its reward model
    else:  # TRL loaded the tokenizer saved with the model (its word token "answer" is not in the policy's)
        assert "answer" in loaded.get_vocab() and "answer" not in policy_tokenizer.get_vocab()
    assert reward_model_instance.config.pad_token_id == loaded.pad_token_id
    if kind == "meds":
        assert trainer.reward_func_names[-1] == "meds_penalty"
        assert trainer.reward_processing_classes[trainer._meds_penalty_index] is None
        assert trainer.reward_weights.tolist() == [1.0] * len(trainer.reward_funcs)
    else:
        assert "meds_penalty" not in trainer.reward_func_names


@pytest.mark.parametrize("kind", ["grpo", "meds"])
def test_mismatched_reward_processing_classes_are_refused(kind, reward_model, policy_tokenizer, tmp_path):
    """Too many or too few entries: TRL's error for GRPO; for MEDS one that counts only the user's functions."""
    path, rm_tokenizer = reward_model
    args = _config(kind, tmp_path / "out")
    for classes, count in (([None, rm_tokenizer, None], 3), ([rm_tokenizer], 1), (rm_tokenizer, 1)):
        expected = rf"reward processing classes \({count}\) must match the number of reward functions \(2\)"
        with pytest.raises(ValueError, match=expected):
            _build(
                kind, _random_policy(policy_tokenizer), [correct, str(path)], args, train_dataset=user_dataset(),
                processing_class=policy_tokenizer, reward_processing_classes=classes,
            )  # fmt: skip


def test_meds_refuses_a_user_reward_named_like_its_penalty(policy_tokenizer, tmp_path):
    def meds_penalty(completions, **kwargs):
        return [0.0] * len(completions)

    with pytest.raises(ValueError, match="named 'meds_penalty', the name of MEDS's own penalty column"):
        _build(
            "meds", _random_policy(policy_tokenizer), [correct, meds_penalty], _config("meds", tmp_path),
            train_dataset=user_dataset(), processing_class=policy_tokenizer,
        )  # fmt: skip


# ------------------------------------------------------------------------------------------------
# Training: the user's script with a reward model, for all three trainers
# ------------------------------------------------------------------------------------------------


def _reward_model_scores(trainer, rm_index: int, tokenizer) -> np.ndarray:
    """The reward model's scores of the last logged batch, recomputed as TRL does with ``tokenizer``."""
    from trl.data_utils import apply_chat_template

    model = trainer.accelerator.unwrap_model(trainer.reward_funcs[rm_index])
    texts = [
        apply_chat_template({"messages": prompt + completion}, tokenizer)["text"]
        for prompt, completion in zip(trainer._logs["prompt"], trainer._logs["completion"])
    ]
    inputs = tokenizer(text=texts, return_tensors="pt", padding=True, padding_side="right", add_special_tokens=False)
    with torch.inference_mode():
        return model(**inputs).logits[:, 0].double().numpy()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["grpo", "meds", "cliff"])
def test_user_script_with_a_reward_model_trains(kind, toy_policy_path, reward_model, tmp_path):
    """Done when: ``reward_funcs=[correct, "path/to/rm"]``, ``reward_processing_classes=[None, rm_tok]``
    builds and trains with GRPOTrainer, MEDSGRPOTrainer and CliffGRPOTrainer; the reward model scores with the user's
    tokenizer. The correctness reward is made to mix every group (``MixedGroupsReward``): learning signal, MEDS
    memory rows and Cliff groups whatever this machine's warm-up samples."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, rm_tokenizer = reward_model
    tokenizer = AutoTokenizer.from_pretrained(toy_policy_path)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(toy_policy_path)
    user_correct = MixedGroupsReward(correct, NUM_GENERATIONS)
    args = _config(kind, tmp_path / "out", max_steps=3, reward_weights=[1.0, 0.1])
    trainer = _build(
        kind, model, [user_correct, str(path)], args, train_dataset=user_dataset(), processing_class=tokenizer,
        reward_processing_classes=[None, rm_tokenizer],
    )  # fmt: skip
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()

    assert any(not torch.equal(p.detach(), before[n]) for n, p in trainer.model.named_parameters())
    logs = trainer.state.log_history
    assert any("loss" in record for record in logs)
    rm_name = trainer.reward_func_names[1]
    assert rm_name == path.name
    assert all(f"rewards/{rm_name}/mean" in record for record in logs if "reward" in record)
    logged = np.array(trainer._logs["rewards"][rm_name], dtype=np.float64)
    np.testing.assert_allclose(logged, _reward_model_scores(trainer, 1, rm_tokenizer), rtol=1e-4, atol=1e-5)
    # ... and not what the policy's tokenizer would give: the test can tell which tokenizer reached the model.
    with pytest.raises(Exception):  # noqa: B017 (a shape or value mismatch)
        np.testing.assert_allclose(logged, _reward_model_scores(trainer, 1, tokenizer), rtol=1e-4, atol=1e-5)
    if kind == "meds":
        assert trainer.reward_func_names == ["correct", rm_name, "meds_penalty"]
        assert trainer.reward_weights.tolist() == pytest.approx([1.0, 0.1, 1.0])
        penalised = [r["meds/frac_penalized"] for r in logs if "meds/frac_penalized" in r]
        assert penalised and max(penalised) > 0, penalised
        assert args.reward_weights == [1.0, 0.1]  # the user's config is left as it was
    if kind == "cliff":
        assert any(r.get("cliff/groups_cliff", 0) > 0 for r in logs)


# ------------------------------------------------------------------------------------------------
# The other per-reward-function settings with MEDS's column: weights, names, async, metrics, aggregation
# ------------------------------------------------------------------------------------------------


def brevity(completions, **kwargs):
    """A second, graded reward: shorter is better."""
    return [-len(c[-1]["content"] if isinstance(c, list) else c) / 100 for c in completions]


@pytest.mark.slow
@pytest.mark.parametrize("aggregation", ["sum_then_normalize", "normalize_then_sum"])
def test_meds_column_with_async_rewards_weights_and_aggregation(aggregation, toy_policy_path, tmp_path, caplog):
    """An async 0/1 correctness function (TRL runs it on its event loop) next to a sync graded one, with weights:
    the ``meds_penalty`` column is the third, weight 1, named, logged like any reward (mean, std, the completions
    table), filled after the async rewards, and TRL's advantages under both aggregation modes are those of the
    three columns (``trl_advantages``, the diagnostics' replica of TRL)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_meds_cliff.meds.diagnostics import trl_advantages

    mixed = MixedGroupsReward(correct, NUM_GENERATIONS)

    async def correct_async(prompts, completions, **kwargs):
        await asyncio.sleep(0)
        return mixed(prompts=prompts, completions=completions, **kwargs)

    tokenizer = AutoTokenizer.from_pretrained(toy_policy_path)
    tokenizer.padding_side = "left"
    args = _config(
        "meds", tmp_path / "out", max_steps=3, reward_weights=[1.0, 0.5], multi_objective_aggregation=aggregation,
        log_completions=True, num_completions_to_print=0,
    )  # fmt: skip
    trainer = _build(
        "meds", AutoModelForCausalLM.from_pretrained(toy_policy_path), [correct_async, brevity], args,
        train_dataset=user_dataset(), processing_class=tokenizer,
    )  # fmt: skip
    assert trainer.reward_func_names == ["correct_async", "brevity", "meds_penalty"]
    assert trainer.reward_weights.tolist() == [1.0, 0.5, 1.0]
    assert trainer.reward_processing_classes == [None, None, None]
    assert trainer._has_async_funcs
    warned = "normalises every reward column per group on its own, the meds_penalty column too" in caplog.text
    assert warned == (aggregation == "normalize_then_sum")
    recorded = []
    generate_and_score = trainer._generate_and_score_completions

    def record(inputs):
        output = generate_and_score(inputs)
        recorded.append(
            (trainer._last_gathered_rewards.double().cpu().numpy().copy(), output["advantages"].double().numpy())
        )
        return output

    trainer._generate_and_score_completions = record
    trainer.train()

    assert mixed.calls == 3  # the async function ran every step
    logs = [r for r in trainer.state.log_history if "reward" in r]
    for name in ("correct_async", "brevity", "meds_penalty"):
        assert all(f"rewards/{name}/mean" in r and f"rewards/{name}/std" in r for r in logs), name
    assert any(r["rewards/meds_penalty/mean"] < 0 for r in logs)
    np.testing.assert_allclose(
        np.array(trainer._logs["rewards"]["meds_penalty"]), trainer.meds_last_penalties, rtol=1e-6
    )
    group_ids = np.arange(2 * NUM_GENERATIONS) // NUM_GENERATIONS
    for columns, advantages in recorded:
        assert columns.shape == (2 * NUM_GENERATIONS, 3)
        expected = trl_advantages(columns, [1.0, 0.5, 1.0], group_ids, trainer.scale_rewards, aggregation)
        np.testing.assert_allclose(advantages, expected, rtol=1e-4, atol=1e-4)
    # TRL's completions table: one column per reward function, the penalty and the cluster sizes included.
    import pandas as pd

    table = pd.read_parquet(sorted((tmp_path / "out" / "completions").glob("completions_*.parquet"))[-1])
    assert {"correct_async", "brevity", "meds_penalty", "meds_cluster_size", "advantage"} <= set(table.columns)
    np.testing.assert_allclose(table["meds_penalty"].to_numpy(), trainer.meds_last_penalties, rtol=1e-6)
    assert table["meds_cluster_size"].tolist() == trainer.meds_last_cluster_sizes.tolist()


@needs_qwen_tokenizer
def test_meds_column_sits_after_an_environment_owned_reward(tmp_path, monkeypatch):
    """TRL appends an ``environment_factory``'s ``get_reward`` as one more reward column (weight 1) after the user's
    reward functions; MEDS appends ``meds_penalty`` after TRL's columns, so the user's and the environment's keep the
    indices TRL gives them, and every per-function list has one entry per column."""
    from datasets import Dataset
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from trl.chat_template_utils import qwen3_chat_template

    from hf_meds_cliff.toy.qwen_world import load_qwen_tokenizer

    class GuessingEnvironment:
        def reset(self, **kwargs):
            self.solved = False

        def guess(self, word: str) -> str:
            """
            Submit a guess.

            Args:
                word: The guessed word.

            Returns:
                Feedback about the guess.
            """
            return "nope"

        def get_reward(self) -> float:
            return 1.0 if self.solved else 0.0

    tokenizer = load_qwen_tokenizer()
    tokenizer.chat_template = qwen3_chat_template  # a template TRL knows how to parse tool calls of
    config = Qwen3Config(
        vocab_size=len(tokenizer) + -len(tokenizer) % 64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": "Guess."}], "answer": "1"}] * 4)
    # The environment's column (index 1 of TRL's list) can be MEDS's correctness; the penalty column cannot.
    with pytest.raises(ValueError, match=r"meds_correctness_reward_index=2 but only 2 reward function\(s\)"):
        _build(
            "meds", Qwen3ForCausalLM(config), correct, _config("meds", tmp_path, meds_correctness_reward_index=2),
            train_dataset=dataset, processing_class=tokenizer, environment_factory=GuessingEnvironment,
        )  # fmt: skip
    args = _config("meds", tmp_path, max_steps=5, reward_weights=[0.5], meds_correctness_reward_index=1)
    trainer = _build(
        "meds", Qwen3ForCausalLM(config), correct, args, train_dataset=dataset, processing_class=tokenizer,
        environment_factory=GuessingEnvironment,
    )  # fmt: skip
    assert trainer.reward_func_names[args.meds_correctness_reward_index] == "GuessingEnvironment"
    assert trainer.reward_func_names == ["correct", "GuessingEnvironment", "meds_penalty"]
    assert trainer.reward_weights.tolist() == [0.5, 1.0, 1.0]
    assert trainer.reward_processing_classes == [None, None, None]
    assert trainer._meds_penalty_index == 2
    assert trainer.reward_funcs[2] is trainer.meds_penalty_func
    assert "guess" in [tool.__name__ for tool in trainer.tools]
