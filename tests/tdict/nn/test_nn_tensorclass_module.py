"""TensorClassModuleBase, as_tensordict_module, and the CompositeDistribution cdf/icdf helpers."""

import pytest
import torch
from torch import distributions as D

from tdict import TensorClass, TensorDict
from tdict.nn import (
    CompositeDistribution,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorClassModuleBase,
    TensorClassModuleWrapper,
    TensorDictModule,
    TensorDictSequential,
    as_tensordict_module,
)


class Pair(TensorClass):
    a: torch.Tensor
    b: torch.Tensor


class SumDiff(TensorClass):
    total: torch.Tensor
    diff: torch.Tensor


class Report(TensorClass):
    inputs: Pair
    result: SumDiff


class AddSub(TensorClassModuleBase[Pair, SumDiff]):
    def forward(self, x):
        return SumDiff(total=x.a + x.b, diff=x.a - x.b, batch_size=x.batch_size)


class Reporter(TensorClassModuleBase[Pair, Report]):
    def __init__(self):
        super().__init__()
        self.add_sub = AddSub()

    def forward(self, x):
        return Report(inputs=x, result=self.add_sub(x), batch_size=x.batch_size)


def test_generic_parameters_become_input_and_output_types():
    assert AddSub.input_type is Pair and AddSub.output_type is SumDiff
    out = Reporter()(Pair(a=torch.tensor([3.0, 1.0]), b=torch.tensor([1.0, 1.0]), batch_size=[2]))
    assert isinstance(out, Report) and out.batch_size == torch.Size([2])
    torch.testing.assert_close(out.result.total, torch.tensor([4.0, 2.0]))
    torch.testing.assert_close(out.result.diff, torch.tensor([2.0, 0.0]))


def test_as_td_module_keys_are_the_fields_nested_through_tensor_classes():
    td_module = Reporter().as_td_module()
    assert isinstance(td_module, TensorClassModuleWrapper)
    assert td_module.in_keys == ["a", "b"]
    assert td_module.out_keys == [("inputs", "a"), ("inputs", "b"), ("result", "total"), ("result", "diff")]


def test_as_td_module_call_writes_the_outputs_into_the_input():
    td = TensorDict(a=torch.tensor([5.0]), b=torch.tensor([2.0]), other=torch.zeros(1), batch_size=[1])
    out = AddSub().as_td_module()(td)
    assert out is td
    torch.testing.assert_close(td["total"], torch.tensor([7.0]))
    torch.testing.assert_close(td["diff"], torch.tensor([3.0]))
    torch.testing.assert_close(td["other"], torch.zeros(1))  # extra keys are left alone
    # usable inside a TensorDictSequential
    seq = TensorDictSequential(AddSub().as_td_module(), TensorDictModule(lambda t: t * 10, ["total"], ["scaled"]))
    torch.testing.assert_close(seq(TensorDict(a=1.0, b=2.0))["scaled"], torch.tensor(30.0))


def test_as_td_module_missing_key_is_named():
    with pytest.raises(KeyError, match=r"in_keys \['b'\] are missing"):
        AddSub().as_td_module()(TensorDict(a=torch.zeros(())))


def test_non_tensorclass_types_cannot_become_td_modules():
    class Plain(TensorClassModuleBase[torch.Tensor, torch.Tensor]):
        def forward(self, x):
            return x + 1

    torch.testing.assert_close(Plain()(torch.zeros(2)), torch.ones(2))
    with pytest.raises(ValueError, match="input type Tensor and output type Tensor"):
        Plain().as_td_module()


def test_subclass_without_concrete_types_cannot_become_a_td_module():
    class Untyped(TensorClassModuleBase):
        def forward(self, x):
            return x

    with pytest.raises(ValueError, match="Untyped has input type None and output type None"):
        Untyped().as_td_module()


def test_as_tensordict_module_on_a_function():
    @as_tensordict_module(in_keys=["x", "y"], out_keys="z")
    def add(x, y):
        return x + y

    out = add(TensorDict(x=torch.tensor(2.0), y=torch.tensor(5.0)))
    torch.testing.assert_close(out["z"], torch.tensor(7.0))
    assert add.__name__ == "add"


