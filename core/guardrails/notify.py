"""Tell people that an approval is waiting: a JSON POST to a Slack-compatible webhook.

The body has ``text`` (the whole message, for clients that show only that) and ``blocks``
(Slack's layout: a header, a section of fields, the code, and how to approve), plus a
``clawpoint`` object with the same facts as data for non-Slack receivers. One short timeout,
a few retries with backoff on connection errors and 5xx/429; a 4xx other than 429 is final.
The webhook is a people path, so the message carries the one-time code; point it only at a
channel agents cannot read. Every text that reaches Slack's markup is escaped (``&``, ``<``,
``>``, as Slack's formatting rules ask) and marked ``verbatim``: an agent's reason such as
``<!channel>`` or ``<http://x|y>`` arrives as those characters, never as a mention or a
disguised link. The ``clawpoint`` object carries the raw values as data. Limits: synchronous
(the guard runs in a worker thread); no signing of the body (use a secret URL, as Slack does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core import logs
from core.guardrail_settings import NotifyConfig as NotifyConfig
from core.guardrails.approvals import ApprovalView
from core.guardrails.prompts import ApprovalPath, ApprovalText, format_code

if TYPE_CHECKING:
    import httpx2

log = logs.get_logger(__name__)


class _Retryable(Exception):
    pass


def slack_escape(text: str) -> str:
    """Text as Slack shows it literally: its three control characters become entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def mrkdwn(text: str) -> dict[str, Any]:
    """A Slack mrkdwn text object for text already escaped; ``verbatim`` stops Slack from
    turning names, ``@channel`` or bare URLs in it into mentions and links."""
    return {"type": "mrkdwn", "text": text, "verbatim": True}


def build_payload(
    view: ApprovalView, text: ApprovalText, code: str, paths: list[ApprovalPath]
) -> dict[str, Any]:
    """The webhook body (documented in docs/guardrails.md)."""
    esc = slack_escape

    def field(label: str, value: str) -> dict[str, Any]:
        return mrkdwn(f"*{label}*\n{esc(value)}")

    how = "\n".join(f"• {esc(h)}" for h in text.how_to_approve) or "no path available"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": "Approval needed"}},
        {"type": "section", "text": mrkdwn(esc(text.headline))},
        {
            "type": "section",
            "fields": [
                field("Why", text.why),
                field("Risk", text.risk),
                field("Deadline", text.deadline),
                field("If nobody acts", text.if_nothing),
                field("Pause", text.pause),
                field("Cost", text.cost),
                field("Could lose", text.could_lose),
                field("Undo", text.undo),
            ],
        },
        {
            "type": "section",
            "text": mrkdwn(f"*Code:* `{format_code(code)}`  (expires {esc(text.expires)})"),
        },
        {"type": "section", "text": mrkdwn(f"*How to approve*\n{how}")},
    ]
    return {
        "text": esc(text.as_text(code=code)),
        "blocks": blocks,
        "clawpoint": {
            "approval_id": view.id,
            "plan_hash": view.plan_hash,
            "action": view.action,
            "target": view.target,
            "risk": view.risk.value,
            "requester": view.requester,
            "reason": text.why,
            "deadline": text.deadline,
            "if_nothing": text.if_nothing,
            "expected_pause": text.pause,
            "cost_effect": text.cost,
            "undo": text.undo,
            "expires_at": view.expires_at.isoformat(),
            "code": code,
            "paths": [p.model_dump() for p in paths if p.available],
        },
    }


class Notifier:
    def __init__(self, config: NotifyConfig, *, transport: httpx2.BaseTransport | None = None):
        self.config = config
        self._transport = transport

    @property
    def enabled(self) -> bool:
        return self.config.webhook_url is not None

    def send(self, payload: dict[str, Any]) -> bool:
        """POST the payload; True if the receiver accepted it. Never raises for delivery."""
        url = self.config.webhook_url
        if url is None:
            return False
        # Imported here: every process that builds the guard would pay for them otherwise.
        import httpx2
        from tenacity import (
            RetryError,
            retry,
            retry_if_exception_type,
            stop_after_attempt,
            wait_exponential,
        )

        @retry(
            stop=stop_after_attempt(self.config.attempts),
            wait=wait_exponential(multiplier=0.2, max=2),
            retry=retry_if_exception_type(_Retryable),
        )
        def post(client: httpx2.Client) -> None:
            try:
                response = client.post(url, json=payload, headers=self.config.headers)
            except httpx2.TransportError as exc:
                raise _Retryable(str(exc)) from exc
            if response.status_code == 429 or response.status_code >= 500:
                raise _Retryable(f"HTTP {response.status_code}")
            response.raise_for_status()

        try:
            with httpx2.Client(timeout=self.config.timeout_s, transport=self._transport) as client:
                post(client)
        except (RetryError, httpx2.HTTPError) as exc:
            # The URL is a secret (Slack style): log the host only.
            log.warning("webhook delivery failed", host=httpx2.URL(url).host, error=str(exc))
            return False
        return True
