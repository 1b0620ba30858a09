"""parallelize end to end on gloo: planner's plans for an MLP, an attention block and a
LLaMA-style decoder, compiled once per rank, equal to the single-device model at every batch
size the guards accept, called with global tensors or with the DTensors ``shard_inputs`` makes;
bad inputs (uneven or guard-breaking batches, wrong dtypes, dims, structures, rank mismatches)
rejected on every rank alike, by name, without a hang and without computing anything.

All scenarios of one mesh run in one launch, once per session (shared with pytest-xdist workers
through a file), and several tests read each scenario's results.
"""

import functools
import re

import pytest
import torch
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.export import Dim

from lowering import GuardViolation, InputError, RankMismatch, launch, parallelize
from lowering.demo import MEMORY_BUDGET
from lowering.examples import MLP, Attention, Decoder
from lowering.parallel import ParallelModule, _on_rank_zero, _together
from planner import MemoryBreakdown, MemoryBudgetError
from planner.mesh import Mesh
from planner.placements import format_placements
from tests.lowering.budgets import sharding_window
from tests.lowering.handmade import handmade_plan

pytestmark = pytest.mark.slow  # gloo ranks

TIMEOUT = 600
MOD4 = ["Eq(Mod(batch, 4), 0)"]


class _ConvNet(torch.nn.Module):
    """A convolution, pooling and a linear head: fake convolution reads the batch size to pick a CPU backend."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.head = torch.nn.Linear(4, 5)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def _model(name):
    torch.manual_seed(0)
    if name == "conv":
        return _ConvNet(), lambda b: torch.randn(b, 3, 4, 4, generator=torch.Generator().manual_seed(b))
    if name == "mlp":
        return MLP(), lambda b: torch.randn(b, 32, generator=torch.Generator().manual_seed(b))
    if name == "attention":
        return Attention(), lambda b: torch.randn(b, 8, 32, generator=torch.Generator().manual_seed(b))
    return Decoder(), lambda b: torch.randint(0, 64, (b, 8), generator=torch.Generator().manual_seed(b))


def _steps(program):
    planned = sorted((r.consumer, r.operand, r.producer, s.axis, s.kind)
                     for r in program.plan.redistributions for s in r.steps)
    emitted = sorted((c.consumer, c.operand, c.producer, c.axis, c.kind) for c in program.collectives)
    in_graph = sorted(str(n.target).split(".")[1] for n in program.graph_module.graph.nodes
                      if "c10d_functional" in str(n.target) and "wait_tensor" not in str(n.target))
    communicating = sorted({"all_gather": "all_gather_into_tensor", "reduce_scatter": "reduce_scatter_tensor"}.get(k, k)
                           for *_, k in planned if k not in ("chunk", "to_partial"))
    return {"planned": planned, "emitted": emitted, "in_graph": in_graph, "communicating": communicating}


def _refusal(call):
    """(error class, message, guard, values) of a call that must be refused, or None if it ran."""
    try:
        call()
    except (GuardViolation, InputError, RankMismatch) as error:
        return type(error).__name__, str(error), getattr(error, "guard", None), getattr(error, "values", None)
    return None


def _relative_error(out, expected):
    return float((out - expected).abs().max() / expected.abs().max())


def _other_placements(placements):
    """Placements of a 2-D input on a 2-D mesh that differ from ``placements``."""
    other = (Shard(1), Shard(1))
    return other if tuple(placements) != other else (Replicate(), Replicate())


def _bad_inputs(rank, pm, make):
    """Inputs that do not fit, each passed the same way on every rank unless its name says otherwise."""
    x = make(8)
    misplaced = _other_placements(pm.entry.specs[0].placements)
    return {
        "dtype": lambda: pm(x.float()),
        "ndim": lambda: pm(x[0]),
        "none": lambda: pm(None),
        "sharded_none": lambda: pm(*pm.shard_inputs(None)),
        "list": lambda: pm(list(x)),
        "misplaced": lambda: pm(distribute_tensor(x, pm.groups.device_mesh, misplaced, src_data_rank=None)),
        "none_on_rank_1": lambda: pm(None if rank == 1 else x),
        "shapes_differ": lambda: pm(*pm.shard_inputs(make(8 if rank else 16))),
        "missing_on_rank_1": lambda: pm() if rank == 1 else pm(*pm.shard_inputs(x)),
        "static": lambda: pm(*pm.shard_inputs(make(8)[:, :6])),  # the sequence length was traced static (8)
    }


def _batch_plan(model, example, mesh):
    """A hand-made data-parallel plan: the batch split, weights replicated, and no guard at all."""
    from shapecore.torch import trace_for_planning

    traced = trace_for_planning(model, (example,), dynamic_shapes=({0: Dim("batch")},))
    gm = traced.graph_module
    placements, batch = {}, set()
    for node in gm.graph.nodes:
        if node.name == "x" or any(a.name in batch for a in node.all_input_nodes):
            batch.add(node.name)
        if isinstance(node.meta.get("val"), torch.Tensor):
            placements[node.name] = "S(0)" if node.name in batch else "R"
    return handmade_plan(gm, Mesh(mesh), placements, output_placements=["S(0)"], exported=traced.exported)


def _scenario(rank, name, mesh, options, batches, extra):
    model, make = _model(name)
    if options.get("plan") == "batch":
        options = {**options, "plan": _batch_plan(model, make(batches[0]), mesh)}
    pm = ParallelModule(model, (make(batches[0]),), dynamic_shapes=({0: Dim("batch")},), mesh=mesh, **options)
    result = {"errors": [], "compiles": [], **_steps(pm.program), "placements": list(pm.plan.placements.values()),
              "input_placements": [s.placements for s in pm.entry.specs],
              "sharded_params": sum(any(not p.is_replicate() for p in ps) for ps in pm.plan.param_placements.values()),
              "memory": (pm.plan.cost.memory.total, pm.plan.cost.memory_budget)}
    for b in batches:
        x = make(b)
        expected = model(x)
        for out in (pm(*pm.shard_inputs(x)), pm(x)):  # DTensors cut ahead, or the global tensor
            result["errors"].append(_relative_error(out.full_tensor(), expected))
        result["compiles"].append(pm.compile_count)
    if "refused" in extra:  # batch sizes that break a guard or do not split: refused, nothing compiled
        result["refused"] = {b: _refusal(lambda: pm(*pm.shard_inputs(make(b)))) for b in extra["refused"]}
        result["compiles_after_refusals"] = pm.compile_count
    if "bad_inputs" in extra:
        result["bad_inputs"] = {key: _refusal(call) for key, call in _bad_inputs(rank, pm, make).items()}
        x = make(batches[-1])
        result["after_bad_inputs"] = _relative_error(pm(x).full_tensor(), model(x))  # every rank still in step
    if "recompile" in extra:
        with pytest.warns(UserWarning, match="compiling again"):
            x = make(extra["recompile"])
            out = pm(*pm.shard_inputs(x)).full_tensor()
        result["recompiled"] = (pm.compile_count, _relative_error(out, model(x)))
        out = pm(*pm.shard_inputs(make(batches[-1]))).full_tensor()  # the first program still serves
        result["after"] = pm.compile_count
    return result


# "budget": a memory budget (bytes per device) that only plans with sharded weights fit, derived
# before launching from what the planner says the plans need (tests/lowering/budgets.py).
SCENARIOS = {
    # batch unconstrained (odd sizes too): only the weights are split.
    "mlp_on_2": ("mlp", (2,), {"budget": True}, (3, 8, 13), {}),
    # the batch split 2 ways by a plan with no guard that it is even.
    "mlp_batch_on_2": ("mlp", (2,), {"plan": "batch"}, (4, 8, 14), {"refused": (9,)}),
    # a local batch of 2 at the compile, then 20: one compile, with no guard from NNPACK's batch >= 16.
    "conv_batch_on_2": ("conv", (2,), {"plan": "batch"}, (4, 8, 40), {}),
    "mlp_on_4": ("mlp", (4,), {"budget": True, "constraints": MOD4}, (8, 16, 24), {}),
    "mlp_on_2x2": ("mlp", (2, 2), {"budget": True, "constraints": MOD4}, (8, 16, 24), {}),
    "attention_on_2": ("attention", (2,), {"budget": True}, (3, 8, 13), {}),
    "attention_on_4": ("attention", (4,), {"budget": True, "constraints": MOD4}, (8, 16, 24),
                       {"refused": (6, 1), "recompile": 4}),
    "attention_on_2x2": ("attention", (2, 2), {"budget": True, "constraints": MOD4}, (8, 16, 24), {}),
    "decoder_on_2": ("decoder", (2,), {"budget": True}, (3, 8, 13), {}),
    "decoder_on_4": ("decoder", (4,), {"budget": True, "constraints": MOD4}, (8, 16, 24), {}),
    "decoder_on_2x2": ("decoder", (2, 2), {"budget": True, "constraints": MOD4}, (8, 16, 24),
                       {"refused": (6,), "bad_inputs": True}),
    # mesh axes of size 1 place nothing and move nothing
    "decoder_on_1": ("decoder", (1,), {"constraints": MOD4}, (8, 16, 24), {}),
    "mlp_on_2x1": ("mlp", (2, 1), {"budget": True, "constraints": MOD4}, (8, 16, 24), {}),
}


def _options(key):
    """The scenario's plan options, its memory budget derived (and the window it lies in)."""
    name, mesh, options, batches, _ = SCENARIOS[key]
    options = {**options, "batch_sizes": list(batches)}
    window = None
    if options.pop("budget", False):
        model, make = _model(name)
        window = sharding_window(model, (make(batches[0]),), dynamic_shapes=({0: Dim("batch")},), mesh=mesh,
                                 **{k: v for k, v in options.items() if k != "plan"})
        options["memory_budget"] = sum(window) / 2
    return options, window


