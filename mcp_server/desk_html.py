"""The approval page's HTML: the desk list, a request's facts, and what happened after.

Server-rendered fragments over the core's models (``DeskPage``, ``RequestFacts``,
``Outcome``); ``approval_page`` wraps them in a page with its headers and forms. No
JavaScript: a page that changes on its own (a countdown, an execution under way) asks the
browser to load it again with ``<meta http-equiv="refresh">``, which the page's strict CSP
allows and which works with scripts off. Everything shown is HTML-escaped (an agent's
reason is data). Risk is a coloured badge with its word, so colour is never the only sign.
"""

from __future__ import annotations

import html
from urllib.parse import quote

from core.guardrails.approvals import ApprovalStatus, ApprovalView
from core.guardrails.desk import DeskPage, Outcome
from core.guardrails.request_facts import RequestFacts, human_duration
from core.model import ExecutionStatus, utcnow

LIST_REFRESH_S = 30  # the list's countdowns and its queue, reloaded this often
RUNNING_REFRESH_S = 2  # a request approved or executing: reloaded until it settles

STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:46rem;margin:1rem auto;padding:0 1rem;"
    "line-height:1.4;color:#111}"
    "th{text-align:left;vertical-align:top;padding-right:1rem}form{margin:1rem 0}"
    "label{display:block;margin:.5rem 0}button{padding:.6rem 1.2rem;font-size:1rem}"
    "a:focus,button:focus,input:focus{outline:3px solid #1a56db;outline-offset:2px}"
    ".risk{display:inline-block;padding:0 .4rem;border-radius:.3rem;font-size:.85rem;"
    "font-weight:600;border:1px solid #555}"
    ".risk-read,.risk-safe{background:#d8f5dd}.risk-disruptive{background:#ffe6a8}"
    ".risk-destructive{background:#ffc9c9}"
    ".deadline{background:#fff0f0;border-left:.3rem solid #b00020;padding:.3rem .6rem;"
    "font-weight:600}"
    "section{border-top:1px solid #ccc;margin-top:1rem}ul{padding-left:1.2rem}"
    "li{margin:.4rem 0}small{color:#444}.ok{color:#0a6b2d}.bad{color:#b00020}"
    "caption{text-align:left;font-weight:600;padding:.3rem 0}"
    ".view td{vertical-align:top;padding:.3rem .6rem .3rem 0;border-bottom:1px solid #ddd;"
    "overflow-wrap:anywhere}"
    ".view ol{margin:0;padding-left:1.1rem}[aria-current]{font-weight:700}"
    "@media (max-width:30rem){body{padding:0 .5rem}table,tbody,tr,th,td{display:block}"
    "th{padding-top:.5rem}button{width:100%}.view thead{display:none}caption{display:block}"
    ".view tr{border-top:2px solid #999;padding:.3rem 0}.view td{border:0;padding:.1rem 0}"
    '.view td::before{content:attr(data-label) ": ";font-weight:600}}'
)


def e(value: object) -> str:
    return html.escape(str(value), quote=True)


def risk_badge(risk: str) -> str:
    return f'<span class="risk risk-{e(risk)}">{e(risk)}</span>'


def listing(prefix: str, desk: DeskPage) -> str:
    """The pending requests grouped by target, urgent first, with the pager."""
    if not desk.groups:
        return "<p>Nothing is waiting for approval.</p>"
    out = []
    for group in desk.groups:
        more = f" · {group.waiting} waiting" if group.waiting > 1 else ""
        head = f"<h2>{e(group.target)}<small>{e(more)}</small></h2>"
        if group.deadline:
            head += f'<p class="deadline">Deadline: {e(group.deadline)}</p>'
        items = "".join(_item(prefix, f) for f in group.requests)
        out.append(f"<section>{head}<ul>{items}</ul></section>")
    return "".join(out) + pager(prefix, desk.page, desk.pages)


def _item(prefix: str, f: RequestFacts) -> str:
    return (
        f'<li><a href="{prefix}/{e(f.id)}">{e(f.headline)}</a> {risk_badge(f.risk.value)}'
        f"<br><small>pause {e(f.pause)} · by {e(f.requester)} · "
        f"request expires {e(f.expires.split(' (')[0])}</small></li>"
    )


def pager(url: str, page: int, pages: int) -> str:
    """Previous/next links of every paged desk page ("" when one page holds it all)."""
    if pages <= 1:
        return ""
    links = []
    if page > 1:
        links.append(f'<a rel="prev" href="{url}?page={page - 1}">Previous</a>')
    links.append(f"page {page} of {pages}")
    if page < pages:
        links.append(f'<a rel="next" href="{url}?page={page + 1}">Next</a>')
    return f'<nav aria-label="pages"><p>{" · ".join(links)}</p></nav>'


def facts_table(f: RequestFacts) -> str:
    rows = [
        ("What", e(f.headline)),
        ("Deadline", f'<span class="deadline">{e(f.deadline)}</span>' if f.urgent
         else e(f.deadline)),
        ("If nobody acts", e(f.if_nothing)),
        ("Why", e(f.why)),
        ("Risk", f"{risk_badge(f.risk.value)} {e(f.risk_line)}"),
        ("Pause", e(f.pause)),
        ("Could lose", e(f.could_lose)),
        ("Cost", e(f.cost)),
        ("Undo", e(f.undo)),
        ("Requested by", e(f.requester)),
        ("Status", e(f.status.value)),
        ("Request expires", e(f.expires)),
    ]  # fmt: skip
    return "<table>" + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def outcome(view: ApprovalView, result: Outcome) -> tuple[str, bool]:
    """What happened after the decision, and whether the page should reload (still moving)."""
    ex = result.execution
    if view.status is ApprovalStatus.DENIED:
        return "<h2>Outcome</h2><p>Denied: nothing runs.</p>", False
    if ex is None:
        if view.status is ApprovalStatus.APPROVED:
            return ("<h2>Outcome</h2><p>Approved; waiting for the agent to run it. This page "
                    "reloads on its own.</p>", True)  # fmt: skip
        return f"<h2>Outcome</h2><p>Not run ({e(view.status.value)}).</p>", False
    running = ex.status is ExecutionStatus.RUNNING
    steps = "".join(
        f"<li>{e(s.name)}: <b>{e(s.status)}</b>"
        + (f" ({e(human_duration((s.finished_at - s.started_at).total_seconds()))})"
           if s.started_at and s.finished_at else "")
        + (f' <span class="bad">{e(s.error)}</span>' if s.error else "")
        + "</li>"
        for s in ex.steps
    )  # fmt: skip
    took = ""
    if ex.finished_at is not None:
        took = f" in {human_duration((ex.finished_at - ex.started_at).total_seconds())}"
    elif running:
        took = f", running for {human_duration((utcnow() - ex.started_at).total_seconds())}"
    mark = "" if running else (' class="ok"' if ex.status is ExecutionStatus.SUCCEEDED
                               else ' class="bad"')  # fmt: skip
    verdict = f"<p>Execution {e(ex.id)}: <b{mark}>{e(ex.status.value)}</b>{e(took)}</p>"
    if ex.error:
        verdict += f'<p class="bad">{e(ex.error)}</p>'
    now = f"<p>Now: {e(result.workload_now)}</p>" if result.workload_now and not running else ""
    return f"<h2>Outcome</h2>{verdict}<ol>{steps}</ol>{now}", running


def detail_link(prefix: str, approval_id: str) -> str:
    return f"{prefix}/{quote(approval_id)}"
