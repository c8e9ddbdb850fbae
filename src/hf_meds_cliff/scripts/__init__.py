"""The training and evaluation entry points behind ``scripts/*.py`` and the ``hf-meds-cliff`` command.

Each module exposes ``make_parser(prog=None)``, ``parse_args(argv=None)`` and ``main(...)``, and runs as
``python -m hf_meds_cliff.scripts.<name>`` (which is what ``hf-meds-cliff <command>`` launches through
``accelerate launch -m``, as ``trl grpo`` launches ``trl/scripts/grpo.py``). The files in the repository's
``scripts/`` folder are thin wrappers kept for TRL users who copy scripts.
"""

# command of ``hf-meds-cliff`` -> (module of this package, help); the CLI and the model card's reproduce line read it
TRAINING_COMMANDS = {
    "meds": (
        "train_meds",
        "Train with MEDS (memory-enhanced dynamic reward shaping); no flags = the toy world.",
    ),
    "cliff": ("train_cliff", "Train with Cliff (first-mistake token advantages); no flags = the toy world."),
    "grpo": ("train_grpo", "Train the GRPO/DAPO baseline; no flags = the toy world."),
}
