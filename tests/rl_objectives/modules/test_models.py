"""MLP, ConvNet and SquashDims: layer structure, and outputs against hand-built nn.Sequential references."""

import pytest
import torch
from rl_objectives.modules import MLP, ConvNet, SquashDims
from torch import nn

BATCHES = [(), (4,), (2, 3)]


def _copy_weights(src: nn.Module, dst: nn.Module) -> None:
    """Copy parameters in order (the two modules hold the same layers in the same order)."""
    src_params = list(src.parameters())
    dst_params = list(dst.parameters())
    assert [p.shape for p in src_params] == [p.shape for p in dst_params]
    with torch.no_grad():
        for s, d in zip(src_params, dst_params):
            d.copy_(s)


def _types(module: nn.Module) -> list:
    return [type(m).__name__ for m in module]


class TestMLP:
    def test_default_structure(self):
        net = MLP(in_features=5, out_features=2)
        # 3 hidden layers of 32 units with Tanh, then a linear head (TorchRL defaults)
        assert _types(net) == ["Linear", "Tanh"] * 3 + ["Linear"]
        assert [m.out_features for m in net if isinstance(m, nn.Linear)] == [32, 32, 32, 2]
        assert net[0].in_features == 5

    def test_num_cells_list_and_depth(self):
        net = MLP(in_features=3, out_features=1, num_cells=[8, 16])
        assert [m.out_features for m in net if isinstance(m, nn.Linear)] == [8, 16, 1]
        net = MLP(in_features=3, out_features=1, depth=4, num_cells=6)
        assert [m.out_features for m in net if isinstance(m, nn.Linear)] == [6, 6, 6, 6, 1]
        assert _types(MLP(in_features=3, out_features=2, depth=0)) == ["Linear"]

    def test_block_order_and_options(self):
        net = MLP(
            in_features=3,
            out_features=2,
            num_cells=[4],
            activation_class=nn.ReLU,
            norm_class=nn.LayerNorm,
            dropout=0.5,
            activate_last_layer=True,
            bias_last_layer=False,
        )
        assert _types(net) == ["Linear", "Dropout", "LayerNorm", "ReLU", "Linear", "Dropout", "LayerNorm", "ReLU"]
        assert net[4].bias is None and net[0].bias is not None
        assert net[2].normalized_shape == (4,) and net[6].normalized_shape == (2,)

    def test_activation_kwargs(self):
        net = MLP(
            in_features=3,
            out_features=2,
            num_cells=[4],
            activation_class=nn.LeakyReLU,
            activation_kwargs={"negative_slope": 0.3},
        )
        assert net[1].negative_slope == 0.3

    @pytest.mark.parametrize("batch", BATCHES)
    def test_matches_hand_built_sequential(self, batch):
        torch.manual_seed(0)
        net = MLP(in_features=3, out_features=2, num_cells=[5, 7], activation_class=nn.ELU)
        ref = nn.Sequential(nn.Linear(3, 5), nn.ELU(), nn.Linear(5, 7), nn.ELU(), nn.Linear(7, 2))
        _copy_weights(net, ref)
        x = torch.randn(*batch, 3)
        out = net(x)
        assert out.shape == (*batch, 2)
        torch.testing.assert_close(out, ref(x))

    @pytest.mark.parametrize("batch", BATCHES)
    def test_tuple_out_features_and_lazy(self, batch):
        net = MLP(out_features=(2, 3), num_cells=[4])
        assert isinstance(net[0], nn.LazyLinear)
        x = torch.randn(*batch, 6)
        out = net(x)
        assert out.shape == (*batch, 2, 3)
        assert net[0].in_features == 6
        flat = nn.Sequential(*list(net))(x)  # the same layers without the reshape
        torch.testing.assert_close(out, flat.reshape(*batch, 2, 3))

    def test_several_inputs_are_concatenated(self):
        torch.manual_seed(0)
        net = MLP(in_features=5, out_features=1, num_cells=[4])
        obs, act = torch.randn(6, 3), torch.randn(6, 2)
        torch.testing.assert_close(net(obs, act), net(torch.cat([obs, act], -1)))

    def test_gradients_flow(self):
        net = MLP(in_features=3, out_features=1, num_cells=[4])
        net(torch.randn(5, 3)).sum().backward()
        assert all(p.grad is not None for p in net.parameters())

    def test_errors_name_the_argument(self):
        with pytest.raises(ValueError, match="out_features"):
            MLP(in_features=3)
        with pytest.raises(ValueError, match="depth=3 does not match num_cells"):
            MLP(in_features=3, out_features=1, depth=3, num_cells=[4, 4])
        with pytest.raises(ValueError, match="num_cells"):
            MLP(in_features=3, out_features=1, num_cells=[4, 0])
        with pytest.raises(ValueError, match="dropout"):
            MLP(in_features=3, out_features=1, dropout=1.5)
        with pytest.raises(ValueError, match="in_features"):
            MLP(in_features=-1, out_features=1)

    def test_single_bias_last_layer_shares_one_bias(self):
        # TorchRL 0.14: a bias-free head followed by one scalar bias (zero at first) shared by all outputs
        torch.manual_seed(0)
        net = MLP(in_features=3, out_features=4, depth=1, num_cells=5, single_bias_last_layer=True)
        assert _types(net) == ["Linear", "Tanh", "Linear", "_SharedBias"]
        assert net[2].bias is None and net[3].bias.shape == (1,)
        assert sum(p.numel() for p in net.parameters()) == 3 * 5 + 5 + 5 * 4 + 1
        x = torch.randn(2, 3)
        with torch.no_grad():
            net[3].bias.fill_(0.5)
        torch.testing.assert_close(net(x), net[2](torch.tanh(net[0](x))) + 0.5)
        # without a head bias there is nothing to share
        assert _types(MLP(3, 4, depth=0, bias_last_layer=False, single_bias_last_layer=True)) == ["Linear"]


