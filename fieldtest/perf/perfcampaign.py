"""A perf campaign file (``fieldtest perf --campaign FILE``): a sweep of perf rows as a YAML matrix.

The same conventions as a trial campaign (``fieldtest.trialcampaign``, whose ``Sweep`` model and matrix
machinery it shares): ``base`` (row fields every row shares), ``matrix`` (row fields to vary),
``exclude``, ``repetitions``, ``order`` and ``seed``. The row fields are ``PerfCase``'s, their one
source of truth: ``middleware``, ``security`` (``on``: each middleware's secure default), ``qos``,
``network``, ``message``, ``rate_hz`` (``max``: saturation), ``duration_s``, ``subscribers``, ``mode``,
``vpn`` and the fields the families declare (``fieldtest.perf.case.FAMILY_PERF_FIELDS``).

Every row is checked before the first one runs: a bad value is one line naming the file and the
field (``matrix.message value 'Array3x': ...``); a combination that cannot run (a payload the link
cannot carry) becomes a refused row, as on the command line. Cases that differ only in a setting
their middleware does not read (another family's field) are one case.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from pydantic import Field, TypeAdapter, ValidationError, field_validator

from fieldtest.trialcampaign import (
    SECURITY_ON,
    CampaignError,
    CaseSpec,
    Sweep,
    cases,
    check_matrix,
    parse_sweep,
    pydantic_where,
    read_yaml,
    resolve_security,
    run_order,
    sweep_json_schema,
    usable_name,
)

from .run import SATURATION, SATURATION_WORD, CombinationRefused, PerfCase, PerfInputError, check_case

ROW_FIELDS = tuple(f.name for f in dataclasses.fields(PerfCase))
_ROW = TypeAdapter(PerfCase)


class PerfCampaign(Sweep):
    """A perf campaign file."""

    perf: str = Field(description="sweep name: letters, digits, '-', '_', '.'")
    base: dict[str, Any] = Field(default_factory=dict, description="perf row fields every row shares")

    @field_validator("perf")
    @classmethod
    def _name(cls, value: str) -> str:
        return usable_name(value)


def parse_perf_campaign(raw: Any, source: str = "<perf campaign>") -> PerfCampaign:
    return parse_sweep(raw, PerfCampaign, source, "perf:, base:, matrix:, ...")


def load_perf_campaign(path: str | Path) -> PerfCampaign:
    """Read and check a perf campaign file (not yet expanded: see ``expand_rows``)."""
    return parse_perf_campaign(read_yaml(path), str(path))


def expand_rows(
    sweep: PerfCampaign, profiles: dict | None = None, *, duration_s: float | None = None
) -> list[tuple[PerfCase, int]]:
    """Every (row, repetition) in run order, each row checked; ``duration_s`` overrides the file's
    (``--quick``). CampaignError, one line naming the file and the field, for a bad value."""
    source = sweep.source
    check_matrix(sweep, source, ROW_FIELDS, "a perf row field")
    for key in sweep.base:
        if key not in ROW_FIELDS:
            raise CampaignError(
                f"{source}: base.{key}: not a perf row field (known: {', '.join(ROW_FIELDS)})"
            )
    rows: list[PerfCase] = []
    for cell in cases(sweep, canonical=lambda key: key):
        row = _row(sweep, cell, profiles, duration_s)
        if row not in rows:
            rows.append(row)
    if not rows:
        raise CampaignError(f"{source}: exclude: leaves no row to run")
    return run_order(sweep, rows)


def _row(sweep: PerfCampaign, cell: CaseSpec, profiles: dict | None, duration_s: float | None) -> PerfCase:
    values = {**sweep.base, **cell.values}
    if values.get("security") == SECURITY_ON:
        values["security"] = resolve_security(values.get("middleware", PerfCase.middleware), SECURITY_ON)
    if duration_s is not None:
        values["duration_s"] = duration_s
    if values.get("rate_hz") == SATURATION_WORD:
        values["rate_hz"] = SATURATION
    try:
        row = _ROW.validate_python(values)
    except ValidationError as exc:
        where, reason = pydantic_where(exc)
        raise CampaignError(f"{sweep.source}: {_origin(where, cell)}: {reason}") from None
    try:
        check_case(row, profiles)
    except CombinationRefused:
        pass  # runs as a refused row, with its reason, as on the command line
    except PerfInputError as exc:
        raise CampaignError(f"{sweep.source}: {_origin(exc.field, cell)}: {exc}") from None
    return row.normalized()


def _origin(field: str, cell: CaseSpec) -> str:
    """The matrix entry that set ``field``, else the base."""
    if field in cell.values:
        return f"matrix.{field} value {cell.values[field]!r}"
    return f"base.{field}" if field else "base"


def perf_campaign_json_schema() -> dict[str, Any]:
    """JSON schema of the perf campaign file (trials/perf-campaign.schema.json is generated from it)."""
    row = _ROW.json_schema()
    rate = row["properties"]["rate_hz"]
    number = {k: rate.pop(k) for k in ("type",) if k in rate}
    rate["anyOf"] = [
        number,
        {"const": SATURATION_WORD, "description": "saturation: as fast as the writer accepts"},
    ]
    return sweep_json_schema(PerfCampaign, row, "PerfCase")
