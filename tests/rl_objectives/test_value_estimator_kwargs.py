"""TorchRL 0.14's keyword arguments of the value estimators: auto_reset_env, group_key, chunked
value-network calls, device, deactivate_vmap, shifted_budget and the deprecated key arguments.
Expected numbers are TorchRL 0.14.1's, for the same inputs."""

import pytest
import torch
from rl_objectives.value import GAE, TD0Estimator, TD1Estimator, TDLambdaEstimator
from tdict import TensorDict
from tdict.nn import TensorDictModule

T = 5
REWARD = torch.tensor([[1.0, 0.5, -1.0, 2.0, 0.0], [0.3, 0.2, 0.1, -0.4, 1.0]])
VALUE = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.5], [1.0, -1.0, 0.5, 0.0, 0.2]])
NEXT_VALUE = torch.tensor([[0.2, 0.3, 9.0, 0.5, 0.6], [-1.0, 0.5, 0.0, 7.0, 0.3]])
DONE = torch.tensor([[False, False, True, False, False], [False, False, False, True, False]])
TRUNCATED = torch.tensor([[False, False, True, False, False], [False, False, False, False, False]])


def rollout() -> TensorDict:
    return TensorDict(
        {
            "state_value": VALUE,
            "next": {
                "state_value": NEXT_VALUE,
                "reward": REWARD,
                "done": DONE,
                "terminated": DONE & ~TRUNCATED,
                "truncated": TRUNCATED,
            },
        },
        batch_size=[2, T],
    )


def test_gae_auto_reset_env_bootstraps_truncations_from_the_current_value():
    plain = GAE(gamma=0.9, lmbda=0.8, value_network=None)(rollout())
    auto = GAE(gamma=0.9, lmbda=0.8, value_network=None, auto_reset_env=True)(rollout())
    # TorchRL 0.14.1, same inputs
    torch.testing.assert_close(
        plain["advantage"][0],
        torch.tensor(
            [5.015519142150879, 5.465999603271484, 6.799999237060547, 2.0787999629974365, 0.04000002145767212]
        ),
    )
    torch.testing.assert_close(
        auto["advantage"][0],
        torch.tensor(
            [0.956447958946228, -0.17159998416900635, -1.0299999713897705, 2.0787999629974365, 0.04000002145767212]
        ),
    )
    torch.testing.assert_close(
        auto["value_target"][0],
        torch.tensor(
            [1.056447982788086, 0.02840001881122589, -0.7299999594688416, 2.478800058364868, 0.5400000214576721]
        ),
    )
    torch.testing.assert_close(auto["advantage"][1], plain["advantage"][1])  # no truncation in that row
    td = rollout()
    del td["next", "truncated"]
    with pytest.raises(KeyError, match="auto_reset_env reads it"):
        GAE(gamma=0.9, lmbda=0.8, value_network=None, auto_reset_env=True)(td)
    with pytest.raises(TypeError, match="auto_reset_env must be a bool"):
        GAE(gamma=0.9, lmbda=0.8, value_network=None, auto_reset_env="yes")


def test_group_key_standardises_within_groups():
    td = rollout()
    td["task"] = torch.tensor([[0, 1, 0, 1, 0], [1, 1, 0, 0, 2]])
    adv = GAE(gamma=0.9, lmbda=0.8, value_network=None, average_gae=True, group_key="task")(td.clone())["advantage"]
    torch.testing.assert_close(
        adv,
        torch.tensor(
            [
                [0.8190362453460693, 1.3358429670333862, 1.3297091722488403, 0.036856092512607574, -0.6048312783241272],
                [-1.0551408529281616, -0.3175581097602844, -0.8131663799285889, -0.7307481169700623, 0.0],
            ]
        ),
    )
    # one id per trajectory: each row standardised on its own
    td["task"] = torch.tensor([0, 1]).unsqueeze(-1).expand(2, T)
    adv = GAE(gamma=0.9, lmbda=0.8, value_network=None, average_gae=True, group_key="task")(td.clone())["advantage"]
    torch.testing.assert_close(
        adv[0],
        torch.tensor(
            [0.4124084413051605, 0.5760272741317749, 1.0605487823486328, -0.6542363166809082, -1.3947480916976929]
        ),
    )
    td["task"] = torch.tensor([[0, 1, 0, 1, 0], [1, 1, 0, 0, 2]])
    target = TD0Estimator(gamma=0.9, value_network=None, average_rewards=True, group_key="task")(td.clone())[
        "value_target"
    ]
    torch.testing.assert_close(
        target,
        torch.tensor(
            [
                [1.6251559257507324, -0.02669540047645569, 6.818446159362793, 1.9334769248962402, 0.6218013167381287],
                [
                    -1.434051752090454,
                    -0.2027299404144287,
                    0.2181367576122284,
                    -0.46354061365127563,
                    0.27000001072883606,
                ],
            ]
        ),
    )
    est = GAE(gamma=0.9, lmbda=0.8, value_network=None, average_gae=True, group_key=("meta", "task"))
    assert ("meta", "task") in est.in_keys
    with pytest.raises(KeyError, match="group_key"):
        est(rollout())
    td["task"] = torch.zeros(2, T)  # float ids
    with pytest.raises(ValueError, match="group ids of shape \\(2, 5\\) and dtype torch.float32"):
        GAE(gamma=0.9, lmbda=0.8, value_network=None, average_gae=True, group_key="task")(td)


