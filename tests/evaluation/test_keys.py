"""One vocabulary of metric keys (metric first, then direction) everywhere, old names read with a warning; the
tie rule recorded in reports and offered by `hf-longclip eval`."""

import json
import warnings

import pytest

from hf_longclip.cli import build_parser
from hf_longclip.evaluation import load_report
from hf_longclip.evaluation.report import current_key, upgrade_keys
from hf_longclip.metrics.ties import TIE_RULE_CHOICES, TIE_RULES
from hf_longclip.training.results import COLUMNS


@pytest.mark.parametrize("old, new", [("i2t_r1", "r1_i2t"), ("t2i_r10", "r10_t2i"), ("i2t_ties", "ties_i2t"),
                                      ("t2t_num_queries", "num_queries_t2t"),
                                      ("i2i_num_without_positive", "num_without_positive_i2i"),
                                      ("r1_i2t", "r1_i2t"), ("rsum", "rsum"), ("short_r1_i2t", "short_r1_i2t"),
                                      ("hard_r1_t2i", "hard_r1_t2i"), ("i2t_rank", "i2t_rank")])
def test_current_key(old, new):
    assert current_key(old) == new


def test_the_scripts_table_speaks_the_same_vocabulary():
    assert {"r1_i2t", "r1_t2i", "rsum"} <= set(COLUMNS)
    assert all(current_key(key) == key for key in COLUMNS)


def test_old_report_is_read_with_a_deprecation_warning(tmp_path):
    old = {"model": "m", "metrics": {"retrieval": {"i2t_r1": 66.8, "t2i_r1": 50.0, "rsum": 116.8, "i2t_ties": 3,
                                                   "1k": {"i2t_r1": 70.0, "folds": [{"t2i_r5": 1.0}]},
                                                   "cxc": {"t2t_r1": 20.0, "t2t_num_queries": 4}}}}
    (tmp_path / "report.json").write_text(json.dumps(old))
    with pytest.warns(DeprecationWarning, match=r"report.json uses old metric names \(.*i2t_r1.*\); read as .*r1_i2t"):
        report = load_report(tmp_path)  # the directory or the file
    retrieval = report["metrics"]["retrieval"]
    assert retrieval == {"r1_i2t": 66.8, "r1_t2i": 50.0, "rsum": 116.8, "ties_i2t": 3,
                         "1k": {"r1_i2t": 70.0, "folds": [{"r5_t2i": 1.0}]},
                         "cxc": {"r1_t2t": 20.0, "num_queries_t2t": 4}}
    assert report["tie_rule"] == "optimistic"  # written before the rule was recorded: ties counted as hits


def test_current_report_is_read_silently(tmp_path):
    current = {"tie_rule": "fair", "metrics": {"retrieval": {"r1_i2t": 39.5, "ties_i2t": 3}}}
    (tmp_path / "report.json").write_text(json.dumps(current))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_report(tmp_path / "report.json") == current
        assert upgrade_keys({"r1_i2t": 1.0}) == {"r1_i2t": 1.0}


def test_eval_command_offers_every_tie_rule_official_by_default():
    # "official": each benchmark protocol's own evaluation code's rule (hf_longclip.metrics.ties)
    args = build_parser().parse_args(["eval", "--model", "m", "--dataset", "synthetic"])
    assert args.tie_rule == "official"
    action = next(action for action in build_parser()._subparsers._group_actions[0].choices["eval"]._actions
                  if action.dest == "tie_rule")
    assert tuple(action.choices) == TIE_RULE_CHOICES == ("official", *TIE_RULES)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["eval", "--model", "m", "--dataset", "synthetic", "--tie-rule", "random"])
