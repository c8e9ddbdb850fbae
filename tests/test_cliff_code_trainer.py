"""CliffGRPOTrainer on code: scripted program rollouts on Qwen's real tokenizer, the sandboxed test reward, a
scripted teacher. The learning signal is there by construction: each group holds programs that pass every test and
programs that do not, so every group is mixed and the advantages are split at a known program line."""

from __future__ import annotations

import json
import re

import pytest
import torch
from helpers import needs_qwen_tokenizer

from hf_meds_cliff import CliffConfig, CliffGRPOTrainer
from hf_meds_cliff.cliff import Judgment, split_code_units
from hf_meds_cliff.cliff.protocol import problem_text

pytestmark = needs_qwen_tokenizer

CPU = {"bf16": False, "use_cpu": True, "report_to": []}
NUM_GENERATIONS = 4
FACTORS = (2, 3)
PROBLEM = "Read an integer n from standard input and print {k} * n."
TESTS = [("3\n", 3), ("10\n", 10), ("-4\n", -4)]


def correct_rollout(k: int) -> str:
    return f"Multiply the input by {k}.\n```python\nn = int(input())\nprint({k} * n)\n```"


def wrong_rollout(k: int) -> str:
    return f"Read n, then scale it.\n```python\nn = int(input())\nresult = n + {k}\nprint(result)\n```"


def truncated_rollout(k: int) -> str:
    return f"Read n.\n```python\nn = int(input())\nprint({k} *"


def scripted_texts(k: int) -> list[tuple[str, bool]]:
    """(text, ends with EOS) of the group of problem ``k``: correct, wrong at line 2, correct, truncated."""
    return [
        (correct_rollout(k), True),
        (wrong_rollout(k), True),
        (correct_rollout(k), True),
        (truncated_rollout(k), False),
    ]


def code_dataset():
    from datasets import Dataset

    return Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": PROBLEM.format(k=k)}] for k in FACTORS],
            "tests": [
                json.dumps(
                    [{"input": stdin, "output": f"{k * n}\n", "testtype": "stdin"} for stdin, n in TESTS]
                )
                for k in FACTORS
            ],
        }
    )


def factor_of(problem: str) -> int:
    return int(re.search(r"print (\d+) \* n", problem).group(1))


class ScriptedCodeTeacher:
    """Solves with the right program; puts the first mistake at the unit with ``n + `` (the wrong line), else 0."""

    name = "scripted-code"
    domain = "code"

    def __init__(self):
        self.judged: list[dict] = []
        self.counters: dict[str, int] = {}

    async def solve(self, problem):
        return correct_rollout(factor_of(problem))

    async def judge(self, problem, reference, sentences, execution=None):
        self.judged.append({"units": list(sentences), "execution": execution, "reference": reference})
        index = next((k for k, unit in enumerate(sentences) if "n + " in unit), 0)
        return Judgment(index, False, "ok", f"first wrong line: [{index}]")

    async def aclose(self):
        return None


