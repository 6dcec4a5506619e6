"""`FCASTTask(nonpaper_detach_stage1_from_part_loss=True)`, the diagnostic (not the paper's) that keeps L_part's
gradient out of the hierarchical text encoder's stage 1: L_part's gradient on stage 1 is zero, on the text projection,
the pooling and CAST it is the paper's; L_whole's gradient and both terms' values do not change; the card says so.
And the readings docs/models/fcast.md gives of the two terms (`hf_longclip.recipes.fcast.diagnostics`)."""

import pytest
import torch

from helpers.fcast import CAPTIONS, fcast_task, tiny_fcast, tiny_processor, training_inputs

STAGE1 = "text_model."
PART_LEVEL = ("text_projection.", "grounding_pool.", "vision_model.", "part_logit_")


def term_gradients(model, task, inputs) -> tuple[dict, dict]:
    """({term: value}, {term: {parameter name: gradient, zeros where it has none}}) of one step of `task`."""
    terms = task.compute_loss(model, inputs)
    names, params = zip(*model.named_parameters())
    gradients = {}
    for term, value in terms.items():
        grads = torch.autograd.grad(value, params, retain_graph=True, allow_unused=True)
        gradients[term] = {name: torch.zeros_like(p) if g is None else g for name, p, g in zip(names, params, grads)}
    return {term: value.detach() for term, value in terms.items()}, gradients


def test_detached_stage1_gets_no_part_gradient_and_the_rest_is_the_papers():
    model, inputs = tiny_fcast().eval(), training_inputs()
    detached_terms, detached = term_gradients(
        model, fcast_task(model, nonpaper_detach_stage1_from_part_loss=True), inputs)
    # after the switched task: the paper's task on the same model (the switch leaves no hook behind)
    paper_terms, paper = term_gradients(model, fcast_task(model), inputs)
    assert detached_terms.keys() == paper_terms.keys() == {"part_loss", "whole_loss"}
    for term, value in paper_terms.items():
        torch.testing.assert_close(detached_terms[term], value, rtol=0, atol=0)
    stage1 = [name for name in paper["part_loss"] if name.startswith(STAGE1)]
    assert stage1 and all(not detached["part_loss"][name].any() for name in stage1)
    assert sum(paper["part_loss"][name].norm() for name in stage1) > 0  # the paper's L_part does reach stage 1
    for prefix in PART_LEVEL:  # each reached by L_part (CAST: its stages up to the grounding one)
        assert sum(grad.norm() for name, grad in paper["part_loss"].items() if name.startswith(prefix)) > 0
    part_level = [name for name in paper["part_loss"] if name.startswith(PART_LEVEL)]
    for name in part_level:  # the projection, the pooling, CAST and the part level: L_part's gradient as the paper's
        torch.testing.assert_close(detached["part_loss"][name], paper["part_loss"][name], rtol=0, atol=0)
    for name, grad in paper["whole_loss"].items():  # L_whole (through the adapter and stage 2): unchanged everywhere
        torch.testing.assert_close(detached["whole_loss"][name], grad, rtol=0, atol=0)


def test_the_switch_needs_a_part_level_and_a_hierarchical_text_encoder():
    model = tiny_fcast()
    assert fcast_task(model).options() == {"objective": "fcast", "part_loss_weight": 1.0,
                                           "nonpaper_detach_stage1_from_part_loss": False}
    assert fcast_task(model, nonpaper_detach_stage1_from_part_loss=True).options()[
        "nonpaper_detach_stage1_from_part_loss"]
    for row, options in (("fcast", {"part_loss_weight": 0.0}), ("flair", {}), ("flair-cast-hier", {})):
        with pytest.raises(ValueError, match="needs objective='fcast', part_loss_weight > 0 and a hierarchical"):
            fcast_task(tiny_fcast(row=row), row, nonpaper_detach_stage1_from_part_loss=True, **options)


