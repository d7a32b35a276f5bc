"""The three PATCH formats the API server takes as JSON.

- ``application/merge-patch+json``: RFC 7386 (maps merge, ``null`` deletes, lists replace).
- ``application/json-patch+json``: RFC 6902 (add, remove, replace, move, copy, test).
- ``application/strategic-merge-patch+json`` (built-in kinds only; custom resources answer
  415 as the server does): a merge patch in which the lists that Kubernetes types declare
  ``patchStrategy: merge`` merge by their key (``MERGE_KEYS``), and the ``$patch``
  (``delete``/``replace``/``merge``) and ``$deleteFromPrimitiveList/FIELD`` directives work.
  Lists without a strategy (taints, tolerations: ``listType=atomic``) are replaced whole, as
  on a real server. Differs: ``$setElementOrder`` and ``$retainKeys`` are dropped, not obeyed.

Server-side apply (``application/apply-patch+yaml``) is not served.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.k8s.emulator import status

# (field path from the object root, with [] for "each list item") -> merge key.
# None = a list of primitives merged as a set (metadata.finalizers).
MERGE_KEYS: dict[str, str | None] = {
    "metadata.finalizers": None,
    "metadata.ownerReferences": "uid",
    "spec.containers": "name",
    "spec.initContainers": "name",
    "spec.ephemeralContainers": "name",
    "spec.volumes": "name",
    "spec.imagePullSecrets": "name",
    "spec.containers[].env": "name",
    "spec.containers[].ports": "containerPort",
    "spec.containers[].volumeMounts": "mountPath",
    "spec.initContainers[].env": "name",
    "spec.template.spec.containers": "name",
    "spec.template.spec.initContainers": "name",
    "spec.template.spec.volumes": "name",
    "spec.template.spec.containers[].env": "name",
    "spec.template.spec.containers[].volumeMounts": "mountPath",
    "status.conditions": "type",
    "status.addresses": "type",
}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise status.bad_request(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> tuple[Any, str]:
    cur = doc
    for part in parts[:-1]:
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            raise status.ApiError(
                422,
                "Invalid",
                f'the server rejected our request due to an error in our request: doc is missing path: "{path}"',
            )
    return cur, parts[-1]


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent, last = _parent(doc, parts, path)
    try:
        return parent[int(last)] if isinstance(parent, list) else parent[last]
    except (KeyError, IndexError, ValueError):
        raise status.ApiError(
            422,
            "Invalid",
            f'the server rejected our request due to an error in our request: doc is missing key: "{path}"',
        ) from None


def _remove(doc: Any, path: str) -> Any:
    value = _get(doc, path)
    parent, last = _parent(doc, _pointer(path), path)
    if isinstance(parent, list):
        parent.pop(int(last))
    else:
        del parent[last]
    return value


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent, last = _parent(doc, parts, path)
    if isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise status.ApiError(
                422,
                "Invalid",
                f"the server rejected our request due to an error in our request: invalid index {last!r}",
            )
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise status.ApiError(
            422,
            "Invalid",
            f"the server rejected our request due to an error in our request: cannot add at {path!r}",
        )
    return doc


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902; a failed ``test`` or a missing path is 422 as on a real server."""
    if not isinstance(ops, list):
        raise status.bad_request(
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
        )
    doc = copy.deepcopy(target)
    for op in ops:
        kind, path = op.get("op"), op.get("path", "")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            parts = _pointer(path)
            if not parts:
                doc = copy.deepcopy(op.get("value"))
            else:
                parent, last = _parent(doc, parts, path)
                if isinstance(parent, list):
                    parent[int(last)] = copy.deepcopy(op.get("value"))
                else:
                    parent[last] = copy.deepcopy(op.get("value"))
        elif kind == "move":
            value = _remove(doc, op.get("from", ""))
            doc = _add(doc, path, value)
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, op.get("from", ""))))
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise status.ApiError(
                    422,
                    "Invalid",
                    f"the server rejected our request due to an error in our request: testing value {path} failed",
                )
        else:
            raise status.bad_request(f"Unexpected kind: {kind}")
    return doc


def _merge_key(path: str) -> tuple[bool, str | None]:
    if path in MERGE_KEYS:
        return True, MERGE_KEYS[path]
    return False, None


def strategic_merge(target: Any, patch: Any, path: str = "") -> Any:
    """Strategic merge patch for built-in kinds (see the module docstring)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith(("$setElementOrder/", "$retainKeys")) or key == "$patch":
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [v for v in result.get(field) or [] if v not in value]
            continue
        sub = f"{path}.{key}" if path else key
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            merge, mkey = _merge_key(sub)
            if merge and isinstance(result.get(key), list):
                result[key] = _merge_list(result[key], value, mkey, sub)
            else:
                result[key] = [
                    strategic_merge(None, v, f"{sub}[]") if isinstance(v, dict) else v
                    for v in value
                    if not (isinstance(v, dict) and v.get("$patch") == "delete")
                ]
        else:
            merged = strategic_merge(result.get(key), value, sub)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
    return result


def _merge_list(current: list[Any], patch: list[Any], mkey: str | None, path: str) -> list[Any]:
    out = copy.deepcopy(current)
    if mkey is None:  # a set of primitives
        for v in patch:
            if v not in out:
                out.append(v)
        return out
    if any(isinstance(v, dict) and v.get("$patch") == "replace" for v in patch):
        return [copy.deepcopy(v) for v in patch if not (isinstance(v, dict) and "$patch" in v)]
    for item in patch:
        if not isinstance(item, dict) or mkey not in item:
            raise status.bad_request(f"map: {item} does not contain declared merge key: {mkey}")
        idx = next(
            (
                i
                for i, cur in enumerate(out)
                if isinstance(cur, dict) and cur.get(mkey) == item[mkey]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append(strategic_merge(None, item, f"{path}[]"))
        else:
            out[idx] = strategic_merge(out[idx], item, f"{path}[]")
    return out


def apply(
    kind_builtin: bool, content_type: str, target: dict[str, Any], patch: Any
) -> dict[str, Any]:
    """Apply a PATCH body of ``content_type`` to ``target``; 415 for what the kind does not take."""
    ctype = content_type.split(";")[0].strip().lower()
    accepted = ["application/json-patch+json", "application/merge-patch+json"]
    if kind_builtin:
        accepted.append("application/strategic-merge-patch+json")
    accepted.append("application/apply-patch+yaml")
    if ctype == "application/json-patch+json":
        result = json_patch(target, patch)
    elif ctype == "application/merge-patch+json":
        if not isinstance(patch, dict):
            raise status.bad_request(
                "json: cannot unmarshal array into Go value of type map[string]interface {}"
            )
        result = merge_patch(target, patch)
    elif ctype == "application/strategic-merge-patch+json" and kind_builtin:
        if not isinstance(patch, dict):
            raise status.bad_request(
                "json: cannot unmarshal array into Go value of type map[string]interface {}"
            )
        result = strategic_merge(target, patch)
    else:
        raise status.unsupported_media_type(ctype, accepted)
    if not isinstance(result, dict):
        raise status.bad_request("the patch did not produce an object")
    return result
