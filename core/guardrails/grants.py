"""Standing approvals: a person pre-authorises one action in a scope, with a budget and an expiry.

Example: "checkpoint-and-requeue any job in partition gpu on a spot interruption notice, at
most 20 per hour, for 7 days" - a 120-second notice cannot wait for a person. A grant turns
the policy's "approve" into "allow" for plans it matches; it never overrides a "deny" or a
limit. ``claim`` finds a matching grant with budget left and records the use in the same
``BEGIN IMMEDIATE`` transaction, so concurrent claims cannot overspend the hourly budget.

Scope keys (all must match; a key the plan lacks never matches, failing closed):
``trigger``, ``principals``, ``backend``, ``target``, the plan's scope keys ``namespace``,
``partition``, ``node`` and ``pool``, ``labels.KEY`` (workload label) and ``node_labels.KEY``
(node label). ``principals`` is a comma-separated list of principal kinds (``scheduler``,
``agent``, ``person``): the grant covers only plans run by one of them, e.g.
``principals=scheduler`` for the watch loop alone, so that an agent acting on the same
evidence still asks a person. Any other key (a misspelling such as ``partiton``, or ``../x``)
or an unknown principal kind is refused when the grant is made (``check_scope``), naming the
valid ones: a grant that can never match is a mistake.

``trigger`` is matched against evidence, never against a claim: the grant applies only while
``core.guardrails.evidence`` holds a live sighting of that trigger, made by clawpoint itself,
for the plan's target, workload or node. The ``trigger`` a caller passes (watch, a runbook
run, an agent) is only recorded in the audit as what it claimed. The evidence a grant used is
returned on the ``Grant`` (``evidence``), stored with the plan hash and audited. Before a
claim, the live evidence it could rest on is checked again (``EvidenceStore.confirm``): a
sighting the world now contradicts is ended and covers nothing.
"""

from __future__ import annotations

import difflib
import re
import secrets
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from core import errors
from core.guardrails import schema
from core.guardrails.audit import AuditLog
from core.guardrails.durations import parse_duration
from core.guardrails.evidence import Evidence, EvidenceStore, canonical_trigger, plan_subjects
from core.model import TRIGGERS, Action, Plan, Principal, PrincipalKind, utcnow
from core.schema_base import Model
from core.state.db import Database, dumps, loads


class Grant(Model):
    id: str
    action: Action
    scope: dict[str, str]
    max_per_hour: int
    created_at: datetime
    expires_at: datetime
    reason: str
    granted_by: str
    revoked_at: datetime | None = None
    revoked_by: str | None = None
    used_last_hour: int = 0
    # The sighting that let a trigger-scoped grant cover the plan it was matched against.
    evidence: Evidence | None = None

    def active(self, now: datetime) -> bool:
        return self.revoked_at is None and now < self.expires_at


PRINCIPALS_KEY = "principals"


def principal_kinds(value: str) -> frozenset[PrincipalKind]:
    """The kinds a ``principals`` scope names (``scheduler,agent``); InvalidInput otherwise."""
    names = [v.strip().lower() for v in value.split(",") if v.strip()]
    known = {k.value: k for k in PrincipalKind}
    wrong = [n for n in names if n not in known]
    if not names or wrong:
        raise errors.InvalidInput(
            f"scope principals={value!r} names no known principal kind"
            + (f" ({', '.join(wrong)} unknown)" if wrong else ""),
            hint=f"use a comma-separated list of: {', '.join(known)} (e.g. principals=scheduler)",
            details={"valid": list(known)},
        )
    return frozenset(known[n] for n in names)


def principal_matches(scope: dict[str, str], principal: Principal | None) -> bool:
    """A grant limited to some principal kinds covers only their plans (unknown: none)."""
    value = scope.get(PRINCIPALS_KEY)
    if value is None:
        return True
    if principal is None:
        return False
    try:
        return principal.kind in principal_kinds(value)
    except errors.InvalidInput:  # a stored value no longer valid: fail closed
        return False


