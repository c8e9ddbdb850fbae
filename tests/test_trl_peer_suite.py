"""tools/trl_peer_suite.py without a TRL checkout: how outcomes are compared, how a failure is matched to a documented
restriction (each restriction by a test of its own, on the exception a real trainer or a real pytest run raises), and
the stand-ins (TRL's tests are never part of this repository; docs/trl_peer_suite.md has a real run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers import ROOT, load_module, needs_qwen_tokenizer

suite = load_module(ROOT / "tools" / "trl_peer_suite.py", "trl_peer_suite")

ZERO_ONE = "reward 0 must be a 0/1 correctness verdict"
ANSWER_COLUMN = "Cliff's reference filter needs an answer column"
EXTRA_COLUMN = "MEDS adds its own reward column"


def test_every_documented_restriction_has_a_test_of_its_own():
    names = {restriction.name for restriction in suite.RESTRICTIONS}
    assert names == {ZERO_ONE, ANSWER_COLUMN, EXTRA_COLUMN}
    tested = {name.removeprefix("test_restriction_") for name in globals() if name.startswith("test_restriction_")}
    assert tested == {"zero_one", "answer_column", "extra_column"}


def test_exceptions_are_sorted_by_documented_restriction():
    zero_one = "ValueError: MEDS needs a 0/1 correctness reward, but reward function 0 ('reward_func', selected by ..."
    results = {
        "grpo": {"T::a": ("passed", ""), "T::b": ("passed", ""), "T::d": ("failed", "OSError: no stand-in"),
                 "T::e": ("passed", ""), "T::f": ("passed", "")},
        "meds": {"T::a": ("passed", ""), "T::b": ("failed", zero_one), "T::d": ("failed", "OSError: no stand-in"),
                 "T::e": ("failed", "RuntimeError: something else"), "T::f": ("skipped", "needs jmespath")},
    }  # fmt: skip
    summary = suite.compare(results)
    assert summary["grpo"]["counts"] == {"cases": 5, "passed": 4, "failed": 1, "skipped": 0}
    assert summary["grpo"]["failed"] == {"T::d": "OSError: no stand-in"}
    meds = summary["meds"]
    assert meds["counts"] == {"cases": 5, "passed": 1, "failed": 3, "skipped": 1}
    assert meds["by_reason"] == {ZERO_ONE: ["T::b"], "skipped here only": ["T::f"], "unexplained": ["T::e"]}
    # A restriction of one trainer never explains another's failure.
    cliff_message = zero_one.replace("MEDS", "Cliff")
    assert suite.classify("cliff", cliff_message) == ZERO_ONE
    assert suite.classify("grpo", zero_one) == "unexplained"


# ------------------------------------------------------------------------------------------------
# Each restriction, on the exception that the trainers really raise
# ------------------------------------------------------------------------------------------------


def test_restriction_zero_one():
    from hf_meds_cliff.correctness import check_binary_correctness

    for method in ("MEDS", "Cliff"):
        with pytest.raises(ValueError) as raised:
            check_binary_correctness(
                [3.0, 5.0, 8.0], method=method, index_field=f"{method.lower()}_correctness_reward_index", index=0,
                threshold_field=f"{method.lower()}_correctness_threshold", threshold=1.0, reward_name="reward_func",
            )  # fmt: skip
        raised_text = f"ValueError: {raised.value}"
        assert suite.classify(method.lower(), raised_text) == ZERO_ONE
        assert suite.classify("meds" if method == "Cliff" else "cliff", raised_text) == ZERO_ONE
        # The words alone, or under another exception type, are not the restriction.
        assert suite.classify(method.lower(), "RuntimeError: " + str(raised.value)) == "unexplained"
        assert suite.classify(method.lower(), "AssertionError: assert 'needs a 0/1 correctness reward' in x") == (
            "unexplained"
        )


def test_restriction_answer_column(tmp_path):
    """The ValueError CliffGRPOTrainer raises with its default reference filter on data without an ``answer`` column
    (TRL's ``test_init_minimal`` builds the trainer without ``args``, so with that default)."""
    from datasets import Dataset
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from hf_meds_cliff import CliffConfig, CliffGRPOTrainer
    from hf_meds_cliff.toy import build_toy_tokenizer

    tokenizer = build_toy_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    with pytest.raises(ValueError) as raised:
        CliffGRPOTrainer(
            Qwen2ForCausalLM(config), lambda completions, **kwargs: [1.0] * len(completions),
            CliffConfig(str(tmp_path), use_cpu=True, bf16=False, report_to="none"),
            train_dataset=Dataset.from_list([{"prompt": "Beautiful is"}]), processing_class=tokenizer,
        )  # fmt: skip
    raised_text = f"ValueError: {raised.value}"
    assert suite.classify("cliff", raised_text) == ANSWER_COLUMN
    assert suite.classify("meds", raised_text) == "unexplained"  # MEDS has no reference filter
    assert suite.classify("cliff", "KeyError: " + str(raised.value)) == "unexplained"


# A TRL-style test module run by a real pytest: the junit report's "message" is what the runner classifies.
PYTEST_CASES = textwrap.dedent('''
    import pytest


    class MEDSGRPOTrainer:
        def __init__(self, names):
            self.reward_func_names = list(names)
            self.reward_processing_classes = [None] * len(names)
            self.reward_weights = [1.0] * len(names)


    def test_count_extra_column():
        trainer = MEDSGRPOTrainer(["reward_func", "meds_penalty"])
        assert len(trainer.reward_processing_classes) == 1


    def test_names_extra_column():
        trainer = MEDSGRPOTrainer(["format_reward", "DummyEnvironment", "meds_penalty"])
        assert trainer.reward_func_names == ["format_reward", "DummyEnvironment"]


    def test_names_penalty_before_the_environment():
        trainer = MEDSGRPOTrainer(["format_reward", "meds_penalty", "DummyEnvironment"])
        assert trainer.reward_func_names == ["format_reward", "DummyEnvironment"]


    def test_weights_extra_column():
        trainer = MEDSGRPOTrainer(["format_reward", "DummyEnvironment", "meds_penalty"])
        trainer.reward_weights[0] = 0.5
        assert trainer.reward_weights == [0.5, 1.0]


    def test_count_of_something_else():
        batches = [1, 2, 3]
        assert len(batches) == 2


    def test_count_off_by_two():
        trainer = MEDSGRPOTrainer(["a", "b", "meds_penalty"])
        assert len(trainer.reward_processing_classes) == 1


    class Tokenizer:
        def __repr__(self):
            return "Qwen2Tokenizer(name_or_path='trl-internal-testing/tiny-Qwen2ForSequenceClassification-2.5', " + (
                "added_tokens_decoder={...}, " * 20) + ")"


    def test_count_extra_column_long_repr():
        # as TRL's test_correct_reward_processing_classes_list: the "where" lines hold a tokenizer's repr twice
        trainer = MEDSGRPOTrainer(["reward_model", "meds_penalty"])
        trainer.reward_processing_classes = [Tokenizer(), None]
        assert len(trainer.reward_processing_classes) == 1


    def test_message_only_in_a_source_line():
        hint = f"cliff_answer_column={'answer'!r} is not a column of the training dataset (['prompt']); assert 3 == 2"
        raise RuntimeError("the teacher endpoint is down")
''')


@pytest.fixture(scope="module")
def peer_run(tmp_path_factory):
    """A real pytest run of :data:`PYTEST_CASES` with the runner's outcome hook: (junit's outcomes, what the runner
    classifies: junit's outcomes with the hook's whole messages)."""
    folder = tmp_path_factory.mktemp("peer_cases")
    (folder / "test_cases.py").write_text(PYTEST_CASES)
    (folder / "conftest.py").write_text(suite.OUTCOME_HOOK)
    report, live = folder / "junit.xml", folder / "outcomes.jsonl"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(folder),
         str(folder / "test_cases.py"), f"--junitxml={report}", "-o", "junit_family=xunit1"],
        cwd=folder, capture_output=True, text=True, check=False, env={**os.environ, "TRL_PEER_OUTCOMES": str(live)},
    )  # fmt: skip
    junit = suite.parse_junit(report)
    return junit, suite.with_whole_messages(junit, suite.read_live_outcomes(live))


