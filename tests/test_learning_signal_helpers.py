"""The test helpers that give the trainer tests learning signal by construction, by hand."""

import pytest
from helpers import MixedGroupsReward, UniformThenMixedRounds


def verdicts(values):
    """A reward returning the given values whatever the completions."""

    def reward(completions, **kwargs):
        return list(values)

    return reward


def test_mixed_groups_flip_the_last_graded_row_of_uniform_groups_only():
    prompts = ["a"] * 4 + ["b"] * 4 + ["c"] * 4 + ["d"] * 4
    values = [1.0] * 4 + [0.0, 1.0, 0.0, 0.0] + [0.0] * 4 + [1.0, 1.0, None, None]
    mixed = MixedGroupsReward(verdicts(values), 4)
    assert mixed(prompts=prompts, completions=[None] * 16) == (
        [1.0, 1.0, 1.0, 0.0] + [0.0, 1.0, 0.0, 0.0] + [0.0, 0.0, 0.0, 1.0] + [1.0, 0.0, None, None]
    )
    assert mixed.flipped == 3 and mixed.calls == 1
    # A group with fewer than two graded rows cannot be mixed and is left alone.
    alone = MixedGroupsReward(verdicts([1.0, None]), 2)
    assert alone(prompts=["a", "a"], completions=[None] * 2) == [1.0, None] and alone.flipped == 0


def test_mixed_groups_reject_rows_that_are_not_whole_groups():
    mixed = MixedGroupsReward(verdicts([1.0] * 4), 2)
    with pytest.raises(ValueError, match="not one prompt's group"):
        mixed(prompts=["a", "b", "a", "b"], completions=[None] * 4)
    with pytest.raises(ValueError, match="3 rows are not whole groups of num_generations=2"):
        MixedGroupsReward(verdicts([1.0] * 3), 2)(prompts=["a"] * 3, completions=[None] * 3)
    with pytest.raises(ValueError, match="num_generations=1"):
        MixedGroupsReward(verdicts([]), 1)


def test_uniform_then_mixed_rounds_alternate():
    reward = UniformThenMixedRounds(verdicts([1.0] * 4), 2, uniform_value=0.5)
    prompts = ["a", "a", "b", "b"]
    assert reward(prompts=prompts, completions=[None] * 4) == [0.5] * 4
    assert reward(prompts=prompts, completions=[None] * 4) == [1.0, 0.0, 1.0, 0.0]
    assert reward(prompts=prompts, completions=[None] * 4) == [0.5] * 4
    assert reward.rounds == [prompts] * 3 and reward.__name__ == "reward"
