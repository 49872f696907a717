"""Who may answer a review: approver rules taken from settings as plain values.

The rules arrive as a model built from settings values (``ApproverRules.model_validate`` of the settings'
``approvers_read_only``, ``approvers_state_changing`` and ``require_distinct_approver``), so the policy
package never imports settings and a workflow can carry the rules in its input.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ApproverRules(BaseModel):
    """An empty list means anyone may approve that class of code."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    approvers_read_only: tuple[str, ...] = ()
    approvers_state_changing: tuple[str, ...] = ()
    require_distinct_approver: bool = True

    def may_approve(self, approver: str, state_changing: bool) -> bool:
        """Whether ``approver`` is on the list for this class of code (state-changing includes opaque code)."""
        allowed = self.approvers_state_changing if state_changing else self.approvers_read_only
        return not allowed or approver in allowed

    def needs_distinct_approver(self, state_changing: bool) -> bool:
        """A state-changing block needs a second person when so configured; read-only code never does."""
        return state_changing and self.require_distinct_approver