@pytest.fixture(scope="module")
def junit_outcomes(peer_run):
    return peer_run[1]


def test_a_long_assertion_explanation_is_read_whole(peer_run):
    """pytest 9 shortens junit's message attribute to 500 characters, which cut the "where" line naming
    ``reward_processing_classes`` in TRL's test_correct_reward_processing_classes_list and
    test_single_reward_model_with_single_processing_class: the runner filed MEDS's extra column there as
    "unexplained". The conftest's record holds the whole message."""
    junit, whole = peer_run
    test_id = "test_cases::test_count_extra_column_long_repr"
    assert "full report in element text]" in junit[test_id][1]
    assert suite.classify("meds", junit[test_id][1]) == "unexplained"
    assert whole[test_id][0] == "failed" and whole[test_id][1].removeprefix("AssertionError: ").startswith("assert 2 == 1\n")
    assert ".reward_processing_classes" in whole[test_id][1]
    assert suite.classify("meds", whole[test_id][1]) == EXTRA_COLUMN
    # A message that fit is the same either way, and a passing test keeps its empty one.
    assert whole["test_cases::test_count_extra_column"] == junit["test_cases::test_count_extra_column"]


def test_restriction_extra_column(junit_outcomes):
    """Off by exactly MEDS's one entry on one of TRL's per-function lists: a count, the names ('meds_penalty' one
    more, last) or the weights (1.0 one more). Anything else stays unexplained."""
    classified = {
        test_id.split("::")[-1]: (outcome, suite.classify("meds", raised))
        for test_id, (outcome, raised) in junit_outcomes.items()
    }
    assert classified == {
        "test_count_extra_column": ("failed", EXTRA_COLUMN),
        "test_count_extra_column_long_repr": ("failed", EXTRA_COLUMN),
        "test_names_extra_column": ("failed", EXTRA_COLUMN),
        "test_weights_extra_column": ("failed", EXTRA_COLUMN),
        # meds_penalty before an environment's column: a real difference, not only one more entry
        "test_names_penalty_before_the_environment": ("failed", "unexplained"),
        "test_count_of_something_else": ("failed", "unexplained"),
        "test_count_off_by_two": ("failed", "unexplained"),
        "test_message_only_in_a_source_line": ("failed", "unexplained"),
    }
    # Cliff adds no column: the same failures are not explained for it.
    raised = junit_outcomes["test_cases::test_count_extra_column"][1]
    assert suite.classify("cliff", raised) == "unexplained"


