#!/usr/bin/env python3
"""Fuzzes a running `anchor` server through its own /openapi.json with schemathesis.

    python3 tests/fuzz/run.py --anchor PATH/TO/anchor --schemathesis PATH/TO/schemathesis \
        [--postgres-url URL] [--max-examples N] [--seed S]

For each backend (SQLite always; PostgreSQL when a URL is given, in a database
of its own that is dropped afterwards) this starts the binary on a free
loopback port, registers an agent and an owner, and runs schemathesis with
both credentials on every request (the agent's bearer token, the owner's
session cookie) and a fixed seed. It fails on any 5xx, any response that does
not match the schema its operation documents, any status code the operation
does not document, and any content type it does not document.

It prints one line per backend that scripts/test counts:
    fuzz result: ok sqlite requests=12345 failures=0
"""

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid

CHECKS = "not_a_server_error,status_code_conformance,response_schema_conformance,content_type_conformance"
PASSWORD = "fuzzing passphrase 7"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(base, method, path, body=None, headers=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("content-type", "application/json")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, dict(response.headers), json.loads(response.read() or b"null")


def wait_for(base, process, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"anchor exited with {process.returncode} before it served")
        try:
            call(base, "GET", "/health")
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("anchor did not answer /health in time")


def credentials(base):
    """An agent linked to a signed-in owner, and identifiers worth fuzzing with."""
    _, _, agent = call(base, "POST", "/v1/agent/register", {})
    email = f"fuzz-{uuid.uuid4().hex[:8]}@example.com"
    call(base, "POST", "/dap/register", {"email": email, "password": PASSWORD, "terms_agreed": True, "privacy_agreed": True})
    _, headers, _ = call(base, "POST", "/dap/login", {"email": email, "password": PASSWORD})
    cookie = next(v for k, v in headers.items() if k.lower() == "set-cookie").split(";")[0]
    # Linking replaces the agent's token.
    _, _, linked = call(base, "POST", "/dap/agent/link", {"agent_id": agent["agent_id"], "auth_token": agent["auth_token"]},
                        {"cookie": cookie})
    token = linked["new_auth_token"]
    bearer = {"authorization": f"Bearer {token}"}
    dd_ids, groups = [], []
    for confirm in (True, False):
        _, _, created = call(base, "POST", "/v1/dd/create", {
            "request_id": str(uuid.uuid4()),
            "dd": {"dd_unit_type": "single", "dd_declaration_mode": "self_declared", "decision_type": "internal_service",
                   "decision_action_type": "execute", "origin_context_type": "internal", "selection_state": "SELECTED"},
            "ee": {"ee_preset": "EE_basic"},
        }, bearer)
        dd_ids.append(created["dd_id"])
        if confirm:
            call(base, "POST", "/v1/dd/confirm", {"dd_id": created["dd_id"]}, bearer)
        _, _, detail = call(base, "GET", f"/v1/dd/{created['dd_id']}", None, bearer)
        group = detail.get("lineage_group_id") or detail.get("dd", {}).get("lineage_group_id")
        if group:
            groups.append(group)
    return token, cookie, {"agents": [agent["agent_id"]], "dds": dd_ids, "groups": groups or [str(uuid.uuid4())]}


def config_file(path, known):
    """A schemathesis configuration that uses the real identifiers half of the time."""
    lines = []
    for name, values in known.items():
        lines.append(f"[dictionaries.{name}]")
        lines.append("values = [" + ", ".join(json.dumps(v) for v in values) + "]")
        lines.append("")
    lines.append("[parameters]")
    for key, dictionary in (("path.agent_id", "agents"), ("query.agent_id", "agents"), ("path.dd_id", "dds"),
                            ("query.dd_id", "dds"), ("body.dd_id", "dds"), ("path.group_id", "groups")):
        lines.append(f'"{key}" = {{ dictionary = "{dictionary}", probability = 0.5 }}')
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def count_requests(report_path):
    """Requests sent, from schemathesis's NDJSON event stream."""
    requests = 0
    with open(report_path, encoding="utf-8") as f:
        for line in f:
            if '"response"' not in line and '"request"' not in line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            requests += sum(1 for _ in _interactions(event))
    return requests


def _interactions(node):
    if isinstance(node, dict):
        if "request" in node and "response" in node and isinstance(node.get("request"), dict):
            yield node
            return
        for value in node.values():
            yield from _interactions(value)
    elif isinstance(node, list):
        for value in node:
            yield from _interactions(value)


def run_backend(args, name, database_url):
    work = tempfile.mkdtemp(prefix=f"anchor-fuzz-{name}-")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ)
    env.pop("DATABASE_URL", None)
    command = [args.anchor, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", os.path.join(work, "data"),
               "--rate-limit", "100000000"]
    if database_url:
        command += ["--database-url", database_url]
    log = open(os.path.join(work, "anchor.log"), "w")
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for(base, server)
        token, cookie, known = credentials(base)
        config = os.path.join(work, "schemathesis.toml")
        config_file(config, known)
        started = time.time()
        requests, failures, passed = 0, 0, True
        # Signing out ends the session every other owner operation uses, and
        # a token rotation the agent's token (schemathesis learns the agent's
        # id from responses): those two get a run of their own, last.
        last = ["/dap/logout", "/v1/agent/token/rotate"]
        for part, selection in (("main", [a for p in last for a in ("--exclude-path", p)]),
                                ("last", [a for p in last for a in ("--include-path", p)])):
            report = os.path.join(work, f"events-{part}.ndjson")
            st = [args.schemathesis, "--config-file", config, "run", f"{base}/openapi.json",
                  "--checks", CHECKS,
                  "--max-examples", str(args.max_examples),
                  "--seed", str(args.seed),
                  # One worker: with two threads, hypothesis's ast.parse hits a
                  # CPython 3.11 recursion-counter race ("AST constructor recursion
                  # depth mismatch") while building the coverage phase's cases.
                  "--workers", "1",
                  "--phases", "examples,coverage,fuzzing",
                  "--suppress-health-check", "all",
                  "--request-timeout", "20",
                  "--no-color",
                  "--report", "ndjson", "--report-ndjson-path", report,
                  "-H", f"Authorization: Bearer {token}",
                  "-H", f"Cookie: {cookie}"] + selection
            hooks = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hooks.py")
            result = subprocess.run(st, capture_output=True, text=True, env=dict(env, NO_COLOR="1", SCHEMATHESIS_HOOKS=hooks))
            output = result.stdout + result.stderr
            sys.stdout.write(output)
            requests += count_requests(report) if os.path.exists(report) else 0
            summary = output.split("SUMMARY")[-1] if "SUMMARY" in output else ""
            match = re.search(r"(\d+) failures?", summary)
            failures += int(match.group(1)) if match else 0
            passed = passed and result.returncode == 0
        elapsed = time.time() - started
        crashed = server.poll() is not None
        ok = passed and not crashed and requests > 0
        if crashed:
            print(f"!! anchor exited during the run with {server.returncode}; its log: {log.name}")
        panics = [l for l in open(log.name, encoding="utf-8", errors="replace") if "panicked" in l or "internal error" in l]
        if panics:
            ok = False
            print("!! the server logged failures:\n" + "".join(panics[:20]))
        status = "ok" if ok else "FAILED"
        print(f"fuzz result: {status} {name} requests={requests} failures={failures} seconds={elapsed:.0f}")
        return ok
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
        if os.environ.get("ANCHOR_FUZZ_KEEP"):
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def with_database(url, database):
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, parts.fragment))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--anchor", required=True)
    parser.add_argument("--schemathesis", required=True)
    parser.add_argument("--postgres-url")
    parser.add_argument("--max-examples", type=int, default=int(os.environ.get("ANCHOR_FUZZ_EXAMPLES", "100")))
    parser.add_argument("--seed", type=int, default=int(os.environ.get("ANCHOR_FUZZ_SEED", "20261123")))
    args = parser.parse_args()
    ok = run_backend(args, "sqlite", None)
    if args.postgres_url:
        database = f"anchor_fuzz_{uuid.uuid4().hex[:12]}"
        subprocess.run(["psql", args.postgres_url, "-Atqc", f"create database {database}"], check=True)
        try:
            ok = run_backend(args, "postgres", with_database(args.postgres_url, database)) and ok
        finally:
            subprocess.run(["psql", args.postgres_url, "-Atqc", f"drop database if exists {database} with (force)"], check=False)
    else:
        print("fuzzing skipped PostgreSQL: ANCHOR_TEST_POSTGRES_URL is not set")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
