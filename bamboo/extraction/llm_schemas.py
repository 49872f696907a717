"""What the LLM is asked to return during accumulation. Every call carries one of these as a JSON schema."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

# Every string is bounded, list items too: a grammar-constrained small model otherwise can run on inside one
# unbounded string until the answer's token limit cuts it (seen with Gemma 3 270M on an incident's labels).
Label = Annotated[str, Field(max_length=120)]
Sentence = Annotated[str, Field(max_length=300)]


class NamedItem(BaseModel):
    name: str = Field(max_length=120, description="Short generic label (2-8 words) without task ids, dates or user names")
    description: str = Field(max_length=600, description="One or two sentences with the specifics")


class ProcedureItem(BaseModel):
    name: str = Field(max_length=120, description="Short imperative label of an investigation step")
    description: str = Field(max_length=600, description="What was checked and how")
    depends_on: list[Label] = Field(max_length=4, description="Names of steps that must happen before this one")


class EmailExtraction(BaseModel):
    """Cause / Resolution / Procedures read from an incident's email thread."""

    cause: NamedItem
    resolution: NamedItem
    procedures: list[ProcedureItem] = Field(max_length=6)


class CanonicalLabels(BaseModel):
    """Canonical names for the labels of a human-reviewed resolution record (wording only, same meaning)."""

    cause: str = Field(max_length=120)
    resolution: str = Field(max_length=120)
    procedures: list[Label] = Field(max_length=8)


class ReviewVerdict(BaseModel):
    """The reviewer's gap analysis of an extracted graph."""

    approved: bool
    confidence: float
    issues: list[Sentence] = Field(max_length=5)
    feedback: str = Field(max_length=600)
