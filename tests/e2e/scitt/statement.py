"""Makes a SCITT signed statement with pycose, code that is not the service's:

    python statement.py KEY_OUT.cbor STATEMENT_OUT.cose ISS SUB

A new P-256 key (its public COSE_Key, with the kid "pycose-issuer", written
to KEY_OUT.cbor for `anchor serve --scitt-issuer ISS=KEY_OUT.cbor`) signs a
tagged COSE_Sign1: ES256, the kid, a content type and CWT claims (15) with
the issuer and subject in the protected header, a small JSON payload
attached.
"""

import sys

import cbor2
from pycose.algorithms import Es256
from pycose.headers import KID, Algorithm, ContentType
from pycose.keys import EC2Key
from pycose.keys.curves import P256
from pycose.messages import Sign1Message

KID_VALUE = b"pycose-issuer"


def main() -> int:
    key_out, statement_out, iss, sub = sys.argv[1:5]
    key = EC2Key.generate_key(crv=P256)
    message = Sign1Message(
        phdr={Algorithm: Es256, KID: KID_VALUE, ContentType: "application/json", 15: {1: iss, 2: sub}},
        payload=b'{"artifact":"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}',
    )
    message.key = key
    open(statement_out, "wb").write(message.encode())
    open(key_out, "wb").write(cbor2.dumps({1: 2, 2: KID_VALUE, 3: -7, -1: 1, -2: key.x, -3: key.y}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
