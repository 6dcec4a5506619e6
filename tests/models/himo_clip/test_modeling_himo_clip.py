"""HiMoCLIPModel and its task: MoLo loss (Eq. 2-4), CLIP parity, Long-CLIP position stretching and from_clip."""

import pytest
import torch
import torch.nn.functional as F

from helpers.builders import CAPTIONS, himo_task, molo_loss, random_images, tiny_clip, tiny_himo, tiny_processor
from hf_longclip import HiMoCLIPConfig, HiMoCLIPModel
from hf_longclip.modeling_common import stretch_position_embeddings


def _info_nce(anchors: torch.Tensor, candidates: torch.Tensor, scale: float) -> torch.Tensor:
    """L_info(a_i, b_i) = -log softmax_j(scale * cos(a_i, b_j))[i], written out row by row."""
    losses = []
    for i in range(anchors.shape[0]):
        sims = torch.stack([scale * F.cosine_similarity(anchors[i], c, dim=0) for c in candidates])
        losses.append(-(sims[i] - torch.logsumexp(sims, 0)))
    return torch.stack(losses)


def test_molo_equals_global_plus_lambda_component_loss_written_from_the_paper():
    torch.manual_seed(0)
    image = F.normalize(torch.randn(6, 8), dim=-1)
    text = F.normalize(torch.randn(6, 8), dim=-1)
    # Eq. 1 by numpy-style PCA: eigen-decomposition of the covariance, top m reaching 90% of the variance.
    mean = text.mean(0)
    centred = text - mean
    eigvals, eigvecs = torch.linalg.eigh(centred.T @ centred)
    eigvals, eigvecs = eigvals.flip(0), eigvecs.flip(1)
    m = int((torch.cumsum(eigvals, 0) / eigvals.sum() < 0.9).sum()) + 1
    basis = eigvecs[:, :m].T  # P, (m, d)
    components = (basis.T @ (basis @ centred.T)).T + mean
    scale = 7.0
    global_loss = (_info_nce(image, text, scale) + _info_nce(text, image, scale)).mean() / 2  # Eq. 2
    comp_loss = (_info_nce(image, components, scale) + _info_nce(components, image, scale)).mean() / 2  # Eq. 3
    for lam in (0.0, 0.5, 1.0, 2.0):
        expected = global_loss + lam * comp_loss  # Eq. 4
        actual = molo_loss(image, text, torch.tensor(scale), tau=0.9, weight=lam)
        torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)


def _pca_components(embeds: torch.Tensor, tau: float) -> torch.Tensor:
    """Eq. 1 by eigen-decomposition of the covariance: top m directions reaching tau of the variance."""
    mean = embeds.mean(0)
    centred = embeds - mean
    eigvals, eigvecs = torch.linalg.eigh(centred.T @ centred)
    eigvals, eigvecs = eigvals.flip(0), eigvecs.flip(1)
    m = int((torch.cumsum(eigvals, 0) / eigvals.sum() < tau).sum()) + 1
    basis = eigvecs[:, :m].T
    return (basis.T @ (basis @ centred.T)).T + mean


def test_table5_variants_written_from_the_paper():
    """Table 5: L_comp alone (no global term) and L_global + L_comp^{u,v} (HiDe on images too, components aligned
    with components)."""
    from hf_longclip.objectives.himo_clip import MoLoLoss

    torch.manual_seed(1)
    image = F.normalize(torch.randn(7, 8), dim=-1)
    text = F.normalize(torch.randn(7, 8), dim=-1)
    scale = 5.0
    u, v = _pca_components(text, 0.9), _pca_components(image, 0.9)
    global_loss = (_info_nce(image, text, scale) + _info_nce(text, image, scale)).mean() / 2
    comp_text = (_info_nce(image, u, scale) + _info_nce(u, image, scale)).mean() / 2
    comp_both = (_info_nce(v, u, scale) + _info_nce(u, v, scale)).mean() / 2
    alone = MoLoLoss(0.9, 1.0, use_global=False)(image, text, torch.tensor(scale))
    assert set(alone) == {"component_loss"}
    torch.testing.assert_close(alone["component_loss"], comp_text, atol=1e-5, rtol=1e-5)
    for scope in ("global", "local"):  # one process: the scopes agree
        both = MoLoLoss(0.9, 0.5, scope=scope, modalities="both")(image, text, torch.tensor(scale))
        torch.testing.assert_close(sum(both.values()), global_loss + 0.5 * comp_both, atol=1e-5, rtol=1e-5)
    assert not torch.isclose(comp_both, comp_text)


