from dataclasses import dataclass, field

import pytest

from hf_meds_cliff.model_card import (
    method_hyperparameters,
    model_index_from_summary,
    render_method_section,
    reproduce_command,
    without_local_base_model,
)

SUMMARY = {
    "benchmarks": {"toy": {"pass@k": {"1": 0.25, "4": 0.5, "16": 0.75}}, "aime24": {"pass@k": {"1": 0.1}}}
}


@dataclass
class FakeArgs:
    meds_alpha: float = 0.1
    meds_target: str = "wrong"
    learning_rate: float = 1e-6
    unrelated: int = 3
    layers: list = field(default_factory=lambda: [1, 2])
    meds_layers: list = field(default_factory=lambda: [1, 2])


def test_hyperparameters_keep_prefix_and_core_fields_only():
    values = method_hyperparameters(FakeArgs(), "meds_")
    assert values == {
        "meds_alpha": 0.1,
        "meds_target": "wrong",
        "learning_rate": 1e-6,
        "meds_layers": "[1, 2]",
    }


def test_reproduce_command_quotes_arguments():
    assert reproduce_command(["scripts/train_meds.py", "--output_dir", "a b"]) == (
        "python scripts/train_meds.py --output_dir 'a b'"
    )


def test_model_index_lists_every_benchmark_and_k_in_order():
    index = model_index_from_summary(SUMMARY, "my-model")
    assert index[0]["name"] == "my-model"
    toy = index[0]["results"][0]
    assert toy["dataset"]["name"] == "toy"
    assert [m["type"] for m in toy["metrics"]] == ["pass@1", "pass@4", "pass@16"]
    assert [m["value"] for m in toy["metrics"]] == [0.25, 0.5, 0.75]
    assert model_index_from_summary({"benchmarks": {}}, "m") == []


def test_rendered_section_has_table_command_and_percentages():
    text = render_method_section("MEDS", {"meds_alpha": 0.1}, "python x.py", SUMMARY)
    assert "## MEDS settings" in text
    assert "| `meds_alpha` | `0.1` |" in text
    assert "python x.py" in text
    assert "| toy | 25.00 | 50.00 | 75.00 |" in text
    assert "| aime24 | 10.00 |  |  |" in text
    assert "No pass@k evaluation" in render_method_section("Cliff", {}, "c", None)


def test_add_passk_results_updates_metadata_and_table(tmp_path):
    from huggingface_hub import ModelCard, ModelCardData

    from hf_meds_cliff.model_card import add_passk_results

    text = render_method_section("MEDS", {"meds_alpha": 0.1}, "python x.py", None)
    card = ModelCard.from_template(
        ModelCardData(tags=["meds"]), template_str="---\n{{ card_data }}\n---\n# m\n" + text
    )
    path = tmp_path / "README.md"
    card.save(path)
    add_passk_results(path, SUMMARY, "toy-meds")
    updated = ModelCard.load(path)
    assert "model-index:" in path.read_text() and updated.data.model_name == "toy-meds"
    assert [(r.metric_type, r.metric_value) for r in updated.data.eval_results] == [
        ("pass@1", 0.25),
        ("pass@4", 0.5),
        ("pass@16", 0.75),
        ("pass@1", 0.1),
    ]
    assert "| toy | 25.00 | 50.00 | 75.00 |" in updated.text
    assert "No pass@k evaluation" not in updated.text and "| `meds_alpha` | `0.1` |" in updated.text
    with pytest.raises(ValueError, match="no pass@k results"):
        add_passk_results(path, {"benchmarks": {}})


@pytest.mark.parametrize("dataset", [None, "openai/gsm8k"])
def test_a_local_base_model_is_said_plainly_with_or_without_a_dataset(dataset):
    from trl.trainer.utils import generate_model_card

    card = generate_model_card(
        base_model=None,  # what TRL passes for a base model given as a local folder
        model_name=None,
        hub_model_id=None,
        dataset_name=dataset,
        tags=[],
        wandb_url=None,
        trackio_url=None,
        trainer_name="GRPO",
        trainer_citation=None,
        paper_title=None,
        paper_id=None,
        comet_url=None,
    )
    assert "[None](https://huggingface.co/None)" in str(card)  # the template's own text
    text = without_local_base_model(str(card), "my-run")
    assert "None" not in text.split("## ")[0]
    assert "This model was fine-tuned from a local base model folder (not a Hugging Face Hub model)" in text
    assert ("[openai/gsm8k](https://huggingface.co/datasets/openai/gsm8k) dataset." in text) == (dataset is not None)
