"""The client against a running server (ANCHOR_BASE_URL): the calls an agent makes,
offline verification of what it gets back, and the models against the served document."""

import asyncio
import base64
import copy
import hashlib
import json
import pathlib
import sys
import time
import uuid

import httpx
from pydantic import BaseModel
import pytest
from conftest import DD

from anchor_client import (
    Anchor,
    AnchorError,
    AsyncAnchor,
    PaymentRequired,
    VerificationError,
    models,
    verify_consistency,
    verify_cose_receipt,
    verify_receipt,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent


def receipt_of(anchor: Anchor, dd_id) -> models.Receipt:
    deadline = time.monotonic() + 30
    while True:
        try:
            return anchor.decisions.receipt(dd_id)
        except AnchorError as e:
            # 409 until the log has integrated the record
            assert e.status == 409, e
            assert time.monotonic() < deadline, f"{dd_id} was never integrated"
            time.sleep(0.1)


def size_of(note: str) -> int:
    return int(note.split("\n")[1])


def test_an_agent_registers_anchors_confirms_and_verifies_its_receipt(base_url):
    with Anchor(base_url) as anchor:
        agent = anchor.agents.register()
        assert isinstance(agent, models.Registered)
        assert anchor.token == agent.auth_token and agent.auth_token.startswith("da_tk_")

        created = anchor.decisions.create(dd=DD, ee={"ee_preset": "EE_basic"})
        assert isinstance(created, models.CreateResponse)
        # A closed vocabulary reads as its name.
        assert created.status == "trial_paid", created.status
        confirmed = anchor.decisions.confirm(created.dd_id)
        assert isinstance(confirmed, models.ConfirmResponse)
        assert confirmed.dd_id == created.dd_id

        detail = anchor.decisions.get(created.dd_id)
        assert isinstance(detail, models.Detail)
        listed = anchor.decisions.list(limit=10)
        assert str(created.dd_id) in json.dumps(listed.model_dump(mode="json"))

        receipt = receipt_of(anchor, created.dd_id)
        key = anchor.log.key().public_key
        verified = verify_receipt(receipt, key)
        assert verified.leaf_index == receipt.leaf_index
        assert verified.tree_size == receipt.tree_size

        # The dispute-evidence bundle: the same record, its scope by name, and
        # no payment (Trial paid it).
        bundle = anchor.decisions.evidence(created.dd_id)
        assert isinstance(bundle, models.Evidence)
        assert bundle.format == "anchor-evidence/1" and bundle.payments == []
        assert bundle.receipt.integrity_hash == receipt.integrity_hash
        assert bundle.scope["dd_id"] == str(created.dd_id) and "salt" not in bundle.scope

        # The log only grows: a later checkpoint is consistent with the receipt's.
        later = anchor.decisions.create(dd=DD, ee={"ee_preset": "EE_basic"})
        anchor.decisions.confirm(later.dd_id)
        newer = receipt_of(anchor, later.dd_id).checkpoint
        first, second = size_of(receipt.checkpoint), size_of(newer)
        assert second > first
        verify_consistency(receipt.checkpoint, newer, anchor.log.consistency(first, second), key)


def test_a_cose_receipt_verifies_and_its_tampering_is_refused(base_url):
    import httpx

    with Anchor(base_url) as anchor:
        anchor.agents.register()
        first = anchor.decisions.create(dd=DD, ee={"ee_preset": "EE_basic"})
        anchor.decisions.confirm(first.dd_id)
        second = anchor.decisions.create(dd=DD, ee={"ee_preset": "EE_basic"})
        anchor.decisions.confirm(second.dd_id)
        receipt_of(anchor, second.dd_id)
        key = anchor.log.key().public_key
        token = anchor.token
    base = base_url.rstrip("/")
    with httpx.Client() as raw:
        deadline = time.monotonic() + 30
        while True:
            reply = raw.get(f"{base}/v1/dd/{first.dd_id}/receipt.cose", headers={"authorization": f"Bearer {token}"})
            if reply.status_code == 200:
                break
            assert reply.status_code == 409 and time.monotonic() < deadline, reply.text
            time.sleep(0.2)
        keys = raw.get(f"{base}/.well-known/scitt-keys").content
    verified = verify_cose_receipt(reply.content, keys, key)
    assert verified.tree_size >= 2
    altered = bytearray(reply.content)
    altered[-1] ^= 1
    with pytest.raises(VerificationError) as refused:
        verify_cose_receipt(bytes(altered), keys, key)
    assert refused.value.check == "signature"


def test_a_signed_statement_is_registered_and_its_receipt_verifies(base_url):
    """SCRAPI: a statement signed with pycose, under the issuer key the
    server allows (ANCHOR_ISSUER_KEY), is registered (303, then 302 until
    200) and its COSE receipt verifies against the statement; refusals are
    concise problem details, decoded here with cbor2."""
    import os

    import cbor2
    from cryptography.hazmat.primitives.asymmetric import ec
    from pycose.algorithms import Es256
    from pycose.headers import KID, Algorithm
    from pycose.keys import EC2Key
    from pycose.keys.curves import P256
    from pycose.messages import Sign1Message

    secret = open(os.environ["ANCHOR_ISSUER_KEY"]).read().strip().rsplit("+", 1)[1]
    d = base64.urlsafe_b64decode(secret + "=" * (-len(secret) % 4))
    public = ec.derive_private_key(int.from_bytes(d, "big"), ec.SECP256R1()).public_key().public_numbers()
    x, y = public.x.to_bytes(32, "big"), public.y.to_bytes(32, "big")
    kid = hashlib.sha256(cbor2.dumps({1: 2, -1: 1, -2: x, -3: y}, canonical=True)).digest()

    def sign(payload: bytes) -> bytes:
        message = Sign1Message(phdr={Algorithm: Es256, KID: kid, 15: {1: os.environ["ANCHOR_ISSUER"], 2: "pkg:python@1"}}, payload=payload)
        message.key = EC2Key(crv=P256, d=d, x=x, y=y)
        return message.encode()

    statement = sign(b'{"artifact":"sha256:00ff"}')
    base = base_url.rstrip("/")
    cose = {"content-type": "application/cose"}
    with httpx.Client(follow_redirects=False) as raw:
        posted = raw.post(f"{base}/entries", content=statement, headers=cose)
        assert posted.status_code == 303, posted.content
        location = posted.headers["location"]
        deadline = time.monotonic() + 30
        while True:
            reply = raw.get(location, headers={"accept": "application/cose"})
            if reply.status_code == 200:
                break
            assert reply.status_code == 302 and time.monotonic() < deadline, reply.content
            time.sleep(0.2)
        keys = raw.get(f"{base}/.well-known/scitt-keys").content
        key = raw.get(f"{base}/v1/log/key").json()["public_key"]
        problems = {
            "Invalid Signed Statement": raw.post(f"{base}/entries", content=b"not cose", headers=cose),
            "Rejected": raw.post(f"{base}/entries", content=statement[:-1] + bytes([statement[-1] ^ 1]), headers=cose),
            "Unsupported Media Type": raw.post(f"{base}/entries", content=statement, headers={"content-type": "application/json"}),
            "Invalid locator": raw.get(f"{base}/entries/nothex"),
            "Not Found": raw.get(f"{base}/entries/{'ab' * 32}"),
        }
    verified = verify_cose_receipt(reply.content, keys, key, statement=statement)
    assert verified.tree_size >= 2
    with pytest.raises(VerificationError):
        verify_cose_receipt(reply.content, keys, key, statement=sign(b'{"artifact":"sha256:another"}'))
    for title, answer in problems.items():
        assert answer.headers["content-type"] == "application/concise-problem-details+cbor", (title, answer.content)
        problem = cbor2.loads(answer.content)
        assert problem[-1] == title and problem[-2], problem


def test_a_retried_create_with_its_request_id_is_recorded_once(base_url):
    with Anchor(base_url) as anchor:
        anchor.agents.register()
        request_id = uuid.uuid4()
        first = anchor.decisions.create(dd=DD, ee={"ee_preset": "EE_basic"}, request_id=request_id)
        again = anchor.decisions.create(dd=DD, ee={"ee_preset": "EE_basic"}, request_id=request_id)
        assert first.dd_id == again.dd_id


def test_a_tampered_receipt_fails_the_check_that_catches_it(base_url):
    with Anchor(base_url) as anchor:
        anchor.agents.register()
        created = anchor.decisions.create(dd=DD, ee={"ee_preset": "EE_basic"})
        anchor.decisions.confirm(created.dd_id)
        receipt = receipt_of(anchor, created.dd_id).model_dump(mode="json")
        key = anchor.log.key().public_key

    record = copy.deepcopy(receipt)
    record["canonical_record"] = record["canonical_record"].replace("execute", "analyze")
    with pytest.raises(VerificationError) as failed:
        verify_receipt(record, key)
    assert failed.value.check == "record"

    moved = copy.deepcopy(receipt)
    moved["leaf_index"] = receipt["tree_size"]  # outside the tree
    with pytest.raises(VerificationError) as failed:
        verify_receipt(moved, key)
    assert failed.value.check == "inclusion"

    if receipt["inclusion_proof"]:
        bent = copy.deepcopy(receipt)
        bent["inclusion_proof"][0] = base64.b64encode(b"\x00" * 32).decode()
        with pytest.raises(VerificationError) as failed:
            verify_receipt(bent, key)
        assert failed.value.check == "inclusion"

    forged = copy.deepcopy(receipt)
    lines = forged["checkpoint"].split("\n")
    lines[1] = str(int(lines[1]) + 1)  # a size the log never signed
    forged["checkpoint"] = "\n".join(lines)
    with pytest.raises(VerificationError) as failed:
        verify_receipt(forged, key)
    assert failed.value.check == "signature"

    # Another log's key does not open this log's checkpoint.
    other = "other.example/log+" + key.split("+", 2)[1] + "+" + key.split("+", 2)[2]
    with pytest.raises(VerificationError):
        verify_receipt(receipt, other)


def test_refusals_carry_the_documented_error_code(base_url):
    with Anchor(base_url) as anchor:
        anchor.agents.register()
        with pytest.raises(AnchorError) as refused:
            anchor.decisions.get(uuid.uuid4())
        assert refused.value.status == 404 and refused.value.error_code == "DD_NOT_FOUND"
    with Anchor(base_url, token="da_tk_" + "0" * 64) as stranger:
        with pytest.raises(AnchorError) as refused:
            stranger.decisions.list()
        assert refused.value.status == 401 and refused.value.error_code
    # A body the generated model refuses never leaves the client.
    with Anchor(base_url) as anchor:
        with pytest.raises(ValueError):
            anchor.decisions.create(dd={**DD, "selection_state": "MAYBE"}, ee={"ee_preset": "EE_basic"})


def test_a_spent_trial_is_a_payment_required_with_the_challenge(base_url):
    with Anchor(base_url) as anchor:
        anchor.agents.register()
        # 3 x EE_high spend 472.5 of the 500 Trial DAC; the fourth does not
        # fit: Trial pays its base fee, the premium is asked for.
        for _ in range(3):
            anchor.decisions.create(dd=DD, ee={"ee_preset": "EE_high"})
        with pytest.raises(PaymentRequired) as unpaid:
            anchor.decisions.create(dd=DD, ee={"ee_preset": "EE_high"})
        accepts = unpaid.value.challenge["accepts"]
        assert accepts and accepts[0]["scheme"] == "exact"
        assert int(accepts[0]["amount"]) == 147500  # the 147.5 DAC premium in USDC base units
        # The refusal says what is bought and why, as the service does.
        assert "Trial pays its 10 DAC base fee" in str(unpaid.value), str(unpaid.value)


def test_the_async_client_does_what_the_sync_one_does(base_url):
    async def flow():
        async with AsyncAnchor(base_url) as anchor:
            agent = await anchor.agents.register()
            assert anchor.token == agent.auth_token
            created, _ = await asyncio.gather(
                anchor.decisions.create(dd=DD, ee={"ee_preset": "EE_basic"}), anchor.earned.balance()
            )
            await anchor.decisions.confirm(created.dd_id)
            key = (await anchor.log.key()).public_key
            deadline = time.monotonic() + 30
            while True:
                try:
                    receipt = await anchor.decisions.receipt(created.dd_id)
                    break
                except AnchorError as e:
                    assert e.status == 409 and time.monotonic() < deadline
                    await asyncio.sleep(0.1)
            return verify_receipt(receipt, key)

    assert asyncio.run(flow()).tree_size >= 1


def test_the_models_are_those_of_the_served_document(base_url):
    sys.path.insert(0, str(ROOT / "tools"))
    import generate

    fresh = generate.generate(base_url.rstrip("/") + "/openapi.json")
    for name, text in fresh.items():
        committed = (ROOT / "anchor_client" / name).read_text()
        assert committed == text, f"anchor_client/{name} differs from the served /openapi.json: run tools/generate.py"


def test_the_account_views_parse_into_their_models(base_url):
    with Anchor(base_url) as anchor:
        anchor.agents.register()
        assert isinstance(anchor.earned.balance(), models.BalanceView)
        assert isinstance(anchor.earned.ledger(limit=5), models.LedgerView)
        assert isinstance(anchor.dur.summary(), models.SummaryView)
        assert isinstance(anchor.tsl.tools(), models.ToolList)
        assert isinstance(anchor.agents.trial(), models.TrialStatus)
        with httpx.Client() as raw:
            assert raw.get(base_url.rstrip("/") + "/health").status_code == 200


def test_the_worked_agent_example_runs(base_url, tmp_path):
    import subprocess

    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "agent.py"), str(tmp_path)],
        env={**__import__("os").environ, "ANCHOR_BASE_URL": base_url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    kept = sorted(tmp_path.glob("*.json"))
    assert len(kept) == 3, done.stdout
    with Anchor(base_url) as anchor:
        key = anchor.log.key().public_key
    for path in kept:
        verify_receipt(json.loads(path.read_text()), key)
    # A receipt the client saved is one the service's own verifier accepts
    # (the client writes an absent list as null).
    anchor_bin = __import__("os").environ["ANCHOR_BIN"]
    for path in kept:
        checked = subprocess.run([anchor_bin, "verify", "--key", key, str(path)], capture_output=True, text=True, timeout=60)
        assert checked.returncode == 0, checked.stderr
        assert "ok: leaf" in checked.stdout, checked.stdout


# Anvil's public test key #0: never holds real money.
TEST_KEY = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"
EXTERNAL = {**DD, "decision_type": "external_interaction", "origin_context_type": "external"}


def _spend_trial(anchor: Anchor) -> None:
    # 3 x EE_high and 2 x EE_basic spend 492.5 of the 500 Trial DAC: less
    # than a base fee is left, so the next one is paid whole over x402.
    for _ in range(3):
        anchor.decisions.create(dd=EXTERNAL, ee={"ee_preset": "EE_high"})
    for _ in range(2):
        anchor.decisions.create(dd=EXTERNAL, ee={"ee_preset": "EE_basic"})


def test_the_official_x402_package_pays_once_the_trial_is_spent(base_url):
    from eth_account import Account
    from x402 import x402ClientSync
    from x402.mechanisms.evm.exact import register_exact_evm_client
    from x402.mechanisms.evm.signers import EthAccountSigner

    from anchor_client import PaymentRefused

    account = Account.from_key(TEST_KEY)
    payer = x402ClientSync()
    register_exact_evm_client(payer, EthAccountSigner(account))
    quotes = []
    with Anchor(base_url, payer=payer, approve=lambda q: quotes.append(q) or True) as anchor:
        anchor.agents.register()
        _spend_trial(anchor)
        assert not quotes, "Trial paid these"
        request_id = uuid.uuid4()
        created = anchor.decisions.create(dd=EXTERNAL, ee={"ee_preset": "EE_high"}, request_id=request_id)
        assert created.status == "pending_payment"
        # The caller saw the price, exact, and its DAB before anything was signed.
        (quote,) = quotes
        assert quote.amount_units == 157500 and str(quote.amount_dac) == "157.5"
        assert quote.operation == "POST /v1/dd/create" and quote.network == "eip155:8453"
        assert isinstance(quote.dab, models.DabStatus)
        confirmed = anchor.decisions.confirm(created.dd_id)
        assert confirmed.settlement_status == "settled"
        status = anchor.decisions.payment(created.dd_id)
        assert status.settlement_status == "settled"
        assert status.x402.payer.lower() == account.address.lower()
        assert status.x402.amount_units == "157500"
        # The same request_id again: the same record, not a second payment.
        again = anchor.decisions.create(dd=EXTERNAL, ee={"ee_preset": "EE_high"}, request_id=request_id)
        assert again.dd_id == created.dd_id

        # A caller that declines pays nothing and gets the quote back.
        anchor.approve = lambda q: q.amount_dac < 100
        with pytest.raises(PaymentRefused) as refused:
            anchor.decisions.create(dd=EXTERNAL, ee={"ee_preset": "EE_high"})
        assert str(refused.value.quote.amount_dac) == "157.5"


def test_the_async_client_pays_with_the_async_x402_client(base_url):
    from eth_account import Account
    from x402 import x402Client
    from x402.mechanisms.evm.exact import register_exact_evm_client
    from x402.mechanisms.evm.signers import EthAccountSigner

    payer = x402Client()
    register_exact_evm_client(payer, EthAccountSigner(Account.from_key(TEST_KEY)))

    async def flow():
        async with AsyncAnchor(base_url, payer=payer) as anchor:
            await anchor.agents.register()
            for _ in range(3):
                await anchor.decisions.create(dd=EXTERNAL, ee={"ee_preset": "EE_high"})
            # Trial pays the fourth's base fee; x402 its premium (and only that).
            created = await anchor.decisions.create(dd=EXTERNAL, ee={"ee_preset": "EE_high"})
            confirmed = await anchor.decisions.confirm(created.dd_id)
            return confirmed.settlement_status

    assert asyncio.run(flow()) == "settled"


@pytest.mark.parametrize(("mode", "revision"), [("2026-07-28", "2026-07-28"), ("legacy", "2025-11-25")])
def test_the_mcp_example_runs_with_the_official_mcp_sdk(base_url, mode, revision):
    import subprocess

    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "mcp_agent.py")],
        env={**__import__("os").environ, "ANCHOR_BASE_URL": base_url, "ANCHOR_MCP_MODE": mode},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"MCP protocol revision {revision}" in done.stdout
    assert "3 declarations anchored over MCP" in done.stdout
    if __import__("os").environ.get("ANCHOR_SECOND_BASE_URL"):
        assert "created on one host, confirmed on another" in done.stdout, done.stdout


