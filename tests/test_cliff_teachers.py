"""Teachers: the HTTP teacher against a scripted OpenAI-compatible server on loopback, the local
transformers teacher on a tiny model, the rule-based toy teacher, and the factory."""

import asyncio
import json
import logging
import threading

import pytest

from hf_meds_cliff.cliff import split_sentences
from hf_meds_cliff.cliff.teachers import (
    Judgment,
    OpenAICompatibleTeacher,
    RuleBasedToyTeacher,
    SolveFailure,
    Teacher,
    build_teacher,
    is_endpoint_failure,
)
from hf_meds_cliff.data import QWEN_MATH_INSTRUCTION
from hf_meds_cliff.testing import LoopbackChatServer, Reply

PROBLEM = "Compute (7 + 5) * 3 - 4."
REFERENCE = "7 + 5 = 12. 12 * 3 = 36. 36 - 4 = 32. The answer is \\boxed{32}."
ROLLOUT = "7 + 5 = 12. 12 * 3 = 35. 35 - 4 = 31. The answer is \\boxed{31}."
SENTENCES = [ROLLOUT[s:e] for s, e in split_sentences(ROLLOUT)]
GOOD_ANSWER = 'Sentence [1] multiplies wrongly.\n{"final_answer_correct": false, "first_mistake": 1}'


def fast_teacher(server, **kwargs):
    options = {"timeout": 2.0, "max_retries": 2, "backoff_base": 0.01, "backoff_max": 0.05}
    options.update(kwargs)
    return OpenAICompatibleTeacher(server.base_url, "teacher-model", **options)


def run(coroutine):
    return asyncio.run(coroutine)


async def judge_and_close(teacher, sentences=SENTENCES):
    try:
        return await teacher.judge(PROBLEM, REFERENCE, sentences)
    finally:
        await teacher.aclose()


def test_http_teacher_success_and_request_format():
    with LoopbackChatServer(lambda body, index: Reply(content=GOOD_ANSWER)) as server:
        teacher = fast_teacher(server, judge_temperature=0.3, extra_body={"top_p": 0.9})
        assert isinstance(teacher, Teacher)
        judgment = run(judge_and_close(teacher))
    assert judgment == Judgment(1, False, "ok", GOOD_ANSWER)
    (request,) = server.requests
    assert request.body["model"] == "teacher-model" and request.body["temperature"] == 0.3
    assert request.body["top_p"] == 0.9
    assert "[1] 12 * 3 = 35." in request.body["messages"][-1]["content"]
    assert "Authorization" not in request.headers
    assert teacher.counters["judge_calls"] == 1 and teacher.counters["requests"] == 1


def test_http_teacher_solve_uses_temperature_and_instruction():
    with LoopbackChatServer(lambda body, index: Reply(content=REFERENCE)) as server:
        teacher = fast_teacher(server)

        async def solve():
            try:
                return await teacher.solve(PROBLEM)
            finally:
                await teacher.aclose()

        assert run(solve()) == REFERENCE
    body = server.requests[0].body
    assert body["temperature"] == 0.6
    assert body["messages"] == [{"role": "user", "content": f"{PROBLEM}\n{QWEN_MATH_INSTRUCTION}"}]


def held_until(release: threading.Event, reply: Reply):
    """A responder that answers only once ``release`` is set (or after 30 s, so a broken client still ends)."""

    def responder(body, index):
        release.wait(timeout=30)
        return reply

    return responder


def test_http_teacher_timeout_after_retries():
    # The server answers nothing until the teacher has returned: a timeout judgment then shows the client gave
    # up at its own timeout (a client waiting for the server would get the good answer, after 30 s).
    release = threading.Event()
    with LoopbackChatServer(held_until(release, Reply(content=GOOD_ANSWER))) as server:
        teacher = fast_teacher(server, timeout=0.2, max_retries=1)
        try:
            judgment = run(judge_and_close(teacher))
        finally:
            release.set()
    assert judgment.status == "timeout" and is_endpoint_failure(judgment)
    assert judgment.first_mistake is None
    assert len(server.requests) == 2  # first attempt + one retry, both sent while the server held its reply
    assert teacher.counters["failures/timeout"] == 1 and teacher.counters["retries"] == 1


