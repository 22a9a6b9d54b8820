"""``dl-doctor plan``: a what-if copy of the facts after an upgrade, judged with the same checks (docs/plan.md)."""
