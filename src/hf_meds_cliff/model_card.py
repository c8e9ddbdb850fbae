"""Model cards for MEDS and Cliff runs.

TRL renders its own card (``lm_model_card.md``: base model, datasets, tags, TRL's citation block for
``_paper``) when a checkpoint is saved and on ``push_to_hub``. :class:`MethodModelCardMixin` lets TRL do
that, then adds what a reader needs to trust and reproduce a MEDS/Cliff run: the method's
hyperparameters (every ``meds_*``/``cliff_*`` config field and the RL settings that matter), the exact
command that produced the model, and pass@k results as ``model-index`` metadata when the evaluation
runner's ``summary.json`` is found in the output directory (or passed explicitly).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import fields
from importlib import resources
from pathlib import Path
from typing import Any

CORE_RL_FIELDS = (
    "loss_type",
    "learning_rate",
    "num_generations",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "steps_per_generation",
    "max_completion_length",
    "temperature",
    "top_p",
    "beta",
    "epsilon",
    "epsilon_high",
    "scale_rewards",
    "num_iterations",
    "max_steps",
    "seed",
)
PASSK_SUMMARY_NAMES = ("passk_summary.json", "eval/summary.json", "summary.json")


def method_hyperparameters(args: Any, prefix: str) -> dict[str, Any]:
    """The config fields that start with ``prefix`` plus the core RL settings, as plain JSON values."""
    values = {}
    for spec in fields(args):
        if spec.name.startswith(prefix) or spec.name in CORE_RL_FIELDS:
            value = getattr(args, spec.name)
            values[spec.name] = (
                value if isinstance(value, (int, float, str, bool, type(None))) else str(value)
            )
    return values


def reproduce_command(argv: list[str] | None = None) -> str:
    """The command line of this process, quoted for a shell (``accelerate launch`` shows as ``python``).

    Secrets (``--hub_token``, API keys, passwords; see :mod:`hf_meds_cliff.redaction`) become ``<redacted>``:
    the card is uploaded with the model. A run started by ``hf-meds-cliff <command>`` (whose process runs a
    module of :mod:`hf_meds_cliff.scripts`) shows as that command, not as the installed file's path.
    """
    from .redaction import redact_argv

    argv = redact_argv(sys.argv if argv is None else argv)
    if argv:
        from .errors import PROG
        from .scripts import TRAINING_COMMANDS

        package_scripts = Path(__file__).resolve().parent / "scripts"
        script = Path(argv[0])
        for command, (module_name, _) in TRAINING_COMMANDS.items():
            if script.name == f"{module_name}.py" and script.resolve().parent == package_scripts:
                return " ".join([PROG, command, *(shlex.quote(a) for a in argv[1:])])
    return " ".join(["python", *(shlex.quote(a) for a in argv)])


TASK_NAMES = {"math": "Mathematical reasoning", "code": "Code generation"}
"""``model-index`` task name per training domain."""


def model_index_from_summary(
    summary: Mapping[str, Any], model_name: str, task_name: str = TASK_NAMES["math"]
) -> list[dict[str, Any]]:
    """``model-index`` entries (one per benchmark) from a pass@k summary.

    ``summary["benchmarks"]`` maps a benchmark name to ``{"pass@k": {"1": 0.41, ...}, ...}``; the
    metric values are kept as fractions in [0, 1].

    >>> s = {"benchmarks": {"toy": {"pass@k": {"1": 0.5, "8": 0.9}, "n": 8}}}
    >>> model_index_from_summary(s, "m")[0]["results"][0]["metrics"][1]
    {'type': 'pass@8', 'value': 0.9, 'name': 'pass@8'}
    """
    results = []
    for benchmark, numbers in summary.get("benchmarks", {}).items():
        passk = numbers.get("pass@k", {})
        metrics = [
            {"type": f"pass@{k}", "value": float(v), "name": f"pass@{k}"}
            for k, v in sorted(passk.items(), key=lambda item: int(item[0]))
        ]
        if not metrics:
            continue
        results.append(
            {
                "task": {"type": "text-generation", "name": task_name},
                "dataset": {"name": benchmark, "type": benchmark},
                "metrics": metrics,
            }
        )
    return [{"name": model_name, "results": results}] if results else []


def render_method_section(
    method: str,
    hyperparameters: Mapping[str, Any],
    command: str,
    passk_summary: Mapping[str, Any] | None = None,
    domain: str | None = None,
) -> str:
    """Markdown section appended to TRL's card (template: ``templates/method_section.md``); ``domain`` (``"math"``
    or ``"code"``) adds the line saying which domain the run trained on."""
    template = (resources.files("hf_meds_cliff") / "templates" / "method_section.md").read_text()
    rows = "\n".join(f"| `{name}` | `{value}` |" for name, value in sorted(hyperparameters.items()))
    return template.format(
        method=method,
        hyperparameter_rows=rows,
        command=command,
        passk_table=render_passk_table(passk_summary),
        domain_line=f"\nTrained on the **{domain}** domain.\n" if domain else "",
    )


_LOCAL_BASE_MODEL = re.compile(
    r"This model is a fine-tuned version of \[None\]\(https://huggingface\.co/None\)(?P<dataset> on the \[[^\]]*\]\([^)]*\) dataset)?\."
)


def without_local_base_model(text: str, name: str) -> str:
    """TRL's card text with what its template writes for a base model given as a local folder (TRL passes no
    Hub id, and the template prints ``None``) said plainly: the title and the usage snippet name ``name``, and the
    first sentence says the base model was a local folder (with the dataset, when TRL names one).

    >>> print(without_local_base_model(
    ...     "# Model Card for None\\n\\nThis model is a fine-tuned version of [None](https://huggingface.co/None) on "
    ...     "the [openai/gsm8k](https://huggingface.co/datasets/openai/gsm8k) dataset.\\n", "run-1"))
    # Model Card for run-1
    <BLANKLINE>
    This model was fine-tuned from a local base model folder (not a Hugging Face Hub model) on the [openai/gsm8k](https://huggingface.co/datasets/openai/gsm8k) dataset.
    <BLANKLINE>
    """
    text = text.replace("# Model Card for None", f"# Model Card for {name}")
    text = _LOCAL_BASE_MODEL.sub(
        lambda match: "This model was fine-tuned from a local base model folder (not a Hugging Face Hub model)"
        + (match.group("dataset") or "")
        + ".",
        text,
    )
    return text.replace('model="None"', f'model="{name}"')


class LocalBaseModelCardMixin:
    """``create_model_card`` of a trainer without a method section (the scripts' GRPO/DAPO trainer): TRL's card,
    with a local base model said plainly (:func:`without_local_base_model`). Put it before ``GRPOTrainer``."""

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):
        super().create_model_card(model_name=model_name, dataset_name=dataset_name, tags=tags)
        if not self.is_world_process_zero():
            return
        path = Path(self.args.output_dir) / "README.md"
        if path.is_file():
            name = model_name or Path(self.args.output_dir).name
            path.write_text(without_local_base_model(path.read_text(encoding="utf-8"), name), encoding="utf-8")


def base_model_provenance(model_path: str | os.PathLike | None) -> str:
    """A card section saying where the base model came from and its licence, for a folder written by
    :mod:`hf_meds_cliff.real_models` (its ``warmup_metrics.json`` records them); empty for any other model.

    >>> base_model_provenance(None)
    ''
    """
    if not model_path:
        return ""
    try:
        facts = json.loads((Path(model_path) / "warmup_metrics.json").read_text())
    except (OSError, ValueError):
        return ""
    source = facts.get("source") if isinstance(facts, dict) else None
    if not isinstance(source, dict) or "license" not in facts or "pypi" not in source:
        return ""
    return (
        f"## Base model\n\n{facts.get('model', 'unknown')}, licence **{facts['license']}**, converted by "
        f"`hf_meds_cliff.real_models` from `{source.get('gguf')}` ({source.get('quantisation')}) in the PyPI package "
        f"`{source['pypi']}` (wheel SHA-256 `{source.get('wheel_sha256')}`), saved as {facts.get('dtype')} "
        "safetensors.\n"
    )


def render_passk_table(passk_summary: Mapping[str, Any] | None) -> str:
    """Markdown table of pass@k (in %) per benchmark, or a sentence saying there is no evaluation."""
    if not passk_summary or not passk_summary.get("benchmarks"):
        return "No pass@k evaluation was found next to this model (see `scripts/eval_passk.py`)."
    ks = sorted({int(k) for b in passk_summary["benchmarks"].values() for k in b.get("pass@k", {})})
    lines = ["| benchmark | " + " | ".join(f"pass@{k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    for name, numbers in passk_summary["benchmarks"].items():
        cells = [numbers.get("pass@k", {}).get(str(k)) for k in ks]
        lines.append(f"| {name} | " + " | ".join("" if c is None else f"{100 * c:.2f}" for c in cells) + " |")
    return "\n".join(lines)


def apply_passk_metadata(
    card, summary: Mapping[str, Any], model_name: str, task_name: str = TASK_NAMES["math"]
) -> bool:
    """Set the card's ``model-index`` (``eval_results``) from a pass@k summary; False when it has no results."""
    from huggingface_hub import EvalResult

    index = model_index_from_summary(summary, model_name, task_name)
    if not index:
        return False
    card.data.model_name = model_name
    card.data.eval_results = [
        EvalResult(
            task_type=result["task"]["type"], task_name=result["task"]["name"],
            dataset_type=result["dataset"]["type"], dataset_name=result["dataset"]["name"],
            metric_type=metric["type"], metric_value=metric["value"], metric_name=metric["name"],
        )
        for result in index[0]["results"]
        for metric in result["metrics"]
    ]  # fmt: skip
    return True


def find_passk_summary(output_dir: str | os.PathLike) -> dict[str, Any] | None:
    for name in PASSK_SUMMARY_NAMES:
        path = Path(output_dir) / name
        if path.is_file():
            return json.loads(path.read_text())
    return None


def add_passk_results(
    card_path: str | os.PathLike, summary: Mapping[str, Any], model_name: str | None = None
) -> None:
    """Put a pass@k summary into an existing card: the ``model-index`` metadata and the section's table.

    For a card written at the end of training, before ``scripts/eval_passk.py`` ran:
    ``python -m hf_meds_cliff.model_card MODEL_DIR --summary EVAL_DIR/summary.json``.
    """
    from huggingface_hub import ModelCard

    card = ModelCard.load(card_path)
    if not apply_passk_metadata(card, summary, model_name or Path(card_path).parent.name):
        raise ValueError(
            f"The summary has no pass@k results (keys: {sorted(summary)}); pass a summary.json of eval_passk.py."
        )
    table = render_passk_table(summary)
    marker = "### pass@k"
    if marker in card.text:
        head, tail = card.text.split(marker, 1)
        rest = tail.split("\n## ", 1)
        card.text = f"{head}{marker}\n\n{table}\n" + (f"\n## {rest[1]}" if len(rest) > 1 else "")
    else:
        card.text += f"\n{marker}\n\n{table}\n"
    card.save(card_path)


class MethodModelCardMixin:
    """Adds the method section and pass@k ``model-index`` to the card TRL writes.

    Overrides ``create_model_card`` only: it calls ``super()`` (TRL's card, with ``_tag_names``,
    ``_name`` and ``_paper``), then appends the section and metadata to the same ``README.md``.
    Subclasses set ``_config_prefix`` (``"meds_"`` or ``"cliff_"``).
    """

    _config_prefix = ""

    def _model_card_domain(self) -> str | None:
        """The task domain the run trained on (``"math"``/``"code"``), stated in the card; None: not stated."""
        return None

    def _method_card_sections(self) -> str:
        """Extra Markdown appended after the method section (a subclass's measured facts, e.g. teacher cost)."""
        return ""

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):
        super().create_model_card(model_name=model_name, dataset_name=dataset_name, tags=tags)
        if not self.is_world_process_zero():
            return
        from huggingface_hub import ModelCard

        path = Path(self.args.output_dir) / "README.md"
        card = ModelCard.load(path)
        name = model_name or Path(self.args.output_dir).name
        # TRL's template prints "None" for a model trained from a local folder (no Hub base model, no hub id).
        card.text = without_local_base_model(card.text, name)
        summary = find_passk_summary(self.args.output_dir)
        domain = self._model_card_domain()
        card.text += "\n" + render_method_section(
            self._name,
            method_hyperparameters(self.args, self._config_prefix),
            reproduce_command(),
            summary,
            domain=domain,
        )
        extra = self._method_card_sections()
        if extra:
            card.text += "\n" + extra
        base = base_model_provenance(getattr(getattr(self.model, "config", None), "_name_or_path", None))
        if base:
            card.text += "\n" + base
        if summary is not None:
            apply_passk_metadata(card, summary, name, TASK_NAMES.get(domain or "math", TASK_NAMES["math"]))
        card.save(path)


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        description="Add pass@k results (eval_passk.py's summary.json) to a model card."
    )
    parser.add_argument("model_dir", help="Folder holding the README.md card written by training.")
    parser.add_argument("--summary", required=True, help="summary.json written by scripts/eval_passk.py.")
    parser.add_argument("--model_name", default=None)
    args = parser.parse_args(argv)
    add_passk_results(
        Path(args.model_dir) / "README.md", json.loads(Path(args.summary).read_text()), args.model_name
    )


if __name__ == "__main__":
    main()
