"""A model's parameters and buffers as DTensors of this rank's pieces (plain tensors on one device),
under the model's names; init_weights equal to one-device init. Every rank of a mesh is played in this process
(:func:`tests.lowering.handmade.rank_view`): registering and filling pieces needs no communication."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

from lowering.errors import LoweringError
from lowering.state import contiguous_strides, init_weights, register_state
from planner.mesh import Mesh
from tests.lowering.handmade import rank_view

MESH = Mesh((2, 2))
PLACEMENTS = {"block.fc.weight": (Shard(0), Shard(1)), "block.fc.bias": (Replicate(), Shard(0)), "head.weight": (Shard(1), Replicate())}
"""As a plan places them; ``embed.weight`` is ``head.weight`` (tied), the rest is replicated."""


def _placed(name):
    return PLACEMENTS.get("head.weight" if name == "embed.weight" else name, (Replicate(), Replicate()))


class _Model(nn.Module):
    """A nested linear layer, a head tied to an embedding, a buffer and a non-persistent buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(6, 4)
        self.block = nn.Sequential()
        self.block.fc = nn.Linear(4, 8)
        self.head = nn.Linear(4, 6, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.arange(8.0))
        self.register_buffer("scratch", torch.zeros(2), persistent=False)


def _registered(model, coordinate, placements=PLACEMENTS):
    root = nn.Module()
    register_state(root, model, placements, rank_view(MESH, coordinate))
    return root


def _coordinates():
    return list(itertools.product(range(2), range(2)))


def _whole(pieces, placements):
    """The global tensor the ranks' ``pieces`` (by coordinate) are of, for placements without Partial."""
    def join(coordinate_prefix, axis):
        if axis == MESH.ndim:
            return pieces[tuple(coordinate_prefix)]
        parts = [join(coordinate_prefix + [c], axis + 1) for c in range(MESH.shape[axis])]
        p = placements[axis]
        return torch.cat(parts, p.dim) if isinstance(p, Shard) else parts[0]
    return join([], 0)


def test_the_models_names_are_dtensors_placed_as_the_plan_says_holding_this_ranks_piece():
    torch.manual_seed(0)
    model = _Model()
    roots = {c: _registered(model, c) for c in _coordinates()}
    root = roots[(0, 0)]
    assert [n for n, _ in root.named_parameters()] == [n for n, _ in model.named_parameters()]
    assert list(root.state_dict()) == list(model.state_dict())  # the non-persistent buffer stays out
    assert "scratch" in dict(root.named_buffers()) and "scratch" not in root.state_dict()
    for name, tensor in model.state_dict(keep_vars=True).items():
        placed = root.get_parameter(name) if isinstance(tensor, nn.Parameter) else root.get_buffer(name)
        assert isinstance(placed, DTensor) and placed.shape == tensor.shape
        assert isinstance(placed, nn.Parameter) == isinstance(tensor, nn.Parameter)
        expected = _placed(name)
        assert tuple(placed.placements) == expected, name
        pieces = {c: r.state_dict()[name].to_local() for c, r in roots.items()}
        assert torch.equal(_whole(pieces, expected), tensor.detach()), name


def test_a_tied_parameter_is_one_parameter_under_each_name_placed_by_either():
    model = _Model()
    root = _registered(model, (1, 1))
    assert root.head.weight is root.embed.weight
    assert tuple(root.embed.weight.placements) == (Shard(1), Replicate())  # the plan named it head.weight
    assert len(list(root.parameters())) == len(list(model.parameters()))


def test_a_meta_model_gets_uninitialized_pieces_of_the_right_size_on_the_cpu():
    with torch.device("meta"):
        model = _Model()
    root = _registered(model, (0, 1))
    weight = root.block.fc.weight
    assert weight.to_local().device.type == "cpu" and weight.to_local().shape == (4, 2) and weight.shape == (8, 4)
    assert weight.requires_grad and not root.scale.requires_grad


def test_a_partial_parameter_is_refused_naming_it():
    with pytest.raises(LoweringError, match=r"the plan places parameter block.fc.bias as \(Partial\(sum\), Replicate\(\)\): "
                                            "a parameter must be sharded or replicated"):
        _registered(_Model(), (0, 0), {"block.fc.bias": (Partial(), Replicate())})


def test_a_submodule_path_the_root_already_uses_otherwise_is_refused_naming_it():
    root = nn.Module()
    root.block = 3  # not a module
    with pytest.raises(LoweringError, match="the model's submodule 'block.fc' cannot be registered: Module already has an attribute 'block'"):
        register_state(root, _Model(), PLACEMENTS, rank_view(MESH, (0, 0)))


def _init(module):
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=0.5)
        if module.bias is not None:
            nn.init.uniform_(module.bias)
    if isinstance(module, nn.Embedding):
        nn.init.uniform_(module.weight, -1, 1)
    if isinstance(module, _Model):
        module.scale.copy_(torch.arange(8.0) * 2)  # a meta model's buffers are filled here too


@pytest.mark.parametrize("meta", [False, True], ids=["real", "meta"])
def test_init_weights_gives_every_rank_its_piece_of_what_one_device_init_gives(meta):
    with torch.device("meta" if meta else "cpu"):
        model = _Model()
    originals = {name: t for name, t in model.state_dict(keep_vars=True).items()}
    pieces = {}
    for coordinate in _coordinates():
        root = _registered(model, coordinate)
        torch.manual_seed(3)
        init_weights(root, model, _init, rank_view(MESH, coordinate))
        pieces[coordinate] = {name: t.to_local() for name, t in root.state_dict().items()}
        assert all(model.state_dict(keep_vars=True)[n] is t for n, t in originals.items())  # the model is left alone
    reference = _Model()
    torch.manual_seed(3)
    reference.apply(_init)
    for name, expected in reference.state_dict().items():
        assert torch.equal(_whole({c: p[name] for c, p in pieces.items()}, _placed(name)), expected), name


@pytest.mark.parametrize("meta", [False, True], ids=["real", "meta"])
def test_on_a_mesh_of_one_device_the_models_tensors_are_plain_copies_tied_as_the_models(meta):
    # a DTensor on one device is its own piece: it would add DTensor's dispatch to every optimizer op and gradient
    with torch.device("meta" if meta else "cpu"):
        model = _Model()
    one = rank_view(Mesh((1, 1)), (0, 0))
    root = nn.Module()
    register_state(root, model, {name: (Shard(0), Replicate()) for name in PLACEMENTS}, one)
    state = root.state_dict(keep_vars=True)
    assert list(state) == list(model.state_dict()) and "scratch" in dict(root.named_buffers())
    assert all(type(t) in (nn.Parameter, torch.Tensor) and t.device.type == "cpu" for t in state.values())
    assert type(root.block.fc.weight) is nn.Parameter and root.head.weight is root.embed.weight
    assert not any(t is original for t, original in zip(state.values(), model.state_dict(keep_vars=True).values()))
    torch.manual_seed(3)
    init_weights(root, model, _init, one)
    reference = _Model()
    torch.manual_seed(3)
    reference.apply(_init)
    for name, expected in reference.state_dict().items():
        assert torch.equal(root.state_dict()[name], expected), name


@given(st.lists(st.integers(1, 5), max_size=4))
def test_contiguous_strides_are_torchs(shape):  # (for a size-0 dim torch takes the next stride as if it were 1)
    assert contiguous_strides(shape) == torch.empty(shape).stride()
