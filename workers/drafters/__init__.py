"""Drafters propose tokens for every row of a batch; see base.Drafter for the protocol."""

from workers.drafters.base import Drafter, DraftRequest, Proposal

__all__ = ["DraftRequest", "Drafter", "Proposal"]
