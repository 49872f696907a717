"""What model calls cost, and the budgets that stop them (pure models: workflows add spends up).

Every chat completion reports its token usage; the LLM client adds it to the meter of the activity that is
running (``bamboo/llm/metering.py``). The activity prices the usage with the deployment's price table and
returns it with its result; the workflow adds it up per run, session and batch and stops calling the model
once a budget is spent. That is a post-call stop-loss: the call that crosses the budget has already been
paid for, and no further call starts.

Budgets and prices are the deployment's (worker settings), never the client's: they arrive in the
workflow with each metered result.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

LOCAL_MODEL = "local"  # the bundled llama.cpp model costs nothing per token


class ModelPrice(BaseModel):
    """USD per million tokens, as providers publish them."""

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)


class Budget(BaseModel):
    """USD limits; None is no limit. A run is one analysis or one investigation turn, a session one
    investigation, a batch one populate or analyze batch."""

    run_usd: float | None = Field(default=None, gt=0)
    session_usd: float | None = Field(default=None, gt=0)
    batch_usd: float | None = Field(default=None, gt=0)

    @property
    def limited(self) -> bool:
        return any(v is not None for v in (self.run_usd, self.session_usd, self.batch_usd))


class Spend(BaseModel):
    """Tokens and USD of some model calls, and the budget the deployment set when they were made."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usd: float = 0.0
    budget: Budget = Field(default_factory=Budget)

    def plus(self, other: Spend | None) -> Spend:
        """The sum; the budget is the latest one known (a deployment may change it while a session runs)."""
        if other is None:
            return self
        return Spend(calls=self.calls + other.calls, prompt_tokens=self.prompt_tokens + other.prompt_tokens,
                     completion_tokens=self.completion_tokens + other.completion_tokens,
                     usd=round(self.usd + other.usd, 6), budget=other.budget)


class PriceTable(BaseModel):
    """Prices per model name; a model without a price cannot be held to a budget."""

    prices: dict[str, ModelPrice] = Field(default_factory=dict)

    def price(self, model: str) -> ModelPrice | None:
        if model in self.prices:
            return self.prices[model]
        if model == LOCAL_MODEL:
            return ModelPrice(input_per_mtok=0, output_per_mtok=0)
        return None

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        price = self.price(model)
        if price is None:
            raise KeyError(model)
        return (prompt_tokens * price.input_per_mtok + completion_tokens * price.output_per_mtok) / 1_000_000


def over_budget(spent: float, limit: float | None) -> bool:
    return limit is not None and spent >= limit


class BudgetSpent(Exception):
    """Raised by a workflow, never sent anywhere: a model step was not started because a budget is spent."""