def _payer():
    from eth_account import Account
    from x402 import x402ClientSync
    from x402.mechanisms.evm.exact import register_exact_evm_client
    from x402.mechanisms.evm.signers import EthAccountSigner

    payer = x402ClientSync()
    register_exact_evm_client(payer, EthAccountSigner(Account.from_key(TEST_KEY)))
    return payer


def test_an_ara_observation_is_paid_with_the_official_x402_package(base_url):
    with Anchor(base_url) as observed:
        target = observed.agents.register()
        observed.agents.disclosure("full")
        created = observed.decisions.create(dd=DD, ee={"ee_preset": "EE_basic"})
        observed.decisions.confirm(created.dd_id)
    quotes = []
    with Anchor(base_url, payer=_payer(), approve=lambda q: quotes.append(q) or True) as observer:
        observer.agents.register()
        deadline = time.monotonic() + 30
        while True:
            try:
                # Another agent's profile, within its disclosure level, at ARA's price.
                profile = observer.ara.observe(f"agent/{target.agent_id}/profile")
                break
            except AnchorError as e:
                # 404 until the aggregates have folded the new declaration in
                assert e.error_code == "DATA_UNAVAILABLE" and time.monotonic() < deadline, e
                time.sleep(0.2)
    assert isinstance(profile, BaseModel), profile
    (quote,) = quotes
    assert quote.operation == f"GET /v1/ara/agent/{target.agent_id}/profile"
    assert quote.amount_units > 0 and quote.amount_dac == quote.amount_units / 1000


