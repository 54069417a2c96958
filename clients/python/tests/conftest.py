import os

import pytest


@pytest.fixture(scope="session")
def base_url() -> str:
    url = os.environ.get("ANCHOR_BASE_URL")
    if not url:
        pytest.fail("ANCHOR_BASE_URL names the running server these tests talk to")
    return url


DD = {
    "dd_unit_type": "single",
    "dd_declaration_mode": "self_declared",
    "decision_type": "internal_service",
    "decision_action_type": "execute",
    "origin_context_type": "internal",
    "selection_state": "SELECTED",
}
