"""Hypothesis strategies built from a live JSON schema (an MCP tool's ``inputSchema``), and
the hostile values every string parameter is tried with.

Nothing here names a tool or a parameter: the strategies follow whatever the server lists,
so a tool added or reshaped elsewhere is fuzzed as it is. ``arguments(schema)`` mixes
well-typed values (ids of every form, path and shell characters, unicode, strings just over
and far over their limit) with wrong types, unknown keys and missing required keys.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

# Ids and words of every form: well-formed, almost well-formed and hostile.
HOSTILE_STRINGS: list[str] = [
    "local:x",
    "local:node-a",
    "local:node-b",
    "node-a",
    "local:w@1",
    "local:w@0",
    "local:w@-1",
    "local:w@99999999999999999999999",
    "local:w@\u0663",
    "local:x\u0663",
    "local:tr\u0430in",
    "slurm:1",
    "slurm:n1",
    "kubernetes:default/pod",
    "nope:w",
    "local:",
    ":",
    ":x",
    "local::x",
    "local:a:b",
    "local:../x",
    "../x",
    "../../etc/passwd",
    "/etc/passwd",
    "local:/etc/passwd",
    "file:///etc/passwd",
    "http://169.254.169.254/latest/meta-data/",
    "local:a;rm -rf /",
    "$(id)",
    "`id`",
    "a|b",
    "a&&b",
    "local:a\nb",
    "local:a\x00b",
    "\x00",
    "\u202e\u0000\ufeff",
    "%s%n%x",
    "{{7*7}}",
    "' OR 1=1 --",
    "'; DROP TABLE audit; --",
    "pending",
    "approved",
    "running",
    "local",
    "slurm",
    "kubernetes",
    "-",
    "--help",
    "-rf",
    "local:" + "a" * 63,
    "local:" + "a" * 64,
    "ap-" + "0" * 12,
    "ex-" + "0" * 12,
    "run-" + "0" * 12,
    "\U0001f600",
    "\u00e9t\u00e9",
    "",
    " ",
]

JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
ANY_JSON: st.SearchStrategy[Any] = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)


COIN = st.booleans()
ONE_IN_10 = st.integers(min_value=0, max_value=9)
ONE_IN_15 = st.integers(min_value=0, max_value=14)
ONE_IN_20 = st.integers(min_value=0, max_value=19)


def strings(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    limit = int(schema.get("maxLength", 200))
    return st.one_of(
        st.sampled_from(HOSTILE_STRINGS),
        st.text(max_size=min(limit, 80)),
        st.text(alphabet=st.characters(codec="ascii"), max_size=limit),
        # Just over the limit, far over it, and one huge string.
        st.integers(min_value=limit + 1, max_value=limit + 5).map(lambda n: "a" * n),
        st.sampled_from([limit * 10, 100_000]).map(lambda n: "x" * n),
        st.sampled_from(HOSTILE_STRINGS).map(lambda s: s + "/" + s),
    )


def integers(schema: dict[str, Any]) -> st.SearchStrategy[int]:
    lo, hi = schema.get("minimum"), schema.get("maximum")
    edges = [v for v in (lo, hi) if v is not None]
    around = [int(v) + d for v in edges for d in (-1, 0, 1)]
    return st.one_of(
        st.sampled_from(around or [0]),
        st.integers(min_value=-(2**64), max_value=2**64),
        st.integers(min_value=-5, max_value=50),
    )


def well_typed(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values of the schema's own type (limits and formats are not respected on purpose)."""
    if "anyOf" in schema:
        return st.one_of([well_typed(s) for s in schema["anyOf"]])
    if "enum" in schema:
        return st.one_of(st.sampled_from(schema["enum"]), st.text(max_size=10))
    kind = schema.get("type")
    if kind == "string":
        return strings(schema)
    if kind == "integer":
        return integers(schema)
    if kind == "number":
        return st.one_of(integers(schema), st.floats(allow_nan=False, allow_infinity=False))
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        return st.lists(well_typed(schema.get("items", {})), max_size=5)
    if kind == "object":
        return st.dictionaries(st.sampled_from(HOSTILE_STRINGS) | st.text(max_size=8), ANY_JSON,
                               max_size=5)  # fmt: skip
    return ANY_JSON


def arguments(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Argument objects for a tool: each declared key well-typed or any JSON value, optional
    keys present or not, sometimes a required key dropped or an unknown key added."""
    props: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    # Built once, not in every draw: making a strategy costs more than drawing from it
    # (generation was most of the MCP fuzz's 74,000 cases); the draws are the same.
    typed = {name: well_typed(sub) for name, sub in props.items()}
    required_keys = st.sampled_from(sorted(required)) if required else None
    unknown_keys = st.sampled_from(["approved", "confirmed", "principal", "__proto__"]) | st.text(
        min_size=1, max_size=12
    )

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        args: dict[str, Any] = {}
        for name, values in typed.items():
            present = name in required or draw(COIN)
            if not present:
                continue
            if draw(ONE_IN_10) == 0:
                args[name] = draw(ANY_JSON)  # a wrong type, most of the time
            else:
                args[name] = draw(values)
        if required_keys is not None and draw(ONE_IN_20) == 0:
            args.pop(draw(required_keys), None)
        if draw(ONE_IN_15) == 0:
            key = draw(unknown_keys)
            if key not in props:
                args[key] = draw(ANY_JSON)
        return args

    return build()
