"""Character-length filter (LaBSE: lines shorter than 10 or longer than 5000 characters go)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LengthFilter:
    min_chars: int = 10
    max_chars: int = 5000

    def __post_init__(self) -> None:
        if self.min_chars < 0 or self.max_chars < self.min_chars:
            raise ValueError(f"bad length bounds: {self.min_chars}..{self.max_chars}")

    def __call__(self, text: str) -> str | None:
        """None to keep, else the drop reason."""
        n = len(text)
        if n < self.min_chars:
            return "too_short"
        if n > self.max_chars:
            return "too_long"
        return None
