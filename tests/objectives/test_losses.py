"""The contrastive loss of the objectives against transformers' CLIP loss (`transformers_compat.clip_loss`, what the
models' `forward(return_loss=True)` returns) on a hand case: the same value on one process's batch, and local losses
over a gathered batch (rows labelled from their offset) that average to the whole batch's."""

import torch

from hf_longclip.modeling_common.transformers_compat import clip_loss
from hf_longclip.objectives import contrastive_loss

# Values exact in float32 and a power-of-two scale: every logit is exact whichever side computes it.
IMAGE = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.5, 0.5, 0.0]])
TEXT = torch.tensor([[1.0, 0.5, 0.0], [0.0, 1.0, 0.5], [0.5, 0.0, 1.0], [0.0, 0.5, 0.5]])
SCALE = torch.tensor(4.0)


def test_one_process_batch_is_transformers_clip_loss():
    expected = clip_loss(SCALE * TEXT @ IMAGE.T)
    assert expected.item() > 0.1  # not a degenerate case: the texts are not one-hot matches
    torch.testing.assert_close(contrastive_loss(IMAGE, TEXT, IMAGE, TEXT, SCALE), expected, rtol=0, atol=0)


def test_local_losses_over_a_gathered_batch_average_to_transformers_clip_loss():
    # two processes of two rows each: process r holds rows 2r and 2r + 1 and sees the whole (gathered) batch
    local = [contrastive_loss(IMAGE[2 * r:2 * r + 2], TEXT[2 * r:2 * r + 2], IMAGE, TEXT, SCALE, offset=2 * r)
             for r in range(2)]
    torch.testing.assert_close((local[0] + local[1]) / 2, clip_loss(SCALE * TEXT @ IMAGE.T), rtol=0, atol=1e-7)
    assert not torch.isclose(local[0], local[1])  # the halves differ: the offset labelling is what makes them add up
