"""The hand-written layer over the generated models: one client, sync and async.

Each resource method describes its call (method, path, body, query) once; the
sync client sends it with httpx.Client, the async one with httpx.AsyncClient
(its methods return awaitables). Request bodies given as dicts are checked
against the operation's generated model before they leave; answers are parsed
into the generated model the operation documents for their status.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import httpx
from pydantic import BaseModel

from . import models
from ._operations import OPERATIONS

DEFAULT_TIMEOUT = 30.0
# 429 and 503 come before anything is recorded: such a request is sent again,
# after the Retry-After the service names (at most MAX_WAIT seconds), this many times.
RETRIES = 2
MAX_WAIT = 10.0


def _retry_after(reply: httpx.Response, attempt: int) -> float | None:
    """Seconds to wait before sending again, or None to give the answer back."""
    if reply.status_code not in (429, 503) or attempt >= RETRIES:
        return None
    try:
        wait = float(reply.headers.get("retry-after", "1"))
    except ValueError:
        wait = 1.0
    return wait if 0 <= wait <= MAX_WAIT else None


class AnchorError(Exception):
    """The service refused a request: its HTTP status and documented error_code."""

    def __init__(self, status: int, error_code: str, message: str, body: Any = None):
        super().__init__(f"{status} {error_code}: {message}")
        self.status = status
        self.error_code = error_code
        self.message = message
        self.body = body


class PaymentRequired(AnchorError):
    """402: Trial cannot pay and no payment came with the request.

    `challenge` is the x402 challenge the service sent (the decoded
    PAYMENT-REQUIRED header, or the body): what to pay, to whom, and the DAB.
    """

    def __init__(self, status: int, error_code: str, message: str, body: Any, challenge: dict[str, Any]):
        super().__init__(status, error_code, message, body)
        self.challenge = challenge


class PaymentRefused(PaymentRequired):
    """The caller's `approve` callback declined to pay the quote; nothing was paid."""

    def __init__(self, quote: Quote):
        super().__init__(402, "PAYMENT_REFUSED_BY_CALLER", f"not paying {quote.amount_dac} DAC for {quote.operation}", None, quote.challenge)
        self.quote = quote


@dataclass(frozen=True)
class Quote:
    """What a paid call costs, shown to `approve` before anything is signed.

    `amount_units` is in USDC base units (1 DAC = 1000 units), `amount_dac`
    the same in DAC, exact. `dab` is the agent's DAB as the service reports it
    now (`GET /v1/dab/status`), or None if it could not be read.
    """

    operation: str
    amount_units: int
    amount_dac: Decimal
    network: str
    asset: str
    pay_to: str
    dab: Any
    challenge: dict[str, Any]


def _quote(call: Call, challenge: dict[str, Any], dab: Any) -> Quote:
    offer = (challenge.get("accepts") or [{}])[0]
    units = int(offer.get("amount", "0"))
    return Quote(
        operation=f"{call.method} {call.url}",
        amount_units=units,
        amount_dac=Decimal(units) / 1000,
        network=offer.get("network", ""),
        asset=offer.get("asset", ""),
        pay_to=offer.get("payTo", ""),
        dab=dab,
        challenge=challenge,
    )


@dataclass
class Call:
    """One operation to send: `path` is the documented template, `url` the filled one."""

    method: str
    path: str
    url: str
    body: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    auth: bool = True
    # Run on the parsed answer before it is returned (the register call keeps the token).
    after: Callable[[Any], Any] | None = None
    # A body that is not JSON (a tool's component), with its content type.
    content: bytes | None = None
    content_type: str | None = None


def _operation(method: str, path: str) -> tuple[str | None, dict[int, str | None]]:
    """The operation of `path`, a template (`/v1/dd/{dd_id}`) or a filled one (`/v1/dd/1c5…`)."""
    found = OPERATIONS.get((method, path))
    if found is not None:
        return found
    parts = path.split("/")
    for (m, template), operation in OPERATIONS.items():
        pieces = template.split("/")
        if m == method and len(pieces) == len(parts) and all(
            p == q or (p.startswith("{") and p.endswith("}") and q) for p, q in zip(pieces, parts)
        ):
            return operation
    return None, {}


