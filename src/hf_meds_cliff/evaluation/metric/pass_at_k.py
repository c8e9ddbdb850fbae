r"""pass@k as a Hugging Face ``evaluate`` metric, loadable offline from the installed package.

    >>> import evaluate
    >>> from hf_meds_cliff.evaluation import PASS_AT_K_METRIC_PATH
    >>> metric = evaluate.load(PASS_AT_K_METRIC_PATH)
    >>> metric.compute(predictions=[["\\boxed{4}", "\\boxed{5}"]], references=["4"], k=[1, 2])
    {'pass@1': 0.5, 'pass@2': 1.0, 'mean@n': 0.5, 'maj@n': 0.5}

Each prediction is the list of ``n`` sampled completions for one problem; each reference is its
ground-truth answer. Completions are scored with ``hf_meds_cliff.rewards.check_answers`` (last
``\\boxed{}`` against the reference with math-verify, bounded in time), then averaged per problem with
the unbiased estimator ``hf_meds_cliff.evaluation.pass_at_k``.
"""

import datasets
import evaluate

_CITATION = """\
@article{chen2021codex,
  title={Evaluating Large Language Models Trained on Code},
  author={Mark Chen and others},
  journal={arXiv preprint arXiv:2107.03374},
  year={2021}
}
"""

_DESCRIPTION = """\
Unbiased pass@k (Chen et al., 2021) over n sampled completions per problem, with mean@n (average
accuracy) and maj@n (majority vote over normalised answers; answers tied for the most votes share the
credit equally). A completion is correct when its last
\\boxed{...} equals the reference answer under math-verify.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of lists of completion strings, the n samples of each problem.
    references: list of ground-truth answers, one per problem.
    k: list of budgets (each at most the smallest n); default [1].
    timeout: per-answer bound in seconds on math-verify; default 5.
Returns:
    dict with "pass@<k>" for each k, "mean@n" and "maj@n", each averaged over problems.
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class PassAtK(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("string")),
                    "references": datasets.Value("string"),
                }
            ),
            reference_urls=["https://arxiv.org/abs/2107.03374"],
        )

    def _compute(self, predictions, references, k=(1,), timeout=5.0):
        from hf_meds_cliff.evaluation import summarize_problems

        return summarize_problems(predictions, references, k=list(k), timeout=timeout)
