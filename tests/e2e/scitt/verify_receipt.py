"""Checks a COSE receipt of the service with code that is not the service's:
pycose (the COSE_Sign1 and its ES256 signature), cbor2 (the proof) and an
RFC 9162 inclusion computation written here from the RFC's text.

    python verify_receipt.py RECEIPT.cose KEYS.cbor OUT.json [STATEMENT.cose]

It recomputes the declaration's leaf from the canonical record the receipt
carries (label -70004), or, given the signed statement the receipt is of,
the statement's leaf (the hex SHA-256 of the statement with an empty
unprotected header), then the root from the leaf and the inclusion path, and
checks the signature over that root (the detached payload) with the key of
the receipt's kid, whose RFC 9679 thumbprint the kid must be. It writes
what it found (size, index, path, leaf, root, the checkpoint) to OUT.json
for the Go check of the same path, and exits 1 when anything fails.
"""

import base64
import hashlib
import json
import sys

import cbor2
from pycose.headers import KID
from pycose.keys import EC2Key
from pycose.keys.curves import P256
from pycose.messages import Sign1Message


def node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def root_from_inclusion(leaf_hash: bytes, index: int, size: int, path: list) -> bytes:
    # RFC 9162, 2.1.3.2.
    if index >= size:
        raise ValueError("leaf index outside the tree")
    fn, sn, r = index, size - 1, leaf_hash
    for p in path:
        if sn == 0:
            raise ValueError("path longer than the tree")
        if fn & 1 or fn == sn:
            r = node(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ValueError("path shorter than the tree")
    return r


def thumbprint(x: bytes, y: bytes) -> bytes:
    # RFC 9679: the required members of an EC2 key, deterministically encoded.
    return hashlib.sha256(cbor2.dumps({1: 2, -1: 1, -2: x, -3: y}, canonical=True)).digest()


def main() -> int:
    receipt, keys_file, out = sys.argv[1], sys.argv[2], sys.argv[3]
    message = Sign1Message.decode(open(receipt, "rb").read())
    assert message.payload is None, "the payload is detached"
    assert message.phdr.get(395) == 1, "vds is RFC9162_SHA256"
    kid = message.phdr[KID]
    (proof,) = message.uhdr[396][-1]
    size, index, path = cbor2.loads(proof)
    if len(sys.argv) > 4:
        statement = cbor2.loads(open(sys.argv[4], "rb").read())
        parts = statement.value if isinstance(statement, cbor2.CBORTag) else statement
        protected, _, payload, signature = parts
        assert payload is not None, "the statement's payload is attached"
        bare = cbor2.dumps(cbor2.CBORTag(18, [protected, {}, payload, signature]))
        leaf = f"anchor-statement/1\nsha256:{hashlib.sha256(bare).hexdigest()}\n".encode()
    else:
        record = message.uhdr[-70004]
        fields = dict(line.split("=", 1) for line in record.splitlines()[1:] if "=" in line)
        integrity_hash = "sha256:" + hashlib.sha256(record.encode()).hexdigest()
        leaf = f"anchor-leaf/1\n{integrity_hash}\n{fields['anchored_at']}\n".encode()
    root = root_from_inclusion(hashlib.sha256(b"\x00" + leaf).digest(), index, size, list(path))
    keys = cbor2.loads(open(keys_file, "rb").read())
    keys = keys if isinstance(keys, (list, tuple)) else [keys]
    key = next((k for k in keys if thumbprint(k[-2], k[-3]) == kid), None)
    assert key is not None, "no key of the set has the receipt's kid as its thumbprint"
    message.key = EC2Key(crv=P256, x=key[-2], y=key[-3])
    ok = message.verify_signature(detached_payload=root)
    checkpoint = message.uhdr[-70001]
    checkpoint_root = base64.b64decode(checkpoint.split("\n")[2])
    json.dump(
        {
            "signature": ok,
            "root_is_the_checkpoints": root == checkpoint_root,
            "size": size,
            "index": index,
            "path": [base64.b64encode(h).decode() for h in path],
            "leaf": base64.b64encode(leaf).decode(),
            "root": base64.b64encode(root).decode(),
            "checkpoint": checkpoint,
            "iss": message.phdr[15][1],
        },
        open(out, "w"),
    )
    return 0 if ok and root == checkpoint_root else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as error:  # a malformed receipt is a refusal, said as such
        print(f"refused: {type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(1)
