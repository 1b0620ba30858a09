"""compile_program: one Inductor compile serves every size of the local symbols, and what the
compiled code assumes is read back over the local symbols, so a call outside it is caught; a
program specialized to values assumes exactly them. One rank of a data-parallel plan (no
collectives) is compiled and run in this process."""

from __future__ import annotations

import pytest
import sympy
import torch
from torch import nn
from torch.export import Dim

import shapecore.torch.private as private
from lowering.collectives import local_shard
from lowering.compile import compile_program
from lowering.examples import MLP
from lowering.lower import lower
from lowering.partition import partition
from planner.mesh import Mesh
from shapecore import holds
from shapecore.torch import trace_for_planning
from tests.lowering.handmade import handmade_plan, rank_view

pytestmark = pytest.mark.slow  # Inductor compiles (C++), seconds each

MESH = Mesh((2,))
RANK = (1,)


@pytest.fixture(scope="module")
def mlp():
    torch.manual_seed(0)
    return MLP(8, 16)


@pytest.fixture(scope="module")
def program(mlp):
    """Rank 1's program of the MLP with its batch split in two (``Eq(Mod(batch, 2), 0)`` guarded)."""
    traced = trace_for_planning(mlp, (torch.randn(4, 8),), dynamic_shapes=({0: Dim("batch")},))
    gm, batch = traced.graph_module, str(traced.dim_exprs["batch"])
    placements, split = {}, {"x"}
    for node in gm.graph.nodes:
        if node.name == "x" or any(a.name in split for a in node.all_input_nodes):
            split.add(node.name)
        if isinstance(node.meta.get("val"), torch.Tensor):
            placements[node.name] = "S(0)" if node.name in split else "R"
    plan = handmade_plan(gm, MESH, placements, output_placements=["S(0)"], exported=traced.exported,
                         guards=[f"Eq(Mod({batch}, 2), 0)"])
    return lower(gm, plan, groups=rank_view(MESH, RANK))


@pytest.fixture(scope="module")
def compiled(program):
    """The program compiled once, and the graphs Inductor was handed meanwhile."""
    calls, compile_fx = [], private.compile_fx

    def counted(gm, example, **options):
        calls.append(gm)
        return compile_fx(gm, example, **options)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(private, "compile_fx", counted)
        result = compile_program(program)
    return result, calls


def _run(program, compiled, mlp, batch):
    """Rank 1's output of the compiled program at global ``batch``, and what one device computes for those rows."""
    x = torch.randn(batch, 8, generator=torch.Generator().manual_seed(batch))
    params = dict(mlp.named_parameters())
    tensors = [local_shard(x if i.name == "x" else params[i.name.removeprefix("p_").replace("_", ".", 1)].detach(),
                           i.placements, program.groups) for i in program.inputs]
    values = program.localizer.local_values({program.symbols[0].of: batch})
    (out,) = compiled.run([values[s.name] for s in program.symbols], tensors)
    return out, mlp(x).detach()[batch // 2:], values


def test_one_compile_serves_every_batch_size(program, compiled, mlp):
    result, calls = compiled
    assert len(calls) == 1 and result.seconds > 0 and result.backward is None
    for batch in (4, 6, 10, 32):
        out, expected, _ = _run(program, result, mlp, batch)
        assert out.shape == expected.shape and torch.allclose(out, expected, rtol=1e-4, atol=1e-6), batch
    assert len(calls) == 1


def test_what_the_compiled_code_assumes_is_read_back_over_the_local_symbols(program, compiled, mlp):
    result, _ = compiled
    local = {s.name for s in program.symbols}
    assert result.guards and all({s.name for s in g.free_symbols} <= local for g in result.guards)
    (b0,) = [sympy.Symbol(s.name, integer=True) for s in program.symbols]
    assert sympy.Ge(b0, 2) in result.guards  # Inductor assumes sizes of at least 2
    for batch in (4, 6, 10, 32):
        _, _, values = _run(program, result, mlp, batch)
        local_values = {name: values[name] for name in local}
        assert result.first_broken(local_values) is None and all(holds(g, local_values) for g in result.guards)
    broken = result.first_broken({b0.name: 1})  # a global batch of 2: each rank holds one row
    assert broken is not None and not holds(broken, {b0.name: 1})


def test_a_program_specialized_to_values_assumes_exactly_them(program, mlp):
    specialized = compile_program(program, values={"b0": 3})
    b0 = sympy.Symbol("b0", integer=True)
    assert specialized.guards == (sympy.Eq(b0, 3),) and specialized.values == {"b0": 3}
    assert specialized.first_broken({"b0": 3}) is None and specialized.first_broken({"b0": 1}) == sympy.Eq(b0, 3)
    out, expected, _ = _run(program, specialized, mlp, 6)
    assert torch.allclose(out, expected, rtol=1e-4, atol=1e-6)


class _RowSums(torch.nn.Module):
    """A reduction over the batch: Inductor's CPU code picks its summation by the reduction's size."""

    def forward(self, x):
        return x.sum(0)


@pytest.mark.parametrize("traced_at", [4, 8192])
def test_a_reduction_over_the_batch_compiles_once_for_small_and_large_batches(traced_at):
    """Inductor's CPU sum chooses a chunked summation above 4096 elements; asked with the size
    hint, that choice guarded the compiled code to the hint's side (``b0 <= 4096`` when traced at
    a small batch, the converse at a large one), so the other side compiled again."""
    traced = trace_for_planning(_RowSums(), (torch.randn(traced_at, 4),), dynamic_shapes=({0: Dim("batch")},))
    gm = traced.graph_module
    placements = {n.name: "R" for n in gm.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)}
    plan = handmade_plan(gm, MESH, placements, output_placements=["R"], exported=traced.exported)
    program = lower(gm, plan, groups=rank_view(MESH, RANK))
    result = compile_program(program)
    (b0,) = [s.name for s in program.symbols]
    assert result.first_broken({b0: 2}) is None and result.first_broken({b0: 100_000}) is None, result.guards
    for batch in (2, 5000):
        x = torch.randn(batch, 4, generator=torch.Generator().manual_seed(batch))
        (out,) = result.run([batch], [x])
        assert torch.allclose(out, x.sum(0), rtol=1e-4, atol=1e-4), batch