def test_model_card_says_the_weight_and_that_the_switch_is_not_the_papers():
    from hf_longclip.recipes.fcast.card import CARD
    from hf_longclip.training.hub import build_model_card

    for options, phrase, switched in (({}, "L = L_part + L_whole:", False),
                                      ({"part_loss_weight": 0.1}, "L = 0.1 L_part + L_whole:", False),
                                      ({"nonpaper_detach_stage1_from_part_loss": True}, "L = L_part + L_whole:", True)):
        model = tiny_fcast()
        config = {**model.config.to_dict(), **fcast_task(model, **options).options()}  # as `publish` gives it
        card = str(build_model_card(CARD.template, repo_id="org/fcast-tiny", info=CARD, config=config, results={}))
        assert phrase in card and ("**Not the paper's training**" in card) == switched
        assert f"| L_part kept out of stage 1 (not the paper's) | {switched} |" in card


def test_term_readings_are_each_terms_stage1_gradient():
    from hf_longclip.recipes.fcast import term_readings

    model, inputs = tiny_fcast().eval(), training_inputs()
    readings = term_readings(fcast_task(model), inputs)
    _, gradients = term_gradients(model, fcast_task(model), inputs)
    stage1 = {term: torch.cat([g.flatten() for name, g in grads.items() if name.startswith(STAGE1)])
              for term, grads in gradients.items()}
    for term, grad in stage1.items():
        assert readings["gradient_norms"][term] == pytest.approx(float(grad.norm()), rel=1e-5)
    assert readings["gradient_cosine"] == pytest.approx(
        float(stage1["part_loss"] @ stage1["whole_loss"] / stage1["part_loss"].norm() / stage1["whole_loss"].norm()),
        rel=1e-4, abs=1e-6)
    assert 0 < readings["part_positives"] < 1
    switched = term_readings(fcast_task(model, nonpaper_detach_stage1_from_part_loss=True), inputs)
    assert switched["gradient_norms"]["part_loss"] == 0 and switched["terms"] == readings["terms"]


def test_sub_caption_similarity_is_the_mean_cosine_across_captions():
    from hf_longclip.recipes.fcast import sub_caption_similarity

    model, processor = tiny_fcast().eval(), tiny_processor()
    with torch.no_grad():
        subs = model.get_text_features(**processor(text=CAPTIONS[:2], padding="longest")).sub_caption_embeds
    first, second = torch.nn.functional.normalize(subs, dim=-1)
    expected = float((first @ second.T).mean())  # every chunk of caption 0 against every chunk of caption 1
    assert sub_caption_similarity(model, processor, CAPTIONS[:2], batch_size=1) == pytest.approx(expected, rel=1e-5)


def test_the_scripts_options_set_every_variant_with_a_part_level():
    """train_fcast.py trains Table 2's and Table 5's rows by default; its --part_loss_weight and
    --nonpaper_detach_stage1_from_part_loss override each variant's own where it has a part level
    (`variant_options`, which `build_variant` builds from)."""
    import importlib.util

    from helpers.launch import EXAMPLES
    from hf_longclip.recipes.fcast import variant_options
    from hf_longclip.recipes.registry import method

    spec = importlib.util.spec_from_file_location("train_fcast", EXAMPLES / "train_fcast.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.ScriptArguments().variant_list == ["flair", "flair-cast", "flair-cast-hier", "fcast", "fcast-no-part"]
    assert method("fcast").variants is method("flair").variants and method("fcast").build_variant is not None

    def weights(names, *overrides):
        return {name: (options["part_loss_weight"], options["nonpaper_detach_stage1_from_part_loss"])
                for name in names for options in [variant_options(name, *overrides)]}

    assert weights(("fcast", "fcast-part-0.1", "fcast-no-part", "flair"), 0.5, True) == {
        "fcast": (0.5, True), "fcast-part-0.1": (0.5, True), "fcast-no-part": (0.0, False), "flair": (1.0, False)}
    assert weights(("fcast", "fcast-part-0.1", "fcast-nonpaper-stage1-detached")) == {
        "fcast": (1.0, False), "fcast-part-0.1": (0.1, False), "fcast-nonpaper-stage1-detached": (1.0, True)}