# What each plain scope key of a grant matches in a plan, and each label group (``labels.KEY``):
# fields of the plan and its PlanScope, never string keys, so mypy checks them.
_PLAN_VALUES: dict[str, Callable[[Plan], str | None]] = {
    "backend": lambda p: p.backend,
    "target": lambda p: p.target,
    "namespace": lambda p: p.scope.namespace,
    "partition": lambda p: p.scope.partition,
    "node": lambda p: p.scope.node,
    "pool": lambda p: p.scope.pool,
}
_PLAN_LABELS: dict[str, Callable[[Plan], dict[str, str] | None]] = {
    "labels": lambda p: p.scope.labels,
    "node_labels": lambda p: p.scope.node_labels,
}
# The scope keys a grant may name (see the module docstring), and the label key prefixes.
SCOPE_KEYS = ("trigger", PRINCIPALS_KEY, *_PLAN_VALUES)
LABEL_PREFIXES = tuple(f"{group}." for group in _PLAN_LABELS)
# A label key as Kubernetes, Slurm and local labels write it: ``team``, ``app.kubernetes.io/name``.
_LABEL_KEY = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._/-]{0,252}[A-Za-z0-9])?$")
MAX_SCOPE_VALUE = 256


def scope_keys_help() -> str:
    return ", ".join([*SCOPE_KEYS, *(p + "KEY" for p in LABEL_PREFIXES)])


def check_scope(scope: dict[str, str]) -> dict[str, str]:
    """``scope`` when every key is one a plan can match and every value is a short printable
    string; otherwise ``InvalidInput`` naming the key and the valid ones (nothing is made)."""
    for key, value in scope.items():
        label = next((key[len(p) :] for p in LABEL_PREFIXES if key.startswith(p)), None)
        if key not in SCOPE_KEYS and (label is None or not _LABEL_KEY.match(label)):
            close = difflib.get_close_matches(key, SCOPE_KEYS, n=1)
            raise errors.InvalidInput(
                f"unknown scope key {key[:80]!r}"
                + (f" (did you mean {close[0]!r}?)" if close else ""),
                hint=f"scope keys are: {scope_keys_help()}",
                details={"valid": [*SCOPE_KEYS, *(p + "KEY" for p in LABEL_PREFIXES)]},
            )
        if (not isinstance(value, str) or not value.strip() or len(value) > MAX_SCOPE_VALUE
                or not value.isprintable()):  # fmt: skip
            raise errors.InvalidInput(
                f"scope {key}: the value must be 1 to {MAX_SCOPE_VALUE} printable characters",
                hint=f"e.g. {key}=gpu",
            )
    if PRINCIPALS_KEY in scope:
        principal_kinds(str(scope[PRINCIPALS_KEY]))  # refuse a misspelt kind now
    if "trigger" in scope:
        check_trigger(str(scope["trigger"]))
    return scope


def check_trigger(value: str) -> str:
    """A trigger clawpoint observes (``core.model.TRIGGERS``, or an alias of one). A grant
    scoped to any other (``spot-interuption``) would wait for evidence that never comes,
    and the person who made it would believe that signal handled: refused, with the list."""
    trigger = canonical_trigger(value)
    if trigger not in TRIGGERS:
        close = difflib.get_close_matches(trigger, sorted(TRIGGERS), n=1)
        raise errors.InvalidInput(
            f"scope trigger={value[:80]!r} names no signal clawpoint observes"
            + (f" (did you mean {close[0]!r}?)" if close else ""),
            hint="triggers are: " + ", ".join(sorted(TRIGGERS)),
            details={"valid": sorted(TRIGGERS)},
        )
    return trigger


def scope_matches(scope: dict[str, str], plan: Plan) -> bool:
    """Every key but ``trigger`` (which ``GrantStore`` checks against evidence) and
    ``principals`` (checked against who runs the plan)."""
    for key, wanted in scope.items():
        if key in ("trigger", PRINCIPALS_KEY):
            continue
        group, dot, label = key.partition(".")
        if dot and group in _PLAN_LABELS:
            have = (_PLAN_LABELS[group](plan) or {}).get(label)
        elif key in _PLAN_VALUES:
            have = _PLAN_VALUES[key](plan)
        else:  # a key check_scope refuses (stored before it did): fail closed
            return False
        if have is None or have != wanted:
            return False
    return True


