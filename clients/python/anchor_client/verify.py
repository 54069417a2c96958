"""Offline verification of receipts and consistency proofs, needing nothing of the service.

A receipt is checked in four steps, the same the `anchor verify` command takes:
the record hashes to its integrity hash and names the receipt's dd_id and time;
the log leaf is derived from them; the checkpoint is a signed note whose Ed25519
signature verifies under the log's public key; and the RFC 6962 inclusion proof
leads from the leaf to the checkpoint's root.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel

RECEIPT_FORMAT = "anchor-receipt/1"
LEAF_FORMAT = "anchor-leaf/1"
_ED25519 = 0x01
_COSIGNATURE_V1 = 0x04


class VerificationError(Exception):
    """A check failed; `check` names which (record, leaf, signature, inclusion, consistency, format)."""

    def __init__(self, check: str, why: str):
        super().__init__(f"{check} check failed: {why}")
        self.check = check


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes


@dataclass(frozen=True)
class Cosigned:
    """A witness's valid cosignature: who, and the time it says it saw the tree."""

    witness: str
    timestamp: int


@dataclass(frozen=True)
class Verified:
    origin: str
    tree_size: int
    root: bytes
    leaf_index: int
    cosigned_by: tuple[Cosigned, ...] = ()


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return _sha256(b"\x01" + left + right)


def _key(vkey: str, kind: int = _ED25519) -> tuple[str, bytes, Ed25519PublicKey]:
    """A C2SP verifier key `<name>+<hex key id>+<base64 of the type byte and the key>`:
    type 0x01 for a log's signed notes, 0x04 for a witness's cosignature/v1."""
    try:
        name, key_id, encoded = vkey.split("+", 2)
        raw = base64.b64decode(encoded, validate=True)
    except ValueError as e:
        raise VerificationError("format", f"not a verifier key: {vkey!r}") from e
    if len(raw) != 33 or raw[0] != kind:
        raise VerificationError("format", "not an Ed25519 verifier key" if kind == _ED25519 else "not a cosignature/v1 key")
    expected = _sha256(name.encode() + b"\n" + raw)[:4]
    if key_id != expected.hex():
        raise VerificationError("format", "the key id does not match the key")
    return name, expected, Ed25519PublicKey.from_public_bytes(raw[1:])


def open_checkpoint(note: str, vkey: str) -> Checkpoint:
    """The body of a signed checkpoint, once its signature by `vkey` verifies."""
    name, key_hash, public = _key(vkey)
    text, sep, signatures = note.partition("\n\n")
    if not sep:
        raise VerificationError("signature", "not a signed note")
    text += "\n"
    signed = False
    for line in signatures.splitlines():
        if not line.startswith("\u2014 "):
            raise VerificationError("signature", f"malformed signature line {line!r}")
        signer, _, encoded = line[2:].rpartition(" ")
        if signer != name:
            continue  # a witness's cosignature: not the log's
        blob = base64.b64decode(encoded)
        if blob[:4] != key_hash:
            continue
        try:
            public.verify(blob[4:], text.encode())
        except InvalidSignature as e:
            raise VerificationError("signature", "the checkpoint is not signed by this key") from e
        signed = True
    if not signed:
        raise VerificationError("signature", "the checkpoint carries no signature by this key")
    lines = text.split("\n")
    try:
        origin, size, root = lines[0], int(lines[1]), base64.b64decode(lines[2], validate=True)
    except (IndexError, ValueError) as e:
        raise VerificationError("signature", "not a checkpoint") from e
    if len(root) != 32:
        raise VerificationError("signature", "the root is not 32 bytes")
    return Checkpoint(origin, size, root)


