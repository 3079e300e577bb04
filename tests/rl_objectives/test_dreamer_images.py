"""DreamerV3ImageEncoder / DreamerV3ImageDecoder: shapes, input scaling, the channel RMS norm
against its formula, the decoder's offset, errors, and an autoencoder that learns."""

from __future__ import annotations

import pytest
import torch
from rl_objectives.modules.dreamer_images import ChannelRMSNorm, DreamerV3ImageDecoder, DreamerV3ImageEncoder


def test_channel_rms_norm_formula():
    norm = ChannelRMSNorm(3, eps=1e-3)
    x = torch.randn(2, 3, 4, 5)
    expected = x / torch.sqrt(x.square().mean(-3, keepdim=True) + 1e-3)
    torch.testing.assert_close(norm(x), expected)


@pytest.mark.parametrize("hw", [(16, 16), (15, 9)])
def test_encoder_shapes_and_input_scaling(hw):
    torch.manual_seed(0)
    encoder = DreamerV3ImageEncoder(in_channels=3, depth=4, mults=(1, 2), kernel_size=3)
    image = torch.randint(0, 256, (2, 5, 3, *hw), dtype=torch.uint8)
    out = encoder(image)
    assert out.shape == (2, 5, encoder.output_features((3, *hw)))
    h, w = (hw[0] + 3) // 4, (hw[1] + 3) // 4  # two stride-2 stages, rounding up
    assert encoder.output_features((3, *hw)) == 8 * h * w
    torch.testing.assert_close(encoder(image.float() / 255.0), out)  # uint8 means [0, 255]
    # the layers see the image scaled to [0, 1] and shifted to [-0.5, 0.5]
    expected = encoder.layers(image.reshape(-1, 3, *hw).float() / 255.0 - 0.5).reshape(2, 5, -1)
    torch.testing.assert_close(out, expected)


def test_decoder_shapes_offset_and_errors():
    decoder = DreamerV3ImageDecoder(10, image_shape=(1, 8, 12), depth=4, mults=(1, 2), num_blocks=2)
    assert decoder(torch.randn(3, 2, 6), torch.randn(3, 2, 4)).shape == (3, 2, 1, 8, 12)
    with torch.no_grad():
        decoder.layers[-1].weight.zero_()
        decoder.layers[-1].bias.zero_()
    torch.testing.assert_close(decoder(torch.randn(4, 10)), torch.full((4, 1, 8, 12), 0.5))
    dense = DreamerV3ImageDecoder(10, image_shape=(1, 8, 8), depth=4, mults=(1,), num_blocks=1)
    assert isinstance(dense.projection, torch.nn.Linear)
    with pytest.raises(ValueError, match="divisible by 2 \\*\\* len\\(mults\\) = 4"):
        DreamerV3ImageDecoder(10, image_shape=(3, 10, 8), mults=(1, 2))
    with pytest.raises(ValueError, match="odd"):
        DreamerV3ImageEncoder(kernel_size=4)
    with pytest.raises(ValueError, match="at least one stage"):
        DreamerV3ImageEncoder(mults=())


def test_autoencoder_learns_a_few_images():
    torch.manual_seed(1)
    encoder = DreamerV3ImageEncoder(in_channels=1, depth=4, mults=(1, 2), kernel_size=3)
    decoder = DreamerV3ImageDecoder(
        encoder.output_features((1, 8, 8)), image_shape=(1, 8, 8), depth=4, mults=(1, 2), kernel_size=3, num_blocks=1
    )
    images = (torch.rand(6, 1, 8, 8) > 0.5).float()
    optim = torch.optim.Adam([*encoder.parameters(), *decoder.parameters()], lr=1e-2)
    losses = []
    for _ in range(150):
        loss = (decoder(encoder(images)) - images).square().mean()
        optim.zero_grad()
        loss.backward()
        optim.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.3 * losses[0]
