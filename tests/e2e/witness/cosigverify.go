// cosigverify checks a signed checkpoint with code that is not the service's:
// Go's golang.org/x/mod/sumdb/note (the note format and the log's Ed25519
// signature) and a cosignature/v1 verifier written here from the C2SP
// tlog-cosignature text on Go's crypto/ed25519.
//
//	go run cosigverify.go NOTE_FILE LOG_VKEY QUORUM [WITNESS_VKEY ...]
//
// It prints one line per valid signature and exits 1 when the note does not
// open, a signature of a known key does not verify, or fewer than QUORUM
// witnesses cosigned. Built with Debian's golang-golang-x-mod-dev
// (GO111MODULE=off GOPATH=/usr/share/gocode).
package main

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// cosignatureV1 verifies Ed25519 cosignatures: the signature bytes are a
// big-endian uint64 time and a signature over "cosignature/v1\n",
// "time <t>\n" and the note text.
type cosignatureV1 struct {
	name string
	hash uint32
	key  ed25519.PublicKey
}

func (v *cosignatureV1) Name() string    { return v.name }
func (v *cosignatureV1) KeyHash() uint32 { return v.hash }

func (v *cosignatureV1) Verify(msg, sig []byte) bool {
	if len(sig) != 8+ed25519.SignatureSize {
		return false
	}
	t := binary.BigEndian.Uint64(sig[:8])
	if t > 1<<63-1 {
		return false
	}
	signed := []byte("cosignature/v1\ntime " + strconv.FormatUint(t, 10) + "\n")
	signed = append(signed, msg...)
	return ed25519.Verify(v.key, signed, sig[8:])
}

func newCosignatureV1(vkey string) (*cosignatureV1, error) {
	parts := strings.SplitN(strings.TrimSpace(vkey), "+", 3)
	if len(parts) != 3 {
		return nil, fmt.Errorf("witness key %q: not name+id+key", vkey)
	}
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(raw) != 1+ed25519.PublicKeySize || raw[0] != 0x04 {
		return nil, fmt.Errorf("witness key %q: not a type 0x04 Ed25519 key", vkey)
	}
	sum := sha256.Sum256(append([]byte(parts[0]+"\n"), raw...))
	hash := binary.BigEndian.Uint32(sum[:4])
	if parts[1] != fmt.Sprintf("%08x", hash) {
		return nil, fmt.Errorf("witness key %q: the key ID does not match", vkey)
	}
	return &cosignatureV1{name: parts[0], hash: hash, key: ed25519.PublicKey(raw[1:])}, nil
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "FAILED: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) < 4 {
		fail("usage: cosigverify NOTE_FILE LOG_VKEY QUORUM [WITNESS_VKEY ...]")
	}
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		fail("%v", err)
	}
	log, err := note.NewVerifier(strings.TrimSpace(os.Args[2]))
	if err != nil {
		fail("log key: %v", err)
	}
	quorum, err := strconv.Atoi(os.Args[3])
	if err != nil {
		fail("quorum: %v", err)
	}
	verifiers := []note.Verifier{log}
	for _, vkey := range os.Args[4:] {
		witness, err := newCosignatureV1(vkey)
		if err != nil {
			fail("%v", err)
		}
		verifiers = append(verifiers, witness)
	}
	n, err := note.Open(data, note.VerifierList(verifiers...))
	if err != nil {
		fail("the note does not open: %v", err)
	}
	logSigned, cosigned := false, 0
	for _, sig := range n.Sigs {
		if sig.Name == log.Name() && sig.Hash == log.KeyHash() {
			logSigned = true
			fmt.Printf("ok: signed by the log %s\n", sig.Name)
		} else {
			cosigned++
			fmt.Printf("ok: cosigned by %s\n", sig.Name)
		}
	}
	if !logSigned {
		fail("no signature by the log")
	}
	if cosigned < quorum {
		fail("%d cosignatures, %d required", cosigned, quorum)
	}
}