def test_a_tool_is_listed_uploaded_bought_with_x402_and_run(base_url):
    wasm = pathlib.Path(__import__("os").environ["ANCHOR_TOOL_WASM"]).read_bytes()
    with Anchor(base_url) as seller:
        seller.agents.register()
        tool = seller.tsl.register(
            {"tool_name": "profile-shares", "price_dac": 5, "ara_connections": [{"observation_type": "agent_profile"}]}
        )
        seller.tsl.upload(tool.tool_id, wasm)
    quotes = []
    with Anchor(base_url, payer=_payer(), approve=lambda q: quotes.append(q) or True) as buyer:
        buyer.agents.register()
        created = buyer.decisions.create(dd=DD, ee={"ee_preset": "EE_basic"})
        buyer.decisions.confirm(created.dd_id)
        bought = buyer.tsl.purchase({"tool_id": str(tool.tool_id)})
        assert isinstance(bought, models.PurchaseView)
        # The tool's price and the 10 DAC service fee, seen before paying.
        assert [str(q.amount_dac) for q in quotes] == ["15"]
        # Its own profile, free; once the aggregates hold the declaration, the
        # report has its rows.
        deadline = time.monotonic() + 30
        while True:
            ran = buyer.tsl.run(str(tool.tool_id), {})
            assert isinstance(ran, models.RunView)
            report = ran.model_dump(mode="json")["report"]
            assert report["columns"] == ["count", "share_ppm"]
            assert report["metrics"][0] == {"name": "observations", "value": 1, "scale": 0}
            if report["rows"]:
                break
            assert time.monotonic() < deadline, report
            time.sleep(0.2)
        assert any(row["label"] == "agent-profile:action_type=execute" for row in report["rows"]), report


