"""Decision Transformer model and actors: a hand-written reference forward, causality, shapes
(batch [], [4], [2, 3]), config and input errors, heads, compile, and the inference wrapper."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_objectives.modules import ProbabilisticActor, TanhDelta, TanhNormal
from rl_objectives.modules.decision_transformer import (
    DecisionTransformer,
    DecisionTransformerInferenceWrapper,
    DTActor,
    DTConfig,
    OnlineDTActor,
)
from tdict import TensorDict
from tdict.nn import TensorDictModule

OBS, ACT = 3, 2
BATCHES = [(), (4,), (2, 3)]


def tiny(**overrides):
    config = {
        "n_embd": 16,
        "n_layer": 1,
        "n_head": 1,
        "n_inner": 32,
        "n_positions": 30,
        "resid_pdrop": 0.0,
        "attn_pdrop": 0.0,
    }
    config.update(overrides)
    return config


def inputs(batch, steps, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(*batch, steps, OBS, generator=g),
        torch.randn(*batch, steps, ACT, generator=g),
        torch.randn(*batch, steps, generator=g),
    )


def reference_forward(model, observation, action, return_to_go):
    """The DT forward written out with plain ops, one sequence at a time, tokens in a Python loop."""
    cfg = model.config
    gpt = model.transformer
    width, heads = cfg.n_embd, cfg.n_head
    head_dim = width // heads
    act = {"relu": torch.relu, "gelu": torch.nn.functional.gelu}[cfg.activation]

    def ln(x, mod):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-5) * mod.weight + mod.bias

    def lin(x, mod):
        return x @ mod.weight.T + mod.bias

    outs = []
    for obs, a, rtg in zip(observation, action, return_to_go):
        tokens = []
        for t in range(obs.shape[0]):
            tokens.append(lin(rtg[t : t + 1], model.embed_return))
            tokens.append(lin(obs[t], model.embed_state))
            tokens.append(lin(a[t], model.embed_action))
        x = ln(torch.stack(tokens), model.embed_ln)
        length = x.shape[0]
        x = x + gpt.wpe.weight[:length]
        for block in gpt.h:
            h = ln(x, block.ln_1)
            qkv = lin(h, block.attn.c_attn)
            q, k, v = qkv[:, :width], qkv[:, width : 2 * width], qkv[:, 2 * width :]
            per_head = []
            for i in range(heads):
                sl = slice(i * head_dim, (i + 1) * head_dim)
                scores = q[:, sl] @ k[:, sl].T / math.sqrt(head_dim)
                future = torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1)
                weights = torch.softmax(scores.masked_fill(future, float("-inf")), -1)
                per_head.append(weights @ v[:, sl])
            x = x + lin(torch.cat(per_head, -1), block.attn.c_proj)
            h = ln(x, block.ln_2)
            x = x + lin(act(lin(h, block.mlp.c_fc)), block.mlp.c_proj)
        x = ln(x, gpt.ln_f)
        outs.append(x[1::3])  # the state tokens
    return torch.stack(outs)


class TestDecisionTransformer:
    @pytest.mark.parametrize("n_layer,n_head,activation", [(1, 1, "relu"), (2, 2, "gelu"), (1, 4, "relu")])
    def test_matches_hand_written_reference(self, n_layer, n_head, activation):
        torch.manual_seed(0)
        model = DecisionTransformer(OBS, ACT, config=tiny(n_layer=n_layer, n_head=n_head, activation=activation))
        with torch.no_grad():  # non-trivial LayerNorm affine parameters, so the reference checks their use
            for mod in model.modules():
                if isinstance(mod, torch.nn.LayerNorm):
                    mod.weight.uniform_(0.5, 1.5)
                    mod.bias.uniform_(-0.5, 0.5)
        obs, act, rtg = inputs((3,), 5)
        torch.testing.assert_close(model(obs, act, rtg), reference_forward(model, obs, act, rtg), atol=1e-5, rtol=1e-5)

    @pytest.mark.parametrize("batch", BATCHES)
    def test_shapes_and_batch_flattening(self, batch):
        torch.manual_seed(0)
        model = DecisionTransformer(OBS, ACT, config=tiny())
        obs, act, rtg = inputs(batch, 4)
        out = model(obs, act, rtg)
        assert out.shape == (*batch, 4, 16)
        flat = model(obs.reshape(-1, 4, OBS), act.reshape(-1, 4, ACT), rtg.reshape(-1, 4))
        torch.testing.assert_close(out.reshape(-1, 4, 16), flat)

    @settings(max_examples=15, deadline=None)
    @given(steps=st.integers(2, 8), data=st.data())
    def test_causal_output_independent_of_later_inputs(self, steps, data):
        t = data.draw(st.integers(0, steps - 1))
        which = data.draw(st.sampled_from(["observation", "action", "return_to_go"]))
        torch.manual_seed(1)
        model = DecisionTransformer(OBS, ACT, config=tiny(n_layer=2, n_head=2))
        obs, act, rtg = inputs((2,), steps, seed=steps)
        out = model(obs, act, rtg)
        perturbed = {"observation": obs.clone(), "action": act.clone(), "return_to_go": rtg.clone()}
        # a_t comes after s_t: the output at s_t may not see it; R_t and s_t come before and must be seen
        start = t if which == "action" else t + 1
        perturbed[which][:, start:] += 10.0
        out2 = model(perturbed["observation"], perturbed["action"], perturbed["return_to_go"])
        torch.testing.assert_close(out2[:, :start], out[:, :start], atol=1e-6, rtol=0)
        seen_from = t + 1  # the first state token after the perturbation sees it
        if seen_from < steps:
            assert not torch.allclose(out2[:, seen_from:], out[:, seen_from:])

    def test_context_length_limit(self):
        model = DecisionTransformer(OBS, ACT, config=tiny(n_positions=30))
        assert model.max_steps == 10
        assert model(*inputs((2,), 10)).shape == (2, 10, 16)
        with pytest.raises(ValueError, match=r"T = 11 steps makes 33 tokens.*n_positions = 30.*at most 10 steps"):
            model(*inputs((2,), 11))
        with pytest.raises(ValueError, match="empty"):
            model(*inputs((2,), 0))

    def test_input_shape_errors(self):
        model = DecisionTransformer(OBS, ACT, config=tiny())
        obs, act, rtg = inputs((2,), 4)
        with pytest.raises(ValueError, match="drop the trailing singleton dim"):
            model(obs, act, rtg.unsqueeze(-1))
        with pytest.raises(ValueError, match=r"observation must be \[\*B, T, 3\]"):
            model(obs[..., :2], act, rtg)
        with pytest.raises(ValueError, match=r"action must be \[\*B, T, 2\]"):
            model(obs, act[:, :3], rtg)
        with pytest.raises(ValueError, match=r"observation must be"):
            model(torch.randn(OBS), torch.randn(ACT), torch.randn(()))

    @pytest.mark.parametrize(
        "bad,match",
        [
            ({"n_embd": 10, "n_head": 3}, "must divide"),
            ({"activation": "elu"}, "activation must be one of"),
            ({"attn_pdrop": 1.0}, "attn_pdrop must be a probability"),
            ({"n_layer": 0}, "n_layer must be a positive int"),
            ({"n_inner": -1}, "n_inner must be a positive int"),
            ({"n_embed": 8}, r"unknown transformer config key\(s\) \['n_embed'\]"),
        ],
    )
    def test_config_errors(self, bad, match):
        with pytest.raises(ValueError, match=match):
            DecisionTransformer(OBS, ACT, config=tiny(**bad))

    def test_config_forms_and_defaults(self):
        assert DecisionTransformer.default_config() == DTConfig(256, 4, 4, 1024, "relu", 1024, 0.1, 0.1)
        assert DecisionTransformer.DTConfig is DTConfig
        assert (
            DTActor.default_config()
            == OnlineDTActor.default_config()
            == DTConfig(512, 4, 4, 2048, "relu", 1024, 0.1, 0.1)
        )
        model = DecisionTransformer(OBS, ACT, config=DTConfig(n_embd=8, n_layer=1, n_head=2, n_inner=None))
        assert model.transformer.h[0].mlp.c_fc.out_features == 32  # n_inner None: 4 * n_embd
        partial = DecisionTransformer(OBS, ACT, config={"n_embd": 8, "n_head": 2})  # the rest from the defaults
        assert (partial.config.n_layer, partial.config.n_inner) == (4, 1024)
        with pytest.raises(TypeError, match="DTConfig, a dict or None"):
            DecisionTransformer(OBS, ACT, config=[8])
        with pytest.raises(ValueError, match="state_dim must be a positive int"):
            DecisionTransformer(0, ACT)

    def test_gpt2_initialisation(self):
        torch.manual_seed(0)
        model = DecisionTransformer(OBS, ACT, config=tiny(n_embd=64, n_layer=8, n_head=4, n_inner=256))
        block = model.transformer.h[0]
        assert abs(block.attn.c_attn.weight.std().item() - 0.02) < 0.002
        assert abs(block.mlp.c_proj.weight.std().item() - 0.02 / math.sqrt(16)) < 0.001
        assert block.attn.c_attn.bias.abs().max() == 0
        assert abs(model.transformer.wpe.weight.std().item() - 0.02) < 0.002

    def test_dropout_only_in_training(self):
        torch.manual_seed(0)
        model = DecisionTransformer(OBS, ACT, config=tiny(resid_pdrop=0.3, attn_pdrop=0.3))
        x = inputs((2,), 4)
        assert not torch.allclose(model(*x), model(*x))
        model.eval()
        torch.testing.assert_close(model(*x), model(*x))

    def test_device_argument(self):
        model = DTActor(OBS, ACT, tiny(), device="meta")
        assert {p.device.type for p in model.parameters()} == {"meta"}


class TestActors:
    @pytest.mark.parametrize("batch", BATCHES)
    def test_dt_actor(self, batch):
        torch.manual_seed(0)
        net = DTActor(OBS, ACT, tiny())
        x = inputs(batch, 4)
        out = net(*x)
        assert out.shape == (*batch, 4, ACT)
        torch.testing.assert_close(out, net.action_layer(net.transformer(*x)))
        w = net.action_layer.weight  # orthogonal rows, zero bias (TorchRL's head initialisation)
        torch.testing.assert_close(w @ w.T, torch.eye(ACT), atol=1e-5, rtol=0)
        assert net.action_layer.bias.abs().max() == 0
        squashed = DTActor(OBS, ACT, tiny(), action_tanh=True)
        squashed.load_state_dict(net.state_dict())
        torch.testing.assert_close(squashed(*x), torch.tanh(out))

    @pytest.mark.parametrize("batch", BATCHES)
    def test_online_dt_actor(self, batch):
        torch.manual_seed(0)
        net = OnlineDTActor(OBS, ACT, tiny())
        with torch.no_grad():
            net.action_layer_logstd.weight.mul_(100.0)  # push the log-std head to both saturations
        x = inputs(batch, 4)
        loc, scale = net(*x)
        hidden = net.transformer(*x)
        expected_log_std = -5.0 + 3.5 * (torch.tanh(net.action_layer_logstd(hidden)) + 1.0)
        assert loc.shape == scale.shape == (*batch, 4, ACT)
        torch.testing.assert_close(loc, net.action_layer_mean(hidden))
        torch.testing.assert_close(scale, expected_log_std.exp())
        assert bool((scale >= math.exp(-5) - 1e-7).all() and (scale <= math.exp(2) + 1e-5).all())

    def test_probabilistic_actor_on_time_batched_tensordict(self):
        torch.manual_seed(0)
        module = TensorDictModule(
            OnlineDTActor(OBS, ACT, tiny()),
            in_keys=["observation", "action", "return_to_go"],
            out_keys=["loc", "scale"],
        )
        actor = ProbabilisticActor(module, in_keys=["loc", "scale"], out_keys=["action"], distribution_class=TanhNormal)
        obs, act, rtg = inputs((2,), 5)
        td = TensorDict(observation=obs, action=act.tanh(), return_to_go=rtg, batch_size=[2, 5], names=[None, "time"])
        assert actor.get_dist(td).log_prob(td["action"]).shape == (2, 5)

    def test_compile_actor_forward_matches_eager(self):
        torch.manual_seed(0)
        actor = TensorDictModule(
            DTActor(OBS, ACT, tiny(n_head=2)), in_keys=["observation", "action", "return_to_go"], out_keys=["param"]
        )
        obs, act, rtg = inputs((2,), 5)
        td = TensorDict(observation=obs, action=act, return_to_go=rtg, batch_size=[2, 5])
        torch.compiler.reset()
        try:
            expected = actor(td.clone())["param"]
            compiled = torch.compile(actor, fullgraph=True, backend="eager")
            torch.testing.assert_close(compiled(td.clone())["param"], expected)
        finally:
            torch.compiler.reset()


class Recorder(torch.nn.Module):
    """A policy that records what it is given and predicts ``observation[..., :ACT] + step index``."""

    def __init__(self):
        super().__init__()
        self.seen = None

    def forward(self, observation, action, return_to_go):
        self.seen = (observation.clone(), action.clone(), return_to_go.clone())
        steps = torch.arange(observation.shape[-2], dtype=observation.dtype).unsqueeze(-1)
        return observation[..., :ACT] + steps


class TestInferenceWrapper:
    def _wrapper(self, context):
        recorder = Recorder()
        policy = TensorDictModule(recorder, in_keys=["observation", "action", "return_to_go"], out_keys=["action"])
        return DecisionTransformerInferenceWrapper(policy, inference_context=context), recorder

    @pytest.mark.parametrize("context", [1, 3, 6, 10])
    def test_masks_the_context_and_returns_the_last_step(self, context):
        steps = 6
        wrapper, recorder = self._wrapper(context)
        obs, act, rtg = inputs((2,), steps)
        td = TensorDict(observation=obs, action=act, return_to_go=rtg, batch_size=[2])
        out = wrapper(td)
        seen_obs, seen_act, seen_rtg = recorder.seen
        for i in range(steps):  # the reference: a loop over the positions
            kept = i >= steps - context
            torch.testing.assert_close(seen_obs[:, i], obs[:, i] if kept else torch.zeros_like(obs[:, i]))
            torch.testing.assert_close(seen_rtg[:, i], rtg[:, i] if kept else torch.zeros_like(rtg[:, i]))
            # the stored action i+1 (taken after s_i) sits with s_i; the current action is unknown
            shifted = act[:, i + 1] if (kept and i < steps - 1) else torch.zeros_like(act[:, 0])
            torch.testing.assert_close(seen_act[:, i], shifted)
        assert out.batch_size == (2,)
        torch.testing.assert_close(out["action"], obs[:, -1, :ACT] + (steps - 1))
        torch.testing.assert_close(out["return_to_go"], rtg[:, -1])
        torch.testing.assert_close(out["observation"], obs)  # the unmasked history
        torch.testing.assert_close(td["action"], act)  # the input is not modified
        assert td["return_to_go"].shape == (2, steps)

    def test_time_as_batch_dim_is_dropped(self):
        wrapper, _ = self._wrapper(3)
        obs, act, rtg = inputs((), 5)
        td = TensorDict(observation=obs, action=act, return_to_go=rtg, batch_size=[5])
        out = wrapper(td)
        assert out.batch_size == () and td.batch_size == (5,)
        assert out["action"].shape == (ACT,) and out["return_to_go"].shape == ()

    def test_with_dt_actor_and_keys(self):
        torch.manual_seed(0)
        module = TensorDictModule(DTActor(OBS, ACT, tiny()), in_keys=["obs", "past_action", "rtg"], out_keys=["param"])
        actor = ProbabilisticActor(module, in_keys=["param"], out_keys=["action"], distribution_class=TanhDelta)
        wrapper = DecisionTransformerInferenceWrapper(actor, inference_context=2)
        wrapper.set_tensor_keys(observation="obs", action="past_action", return_to_go="rtg")
        assert wrapper.in_keys == ["obs", "past_action", "rtg"]
        assert set(wrapper.out_keys) >= {"action", "param", "obs", "rtg"}
        obs, act, rtg = inputs((3,), 4)
        out = wrapper(TensorDict(obs=obs, past_action=act, rtg=rtg, batch_size=[3]))
        assert out["action"].shape == (3, ACT) and bool((out["action"].abs() < 1).all())
        with pytest.raises(ValueError, match="not an output of the policy"):
            wrapper.set_tensor_keys(out_action="nope")
        with pytest.raises(TypeError, match=r"unknown name\(s\) \['reward'\]"):
            wrapper.set_tensor_keys(reward="r")

    def test_errors(self):
        with pytest.raises(ValueError, match="inference_context must be a positive int"):
            self._wrapper(0)
        wrapper, _ = self._wrapper(2)
        obs, act, rtg = inputs((2,), 4)
        with pytest.raises(ValueError, match=r"return_to_go \[\*B, T\]"):
            wrapper(TensorDict(observation=obs, action=act, return_to_go=rtg.unsqueeze(-1), batch_size=[2]))
