"""Writes ``tests/data/meds_memory_v2/``: an error memory in the checkpoint format of version 2 (one npz, one
JSON, one snippet file per memory), as hf_meds_cliff wrote it up to commit 33bb6e1, and ``expected.json``: what
that code returned for a follow-up call (cluster sizes) and held after it (labels, fingerprint of the saved
memory). Run once with the code of that commit; the test checks that later versions still load the folder and
continue it exactly.

    PYTHONPATH=src python tests/data/build_meds_memory_v2.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from hf_meds_cliff.meds.memory import ErrorMemory, RowSnippet

FOLDER = Path(__file__).parent / "meds_memory_v2"


def trace(seed: int = 0):
    """Three steps over four keys: rows near 3 centres per key (float32 values, as the trainer passes them)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(4, 3, 6))
    steps = []
    for step in range(3):
        keys, rows, snippets = [], [], []
        for prompt in range(4):
            for member in range(5):
                centre = centres[prompt, rng.integers(3)]
                keys.append((f"prompt-{prompt}", bool(member == 4)))
                rows.append(centre + 0.05 * rng.normal(size=6))
                snippets.append(RowSnippet(f"step {step} prompt {prompt} member {member} \\boxed{{{member}}}", step + 1,
                                           len(snippets)))
        steps.append((keys, np.asarray(rows, dtype=np.float32), snippets))
    return steps


def main() -> None:
    steps = trace()
    memory = ErrorMemory()
    for keys, rows, snippets in steps[:2]:
        memory.assign_and_update(keys, rows, snippets)
    memory.set_note(("prompt-0", False), "What is 1 + 1?")
    memory.save(FOLDER)
    saved_fingerprint = memory.fingerprint()
    keys, rows, snippets = steps[2]
    sizes = memory.assign_and_update(keys, rows, snippets)
    expected = {
        "saved_fingerprint": saved_fingerprint,
        "next_sizes": sizes.tolist(),
        "labels_after": {json.dumps(list(key)): memory.stored_labels(key).tolist() for key in memory.keys()},
        "rows_after": memory.num_rows,
    }
    (FOLDER / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()