class TestConvNet:
    def test_structure(self):
        net = ConvNet(in_features=3, num_cells=[4, 8], kernel_sizes=[5, 3], strides=[2, 1], paddings=[1, 0])
        assert _types(net) == ["Conv2d", "ELU", "Conv2d", "ELU", "SquashDims"]
        convs = [m for m in net if isinstance(m, nn.Conv2d)]
        assert [(c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding) for c in convs] == [
            (3, 4, (5, 5), (2, 2), (1, 1)),
            (4, 8, (3, 3), (1, 1), (0, 0)),
        ]
        default = ConvNet(in_features=1)
        assert [m.out_channels for m in default if isinstance(m, nn.Conv2d)] == [32, 32, 32]

    @pytest.mark.parametrize("batch", BATCHES)
    def test_matches_hand_built_sequential(self, batch):
        torch.manual_seed(0)
        net = ConvNet(in_features=2, num_cells=[3, 4], kernel_sizes=3, strides=[2, 1])
        ref = nn.Sequential(nn.Conv2d(2, 3, 3, stride=2), nn.ELU(), nn.Conv2d(3, 4, 3, stride=1), nn.ELU())
        _copy_weights(net, ref)
        x = torch.randn(*batch, 2, 11, 11)  # 11 -> 5 -> 3 pixels per side
        out = net(x)
        assert out.shape == (*batch, 4 * 3 * 3)
        expected = ref(x.reshape(-1, 2, 11, 11)).reshape(*batch, 36)
        torch.testing.assert_close(out, expected)

    def test_lazy_and_squeeze_output(self):
        net = ConvNet(num_cells=[1], kernel_sizes=4, squeeze_output=True)
        out = net(torch.randn(5, 3, 4, 4))  # 1 channel, 1x1 pixel -> [5, 1] -> squeezed
        assert out.shape == (5,)
        assert net[0].in_channels == 3

    def test_no_last_activation_and_custom_aggregator(self):
        net = ConvNet(
            in_features=1,
            num_cells=[2],
            activate_last_layer=False,
            aggregator_class=SquashDims,
            aggregator_kwargs={"ndims_in": 2},
        )
        assert _types(net) == ["Conv2d", "SquashDims"]
        assert net(torch.randn(4, 1, 5, 5)).shape == (4, 2, 9)

    def test_errors(self):
        with pytest.raises(ValueError, match="strides has 3 entries but the network has 2 layers"):
            ConvNet(in_features=1, num_cells=[2, 2], strides=[1, 1, 1])
        with pytest.raises(ValueError, match=r"\[\*B, C, H, W\]"):
            ConvNet(in_features=1, num_cells=[2])(torch.randn(4, 4))
        with pytest.raises(ValueError, match="ndims_in"):
            SquashDims(0)


def test_squash_dims():
    x = torch.randn(2, 3, 4, 5, 6)
    torch.testing.assert_close(SquashDims()(x), x.reshape(2, 3, 120))
    torch.testing.assert_close(SquashDims(2)(x), x.reshape(2, 3, 4, 30))