class _RotatedHeads(nn.Module):
    """Phi-3's attention query in small: heads split off the features and transposed, then joined
    with an empty pass-through part (``cat`` of the rotated dims and none), and saved by the
    product that reads it."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.proj(x).view(b, s, 2, 4).transpose(1, 2)
        q = torch.cat([2 * q, q[..., 4:]], dim=-1)
        return q * q


def test_the_backward_is_compiled_for_the_strides_the_compiled_forward_returns_a_saved_value_with():
    """Inductor returns the saved ``cat`` in its operand's transposed layout (its ``cat`` of one
    tensor and an empty one is a ``clone``), not the graph's contiguous one; the backward,
    compiled for the graph's strides, refused it ("expected ... stride 4==12 at dim=1", Phi-3)."""
    torch.manual_seed(0)
    model = _RotatedHeads()
    traced = trace_for_planning(model, (torch.randn(4, 3, 8),), dynamic_shapes=({0: Dim("batch")},), training=True)
    gm = traced.graph_module
    placements = {n.name: "R" for n in gm.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)}
    plan = handmade_plan(gm, MESH, placements, output_placements=["R", "R", "R"])
    program = lower(gm, plan, groups=rank_view(MESH, RANK))
    symbols = len(program.symbols)
    tangents = {symbols + k for k, i in enumerate(program.inputs) if i.name.startswith("tangents")}
    split = partition(program.graph_module, program.example_inputs, 1, tangents)
    compiled = compile_program(program, partitioned=split)

    x = torch.randn(6, 3, 8, generator=torch.Generator().manual_seed(6))
    tangent = torch.randn(6, 2, 3, 4, generator=torch.Generator().manual_seed(7))
    full = {"primals_1": model.proj.weight.detach(), "primals_2": model.proj.bias.detach(), "primals_3": x}
    values = program.localizer.local_values({program.symbols[0].of: 6})
    out, *saved = compiled.run([values[s.name] for s in program.symbols],
                               [full[i.name] for i in program.inputs if i.name in full])
    weight_grad, bias_grad, _ = compiled.backward([saved[k] if kind == "saved" else tangent
                                                   for kind, k in split.backward_inputs])  # and x's: none
    expected = model(x)
    expected.backward(tangent)
    torch.testing.assert_close(out, expected.detach())
    torch.testing.assert_close(weight_grad, model.proj.weight.grad)
    torch.testing.assert_close(bias_grad, model.proj.bias.grad)