def _scenarios_on(mesh, options, rank):
    """Every scenario of one mesh in the same processes: Inductor's start-up is paid once per mesh."""
    results = {}
    for key, (name, scenario_mesh, _, batches, extra) in SCENARIOS.items():
        if scenario_mesh == mesh:
            results[key] = _scenario(rank, name, mesh, options[key], batches, extra)
    return results


def _launch_mesh(mesh):
    world = 1
    for size in mesh:
        world *= size
    options = {key: _options(key) for key, scenario in SCENARIOS.items() if scenario[1] == mesh}
    per_rank = launch(functools.partial(_scenarios_on, mesh, {key: o for key, (o, _) in options.items()}), world,
                      timeout=TIMEOUT)
    return {scenario: [{**r[scenario], "window": options[scenario][1]} for r in per_rank] for scenario in per_rank[0]}


@pytest.fixture(scope="session")
def results(computed_once):
    """``results(key)``: per-rank results of a scenario. Each mesh is launched once per session,
    also under pytest-xdist."""

    def get(key):
        mesh = SCENARIOS[key][1]
        return computed_once(f"lowering-mesh-{'x'.join(map(str, mesh))}", lambda: _launch_mesh(mesh))[key]

    return get


@pytest.fixture
def attention_on_4(results):
    return results("attention_on_4")


