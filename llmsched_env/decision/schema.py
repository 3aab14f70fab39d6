"""Observation and action schemas (a policy file records its ``schema_version``; drivers refuse another):
schema 1, six features per named tenant and powers-of-two budgets; schema 2 (default), tenant-agnostic
features (urgency bands, length predictions, four tenant slots) and one fixed list of budgets and caps.
"""

from __future__ import annotations

SCHEMA_VERSION = 2  # what new policies are trained on
SCHEMAS = (1, 2)  # what this code reads
# The single-node env's Gymnasium id per schema: a new id when the spaces change (schema 2 is LLMSched-v1;
# LLMSched-v0 keeps the per-tenant schema 1 of the policies trained on it)
ENV_IDS = {1: "LLMSched-v0", 2: "LLMSched-v1"}

_SUMMARY = {
    1: "per-tenant features named after the tenants it was trained on",
    2: "workload-agnostic features (urgency-ordered tenant slots)",
}


def check_schema(schema: object, where: str = "schema") -> int:
    """``schema`` if this code knows it, else ``ValueError`` naming ``where`` and the known ones."""
    if isinstance(schema, bool) or schema not in SCHEMAS:
        raise ValueError(f"{where}: observation schema {schema!r} is not supported (this code reads {SCHEMAS})")
    return int(schema)


def env_id(schema: int) -> str:
    """The id of the single-node env of observation ``schema`` (``ENV_IDS``)."""
    return ENV_IDS[check_schema(schema, "env_id")]


def schema_summary(schema: int) -> str:
    """One line on what a schema's observation is."""
    return f"schema {schema} ({_SUMMARY.get(schema, 'unknown')})"