def verify_cosignatures(note: str, witnesses: list[str], quorum: int) -> tuple[Cosigned, ...]:
    """Checks that the signed checkpoint `note` carries valid cosignatures
    (C2SP tlog-cosignature, Ed25519 cosignature/v1) from at least `quorum` of
    the `witnesses` (their verifier keys). A line naming one of them that does
    not verify fails; lines of other keys are passed over."""
    text, sep, signatures = note.partition("\n\n")
    if not sep:
        raise VerificationError("witness", "not a signed note")
    body = (text + "\n").encode()
    keys = [_key(w, _COSIGNATURE_V1) for w in witnesses]
    found: dict[bytes, Cosigned] = {}
    for line in signatures.splitlines():
        if not line.startswith("\u2014 "):
            raise VerificationError("witness", f"malformed signature line {line!r}")
        signer, _, encoded = line[2:].rpartition(" ")
        blob = base64.b64decode(encoded)
        for name, key_hash, public in keys:
            if signer != name or blob[:4] != key_hash:
                continue
            if len(blob) != 4 + 8 + 64:
                raise VerificationError("witness", f"{name}'s cosignature is malformed")
            timestamp = int.from_bytes(blob[4:12], "big")
            try:
                public.verify(blob[12:], f"cosignature/v1\ntime {timestamp}\n".encode() + body)
            except InvalidSignature as e:
                raise VerificationError("witness", f"{name}'s cosignature does not verify") from e
            found[key_hash] = Cosigned(name, timestamp)
    if len(found) < quorum:
        names = ", ".join(c.witness for c in found.values()) or "none"
        raise VerificationError("witness", f"{len(found)} of the {quorum} cosignatures asked for ({names})")
    return tuple(found.values())


def leaf_hash(integrity_hash: str, anchored_at: str) -> bytes:
    """SHA-256(0x00 ‖ leaf data), the leaf data being the record's public part only."""
    return _sha256(b"\x00" + f"{LEAF_FORMAT}\n{integrity_hash}\n{anchored_at}\n".encode())


def _hashes(encoded: list[str], check: str) -> list[bytes]:
    out = []
    for h in encoded:
        raw = base64.b64decode(h)
        if len(raw) != 32:
            raise VerificationError(check, f"{h!r} is not a 32-byte hash")
        out.append(raw)
    return out