def test_as_tensordict_module_on_a_method_binds_each_instance():
    class Scale:
        def __init__(self, factor):
            self.factor = factor

        @as_tensordict_module(in_keys="x", out_keys=["y"])
        def apply(self, x):
            return x * self.factor

    td = TensorDict(x=torch.tensor([1.0, 2.0]), batch_size=[2])
    torch.testing.assert_close(Scale(3).apply(td.clone())["y"], torch.tensor([3.0, 6.0]))
    torch.testing.assert_close(Scale(-1).apply(td.clone())["y"], torch.tensor([-1.0, -2.0]))


def test_as_tensordict_module_bad_key_is_named():
    with pytest.raises(ValueError, match="in_keys"):
        as_tensordict_module(in_keys=[1], out_keys="y")


def _two_normals():
    loc, scale = torch.tensor([0.0, 1.0]), torch.tensor([1.0, 2.0])
    params = TensorDict(
        {
            "a": TensorDict(loc=loc, scale=scale, batch_size=[2]),
            ("n", "b"): TensorDict(loc=-loc, scale=scale, batch_size=[2]),
        },
        batch_size=[2],
    )
    dist = CompositeDistribution(params, distribution_map={"a": D.Normal, ("n", "b"): D.Normal})
    return dist, D.Normal(loc, scale), D.Normal(-loc, scale)


def test_composite_cdf_and_icdf_against_each_head():
    dist, ref_a, ref_b = _two_normals()
    sample = TensorDict({"a": torch.tensor([0.5, -1.0]), ("n", "b"): torch.tensor([0.0, 2.0])}, batch_size=[2])
    assert dist.cdf(sample) is sample
    torch.testing.assert_close(sample["a_cdf"], ref_a.cdf(sample["a"]))
    torch.testing.assert_close(sample["n", "b_cdf"], ref_b.cdf(sample["n", "b"]))
    dist.icdf(sample)  # reads the *_cdf entries: back to the sample
    torch.testing.assert_close(sample["a_icdf"], sample["a"])
    torch.testing.assert_close(sample["n", "b_icdf"], sample["n", "b"])


def test_composite_icdf_reads_the_sample_key_without_cdf_and_names_missing_keys():
    dist, ref_a, ref_b = _two_normals()
    probs = TensorDict({"a": torch.tensor([0.5, 0.9]), ("n", "b"): torch.tensor([0.5, 0.1])}, batch_size=[2])
    dist.icdf(probs)
    torch.testing.assert_close(probs["a_icdf"], ref_a.icdf(torch.tensor([0.5, 0.9])))
    with pytest.raises(KeyError, match=r"neither \('n', 'b_cdf'\) nor \('n', 'b'\)"):
        dist.icdf(TensorDict(a=torch.tensor([0.5, 0.5]), batch_size=[2]))
    with pytest.raises(KeyError, match="CompositeDistribution.cdf: the sample misses"):
        dist.cdf(TensorDict(a=torch.zeros(2), batch_size=[2]))


def test_log_prob_keys_as_a_tuple_of_keys():
    module = ProbabilisticTensorDictModule(
        in_keys=["params"],
        out_keys=["a", ("n", "b")],
        distribution_class=CompositeDistribution,
        distribution_kwargs={"distribution_map": {"a": D.Normal, ("n", "b"): D.Normal}},
        return_log_prob=True,
        log_prob_keys=("a_lp", ("n", "b_lp")),
    )
    assert module.log_prob_keys == ["a_lp", ("n", "b_lp")]


def test_probabilistic_sequential_with_a_mixin_whose_init_lacks_optional_arguments():
    class Intermediate(TensorDictSequential):
        def __init__(self, *modules, partial_tolerant=False, inplace=None):
            super().__init__(*modules, partial_tolerant=partial_tolerant, inplace=inplace)

    class Custom(ProbabilisticTensorDictSequential, Intermediate):
        def __init__(self, *modules):
            super().__init__(*modules)

    seq = Custom(
        TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["loc"]),
        ProbabilisticTensorDictModule(in_keys=["loc"], out_keys=["s"], distribution_kwargs={"scale": 1e-6}),
    )
    out = seq(TensorDict(x=torch.zeros(3), batch_size=[3]))
    torch.testing.assert_close(out["s"], torch.ones(3), atol=1e-4, rtol=0)