@pytest.fixture
def decoder_on_2x2(results):
    return results("decoder_on_2x2")


@pytest.fixture(params=list(SCENARIOS))
def scenario(request, results):
    return request.param, results(request.param)


def test_gathered_outputs_equal_the_single_device_model_at_every_batch_size(scenario):
    label, results = scenario
    for rank, r in enumerate(results):
        assert max(r["errors"]) < 1e-4, (label, rank, r["errors"])


def test_inductor_compiles_once_per_rank_for_all_batch_sizes(scenario):
    label, results = scenario
    assert all(r["compiles"] == [1, 1, 1] for r in results), label


def test_the_plan_is_really_parallel_and_its_collectives_are_exactly_the_ones_emitted(scenario):
    label, results = scenario
    mesh = SCENARIOS[label][1]
    for r in results:
        assert r["sharded_params"] > 0 or SCENARIOS[label][2].get("plan") == "batch" or mesh == (1,), label
        assert all(p == Replicate() for ps in r["placements"] for p, n in zip(ps, mesh) if n == 1), label
        assert all(mesh[axis] > 1 for *_, axis, _ in r["planned"]), label
        peak, budget = r["memory"]
        assert budget is None or peak <= budget * (1 + 1e-6), (label, peak, budget)
        assert r["emitted"] == r["planned"], label
        assert r["in_graph"] == r["communicating"], label


