"""One vocabulary of metric keys (metric first, then direction) everywhere; the tie rule recorded in reports and
offered by `hf-longclip eval`."""

import json
import re

import pytest

from hf_longclip.cli import build_parser
from hf_longclip.evaluation import load_report
from hf_longclip.evaluation.ties import TIE_RULE_CHOICES
from hf_longclip.metrics.ties import TIE_RULES
from hf_longclip.training.results import COLUMNS


def test_the_scripts_table_speaks_the_same_vocabulary():
    assert {"r1_i2t", "r1_t2i", "rsum"} <= set(COLUMNS)
    assert not [key for key in COLUMNS if re.match(r"(i2t|t2i|t2t|i2i)_", key)]  # the direction comes last


def test_a_report_is_read_back_as_written(tmp_path):
    report = {"tie_rule": "fair", "metrics": {"retrieval": {"r1_i2t": 39.5, "ties_i2t": 3}}}
    (tmp_path / "report.json").write_text(json.dumps(report))
    assert load_report(tmp_path) == load_report(tmp_path / "report.json") == report  # the directory or the file


def test_eval_command_offers_every_tie_rule_official_by_default():
    # "official": each benchmark protocol's own evaluation code's rule (hf_longclip.metrics.ties)
    args = build_parser().parse_args(["eval", "--model", "m", "--dataset", "synthetic"])
    assert args.tie_rule == "official"
    action = next(action for action in build_parser()._subparsers._group_actions[0].choices["eval"]._actions
                  if action.dest == "tie_rule")
    assert tuple(action.choices) == TIE_RULE_CHOICES == ("official", *TIE_RULES)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["eval", "--model", "m", "--dataset", "synthetic", "--tie-rule", "random"])
