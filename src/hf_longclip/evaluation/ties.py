"""Which rule each benchmark protocol's own evaluation code applies to tied scores, task by task (the rules and
their arithmetic: `hf_longclip.metrics.ties`). ``"official"`` (the default of `evaluate_dataset`, `run_evaluation`
and ``hf-longclip eval``) picks, per task, the rule of the benchmark protocol's own evaluation code
(`official_tie_rules`, `resolve_tie_rules`), so that a benchmark's numbers are those of the code its paper ran;
docs/evaluation.md tabulates them, with the code read for each:

    official_tie_rules("coco", "longclip")  # {"hierarcaps": "first", "cola": "pessimistic", "retrieval": "last"}
    resolve_tie_rules("official", ["retrieval", "himo"], "urban1k", "longclip")  # retrieval "first", himo "fair"
    resolve_tie_rules("fair", ["retrieval", "cola"])                             # one rule for every task

- HierarCaps (TAU-VAILab/hierarcaps, code/evaluation/hierarchical_retrieval.py, ``HCEvaluator.run``, commit
  ab0166c): ``argmax`` over the text pool and a stable ``argsort`` of 4 radii: ``"first"``, whatever the rows (also
  the default of `hierarcaps` and its `evaluate` module);
- COLA (arijitray1993/COLA, scripts/eval.py, ``ColaMultiObjAcc``, commit 1fa52fb): strict ``>``:
  ``"pessimistic"``, whatever the rows (also the default of `cola_multi` and its `evaluate` module);
- retrieval, by benchmark protocol: ``torch.argmax`` (Long-CLIP's Urban1k, HiMo-CLIP's DOCCI) and CUDA ``topk``
  (Long-CLIP's, HiMo-CLIP's and TULIP's Flickr30k) take the lower index: ``"first"``; ``argsort()[-K:]`` on CUDA
  rows of more than 4,096 scores, a stable radix sort (Long-CLIP's, HiMo-CLIP's and TULIP's COCO), the higher:
  ``"last"``.

Everything else keeps `DEFAULT_TIE_RULE`: codes whose tie order is implementation-defined (``torch.argsort`` on the
CPU, unstable beyond 16 entries: TULIP's and HiMo-CLIP's Long-DCI, TULIP's ShareGPT4V, FLAIR's every benchmark;
CLIP_benchmark's zero-shot ``topk`` on the CPU), protocols without released evaluation code (DITM's Karpathy splits
and CxC, HiMo-CLIP's HiMo@2/3), the synthetic scenes' retrieval, HiMo@2/3 and zero-shot tasks (the library's own
protocol).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..metrics.ties import COLA_TIE_RULE, DEFAULT_TIE_RULE, HIERARCAPS_TIE_RULE, TIE_RULES, check_tie_rule

OFFICIAL = "official"  # each task and benchmark protocol with the rule of its own evaluation code
TIE_RULE_CHOICES = (OFFICIAL, *TIE_RULES)

# the tasks whose metric is one benchmark's code, whatever the rows
TASK_TIE_RULES: dict[str, str] = {"hierarcaps": HIERARCAPS_TIE_RULE, "cola": COLA_TIE_RULE}
# the retrieval task by (benchmark, protocol) of `hf_longclip.data.benchmarks.BENCHMARKS`, where the protocol's code
# breaks ties by position (its candidates in the order the protocol's loader reads them); any other: "fair"
RETRIEVAL_TIE_RULES: dict[tuple[str, str], str] = {
    ("urban1k", "longclip"): "first",  # Long-CLIP eval/retrieval/Urban1k.py: torch.argmax both ways
    ("docci", "official"): "first",  # HiMo-CLIP eval/retrieval/docci.py: torch.argmax both ways
    ("flickr30k", "longclip"): "first",  # Long-CLIP / HiMo-CLIP eval/retrieval/flickr30k.py: softmax, CUDA topk
    ("flickr30k", "tulip"): "first",  # TULIP eval/flickr30.py: the same topk code
    ("coco", "longclip"): "last",  # Long-CLIP / HiMo-CLIP eval/retrieval/coco.py, TULIP eval/coco.py: argsort()[-K:]
}


def official_tie_rules(benchmark: str | None = None, protocol: str | None = None) -> dict[str, str]:
    """{task: tie rule} of the tasks whose code breaks ties its own way, for rows of `benchmark` read with
    `protocol` (its name; None: a dataset of no benchmark, e.g. the synthetic scenes): HierarCaps and COLA always,
    retrieval where `RETRIEVAL_TIE_RULES` names the protocol. A task not named takes `DEFAULT_TIE_RULE`."""
    rules = dict(TASK_TIE_RULES)
    if (benchmark, protocol) in RETRIEVAL_TIE_RULES:
        rules["retrieval"] = RETRIEVAL_TIE_RULES[benchmark, protocol]
    return rules


def resolve_tie_rules(tie_rule: str | Mapping[str, str], tasks: Iterable[str], benchmark: str | None = None,
                      protocol: str | None = None) -> dict[str, str]:
    """{task: tie rule} for each of `tasks`: the `official_tie_rules` of `benchmark` and `protocol` (else
    `DEFAULT_TIE_RULE`) for ``"official"``; a rule name of `TIE_RULES` for every task; a mapping's rules (checked)
    for the tasks it names, the official ones for the others."""
    official = official_tie_rules(benchmark, protocol)
    if isinstance(tie_rule, Mapping):
        chosen = {task: check_tie_rule(rule) for task, rule in tie_rule.items()}
        return {task: chosen.get(task, official.get(task, DEFAULT_TIE_RULE)) for task in tasks}
    if check_tie_rule(tie_rule, TIE_RULE_CHOICES) == OFFICIAL:
        return {task: official.get(task, DEFAULT_TIE_RULE) for task in tasks}
    return dict.fromkeys(tasks, tie_rule)
