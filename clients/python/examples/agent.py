"""An agent that anchors each decision before acting on it, confirms it after,
and keeps the receipts, verified offline, beside its own work.

    ANCHOR_BASE_URL=http://127.0.0.1:8080 python examples/agent.py [RECEIPTS_DIR]

Only metadata leaves the agent: what kind of decision it was and the
accountability scope it takes on, never the decision's content.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import tempfile
import time

from anchor_client import Anchor, AnchorError, verify_receipt

# What this agent does, and how it classifies each step for the service.
STEPS = [
    ("depend on the supplier's price list", "external_interaction", "depend", "EE_basic"),
    ("approve the cheapest offer", "internal_service", "approve", "EE_basic"),
    ("place the order", "external_interaction", "execute", "EE_basic"),
]


def act(step: str) -> None:
    """The agent's own work; the service never sees any of it."""
    time.sleep(0.01)


def wait_for_receipt(anchor: Anchor, dd_id, seconds: float = 30.0):
    deadline = time.monotonic() + seconds
    while True:
        try:
            return anchor.decisions.receipt(dd_id)
        except AnchorError as e:
            if e.status != 409 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def main() -> int:
    base = os.environ.get("ANCHOR_BASE_URL", "http://127.0.0.1:8080")
    receipts = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="receipts-"))
    receipts.mkdir(parents=True, exist_ok=True)
    with Anchor(base) as anchor:
        agent = anchor.agents.register()
        key = anchor.log.key().public_key
        print(f"agent {agent.agent_id}; receipts in {receipts}")
        for step, decision_type, action, preset in STEPS:
            # Before acting: declare the decision and the scope of accountability taken on.
            created = anchor.decisions.create(
                dd={
                    "dd_unit_type": "single",
                    "dd_declaration_mode": "self_declared",
                    "decision_type": decision_type,
                    "decision_action_type": action,
                    "origin_context_type": "external" if decision_type == "external_interaction" else "internal",
                    "selection_state": "SELECTED",
                },
                ee={"ee_preset": preset},
            )
            act(step)
            # After acting: confirm, then keep the receipt once the log holds it.
            anchor.decisions.confirm(created.dd_id)
            receipt = wait_for_receipt(anchor, created.dd_id)
            verified = verify_receipt(receipt, key)
            (receipts / f"{created.dd_id}.json").write_text(json.dumps(receipt.model_dump(mode="json"), indent=2))
            print(f"{step}: anchored as {created.dd_id}, leaf {verified.leaf_index} of {verified.tree_size}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
