"""Synthetic "scenes": a deterministic image / long-caption benchmark generated with PIL, small enough to train
tiny long-text CLIP models from scratch on CPU.

Each scene is a few coloured shapes on a light background. Its caption is a global sentence then one sentence per
object in salience order (larger bounding box first, ties by grid cell in reading order), often longer than 77
tokens. Scenes come in pairs sharing `group_id`: the second is a hard negative in which only the least salient
object (the last sentence) changes colour or shape. Rows also carry the cumulative caption prefixes (HiMo@K), one
box per object sentence (grounding), 4 graded descriptions (HierarCaps-style), an off-topic sentence (SSI), three
captions of the same scene worded differently (multi-caption retrieval) and the colour and shape of the most salient
object as a class label (zero-shot classification over `CLASSNAMES` with `CLASS_TEMPLATES`).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from string import Formatter

import datasets
from PIL import Image, ImageDraw

# ---------------------------------------------------------------------------------------------------------------
# Vocabulary, geometry and templates: every constant of the generator.
# ---------------------------------------------------------------------------------------------------------------
SHAPES = ("circle", "square", "triangle", "diamond", "cross")
COLORS = {
    "red": (220, 40, 40),
    "green": (40, 160, 60),
    "blue": (40, 80, 220),
    "yellow": (230, 190, 20),
    "purple": (140, 60, 180),
    "orange": (240, 130, 30),
    "black": (30, 30, 30),
}
BACKGROUNDS = {
    "light gray": (225, 225, 225),
    "pale blue": (220, 232, 245),
    "pale yellow": (245, 240, 215),
    "light pink": (245, 225, 232),
}
SIZES = {"small": 0.08, "medium": 0.13, "large": 0.19}  # half-width of the object's box, as a fraction of the side
GRID = 3
POSITIONS = (  # the 3x3 grid cells in reading order
    "in the top left", "at the top", "in the top right",
    "on the left", "in the center", "on the right",
    "in the bottom left", "at the bottom", "in the bottom right",
)
COUNTS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
RANKS = ("largest", "second largest", "third largest", "fourth largest", "fifth largest", "sixth largest",
         "seventh largest", "eighth largest", "ninth largest")
JITTER = 0.03  # uniform jitter of an object's centre around its cell centre, fraction of the side
MARGIN = 0.01  # objects keep this distance from the image border
CROSS_BAR = 1 / 3  # half-thickness of a cross's bars relative to its half-width

GLOBAL_TEMPLATES = (
    "This is a picture of {count} simple shapes drawn on a plain {background} background.",
    "The image shows {count} flat shapes of different colors on a {background} background.",
)
OBJECT_TEMPLATES = (
    "The {rank} shape is a {size} {color} {shape}, and it is placed {position} of the picture.",
    "{position} of the picture there is a {size} {color} {shape}, which is the {rank} shape in the scene.",
    "We can also see a {size} {color} {shape} {position}, {detail}.",
)
SHAPE_DETAILS = {
    "circle": "with a smooth and perfectly round outline",
    "square": "with four straight sides of equal length",
    "triangle": "with three straight sides and a pointed top",
    "diamond": "which stands upright on one of its corners",
    "cross": "made of two thick crossing bars",
}
LEVEL_TEMPLATES = (
    "a picture of shapes.",
    "a picture of shapes with a {first}.",
    "a picture of shapes with a {first} and a {second}.",
    "a picture of {count} shapes on a {background} background with {objects}.",
)
DISTRACTORS = (
    "The train to the airport was delayed by heavy snow this morning.",
    "She poured a cup of hot coffee and read the newspaper quietly.",
    "The committee approved the new budget after a long debate.",
    "He practiced the piano for an hour before dinner.",
    "The museum is planning an exhibition about ancient coins.",
    "Fresh bread is sold at the bakery near the station.",
    "The football match ended in a draw after extra time.",
    "Our neighbors adopted a friendly old dog last spring.",
    "The software update fixes several bugs in the login page.",
    "A quiet library is a good place to study for exams.",
    "The recipe needs eggs, flour, butter and a pinch of salt.",
    "Tomorrow the weather will be windy with occasional showers.",
)
NUM_CAPTIONS = 3  # the caption, then rewordings with other templates (multi-caption retrieval, as COCO's 5)
CLASSNAMES = tuple(f"{color} {shape}" for color in COLORS for shape in SHAPES)
CLASS_TEMPLATES = ("a picture of shapes with a {}.", "a picture of shapes with a large {}.")
SPLITS = {
    datasets.Split.TRAIN: "num_train", datasets.Split.VALIDATION: "num_validation", datasets.Split.TEST: "num_test",
}
SCENE_PARAMS = ("seed", "image_size", "num_train", "num_validation", "num_test", "min_objects", "max_objects")
# Cache key of generated data: any edit of this file regenerates it instead of reusing stale Arrow files.
SOURCE_HASH = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def generator_texts() -> list[str]:
    """Every fixed text fragment the generator can emit (names, template words, details, distractors).

    Training a tokenizer on these as well guarantees no valid scene word is ever unknown.
    """
    templates = (*GLOBAL_TEMPLATES, *OBJECT_TEMPLATES, *LEVEL_TEMPLATES)
    literals = [literal for template in templates for literal, *_ in Formatter().parse(template)]
    names = (*SHAPES, *COLORS, *BACKGROUNDS, *SIZES, *POSITIONS, *COUNTS, *RANKS, *SHAPE_DETAILS.values())
    return [*literals, *names, *DISTRACTORS]


# ---------------------------------------------------------------------------------------------------------------
# Scenes
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SceneObject:
    """One shape; `center` is normalised to [0, 1], `cell` indexes `POSITIONS`, `template` `OBJECT_TEMPLATES`."""

    shape: str
    color: str
    size: str
    cell: int
    center: tuple[float, float]
    template: int

    @property
    def box(self) -> list[float]:
        """[x0, y0, x1, y1], normalised to [0, 1]."""
        half = SIZES[self.size]
        x, y = self.center
        return [x - half, y - half, x + half, y + half]

    @property
    def phrase(self) -> str:
        return f"{self.size} {self.color} {self.shape}"


@dataclass(frozen=True)
class Scene:
    """A background and its objects in salience order (larger box first, then grid cell in reading order)."""

    background: str
    template: int
    objects: tuple[SceneObject, ...]
    distractor: str


def sample_scene(rng: random.Random, min_objects: int, max_objects: int) -> Scene:
    """Draw a scene of `min_objects`..`max_objects` objects, each in its own grid cell."""
    count = rng.randint(min_objects, max_objects)
    objects = []
    for cell in rng.sample(range(GRID * GRID), count):
        size = rng.choice(list(SIZES))
        low, high = SIZES[size] + MARGIN, 1 - SIZES[size] - MARGIN
        row, col = divmod(cell, GRID)
        center = tuple(
            min(max((index + 0.5) / GRID + rng.uniform(-JITTER, JITTER), low), high) for index in (col, row)
        )
        objects.append(SceneObject(shape=rng.choice(SHAPES), color=rng.choice(list(COLORS)), size=size, cell=cell,
                                   center=center, template=rng.randrange(len(OBJECT_TEMPLATES))))
    objects.sort(key=lambda obj: (-SIZES[obj.size], obj.cell))
    return Scene(background=rng.choice(list(BACKGROUNDS)), template=rng.randrange(len(GLOBAL_TEMPLATES)),
                 objects=tuple(objects), distractor=rng.choice(DISTRACTORS))


def hard_negative(scene: Scene, rng: random.Random) -> Scene:
    """The same scene with only its least salient object recoloured or reshaped (its box and rank are unchanged)."""
    last = scene.objects[-1]
    if rng.random() < 0.5:
        last = replace(last, color=rng.choice([color for color in COLORS if color != last.color]))
    else:
        last = replace(last, shape=rng.choice([shape for shape in SHAPES if shape != last.shape]))
    return replace(scene, objects=(*scene.objects[:-1], last))


def render_scene(scene: Scene, image_size: int) -> Image.Image:
    """Draw the scene as an RGB image, most salient (largest) object first so smaller ones stay visible."""
    image = Image.new("RGB", (image_size, image_size), BACKGROUNDS[scene.background])
    draw = ImageDraw.Draw(image)
    for obj in scene.objects:
        x, y = (coordinate * image_size for coordinate in obj.center)
        half = SIZES[obj.size] * image_size
        fill = COLORS[obj.color]
        if obj.shape == "circle":
            draw.ellipse([x - half, y - half, x + half, y + half], fill=fill)
        elif obj.shape == "square":
            draw.rectangle([x - half, y - half, x + half, y + half], fill=fill)
        elif obj.shape == "triangle":
            draw.polygon([(x, y - half), (x + half, y + half), (x - half, y + half)], fill=fill)
        elif obj.shape == "diamond":
            draw.polygon([(x, y - half), (x + half, y), (x, y + half), (x - half, y)], fill=fill)
        else:  # cross
            bar = half * CROSS_BAR
            draw.rectangle([x - half, y - bar, x + half, y + bar], fill=fill)
            draw.rectangle([x - bar, y - half, x + bar, y + half], fill=fill)
    return image


def _capitalize(sentence: str) -> str:
    return sentence[0].upper() + sentence[1:]


def scene_sentences(scene: Scene) -> list[str]:
    """The global sentence, then one sentence per object in salience order."""
    sentences = [GLOBAL_TEMPLATES[scene.template].format(count=COUNTS[len(scene.objects)], background=scene.background)]
    for rank, obj in enumerate(scene.objects):
        sentences.append(_capitalize(OBJECT_TEMPLATES[obj.template].format(
            rank=RANKS[rank], size=obj.size, color=obj.color, shape=obj.shape, position=POSITIONS[obj.cell],
            detail=SHAPE_DETAILS[obj.shape],
        )))
    return sentences


def scene_levels(scene: Scene) -> list[str]:
    """Four descriptions from generic to specific, each containing the content of the previous one."""
    first, second = (obj.phrase for obj in scene.objects[:2])
    described = [f"a {obj.phrase} {POSITIONS[obj.cell]}" for obj in scene.objects]
    objects = ", ".join(described[:-1]) + ", and " + described[-1]
    return [template.format(first=first, second=second, count=COUNTS[len(scene.objects)],
                            background=scene.background, objects=objects) for template in LEVEL_TEMPLATES]


def reworded(scene: Scene, rng: random.Random) -> Scene:
    """The same scene described with freshly drawn sentence templates."""
    objects = tuple(replace(obj, template=rng.randrange(len(OBJECT_TEMPLATES))) for obj in scene.objects)
    return replace(scene, template=rng.randrange(len(GLOBAL_TEMPLATES)), objects=objects)


def scene_row(scene: Scene, image_size: int, group_id: int, rewording_rng: random.Random) -> dict:
    """A dataset row (see `FEATURES`)."""
    sentences = scene_sentences(scene)
    rewordings = [" ".join(scene_sentences(reworded(scene, rewording_rng))) for _ in range(NUM_CAPTIONS - 1)]
    return {
        "image": render_scene(scene, image_size),
        "caption": " ".join(sentences),
        "sentences": sentences,
        "subtexts": [" ".join(sentences[: end + 1]) for end in range(len(sentences))],
        "boxes": [obj.box for obj in scene.objects],
        "levels": scene_levels(scene),
        "distractor": scene.distractor,
        "group_id": group_id,
        "captions": [" ".join(sentences), *rewordings],
        "label": CLASSNAMES.index(f"{scene.objects[0].color} {scene.objects[0].shape}"),
    }


FEATURES = datasets.Features({
    "image": datasets.Image(),
    "caption": datasets.Value("string"),
    "sentences": datasets.List(datasets.Value("string")),
    "subtexts": datasets.List(datasets.Value("string")),
    "boxes": datasets.List(datasets.List(datasets.Value("float32"), length=4)),
    "levels": datasets.List(datasets.Value("string"), length=len(LEVEL_TEMPLATES)),
    "distractor": datasets.Value("string"),
    "group_id": datasets.Value("int32"),
    "captions": datasets.List(datasets.Value("string"), length=NUM_CAPTIONS),
    "label": datasets.ClassLabel(names=list(CLASSNAMES)),
})


# ---------------------------------------------------------------------------------------------------------------
# Hugging Face `datasets` builder
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class SyntheticScenesConfig(datasets.BuilderConfig):
    """Generation parameters; the same config gives the same dataset on any machine."""

    seed: int = 0
    image_size: int = 64
    num_train: int = 4000
    num_validation: int = 256
    num_test: int = 512
    min_objects: int = 3
    max_objects: int = 7

    def __post_init__(self):
        super().__post_init__()
        if not 2 <= self.min_objects <= self.max_objects <= GRID * GRID:
            raise ValueError(f"need 2 <= min_objects <= max_objects <= {GRID * GRID}, "
                             f"got {self.min_objects}, {self.max_objects}")


class SyntheticScenes(datasets.GeneratorBasedBuilder):
    """Builder of the synthetic scenes; rows come in hard-negative pairs sharing `group_id` (an odd split size
    ends with an unpaired scene)."""

    BUILDER_CONFIG_CLASS = SyntheticScenesConfig
    VERSION = datasets.Version("1.0.0")

    def __init__(self, **kwargs):
        kwargs.setdefault("hash", SOURCE_HASH)
        super().__init__(**kwargs)

    def _info(self) -> datasets.DatasetInfo:
        return datasets.DatasetInfo(description=__doc__, features=FEATURES)

    def _split_generators(self, dl_manager) -> list[datasets.SplitGenerator]:
        return [datasets.SplitGenerator(name=split, gen_kwargs={"split": str(split),
                                                                "num_examples": getattr(self.config, field)})
                for split, field in SPLITS.items()]

    def _generate_examples(self, split: str, num_examples: int) -> Iterator[tuple[int, dict]]:
        config = self.config
        for index in range(num_examples):
            group, member = divmod(index, 2)
            # One RNG per group, seeded from (seed, split, group): splits never share a stream.
            rng = random.Random(f"hf_longclip.synthetic_scenes/{config.seed}/{split}/{group}")
            scene = sample_scene(rng, config.min_objects, config.max_objects)
            if member:
                scene = hard_negative(scene, rng)
            # Rewordings draw from their own stream, leaving every other field as it was without them.
            rewording_rng = random.Random(f"hf_longclip.synthetic_scenes/{config.seed}/{split}/{index}/captions")
            yield index, scene_row(scene, config.image_size, group, rewording_rng)


def load_synthetic_scenes(seed: int = 0, cache_dir: str | None = None, **config_kwargs) -> datasets.DatasetDict:
    """Generate (or reuse from `cache_dir`, default: the datasets cache) the train/validation/test splits.

    `config_kwargs` are the other `SyntheticScenesConfig` fields (image_size, num_train, ...).
    """
    config = SyntheticScenesConfig(seed=seed, **config_kwargs)
    # Pass every parameter explicitly so equal configs share one cache entry however they were spelled.
    builder = SyntheticScenes(cache_dir=cache_dir, **{name: getattr(config, name) for name in SCENE_PARAMS})
    builder.download_and_prepare()
    return builder.as_dataset()


def hard_negative_indices(dataset) -> list[tuple[int, int]]:
    """Row indices of the hard-negative pairs of a split: the two rows sharing each `group_id`, in group order (a
    group cut short by `select` or an odd split size is left out)."""
    groups: dict[int, list[int]] = {}
    for index, group in enumerate(dataset["group_id"]):
        groups.setdefault(group, []).append(index)
    return [tuple(indices) for indices in groups.values() if len(indices) == 2]
