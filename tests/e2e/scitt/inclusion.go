// inclusion checks an inclusion path of the service's log with Go's
// golang.org/x/mod/sumdb: the checkpoint opens under the log's key
// (sumdb/note), its tree (a C2SP checkpoint body: origin, size, base64
// root) is the one the path must lead to, and tlog.CheckRecord checks the
// path from the leaf's record hash.
//
//	go run inclusion.go FOUND.json LOG_VKEY
//
// FOUND.json is what verify_receipt.py wrote: size, index, path, leaf and
// the checkpoint. Exit 1 when the checkpoint does not open or the path does
// not lead from the leaf to its root. Built with Debian's
// golang-golang-x-mod-dev (GO111MODULE=off GOPATH=/usr/share/gocode).
package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type found struct {
	Size       int64    `json:"size"`
	Index      int64    `json:"index"`
	Path       []string `json:"path"`
	Leaf       string   `json:"leaf"`
	Checkpoint string   `json:"checkpoint"`
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func main() {
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fail("%v", err)
	}
	var f found
	if err := json.Unmarshal(raw, &f); err != nil {
		fail("%v", err)
	}
	verifier, err := note.NewVerifier(os.Args[2])
	if err != nil {
		fail("log key: %v", err)
	}
	opened, err := note.Open([]byte(f.Checkpoint), note.VerifierList(verifier))
	if err != nil {
		fail("the checkpoint does not open under the log's key: %v", err)
	}
	lines := strings.SplitN(opened.Text, "\n", 4)
	if len(lines) < 4 {
		fail("not a checkpoint: %q", opened.Text)
	}
	var tree tlog.Tree
	if tree.N, err = strconv.ParseInt(lines[1], 10, 64); err != nil {
		fail("not a checkpoint size: %q", lines[1])
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != tlog.HashSize {
		fail("not a checkpoint root: %q", lines[2])
	}
	copy(tree.Hash[:], root)
	if tree.N != f.Size {
		fail("the checkpoint is of %d leaves, the proof of %d", tree.N, f.Size)
	}
	leaf, err := base64.StdEncoding.DecodeString(f.Leaf)
	if err != nil {
		fail("leaf: %v", err)
	}
	var proof tlog.RecordProof
	for _, h := range f.Path {
		bytes, err := base64.StdEncoding.DecodeString(h)
		if err != nil || len(bytes) != tlog.HashSize {
			fail("a path hash is not 32 bytes")
		}
		var hash tlog.Hash
		copy(hash[:], bytes)
		proof = append(proof, hash)
	}
	if err := tlog.CheckRecord(proof, tree.N, tree.Hash, f.Index, tlog.RecordHash(leaf)); err != nil {
		fail("the path does not lead from the leaf to the checkpoint's root: %v", err)
	}
	fmt.Printf("ok: leaf %d is in the tree of %d (%s)\n", f.Index, tree.N, tree.Hash)
}
