"""The demo subcommand's wiring: registered with --help, bad batch sizes refused before any launch.

A full run is ``shapecore demo`` (about a minute here); test_parallel's decoder_on_2x2 scenario
covers the same plan, program and checks.
"""

import argparse

import pytest

from lowering.demo import register


def _parser():
    parser = argparse.ArgumentParser(prog="shapecore")
    register(parser.add_subparsers(dest="command", required=True))
    return parser


def test_demo_registers_a_subcommand_with_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        _parser().parse_args(["demo", "--help"])
    assert exit_info.value.code == 0
    assert "dynamic batch" in capsys.readouterr().out
    args = _parser().parse_args(["demo"])
    assert args.batch_sizes == [8, 16, 24] and callable(args.run)


def test_batch_sizes_that_break_the_constraint_are_refused_before_launching(capsys):
    args = _parser().parse_args(["demo", "--batch-sizes", "8,6,10"])
    assert args.run(args) == 2
    assert "batch size(s) 6, 10 break Eq(Mod(batch, 4), 0)" in capsys.readouterr().err


def test_malformed_batch_sizes_are_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        _parser().parse_args(["demo", "--batch-sizes", "8,x"])
    assert exit_info.value.code == 2
    assert "comma-separated integers" in capsys.readouterr().err
