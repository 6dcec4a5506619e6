"""Each benchmark protocol's tie rule (`hf_longclip.evaluation.ties.official_tie_rules`): the rule of its own
evaluation code where that code breaks ties by a rule (HierarCaps, COLA, the retrieval codes of Long-CLIP, HiMo-CLIP
and TULIP), fair elsewhere; resolved per task for `evaluate_dataset`, and tabulated in docs/evaluation.md as the code
has it."""

import re
from pathlib import Path

import pytest

from hf_longclip.data.benchmarks import BENCHMARKS
from hf_longclip.evaluation import TASKS
from hf_longclip.evaluation.ties import (
    RETRIEVAL_TIE_RULES,
    TASK_TIE_RULES,
    TIE_RULE_CHOICES,
    official_tie_rules,
    resolve_tie_rules,
)
from hf_longclip.metrics.ties import DEFAULT_TIE_RULE, TIE_RULES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "evaluation.md"


def test_every_named_protocol_is_a_registered_one():
    for benchmark, protocol in RETRIEVAL_TIE_RULES:
        assert protocol in BENCHMARKS[benchmark].protocols, (benchmark, protocol)
    assert set(TASK_TIE_RULES) <= set(TASKS)
    assert set(RETRIEVAL_TIE_RULES.values()) | set(TASK_TIE_RULES.values()) <= set(TIE_RULES)


def test_official_rules_by_protocol():
    assert official_tie_rules() == {"hierarcaps": "first", "cola": "pessimistic"}  # no benchmark: the synthetic rows
    assert official_tie_rules("coco", "longclip")["retrieval"] == "last"  # argsort()[-K:]
    assert official_tie_rules("urban1k", "longclip")["retrieval"] == "first"  # argmax
    assert official_tie_rules("flickr30k", "tulip")["retrieval"] == "first"  # CUDA topk
    for unordered in (("coco", "karpathy"), ("long_dci", "tulip"), ("urban1k", "flair"), ("sharegpt4v", "longclip")):
        assert "retrieval" not in official_tie_rules(*unordered)  # fair: the code's tie order is undefined


def test_resolve_per_task():
    tasks = list(TASKS)
    official = resolve_tie_rules("official", tasks, "coco", "longclip")
    assert official == {"retrieval": "last", "himo": "fair", "ssi": "fair", "hierarcaps": "first",
                        "zero_shot": "fair", "cola": "pessimistic"}
    assert resolve_tie_rules("fair", tasks) == dict.fromkeys(tasks, "fair")
    assert resolve_tie_rules({"cola": "fair"}, ["cola", "hierarcaps", "himo"]) == {
        "cola": "fair", "hierarcaps": "first", "himo": DEFAULT_TIE_RULE}
    with pytest.raises(ValueError, match=r"tie_rule must be one of \('official', 'fair', .*got 'random'"):
        resolve_tie_rules("random", tasks)
    with pytest.raises(ValueError, match="tie_rule must be one of"):
        resolve_tie_rules({"cola": "official"}, tasks)  # a mapping names rules, not "official"
    assert TIE_RULE_CHOICES == ("official", *TIE_RULES)


def documented_defaults() -> list[tuple[list[str], list[str], str, str]]:
    """(benchmarks, protocols, task, our default) of each row of docs/evaluation.md's protocol table."""
    rows = []
    for line in DOCS.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) != 5 or not re.match(r"`\w+`.*\(.*\); \w+$", cells[0]):
            continue
        names, task = cells[0].rsplit("; ", 1)
        benchmarks_part, protocols_part = names.split("(", 1)
        default = re.match(r"`(\w+)`", cells[3])
        rows.append((re.findall(r"`(\w+)`", benchmarks_part), re.findall(r"`(\w+)`", protocols_part), task,
                     default.group(1) if default else "-"))
    return rows


def test_the_docs_table_gives_each_protocols_default_as_the_code_does():
    rows = documented_defaults()
    assert len(rows) >= 12
    listed = set()
    for benchmarks, protocols, task, default in rows:
        for benchmark in benchmarks:
            for protocol in protocols:
                if protocol not in BENCHMARKS[benchmark].protocols:
                    continue  # a row naming several benchmarks and protocols, e.g. `coco_cxc` (`official`)
                listed.add((benchmark, protocol))
                expected = official_tie_rules(benchmark, protocol).get(task, DEFAULT_TIE_RULE)
                assert default == expected, (benchmark, protocol, task)
    assert set(RETRIEVAL_TIE_RULES) <= listed