def test_kept_components_counts_hide_m():
    from hf_longclip.objectives.himo_clip import kept_components

    rows = torch.tensor([[3.0, 0.1, 0.0], [-3.0, -0.1, 0.0], [3.0, -0.1, 0.0], [-3.0, 0.1, 0.0]])
    assert kept_components(rows + 1, 0.9) == 1 and kept_components(rows, 0.9995) == 2


def test_component_loss_changes_the_loss():
    torch.manual_seed(0)
    image, text = F.normalize(torch.randn(2, 8, 8), dim=-1)
    assert not torch.isclose(molo_loss(image, text, torch.tensor(5.0), weight=1.0),
                             molo_loss(image, text, torch.tensor(5.0), weight=0.0))


def test_parity_with_transformers_clip_at_77_positions_and_lambda_zero(batch):
    """The model's forward (its loss is CLIP's local InfoNCE) and the task's MoLo at lambda 0 both equal CLIP's."""
    clip = tiny_clip()
    himo = HiMoCLIPModel.from_clip(clip, stretch_positions=False).eval()
    with torch.no_grad():
        expected = clip(**batch, return_loss=True)
        actual = himo(**batch, return_loss=True)
        terms = himo_task(himo, molo_lambda=0.0).compute_loss(himo, batch)
    for name in ("loss", "logits_per_image", "logits_per_text", "text_embeds", "image_embeds"):
        torch.testing.assert_close(getattr(actual, name), getattr(expected, name), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(actual.logit_scale, clip.logit_scale.exp().reshape(1))
    assert set(terms) == {"global_loss"}  # lambda 0: no component term
    torch.testing.assert_close(terms["global_loss"], expected.loss, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(himo.get_text_features(batch["input_ids"]).pooler_output,
                               clip.get_text_features(batch["input_ids"]).pooler_output)


@pytest.mark.parametrize("through", ["task", "forward"])
def test_gradients_match_transformers_clip_at_lambda_zero(batch, through):
    clip = tiny_clip()
    himo = HiMoCLIPModel.from_clip(clip, stretch_positions=False)
    clip(**batch, return_loss=True).loss.backward()
    if through == "task":  # what training back-propagates: MoLo at lambda 0
        sum(himo_task(himo, molo_lambda=0.0).compute_loss(himo, batch).values()).backward()
    else:
        himo(**batch, return_loss=True).loss.backward()
    for (name, p_clip), p_himo in zip(clip.named_parameters(), himo.parameters()):
        torch.testing.assert_close(p_himo.grad.reshape(p_clip.grad.shape), p_clip.grad, atol=1e-5, rtol=1e-4,
                                   msg=name)


def test_stretch_hand_computed():
    table = torch.arange(77, dtype=torch.float64)[:, None] ** 2  # row r holds r^2
    stretched = stretch_position_embeddings(table)[:, 0]
    assert stretched.shape == (4 * 77 - 3 * 20,) == (248,)
    torch.testing.assert_close(stretched[:20], table[:20, 0])  # kept
    assert stretched[20] == 400 and stretched[24] == 441  # every 4th row is an original one
    assert stretched[21] == 0.75 * 400 + 0.25 * 441  # interpolated towards the next
    assert stretched[23] == 0.25 * 400 + 0.75 * 441
    assert stretched[240] == 75**2 and stretched[244] == 76**2
    assert stretched[247] == 76**2 + 0.75 * (76**2 - 75**2)  # extrapolated past the last


def test_from_clip_keeps_short_texts_unchanged(tmp_path):
    """Texts within the first 20 positions see exactly CLIP's embeddings after stretching."""
    clip = tiny_clip()
    clip.save_pretrained(tmp_path / "clip")
    processor = tiny_processor(max_length=20)
    short = processor(text=["a cat.", "red dog"], padding="max_length")
    for source in (clip, str(tmp_path / "clip")):  # in memory and from a local directory
        himo = HiMoCLIPModel.from_clip(source).eval()
        assert himo.config.text_config.max_position_embeddings == 248
        assert not hasattr(himo.config, "hide_tau") and not hasattr(himo.config, "molo_lambda")
        assert (himo_task(himo).options()["hide_tau"], himo_task(himo).options()["molo_lambda"]) == (0.9, 1.0)
        with torch.no_grad():
            torch.testing.assert_close(himo.get_text_features(**short).pooler_output,
                                       clip.get_text_features(**short).pooler_output)
            torch.testing.assert_close(himo.get_image_features(pixel_values=torch.ones(1, 3, 32, 32)).pooler_output,
                                       clip.get_image_features(pixel_values=torch.ones(1, 3, 32, 32)).pooler_output)


def test_long_texts_run_at_248_tokens():
    himo = tiny_himo()
    long = tiny_processor()(text=[" ".join(CAPTIONS * 3)] * 2, images=random_images(2))
    assert long["input_ids"].shape == (2, 248)
    with torch.no_grad():
        out = himo(**long, return_loss=True)
        terms = himo_task(himo).compute_loss(himo, long)
    assert torch.isfinite(out.loss) and out.logits_per_image.shape == (2, 2)
    assert set(terms) == {"global_loss", "component_loss"} and torch.isfinite(sum(terms.values()))


def test_config_defaults_and_task_options_validation():
    config = HiMoCLIPConfig()
    assert config.text_config.max_position_embeddings == 248
    assert not any(hasattr(config, name) for name in ("hide_tau", "molo_lambda", "hide_scope", "label_smoothing",
                                                       "hide_modalities", "molo_global"))
    model = HiMoCLIPModel(HiMoCLIPConfig(text_config=dict(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2), vision_config=dict(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=32,
        patch_size=16), projection_dim=8))
    assert not hasattr(model, "objective")  # the model holds no objective: its task does
    assert himo_task(model).options() == dict(hide_tau=0.9, molo_lambda=1.0, hide_scope="global", label_smoothing=0.0,
                                              hide_modalities="text", molo_global=True, normalize_components=True,
                                              gather_grad=True)
    task = himo_task(model, hide_modalities="both", molo_global=False)
    assert (task.objective.modalities, task.objective.use_global) == ("both", False)
    assert (task.options()["hide_modalities"], task.options()["molo_global"]) == ("both", False)


@pytest.mark.parametrize("bad", [dict(hide_tau=0.0), dict(hide_tau=1.5), dict(molo_lambda=-1.0),
                                 dict(hide_scope="batch"), dict(hide_modalities="image"),
                                 dict(molo_global=False, molo_lambda=0.0), dict(label_smoothing=1.0)],
                         ids=lambda bad: "-".join(f"{k}={v}" for k, v in bad.items()))
def test_task_rejects_bad_options_naming_them(bad):
    """Each bad option is a ValueError that names the task's argument (as the configuration's check did)."""
    with pytest.raises(ValueError, match=next(iter(bad))):
        himo_task(tiny_himo(), **bad)


def test_bad_inputs_raise_clear_errors(batch):
    image = F.normalize(torch.randn(4, 8), dim=-1)
    text = F.normalize(torch.randn(4, 8), dim=-1)
    with pytest.raises(ValueError, match="non-empty"):
        molo_loss(image[:0], text[:0], torch.tensor(1.0))
    with pytest.raises(ValueError, match="pair up"):
        molo_loss(image, text[:3], torch.tensor(1.0))
    with pytest.raises(ValueError, match="NaN"):
        molo_loss(image, torch.full_like(text, float("nan")), torch.tensor(1.0))
    himo = tiny_himo()
    no_eos = batch["input_ids"].clone()
    no_eos[no_eos == 1] = 5
    with pytest.raises(ValueError, match="end-of-text"):
        himo.get_text_features(no_eos)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        himo.get_text_features(torch.ones(1, 300, dtype=torch.long))
