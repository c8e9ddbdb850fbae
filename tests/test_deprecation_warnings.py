"""Our configs, recipes, scripts and trainers raise no deprecation warning of their own.

transformers 5 renamed ``gradient_checkpointing*`` to ``activation_checkpointing*``; the old names warn
(``FutureWarning``) on every use. TRL 1.16 still sets the old config field by default and calls the old model methods
inside ``GRPOTrainer`` itself: that one call (``GRPOTrainer._generate_and_score_completions`` ->
``disable_gradient_checkpointing`` -> ``model.is_gradient_checkpointing``) is TRL's, not ours, and is the only
deprecation allowed below. Everything else (a config default, a recipe key, a call from our code) fails the tests.
"""

from __future__ import annotations

import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from helpers import ROOT, load_script

from hf_meds_cliff import CliffConfig, MEDSConfig
from hf_meds_cliff.dapo import DAPOConfig
from hf_meds_cliff.script_utils import build_parser, parse_script_args

CPU = {"bf16": False, "use_cpu": True, "report_to": []}
# Frames that only pass a deprecated call through; the first frame outside them made it.
PASS_THROUGH = ("/transformers/", "/contextlib.py", "/warnings.py", "/trl/models/utils.py")
# TRL's own trainer calling a deprecated transformers API (not caused by our code or configs).
UPSTREAM_CALLERS = ("/trl/trainer/grpo_trainer.py",)


@dataclass
class Deprecation:
    message: str
    site: str  # where warnings.warn ran
    caller: str  # the first frame outside PASS_THROUGH: who made the deprecated call

    @property
    def upstream(self) -> bool:
        return "/transformers/" in self.site and self.caller.startswith(
            UPSTREAM_CALLERS, self.caller.find("/trl/")
        )

    def __str__(self) -> str:
        return f"{self.message[:120]} (raised at {self.site}, called from {self.caller})"


class DeprecationRecorder:
    """Records every ``DeprecationWarning``/``FutureWarning`` with the stack frame that made the deprecated call."""

    def __enter__(self):
        self._catcher = warnings.catch_warnings()
        self._catcher.__enter__()
        warnings.simplefilter("always")
        warnings.showwarning = self._record
        self.deprecations: list[Deprecation] = []
        return self

    def __exit__(self, *exc_info) -> None:
        self._catcher.__exit__(*exc_info)

    def _record(self, message, category, filename, lineno, file=None, line=None) -> None:
        if not issubclass(category, (DeprecationWarning, FutureWarning)):
            return
        stack = [
            frame for frame in traceback.extract_stack()[:-1] if not frame.filename.endswith("warnings.py")
        ]
        site = stack[-1]
        caller = next(
            (frame for frame in reversed(stack) if not any(part in frame.filename for part in PASS_THROUGH)),
            site,
        )
        self.deprecations.append(
            Deprecation(str(message), f"{site.filename}:{site.lineno}", f"{caller.filename}:{caller.lineno}")
        )

    @property
    def ours(self) -> list[str]:
        return [str(d) for d in self.deprecations if not d.upstream]


@pytest.mark.parametrize("config_cls", [DAPOConfig, MEDSConfig, CliffConfig])
def test_configs_raise_no_deprecation_and_keep_trls_checkpointing_default(tmp_path, config_cls):
    with DeprecationRecorder() as recorder:
        config = config_cls(output_dir=str(tmp_path), **CPU)
        off = config_cls(output_dir=str(tmp_path), activation_checkpointing=False, **CPU)
    assert recorder.ours == []
    assert config.activation_checkpointing is True and config.gradient_checkpointing is True  # TRL's default
    assert off.activation_checkpointing is False and off.gradient_checkpointing is False
    # A user who passes the old name gets transformers' warning (their call) and what they asked for.
    with pytest.warns(FutureWarning, match="`gradient_checkpointing` is deprecated"):
        legacy = config_cls(output_dir=str(tmp_path), gradient_checkpointing=False, **CPU)
    assert legacy.activation_checkpointing is False


@pytest.mark.parametrize(
    "recipe",
    sorted((ROOT / "recipes").glob("*.yaml")) + sorted((ROOT / "src/hf_meds_cliff/recipes").glob("*.yaml")),
    ids=lambda path: path.name,
)
def test_recipes_raise_no_deprecation(recipe: Path):
    method = next(m for m in ("meds", "cliff", "grpo", "dapo") if m in recipe.name)
    config_cls = {"meds": MEDSConfig, "cliff": CliffConfig}.get(method, DAPOConfig)
    overrides = [] if torch.cuda.is_available() else ["--bf16", "false", "--use_cpu", "true"]
    with DeprecationRecorder() as recorder:
        build_parser(config_cls).parse_args_and_config(args=["--config", str(recipe), *overrides])
    assert recorder.ours == []


def test_activation_checkpointing_disabled_restores_the_state_without_deprecated_calls(toy_tokenizer):
    from hf_meds_cliff._activation_checkpointing import activation_checkpointing_disabled
    from hf_meds_cliff.toy import build_toy_model

    model = build_toy_model(toy_tokenizer, seed=0)
    model.activation_checkpointing_enable({"use_reentrant": False})
    with DeprecationRecorder() as recorder:
        with activation_checkpointing_disabled(model, {"use_reentrant": False}):
            assert not model.is_activation_checkpointing
        assert model.is_activation_checkpointing
        model.activation_checkpointing_disable()
        with activation_checkpointing_disabled(model):
            pass
        assert not model.is_activation_checkpointing  # off before: stays off
    assert recorder.deprecations == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("method", "config_cls", "extra"),
    [
        ("grpo", DAPOConfig, []),
        ("cliff", CliffConfig, []),
        # activation checkpointing on: MEDS' own no-grad feature forward switches it off and on again
        ("meds", MEDSConfig, ["--activation_checkpointing", "true"]),
    ],
)
def test_a_toy_training_step_raises_no_deprecation_of_ours(
    tmp_path, toy_policy_path, method, config_cls, extra
):
    """Parse the toy recipe, build the trainer and train one step through the script, as a newcomer does."""
    script = load_script(f"train_{method}")
    argv = [
        "--model_name_or_path", str(toy_policy_path), "--config", str(ROOT / f"src/hf_meds_cliff/recipes/toy_{method}.yaml"),
        "--output_dir", str(tmp_path), "--max_steps", "1", "--per_device_train_batch_size", "16", *extra,
    ]  # fmt: skip
    with DeprecationRecorder() as recorder:
        trainer = script.main(*parse_script_args(config_cls, method, argv)[:3])
    assert any("loss" in record for record in trainer.state.log_history)
    assert recorder.ours == []  # what may be left is TRL's own GRPOTrainer calling the old transformers names
