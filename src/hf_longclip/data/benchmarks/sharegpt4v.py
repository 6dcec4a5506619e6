"""ShareGPT4V long captions (Long-CLIP's 1k test split)."""

from __future__ import annotations

from .records import (
    _annotation,
    _build,
    _caption_row,
    _data_dir,
    _field,
    _malformed,
    _read_json,
    _Record,
    _require_dir,
    _split,
    _text,
)
from .registry import BASE_FEATURES, Benchmark, PathLike, _register

SHAREGPT4V_TEST_SIZE = 1000  # Long-CLIP holds out the first 1000 records of the json as its ShareGPT4V-1k test set
SHAREGPT4V_JSON = "share-captioner_coco_lcs_sam_1246k_1107.json"


@_register("sharegpt4v", BASE_FEATURES, ("test", "train"),
           "ShareGPT4V long captions; test = the first 1000 records of the json (Long-CLIP's 1k split)",
           protocol="longclip", protocol_description="Long-CLIP's 1k split (also TULIP's and LoTLIP's)",
           layout="sharegpt4v/                                     <- --data-dir (the image root)\n"
                  "  share-captioner_coco_lcs_sam_1246k_1107.json\n"
                  "  <record[\"image\"]>                             e.g. sam/images/sa_545504.jpg")
def load_sharegpt4v(data_dir: PathLike, split: str | None = None, max_samples: int | None = None, *,
                    annotation_file: PathLike | None = None, image_root: PathLike | None = None,
                    num_workers: int | None = None) -> Benchmark:
    """ShareGPT4V captions json: a list of ``{"id", "image": relative path, "conversations": [{"from": "human", ...},
    {"from": "gpt", "value": caption}]}``.

    Layout: ``data_dir/share-captioner_coco_lcs_sam_1246k_1107.json`` (another file of the same format, e.g.
    ``sharegpt4v_instruct_gpt4-vision_cap100k.json``, via ``annotation_file``); images at
    ``image_root/<record["image"]>`` with ``image_root`` defaulting to ``data_dir``. ``split="test"`` (default) is
    the first ``SHAREGPT4V_TEST_SIZE`` = 1000 records and ``"train"`` the rest, the caption is the first ``gpt``
    turn with newlines replaced by spaces. Matches beichenzbc/Long-CLIP ``train/sharegpt4v.py``
    (``share4v_val_dataset`` = ``json[:1000]``, ``share4v_train_dataset`` = ``json[1000:]``,
    ``conversations[1]["value"].replace("\\n", " ")``, image = ``image_root + record["image"]``), also used by
    ivonajdenkoska/tulip ``eval/sharegpt4v.py`` and wuw2019/LoTLIP ``dataloaders/share4v.py``.
    """
    what = "ShareGPT4V (json list of {id, image, conversations})"
    root = _data_dir(data_dir, what)
    split = _split(split, "sharegpt4v")
    path = _annotation(root, annotation_file, [SHAREGPT4V_JSON], what)
    images = _require_dir(root / image_root if image_root is not None else root, f"{what} image root")
    entries = _read_json(path)
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a JSON list of records, got {type(entries).__name__}")
    offset = 0 if split == "test" else SHAREGPT4V_TEST_SIZE
    selected = entries[:SHAREGPT4V_TEST_SIZE] if split == "test" else entries[SHAREGPT4V_TEST_SIZE:]
    records = []
    for index, entry in enumerate(selected, start=offset):
        image = _text(_field(entry, "image", path, index), path, index, "image")
        turns = _field(entry, "conversations", path, index)
        if not isinstance(turns, list):
            raise _malformed(path, index, "'conversations' must be a list of turns")
        answers = [turn.get("value") for turn in turns if isinstance(turn, dict) and turn.get("from") == "gpt"]
        if not answers:
            raise _malformed(path, index, "no {'from': 'gpt', 'value': caption} turn in 'conversations'")
        caption = _text(answers[0], path, index, "gpt value").replace("\n", " ").strip()
        record_id = str(entry.get("id", index))
        records.append(_Record((images / image,), _caption_row(record_id, caption)))
    return _build("sharegpt4v", records, load_sharegpt4v.features, split=split, source=path, image_root=images,
                  max_samples=max_samples, num_workers=num_workers)