def test_the_runner_classifies_the_raised_exception_never_the_traceback(junit_outcomes):
    """Only the exception raised counts: the runner's old habit of searching the traceback filed an unrelated error
    under a restriction because a source line shown in the traceback held the restriction's text."""
    outcome, raised = junit_outcomes["test_cases::test_message_only_in_a_source_line"]
    assert raised.startswith("RuntimeError: the teacher endpoint is down")
    assert "cliff_answer_column" not in raised
    assert suite.classify("cliff", raised) == "unexplained"


# ------------------------------------------------------------------------------------------------
# Stand-ins
# ------------------------------------------------------------------------------------------------


def test_binary_stand_in_reward_model_scores_a_hash_bit_of_the_last_token():
    from transformers import AutoModelForSequenceClassification

    config = suite._tiny_config(
        "qwen2", vocab_size=64, pad_token_id=0, num_labels=1, num_hidden_layers=0, rms_norm_eps=0.0, hidden_size=8
    )
    model = suite._binary_reward_model(AutoModelForSequenceClassification.from_config(config), 8)
    input_ids = torch.tensor([[5, 7, 0, 0], [3, 9, 12, 0], [2, 4, 6, 11], [1, 1, 1, 2]])  # last: 7, 12, 11, 2
    scores = model(input_ids=input_ids, attention_mask=(input_ids != 0).long()).logits[:, 0]
    # (id + 1) * 2654435761 mod 2**32, shifted right by 16: 7 -> 4055616904 >> 16 = 61883 (bit 1), 12 -> 147926525
    # >> 16 = 2257 (1), 11 -> 1788458060 >> 16 = 27289 (1), 2 -> 3668339987 >> 16 = 55974 (0)
    expected = [((i + 1) * 2654435761) % 2**32 >> 16 & 1 for i in (7, 12, 11, 2)]
    assert expected == [1, 1, 1, 0]
    assert scores.tolist() == [1.0, 1.0, 1.0, 0.0]
    # Every group of completions TRL's tests script gets both verdicts (the last ids the reward model sees, measured):
    # truncation masking (368, 44662, 18; parity, the first rule, scored all three 0), the tool tests ('!' = 0
    # twice, ' tool' = 5392), the environment factory ('!' twice, 'increment' = 16252), the counter group of the
    # multiple-environments test ('!', "'t" = 944) and the malformed tool calls ('</tool_call>' = 151658, '>' = 29);
    # bit 22 without the offset (stand-ins v5) scored the last two groups all alike, and GRPO failed both tests.
    verdicts = lambda ids: suite.binary_verdict(torch.tensor(ids)).long().tolist()  # noqa: E731
    assert verdicts([368, 44662, 18]) == [0, 1, 0]
    assert verdicts([0, 0, 5392]) == [1, 1, 0]
    assert verdicts([0, 0, 16252]) == [1, 1, 0]
    assert verdicts([0, 944]) == [1, 0]
    assert verdicts([151658, 29, 151658]) == [1, 0, 1]
    v5 = lambda ids: [(i * 2654435761) % 2**32 >> 22 & 1 for i in ids]
    assert v5([0, 944]) == [0, 0] and v5([151658, 29]) == [1, 1]


