"""Compare the SmolLM2 study's final models pairwise, tensor by tensor (reported beside, not tested).

The study's results show ``meds_ds`` and ``dapo_ds`` (and ``cliff_sim`` and ``cliff``) with sample-for-sample equal
evaluations. This script says whether their final weights are equal too, and how far each arm moved from the base
model (the scale against which a difference reads):

    python studies/compare_final_weights.py --work outputs/smollm2_study \
        --output docs/real_model_results/study/final_weights.json

``--work`` is the study's ``--output_dir`` (each run keeps ``<arm>-seed<s>/final/``); the JSON records, per pair and
seed, the SHA-256 of both ``model.safetensors`` files, whether every tensor is bit-equal, the number of tensors that
differ, the largest absolute difference and ``||a - b|| / ||b - base||`` (the difference relative to how far the
baseline arm moved from the base model), plus the commit, machine and command.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from smollm2_study import STUDY, model_path, provenance  # noqa: E402

from hf_meds_cliff.checkpointing import file_sha256  # noqa: E402

PAIRS = (("meds_ds", "dapo_ds"), ("cliff_sim", "cliff"), ("grpo_teacher_sim", "cliff_sim"))


def load(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def compare(a: dict, b: dict, base: dict) -> dict:
    """Tensor-wise comparison of ``a`` and ``b``; ``base`` gives the scale (how far ``b`` moved from it)."""
    if a.keys() != b.keys():
        raise ValueError(f"The two models have different tensors: {sorted(a.keys() ^ b.keys())[:5]}.")
    differing, max_abs, diff_sq, moved_sq = 0, 0.0, 0.0, 0.0
    for name in sorted(a):
        x, y = a[name].double(), b[name].double()
        if not bool((x == y).all()):
            differing += 1
            max_abs = max(max_abs, float((x - y).abs().max()))
        diff_sq += float(((x - y) ** 2).sum())
        if name in base:
            moved_sq += float(((y - base[name].double()) ** 2).sum())
    return {
        "tensors": len(a),
        "tensors_differing": differing,
        "bit_equal": differing == 0,
        "max_abs_difference": max_abs,
        "l2_difference": math.sqrt(diff_sq),
        "l2_baseline_moved_from_base": math.sqrt(moved_sq),
        "relative_difference": math.sqrt(diff_sq) / math.sqrt(moved_sq) if moved_sq else None,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="outputs/smollm2_study", help="the study's --output_dir")
    parser.add_argument("--output", required=True, help="where to write the JSON")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    args = parser.parse_args(argv)
    work = Path(args.work)
    base_dir = Path(model_path(STUDY))
    base = load(base_dir)
    rows = []
    for arm, baseline in PAIRS:
        for seed in args.seeds:
            a_dir, b_dir = work / f"{arm}-seed{seed}" / "final", work / f"{baseline}-seed{seed}" / "final"
            missing = [str(d) for d in (a_dir, b_dir) if not (d / "model.safetensors").exists()]
            if missing:
                raise FileNotFoundError(f"No final model in {missing}; pass the study's --output_dir as --work.")
            row = {"arm": arm, "baseline": baseline, "seed": seed,
                   "sha256": {arm: file_sha256(a_dir / "model.safetensors"),
                              baseline: file_sha256(b_dir / "model.safetensors")},
                   **compare(load(a_dir), load(b_dir), base)}  # fmt: skip
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "sha256"}))
    command = ["python", "studies/compare_final_weights.py", *(argv if argv is not None else sys.argv[1:])]
    record = {"pairs": rows, "base_model": str(base_dir), **provenance(command)}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
