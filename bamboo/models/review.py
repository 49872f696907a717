"""The verdict on an extracted knowledge graph, from the deterministic checks (`bamboo/extraction/checks.py`)
or the model's review (`bamboo/extraction/review.py`).

A model of its own, below both extraction and accumulation: extraction produces it and accumulation (the
populate contract, the slice learner, the accumulate workflow) decides on it, so neither package has to
import the other for it.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class ReviewOutcome(BaseModel):
    approved: bool
    issues: list[str] = Field(default_factory=list)
    feedback: str = ""
    hard_failures: list[str] = Field(default_factory=list)
    reviewer_error: str | None = None
    human_input_needed: list[str] = Field(default_factory=list)
    llm_reviewed: bool = True

    @property
    def score(self) -> int:
        """Fewer problems is better; used to keep the best attempt."""
        return len(self.hard_failures) * 10 + len(self.issues)
