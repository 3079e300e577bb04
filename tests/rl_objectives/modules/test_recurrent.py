"""LSTMModule / GRUModule: step mode against nn.LSTM/nn.GRU stepped by hand, sequence mode (with resets
inside sequences) against T step-mode calls, gradients, wrapping, modes, specs, errors, compile, envs."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_objectives.modules.recurrent import (
    GRUModule,
    LSTMModule,
    recurrent_mode,
    set_recurrent_mode,
)
from tdict import TensorDict
from tdict.specs import Composite

BATCHES = [(), (3,), (2, 3)]
F_IN, HID = 3, 5
ATOL = 1e-5


def _make(kind, python_based=False, num_layers=1, proj_size=0, in_key="obs", **kw):
    torch.manual_seed(0)
    if kind == "lstm":
        return LSTMModule(
            F_IN,
            HID,
            num_layers=num_layers,
            proj_size=proj_size,
            python_based=python_based,
            in_key=in_key,
            out_key="out",
            **kw,
        )
    assert proj_size == 0
    return GRUModule(F_IN, HID, num_layers=num_layers, python_based=python_based, in_key=in_key, out_key="out", **kw)


def _state_keys(module):
    return module.in_keys[1:-1]


def _random_states(module, shape):
    rnn = module._rnn
    return {key: torch.randn(*shape, rnn.num_layers, size) for key, size in zip(_state_keys(module), module._sizes)}


def _reference(module, x, states, is_init):
    """The wrapped nn.LSTM/nn.GRU called one step at a time, states zeroed where is_init: a plain loop.

    x [N, T, F], states {key: [N, L, H]} (the state entering step 0), is_init [N, T].
    Returns outputs [N, T, H] and the next states after every step {key: [N, T, L, H]}.
    """
    rnn = module._rnn
    hx = [states[k].transpose(0, 1) for k in _state_keys(module)]  # nn layout [L, N, H]
    ys, nexts = [], []
    for t in range(x.shape[1]):
        keep = (~is_init[:, t]).float()[None, :, None]
        hx = [h * keep for h in hx]
        y, new = rnn(x[:, t : t + 1], tuple(hx) if len(hx) == 2 else hx[0])
        hx = list(new) if isinstance(new, tuple) else [new]
        ys.append(y[:, 0])
        nexts.append([h.transpose(0, 1) for h in hx])
    out = torch.stack(ys, 1)
    return out, {k: torch.stack([n[i] for n in nexts], 1) for i, k in enumerate(_state_keys(module))}


def _sequence_td(module, batch, T, is_init, seed=1):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(*batch, T, F_IN, generator=g)
    td = TensorDict(obs=obs, is_init=is_init.reshape(*batch, T), batch_size=[*batch, T])
    for key, value in _random_states(module, (*batch, T)).items():
        td.set(key, value)  # only step 0 may be read: the later ones are noise a sequence run must ignore
    return td


# ---------------------------------------------------------------------------- step mode
class TestStepMode:
    @pytest.mark.parametrize("kind", ["lstm", "gru"])
    @pytest.mark.parametrize("python_based", [False, True])
    @pytest.mark.parametrize("batch", BATCHES)
    def test_step_matches_rnn_stepped_by_hand(self, kind, python_based, batch):
        module = _make(kind, python_based, num_layers=2)
        states = _random_states(module, batch)
        obs = torch.randn(*batch, F_IN)
        is_init = torch.zeros(batch, dtype=torch.bool)
        if batch:
            is_init.view(-1)[0] = True
        td = TensorDict(obs=obs, is_init=is_init, batch_size=batch, **states)
        with torch.no_grad():
            out = module(td)
            n = int(torch.Size(batch).numel())
            ref_y, ref_next = _reference(
                module,
                obs.reshape(n, 1, F_IN),
                {k: v.reshape(n, *v.shape[-2:]) for k, v in states.items()},
                is_init.reshape(n, 1),
            )
        assert out["out"].shape == (*batch, HID)
        torch.testing.assert_close(out["out"], ref_y[:, 0].reshape(*batch, HID), atol=ATOL, rtol=0)
        for key in _state_keys(module):
            assert out["next", key].shape == (*batch, 2, HID)
            torch.testing.assert_close(out["next", key], ref_next[key][:, 0].reshape(*batch, 2, HID), atol=ATOL, rtol=0)
            assert torch.equal(out[key], states[key])  # the input state is left alone

    @pytest.mark.parametrize("kind", ["lstm", "gru"])
    def test_reset_zeroes_the_state(self, kind):
        module = _make(kind)
        obs = torch.randn(4, F_IN)
        with torch.no_grad():
            fresh = module(
                TensorDict(
                    obs=obs, is_init=torch.ones(4, dtype=torch.bool), batch_size=[4], **_random_states(module, (4,))
                )
            )
            zeros = module(
                TensorDict(
                    obs=obs,
                    is_init=torch.zeros(4, dtype=torch.bool),
                    batch_size=[4],
                    **{k: torch.zeros_like(v) for k, v in _random_states(module, (4,)).items()},
                )
            )
            missing = module(TensorDict(obs=obs, is_init=torch.zeros(4, dtype=torch.bool), batch_size=[4]))
        torch.testing.assert_close(fresh["out"], zeros["out"], atol=0, rtol=0)
        torch.testing.assert_close(missing["out"], zeros["out"], atol=0, rtol=0)  # no state: starts at zero

    def test_trailing_one_is_init_accepted(self):
        module = _make("lstm")
        states = _random_states(module, (4,))
        init = torch.tensor([True, False, True, False])
        a = module(TensorDict(obs=torch.ones(4, F_IN), is_init=init, batch_size=[4], **states))
        b = module(TensorDict(obs=torch.ones(4, F_IN), is_init=init[:, None], batch_size=[4], **states))
        torch.testing.assert_close(a["out"], b["out"], atol=0, rtol=0)

    @pytest.mark.filterwarnings("ignore:LSTM with projections")
    def test_proj_size(self):
        module = _make("lstm", num_layers=2, proj_size=2)
        spec = module.recurrent_state_spec()
        assert spec["recurrent_state_h"].shape == (2, 2) and spec["recurrent_state_c"].shape == (2, HID)
        states = _random_states(module, (3,))
        assert states["recurrent_state_h"].shape == (3, 2, 2)
        td = TensorDict(obs=torch.randn(3, F_IN), is_init=torch.zeros(3, dtype=torch.bool), batch_size=[3], **states)
        with torch.no_grad():
            out = module(td.clone())
            loop = _make("lstm", python_based=True, num_layers=2, proj_size=2)(td.clone())
            ref_y, _ = _reference(module, td["obs"][:, None], states, td["is_init"][:, None])
        assert out["out"].shape == (3, 2)
        torch.testing.assert_close(out["out"], ref_y[:, 0], atol=ATOL, rtol=0)
        torch.testing.assert_close(loop["out"], ref_y[:, 0], atol=ATOL, rtol=0)

    def test_tensor_call(self):
        module = _make("gru")
        obs = torch.randn(2, F_IN)
        y, h = module(obs=obs, is_init=torch.ones(2, dtype=torch.bool))
        ref = module(TensorDict(obs=obs, is_init=torch.ones(2, dtype=torch.bool), batch_size=[2]))
        torch.testing.assert_close(y, ref["out"])
        assert h.shape == (2, 1, HID)


# ---------------------------------------------------------------------------- sequence mode
def _check_sequence(kind, python_based, batch, init_pattern, num_layers=1):
    module = _make(kind, python_based, num_layers=num_layers)
    T = init_pattern.shape[-1]
    td = _sequence_td(module, batch, T, init_pattern)
    first = {k: td[k][..., 0, :, :] for k in _state_keys(module)}
    with torch.no_grad():
        # T step-mode calls, carrying ("next", state) from step to step
        step_outs, step_next = [], []
        cur = dict(first)
        for t in range(T):
            step = TensorDict(obs=td["obs"][..., t, :], is_init=td["is_init"][..., t], batch_size=batch, **cur)
            step = module(step)
            step_outs.append(step["out"])
            cur = {k: step["next", k] for k in _state_keys(module)}
            step_next.append(cur)
        with set_recurrent_mode(True):
            seq = module(td.clone())
    assert seq["out"].shape == (*batch, T, HID)
    torch.testing.assert_close(seq["out"], torch.stack(step_outs, len(batch)), atol=ATOL, rtol=0)
    # ("next", state): exact at the last step of each segment, zeros elsewhere
    ends = torch.cat([init_pattern[..., 1:], torch.ones_like(init_pattern[..., :1])], -1).reshape(*batch, T)
    for k in _state_keys(module):
        expected = torch.stack([s[k] for s in step_next], len(batch)) * ends[..., None, None]
        assert seq["next", k].shape == (*batch, T, num_layers, HID)
        torch.testing.assert_close(seq["next", k], expected, atol=ATOL, rtol=0)
        assert torch.equal(seq[k], td[k])


class TestSequenceMode:
    @pytest.mark.parametrize("kind", ["lstm", "gru"])
    @pytest.mark.parametrize("python_based", [False, True])
    @pytest.mark.parametrize("batch", BATCHES)
    def test_equals_step_mode_with_resets(self, kind, python_based, batch):
        g = torch.Generator().manual_seed(7)
        init = torch.rand(*batch, 7, generator=g) < 0.3
        init.view(-1, 7)[0, 3] = True  # at least one reset inside a sequence
        _check_sequence(kind, python_based, batch, init, num_layers=2)

    @pytest.mark.parametrize("kind", ["lstm", "gru"])
    @pytest.mark.parametrize("python_based", [False, True])
    def test_no_reset_inside(self, kind, python_based):
        init = torch.zeros(3, 6, dtype=torch.bool)
        init[1, 0] = True
        _check_sequence(kind, python_based, (3,), init)

    @settings(max_examples=25)
    @given(bits=st.lists(st.booleans(), min_size=12, max_size=12), kind=st.sampled_from(["lstm", "gru"]))
    def test_random_reset_patterns(self, bits, kind):
        init = torch.tensor(bits).reshape(2, 6)
        _check_sequence(kind, False, (2,), init)

    @pytest.mark.parametrize("kind", ["lstm", "gru"])
    def test_sequence_of_one_step_equals_step_mode(self, kind):
        module = _make(kind)
        states = _random_states(module, (4,))
        obs, init = torch.randn(4, F_IN), torch.tensor([True, False, False, True])
        step = module(TensorDict(obs=obs, is_init=init, batch_size=[4], **states))
        seq = module.set_recurrent_mode(True)(
            TensorDict(
                obs=obs[:, None], is_init=init[:, None], batch_size=[4, 1], **{k: v[:, None] for k, v in states.items()}
            )
        )
        torch.testing.assert_close(seq["out"][:, 0], step["out"], atol=ATOL, rtol=0)
        for k in _state_keys(module):
            torch.testing.assert_close(seq["next", k][:, 0], step["next", k], atol=ATOL, rtol=0)

    @pytest.mark.parametrize("kind", ["lstm", "gru"])
    def test_gradients_match_across_backends(self, kind):
        """Sequence mode (fused, segmented), the python loop and T step calls give the same gradients."""
        fused, loop = _make(kind, num_layers=2), _make(kind, python_based=True, num_layers=2)
        init = torch.tensor([[True, False, True, False, False], [False, False, False, True, False]])
        td = _sequence_td(fused, (2,), 5, init)
        grads = []
        for module, recurrent in ((fused, True), (loop, True), (fused, False)):
            module.zero_grad()
            obs = td["obs"].clone().requires_grad_(True)
            if recurrent:
                with set_recurrent_mode(True):
                    out = module(td.clone().set("obs", obs))["out"]
            else:
                cur = {k: td[k][:, 0] for k in _state_keys(module)}
                outs = []
                for t in range(5):
                    s = module(TensorDict(obs=obs[:, t], is_init=init[:, t], batch_size=[2], **cur))
                    outs.append(s["out"])
                    cur = {k: s["next", k] for k in _state_keys(module)}
                out = torch.stack(outs, 1)
            (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
            grads.append([obs.grad] + [p.grad.clone() for p in module.parameters()])
        for other in grads[1:]:
            for a, b in zip(grads[0], other):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
        assert grads[0][0].abs().sum() > 0

    def test_time_must_be_last_named_dim(self):
        module = _make("gru")
        td = TensorDict(
            obs=torch.randn(4, 2, F_IN),
            is_init=torch.zeros(4, 2, dtype=torch.bool),
            batch_size=[4, 2],
            names=["time", "env"],
        )
        with set_recurrent_mode(True), pytest.raises(ValueError, match="last batch dim"):
            module(td)
        assert "out" not in td


# ---------------------------------------------------------------------------- wrapping, modes, specs
class TestWrappingAndModes:
    def test_wrap_existing_lstm(self):
        torch.manual_seed(3)
        lstm = torch.nn.LSTM(F_IN, HID, num_layers=2, batch_first=True)
        module = LSTMModule(lstm=lstm, in_keys=["x", "h", "c"], out_keys=["y", ("next", "h"), ("next", "c")])
        assert module.lstm is lstm
        assert module.in_keys == ["x", "h", "c", "is_init"]
        x = torch.randn(2, 4, F_IN)
        with torch.no_grad(), set_recurrent_mode(True):
            out = module(TensorDict(x=x, is_init=torch.zeros(2, 4, dtype=torch.bool), batch_size=[2, 4]))
            y, (h, c) = lstm(x)
        torch.testing.assert_close(out["y"], y, atol=ATOL, rtol=0)
        torch.testing.assert_close(out["next", "h"][:, -1], h.transpose(0, 1), atol=ATOL, rtol=0)
        torch.testing.assert_close(out["next", "c"][:, -1], c.transpose(0, 1), atol=ATOL, rtol=0)

    def test_wrap_existing_gru_and_custom_reset_key(self):
        gru = torch.nn.GRU(F_IN, HID, batch_first=True)
        module = GRUModule(gru=gru, in_keys=["x", "s", ("agents", "first")], out_keys=["y", ("next", "s")])
        assert module.gru is gru and module.in_keys[-1] == ("agents", "first")
        td = TensorDict(
            x=torch.randn(3, F_IN),
            agents=TensorDict(first=torch.ones(3, dtype=torch.bool), batch_size=[3]),
            batch_size=[3],
        )
        y, _ = gru(td["x"][:, None])
        torch.testing.assert_close(module(td)["y"], y[:, 0], atol=ATOL, rtol=0)

    def test_default_keys(self):
        lstm, gru = _make("lstm"), _make("gru")
        assert lstm.in_keys == ["obs", "recurrent_state_h", "recurrent_state_c", "is_init"]
        assert lstm.out_keys == ["out", ("next", "recurrent_state_h"), ("next", "recurrent_state_c")]
        assert gru.in_keys == ["obs", "recurrent_state", "is_init"]
        assert gru.out_keys == ["out", ("next", "recurrent_state")]

    def test_context_manager_and_defaults(self):
        module = _make("gru")
        seq_default = _make("gru", default_recurrent_mode=True)
        assert recurrent_mode() is None and not module.recurrent_mode and seq_default.recurrent_mode
        with set_recurrent_mode(True):
            assert module.recurrent_mode and recurrent_mode() is True
            with set_recurrent_mode("sequential"):
                assert not module.recurrent_mode and not seq_default.recurrent_mode
            with set_recurrent_mode(None):
                assert not module.recurrent_mode and seq_default.recurrent_mode
            assert module.recurrent_mode
        with pytest.raises(RuntimeError, match="boom"), set_recurrent_mode("recurrent"):
            raise RuntimeError("boom")
        assert recurrent_mode() is None

        @set_recurrent_mode(True)
        def inside():
            return module.recurrent_mode

        assert inside() and not module.recurrent_mode
        with pytest.raises(ValueError, match="mode must be"):
            set_recurrent_mode("forward")

    def test_set_recurrent_mode_method_returns_copy_sharing_weights(self):
        module = _make("lstm", num_layers=2).eval()
        seq = module.set_recurrent_mode(True)
        assert seq is not module and seq.recurrent_mode and not module.recurrent_mode
        assert seq.lstm is module.lstm and not seq.training
        assert module.set_recurrent_mode(False) is module
        with pytest.raises(RuntimeError, match="cannot be set in place"):
            module.recurrent_mode = True

    def test_recurrent_state_spec(self):
        module = _make("lstm", num_layers=2)
        spec = module.recurrent_state_spec((4,))
        assert isinstance(spec, Composite) and spec.shape == (4,)
        assert sorted(spec.keys()) == ["recurrent_state_c", "recurrent_state_h"]
        zero = spec.zero()
        assert zero["recurrent_state_h"].shape == (4, 2, HID) and zero["recurrent_state_h"].abs().sum() == 0
        assert zero["recurrent_state_h"].dtype == module.lstm.weight_ih_l0.dtype
        gru_spec = _make("gru").recurrent_state_spec()
        assert gru_spec.keys() == ["recurrent_state"] and gru_spec["recurrent_state"].shape == (1, HID)
        with pytest.raises(NotImplementedError, match="TensorDictPrimer"):
            module.make_tensordict_primer()


class TestFunctionalParams:
    @pytest.mark.parametrize("kind", ["lstm", "gru"])
    @pytest.mark.parametrize("python_based", [False, True])
    def test_to_module_and_deepcopy(self, kind, python_based):
        import copy

        module = _make(kind, python_based, num_layers=2).eval()
        td = TensorDict(obs=torch.randn(3, F_IN), is_init=torch.ones(3, dtype=torch.bool), batch_size=[3])
        base = module(td.clone())["out"]
        for target in (module, copy.deepcopy(module)):
            params = TensorDict.from_module(target).apply(lambda t: torch.full_like(t, 0.1))
            with params.to_module(target):  # plain tensors swapped in: both backends must read them
                swapped = target(td.clone())["out"]
            ref = _make(kind, python_based, num_layers=2).eval()
            with torch.no_grad():
                for p in ref.parameters():
                    p.fill_(0.1)
            torch.testing.assert_close(swapped, ref(td.clone())["out"], atol=ATOL, rtol=0)
            torch.testing.assert_close(target(td.clone())["out"], base, atol=0, rtol=0)  # restored

    def test_vmap_python_based(self):
        module = _make("gru", python_based=True)
        x, init = torch.randn(4, 2, F_IN), torch.tensor([True, False]).expand(4, 2)
        out = torch.vmap(lambda a, b: module(TensorDict(obs=a, is_init=b, batch_size=[2]))["out"])(x, init)
        ref = module(TensorDict(obs=x, is_init=init, batch_size=[4, 2]))["out"]
        torch.testing.assert_close(out, ref, atol=ATOL, rtol=0)


# ---------------------------------------------------------------------------- errors
class TestErrors:
    def test_construction(self):
        with pytest.raises(NotImplementedError, match="bidirectional"):
            LSTMModule(F_IN, HID, bidirectional=True, in_key="x", out_key="y")
        with pytest.raises(NotImplementedError, match="bidirectional"):
            GRUModule(gru=torch.nn.GRU(F_IN, HID, batch_first=True, bidirectional=True), in_key="x", out_key="y")
        with pytest.raises(ValueError, match="batch_first"):
            LSTMModule(lstm=torch.nn.LSTM(F_IN, HID), in_key="x", out_key="y")
        with pytest.raises(ValueError, match="batch_first"):
            GRUModule(F_IN, HID, batch_first=False, in_key="x", out_key="y")
        with pytest.raises(ValueError, match="either an nn.LSTM instance or its sizes"):
            LSTMModule(F_IN, HID, lstm=torch.nn.LSTM(F_IN, HID, batch_first=True), in_key="x", out_key="y")
        with pytest.raises(TypeError, match="nn.LSTM"):
            LSTMModule(lstm=torch.nn.GRU(F_IN, HID, batch_first=True), in_key="x", out_key="y")
        with pytest.raises(ValueError, match="positive ints"):
            LSTMModule(in_key="x", out_key="y")
        with pytest.raises(ValueError, match="exactly one of in_key and in_keys"):
            LSTMModule(F_IN, HID, in_key="x", in_keys=["x", "h", "c"], out_key="y")
        with pytest.raises(ValueError, match="exactly one of out_key and out_keys"):
            GRUModule(F_IN, HID, in_key="x")
        with pytest.raises(ValueError, match="in_keys must hold"):
            LSTMModule(F_IN, HID, in_keys=["x", "h"], out_key="y")
        with pytest.raises(ValueError, match="out_keys must hold"):
            GRUModule(F_IN, HID, in_key="x", out_keys=["y"])

    def _td(self, module, batch=(3,), **over):
        td = TensorDict(
            obs=torch.randn(*batch, F_IN),
            is_init=torch.zeros(batch, dtype=torch.bool),
            batch_size=batch,
            **_random_states(module, batch),
        )
        for k, v in over.items():
            td.set(k, v)
        return td

    @pytest.mark.parametrize("kind", ["lstm", "gru"])
    def test_call_errors_write_nothing(self, kind):
        module = _make(kind)
        cases = [
            (self._td(module, obs=torch.randn(3, F_IN + 1)), ValueError, "input_size"),
            (self._td(module, is_init=torch.zeros(3, 2, dtype=torch.bool)), ValueError, "batch shape"),
            (self._td(module, **{_state_keys(module)[0]: torch.randn(3, 2, HID)}), ValueError, "num_layers"),
            (self._td(module).exclude("is_init"), KeyError, "InitTracker"),
            (self._td(module).exclude("obs"), KeyError, "'obs'"),
        ]
        if kind == "lstm":
            cases.append((self._td(module).exclude("recurrent_state_c"), KeyError, "some hidden states"))
        for td, err, match in cases:
            keys = set(td.keys(True))
            with pytest.raises(err, match=match):
                module(td)
            assert set(td.keys(True)) == keys
        with set_recurrent_mode(True), pytest.raises(ValueError, match="time dim"):
            module(self._td(module, batch=()))


# ---------------------------------------------------------------------------- compile
@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("python_based", [False, True])
def test_compile_step_mode_fullgraph(kind, python_based):
    torch._dynamo.reset()
    module = _make(kind, python_based, num_layers=2)
    td = TensorDict(
        obs=torch.randn(4, F_IN),
        is_init=torch.tensor([True, False, True, False]),
        batch_size=[4],
        **_random_states(module, (4,)),
    )
    compiled = torch.compile(module, fullgraph=True, backend="eager")
    with torch.no_grad():
        eager = module(td.clone())
        out = compiled(td.clone())
    torch.testing.assert_close(out["out"], eager["out"], atol=ATOL, rtol=0)
    for k in _state_keys(module):
        torch.testing.assert_close(out["next", k], eager["next", k], atol=ATOL, rtol=0)


def test_compile_sequence_mode_python_based_fullgraph():
    torch._dynamo.reset()
    module = _make("lstm", python_based=True, default_recurrent_mode=True)
    init = torch.tensor([[True, False, True, False], [False, False, False, True]])
    td = _sequence_td(module, (2,), 4, init)
    compiled = torch.compile(module, fullgraph=True, backend="eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(td.clone())["out"], module(td.clone())["out"], atol=ATOL, rtol=0)


# ---------------------------------------------------------------------------- envs
def _pendulum(module, batch=(2,)):
    rl_envs = pytest.importorskip("rl_envs")
    from rl_envs.transforms import InitTracker, TensorDictPrimer

    base = rl_envs.PendulumEnv(batch_size=list(batch), seed=0)
    transforms = rl_envs.Compose(
        rl_envs.StepCounter(max_steps=4), InitTracker(), TensorDictPrimer(module.recurrent_state_spec(base.batch_size))
    )
    return rl_envs.TransformedEnv(base, transforms)


def _policy(module):
    from tdict.nn import TensorDictModule, TensorDictSequential

    torch.manual_seed(5)
    return TensorDictSequential(module, TensorDictModule(torch.nn.Linear(HID, 1), in_keys=["out"], out_keys=["action"]))


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_env_loop_with_primer_then_sequence_replay(kind):
    """Step mode in a Pendulum loop (primer + InitTracker, truncation every 4 steps); sequence mode over
    the collected rollout reproduces the features computed online, resets included."""
    from rl_envs import step_mdp

    module = _make(kind, num_layers=2, in_key="observation")
    env, policy = _pendulum(module), _policy(module)
    steps = []
    with torch.no_grad():
        td = env.reset()
        for _ in range(10):
            td = policy(td)
            written = td.get("next").clone()  # the policy's next state, which env.step must keep (as TorchRL)
            td = env.step(td)
            td.get("next").update(written)
            steps.append(td.clone())
            td = step_mdp(td)
            reset = td["done"]
            if bool(reset.any()):
                td = env.reset(td.set("_reset", reset))
        rollout = torch.stack(steps, 1)
        assert rollout["is_init"][:, [0, 4, 8]].all() and rollout["is_init"].sum() == 6
        state = _state_keys(module)[0]
        assert rollout[state][:, 1].abs().sum() > 0  # the state is carried between steps
        with set_recurrent_mode(True):
            replay = module(rollout.clone())
    torch.testing.assert_close(replay["out"], rollout["out"], atol=ATOL, rtol=0)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_env_rollout_carries_recurrent_state(kind):
    """env.rollout keeps the next state the policy wrote (the env merges the policy's "next" entries,
    as TorchRL does): each step reads the previous step's next state, zeros after a reset, and
    replaying the rollout in sequence mode gives the online features."""
    module = _make(kind, in_key="observation")
    env = _pendulum(module)
    with torch.no_grad():
        rollout = env.rollout(10, _policy(module), break_when_any_done=False)
    names = ["recurrent_state_h", "recurrent_state_c"] if kind == "lstm" else ["recurrent_state"]
    is_init = rollout["is_init"]
    assert is_init[:, 0].all() and is_init[:, 4].all() and not is_init[:, 1].any()  # StepCounter(4) truncates
    for name in names:
        state, next_state = rollout[name], rollout["next", name]
        assert state[:, 1].abs().sum() > 0
        carried = ~is_init[:, 1:]
        torch.testing.assert_close(state[:, 1:][carried], next_state[:, :-1][carried])
    with torch.no_grad(), set_recurrent_mode(True):
        replay = module(rollout.exclude("out", *(("next", n) for n in names)))
    torch.testing.assert_close(replay["out"], rollout["out"])


def test_torchrl_recurrent_kernel_options_need_the_triton_backend():
    from rl_objectives.modules import GRUModule, LSTMModule

    for cls in (LSTMModule, GRUModule):
        # TorchRL 0.14's defaults describe what the module computes: accepted
        cls(
            input_size=3,
            hidden_size=4,
            in_key="x",
            out_key="y",
            recurrent_backend="pad",
            recurrent_compute_dtype=torch.float32,
            recurrent_matmul_precision="auto",
            recurrent_recompute="none",
        )
        # with the default pad backend (cuDNN), the kernel options stay refused; recurrent_backend="triton"
        # (rl-kernels) is tested in tests/rl_objectives/test_recurrent_kernels.py
        for arg, value in (
            ("recurrent_compute_dtype", torch.bfloat16),
            ("recurrent_matmul_precision", "tf32"),
            ("recurrent_recompute", "full"),
        ):
            with pytest.raises(NotImplementedError, match=f"{arg}="):
                cls(input_size=3, hidden_size=4, in_key="x", out_key="y", **{arg: value})