class Counting(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 1)
        self.sizes: list = []

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        self.sizes.append(tuple(obs.shape[:-1]))
        return self.lin(obs).squeeze(-1)


@pytest.mark.parametrize(
    "kwargs, sizes",
    [
        ({"value_chunk_size": 2}, [(2, 4), (1, 4)]),
        ({"num_chunks": 2}, [(2, 4), (1, 4)]),
        ({"num_chunk": 3}, [(1, 4), (1, 4), (1, 4)]),
        ({"value_chunk_size": 3, "value_chunk_dim": -1}, [(3, 3), (3, 1)]),
    ],
)
def test_chunked_value_network_calls_give_the_same_values(kwargs, sizes):
    torch.manual_seed(0)
    net = Counting()
    critic = TensorDictModule(net, in_keys=["obs"], out_keys=["state_value"])
    td = TensorDict(
        {
            "obs": torch.randn(3, 4, 3),
            "next": {
                "obs": torch.randn(3, 4, 3),
                "reward": torch.randn(3, 4),
                "done": torch.zeros(3, 4, dtype=torch.bool),
            },
        },
        [3, 4],
    )
    ref = GAE(gamma=0.9, lmbda=0.9, value_network=critic)(td.clone())
    net.sizes.clear()
    out = GAE(gamma=0.9, lmbda=0.9, value_network=critic, **kwargs)(td.clone())
    assert net.sizes == sizes * 2  # the root and the next values, chunk by chunk
    for key in ("advantage", "value_target", "state_value", ("next", "state_value")):
        torch.testing.assert_close(out[key], ref[key])


def test_chunking_argument_errors():
    for kwargs, match in (
        ({"value_chunk_size": 0}, "value_chunk_size must be a positive int or None, got 0"),
        ({"num_chunks": 2, "num_chunk": 3}, "num_chunks=2 and its alias num_chunk=3 differ"),
        ({"num_chunks": 2, "value_chunk_size": 2}, "value_chunk_size and num_chunks exclude each other"),
        ({"shifted_budget": 0}, "shifted_budget must be a positive int, got 0"),
    ):
        with pytest.raises(ValueError, match=match):
            TD1Estimator(gamma=0.9, value_network=None, **kwargs)
    with pytest.raises(NotImplementedError, match="shifted_budget=2 is not supported"):
        TDLambdaEstimator(gamma=0.9, lmbda=0.9, value_network=None, shifted=True, shifted_budget=2)
    TDLambdaEstimator(gamma=0.9, lmbda=0.9, value_network=None, shifted=True, shifted_budget=1)  # TorchRL's default


def test_device_places_the_coefficients_and_deactivate_vmap_is_accepted():
    est = GAE(gamma=0.9, lmbda=0.8, value_network=None, device="meta")
    assert est.gamma.device.type == "meta" and est.lmbda.device.type == "meta"
    assert "gamma" in dict(est.named_buffers())
    assert isinstance(GAE(gamma=0.9, lmbda=0.8, value_network=None).gamma, float)
    on_cpu = GAE(gamma=0.9, lmbda=0.8, value_network=None, device="cpu", deactivate_vmap=True)(rollout())
    torch.testing.assert_close(
        on_cpu["advantage"], GAE(gamma=0.9, lmbda=0.8, value_network=None)(rollout())["advantage"]
    )
    with pytest.raises(RuntimeError):
        TD0Estimator(gamma=0.9, value_network=None, device="no-such-device")
    with pytest.raises(TypeError, match="deactivate_vmap must be a bool"):
        TD0Estimator(gamma=0.9, value_network=None, deactivate_vmap=1)


def test_deprecated_key_arguments_set_the_keys():
    td = rollout().rename_key_("state_value", "v")
    td.get("next").rename_key_("state_value", "v")
    with pytest.warns(
        DeprecationWarning, match="advantage_key, value_target_key, value_key in the constructor is deprecated"
    ):
        est = GAE(gamma=0.9, lmbda=0.8, value_network=None, advantage_key="adv", value_target_key="vt", value_key="v")
    assert (est.tensor_keys.advantage, est.tensor_keys.value_target, est.tensor_keys.value) == ("adv", "vt", "v")
    out = est(td)
    torch.testing.assert_close(out["adv"], GAE(gamma=0.9, lmbda=0.8, value_network=None)(rollout())["advantage"])
    with pytest.warns(DeprecationWarning, match="value_key in the constructor"):
        assert TD0Estimator(gamma=0.9, value_network=None, value_key="v").tensor_keys.value == "v"