def root_from_inclusion(index: int, size: int, leaf: bytes, proof: list[bytes]) -> bytes:
    """The root an RFC 6962 inclusion proof leads to from `leaf` at `index` in a tree of `size`."""
    if index >= size:
        raise VerificationError("inclusion", f"leaf {index} is outside a tree of {size}")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise VerificationError("inclusion", "the proof is too long")
        if fn & 1 or fn == sn:
            r = _node(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = _node(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise VerificationError("inclusion", "the proof is too short")
    return r


def _as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return dict(value)
    raise VerificationError("format", "a receipt is a mapping or a model")


def verify_receipt(receipt: Any, key: str, witnesses: list[str] | None = None, quorum: int | None = None) -> Verified:
    """Checks a receipt offline under the log's public key (`GET /v1/log/key`, `public_key`).

    With `witnesses` (their cosignature/v1 verifier keys), its checkpoint must
    also carry valid cosignatures of `quorum` of them (all, by default).
    """
    r = _as_dict(receipt)
    if r.get("format") != RECEIPT_FORMAT:
        raise VerificationError("format", f"unknown receipt format {r.get('format')!r}")
    record, integrity = r["canonical_record"], r["integrity_hash"]
    recomputed = "sha256:" + hashlib.sha256(record.encode()).hexdigest()
    if recomputed != integrity:
        raise VerificationError("record", f"the record hashes to {recomputed}, not {integrity}")
    if not record.startswith("anchor-dd/1\n"):
        raise VerificationError("record", "the record is not an anchor-dd/1 encoding")
    if f"\nanchored_at={r['anchored_at']}\n" not in record:
        raise VerificationError("record", "the record's anchored_at is not the receipt's")
    if f"\ndd_id={r['dd_id']}\n" not in record:
        raise VerificationError("record", "the record's dd_id is not the receipt's")
    leaf = leaf_hash(integrity, r["anchored_at"])
    checkpoint = open_checkpoint(r["checkpoint"], key)
    if checkpoint.size != r["tree_size"]:
        raise VerificationError("signature", f"the checkpoint is for size {checkpoint.size}, the receipt says {r['tree_size']}")
    root = root_from_inclusion(r["leaf_index"], r["tree_size"], leaf, _hashes(r["inclusion_proof"], "inclusion"))
    if root != checkpoint.root:
        raise VerificationError("inclusion", "the proof does not lead from this leaf to the signed root")
    cosigned: tuple[Cosigned, ...] = ()
    if witnesses:
        cosigned = verify_cosignatures(r["checkpoint"], witnesses, len(witnesses) if quorum is None else quorum)
    return Verified(checkpoint.origin, checkpoint.size, checkpoint.root, r["leaf_index"], cosigned)


def verify_consistency(older: str, newer: str, proof: Any, key: str) -> None:
    """Checks that the signed checkpoint `older` is a prefix of the signed `newer` (RFC 6962)."""
    old, new = open_checkpoint(older, key), open_checkpoint(newer, key)
    p = _as_dict(proof)
    if old.origin != new.origin:
        raise VerificationError("consistency", f"checkpoints of two logs: {old.origin} and {new.origin}")
    if (old.size, new.size) != (p["from_size"], p["to_size"]):
        raise VerificationError("consistency", "the proof is not for these two checkpoints")
    if old.size > new.size:
        raise VerificationError("consistency", "the earlier checkpoint is larger than the later one")
    path = _hashes(p["proof"], "consistency")
    if old.size == new.size:
        if old.root != new.root or path:
            raise VerificationError("consistency", "two different roots for one size: the log forked")
        return
    if old.size == 0:
        return
    if old.size & (old.size - 1) == 0:
        path = [old.root, *path]
    if not path:
        raise VerificationError("consistency", "an empty proof")
    fn, sn = old.size - 1, new.size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise VerificationError("consistency", "the proof is too long")
        if fn & 1 or fn == sn:
            fr, sr = _node(c, fr), _node(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = _node(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0 or fr != old.root or sr != new.root:
        raise VerificationError("consistency", "the earlier tree is not a prefix of the later one")


def _cose_thumbprint(x: bytes, y: bytes) -> bytes:
    # RFC 9679: SHA-256 of the deterministic CBOR of kty 2, crv 1, x, y.
    return hashlib.sha256(b"\xa4\x01\x02\x20\x01\x21\x58\x20" + x + b"\x22\x58\x20" + y).digest()


def statement_leaf(statement: bytes) -> bytes:
    """The log leaf of a signed statement: `anchor-statement/1\\nsha256:<hex>\\n`,
    the hash over the statement as `18([protected, {}, payload, signature])`."""
    import cbor2

    try:
        decoded = cbor2.loads(statement)
        parts = decoded.value if isinstance(decoded, cbor2.CBORTag) else decoded
        protected, _unprotected, payload, signature = parts
    except Exception as error:  # noqa: BLE001 - any decoding failure is a malformed statement
        raise VerificationError("record", f"not a COSE_Sign1 statement: {error}") from error
    if not isinstance(payload, bytes):
        raise VerificationError("record", "the statement's payload is not attached")
    bare = cbor2.dumps(cbor2.CBORTag(18, [protected, {}, payload, signature]))
    return f"anchor-statement/1\nsha256:{hashlib.sha256(bare).hexdigest()}\n".encode()


def verify_cose_receipt(
    receipt: bytes,
    receipt_keys: bytes,
    key: str,
    witnesses: list[str] | None = None,
    quorum: int | None = None,
    statement: bytes | None = None,
) -> Verified:
    """Checks a COSE receipt (RFC 9942, vds 1; `GET /v1/dd/{dd_id}/receipt.cose`) offline.

    With `statement` (a signed statement as registered with `POST /entries`),
    the receipt is that statement's (`GET /entries/{entry_id}`): its leaf is
    rebuilt from the statement, not from a record.

    `receipt_keys` is the COSE Key Set of `GET /.well-known/scitt-keys`
    (CBOR), `key` the log's public key. The receipt's ES256 signature must
    verify over the root its inclusion path leads to from the declaration's
    leaf (recomputed from the canonical record it carries), with the key
    whose RFC 9679 thumbprint is its kid; then the checkpoint it carries is
    checked as `verify_receipt` checks a JSON receipt's (the log's signature,
    that root, and the witnesses' cosignatures when given).
    """
    import cbor2
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    try:
        message = cbor2.loads(receipt)
    except Exception as error:  # noqa: BLE001 - any decoding failure is a malformed receipt
        raise VerificationError("format", f"not CBOR: {error}") from error
    if not isinstance(message, cbor2.CBORTag) or message.tag != 18 or len(message.value) != 4:
        raise VerificationError("format", "not a tagged COSE_Sign1")
    protected_bytes, unprotected, payload, signature = message.value
    if payload is not None:
        raise VerificationError("format", "the payload must be detached")
    protected = cbor2.loads(protected_bytes)
    if protected.get(1) != -7 or protected.get(395) != 1 or not isinstance(protected.get(4), bytes):
        raise VerificationError("format", "the protected header must name alg ES256, vds 1 and a kid")
    try:
        (proof,) = unprotected[396][-1]
        size, index, path = cbor2.loads(proof)
        note = unprotected[-70001]
        record = None if statement is not None else unprotected[-70004]
    except (KeyError, TypeError, ValueError) as error:
        raise VerificationError("format", f"the receipt lacks its proof, record or checkpoint: {error}") from error
    if statement is not None:
        leaf = _sha256(b"\x00" + statement_leaf(statement))
    else:
        fields = dict(line.split("=", 1) for line in record.splitlines()[1:] if "=" in line)
        integrity = "sha256:" + hashlib.sha256(record.encode()).hexdigest()
        leaf = leaf_hash(integrity, fields.get("anchored_at", ""))
    root = root_from_inclusion(index, size, leaf, _hashes([base64.b64encode(h).decode() for h in path], "inclusion"))
    keys = cbor2.loads(receipt_keys)
    keys = list(keys) if isinstance(keys, (list, tuple)) else [keys]
    found = next((k for k in keys if _cose_thumbprint(k[-2], k[-3]) == protected[4]), None)
    if found is None:
        raise VerificationError("signature", "no receipt key has this receipt's kid")
    public = ec.EllipticCurvePublicNumbers(int.from_bytes(found[-2], "big"), int.from_bytes(found[-3], "big"), ec.SECP256R1()).public_key()
    signed = cbor2.dumps(["Signature1", protected_bytes, b"", root])
    if len(signature) != 64:
        raise VerificationError("signature", "an ES256 signature is 64 bytes")
    der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
    try:
        public.verify(der, signed, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature as error:
        raise VerificationError("signature", "the receipt's signature does not verify over the root its path leads to") from error
    if statement is not None:
        checkpoint = open_checkpoint(note, key)
        if checkpoint.size != size or checkpoint.root != root:
            raise VerificationError("signature", "the log's checkpoint is not of the tree the receipt's path leads to")
        cosigned: tuple[Cosigned, ...] = ()
        if witnesses:
            cosigned = verify_cosignatures(note, witnesses, len(witnesses) if quorum is None else quorum)
        return Verified(checkpoint.origin, checkpoint.size, checkpoint.root, index, cosigned)
    json_receipt = {
        "format": RECEIPT_FORMAT,
        "dd_id": fields.get("dd_id", ""),
        "canonical_record": record,
        "integrity_hash": integrity,
        "anchored_at": fields.get("anchored_at", ""),
        "leaf_index": index,
        "tree_size": size,
        "inclusion_proof": [base64.b64encode(h).decode() for h in path],
        "checkpoint": note,
    }
    return verify_receipt(json_receipt, key, witnesses, quorum)
