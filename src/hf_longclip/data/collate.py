"""Batch collation for image-text training."""

from dataclasses import dataclass


@dataclass
class ImageTextCollator:
    """Turns rows with an image and a caption into model inputs, padding texts to the batch's longest."""

    processor: object
    text_column: str = "caption"
    image_column: str = "image"

    def __call__(self, rows: list[dict]) -> dict:
        return dict(
            self.processor(
                text=[row[self.text_column] for row in rows],
                images=[row[self.image_column] for row in rows],
                padding="longest",
            )
        )
