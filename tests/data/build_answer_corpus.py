"""Build ``tests/data/answer_corpus.json``: Math-Verify's own test cases in training form, plus probes.

    python tests/data/build_answer_corpus.py --math_verify_repo PATH/TO/Math-Verify

Reads the ``pytest.mark.parametrize`` cases of the Math-Verify repository's ``tests/`` (with ``ast``;
nothing is imported from it) and keeps those that have a training form: a bare ground truth and a
completion that boxes its answer.

- Ground truth: one enclosing math environment is removed (``$..$``, ``$$..$$``, ``\\[..\\]``,
  ``\\(..\\)``); a ground truth with boxes becomes its boxed answer (math-verify's own
  ``extract_boxed_content``). Left out: prose, or a ``$`` left inside.
- Completion: a prediction that boxes its answer is used verbatim (often a whole solution);
  otherwise its bare form is boxed: ``The final answer is \\boxed{...}.``. Left out: prose (the test
  is about math-verify's anchor heuristics, which a boxed completion never reaches).
- Left out whole: tests of plain-text number extraction only (``match_types=["expr"]``: decimal
  commas and spaced thousands read from prose), string/choice extraction, timeouts, configs, and
  ``allow_set_relation_comp=True`` (a setting the reward does not expose).

The label is the test's expected value. ``float_rounding`` and ``strict`` come from the test's
settings. ``math_verify`` records plain math-verify's verdict on the training form (``parse`` of the
boxed ground truth and of the completion, then ``verify``), for reference. Each case on which
``check_answer`` disagrees with its label carries the reason in ``disagreement`` (from ``REASONS``
below); ``tests/test_rewards_corpus.py`` fails on any unexplained disagreement and on any false
positive.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import json
import logging
import math
import re
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUTPUT = HERE / "answer_corpus.json"
SOURCE_URL = "https://github.com/huggingface/Math-Verify"
SKIPPED_FILES = {"test_configs.py", "test_string_extraction.py", "test_timeout.py", "test_raise_on_error.py"}
TEXT_COMMANDS = re.compile(r"\\(?:text|mbox|textbf|mathrm|operatorname)\s*\{[^{}]*\}")
PROSE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}(?:[ \t]+[A-Za-z]{2,}){2,}")
ENVIRONMENTS = (("$$", "$$"), ("$", "$"), ("\\[", "\\]"), ("\\(", "\\)"))


def unwrap_environment(text: str) -> str:
    text = text.strip()
    for opening, closing in ENVIRONMENTS:
        if text.startswith(opening) and text.endswith(closing) and len(text) > len(opening) + len(closing):
            inner = text[len(opening) : -len(closing)]
            if "$" not in inner.replace("\\$", "") and "\\[" not in inner and "\\(" not in inner:
                return inner.strip()
    return text


def is_prose(text: str) -> bool:
    return bool(PROSE.search(TEXT_COMMANDS.sub("", text)))


def bare_answer(text: str) -> str | None:
    inner = unwrap_environment(text)
    if "$" in inner.replace("\\$", "") or "\\[" in inner or "\\(" in inner or is_prose(inner) or not inner:
        return None
    return inner


def training_form(gold: str, pred: str) -> tuple[str, str] | str:
    """``(ground_truth, completion)``, or the reason the case has no training form."""
    from latex2sympy2_extended.math_normalization import extract_boxed_content

    if "\\boxed" in gold or "\\fbox" in gold:
        ground_truth = extract_boxed_content(gold, mode="last").strip()
        if not ground_truth or "$" in ground_truth.replace("\\$", ""):
            return "ground truth: no single boxed answer"
    else:
        ground_truth = bare_answer(gold)
        if ground_truth is None:
            return "ground truth: prose or several math environments"
    if "\\boxed" in pred or "\\fbox" in pred:
        return ground_truth, pred
    bare_prediction = bare_answer(pred)
    if bare_prediction is None:
        return "prediction: prose without a box (tests math-verify's anchor heuristics)"
    return ground_truth, "The final answer is \\boxed{" + bare_prediction + "}."


def git(repo: Path, *arguments: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *arguments], capture_output=True, text=True, check=True
    ).stdout


def parametrized_cases(path: str, source: str):
    """``(test name, index, case dict, settings dict)`` for each parametrize case of a test file."""
    tree = ast.parse(source)
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        settings = {}
        for call in ast.walk(node):
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) in ("compare_strings", "verify"):
                for keyword in call.keywords:
                    settings[keyword.arg] = keyword.value
                if getattr(call.func, "id", None) == "verify" and not call.keywords:
                    settings.setdefault("match_types", ast.Constant(["default"]))
        for decorator in node.decorator_list:
            if not (isinstance(decorator, ast.Call) and getattr(decorator.func, "attr", "") == "parametrize"):
                continue
            names = [name.strip() for name in ast.literal_eval(decorator.args[0]).split(",")]
            for index, element in enumerate(decorator.args[1].elts):
                try:
                    values = ast.literal_eval(element)
                except ValueError:  # e.g. f"{math.sqrt(17):.15f}"
                    values = eval(compile(ast.Expression(element), path, "eval"), {"math": math})
                case = dict(zip(names, values))
                resolved = {}
                for key, value in settings.items():
                    if isinstance(value, ast.Name):
                        resolved[key] = case.get(value.id)
                    else:
                        try:
                            resolved[key] = ast.literal_eval(value)
                        except ValueError:
                            resolved[key] = None
                yield node.name, index, case, resolved


def math_verify_cases(repo: Path) -> tuple[list[dict], dict[str, int]]:
    cases, skipped = [], {}
    for path in sorted(git(repo, "ls-tree", "--name-only", "HEAD", "tests/").split()):
        name = Path(path).name
        if not (name.startswith("test_") and name.endswith(".py")) or name in SKIPPED_FILES:
            continue
        for test, index, case, settings in parametrized_cases(path, git(repo, "show", f"HEAD:{path}")):
            identifier = f"{name}::{test}[{index}]"
            expected = case.get("expected", case.get("result"))
            reason = None
            if "gold" not in case or "pred" not in case or expected not in (0, 1, True, False):
                reason = "not a gold/pred/expected case"
            elif settings.get("match_types") == ["expr"]:
                reason = "plain-text number extraction only"
            elif case.get("allow_set_relation_comp") or settings.get("allow_set_relation_comp") is True:
                reason = "allow_set_relation_comp=True"
            if reason is None:
                form = training_form(case["gold"], case["pred"])
                if isinstance(form, str):
                    reason = form
            if reason is not None:
                skipped[reason] = skipped.get(reason, 0) + 1
                continue
            ground_truth, completion = form
            strict = case.get("strict", settings.get("strict", True))
            precision = settings.get("precision", 6)
            cases.append(
                {
                    "id": identifier,
                    "source": "math-verify",
                    "ground_truth": ground_truth,
                    "completion": completion,
                    "label": int(expected),
                    "float_rounding": int(precision) if precision is not None else 6,
                    "strict": bool(strict),
                }
            )
    return cases, skipped


def _nested_fraction(levels: int) -> str:
    answer = "2"
    for _ in range(levels):
        answer = "\\frac{1}{" + answer + "}"
    return answer


# Adversarial probes: (ground truth, completion, label, note). Labels follow math-verify's conventions
# where they are deliberate (a bare number equals the same number with a unit, %, ° or currency sign)
# and are conservative elsewhere (a space or ", " inside digits is not a digit group).
PROBES = [
    # digit grouping
    ("1000", "\\boxed{1,000}", 1, "thousands separator"),
    ("1000", "\\boxed{1{,}000}", 1, "LaTeX thousands separator"),
    ("1000000", "The total is \\boxed{1,000,000}.", 1, "thousands separators"),
    ("32349", "\\boxed{32,349}", 1, "thousands separator"),
    ("32349", "\\boxed{32, 349}", 0, "old shortcut: a pair, not a number"),
    ("1234", "\\boxed{1, 234}", 0, "a pair, not a number"),
    ("1000", "\\boxed{1 000}", 0, "a space inside digits is not a digit group (conservative)"),
    ("23", "\\boxed{2 3}", 0, "old shortcut: a space inside digits"),
    ("5000", "\\boxed{5, 000}", 0, "old shortcut: a pair"),
    ("3100", "\\boxed{3, 100}", 0, "old shortcut: a pair"),
    ("12345", "\\boxed{12,345.0}", 1, "separator and decimal point"),
    # lists vs numbers
    ("0, 100", "\\boxed{100}", 0, "old shortcut: one element of a pair"),
    ("1, 234", "\\boxed{1234}", 0, "old shortcut: a number for a pair"),
    ("0, 100", "\\boxed{0, 100}", 1, "the pair"),
    ("0, 100", "\\boxed{100, 0}", 1, "a list answer is a set: order-free"),
    ("2, 3", "\\boxed{2, 3, 4}", 0, "an extra element"),
    ("2, 3", "\\boxed{2}", 0, "a missing element"),
    # spaces inside numbers
    ("23", "\\boxed{ 23 }", 1, "spaces around the number"),
    ("-5", "\\boxed{- 5}", 1, "a space after the sign"),
    ("0.25", "\\boxed{0. 25}", 0, "a space inside a decimal (conservative)"),
    # sets and intervals
    ("\\{1, 2\\}", "\\boxed{\\{2, 1\\}}", 1, "set order"),
    ("[0, 1)", "\\boxed{[0, 1)}", 1, "same interval"),
    ("[0, 1)", "\\boxed{[0, 1]}", 0, "closed vs half-open"),
    ("(0, 1)", "\\boxed{[0, 1]}", 0, "open vs closed"),
    ("(-\\infty, 2]", "\\boxed{(-\\infty, 2]}", 1, "same interval"),
    ("(-\\infty, 2]", "\\boxed{(-\\infty, 3]}", 0, "other end point"),
    ("[1, 2] \\cup [3, 4]", "\\boxed{[3, 4] \\cup [1, 2]}", 1, "union order"),
    # units
    ("10", "\\boxed{10 \\text{ cm}}", 1, "math-verify drops units"),
    ("10", "\\boxed{10\\text{ m}^2}", 1, "math-verify drops units"),
    ("10", "\\boxed{11 \\text{ cm}}", 0, "wrong number with a unit"),
    # currency
    ("18", "\\boxed{18\\$}", 1, "old shortcut: escaped dollar after the number"),
    ("18", "\\boxed{\\$18}", 1, "escaped dollar before the number"),
    ("18", "\\boxed{\\$18.00}", 1, "dollars and cents"),
    ("18", "\\boxed{\\$19}", 0, "wrong amount"),
    ("18.50", "\\boxed{\\$18.5}", 1, "trailing zero"),
    # percent
    ("50\\%", "\\boxed{50\\%}", 1, "same percentage"),
    ("50\\%", "\\boxed{50}", 1, "math-verify: the number of a percentage"),
    ("50\\%", "\\boxed{51\\%}", 0, "wrong percentage"),
    ("50", "\\boxed{50\\%}", 1, "math-verify: the number of a percentage"),
    # degrees
    ("45^\\circ", "\\boxed{45}", 1, "degree mark dropped"),
    ("45", "\\boxed{45^{\\circ}}", 1, "degree mark dropped"),
    ("45^\\circ", "\\boxed{46^\\circ}", 0, "wrong angle"),
    # \text{}
    ("\\text{Evelyn}", "Therefore $\\boxed{\\text{Evelyn}}$ is our answer.", 1, "a word"),
    ("\\text{Evelyn}", "\\boxed{\\text{Carla}}", 0, "another word"),
    ("\\text{even}", "\\boxed{\\text{odd}}", 0, "another word"),
    # choice letters
    ("\\text{(B)}", "\\boxed{B}", 1, "choice letter"),
    ("B", "\\boxed{(B)}", 1, "choice letter in parentheses"),
    ("B", "\\boxed{\\text{B}}", 1, "choice letter as text"),
    ("B", "\\boxed{C}", 0, "other letter"),
    ("B", "\\boxed{\\text{(C)}}", 0, "other letter"),
    ("A", "\\boxed{A, B}", 0, "two letters for one"),
    # trailing prose after the box
    ("12", "The answer is \\boxed{12}. Let me double check: 12 = 12, yes.", 1, "prose after the box"),
    ("12", "\\boxed{12} because 13 is too big", 1, "prose after the box"),
    ("12", "So \\boxed{13}. Hmm, actually it should be 12.", 0, "the box decides, not the prose after it"),
    # several boxes
    ("2, 3", "The roots are \\boxed{2} and \\boxed{3}.", 1, "two boxes joined by 'and'"),
    ("2, 3", "$x = \\boxed{3}$, $y=\\boxed{2}$", 1, "two boxes, a set answer"),
    ("5", "\\boxed{5} or \\boxed{6}", 0, "hedging between candidates"),
    ("5", ", ".join(f"\\boxed{{{i}}}" for i in range(1, 101)), 0, "boxing every candidate"),
    ("2, 3", ", ".join(f"\\boxed{{{i}}}" for i in range(1, 101)), 0, "boxing every candidate"),
    (
        "5",
        "First \\boxed{4}. That contradicts the second condition derived above, so the answer is \\boxed{5}",
        1,
        "an intermediate box far before the final one",
    ),
    ("7", "\\boxed{7} \\boxed{7}", 1, "a repeated box"),
    # numbers in other forms
    ("\\frac{1}{2}", "\\boxed{0.5}", 1, "fraction vs decimal"),
    ("\\frac{1}{3}", "\\boxed{0.33}", 0, "rounded too coarsely"),
    ("12", "\\boxed{12.0}", 1, "integer vs decimal"),
    ("12", "\\boxed{12.5}", 0, "another decimal"),
    ("7", "\\boxed{007}", 1, "leading zeros"),
    ("5", "\\boxed{x = 5}", 1, "assignment"),
    ("\\frac{1}{2}", "\\boxed{" + _nested_fraction(400) + "}", 0, "400-level \\frac (value 2): refused"),
]


def probe_cases() -> list[dict]:
    return [
        {
            "id": f"probe[{index}]",
            "source": "probe",
            "ground_truth": ground_truth,
            "completion": completion,
            "label": label,
            "float_rounding": 6,
            "strict": True,
            "note": note,
        }
        for index, (ground_truth, completion, label, note) in enumerate(PROBES)
    ]


# Why check_answer disagrees with a label, by case id (filled from the build's own report).
REASONS: dict[str, str] = {
    "test_all.py::test_math_extraction_additional_cases[17]": (
        "the completion's last box is an intermediate result (\\boxed{255}); its final answer follows as "
        "'The final answer is $10,455$' without a box. The reward reads boxed answers only (the prompt asks "
        "for one), where plain math-verify also tries its 'final answer is' heuristics: a miss, not a false "
        "positive."
    ),
    "test_yujianll.py::test_string_extraction[9]": (
        "the label is wrong: 1 + 1/e is not 1 - 1/e. The upstream test pins a parsing quirk of its "
        "'$1 - \\frac{1}{\\mathrm{e}}$' form; math-verify itself scores the training form wrong, as we do."
    ),
}


def plain_math_verify(case: dict) -> int:
    from math_verify import parse, verify

    gold = parse("\\boxed{" + case["ground_truth"] + "}", parsing_timeout=None)
    pred = parse(case["completion"], parsing_timeout=None)
    return int(
        bool(
            gold
            and pred
            and verify(
                gold, pred, float_rounding=case["float_rounding"], strict=case["strict"], timeout_seconds=None
            )
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--math_verify_repo",
        type=Path,
        required=True,
        help="A git clone of Math-Verify (bare or not); HEAD is read.",
    )
    args = parser.parse_args()
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    from hf_meds_cliff.rewards import MathVerifyPool, check_answers, nesting_depth

    commit = git(args.math_verify_repo, "rev-parse", "HEAD").strip()
    source_cases, skipped = math_verify_cases(args.math_verify_repo)
    cases = source_cases + probe_cases()
    pool = MathVerifyPool(num_workers=2)
    try:
        for case in cases:
            # plain math-verify needs minutes (or forever) on the refused 400-level fraction
            case["math_verify"] = None if nesting_depth(case["completion"]) > 20 else plain_math_verify(case)
            (check,) = check_answers(
                [case["completion"]],
                [case["ground_truth"]],
                pool=pool,
                timeout=60,
                float_rounding=case["float_rounding"],
                strict=case["strict"],
            )
            case["ours"] = check.status
            if int(check.correct) != case["label"]:
                case["disagreement"] = REASONS.get(case["id"], "UNEXPLAINED")
    finally:
        pool.close()
    about = {
        "what": "Answer-checking corpus: Math-Verify's own test cases in training form (bare ground truth, "
        "completion that boxes its answer) plus adversarial probes; see build_answer_corpus.py.",
        "source": f"{SOURCE_URL} tests/ at commit {commit}",
        "license": "The Math-Verify cases are taken from its test suite: Copyright (c) 2024 The HuggingFace Team, "
        "licensed under the Apache License 2.0 (the repository's LICENCE file; the test files carry an MIT "
        "notice). Both permit redistribution with this notice. The probes are this project's (Apache-2.0).",
        "built_with": f"math-verify {importlib.metadata.version('math-verify')}, "
        f"latex2sympy2_extended {importlib.metadata.version('latex2sympy2_extended')}",
        "left_out": skipped,
        "fields": {
            "label": "expected verdict (the Math-Verify test's, or the probe's)",
            "math_verify": "plain math-verify's verdict on the training form at build time (reference only; "
            "null where it would take minutes)",
            "ours": "check_answer's status at build time (the test recomputes it)",
            "disagreement": "why check_answer's verdict differs from the label",
        },
    }
    OUTPUT.write_text(json.dumps({"about": about, "cases": cases}, indent=1, ensure_ascii=False) + "\n")
    disagreements = [c for c in cases if "disagreement" in c]
    false_positives = [c for c in disagreements if c["label"] == 0]
    print(
        f"{len(source_cases)} Math-Verify cases, {len(cases) - len(source_cases)} probes; left out {skipped}"
    )
    print(f"agreement {len(cases) - len(disagreements)}/{len(cases)}; false positives {len(false_positives)}")
    for case in disagreements:
        print(
            f"  {case['id']}: label {case['label']} ours {case['ours']} plain {case['math_verify']} | "
            f"{case['ground_truth'][:50]!r} | {case['completion'][-80:]!r} | {case['disagreement']}"
        )


if __name__ == "__main__":
    main()
