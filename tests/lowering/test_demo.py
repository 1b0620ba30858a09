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


def _gather_split_on_both_axes(rank):
    import logging

    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from lowering.demo import _hide_dtensor_flatten_advice

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("torch.distributed.tensor._redistribute")
    logger.addHandler(handler)
    x = torch.arange(16.0).reshape(4, 4)
    gathered = []
    for names in (("a", "b"), ("dp", "tp")):  # DTensor advises once per mesh: the first unfiltered, the second as the demo
        if names == ("dp", "tp"):
            _hide_dtensor_flatten_advice()
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=names)
        gathered.append(bool(torch.equal(distribute_tensor(x, mesh, (Shard(0), Shard(0))).full_tensor(), x)))
        logger.warning("a warning of its own")
    return gathered, [r.getMessage() for r in records]


@pytest.mark.slow  # gloo ranks
def test_dtensors_advice_to_flatten_the_mesh_is_not_printed_by_the_demo():
    # DTensor logs it once per rank when an output split on both axes of (2, 2) is gathered (two
    # all_gathers), as the demo gathers its outputs to compare them with one device
    from lowering import launch

    for gathered, messages in launch(_gather_split_on_both_axes, 4, timeout=240):
        assert gathered == [True, True]
        advice, *own = messages
        assert "flatten mesh dimensions" in advice and own == ["a warning of its own"] * 2