def test_http_teacher_timeout_bounds_a_trickling_reply():
    # Every byte arrives well within httpx's read timeout (one per 20 ms), but the whole reply takes ~6 s: a
    # client bounded only per read would receive all of it and parse the good answer ("ok"), not time out.
    with LoopbackChatServer(lambda body, index: Reply(content=GOOD_ANSWER, trickle=0.02)) as server:
        teacher = fast_teacher(server, timeout=0.3, max_retries=0)
        judgment = run(judge_and_close(teacher))
    assert judgment.status == "timeout" and len(server.requests) == 1
    assert teacher.counters["failures/timeout"] == 1


def test_http_teacher_retries_5xx_then_succeeds():
    def responder(body, index):
        return (
            Reply(status=503, raw_body='{"error": "overloaded"}') if index < 2 else Reply(content=GOOD_ANSWER)
        )

    with LoopbackChatServer(responder) as server:
        teacher = fast_teacher(server, max_retries=3)
        judgment = run(judge_and_close(teacher))
    assert judgment.status == "ok" and judgment.first_mistake == 1
    assert len(server.requests) == 3 and teacher.counters["retries"] == 2
    assert not any(key.startswith("failures/") for key in teacher.counters)


@pytest.mark.timeout(120)  # an uncapped Retry-After would sleep for an hour
def test_http_teacher_waits_as_long_as_retry_after_says():
    """A 429/503 with ``Retry-After`` (seconds) is retried no sooner than the server asked (capped at backoff_max),
    as the openai SDK does; the backoff alone would retry after ~0.01 s here."""

    def responder(body, index):
        if index == 0:
            return Reply(status=429, raw_body='{"error": "slow down"}', headers={"Retry-After": "0.4"})
        return Reply(content=GOOD_ANSWER)

    def recording_backoffs(teacher):
        waits, backoff = [], teacher._backoff
        teacher._backoff = lambda *args: waits.append(backoff(*args)) or waits[-1]
        return waits

    with LoopbackChatServer(responder) as server:
        teacher = fast_teacher(server, max_retries=1, backoff_max=5.0)
        waits = recording_backoffs(teacher)
        judgment = run(judge_and_close(teacher))
    assert judgment.status == "ok" and teacher.counters["retries"] == 1
    assert len(waits) == 1 and 0.4 <= waits[0] <= 5.0
    first, second = server.requests
    assert second.started - first.started >= 0.4  # the wait really happened before the retry

    with LoopbackChatServer(lambda body, index: Reply(status=503, headers={"Retry-After": "3600"})) as server:
        teacher = fast_teacher(server, max_retries=1, backoff_max=0.05)
        waits = recording_backoffs(teacher)
        judgment = run(judge_and_close(teacher))
    assert judgment.status == "http_error" and len(server.requests) == 2
    assert len(waits) == 1 and waits[0] <= 0.05  # capped at backoff_max, not an hour


def test_http_teacher_gives_up_on_persistent_500_and_does_not_retry_400():
    with LoopbackChatServer(lambda body, index: Reply(status=500, raw_body="boom")) as server:
        teacher = fast_teacher(server, max_retries=2)
        judgment = run(judge_and_close(teacher))
    assert judgment.status == "http_error" and "HTTP 500" in judgment.raw and len(server.requests) == 3

    with LoopbackChatServer(
        lambda body, index: Reply(status=400, raw_body='{"error": "bad model"}')
    ) as server:
        teacher = fast_teacher(server, max_retries=2)
        judgment = run(judge_and_close(teacher))
    assert judgment.status == "http_error" and len(server.requests) == 1
    assert teacher.counters["failures/http_error"] == 1


@pytest.mark.parametrize(
    ("reply", "status"),
    [
        (Reply(content="The second step is wrong, I think."), "parse_error"),
        (Reply(content='{"final_answer_correct": false, "first_mistake": 9}'), "out_of_range"),
        (Reply(content='{"final_answer_correct": false}'), "missing_field"),
        (Reply(content=""), "empty"),
        (Reply(raw_body="<html>gateway</html>"), "bad_response"),
        (Reply(raw_body='{"choices": []}'), "bad_response"),
    ],
)
def test_http_teacher_malformed_output(reply, status):
    with LoopbackChatServer(lambda body, index: reply) as server:
        teacher = fast_teacher(server)
        judgment = run(judge_and_close(teacher))
    assert judgment.status == status and judgment.first_mistake is None
    assert is_endpoint_failure(judgment) == (status == "bad_response")
    assert teacher.counters[f"failures/{status}"] == 1
    assert len(server.requests) == 1  # malformed answers are not retried