def test_the_demos_memory_budget_forces_sharded_weights(decoder_on_2x2):
    # the demo plans this scenario's decoder on (2, 2) at its default batch sizes (8, 16, 24)
    fits, kept = decoder_on_2x2[0]["window"]
    assert fits <= MEMORY_BUDGET < kept


def _same_on_every_rank(outcomes):
    """The one refusal every rank reports (asserting there is one and the same everywhere)."""
    assert all(o is not None for o in outcomes), "the call was computed"
    found = {(kind, message, guard, tuple(sorted(values.items())) if values else None)
             for kind, message, guard, values in outcomes}
    assert len(found) == 1, found
    return found.pop()


def test_a_batch_that_breaks_the_users_constraint_is_refused_on_every_rank(decoder_on_2x2):
    kind, message, guard, values = _same_on_every_rank([r["refused"][6] for r in decoder_on_2x2])
    assert kind == "GuardViolation" and guard == "Eq(Mod(batch, 4), 0)" and values == (("batch", 6),)
    assert "batch = 6" in message
    assert all(r["compiles_after_refusals"] == 1 for r in decoder_on_2x2)  # refused before compiling


@pytest.mark.parametrize("batch", [6, 1])
def test_the_guards_see_the_global_batch_not_what_is_left_after_cutting_it(attention_on_4, batch):
    # the batch is split 4 ways: cut first, 6 rows were 1 row on each rank (taken for a valid batch of 4,
    # then compiled for) and 1 row was 0 rows ("batch = 0")
    assert all(r["input_placements"][0][0].is_shard(0) for r in attention_on_4)
    kind, message, guard, values = _same_on_every_rank([r["refused"][batch] for r in attention_on_4])
    assert kind == "GuardViolation" and values == (("batch", batch),) and f"batch = {batch}" in message
    assert guard == "Eq(Mod(batch, 4), 0)" or batch == 1  # 1 breaks the trace's own range first
    assert all(r["compiles_after_refusals"] == 1 for r in attention_on_4)  # nothing was compiled for it


def test_a_batch_that_does_not_split_evenly_is_refused_instead_of_losing_rows(results):
    mlp_batch_on_2 = results("mlp_batch_on_2")
    assert all(r["input_placements"][0][0].is_shard(0) for r in mlp_batch_on_2)
    kind, message, guard, values = _same_on_every_rank([r["refused"][9] for r in mlp_batch_on_2])
    assert kind == "GuardViolation" and guard == "Eq(Mod(batch, 2), 0)" and values == (("batch", 9),)
    assert "batch = 9" in message
    assert all(r["compiles_after_refusals"] == 1 for r in mlp_batch_on_2)  # refused before compiling