class RecordingCliffTrainer(CliffGRPOTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.recorded: list[torch.Tensor] = []

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.model.training:
            self.recorded.append(output["advantages"].detach().cpu().clone())
        return output


def rollout_func(prompts, trainer):
    tokenizer = trainer.processing_class
    prompt_ids, completion_ids = [], []
    for index, prompt in enumerate(prompts):
        text, ends = scripted_texts(factor_of(problem_text(prompt)))[index % NUM_GENERATIONS]
        prompt_ids.append(
            list(tokenizer.apply_chat_template(prompt, add_generation_prompt=True)["input_ids"])
        )
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        completion_ids.append(ids + ([tokenizer.eos_token_id] if ends else []))
    return {
        "prompt_ids": prompt_ids,
        "completion_ids": completion_ids,
        "logprobs": [[0.0] * len(i) for i in completion_ids],
    }


@pytest.fixture(scope="module")
def qwen_tokenizer():
    from hf_meds_cliff.toy.qwen_world import load_qwen_tokenizer

    return load_qwen_tokenizer()


def tiny_policy(tokenizer):
    from hf_meds_cliff.toy.model import ToyModelConfig, seeded_qwen3

    return seeded_qwen3(
        ToyModelConfig(max_position_embeddings=512),
        0,
        len(tokenizer),
        tokenizer.pad_token_id,
        tokenizer.eos_token_id,
    )


def code_trainer(tmp_path, tokenizer, reward_funcs=None, teacher=..., dataset=None, **config):
    """A Cliff trainer on the scripted code rollouts (``teacher=None``: built from the config)."""
    from hf_meds_cliff.code import CodeTestsReward

    settings = {
        "output_dir": str(tmp_path), "per_device_train_batch_size": NUM_GENERATIONS * len(FACTORS),
        "num_generations": NUM_GENERATIONS, "max_completion_length": 64, "max_steps": 2, "learning_rate": 1e-3,
        "logging_steps": 1, "save_strategy": "steps", "save_steps": 1, "activation_checkpointing": False,
        "shuffle_dataset": False, "seed": 0, "cliff_log_rollouts": 16, **CPU,
    }  # fmt: skip
    settings.update(config)
    return RecordingCliffTrainer(
        model=tiny_policy(tokenizer),
        reward_funcs=reward_funcs if reward_funcs is not None else [CodeTestsReward(mode="binary")],
        args=CliffConfig(**settings),
        train_dataset=code_dataset() if dataset is None else dataset,
        processing_class=tokenizer,
        rollout_func=rollout_func,
        teacher=ScriptedCodeTeacher() if teacher is ... else teacher,
    )


def suffix_token(tokenizer, text: str, unit: int) -> int:
    """First token of the suffix that starts at code unit ``unit`` (a token straddling the boundary belongs to it)."""
    start = split_code_units(text)[unit][0]
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    return next(index for index, (_, end) in enumerate(offsets) if end > start)


@pytest.mark.slow
def test_cliff_on_code_splits_advantages_at_the_first_wrong_line(tmp_path, qwen_tokenizer):
    teacher = ScriptedCodeTeacher()
    trainer = code_trainer(tmp_path, qwen_tokenizer, teacher=teacher)
    assert trainer.cliff_domain == "code"  # read from the CodeTestsReward
    initial = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    trainer.train()
    trainer.close_teacher()

    # Step 1: both groups mixed; the wrong program judged once per group with its failing test, the truncated
    # rollout given p(a) = 0 without a call, the reference programs verified by running them on the tests.
    logs = [record for record in trainer.state.log_history if "cliff/groups_cliff" in record]
    assert [(r["cliff/groups_cliff"], r["cliff/solve_calls"], r["cliff/judge_calls"]) for r in logs] == [
        (2.0, 2.0, 2.0),
        (2.0, 0.0, 0.0),  # step 2: the same prompts, references and judgments come from the caches
    ]
    assert logs[0]["cliff/truncated"] == 2.0 and logs[0]["cliff/executions"] == 2.0
    assert logs[1]["cliff/reference_cache_hits"] == 2.0 and logs[1]["cliff/judgment_cache_hits"] == 2.0
    assert logs[0]["cliff/agreement"] == 1.0 and logs[0]["cliff/first_mistake_sentence"] == 2.0
    assert len(teacher.judged) == 2
    for call, k in zip(teacher.judged, FACTORS):
        assert call["units"] == [wrong_rollout(k)[s:e] for s, e in split_code_units(wrong_rollout(k))]
        assert call["units"][2] == f"result = n + {k}\n"
        assert "failed test 1 of 3: wrong answer" in call["execution"]
        assert f"Expected output:\n```\n{3 * k}\n```" in call["execution"]
        assert f"Actual output:\n```\n{3 + k}\n```" in call["execution"]
        assert call["reference"] == correct_rollout(k)

    # Token advantages of the wrong row: 0 - b before its line 2 (λ = 0), A_inc - b from it on.
    advantages = trainer.recorded[0]
    for group, k in enumerate(FACTORS):
        rows = slice(NUM_GENERATIONS * group, NUM_GENERATIONS * (group + 1))
        wrong = advantages[NUM_GENERATIONS * group + 1]
        length = len(qwen_tokenizer(wrong_rollout(k), add_special_tokens=False)["input_ids"]) + 1  # + EOS
        boundary = suffix_token(qwen_tokenizer, wrong_rollout(k), 2)
        prefix, suffix = wrong[:boundary], wrong[boundary:length]
        assert torch.allclose(prefix, prefix[0].expand_as(prefix)) and torch.allclose(
            suffix, suffix[0].expand_as(suffix)
        )
        assert suffix[0] < prefix[0]
        assert torch.count_nonzero(wrong[length:]) == 0
        truncated = advantages[NUM_GENERATIONS * group + 3]
        values = truncated[truncated != 0]
        assert torch.allclose(values, values[0].expand_as(values)) and values[0] < 0  # p(a) = 0: all suffix
        assert advantages[rows].sum().item() == pytest.approx(0.0, abs=1e-4)
    changed = [k for k, v in trainer.model.state_dict().items() if not torch.equal(v, initial[k])]
    assert changed, "no parameter changed after two Cliff steps on code"

    # The checkpointed caches hold the verified reference programs; the rollout log the units and test results.
    state = json.loads((tmp_path / "checkpoint-1" / "cliff_state.json").read_text())
    assert sorted(state["references"].values()) == sorted(correct_rollout(k) for k in FACTORS)
    records = [json.loads(line) for line in (tmp_path / "cliff_rollouts.jsonl").read_text().splitlines()]
    judged = [r for r in records if r["step"] == 1 and r["source"] == "judged"]
    assert len(judged) == 2 and all(r["domain"] == "code" and r["first_mistake"] == 2 for r in judged)
    assert all("wrong answer" in r["execution"] for r in judged)
    assert all(r["sentences"] == [list(s) for s in split_code_units(r["completion"])] for r in judged)
    truncated_records = [r for r in records if r["source"] == "truncated"]
    assert truncated_records and all(r["execution"] is None for r in truncated_records)

    # The model card says which domain the run trained on.
    trainer.create_model_card()
    assert "Trained on the **code** domain." in (tmp_path / "README.md").read_text()


@pytest.mark.slow
def test_a_reference_program_that_fails_the_tests_makes_the_group_plain_grpo(tmp_path, qwen_tokenizer):
    class WrongSolver(ScriptedCodeTeacher):
        async def solve(self, problem):
            return wrong_rollout(factor_of(problem))  # fails the row's tests: no verified reference

    teacher = WrongSolver()
    trainer = code_trainer(tmp_path, qwen_tokenizer, teacher=teacher, max_steps=1, save_strategy="no")
    trainer.train()
    trainer.close_teacher()
    (log,) = [record for record in trainer.state.log_history if "cliff/groups_cliff" in record]
    assert (log["cliff/groups_cliff"], log["cliff/groups_fallback_unverified"], log["cliff/judge_calls"]) == (
        0,
        2,
        0,
    )
    assert teacher.judged == [] and trainer.cliff_judge.references == {}
    for row in trainer.recorded[0]:  # TRL's sequence-level advantage on every token
        values = row[row != 0]
        assert torch.allclose(values, values[0].expand_as(values)) if values.numel() else True


def test_domain_is_read_from_the_reward_or_set_and_checked(tmp_path, qwen_tokenizer):
    from hf_meds_cliff.cliff.teachers import OpenAICompatibleTeacher

    def binary(completions, **kwargs):
        return [0.0] * len(completions)

    # A plain reward on the same data: math, unless cliff_domain says code.
    math_trainer = code_trainer(tmp_path, qwen_tokenizer, reward_funcs=[binary], cliff_reference_filter=False,
                                teacher=OpenAICompatibleTeacher("http://127.0.0.1:9/v1", "m"))  # fmt: skip
    assert math_trainer.cliff_domain == "math" and math_trainer.cliff_judge.describe_failure is None
    forced = code_trainer(tmp_path, qwen_tokenizer, reward_funcs=[binary], cliff_domain="code")
    # The judge's splitter numbers tool-calling rollouts by their own units and every other text by the domain's.
    assert forced.cliff_domain == "code" and forced.cliff_judge.split.fallback is split_code_units
    # The built teacher prompts for the run's domain; a teacher built for another domain is refused.
    built = code_trainer(
        tmp_path, qwen_tokenizer, cliff_teacher="http", cliff_teacher_base_url="http://127.0.0.1:9/v1",
        cliff_teacher_model="m", teacher=None,
    )  # fmt: skip
    assert built.teacher.domain == "code"
    with pytest.raises(ValueError, match="prompts for the 'math' domain but this run is 'code'"):
        code_trainer(tmp_path, qwen_tokenizer, teacher=OpenAICompatibleTeacher("http://127.0.0.1:9/v1", "m"))
    with pytest.raises(ValueError, match="no 'cases' column .*--cliff_tests_column"):
        code_trainer(
            tmp_path, qwen_tokenizer, reward_funcs=[binary], cliff_domain="code", cliff_tests_column="cases"
        )
    # The tests column follows the code reward's; naming another one is refused.
    from hf_meds_cliff.code import CodeTestsReward

    renamed = code_dataset().rename_column("tests", "cases")
    reward = CodeTestsReward(tests_column="cases")
    assert code_trainer(tmp_path, qwen_tokenizer, [reward], dataset=renamed).cliff_tests_column == "cases"
    with pytest.raises(ValueError, match="grades the tests of column 'cases'.*--cliff_tests_column cases"):
        code_trainer(tmp_path, qwen_tokenizer, [reward], dataset=renamed, cliff_tests_column="other")


def test_the_default_rule_teacher_refuses_a_users_own_code_dataset(tmp_path, qwen_tokenizer):
    """A TRL user's own code data with the default teacher: the code world's rule teacher cannot read it, and the
    trainer says so at start-up instead of letting every group fall back to plain GRPO."""
    from datasets import Dataset

    dataset = Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": "Given a list of integers, print the largest one."}]] * 2,
            "tests": ['[{"input": "1 5 2\\n", "output": "5\\n", "testtype": "stdin"}]'] * 2,
        }
    )
    with pytest.raises(
        ValueError, match=r"code world's exact checker and reads only toy questions .*--cliff_teacher"
    ):
        code_trainer(tmp_path, qwen_tokenizer, teacher=None, dataset=dataset)
