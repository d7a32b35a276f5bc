"""The desk's read views as HTML: workloads, nodes, executions, the audit trail, and the
navigation between the desk's pages.

Server-rendered tables over ``core.service.desk_views``'s rows; ``approval_page`` wraps
them in a page with its headers. Tables carry a caption and column headers (``scope``) for
screen readers; on a phone the page's style stacks cells (see ``desk_html.STYLE``).
Everything shown is HTML-escaped. The nodes view reloads itself (a notice's countdown);
the others are read on demand.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.service.desk_views import AuditView, ExecutionsView, NodesView, WorkloadsView
from mcp_server.desk_html import e, pager

VIEWS = (
    ("", "Pending approvals"),
    ("workloads", "Workloads"),
    ("nodes", "Nodes"),
    ("executions", "Executions"),
    ("audit", "Audit trail"),
)


def nav(prefix: str, current: str) -> str:
    """Links to every desk page; the current one is marked for screen readers."""
    links = []
    for slug, title in VIEWS:
        href = f"{prefix}/{slug}" if slug else prefix
        here = ' aria-current="page"' if slug == current else ""
        links.append(f'<a href="{href}"{here}>{title}</a>')
    return f'<nav aria-label="desk"><p>{" · ".join(links)}</p></nav>'


def _table(caption: str, heads: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f'<th scope="col">{h}</th>' for h in heads)
    # data-label: on a phone the header row is hidden and each cell names its column.
    body = "".join(
        "<tr>"
        + "".join(f'<td data-label="{h}">{c}</td>' for h, c in zip(heads, row, strict=True))
        + "</tr>"
        for row in rows
    )
    return (
        f'<table class="view"><caption>{e(caption)}</caption><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )


def _unreadable(names: Sequence[str]) -> str:
    if not names:
        return ""
    return f'<p class="bad">Could not read: {e(", ".join(names))}.</p>'


def workloads(url: str, view: WorkloadsView) -> str:
    if not view.rows:
        return _unreadable(view.unreadable) + "<p>No workloads.</p>"
    rows = [
        (
            e(w.id),
            e(w.state),
            e(w.node or "none"),
            f"{e(w.last_good)}<br><small>{e(w.last_good_age)} ago</small>"
            if w.last_good
            else '<span class="bad">none</span>',
            e(", ".join(f"{k}={v}" for k, v in sorted(w.labels.items())) or "-"),
        )
        for w in view.rows
    ]
    heads = ("Workload", "State", "Node", "Last good checkpoint", "Labels")
    caption = f"{view.paging.total} workloads"
    return (
        _unreadable(view.unreadable)
        + _table(caption, heads, rows)
        + pager(url, view.paging.page, view.paging.pages)
    )


def nodes(url: str, view: NodesView) -> str:
    if not view.rows:
        return _unreadable(view.unreadable) + "<p>No nodes.</p>"
    rows = []
    for n in view.rows:
        notices = "".join(
            f'<span class="deadline">{e(x.trigger)} ({e(x.source)}): {e(x.countdown)}</span> '
            for x in n.notices
        )
        drain = f"drained: {e(n.reason or 'no reason given')}" if n.drained else "taking work"
        mark = ' class="bad"' if n.health != "healthy" else ""
        rows.append(
            (
                e(n.id),
                f"<span{mark}>{e(n.health)}</span> <small>{e(n.state)}</small>",
                drain,
                notices or "-",
                str(n.workloads),
            )
        )
    heads = ("Node", "Health", "Drain", "Notices", "Workloads")
    caption = f"{view.paging.total} nodes"
    return (
        _unreadable(view.unreadable)
        + _table(caption, heads, rows)
        + pager(url, view.paging.page, view.paging.pages)
    )


def executions(url: str, view: ExecutionsView) -> str:
    if not view.rows:
        return "<p>No executions yet.</p>"
    rows = []
    for x in view.rows:
        mark = {"succeeded": "ok", "running": ""}.get(x.status.value, "bad")
        status = f'<b class="{mark}">{e(x.status.value)}</b>'
        steps = "".join(
            f"<li>{e(s.name)}: {e(s.status)}"
            + (f' <span class="bad">{e(s.error)}</span>' if s.error else "")
            + "</li>"
            for s in x.steps
        )
        error = f'<br><span class="bad">{e(x.error)}</span>' if x.error else ""
        rows.append(
            (
                f"{e(x.id)}<br><small>{e(f'{x.started_at:%Y-%m-%d %H:%M:%S} UTC')}</small>",
                f"{e(x.action.value)} {e(x.target)}<br><small>by {e(x.principal)}</small>",
                status + error,
                f"<ol>{steps}</ol>" if steps else "-",
            )
        )
    heads = ("Execution", "What", "Result", "Steps")
    caption = f"{view.paging.total} executions, newest first"
    return _table(caption, heads, rows) + pager(url, view.paging.page, view.paging.pages)


def audit(url: str, view: AuditView) -> str:
    v = view.verdict
    if v.ok:
        verdict = (
            f'<p class="ok" role="status"><b>Chain verified</b>: {v.entries} entries intact.</p>'
        )
    else:
        verdict = (
            f'<p class="bad" role="alert"><b>Chain broken</b> at entry {e(v.first_bad_seq)}: '
            f"{e(v.problem)}</p>"
        )
    if not view.rows:
        return verdict + "<p>No audit entries.</p>"
    rows = [
        (
            str(a.seq),
            e(f"{a.ts:%Y-%m-%d %H:%M:%S} UTC"),
            e(a.kind),
            e(a.principal),
            e(a.subject),
            f"<small>{e(', '.join(f'{k}={a.data[k]}' for k in sorted(a.data))[:300])}</small>",
        )
        for a in view.rows
    ]
    heads = ("#", "When", "Kind", "Who", "Subject", "Data")
    caption = f"{view.paging.total} entries, newest first"
    return verdict + _table(caption, heads, rows) + pager(url, view.paging.page, view.paging.pages)