EXPECTED_TOKENS = "a tensor of dtype torch.int64 and global shape (batch, 8)"
BAD_INPUTS = {  # key: (error class, text its message contains)
    "dtype": ("InputError", "input tokens: expected dtype torch.int64, got a Tensor of dtype torch.float32 and "
                            "shape [8, 8] (on all 4 ranks)"),
    "ndim": ("InputError", f"input tokens: expected 2 dims ({EXPECTED_TOKENS}), got 1 dims"),
    "none": ("InputError", f"input tokens: expected {EXPECTED_TOKENS}, got None (on all 4 ranks)"),
    "sharded_none": ("InputError", f"input tokens: expected {EXPECTED_TOKENS}, got None (on all 4 ranks)"),
    "list": ("InputError", f"input tokens: expected {EXPECTED_TOKENS}, got a list of 8 items (on all 4 ranks)"),
    "misplaced": ("InputError", "input tokens: expected the global tensor or a DTensor placed {planned}, got a "
                                "DTensor of dtype torch.int64, global shape [8, 8], placed {other}"),
    "none_on_rank_1": ("RankMismatch", f"rank 1: input tokens: expected {EXPECTED_TOKENS}, got None"),
    "shapes_differ": ("RankMismatch", "ranks disagree on the global shapes of their inputs"),
    "missing_on_rank_1": ("RankMismatch", "rank 1: passed 0 inputs, the program takes 1 (tokens)"),
    "static": ("GuardViolation", "input tokens dim 1 has global size 6, but the program was traced for 8"),
}


@pytest.mark.parametrize("key", list(BAD_INPUTS))
def test_an_input_that_does_not_fit_gets_the_same_error_naming_it_on_every_rank(decoder_on_2x2, key):
    planned = decoder_on_2x2[0]["input_placements"][0]
    expected_kind, text = BAD_INPUTS[key]
    text = text.format(planned=format_placements(planned), other=format_placements(_other_placements(planned)))
    kind, message, _guard, _values = _same_on_every_rank([r["bad_inputs"][key] for r in decoder_on_2x2])
    assert (kind, text in message) == (expected_kind, True), message


def test_after_refusing_bad_inputs_every_rank_is_still_in_step(decoder_on_2x2):
    assert all(r["after_bad_inputs"] < 1e-4 for r in decoder_on_2x2)


def test_a_call_outside_the_compiled_programs_assumptions_compiles_again_and_is_counted(attention_on_4):
    for r in attention_on_4:
        compiles, error = r["recompiled"]  # batch 4 on 4 ranks: one row each, below the compiled range
        assert compiles == 2 and error < 1e-4
        assert r["after"] == 2  # and the first program still serves the batches it covers


class _BrokenOnRankOne(torch.nn.Module):
    def __init__(self, rank):
        super().__init__()
        self.rank = rank
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        if self.rank == 1:
            raise RuntimeError("this rank's model cannot be traced")
        return self.fc(x)


def _construct_with_one_broken_rank(rank):
    try:
        ParallelModule(_BrokenOnRankOne(rank), (torch.randn(4, 4),), dynamic_shapes=({0: Dim("batch")},), mesh=(2,))
    except Exception as error:  # noqa: BLE001 - the test inspects it
        return type(error).__name__, str(error), error.__notes__
    return None


def test_a_rank_failing_during_construction_fails_every_rank_instead_of_hanging():
    results = launch(_construct_with_one_broken_rank, 2, timeout=TIMEOUT)  # a hang would time out
    assert results == [("RuntimeError", "this rank's model cannot be traced", ["(tracing failed on rank 1)"])] * 2


def _budget_error() -> MemoryBudgetError:
    return MemoryBudgetError(1e6, MemoryBreakdown(parameters=2e6, point={"batch": 8}, node="mm_1"), True)


def _raising(error: Exception, *, on: int, rank: int):
    def make():
        if rank == on:
            raise error
        return rank
    return make