_PAGE_FAULTS = """
import resource, torch
from trl.kernels import ChunkedLogProbFunction  # what TRL >= 1.14 scores log-probabilities with, on CPU in torch ops

hidden, weight = torch.randn(320, 16, requires_grad=True), torch.randn(32768, 16, requires_grad=True)
targets = torch.randint(0, 32768, (320,))


def step():  # forward and backward over one [320, 32768] tile: 42 MB per temporary, as in a tool test (~100 MB)
    ChunkedLogProbFunction.apply(hidden, weight, None, targets, 1.0, 32768, None, 1.0, ("log_probs",))[0].sum().backward()


step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_pytest_processes_reuse_freed_memory(tmp_path, monkeypatch):
    """The trainers' pytest processes get :data:`MALLOC_ENVIRONMENT`: the pages of TRL's log-probability temporaries
    are reused from one step to the next, where glibc's defaults return them to the kernel and fault them in again
    (zeroed) for every temporary. Measured, over 4 steps after the first: 660,000 page faults with glibc's defaults,
    0 to 61,000 with the settings (where the heap's holes fall varies from run to run)."""
    pytest.importorskip("trl.kernels", reason="the chunked log-probability kernel came with TRL 1.14")
    for key in suite.MALLOC_ENVIRONMENT:
        monkeypatch.delenv(key, raising=False)
    environment = suite.trainer_environment("meds", tmp_path)
    assert environment["TRL_PEER_TRAINER"] == "meds" and environment["HF_HUB_CACHE"] == str(tmp_path)
    assert environment["MALLOC_MMAP_MAX_"] == "0"

    def page_faults(env):
        return int(subprocess.run([sys.executable, "-c", _PAGE_FAULTS], env=env, check=True, capture_output=True,
                                  text=True).stdout)  # fmt: skip

    plain = {key: value for key, value in environment.items() if key not in suite.MALLOC_ENVIRONMENT}
    freed, kept = page_faults(plain), page_faults(environment)
    assert freed >= 4 * 320 * 32768 * 4 // 2**21  # at least one fault per 2 MB of one temporary per step
    assert kept * 4 < freed
    # A setting the user made wins.
    monkeypatch.setenv("MALLOC_MMAP_MAX_", "7")
    assert suite.trainer_environment("grpo", tmp_path)["MALLOC_MMAP_MAX_"] == "7"


@needs_qwen_tokenizer
def test_stand_in_policies_write_answers_and_can_call_tools(tmp_path):
    """The stand-in causal LMs: Qwen's token ids (the tool tests hard-code them), a chat template TRL can parse tool
    calls from, and completions that hold MEDS's answer token (``\\boxed{``), some ending before the limit."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import qwen3_chat_template

    suite.build_standins(tmp_path, "binary")
    snapshot = lambda name: next((tmp_path / f"models--trl-internal-testing--{name}" / "snapshots").iterdir())  # noqa: E731
    tokenizer = AutoTokenizer.from_pretrained(snapshot("tiny-Qwen2ForCausalLM-2.5"))
    assert tokenizer.convert_ids_to_tokens([151657, 151658, 151645, 151643]) == [
        "<tool_call>", "</tool_call>", "<|im_end|>", "<|endoftext|>",
    ]  # fmt: skip
    assert (tokenizer.eos_token_id, tokenizer.pad_token_id) == (151645, 151643)
    assert tokenizer.chat_template == qwen3_chat_template  # one TRL parses tool calls of (the Hub's tiny Qwen 3's)
    reward_tokenizer = AutoTokenizer.from_pretrained(snapshot("tiny-Qwen2ForSequenceClassification-2.5"))
    assert reward_tokenizer.chat_template == suite.STANDIN_CHAT_TEMPLATE

    from hf_meds_cliff.meds.features import locate_answer_tokens

    model = AutoModelForCausalLM.from_pretrained(snapshot("tiny-Qwen2ForCausalLM-2.5"))
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Complete: Beautiful is"}], add_generation_prompt=True, return_tensors="pt",
        return_dict=True,
    )  # fmt: skip

    def sample(model, length: int, count: int) -> list[list[int]]:
        torch.manual_seed(0)
        out = model.generate(
            **prompt, do_sample=True, max_new_tokens=length, num_return_sequences=count, pad_token_id=151643
        )
        return [row[prompt["input_ids"].shape[1] :].tolist() for row in out]

    def assert_varied_last_tokens(completions: list[list[int]]) -> None:
        last = torch.tensor([ids[-1] for ids in completions])
        assert len(set(last.tolist())) >= 4
        assert set(suite.binary_verdict(last).tolist()) == {False, True}

    completions = sample(model, 16, 6)
    assert sum(location is not None for location in locate_answer_tokens(completions, tokenizer)) >= 2
    # The Qwen 2 stand-in never ends, as the Hub's random models (TRL's all-masked truncation test relies on it).
    assert all(151645 not in ids for ids in completions)
    # Sampling is varied, as from the Hub's random models: the completions differ, and so do their last tokens and the
    # binary reward model's verdicts on them (v5/v6's policies wrote nearly the same completion every time).
    assert len({tuple(ids) for ids in completions}) == 6
    assert_varied_last_tokens(completions)

    # The other policies end some completions (EOS), so Cliff's teacher judges the wrong ones that end; others are cut
    # off (stand-ins v5-v7 never ended one: Cliff never judged in the suite).
    assert set(suite.CAUSAL_LMS) - set(suite.NEVER_ENDING_POLICIES) == {
        "tiny-Qwen3ForCausalLM", "tiny-LlamaForCausalLM-3.2", "tiny-MistralForCausalLM-0.2", "tiny-Qwen3MoeForCausalLM",
        "tiny-Gemma2ForCausalLM",
    }  # fmt: skip
    completions = sample(AutoModelForCausalLM.from_pretrained(snapshot("tiny-Qwen3ForCausalLM")), 8, 64)
    assert sum(location is not None for location in locate_answer_tokens(completions, tokenizer)) >= 16
    ended = [ids[: ids.index(151645)] for ids in completions if 151645 in ids]
    assert 16 <= len(ended) <= 48
    assert len({tuple(ids) for ids in completions}) >= 56
    assert_varied_last_tokens([ids for ids in completions if 151645 not in ids])
    assert_varied_last_tokens([ids for ids in ended if ids])


def test_seconds_per_test_from_junit_or_from_the_live_record(tmp_path):
    """Each test's runtime goes into the JSON: pytest's junit ``time`` when the run finished, else (stopped at the
    deadline) the conftest's live record, summed over the phases it recorded."""
    (tmp_path / "outcomes-meds.jsonl").write_text(
        '{"test": "TestGRPOTrainer::test_a", "when": "call", "outcome": "passed", "message": "", "seconds": 12.5}\n'
        '{"test": "TestGRPOTrainer::test_b", "when": "call", "outcome": "failed", "message": "x", "seconds": 3.25}\n'
        '{"test": "TestGRPOTrainer::test_b", "when": "teardown", "outcome": "failed", "message": "y", "seconds": 0.5}\n'
    )
    assert suite.seconds_per_test(tmp_path, "meds") == {"TestGRPOTrainer::test_a": 12.5, "TestGRPOTrainer::test_b": 3.75}
    (tmp_path / "junit-meds.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.test_grpo_trainer.TestGRPOTrainer" name="test_a" '
        'time="14.031"/><testcase classname="tests.test_grpo_trainer.TestGRPOTrainer" name="test_b" time="4.5">'
        '<failure message="AssertionError: x"/></testcase></testsuite></testsuites>'
    )
    assert suite.seconds_per_test(tmp_path, "meds") == {"TestGRPOTrainer::test_a": 14.03, "TestGRPOTrainer::test_b": 4.5}
    assert suite.seconds_per_test(tmp_path, "cliff") == {}


SAMPLED_TRAINING_CASE = '''
import json
import os

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from hf_meds_cliff.rewards.functions import MathAnswerReward


def test_sampled_training(tmp_path):
    """Like TRL's sampled training tests: the swapped-in trainer, built through ``trl``'s names, with TRL-style
    arguments only."""
    rows = [json.loads(line) for line in open(os.environ["PEER_CASE_DATA"])]
    args = GRPOConfig(
        output_dir=str(tmp_path), learning_rate=1e-3, per_device_train_batch_size=16, num_generations=4,
        max_completion_length=96, max_steps=2, report_to="none", logging_steps=1, use_cpu=True,
    )
    trainer = GRPOTrainer(
        model=os.environ["PEER_CASE_MODEL"], reward_funcs=MathAnswerReward(), args=args,
        train_dataset=Dataset.from_list(rows),
    )
    trainer.train()
    assert trainer.state.log_history[-1]["train_loss"] is not None
'''


@pytest.mark.slow
@pytest.mark.toy_policy
def test_the_suite_conftest_makes_cliff_judge_and_split(tmp_path, toy_policy_path):
    """The conftest's Cliff (``PeerCliffGRPOTrainer``: no reference filter, :class:`LastSentenceTeacher`) under a
    TRL-style test with sampled rollouts that end: the teacher gives a reference, so mixed groups are judged, and the
    last sentence of a several-sentence wrong rollout is its mistake, so a correct prefix gets its own advantage. The
    activity record the runner reads shows all three. (Up to stand-ins v7 the teacher gave no reference: a group
    with an ended wrong rollout fell back to GRPO unjudged, and no case of TRL's suite was judged.)"""
    from helpers import write_half_solved_toy_data

    data = tmp_path / "half_solved.jsonl"
    write_half_solved_toy_data(toy_policy_path, 4, data)
    files = {name: "" for name in suite.TRL_FILES}
    files["tests/test_grpo_trainer.py"] = SAMPLED_TRAINING_CASE
    folder = suite.write_suite(tmp_path, files)
    env = suite.trainer_environment("cliff", tmp_path / "hub")
    activity, live = tmp_path / "activity-cliff.jsonl", tmp_path / "outcomes.jsonl"
    env.update(
        TRL_PEER_ACTIVITY=str(activity), TRL_PEER_OUTCOMES=str(live), PEER_CASE_DATA=str(data),
        PEER_CASE_MODEL=str(toy_policy_path),
    )  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(folder),
         str(folder / "tests" / "test_grpo_trainer.py")],
        cwd=folder, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:]
    (record,) = [json.loads(line) for line in activity.read_text().splitlines()]
    assert record["test"] == "::test_sampled_training"
    assert record["cliff/groups_cliff"] > 0
    assert record["cliff/judge_calls"] > 0
    assert record["cliff/rollouts_with_mistake"] > 0
    assert record["cliff/prefix_fraction"] > 0
    summary = suite.method_activity("cliff", suite.read_activity(tmp_path, "missing"))
    assert summary == {"tests_with_a_trainer": 0, "cliff/judge_calls": [], "cliff/groups_cliff": [],
                       "cliff/prefix_fraction": []}  # fmt: skip
    summary = suite.method_activity("cliff", suite.read_activity(tmp_path, "cliff"))
    assert summary["cliff/judge_calls"] == summary["cliff/prefix_fraction"] == ["::test_sampled_training"]