class GrantStore:
    def __init__(self, db: Database, *, audit: AuditLog) -> None:
        self.db = db
        self.audit = audit
        schema.ensure_schema(db)
        self.evidence = EvidenceStore(db, audit=audit)

    def _covers(
        self, grant: Grant, plan: Plan, principal: Principal | None, now: datetime
    ) -> Grant | None:
        """``grant`` (with the evidence it rests on) when it covers ``plan`` run by
        ``principal`` now, else None."""
        if grant.action is not plan.action or not scope_matches(grant.scope, plan):
            return None
        if not principal_matches(grant.scope, principal):
            return None
        wanted = grant.scope.get("trigger")
        if wanted is None:
            return grant
        seen = self.evidence.find(wanted, plan_subjects(plan), now)
        return grant.model_copy(update={"evidence": seen}) if seen is not None else None

    def grant(
        self,
        action: Action,
        scope: dict[str, str],
        *,
        max_per_hour: int,
        expires: str | timedelta,
        reason: str,
        granted_by: Principal,
    ) -> Grant:
        if granted_by.kind is not PrincipalKind.PERSON:
            raise errors.PolicyDenied(
                f"only a person may grant a standing approval; {granted_by} is a "
                f"{granted_by.kind.value}",
                hint="ask a person to run 'clawpoint approvals grant'",
            )
        if max_per_hour < 1:
            raise errors.InvalidInput(
                f"max_per_hour must be at least 1, got {max_per_hour}",
                hint="revoke the grant instead of giving it a zero budget",
            )
        if not reason.strip():
            raise errors.InvalidInput(
                "a standing approval needs a reason", hint="say why, e.g. 'spot notices'"
            )
        check_scope(scope)
        lifetime = parse_duration(expires, what="expires")
        now = utcnow()
        grant_id = "grt-" + secrets.token_hex(5)
        with self.db.write() as conn:
            conn.execute(
                "INSERT INTO grants(id, action, scope, max_per_hour, created_at, expires_at, "
                "reason, granted_by) VALUES(?,?,?,?,?,?,?,?)",
                (
                    grant_id,
                    action.value,
                    dumps({str(k): str(v) for k, v in scope.items()}),
                    max_per_hour,
                    now.isoformat(),
                    (now + lifetime).isoformat(),
                    reason,
                    granted_by.id,
                ),
            )
        self.audit.append(
            "grant.created",
            principal=str(granted_by),
            subject=grant_id,
            data={
                "action": action.value,
                "scope": scope,
                "max_per_hour": max_per_hour,
                "expires_in_s": lifetime.total_seconds(),
                "reason": reason,
            },
        )
        return self.get(grant_id)

    def get(self, grant_id: str) -> Grant:
        with self.db.read() as conn:
            row = conn.execute("SELECT * FROM grants WHERE id=?", (grant_id,)).fetchone()
            if row is None:
                raise errors.NotFound(
                    f"no standing approval {grant_id!r}",
                    hint="list them with 'clawpoint approvals grants'",
                )
            return _grant(row, _uses_since(conn, grant_id, utcnow() - timedelta(hours=1)))

    def list(self, *, include_inactive: bool = False) -> list[Grant]:
        now = utcnow()
        with self.db.read() as conn:
            rows = conn.execute("SELECT * FROM grants ORDER BY created_at").fetchall()
            grants = [_grant(r, _uses_since(conn, r["id"], now - timedelta(hours=1))) for r in rows]
        return [g for g in grants if include_inactive or g.active(now)]

    def revoke(self, grant_id: str, *, by: Principal) -> Grant:
        if by.kind is not PrincipalKind.PERSON:
            raise errors.PolicyDenied(
                f"only a person may revoke a standing approval; {by} is a {by.kind.value}",
                hint="ask a person to run 'clawpoint approvals revoke'",
            )
        self.get(grant_id)
        with self.db.write() as conn:
            conn.execute(
                "UPDATE grants SET revoked_at=?, revoked_by=? WHERE id=? AND revoked_at IS NULL",
                (utcnow().isoformat(), by.id, grant_id),
            )
        self.audit.append("grant.revoked", principal=str(by), subject=grant_id, data={})
        return self.get(grant_id)

    def match(
        self, plan: Plan, trigger: str | None = None, principal: Principal | None = None
    ) -> Grant | None:
        """The first active grant covering this plan, run by ``principal``, with budget left
        (read only). ``trigger`` is what the caller claims; it is not used to match (see the
        module). A grant limited to some principals matches nothing without ``principal``."""
        now = utcnow()
        for grant in self.list():
            if grant.active(now) and grant.used_last_hour < grant.max_per_hour:
                covering = self._covers(grant, plan, principal, now)
                if covering is not None:
                    return covering
        return None

    def claim(self, plan: Plan, principal: Principal, trigger: str | None = None) -> Grant | None:
        """Like ``match``, and record one use of the grant's budget in the same transaction.

        First, the live evidence trigger-scoped grants of this action could rest on is
        checked again (``EvidenceStore.confirm``, outside the write transaction: it may read
        the world), so a sighting contradicted since the last watch pass covers nothing."""
        triggers = [
            g.scope["trigger"] for g in self.list()
            if g.action is plan.action and "trigger" in g.scope
            and principal_matches(g.scope, principal)
        ]  # fmt: skip
        if triggers:
            self.evidence.confirm(triggers, plan_subjects(plan))
        now = utcnow()
        chosen: Grant | None = None
        with self.db.write() as conn:
            rows = conn.execute(
                "SELECT * FROM grants WHERE action=? AND revoked_at IS NULL AND expires_at>? "
                "ORDER BY created_at",
                (plan.action.value, now.isoformat()),
            ).fetchall()
            for row in rows:
                used = _uses_since(conn, row["id"], now - timedelta(hours=1))
                covering = self._covers(_grant(row, used), plan, principal, now)
                if covering is not None and used < covering.max_per_hour:
                    conn.execute(
                        "INSERT INTO grant_uses(grant_id, ts, plan_hash, principal) "
                        "VALUES(?,?,?,?)",
                        (covering.id, now.isoformat(), plan.hash, str(principal)),
                    )
                    chosen = covering.model_copy(update={"used_last_hour": used + 1})
                    break
        if chosen is not None:
            if chosen.evidence is not None:
                self.evidence.record_use(
                    chosen.evidence, plan_hash=plan.hash, grant_id=chosen.id,
                    principal=str(principal),
                )  # fmt: skip
            self.audit.append(
                "grant.used",
                principal=str(principal),
                subject=chosen.id,
                data={
                    "plan_hash": plan.hash,
                    "action": plan.action.value,
                    "target": plan.target,
                    "claimed_trigger": trigger,
                    "evidence": chosen.evidence.brief() if chosen.evidence else None,
                    "used_last_hour": chosen.used_last_hour,
                    "max_per_hour": chosen.max_per_hour,
                },
            )
        return chosen


def _uses_since(conn: Any, grant_id: str, since: datetime) -> int:
    row = conn.execute(
        "SELECT COUNT(*) FROM grant_uses WHERE grant_id=? AND ts>=?", (grant_id, since.isoformat())
    ).fetchone()
    return int(row[0])


def _grant(row: Any, used: int) -> Grant:
    return Grant(
        id=row["id"],
        action=Action(row["action"]),
        scope=loads(row["scope"]) or {},
        max_per_hour=row["max_per_hour"],
        created_at=datetime.fromisoformat(row["created_at"]),
        expires_at=datetime.fromisoformat(row["expires_at"]),
        reason=row["reason"],
        granted_by=row["granted_by"],
        revoked_at=datetime.fromisoformat(row["revoked_at"]) if row["revoked_at"] else None,
        revoked_by=row["revoked_by"],
        used_last_hour=used,
    )
