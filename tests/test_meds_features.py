"""MEDS layer-logit features: answer-token location on real tokenizers and hook capture vs the slow path."""

from __future__ import annotations

import random

import pytest
import torch
from torch import nn

from hf_meds_cliff.meds.features import (
    AnswerLocation,
    AnswerLogitCapture,
    answer_logit_features,
    features_from_layer_logits,
    locate_answer_token,
    resolve_decoder,
    select_layers,
)

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")


# ----------------------------------------------------------------------------------------------
# Tokenizers built in the test: a byte-level BPE whose merges glue "{" to answer digits.
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bpe_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    # Words split at spaces only (no punctuation/digit regex), so merges may cross the "{" / answer
    # boundary ("\\boxed{1", "\\boxed{x+") as in real math BPEs, while "\\b" + "oxed{" also exists.
    rng = random.Random(0)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(" ", behavior="merged_with_next"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    corpus = [
        f"So x = {rng.randint(0, 99)}. The answer is \\boxed{{1{rng.randint(0, 99)}}}." for _ in range(400)
    ]
    corpus += [
        f"Then \\boxed{{x+{rng.randint(0, 9)}}} or \\boxed{{-{rng.randint(0, 9)}}}." for _ in range(50)
    ]
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<pad>", "<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", eos_token="<eos>")
    return fast


def _char_reference(ids, tokenizer):
    """Slow reference: decode every prefix to find the token holding the last '\\boxed{' brace."""
    full = tokenizer.decode(ids, skip_special_tokens=False)
    brace = full.rfind("\\boxed{")
    if brace < 0:
        return None
    brace += len("\\boxed{") - 1
    for k in range(1, len(ids) + 1):
        prefix = tokenizer.decode(ids[:k], skip_special_tokens=False)
        if len(prefix) > brace:
            return k - 1, len(prefix) > brace + 1
    raise AssertionError("unreachable")


def test_bpe_tokenizer_has_brace_digit_merges(bpe_tokenizer):
    vocab = bpe_tokenizer.get_vocab()
    assert "Ġ\\boxed{1" in vocab, "the test tokenizer must merge '{' with answer digits"
    assert "oxed{" in vocab and "{" in vocab


@pytest.mark.parametrize(
    "text",
    [
        "So x = 3. The answer is \\boxed{13}.",  # "{1" style merge
        "Then \\boxed{x+2} or \\boxed{-7}.",  # two boxes: the last one counts
        "The answer is \\boxed{ 7 }<eos>",
        "\\boxed{1}\\boxed{12}",
    ],
)
def test_locate_answer_token_on_bpe_matches_char_reference(bpe_tokenizer, text):
    ids = bpe_tokenizer(text, add_special_tokens=False)["input_ids"]
    location = locate_answer_token(ids, bpe_tokenizer, rule="decoded")
    brace_token, merged = _char_reference(ids, bpe_tokenizer)
    if merged:
        assert location == AnswerLocation(brace_token - 1, brace_token, ids[brace_token])
    else:
        assert location == AnswerLocation(brace_token, brace_token + 1, ids[brace_token + 1])
    # The target token's text starts the answer (it is never the brace-only token).
    target_text = bpe_tokenizer.decode([location.target_id])
    assert target_text.lstrip("{") != "" and not target_text.startswith("\\boxed")


def test_locate_answer_token_merged_brace_case_is_exercised(bpe_tokenizer):
    ids = bpe_tokenizer("The answer is \\boxed{13}.", add_special_tokens=False)["input_ids"]
    tokens = bpe_tokenizer.convert_ids_to_tokens(ids)
    location = locate_answer_token(ids, bpe_tokenizer, rule="decoded")
    assert tokens[location.target_index] == "Ġ\\boxed{1"
    assert location.query_index == location.target_index - 1


def test_locate_answer_token_edge_cases(bpe_tokenizer):
    assert locate_answer_token([], bpe_tokenizer) is None
    no_box = bpe_tokenizer("The answer is 13.", add_special_tokens=False)["input_ids"]
    assert locate_answer_token(no_box, bpe_tokenizer) is None
    # A completion that ends right after the brace has no answer token.
    ends = bpe_tokenizer("x \\boxed{", add_special_tokens=False)["input_ids"]
    if bpe_tokenizer.decode(ends[-1:]).endswith("{"):
        assert locate_answer_token(ends, bpe_tokenizer) is None
    # A long completion: the suffix window must grow to reach the box.
    long_ids = bpe_tokenizer("\\boxed{5} " + "x = 1. " * 60, add_special_tokens=False)["input_ids"]
    location = locate_answer_token(long_ids, bpe_tokenizer, rule="decoded")
    assert location is not None and bpe_tokenizer.decode(long_ids[: location.target_index + 1]).endswith("5")


def test_locate_answer_token_on_toy_tokenizer(toy_tokenizer):
    text = "7 + 5 = 12. 12 * 3 = 36. The answer is \\boxed{36}."
    ids = toy_tokenizer(text, add_special_tokens=False)["input_ids"]
    location = locate_answer_token(ids, toy_tokenizer)
    assert location is not None
    assert toy_tokenizer.decode(ids[: location.query_index + 1]).rstrip().endswith("\\boxed{")
    assert toy_tokenizer.decode([location.target_id]).strip() == "3"


# ----------------------------------------------------------------------------------------------
# Hook capture vs output_hidden_states on tiny random models.
# ----------------------------------------------------------------------------------------------


def _tiny_model(kind: str, vocab_size: int = 64, num_layers: int = 4):
    torch.manual_seed(0)
    common = {
        "vocab_size": vocab_size,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": num_layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 128,
        "tie_word_embeddings": False,
    }
    if kind == "qwen3":
        config = transformers.Qwen3Config(head_dim=8, **common)
    elif kind == "llama":
        config = transformers.LlamaConfig(**common)
    else:
        raise ValueError(kind)
    model = transformers.AutoModelForCausalLM.from_config(config)
    # Random RMSNorm weights, so the final norm matters and a missing/extra norm is caught.
    with torch.no_grad():
        for module in model.modules():
            if "RMSNorm" in type(module).__name__:
                module.weight.uniform_(0.5, 1.5)
    return model.eval()


def _random_batch(vocab_size=64, rows=5, seed=1):
    generator = torch.Generator().manual_seed(seed)
    prompts, completions, locations = [], [], []
    for row in range(rows):
        prompt = torch.randint(
            2, vocab_size, (int(torch.randint(3, 9, (1,), generator=generator)),), generator=generator
        )
        completion = torch.randint(
            2, vocab_size, (int(torch.randint(4, 12, (1,), generator=generator)),), generator=generator
        )
        query = int(torch.randint(-1, len(completion) - 1, (1,), generator=generator))
        prompts.append(prompt.tolist())
        completions.append(completion.tolist())
        locations.append(AnswerLocation(query, query + 1, int(completion[query + 1])))
    locations[2] = None  # a completion without a boxed answer
    return prompts, completions, locations


def _slow_layer_logits(model, prompt, completion, location, layer_indices, logit_lens):
    """lm_head(hidden_states[l + 1])[y*] with output_hidden_states=True on the full sequence."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
    parts = resolve_decoder(model)
    position = len(prompt) + location.query_index
    values = []
    for layer in layer_indices:
        hidden = out.hidden_states[layer + 1][0, position]  # the last element already has the final norm
        if logit_lens and layer != len(parts.layers) - 1:
            hidden = parts.final_norm(hidden)
        values.append(parts.lm_head(hidden)[location.target_id])
    if layer_indices[-1] == len(parts.layers) - 1:  # consistency with the real output logits
        assert torch.allclose(values[-1], out.logits[0, position, location.target_id], atol=1e-5)
    return torch.stack(values)


@pytest.mark.parametrize("kind", ["qwen3", "llama"])
@pytest.mark.parametrize("logit_lens", [False, True])
def test_hook_logits_equal_slow_hidden_states_path(kind, logit_lens):
    model = _tiny_model(kind)
    prompts, completions, locations = _random_batch()
    layer_indices = select_layers(4, num_layers=3)
    features, has_feature, layer_logits = answer_logit_features(
        model, prompts, completions, locations, layer_indices, logit_lens=logit_lens, batch_size=2
    )
    assert has_feature.tolist() == [True, True, False, True, True]
    assert torch.all(features[2] == 0) and torch.all(layer_logits[2] == 0)
    for row in (0, 1, 3, 4):
        slow = _slow_layer_logits(
            model, prompts[row], completions[row], locations[row], layer_indices, logit_lens
        )
        torch.testing.assert_close(layer_logits[row], slow, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(features[row], slow / slow.norm(), atol=1e-5, rtol=1e-5)


def test_default_keeps_last_half_and_layer_diff():
    model = _tiny_model("qwen3")
    prompts, completions, locations = _random_batch()
    features, _, layer_logits = answer_logit_features(model, prompts, completions, locations)
    assert features.shape == (5, 2) and layer_logits.shape == (5, 2)  # last 2 of 4 layers
    all_layers = answer_logit_features(
        model, prompts, completions, locations, [0, 1, 2, 3], use_layer_diff=True
    )
    diffs = all_layers[2][:, 1:] - all_layers[2][:, :-1]
    torch.testing.assert_close(all_layers[0][0], diffs[0] / diffs[0].norm())
    torch.testing.assert_close(layer_logits, all_layers[2][:, 2:])


def test_capture_on_left_padded_full_forward_matches_own_forward():
    """The hooks also work inside a forward TRL runs anyway (left-padded prompt + full completion)."""
    model = _tiny_model("qwen3")
    prompts, completions, locations = _random_batch()
    _, _, own_logits = answer_logit_features(model, prompts, completions, locations, [1, 2, 3])
    prompt_len = max(map(len, prompts))
    completion_len = max(map(len, completions))
    input_ids = torch.zeros((5, prompt_len + completion_len), dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for row, (p, c) in enumerate(zip(prompts, completions)):
        input_ids[row, prompt_len - len(p) : prompt_len + len(c)] = torch.tensor(p + c)
        mask[row, prompt_len - len(p) : prompt_len + len(c)] = 1
    positions = torch.tensor(
        [prompt_len + (loc.query_index if loc else -prompt_len - 1) for loc in locations]
    )
    targets = torch.tensor([loc.target_id if loc else 0 for loc in locations])
    parts = resolve_decoder(model)
    position_ids = (mask.cumsum(1) - 1).clamp_min(0)
    with torch.no_grad(), AnswerLogitCapture(parts, [1, 2, 3], positions) as capture:
        for rows in (slice(0, 3), slice(3, 5)):  # chunked, like TRL's batch_size
            model(input_ids=input_ids[rows], attention_mask=mask[rows], position_ids=position_ids[rows])
    logits = capture.layer_logits(targets)
    for row in (0, 1, 3, 4):
        torch.testing.assert_close(logits[row], own_logits[row], atol=1e-4, rtol=1e-4)
    assert torch.all(logits[2] == 0)


def test_peft_and_wrapped_models_use_adapted_layers():
    peft = pytest.importorskip("peft")
    model = _tiny_model("qwen3")
    prompts, completions, locations = _random_batch()
    base_logits = answer_logit_features(model, prompts, completions, locations)[2]
    config = peft.LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False
    )
    peft_model = peft.get_peft_model(model, config)
    lora_logits = answer_logit_features(peft_model, prompts, completions, locations)[2]
    assert not torch.allclose(lora_logits, base_logits), "LoRA must be active in the features"
    for row in (0, 1, 3):
        slow = _slow_layer_logits(peft_model, prompts[row], completions[row], locations[row], [2, 3], False)
        torch.testing.assert_close(lora_logits[row], slow, atol=1e-5, rtol=1e-5)
    wrapped = nn.DataParallel(peft_model)
    assert resolve_decoder(wrapped).layers is resolve_decoder(peft_model).layers
    torch.testing.assert_close(
        answer_logit_features(wrapped, prompts, completions, locations)[2], lora_logits
    )


def test_bad_inputs_raise_clear_errors():
    class HeadOnly(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(2, 2)

        def get_output_embeddings(self):
            return self.head

    with pytest.raises(ValueError, match="Cannot find the decoder layers of HeadOnly"):
        resolve_decoder(HeadOnly())
    with pytest.raises(ValueError, match="LM head"):
        resolve_decoder(nn.Sequential(nn.Linear(2, 2)))
    with pytest.raises(ValueError, match="meds_num_layers=5"):
        select_layers(4, num_layers=5)
    with pytest.raises(ValueError, match="at least 2 kept layers"):
        features_from_layer_logits(torch.ones(3, 1), use_layer_diff=True)
    with pytest.raises(ValueError, match=r"\(n, k\)"):
        features_from_layer_logits(torch.ones(3))


def test_features_are_unit_norm_and_handle_zero_rows():
    features = features_from_layer_logits(torch.tensor([[0.0, 0.0], [-2.0, 0.0]]))
    torch.testing.assert_close(features, torch.tensor([[0.0, 0.0], [-1.0, 0.0]]))


def test_single_use_autocast_context_spans_all_chunks():
    """accelerate's autocast() is a generator context: entering it once per chunk crashed."""
    import contextlib

    model = _tiny_model("qwen3")
    prompts, completions, locations = _random_batch()
    entered = []

    @contextlib.contextmanager
    def autocast():
        entered.append(True)
        yield

    plain = answer_logit_features(model, prompts, completions, locations, batch_size=2)
    wrapped = answer_logit_features(model, prompts, completions, locations, batch_size=2, autocast=autocast())
    assert len(entered) == 1
    for mine, reference in zip(wrapped, plain):
        torch.testing.assert_close(mine, reference)


def test_num_chunks_runs_dummy_forwards_and_never_skips():
    """Every rank of a sharded model must run the agreed number of forwards, even with no located answer."""
    from hf_meds_cliff.meds.features import forward_chunk_count

    model = _tiny_model("qwen3")
    prompts, completions, locations = _random_batch()  # 4 of 5 rows located
    calls = []
    handle = resolve_decoder(model).body.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        reference = answer_logit_features(model, prompts, completions, locations, batch_size=2)
        assert len(calls) == forward_chunk_count(4, 2) == 2
        calls.clear()
        padded = answer_logit_features(model, prompts, completions, locations, batch_size=2, num_chunks=5)
        assert len(calls) == 5
        for mine, expected in zip(padded, reference):
            torch.testing.assert_close(mine, expected)  # dummy chunks change nothing
        calls.clear()
        features, has_feature, _ = answer_logit_features(
            model, prompts, completions, [None] * 5, batch_size=2, num_chunks=2
        )
        assert len(calls) == 2, "a rank without any located answer must still run its forwards"
        assert not has_feature.any() and torch.all(features == 0)
    finally:
        handle.remove()
    with pytest.raises(ValueError, match="num_chunks=1 is fewer than the 2 forward chunks"):
        answer_logit_features(model, prompts, completions, locations, batch_size=2, num_chunks=1)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_fsdp2_ranks_with_different_answer_counts(tmp_path):
    """2 CPU ranks under FSDP2: unequal located answers (8 vs 0, 8 vs 3) and a sharded final norm.

    Before the fix the ranks ran 4 vs 0 (or 4 vs 2) forward chunks and hung on FSDP2's all-gathers
    ("Timed out waiting 45000ms"), and a final norm left sharded failed with "got mixed torch.Tensor and DTensor".
    """
    import json
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from helpers import ROOT, free_port

    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    scenarios = {
        "layers": [8, 0],
        "body": [8, 3],
    }  # "body": the final norm is a DTensor shard outside forwards
    command = [
        torchrun, "--nproc_per_node", "2", "--master_port", str(free_port()),
        str(ROOT / "tests" / "multiproc" / "meds_fsdp2_driver.py"), "--output_dir", str(tmp_path),
        "--scenarios", *(f"{a},{b}:{layout}" for layout, (a, b) in scenarios.items()),
    ]  # fmt: skip
    completed = subprocess.run(
        command, check=False, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    for layout, counts in scenarios.items():
        for rank in range(2):
            result = json.loads((tmp_path / f"{layout}_rank{rank}.json").read_text())
            assert result["num_chunks"] == 4  # agreed: 8 answers / batch_size 2 on the fuller rank
            assert sum(result["has_feature"]) == counts[rank]
            assert result["same_mask"]
            assert result["max_abs_logit_error"] < 1e-5 and result["max_abs_feature_error"] < 1e-5
            assert result["norm_is_sharded"] == (layout == "body")
