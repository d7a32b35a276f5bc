"""RBAC as the authorizer sees it: a request's attributes checked against allow rules.

A test gives the emulator a list of ``Rule`` (the fields of a Role/ClusterRole rule, plus
``namespaces``: None = every namespace and the cluster scope, as a ClusterRoleBinding
grants; a list = a RoleBinding in each of those namespaces, which never grants
cluster-scoped resources). ``rules=None`` (the default) allows everything. A denied request
gets the server's 403 Forbidden ``Status``. Discovery (/api, /apis, /version) is always
allowed, as the ``system:discovery`` role grants it to every authenticated user.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Attributes:
    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str | None
    name: str | None


@dataclass(frozen=True)
class Rule:
    verbs: tuple[str, ...]
    resources: tuple[str, ...]
    api_groups: tuple[str, ...] = ("",)
    namespaces: tuple[str, ...] | None = None
    resource_names: tuple[str, ...] = field(default=())

    def allows(self, a: Attributes) -> bool:
        if self.namespaces is not None and (
            a.namespace is None or a.namespace not in self.namespaces
        ):
            return False
        if "*" not in self.verbs and a.verb not in self.verbs:
            return False
        if "*" not in self.api_groups and a.group not in self.api_groups:
            return False
        full = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
        if (
            "*" not in self.resources
            and full not in self.resources
            and f"*/{a.subresource}" not in self.resources
        ):
            return False
        return not self.resource_names or (a.name is not None and a.name in self.resource_names)


def allowed(rules: list[Rule] | None, a: Attributes) -> bool:
    return rules is None or any(r.allows(a) for r in rules)