def _errors_shared_between_ranks(rank):
    class Unpicklable(Exception):  # a local class: pickle cannot find it
        pass

    seen = []
    for share in (lambda: _on_rank_zero("planning", _raising(_budget_error(), on=0, rank=rank)),
                  lambda: _together("lowering", _raising(_budget_error(), on=1, rank=rank)),
                  lambda: _together("compiling", _raising(Unpicklable("no way back"), on=1, rank=rank))):
        try:
            share()
        except Exception as error:  # noqa: BLE001 - the test inspects it
            seen.append((type(error).__name__, str(error), getattr(error, "memory", None), getattr(error, "__notes__", [])))
    return seen


def test_an_error_on_one_rank_is_raised_as_itself_on_every_rank_with_its_fields():
    results = launch(_errors_shared_between_ranks, 2, timeout=TIMEOUT)
    budget = _budget_error()
    assert results == [[
        ("MemoryBudgetError", str(budget), budget.memory, ["(planning failed on rank 0)"]),
        ("MemoryBudgetError", str(budget), budget.memory, ["(lowering failed on rank 1)"]),
        ("LoweringError", "compiling failed on rank 1: Unpicklable: no way back", None, []),  # no way back as itself
    ]] * 2


def _plan_over_budget(rank):
    return _on_rank_zero("planning", _raising(_budget_error(), on=0, rank=rank))


def test_launch_reports_a_planning_error_as_itself_not_as_a_rank_failure():
    with pytest.raises(MemoryBudgetError) as caught:
        launch(_plan_over_budget, 2, timeout=TIMEOUT)
    assert (caught.value.budget, caught.value.memory, caught.value.exact) == (1e6, _budget_error().memory, True)


# -- the front door: plan options checked before the model is touched, a trace that covers the batch sizes


class _Watched(MLP):
    """An MLP that records each time its tensors are read or its forward is traced."""

    def __init__(self):
        super().__init__()
        self.touched = []

    def parameters(self, *args, **kwargs):
        self.touched.append("parameters")
        return super().parameters(*args, **kwargs)

    def buffers(self, *args, **kwargs):
        self.touched.append("buffers")
        return super().buffers(*args, **kwargs)

    def forward(self, x):
        self.touched.append("forward")
        return super().forward(x)


MISSPELT = r"ParallelModule\(\) got an unexpected keyword argument 'batch_size' \(did you mean 'batch_sizes'\?\); " \
           r"its options are the fields of planner.PlanOptions: hardware, batch_sizes, constraints"


def _misspelt_option(build, rank):
    model = _Watched()
    try:
        build(model, (torch.randn(8, 32),), dynamic_shapes=({0: Dim("batch")},), mesh=(2,), batch_size=[8, 64])
    except Exception as error:  # noqa: BLE001 - the test inspects it
        return type(error).__name__, str(error), model.touched
    return None


@pytest.mark.parametrize("build", [ParallelModule, parallelize])
def test_a_misspelt_plan_option_is_a_type_error_before_the_model_is_touched(one_rank, build):
    with pytest.raises(TypeError, match=MISSPELT) as caught:
        build(_Watched(), (torch.randn(8, 32),), dynamic_shapes=({0: Dim("batch")},), mesh=(1,), batch_size=[8, 64])
    assert caught.value.__notes__ == ["(checking the plan options failed on rank 0)"]
    model = _Watched()
    with pytest.raises(TypeError, match=MISSPELT):
        build(model, (torch.randn(8, 32),), dynamic_shapes=({0: Dim("batch")},), mesh=(1,), batch_size=[8, 64])
    assert model.touched == []  # neither its device checked nor a trace begun


def test_a_misspelt_plan_option_is_the_same_type_error_on_every_rank():
    for kind, message, touched in launch(functools.partial(_misspelt_option, ParallelModule), 2, timeout=TIMEOUT):
        assert kind == "TypeError" and re.match(MISSPELT, message) and touched == []


