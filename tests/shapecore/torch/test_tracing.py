"""Tracing: export (Dim names, constraint violations), the planner's trace, and what each hands to shapecore."""

import json

import pytest
import sympy
import torch
from torch import nn
from torch.export import Dim

from shapecore import int_symbol, prove
from shapecore.torch import DataDependentBranchError, to_torch, trace_export, trace_for_planning

from .traced_models import CASES, ArangeThird, export_then_joint


def test_export_names_user_dims_and_derived_dims():
    traced = CASES["export_view8_derived"].trace()
    k = int_symbol(traced.dims["k"])
    assert traced.dim_exprs == {"k": k, "8*k": 8 * k}
    (rows,) = [name for name, source in traced.sources.items() if source == "L['x'].size()[0]"]
    assert traced.env.statically_known_true(sympy.Eq(int_symbol(rows), 8 * k))
    both = CASES["export_derived_dims"].trace()
    batch = int_symbol(both.dims["batch"])
    assert both.dim_exprs["2*batch + 1"] == 2 * batch + 1


def test_export_constraint_violation_can_be_raised_or_returned():
    spec = {"x": {0: Dim("n", min=3, max=10000)}}
    with pytest.raises(Exception, match="Constraints violated"):
        trace_export(ArangeThird(), (torch.randn(9),), dynamic_shapes=spec)
    strict = trace_export(ArangeThird(), (torch.randn(9),), dynamic_shapes=spec, strict=True,
                          on_constraint_violation="return")
    assert "Constraints violated" in strict.error and strict.torch_guards and list(strict.dims) == ["n"]
    with pytest.raises(ValueError, match="on_constraint_violation"):
        trace_export(ArangeThird(), (torch.randn(9),), dynamic_shapes=spec, on_constraint_violation="ignore")


def test_the_known_export_failure_has_only_guards_shapecore_proves():
    """``torch.arange(n // 3, n)`` with n in [3, 10000]: torch says "Constraints violated"; every guard holds."""
    traced = CASES["export_arange_third"].trace()
    assert traced.graph_module is None and "Constraints violated" in traced.error
    n = traced.dims["n"]
    assert traced.torch_guards, "torch recorded the guards it could not prove"
    for guard in traced.torch_guards:
        assert prove(guard, ranges={n: (3, 10000)}).proved, guard
    assert traced.env.guards == [], "under the user's range shapecore records none of them"