def test_http_teacher_empty_rollout_sends_no_request():
    with LoopbackChatServer(lambda body, index: Reply(content=GOOD_ANSWER)) as server:
        teacher = fast_teacher(server)
        judgment = run(judge_and_close(teacher, sentences=[]))
    assert judgment.status == "empty" and not server.requests and teacher.counters["failures/empty"] == 1


def test_http_teacher_connection_error():
    with LoopbackChatServer(lambda body, index: Reply(content=GOOD_ANSWER)) as server:
        base_url = server.base_url
    teacher = OpenAICompatibleTeacher(base_url, "m", timeout=1.0, max_retries=1, backoff_base=0.01)
    judgment = run(judge_and_close(teacher))
    assert judgment.status == "connection_error" and is_endpoint_failure(judgment)

    async def solve():
        return await teacher.solve(PROBLEM)

    failure = run(solve())
    assert isinstance(failure, SolveFailure) and failure.status == "connection_error" and not failure
    assert is_endpoint_failure(failure)
    assert teacher.counters["failures/connection_error"] == 2


def test_http_teacher_concurrency_bound_and_event_loop_reuse():
    first_wave = threading.Event()

    def responder(body, index):
        # The first three requests are held until all three are in the server at once: max_in_flight reaches
        # the bound by construction, not by the luck of timing (a client sending one at a time times out here).
        if index == 2:
            first_wave.set()
        if index < 3:
            first_wave.wait(timeout=10)
        return Reply(content=GOOD_ANSWER, delay=0.1)

    with LoopbackChatServer(responder) as server:
        teacher = fast_teacher(server, max_concurrency=3)

        async def many():
            return await asyncio.gather(*(teacher.judge(PROBLEM, REFERENCE, SENTENCES) for _ in range(10)))

        judgments = run(many())
        assert server.max_in_flight == 3  # bounded, and the bound is actually reached
        # a second event loop (the trainer may call asyncio.run every step) reuses the teacher
        again = run(judge_and_close(teacher))
    assert all(j.status == "ok" and j.first_mistake == 1 for j in judgments + [again])
    assert len(server.requests) == 11


def test_http_teacher_api_key_from_env_is_sent_but_never_shown(monkeypatch, caplog):
    secret = "sk-test-SECRET-123"
    monkeypatch.setenv("HF_MEDS_CLIFF_TEST_KEY", secret)
    with LoopbackChatServer(
        lambda body, index: Reply(status=500, raw_body="down") if index == 0 else Reply(content=GOOD_ANSWER)
    ) as server:
        teacher = fast_teacher(server, api_key_env="HF_MEDS_CLIFF_TEST_KEY", max_retries=0)
        with caplog.at_level(logging.DEBUG):
            failed = run(judge_and_close(teacher))
            judgment = run(judge_and_close(teacher))
    assert failed.status == "http_error" and judgment.status == "ok"
    assert server.requests[0].headers["Authorization"] == f"Bearer {secret}"
    assert secret not in repr(teacher) and "HF_MEDS_CLIFF_TEST_KEY" in repr(teacher)
    assert secret not in caplog.text and secret not in failed.raw
    # an unset variable means "no key" (a local vllm serve), said once in the log by name
    monkeypatch.delenv("HF_MEDS_CLIFF_TEST_KEY")
    with LoopbackChatServer(lambda body, index: Reply(content=GOOD_ANSWER)) as server:
        with caplog.at_level(logging.INFO):
            teacher = fast_teacher(server, api_key_env="HF_MEDS_CLIFF_TEST_KEY")
        assert run(judge_and_close(teacher)).status == "ok"
    assert "Authorization" not in server.requests[0].headers
    assert "HF_MEDS_CLIFF_TEST_KEY is not set" in caplog.text


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"base_url": "127.0.0.1:8000"}, "http"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"timeout": 0}, "timeout"),
        ({"max_retries": -1}, "max_retries"),
    ],
)
def test_http_teacher_bad_config(kwargs, match):
    arguments = {"base_url": "http://127.0.0.1:1/v1", "model": "m"}
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=match):
        OpenAICompatibleTeacher(**arguments)


# --- rule-based toy teacher --------------------------------------------------------------------


