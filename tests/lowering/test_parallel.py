"""parallelize end to end on gloo: planner's plans for an MLP, an attention block and a
LLaMA-style decoder, compiled once per rank, equal to the single-device model at every batch
size the guards accept; bad inputs rejected on every rank without a hang.

All scenarios of one mesh run in one launch, once per session (shared with pytest-xdist workers
through a file), and several tests read each scenario's results.
"""

import fcntl
import functools
import pickle
import time

import pytest
import torch
from torch.export import Dim

from lowering import GuardViolation, RankMismatch, launch
from lowering.examples import MLP, Attention, Decoder
from lowering.parallel import ParallelModule

TIMEOUT = 600
MOD4 = ["Eq(Mod(batch, 4), 0)"]


def _model(name):
    torch.manual_seed(0)
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


def _scenario(rank, name, mesh, options, batches, extra):
    model, make = _model(name)
    pm = ParallelModule(model, (make(batches[0]),), dynamic_shapes=({0: Dim("batch")},), mesh=mesh, **options)
    result = {"errors": [], "compiles": [], **_steps(pm.program),
              "sharded_params": sum(any(not p.is_replicate() for p in ps) for ps in pm.plan.param_placements.values())}
    for b in batches:
        x = make(b)
        out = pm.gather_outputs(pm(*pm.shard_inputs(x)))
        result["errors"].append(float((out - model(x)).abs().max() / model(x).abs().max()))
        result["compiles"].append(pm.compile_count)
    if "violation" in extra:
        start = time.monotonic()
        try:
            pm(*pm.shard_inputs(make(extra["violation"])))
        except GuardViolation as error:
            result["violation"] = (str(error), error.guard, error.values, time.monotonic() - start)
    if "mismatch" in extra:
        try:
            pm(*pm.shard_inputs(make(8 if rank else 16)))
        except RankMismatch as error:
            result["mismatch"] = str(error)
        try:
            pm() if rank == 1 else pm(*pm.shard_inputs(make(8)))
        except RankMismatch as error:
            result["missing"] = str(error)
        try:
            pm(*pm.shard_inputs(make(8)[:, :6]))  # the sequence length was traced static (8)
        except GuardViolation as error:
            result["static"] = str(error)
    if "recompile" in extra:
        with pytest.warns(UserWarning, match="compiling again"):
            x = make(extra["recompile"])
            out = pm.gather_outputs(pm(*pm.shard_inputs(x)))
        result["recompiled"] = (pm.compile_count, float((out - model(x)).abs().max() / model(x).abs().max()))
        out = pm.gather_outputs(pm(*pm.shard_inputs(make(batches[-1]))))  # the first program still serves
        result["after"] = pm.compile_count
    return result


# Memory budgets (bytes per device) below what replicated weights need, so every plan splits weights.
SCENARIOS = {
    # batch unconstrained (odd sizes too): only the weights are split.
    "mlp_on_2": ("mlp", (2,), {"memory_budget": 12000}, (3, 8, 13), {}),
    "mlp_on_4": ("mlp", (4,), {"memory_budget": 12000, "constraints": MOD4}, (8, 16, 24), {}),
    "mlp_on_2x2": ("mlp", (2, 2), {"memory_budget": 12000, "constraints": MOD4}, (8, 16, 24), {}),
    "attention_on_2": ("attention", (2,), {"memory_budget": 25000}, (3, 8, 13), {}),
    "attention_on_4": ("attention", (4,), {"memory_budget": 12000, "constraints": MOD4}, (8, 16, 24),
                       {"recompile": 4}),
    "attention_on_2x2": ("attention", (2, 2), {"memory_budget": 12000, "constraints": MOD4}, (8, 16, 24), {}),
    "decoder_on_2": ("decoder", (2,), {"memory_budget": 60000}, (3, 8, 13), {}),
    "decoder_on_4": ("decoder", (4,), {"memory_budget": 40000, "constraints": MOD4}, (8, 16, 24), {}),
    "decoder_on_2x2": ("decoder", (2, 2), {"memory_budget": 40000, "constraints": MOD4}, (8, 16, 24),
                       {"violation": 6, "mismatch": True}),
}


def _scenarios_on(mesh, rank):
    """Every scenario of one mesh in the same processes: Inductor's start-up is paid once per mesh."""
    results = {}
    for key, (name, scenario_mesh, options, batches, extra) in SCENARIOS.items():
        if scenario_mesh == mesh:
            options = {**options, "batch_sizes": list(batches)}
            results[key] = _scenario(rank, name, mesh, options, batches, extra)
    return results


def _launch_mesh(mesh):
    world = 1
    for size in mesh:
        world *= size
    per_rank = launch(functools.partial(_scenarios_on, mesh), world, timeout=TIMEOUT)
    return {scenario: [r[scenario] for r in per_rank] for scenario in per_rank[0]}


@pytest.fixture(scope="session")
def results(tmp_path_factory, worker_id):
    """``results(key)``: per-rank results of a scenario. Each mesh is launched once per session,
    also under pytest-xdist: workers share the results through a file, under a lock."""
    memory: dict[str, list] = {}
    shared = None if worker_id == "master" else tmp_path_factory.getbasetemp().parent

    def get(key):
        if key not in memory:
            mesh = SCENARIOS[key][1]
            if shared is None:
                memory.update(_launch_mesh(mesh))
            else:
                path = shared / f"lowering-mesh-{'x'.join(map(str, mesh))}.pickle"
                with open(f"{path}.lock", "w") as lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    if not path.exists():
                        path.write_bytes(pickle.dumps(_launch_mesh(mesh)))
                    memory.update(pickle.loads(path.read_bytes()))
        return memory[key]

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
    for r in results:
        assert r["sharded_params"] > 0, label
        assert r["emitted"] == r["planned"], label
        assert r["in_graph"] == r["communicating"], label


def test_a_batch_that_breaks_the_users_constraint_is_refused_on_every_rank(decoder_on_2x2):
    for r in decoder_on_2x2:
        message, guard, values, seconds = r["violation"]
        assert guard == "Eq(Mod(batch, 4), 0)" and values == {"batch": 6}
        assert "batch = 6" in message
        assert seconds < 10
    assert len({r["violation"][0] for r in decoder_on_2x2}) == 1


def test_ranks_whose_inputs_disagree_get_the_same_error(decoder_on_2x2):
    for key, text in (("mismatch", "ranks disagree on their local input shapes"),
                      ("missing", "rank 1 passed 0 inputs, the program takes 1")):
        messages = {r[key] for r in decoder_on_2x2}
        assert len(messages) == 1
        assert text in messages.pop()


def test_a_static_dim_of_the_wrong_size_is_refused_by_name(decoder_on_2x2):
    messages = {r["static"] for r in decoder_on_2x2}
    assert len(messages) == 1
    assert "input tokens dim 1 has global size 6" in messages.pop()


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
        return type(error).__name__, str(error)
    return None


def test_a_rank_failing_during_construction_fails_every_rank_instead_of_hanging():
    start = time.monotonic()
    results = launch(_construct_with_one_broken_rank, 2, timeout=TIMEOUT)
    assert time.monotonic() - start < 60
    for kind, message in results:
        assert kind == "LoweringError"
        assert message.startswith("tracing failed on rank 1: RuntimeError: this rank's model cannot be traced")
