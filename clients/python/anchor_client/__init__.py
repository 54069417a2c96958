"""A typed Python client for the accountability anchoring service.

    from anchor_client import Anchor, verify_receipt

    anchor = Anchor("http://127.0.0.1:8080")
    anchor.agents.register()                      # keeps the new agent's token
    created = anchor.decisions.create(dd={...}, ee={"ee_preset": "EE_basic"})
    anchor.decisions.confirm(created.dd_id)
    receipt = anchor.decisions.receipt(created.dd_id)
    verify_receipt(receipt, anchor.log.key().public_key)

`AsyncAnchor` is the same client for asyncio. Models (`anchor_client.models`)
are generated from the service's OpenAPI document by tools/generate.py.
"""

from . import models
from ._client import Anchor, AnchorError, AsyncAnchor, PaymentRefused, PaymentRequired, Quote
from .verify import (
    Checkpoint,
    Cosigned,
    Verified,
    VerificationError,
    open_checkpoint,
    verify_consistency,
    verify_cose_receipt,
    verify_cosignatures,
    verify_receipt,
)

__all__ = [
    "Anchor",
    "AsyncAnchor",
    "AnchorError",
    "PaymentRequired",
    "PaymentRefused",
    "Quote",
    "Checkpoint",
    "Cosigned",
    "Verified",
    "VerificationError",
    "models",
    "open_checkpoint",
    "verify_consistency",
    "verify_cose_receipt",
    "verify_cosignatures",
    "verify_receipt",
]