def test_rule_based_toy_teacher():
    teacher = RuleBasedToyTeacher()
    assert isinstance(teacher, Teacher)

    async def scenario():
        solution = await teacher.solve(f"{PROBLEM}\n{QWEN_MATH_INSTRUCTION}")
        wrong = await teacher.judge(PROBLEM, REFERENCE, SENTENCES)
        stripped = await teacher.judge(PROBLEM, REFERENCE, [s.strip() for s in SENTENCES])
        last_step_wrong = "7 + 5 = 12. 12 * 3 = 36. 36 - 4 = 30. The answer is \\boxed{30}."
        late = await teacher.judge(
            PROBLEM, REFERENCE, [last_step_wrong[s:e] for s, e in split_sentences(last_step_wrong)]
        )
        right = await teacher.judge(
            PROBLEM, REFERENCE, [REFERENCE[s:e] for s, e in split_sentences(REFERENCE)]
        )
        unsolvable = await teacher.solve("What is the capital of France?")
        not_toy = await teacher.judge("What is the capital of France?", "Paris.", ["Rome."])
        return solution, wrong, stripped, late, right, unsolvable, not_toy

    solution, wrong, stripped, late, right, unsolvable, not_toy = run(scenario())
    assert solution == REFERENCE
    assert (wrong.first_mistake, wrong.verdict_correct, wrong.status) == (1, False, "ok")
    assert stripped.first_mistake == 1
    assert late.first_mistake == 2
    assert (right.first_mistake, right.verdict_correct, right.status) == (None, True, "ok")
    assert unsolvable is None
    assert not_toy.status == "parse_error" and not is_endpoint_failure(not_toy)
    assert teacher.counters["failures/parse_error"] == 2 and teacher.counters["judge_calls"] == 5
    empty = run(teacher.judge(PROBLEM, REFERENCE, []))
    assert (empty.first_mistake, empty.status) == (None, "empty")


