"""ToTensorImage, Resize, CenterCrop, Crop, GrayScale: values against torch references, specs, any leading dims."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tdict import TensorDict

from rl_envs import CenterCrop, Compose, Crop, GrayScale, Resize, StepCounter, ToTensorImage, TransformedEnv


def _ones(batch_size):
    return lambda td: td.set("action", torch.ones(batch_size, dtype=torch.int64))


def _raw_pixels(counting_env, batch_size, steps=3, size=8):
    ref = counting_env(batch_size=batch_size, pixels=True, size=size).rollout(steps, _ones(batch_size))
    return ref["next", "pixels"].movedim(-1, -3).float() / 255  # [*b, T, 3, H, W]


@pytest.mark.parametrize("batch_size", [(), (3,)])
def test_to_tensor_image_env(counting_env, batch_size, specs_truthful):
    env = TransformedEnv(counting_env(batch_size=batch_size, pixels=True, size=8), ToTensorImage())
    spec = env.observation_spec["pixels"]
    assert spec.shape == torch.Size([*batch_size, 3, 8, 8]) and spec.dtype == torch.float32
    rollout = env.rollout(3, _ones(batch_size))
    torch.testing.assert_close(rollout["next", "pixels"], _raw_pixels(counting_env, batch_size))
    specs_truthful(env, rollout)


@pytest.mark.parametrize("batch_size", [(), (3,)])
def test_resize_crop_gray_env(counting_env, batch_size, specs_truthful):
    env = TransformedEnv(
        counting_env(batch_size=batch_size, pixels=True, size=8),
        Compose(ToTensorImage(), Resize(6, 4), GrayScale(), StepCounter(max_steps=10)),
    )
    assert env.observation_spec["pixels"].shape == torch.Size([*batch_size, 1, 6, 4])
    rollout = env.rollout(3, _ones(batch_size))
    raw = _raw_pixels(counting_env, batch_size)
    flat = raw.reshape(-1, 3, 8, 8)
    resized = F.interpolate(flat, size=(6, 4), mode="bilinear", align_corners=False, antialias=True)
    gray = (0.2989 * resized[:, 0] + 0.587 * resized[:, 1] + 0.114 * resized[:, 2]).unsqueeze(1)
    torch.testing.assert_close(rollout["next", "pixels"], gray.reshape(*raw.shape[:-3], 1, 6, 4))
    specs_truthful(env, rollout)
    env = TransformedEnv(
        counting_env(batch_size=batch_size, pixels=True, size=8),
        Compose(ToTensorImage(), CenterCrop(4, 6), Crop(2, 3, top=1, left=2)),
    )
    assert env.observation_spec["pixels"].shape == torch.Size([*batch_size, 3, 2, 3])
    rollout = env.rollout(3, _ones(batch_size))
    torch.testing.assert_close(rollout["next", "pixels"], raw[..., 2:6, 1:7][..., 1:3, 2:5])
    specs_truthful(env, rollout)


def test_image_ops_on_replay_sample_match_references():
    torch.manual_seed(0)
    img = torch.randint(0, 256, (2, 5, 10, 12, 3), dtype=torch.uint8)  # [batch, time, H, W, C]
    td = TensorDict(pixels=img, next=TensorDict(pixels=img.clone(), batch_size=[2, 5]), batch_size=[2, 5])
    keys = ["pixels", ("next", "pixels")]
    out = Compose(ToTensorImage(in_keys=keys), Resize(7, 9, in_keys=keys))(td.clone())
    chw = img.permute(0, 1, 4, 2, 3).float() / 255
    ref = F.interpolate(chw.reshape(10, 3, 10, 12), size=(7, 9), mode="bilinear", antialias=True).reshape(2, 5, 3, 7, 9)
    torch.testing.assert_close(out["pixels"], ref)
    torch.testing.assert_close(out["next", "pixels"], ref)
    near = Resize(5, 6, interpolation="nearest", in_keys=["x"])(TensorDict(x=chw, batch_size=[2, 5]))["x"]
    torch.testing.assert_close(
        near, F.interpolate(chw.reshape(10, 3, 10, 12), size=(5, 6), mode="nearest").reshape(2, 5, 3, 5, 6)
    )
    cropped = CenterCrop(4, in_keys=["x"])(TensorDict(x=chw, batch_size=[2, 5]))["x"]
    torch.testing.assert_close(cropped, chw[..., 3:7, 4:8])
    gray_u8 = GrayScale(in_keys=["x"])(TensorDict(x=img.permute(0, 1, 4, 2, 3), batch_size=[2, 5]))["x"]
    c = img.permute(0, 1, 4, 2, 3)
    assert gray_u8.dtype == torch.uint8
    assert torch.equal(
        gray_u8, (0.2989 * c[:, :, 0] + 0.587 * c[:, :, 1] + 0.114 * c[:, :, 2]).to(torch.uint8).unsqueeze(2)
    )
    resized_u8 = Resize(5, 6, in_keys=["x"])(TensorDict(x=c, batch_size=[2, 5]))["x"]
    assert resized_u8.dtype == torch.uint8 and resized_u8.shape == torch.Size([2, 5, 3, 5, 6])


def test_to_tensor_image_options_and_errors():
    x = torch.full((4, 5, 3), 51, dtype=torch.uint8)
    out = ToTensorImage(unsqueeze=True, dtype=torch.float64)(TensorDict(pixels=x))["pixels"]
    assert out.shape == torch.Size([1, 3, 4, 5]) and out.dtype == torch.float64 and out[0, 0, 0, 0].item() == 0.2
    out = ToTensorImage(from_int=False)(TensorDict(pixels=x))["pixels"]
    assert out.max().item() == 51.0
    with pytest.raises(ValueError, match="fit"):
        Crop(20, 2)(TensorDict(pixels=torch.zeros(3, 8, 8)))
    with pytest.raises(ValueError, match="interpolation"):
        Resize(4, interpolation="cubic")
    with pytest.raises(ValueError, match="3 channels"):
        GrayScale()(TensorDict(pixels=torch.zeros(1, 4, 4)))
