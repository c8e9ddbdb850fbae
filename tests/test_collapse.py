"""The error-collapse monitor (hf_meds_cliff.ErrorCollapseCallback): hand-computed metrics, and a plain TRL
GRPOTrainer run on scripted rollouts whose wrong answers are chosen per step."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest

from hf_meds_cliff import ErrorCollapseCallback
from hf_meds_cliff.collapse import (
    NO_ANSWER,
    cluster_concentration,
    collapse_stats,
    merge_counts,
    wrong_answer_agreement,
    wrong_answer_counts,
)

CPU = {"bf16": False, "use_cpu": True, "report_to": []}


def entropy(*probabilities):
    return -sum(p * math.log(p) for p in probabilities)


def test_wrong_answer_counts_skip_right_and_ungraded_rows():
    counts = wrong_answer_counts(
        ["5", "5", "6", "9", None, "7"], [False, False, False, True, False, None], ["a", "a", "a", "a", "b", "b"]
    )
    assert counts == {"a": Counter({"5": 2, "6": 1}), "b": Counter({NO_ANSWER: 1})}
    with pytest.raises(ValueError, match="Got 2 answers, 1 correctness values and 2 prompt keys"):
        wrong_answer_counts(["1", "2"], [False], ["a", "a"])


def test_collapse_stats_by_hand():
    stats = collapse_stats({"a": Counter({"5": 2, "6": 1}), "b": Counter({NO_ANSWER: 1, "7": 1})})
    assert stats["distinct_wrong_answers"] == 2.0
    assert stats["top_wrong_share"] == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert stats["wrong_answer_entropy"] == pytest.approx((entropy(2 / 3, 1 / 3) + math.log(2)) / 2)
    assert (stats["prompts_with_wrong"], stats["wrong_rollouts"]) == (2.0, 5.0)
    empty = collapse_stats({})
    assert math.isnan(empty["distinct_wrong_answers"]) and empty["wrong_rollouts"] == 0.0
    collapsed = collapse_stats({"a": Counter({"5": 4})})  # one wrong answer: fully collapsed
    assert (collapsed["distinct_wrong_answers"], collapsed["top_wrong_share"], collapsed["wrong_answer_entropy"]) == (
        1.0,
        1.0,
        0.0,
    )


def test_wrong_answer_agreement_by_hand():
    # 5, 5, 6, 9, 9, 9: pairs agreeing 2·1 + 3·2 = 8 of 6·5 = 30
    assert wrong_answer_agreement(Counter({"5": 2, "6": 1, "9": 3})) == pytest.approx(8 / 30)
    assert wrong_answer_agreement(Counter({"5": 4})) == 1.0
    assert wrong_answer_agreement(Counter({"5": 1, "6": 1})) == 0.0
    assert math.isnan(wrong_answer_agreement(Counter()))


def test_merge_and_cluster_concentration_by_hand():
    merged = merge_counts([{"a": Counter({"5": 2})}, {"a": Counter({"5": 1, "9": 3}), "b": Counter({"1": 1})}])
    assert merged == {"a": Counter({"5": 3, "9": 3}), "b": Counter({"1": 1})}
    assert cluster_concentration([0, 0, 1, 1, 1, -1]) == 0.5
    assert cluster_concentration([-1, -1, -1, -1]) == 0.25
    with pytest.raises(ValueError, match="at least one label"):
        cluster_concentration([])


def test_observe_logs_through_the_hook_and_keeps_evaluation_out_of_the_window():
    monitor = ErrorCollapseCallback(window=2)
    logged = []
    prompts = ["p1"] * 3 + ["p2"] * 3
    completions = ["\\boxed{5}", "\\boxed{5}", "\\boxed{1}", "\\boxed{4}", "nothing", "\\boxed{2}"]
    rewards = [0.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    first = monitor.observe(prompts, completions, rewards, log_metric=lambda n, v: logged.append((n, v)))
    # p1: wrong 5, 5 (1 distinct, share 1, entropy 0); p2: wrong 4, <no answer> (2, 1/2, ln 2)
    assert first["distinct_wrong_answers"] == 1.5 and first["top_wrong_share"] == 0.75
    assert first["wrong_answer_entropy"] == pytest.approx(math.log(2) / 2)
    assert ("collapse/distinct_wrong_answers", 1.5) in logged and ("collapse/window/batches", 1.0) in logged

    monitor.on_train_begin(None, None, None)  # registered: batches outside a training step are evaluation ones
    evaluation = monitor.observe(prompts, ["\\boxed{8}"] * 6, [0.0] * 6)
    assert "window/distinct_wrong_answers" not in evaluation and len(monitor.batches) == 1

    monitor.on_step_begin(None, None, None)
    second = monitor.observe(prompts, ["\\boxed{6}"] * 6, [0.0] * 6)
    # window: p1 {5: 2, 6: 3} (2 distinct, 3/5); p2 {4: 1, <no answer>: 1, 6: 3} (3 distinct, 3/5)
    assert second["window/distinct_wrong_answers"] == 2.5
    assert second["window/top_wrong_share"] == pytest.approx(0.6)
    assert second["window/wrong_answer_entropy"] == pytest.approx(
        (entropy(2 / 5, 3 / 5) + entropy(1 / 5, 1 / 5, 3 / 5)) / 2
    )


def test_wrap_keeps_values_and_name_and_rejects_bad_input():
    monitor = ErrorCollapseCallback()

    def correctness(prompts, completions, **kwargs):
        return [1.0 if "\\boxed{1}" in c else 0.0 for c in completions]

    wrapped = monitor.wrap(correctness)
    assert wrapped.__name__ == "correctness"
    assert wrapped(prompts=["p", "p"], completions=["\\boxed{1}", "\\boxed{2}"]) == [1.0, 0.0]
    assert monitor.last_stats["distinct_wrong_answers"] == 1.0

    async def async_reward(prompts, completions, **kwargs):
        return [0.0]

    with pytest.raises(TypeError, match="synchronous reward function"):
        monitor.wrap(async_reward)
    with pytest.raises(ValueError, match="window=0 must be a positive integer"):
        ErrorCollapseCallback(window=0)


def test_a_failing_answer_extractor_is_counted_not_raised(caplog):
    def broken(text):
        raise RuntimeError("cannot read")

    monitor = ErrorCollapseCallback(answer_extractor=broken)
    stats = monitor.observe(["p", "p"], ["a", "b"], [0.0, 0.0])
    assert stats["monitor_failures"] == 1.0 and monitor.failures == 1
    assert "could not read this batch" in caplog.text


# -- plain TRL GRPOTrainer end to end ----------------------------------------------------------------------------------

SCRIPT = {  # (step, group) -> the 4 completions' final answers; "R" = the right answer, None = no \boxed{}
    (0, 0): ["R", "5", "5", "6"],
    (0, 1): [None, "7", "R", "R"],
    (1, 0): ["R", "9", "9", "9"],
    (1, 1): [None, "7", "R", "R"],
}


def scripted_rollouts(prompts, trainer):
    from hf_meds_cliff.cliff.protocol import problem_text
    from hf_meds_cliff.toy.task import parse_question

    tokenizer = trainer.processing_class
    prompt_ids, completion_ids = [], []
    for index, prompt in enumerate(prompts):
        group, member = divmod(index, 4)
        answer = SCRIPT[(trainer.state.global_step, group)][member]
        if answer == "R":
            answer = str(parse_question(problem_text(prompt)).answer)
        text = "I think so." if answer is None else f"The answer is \\boxed{{{answer}}}."
        prompt_ids.append(list(tokenizer.apply_chat_template(prompt, add_generation_prompt=True)["input_ids"]))
        completion_ids.append(tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id])
    return {
        "prompt_ids": prompt_ids,
        "completion_ids": completion_ids,
        "logprobs": [[0.0] * len(ids) for ids in completion_ids],
    }


def exact_answer(completions, answer, **kwargs):
    from hf_meds_cliff.rewards.extraction import extract_final_answer
    from hf_meds_cliff.text import completion_text

    return [1.0 if extract_final_answer(completion_text(c)) == str(a) else 0.0 for c, a in zip(completions, answer)]


@pytest.mark.slow
def test_plain_grpo_trainer_logs_collapse_metrics(tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    from hf_meds_cliff.script_utils import write_metrics
    from hf_meds_cliff.toy.model import build_toy_model
    from hf_meds_cliff.toy.task import make_toy_dataset
    from hf_meds_cliff.toy.tokenizer import build_toy_tokenizer

    tokenizer = build_toy_tokenizer()
    monitor = ErrorCollapseCallback(window=4)
    args = GRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, max_completion_length=32,
        max_steps=2, learning_rate=1e-3, logging_steps=1, save_strategy="no", seed=0, shuffle_dataset=False, **CPU,
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=build_toy_model(tokenizer, seed=0),
        reward_funcs=[monitor.wrap(exact_answer)],
        args=args,
        train_dataset=make_toy_dataset("train", 2, seed=0),
        processing_class=tokenizer,
        rollout_func=scripted_rollouts,
        callbacks=[monitor],
    )
    trainer.train()
    logs = [r for r in trainer.state.log_history if "collapse/distinct_wrong_answers" in r]
    assert len(logs) == 2
    first, second = logs
    # step 1: group 0 wrong 5, 5, 6 (2 distinct, 2/3); group 1 wrong <no answer>, 7 (2, 1/2)
    assert first["collapse/distinct_wrong_answers"] == 2.0
    assert first["collapse/top_wrong_share"] == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert first["collapse/wrong_answer_entropy"] == pytest.approx((entropy(2 / 3, 1 / 3) + math.log(2)) / 2)
    assert first["rewards/exact_answer/mean"] == pytest.approx(3 / 8)  # the wrapped reward's values unchanged
    # step 2: group 0 collapses onto 9 (1 distinct, share 1, entropy 0); the window pools both steps
    assert second["collapse/distinct_wrong_answers"] == 1.5 and second["collapse/top_wrong_share"] == 0.75
    assert second["collapse/window/distinct_wrong_answers"] == 2.5  # {5: 2, 6: 1, 9: 3} and {none: 2, 7: 2}
    assert second["collapse/window/top_wrong_share"] == pytest.approx(0.5)
    assert second["collapse/window/wrong_answer_entropy"] == pytest.approx(
        (entropy(2 / 6, 1 / 6, 3 / 6) + math.log(2)) / 2
    )
    write_metrics(trainer, tmp_path)  # what the scripts do at the end of a run
    written = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert any("collapse/window/distinct_wrong_answers" in record for record in written)

    from hf_meds_cliff.report import write_report

    html = write_report(tmp_path).read_text()
    assert '<section id="collapse">' in html and "collapse/window/top_wrong_share" in html