def _dump(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    return value


def _checked_body(call: Call) -> Any:
    """The JSON body, validated against the operation's request model when it has one."""
    if call.body is None:
        return None
    body = _dump(call.body)
    request_model = _operation(call.method, call.path)[0]
    if request_model and isinstance(body, Mapping):
        model = getattr(models, request_model)
        body = model.model_validate(body).model_dump(mode="json", exclude_none=True)
    return body


def _challenge(reply: httpx.Response, body: Any) -> dict[str, Any]:
    header = reply.headers.get("payment-required")
    if header:
        try:
            return json.loads(base64.b64decode(header))
        except (ValueError, json.JSONDecodeError):
            pass
    return body if isinstance(body, dict) else {}


def _answer(call: Call, reply: httpx.Response) -> Any:
    """The parsed answer, or the service's refusal raised as AnchorError."""
    try:
        body = reply.json() if reply.content else None
    except json.JSONDecodeError:
        body = reply.text
    if reply.status_code >= 400:
        error_code = body.get("error_code", "") if isinstance(body, dict) else ""
        message = body.get("message", reply.reason_phrase) if isinstance(body, dict) else str(body)
        if reply.status_code == 402:
            challenge = _challenge(reply, body)
            # A challenge carries no message: what is bought and why is in it.
            resource = challenge.get("resource") if isinstance(challenge.get("resource"), dict) else {}
            explained = "; ".join(str(part) for part in (challenge.get("error"), resource.get("description")) if part)
            raise PaymentRequired(402, error_code or "PAYMENT_REQUIRED", explained or message, body, challenge)
        raise AnchorError(reply.status_code, error_code or f"HTTP_{reply.status_code}", message, body)
    responses = _operation(call.method, call.path)[1]
    name = responses.get(reply.status_code)
    parsed = getattr(models, name).model_validate(body) if name and isinstance(body, dict) else body
    return call.after(parsed) if call.after else parsed


def _query(params: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in params.items():
        if value is None:
            continue
        out[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


Approve = Callable[[Quote], bool]
# Read before paying, so that `approve` sees the agent's DAB.
DAB_STATUS = Call("GET", "/v1/dab/status", "/v1/dab/status")


class _Base:
    def __init__(self, base_url: str, token: str | None, payer: Any, approve: Approve | None):
        self.base_url = base_url.rstrip("/")
        self.token = token
        # An x402 client of the official `x402` package (x402ClientSync for
        # Anchor, x402Client for AsyncAnchor) with its schemes registered.
        self.payer = payer
        self.approve = approve
        self.agents = Agents(self)
        self.decisions = Decisions(self)
        self.ara = Ara(self)
        self.tsl = Tsl(self)
        self.earned = Earned(self)
        self.dur = Dur(self)
        self.log = Log(self)

    def _headers(self, call: Call) -> dict[str, str]:
        headers = {"accept": "application/json"}
        if call.auth and self.token:
            headers["authorization"] = f"Bearer {self.token}"
        if call.content_type:
            headers["content-type"] = call.content_type
        return headers

    def _request(self, call: Call, body: Any, headers: dict[str, str]) -> dict[str, Any]:
        """httpx.request's arguments for `call`."""
        payload = {"content": call.content} if call.content is not None else {"json": body}
        return {"method": call.method, "url": self.base_url + call.url, "params": _query(call.params), "headers": headers, **payload}

    def _send(self, call: Call) -> Any:  # pragma: no cover - each client sends its own way
        raise NotImplementedError

    def _approved(self, call: Call, reply: httpx.Response, dab: Any) -> Quote:
        """The quote for the 402 `reply` to `call`, once `approve` agreed to it."""
        quote = _quote(call, _challenge(reply, reply.json() if reply.content else None), dab)
        if self.approve is not None and not self.approve(quote):
            raise PaymentRefused(quote)
        return quote


class Anchor(_Base):
    """A synchronous client: `Anchor("http://127.0.0.1:8080")`, then `agents.register()`."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        payer: Any = None,
        approve: Approve | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        http: httpx.Client | None = None,
    ):
        super().__init__(base_url, token, payer, approve)
        self._http = http or httpx.Client(timeout=timeout)

    def _send(self, call: Call) -> Any:
        body, attempt, extra = _checked_body(call), 0, {}
        while True:
            headers = {**self._headers(call), **extra}
            reply = self._http.request(**self._request(call, body, headers))
            if reply.status_code == 402 and self.payer is not None and not extra:
                extra = self._pay(call, reply)
                continue
            wait = _retry_after(reply, attempt)
            if wait is None:
                return _answer(call, reply)
            time.sleep(wait)
            attempt += 1

    def _pay(self, call: Call, reply: httpx.Response) -> dict[str, str]:
        """The headers that pay for `call`, once `approve` agreed to the quote."""
        from x402.http import x402HTTPClientSync

        try:
            dab = self._send(DAB_STATUS)
        except AnchorError:
            dab = None
        self._approved(call, reply, dab)
        headers, _ = x402HTTPClientSync(self.payer).handle_402_response(dict(reply.headers), reply.content, self.base_url + call.url)
        return headers

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Anchor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncAnchor(_Base):
    """The same client for asyncio: every resource method returns an awaitable."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        payer: Any = None,
        approve: Approve | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        http: httpx.AsyncClient | None = None,
    ):
        super().__init__(base_url, token, payer, approve)
        self._http = http or httpx.AsyncClient(timeout=timeout)

    async def _send(self, call: Call) -> Any:
        body, attempt, extra = _checked_body(call), 0, {}
        while True:
            headers = {**self._headers(call), **extra}
            reply = await self._http.request(**self._request(call, body, headers))
            if reply.status_code == 402 and self.payer is not None and not extra:
                extra = await self._pay(call, reply)
                continue
            wait = _retry_after(reply, attempt)
            if wait is None:
                return _answer(call, reply)
            await asyncio.sleep(wait)
            attempt += 1

    async def _pay(self, call: Call, reply: httpx.Response) -> dict[str, str]:
        from x402.http import x402HTTPClient

        try:
            dab = await self._send(DAB_STATUS)
        except AnchorError:
            dab = None
        self._approved(call, reply, dab)
        headers, _ = await x402HTTPClient(self.payer).handle_402_response(dict(reply.headers), reply.content, self.base_url + call.url)
        return headers

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncAnchor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _Resource:
    def __init__(self, client: _Base):
        self._client = client

    def _get(self, path: str, url: str | None = None, **params: Any) -> Any:
        return self._client._send(Call("GET", path, url or path, params=params))

    def _post(self, path: str, body: Any = None, url: str | None = None, **params: Any) -> Any:
        return self._client._send(Call("POST", path, url or path, body=body if body is not None else {}, params=params))


class Agents(_Resource):
    def register(self, **fields: Any) -> Any:
        """Registers a new agent; the client keeps its auth_token for the calls that follow."""

        def keep(registered: models.Registered) -> models.Registered:
            self._client.token = registered.auth_token
            return registered

        return self._client._send(Call("POST", "/v1/agent/register", "/v1/agent/register", body=fields, auth=False, after=keep))

    def trial(self) -> Any:
        return self._get("/v1/trial/status")

    def disclosure(self, level: str) -> Any:
        """Sets what other agents may observe of this agent (none, summary, full, ...)."""
        return self._client._send(Call("PUT", "/v1/agent/disclosure", "/v1/agent/disclosure", body={"disclosure_level": level}))


class Decisions(_Resource):
    def create(
        self,
        *,
        dd: Mapping[str, Any] | models.DDInput,
        ee: Mapping[str, Any] | models.EEInput,
        request_id: str | uuid.UUID | None = None,
        **extra: Any,
    ) -> Any:
        """Declares a decision (metadata only). `request_id` makes a retry safe; one is made if not given."""
        body = {"request_id": str(request_id or uuid.uuid4()), "dd": _dump(dd), "ee": _dump(ee), **extra}
        return self._post("/v1/dd/create", body)

    def confirm(self, dd_id: str | uuid.UUID) -> Any:
        return self._post("/v1/dd/confirm", {"dd_id": str(dd_id)})

    def get(self, dd_id: str | uuid.UUID) -> Any:
        return self._get("/v1/dd/{dd_id}", f"/v1/dd/{dd_id}")

    def list(self, *, limit: int | None = None, offset: int | None = None, **params: Any) -> Any:
        return self._get("/v1/dd/list", limit=limit, offset=offset, **params)

    def receipt(self, dd_id: str | uuid.UUID) -> Any:
        return self._get("/v1/dd/{dd_id}/receipt", f"/v1/dd/{dd_id}/receipt")

    def evidence(self, dd_id: str | uuid.UUID) -> Any:
        """The dispute-evidence bundle (anchor-evidence/1): `anchor verify --evidence` checks it offline."""
        return self._get("/v1/dd/{dd_id}/evidence", f"/v1/dd/{dd_id}/evidence")

    def payment(self, dd_id: str | uuid.UUID) -> Any:
        return self._get("/v1/payment/{dd_id}/status", f"/v1/payment/{dd_id}/status")


class Ara(_Resource):
    """Statistics of recorded history; `observe(path)` reaches any /v1/ara/ view by its path."""

    def environment(self, **params: Any) -> Any:
        return self._get("/v1/ara/environment", **params)

    def observe(self, view: str, **params: Any) -> Any:
        path = "/v1/ara/" + view.strip("/")
        return self._get(path, **params)

    def query(self, body: Mapping[str, Any]) -> Any:
        return self._post("/v1/ara/query", dict(body))


class Tsl(_Resource):
    def register(self, body: Mapping[str, Any]) -> Any:
        """Lists a tool on the market: a name, a price, the ARA observations it reads."""
        return self._post("/v1/tsl/tool/register", dict(body))

    def upload(self, tool_id: str, component: bytes) -> Any:
        """Uploads the tool's WebAssembly component (anchor:tool@1.0.0): its next version."""
        path = "/v1/tsl/tool/{tool_id}/component"
        return self._client._send(Call("PUT", path, f"/v1/tsl/tool/{tool_id}/component", content=component, content_type="application/wasm"))

    def tools(self, **params: Any) -> Any:
        return self._get("/v1/tsl/tools", **params)

    def tool(self, tool_id: str) -> Any:
        return self._get("/v1/tsl/tool/{tool_id}", f"/v1/tsl/tool/{tool_id}")

    def purchase(self, body: Mapping[str, Any]) -> Any:
        return self._post("/v1/tsl/purchase", dict(body))

    def purchases(self, **params: Any) -> Any:
        return self._get("/v1/tsl/purchases", **params)

    def run(self, tool_id: str, body: Mapping[str, Any] | None = None) -> Any:
        return self._post("/v1/tsl/tool/{tool_id}/run", dict(body or {}), f"/v1/tsl/tool/{tool_id}/run")


class Earned(_Resource):
    def balance(self) -> Any:
        return self._get("/v1/earned-dac/balance")

    def ledger(self, *, limit: int | None = None, offset: int | None = None) -> Any:
        return self._get("/v1/earned-dac/ledger", limit=limit, offset=offset)


class Dur(_Resource):
    def summary(self, **params: Any) -> Any:
        return self._get("/v1/dur/summary", **params)

    def transactions(self, **params: Any) -> Any:
        return self._get("/v1/dur/transactions", **params)


class Log(_Resource):
    """The transparency log: its key, signed checkpoints and consistency proofs (no token needed)."""

    def key(self) -> Any:
        return self._client._send(Call("GET", "/v1/log/key", "/v1/log/key", auth=False))

    def checkpoint(self) -> str:
        return self._client._send(Call("GET", "/v1/log/checkpoint", "/v1/log/checkpoint", auth=False))

    def consistency(self, first: int, second: int) -> Any:
        return self._client._send(Call("GET", "/v1/log/consistency", "/v1/log/consistency", params={"from": first, "to": second}, auth=False))