def test_a_batch_size_outside_the_traced_range_is_refused_naming_where_torch_set_it(one_rank):
    with pytest.raises(ValueError, match=r"puts batch \(s\d+\)=64 outside its range \[2, 15\]; that end of the range "
                                         r"was set by .*fakify"):
        ParallelModule(MLP(), (torch.randn(8, 32),), dynamic_shapes=({0: Dim("batch", max=15)},), mesh=(1,),
                       batch_sizes=[8, 64])


def test_the_graph_lowered_is_traced_at_the_largest_batch_size_and_serves_the_others(one_rank):
    torch.manual_seed(0)
    model = MLP()
    pm = ParallelModule(model, (torch.randn(3, 32),), dynamic_shapes=({0: Dim("batch")},), mesh=(1,),
                        batch_sizes=[3, 13])
    assert pm.env.hints[pm.plan.names.symbols["batch"]] == 13  # the planner's trace, covering both sizes
    for batch in (3, 13, 8):
        x = torch.randn(batch, 32)
        assert _relative_error(pm(x).full_tensor(), model(x)) < 1e-4
    assert pm.compile_count == 1


def test_a_plan_alone_lowers_the_graph_it_was_traced_from_without_its_batch_sizes(one_rank):
    model, batch = _model("conv")
    spec = ({0: Dim("batch")},)
    plan = ParallelModule(model, (batch(2),), dynamic_shapes=spec, mesh=(1,), batch_sizes=[2, 32]).plan
    given = ParallelModule(model, (batch(2),), dynamic_shapes=spec, mesh=(1,), plan=plan, batch_sizes=[2, 32])
    alone = ParallelModule(model, (batch(2),), dynamic_shapes=spec, mesh=(1,), plan=plan)
    symbol = plan.names.symbols["batch"]
    assert plan.trace_sizes == {"batch": 32} and alone.env.hints[symbol] == given.env.hints[symbol] == 32
    assert alone.program.graph_module.code == given.program.graph_module.code
    for size in (2, 32, 7):
        assert torch.equal(alone(batch(size)).full_tensor(), given(batch(size)).full_tensor())


def test_a_training_call_backpropagates_through_the_step_and_any_call_places_its_output_with_one_spec(one_rank):
    torch.manual_seed(0)
    model = MLP()
    pm = ParallelModule(model, (torch.randn(8, 32),), dynamic_shapes=({0: Dim("batch")},), mesh=(1,), training=True)
    x = torch.randn(8, 32)
    first, second = pm(*pm.shard_inputs(x)), pm(*pm.shard_inputs(x))
    assert type(first.grad_fn).__name__ == "_StepBackward" and first._spec is second._spec
    (first.full_tensor().sum() + second.full_tensor().sum()).backward()  # the backward takes the weights as inputs
    model(x).sum().mul(2).backward()
    for name, parameter in pm.named_parameters():  # one device: plain parameters and gradients
        assert type(parameter) is torch.nn.Parameter and type(parameter.grad) is torch.Tensor
        assert _relative_error(parameter.grad, dict(model.named_parameters())[name].grad) < 1e-4
    pm.eval()  # the forward program alone, grad enabled: the spec made once for these sizes, no from_local
    assert torch.is_grad_enabled() and pm(x)._spec is pm(x)._spec is first._spec


def test_on_one_device_a_training_call_updates_the_plain_buffers_as_the_models_forward_does(one_rank):
    model, reference = (torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8)) for _ in range(2))
    reference.load_state_dict(model.state_dict())
    pm = ParallelModule(model, (torch.randn(4, 8),), dynamic_shapes=({0: Dim("batch")},), mesh=(1,), training=True)
    for batch in (4, 6):
        x = torch.randn(batch, 8)
        pm(x).full_tensor().sum().backward()
        reference(x).sum().backward()
    for name, expected in reference.named_buffers():
        buffer = pm.get_buffer(name)
        assert type(buffer) is torch.Tensor and torch.allclose(buffer.float(), expected.float(), rtol=1e-4), name
