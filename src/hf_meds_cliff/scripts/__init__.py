"""The training and evaluation entry points behind ``scripts/*.py`` and the ``hf-meds-cliff`` command.

Each module exposes ``make_parser(prog=None)``, ``parse_args(argv=None)`` and ``main(...)``, and runs as
``python -m hf_meds_cliff.scripts.<name>`` (which is what ``hf-meds-cliff <command>`` launches through
``accelerate launch -m``, as ``trl grpo`` launches ``trl/scripts/grpo.py``). The files in the repository's
``scripts/`` folder are thin wrappers kept for TRL users who copy scripts.
"""