def _other_witness_key() -> str:
    """A cosignature/v1 verifier key of a witness that never saw this log."""
    import hashlib

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    name = "stranger.example/witness"
    public = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    raw = b"\x04" + public
    key_id = hashlib.sha256(name.encode() + b"\n" + raw).digest()[:4].hex()
    return f"{name}+{key_id}+{base64.b64encode(raw).decode()}"


def test_a_witnessed_receipt_verifies_with_the_witness_cosignature(base_url):
    witness = __import__("os").environ.get("ANCHOR_WITNESS_KEY")
    if not witness:
        pytest.skip("ANCHOR_WITNESS_KEY is not set: the server has no witness")
    with Anchor(base_url) as anchor:
        anchor.agents.register()
        created = anchor.decisions.create(dd=DD, ee={"ee_preset": "EE_basic"})
        anchor.decisions.confirm(created.dd_id)
        key = anchor.log.key().public_key
        deadline = time.monotonic() + 30
        while True:
            receipt = receipt_of(anchor, created.dd_id)
            if receipt.witnessed:
                break
            assert time.monotonic() < deadline, "no witnessed checkpoint covered the record"
            time.sleep(0.2)
    verified = verify_receipt(receipt, key, witnesses=[witness], quorum=1)
    (cosigned,) = verified.cosigned_by
    assert cosigned.witness == witness.split("+")[0]
    assert cosigned.timestamp > 1_700_000_000
    # A witness that never cosigned is no quorum.
    with pytest.raises(VerificationError) as failed:
        verify_receipt(receipt, key, witnesses=[_other_witness_key()], quorum=1)
    assert failed.value.check == "witness"
    # A cosignature over another body does not verify.
    forged = receipt.model_dump(mode="json")
    cosignature_line = [l for l in forged["checkpoint"].splitlines() if l.startswith("\u2014 " + cosigned.witness + " ")][0]
    blob = bytearray(base64.b64decode(cosignature_line.rsplit(" ", 1)[1]))
    blob[-1] ^= 1
    forged["checkpoint"] = forged["checkpoint"].replace(
        cosignature_line, cosignature_line.rsplit(" ", 1)[0] + " " + base64.b64encode(bytes(blob)).decode()
    )
    with pytest.raises(VerificationError) as failed:
        verify_receipt(forged, key, witnesses=[witness], quorum=1)
    assert failed.value.check == "witness"