def test_the_cli_keeps_no_guard_of_the_known_export_failure(tmp_path, capsys):
    from shapecore.cli import main

    traced = CASES["export_arange_third"].trace()
    as_n = {int_symbol(traced.dims["n"]): int_symbol("n")}
    path = tmp_path / "guards.txt"
    path.write_text("".join(f"{g.xreplace(as_n)}\n" for g in traced.torch_guards))
    assert main(["simplify", str(path), "--range", "n=3..10000"]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert printed and all(line.startswith("#") for line in printed), printed
    assert main(["simplify", str(path), "--range", "n=3..10000", "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["guards"] == [] and len(result["dropped"]) == len(traced.torch_guards)


def test_a_real_export_violation_gets_a_counterexample_torch_agrees_with():
    traced = CASES["export_conv_net_too_small"].trace()
    assert "Constraints violated" in traced.error
    ranges = {traced.dims["height"]: (8, 256), traced.dims["width"]: (8, 256), traced.dims["batch"]: (2, 64)}
    refuted = [(g, prove(g, ranges=ranges)) for g in traced.torch_guards]
    refuted = [(g, p) for g, p in refuted if p.status == "refuted"]
    assert refuted, "a width or height of 8 or 9 breaks the second conv"
    for guard, proof in refuted:
        torch_guard = to_torch(guard, traced.torch_env)
        value = torch_guard.xreplace({s: sympy.sympify(proof.counterexample[s.name]) for s in torch_guard.free_symbols})
        assert value is sympy.false


# -- the planner's trace ------------------------------------------------------------------------------


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return nn.functional.silu(self.fc(self.norm(x)))


def _targets(gm):
    return {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}


def test_the_planning_trace_keeps_the_composite_ops_whole():
    traced = trace_for_planning(_Block(), (torch.randn(6, 8),), dynamic_shapes={"x": {0: Dim("batch")}})
    assert traced.exported is not None and traced.exported.graph_module is traced.graph_module
    assert {"aten.layer_norm.default", "aten.silu.default"} <= _targets(traced.graph_module)
    batch = traced.dim_exprs["batch"]
    assert traced.dims == {"batch": batch.name} and set(traced.env.symbols) == {batch.name}


def test_the_training_trace_is_one_joint_graph_over_the_export_shapes():
    traced = trace_for_planning(_Block(), (torch.randn(6, 8),), dynamic_shapes={"x": {0: Dim("batch")}}, training=True)
    assert traced.exported is None
    descriptors = [type(n.meta.get("desc")).__name__ for n in traced.graph_module.graph.nodes if n.op == "placeholder"]
    assert descriptors.count("ParamAOTInput") == 4 and "PlainAOTInput" in descriptors and "TangentAOTInput" in descriptors
    (output,) = [n for n in traced.graph_module.graph.nodes if n.op == "output"]
    assert sum(type(d).__name__ == "GradAOTOutput" for d in output.meta["desc"]) == 4
    assert set(traced.env.symbols) == {traced.dim_exprs["batch"].name}


class _Stack(nn.Module):
    """Two numbered blocks between an embedding and a head, like the decoders the planner clusters."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.layers = nn.ModuleList([_Block() for _ in range(2)])
        self.head = nn.Linear(8, 16, bias=False)

    def forward(self, tokens):
        h = self.embed(tokens)
        for layer in self.layers:
            h = h + layer(h)
        return self.head(h).view(-1, 4, 16)


def _module_path(node):
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack") or {"": ("", None)}
    return list(stack.values())[-1][0]


def _described(gm):
    """Each node as the planner reads it: name, op, shape, the module that made it, descriptors."""
    return [(n.name, n.op, str(n.target), str(getattr(n.meta.get("val"), "shape", None)), _module_path(n),
             repr(n.meta.get("desc"))) for n in gm.graph.nodes]


@pytest.mark.parametrize("dims", [{0: Dim("batch")}, {0: 4 * Dim("k")}], ids=["batch", "derived"])
def test_the_training_trace_is_traced_once_and_matches_export_then_joint(dims):
    """One joint trace straight from the model: node for node the graph export-then-joint made,
    modules included (clustering reads them), over the same symbols and Dim names."""
    tokens = torch.randint(0, 16, (8, 4))
    traced = trace_for_planning(_Stack(), (tokens,), dynamic_shapes={"tokens": dims}, training=True)
    reference = export_then_joint(_Stack(), tokens, {"tokens": dims})
    assert _described(traced.graph_module) == _described(reference)
    assert {_module_path(n) for n in traced.graph_module.graph.nodes} >= {"layers.0.fc", "layers.1.norm", "head"}
    assert set(traced.dim_exprs) == {d.__name__ for d in dims.values()} | ({"k"} if "k" in str(dims) else set())


class _EagerOnlyCheck(nn.Module):
    """A data-dependent check skipped when compiling or exporting, as transformers' models make
    (the packed-sequence check of their attention masks)."""

    def forward(self, x):
        if not torch.compiler.is_compiling() and bool((x > 0).all()):
            return x
        return x * 2


@pytest.mark.parametrize("training", [False, True])
def test_a_model_traces_for_planning_in_export_s_compiling_state(training):
    # The training trace ran the model eagerly in fake mode: GuardOnDataDependentSymNode.
    traced = trace_for_planning(_EagerOnlyCheck(), (torch.randn(6, 8),), dynamic_shapes={"x": {0: Dim("batch")}},
                                training=training)
    assert "aten.mul.Tensor" in _targets(traced.graph_module)
    assert not torch.compiler.is_compiling() and not torch.compiler.is_exporting()


class _TiedHead(nn.Module):
    """An embedding whose weight is also the output head's, as GPT-2 ties them."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.mix = nn.Linear(8, 8)
        self.head = nn.Linear(8, 16, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(torch.tanh(self.mix(self.embed(tokens))))


def test_the_training_trace_reads_a_tied_parameter_once_with_the_sum_of_its_gradients():
    torch.manual_seed(0)
    model, tokens = _TiedHead(), torch.randint(0, 16, (4, 3))
    gm = trace_for_planning(model, (tokens,), dynamic_shapes={"tokens": {0: Dim("batch")}}, training=True).graph_module
    placeholders = {getattr(n.meta.get("desc"), "target", None): n for n in gm.graph.nodes if n.op == "placeholder"}
    assert not placeholders["head.weight"].users  # lifted, as export lifts every name, but not read

    tangent = torch.randn(4, 3, 16)
    primals = [p.detach() for _, p in model.named_parameters(remove_duplicate=False)] + [tokens]
    _, grads = gm(primals, [tangent])  # (user outputs, a gradient per primal)
    model(tokens).backward(tangent)
    names = [name for name, _ in model.named_parameters(remove_duplicate=False)]
    assert names[grads.index(None)] == "head.weight"  # one gradient for the tensor, under its first name
    for name, grad in zip(names, grads):
        if grad is not None:  # embed.weight: the embedding's gradient and the head's, as one device sums them
            torch.testing.assert_close(grad, model.get_parameter(name).grad, msg=lambda m: f"{name}: {m}")


def test_the_training_trace_raises_export_constraint_violations():
    spec = {"x": {0: Dim("n", min=3, max=10000)}}
    with pytest.raises(Exception, match="Constraints violated"):
        trace_for_planning(ArangeThird(), (torch.randn(9),), dynamic_shapes=spec, training=True)


class _ExpertLoop(nn.Module):
    """Experts run in a Python loop that skips those no token picked: a branch on a data-dependent count."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 8, 8))

    def forward(self, x):
        chosen = x.argmax(-1) % 4
        out = torch.zeros_like(x)
        for e in range(4):
            rows = (chosen == e).nonzero().squeeze(-1)
            if rows.numel() == 0:  # the branch
                continue
            out = out.index_add(0, rows, x[rows] @ self.w[e])
        return out


def test_a_branch_on_a_data_dependent_count_is_an_error_naming_the_models_line_and_what_to_do():
    with pytest.raises(DataDependentBranchError, match=r"branches on Eq\(u0, 0\).*test_tracing\.py:\d+: if rows\.numel\(\) "
                                                       r"== 0:.*experts_implementation=\"grouped_mm\".*torch\._check.*"
                                                       r"guard_or_false"):
        trace_for_planning(_ExpertLoop(), (torch.randn(6, 8),), dynamic_shapes=({0: Dim("batch")},))


def test_a_branch_in_transformers_own_grouped_product_before_5_23_says_to_upgrade_it(tmp_path):
    """transformers before 5.23 ran grouped_mm_fallback's backward as a loop that skips an expert with
    no rows (``if start == end: continue``): the file's branch gets that advice, not the generic one."""
    import importlib.util

    source = tmp_path / "transformers" / "integrations" / "moe.py"
    source.parent.mkdir(parents=True)
    source.write_text("def rows_per_expert(x, counts):\n    start, out = 0, []\n    for end in counts.cumsum(0).tolist():\n"
                      "        if start == end:\n            continue\n        out.append(x[start:end].sum(0))\n"
                      "        start = end\n    return sum(out)\n")
    spec = importlib.util.spec_from_file_location("old_transformers_moe", source)
    moe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(moe)

    class Experts(torch.nn.Module):
        def forward(self, x):
            return moe.rows_per_expert(x, torch.bincount(x[:, 0].long().clamp(0, 3), minlength=4))

    with pytest.raises(DataDependentBranchError, match=r"integrations/moe\.py:\d+: .*transformers before "
                                                       r"5\.23 .*upgrade transformers to 5\.23 or later") as info:
        trace_for_planning(Experts(), (torch.randn(6, 8),), dynamic_shapes=({0: Dim("batch")},))
    assert "experts_implementation" not in str(info.value)


def test_transformers_eager_expert_loop_is_an_error_naming_its_line():
    import transformers

    config = transformers.MixtralConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1, num_local_experts=4,
                                        num_experts_per_tok=2, max_position_embeddings=8, use_cache=False)
    config._experts_implementation = "eager"  # a Python loop over the experts that received tokens
    with pytest.raises(DataDependentBranchError, match=r"modeling_mixtral\.py:\d+: for expert_idx in expert_hit"):
        trace_for_planning(transformers.MixtralForCausalLM(config), (torch.randint(0, 64, (2, 8)),),
                           dynamic_shapes=({0: Dim("batch")},))