# --- local transformers teacher ----------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_causal_lm():
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tokenizer_model = Tokenizer(models.BPE(unk_token=None))
    tokenizer_model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    from tokenizers import decoders

    tokenizer_model.decoder = decoders.ByteLevel()
    tokenizer_model.train_from_iterator(
        [REFERENCE, ROLLOUT, GOOD_ANSWER] * 10,
        trainer=trainers.BpeTrainer(
            vocab_size=300, special_tokens=["<|eos|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tokenizer_model, eos_token="<|eos|>")
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=4096,
        n_embd=16,
        n_layer=1,
        n_head=2,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    return GPT2LMHeadModel(config), tokenizer


def test_transformers_teacher_runs_off_the_event_loop_and_serialises(tiny_causal_lm):
    from hf_meds_cliff.cliff.teachers import TransformersTeacher

    model, tokenizer = tiny_causal_lm
    teacher = TransformersTeacher(model, tokenizer, judge_temperature=0.0, max_new_tokens=24)
    assert isinstance(teacher, Teacher)
    lock = threading.Lock()
    active = {"now": 0, "max": 0}
    waiting: list[threading.Event] = []  # one per generation in progress, set by the event loop
    loop_ran_during_generation: list[bool] = []
    generate = model.generate

    def tracking_generate(*args, **kwargs):
        loop_ran = threading.Event()
        with lock:
            active["now"] += 1
            active["max"] = max(active["max"], active["now"])
            waiting.append(loop_ran)
        try:
            # Generation waits until the event loop has run a step: it can only if generation runs off the
            # loop's thread (on it, the loop is blocked and the wait ends unanswered after its timeout).
            loop_ran_during_generation.append(loop_ran.wait(timeout=5))
            return generate(*args, **kwargs)
        finally:
            with lock:
                active["now"] -= 1

    model.generate = tracking_generate

    async def scenario():
        done = asyncio.Event()

        async def watcher():
            while not done.is_set():
                with lock:
                    for event in waiting:
                        event.set()
                await asyncio.sleep(0.005)

        watching = asyncio.create_task(watcher())
        judgments = await asyncio.gather(*(teacher.judge(PROBLEM, REFERENCE, SENTENCES) for _ in range(3)))
        done.set()
        await watching
        return judgments

    try:
        judgments = run(scenario())
    finally:
        del model.generate
    assert loop_ran_during_generation == [True] * 3  # the event loop kept running during every generation
    assert (
        active["max"] == 1
    )  # generations were serialised (each one waited for the loop: a window to overlap)
    # a random model answers gibberish: defined outcome, identical under greedy decoding
    assert all(
        j.status in {"parse_error", "missing_field", "empty", "invalid_field", "out_of_range"}
        for j in judgments
    )
    assert len({j.raw for j in judgments}) == 1 and judgments[0].raw
    assert teacher.counters["judge_calls"] == 3


def test_transformers_teacher_parses_a_scripted_answer_and_solves(tiny_causal_lm):
    """With ``generate`` scripted to write a given text, a well-formed judge answer becomes a judgment, ``solve``
    returns the generated text, and the prompts the model saw are the judge and solve prompts."""
    import torch

    from hf_meds_cliff.cliff.teachers import TransformersTeacher

    model, tokenizer = tiny_causal_lm
    teacher = TransformersTeacher(
        model, tokenizer, judge_temperature=0.0, solve_temperature=0.0, max_new_tokens=64
    )
    scripted = iter([GOOD_ANSWER, REFERENCE, '{"final_answer_correct": true, "first_mistake": null}'])
    prompts: list[str] = []

    def scripted_generate(input_ids, **kwargs):
        prompts.append(tokenizer.decode(input_ids[0]))
        answer = tokenizer(next(scripted), add_special_tokens=False, return_tensors="pt")["input_ids"]
        eos = torch.tensor([[tokenizer.eos_token_id]])
        return torch.cat([input_ids, answer, eos], dim=1)

    model.generate = scripted_generate
    try:

        async def scenario():
            wrong = await teacher.judge(PROBLEM, REFERENCE, SENTENCES)
            solution = await teacher.solve(PROBLEM)
            right = await teacher.judge(
                PROBLEM, REFERENCE, [REFERENCE[s:e] for s, e in split_sentences(REFERENCE)]
            )
            return wrong, solution, right

        wrong, solution, right = run(scenario())
    finally:
        del model.generate
    assert wrong == Judgment(1, False, "ok", GOOD_ANSWER)
    assert solution == REFERENCE
    assert (right.first_mistake, right.verdict_correct, right.status) == (None, True, "ok")
    assert "[1] 12 * 3 = 35." in prompts[0] and PROBLEM in prompts[0]
    assert prompts[1].startswith(f"{PROBLEM}\n{QWEN_MATH_INSTRUCTION}")  # no chat template: the plain message
    assert teacher.counters["judge_calls"] == 2 and teacher.counters["solve_calls"] == 1
    assert not any(key.startswith("failures/") for key in teacher.counters)


# --- factory -----------------------------------------------------------------------------------


def test_build_teacher():
    from types import SimpleNamespace

    assert isinstance(build_teacher(), RuleBasedToyTeacher)
    assert isinstance(build_teacher("rule_based"), RuleBasedToyTeacher)
    config = SimpleNamespace(
        cliff_teacher="http",
        cliff_teacher_base_url="http://127.0.0.1:9/v1",
        cliff_teacher_model="m",
        cliff_teacher_api_key_env="HF_MEDS_CLIFF_UNSET_KEY",
        cliff_teacher_concurrency=5,
        cliff_teacher_timeout=7.0,
        cliff_teacher_max_retries=1,
        cliff_teacher_temperature=0.3,
        cliff_teacher_max_tokens=99,
    )
    from_config = build_teacher(config)
    assert isinstance(from_config, OpenAICompatibleTeacher)
    assert (from_config.max_concurrency, from_config.timeout, from_config.max_retries) == (5, 7.0, 1)
    assert (from_config.solve_temperature, from_config.judge_temperature, from_config.judge_max_tokens) == (
        0.3,
        0.3,
        99,
    )
    assert isinstance(build_teacher(SimpleNamespace(cliff_teacher="rule")), RuleBasedToyTeacher)
    with pytest.raises(ValueError, match="not both"):
        build_teacher(config, timeout=3.0)
    teacher = build_teacher(base_url="http://127.0.0.1:9/v1", model="m", max_concurrency=4, timeout=3.0)
    assert isinstance(teacher, OpenAICompatibleTeacher) and teacher.max_concurrency == 4
    with pytest.raises(ValueError, match="Unknown teacher kind"):
        build_teacher("vllm")
    with pytest.raises(ValueError, match="base_url"):
        build_teacher("http", model="m")
    with pytest.raises(ValueError, match="rule-based"):
        build_teacher("rule_based", timeout=3.0)


def test_loopback_server_records_requests():
    with LoopbackChatServer(lambda body, index: Reply(content=json.dumps({"index": index}))) as server:
        import urllib.error
        import urllib.request

        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(urllib.request.Request(server.base_url + "/nope", b"{}"))
    assert server.requests[0].path == "/v1/nope"
