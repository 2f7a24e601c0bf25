"""Campaigns: a YAML matrix of trials expanded into ``TrialRequest``s, for the lab and the twin alike.

A campaign file names a ``base`` request (any ``TrialRequest`` fields), a ``matrix`` of fields to
vary (dotted paths into the request, with the short names ``middleware``, ``security``, ``qos`` and
``namespace`` for the ``transport`` fields), ``exclude`` rules, a number of ``repetitions`` and the
``order`` trials run in. Every expanded request is validated, so a bad value is reported before
the first trial starts, on one line that names the file and the field.

``cmd_type: auto`` becomes what a TurtleBot 4's ``cmd_vel`` takes on the campaign's ROS 2 distro
(``lab.ros_distro``, or the one the lab runner is given): Twist on Humble, TwistStamped on Jazzy.

Order ``interleaved`` (default) runs repetition 0 of every case, then repetition 1 of every case,
and so on: slow drifts (battery, temperature, Wi-Fi neighbours) then spread over all cases instead
of biasing whichever case ran last. ``grouped`` runs each case's repetitions back to back;
``shuffled`` is a random order drawn from ``seed`` (the same file always gives the same order).
"""

from __future__ import annotations

import copy
import itertools
import random
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from fieldtest.errors import FieldtestError
from fieldtest.linkconfig import SETTINGS_MODELS
from fieldtest.middleware import registry
from fieldtest.names import BASE_CMD_TYPE, CMD_TYPE_AUTO
from fieldtest.plan import PlanError
from fieldtest.record.trial import TrialRequest

ALIASES = {
    "middleware": "transport.middleware",
    "security": "transport.security",
    "qos": "transport.qos",
    "namespace": "transport.namespace",
    # each family's link settings by their flat names (mqtt_nagle: transport.mqtt.nagle)
    **{
        f"{family.replace('-', '_')}_{field}": f"transport.{family}.{field}"
        for family, model in SETTINGS_MODELS.items()
        for field in model.model_fields
    },
}
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
T = TypeVar("T")


# ``security: on`` in a matrix picks each middleware's standard protection, so one campaign axis
# can read "security off/on" as in the seed study: SROS2 on plain DDS, mutual TLS + access control
# on the Zenoh and MQTT links.
SECURITY_ON = "on"


def resolve_security(middleware: str, setting: str) -> str:
    """``on``: the middleware's own ``secure_default``; an unknown middleware keeps ``on`` (the
    request's validation then names the middleware)."""
    if setting == SECURITY_ON and middleware in registry.REGISTRY:
        return registry.get(middleware).secure_default
    return setting


class CampaignError(FieldtestError, ValueError):
    """A campaign file that cannot be expanded; the message is one line naming file and field."""


class LabSettings(BaseModel):
    """How the lab runner treats each trial of the campaign (ignored by the twin)."""

    model_config = ConfigDict(extra="forbid")

    ros_distro: Literal["humble", "jazzy"] = "jazzy"  # TurtleBot 4 images today: Ubuntu 24.04 + Jazzy
    countdown_s: float = Field(5.0, ge=0, description="seconds announced before the robot moves")
    max_clock_offset_ms: float = Field(
        5.0, gt=0, description="pre-flight: largest |host - robot| clock offset"
    )
    max_clock_round_trip_ms: float = Field(100.0, gt=0, description="pre-flight: largest probe round trip")
    min_battery_percent: float = Field(30.0, ge=0, le=100, description="pre-flight: lowest battery charge")
    min_mocap_valid_fraction: float = Field(
        0.9, ge=0, le=1, description="pre-flight: tracked share of frames"
    )
    preflight_timeout_s: float = Field(
        20.0, gt=0, description="time to wait for robot link, mocap and clock once both sides' nodes are up"
    )
    warn_only: list[str] = Field(default_factory=list, description="pre-flight checks that only warn")
    pause_between_trials_s: float = Field(0.0, ge=0, description="wait (or confirm) between trials")
    confirm_each_trial: bool = Field(True, description="ask before each trial (robot placed at the start?)")
    geofence_m: list[float] | None = Field(
        None,
        description="[x_min, x_max, y_min, y_max] in Motive's world frame (m, Z up): the trial stops when "
        "the rigid body leaves it (needs mocap)",
    )

    @field_validator("geofence_m")
    @classmethod
    def _box(cls, box: list[float] | None) -> list[float] | None:
        if box is not None and (len(box) != 4 or not (box[0] < box[1] and box[2] < box[3])):
            raise ValueError(f"expected [x_min, x_max, y_min, y_max] with min < max, got {box}")
        return box


def usable_name(value: str) -> str:
    """A campaign's name, which prefixes file and trial names; ValueError otherwise."""
    if not _NAME_RE.match(value):
        raise ValueError(f"{value!r} is not a usable name (letters, digits, '-', '_', '.')")
    return value


class Sweep(BaseModel):
    """What every matrix file shares (a campaign, a ``fieldtest perf`` sweep): the values to vary,
    the combinations to leave out, how often each case runs and in which order."""

    model_config = ConfigDict(extra="forbid")

    description: str = ""
    matrix: dict[str, list[Any]] = Field(default_factory=dict, description="field -> values to vary")
    exclude: list[dict[str, Any]] = Field(default_factory=list, description="combinations to leave out")
    repetitions: int = Field(1, ge=1)
    order: Literal["interleaved", "grouped", "shuffled"] = "interleaved"
    seed: int = 0
    _source: str = PrivateAttr("<campaign>")  # the file it came from, for error messages

    @property
    def source(self) -> str:
        return self._source


class Campaign(Sweep):
    """A campaign file."""

    campaign: str = Field(description="campaign name: letters, digits, '-', '_', '.'")
    base: dict[str, Any] = Field(default_factory=dict, description="TrialRequest fields every trial shares")
    lab: LabSettings = Field(default_factory=LabSettings)

    @field_validator("campaign")
    @classmethod
    def _name(cls, value: str) -> str:
        return usable_name(value)


def canonical_field(name: str) -> str:
    """Dotted TrialRequest path of a matrix key: 'middleware' -> 'transport.middleware'."""
    return ALIASES.get(name, name)


def _set_path(values: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    node = values
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise KeyError(part)
        node = child
    node[leaf] = value


def _case_label(value: Any) -> str:
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return "+".join(value)  # e.g. a topology's nodes: host+robot
    if isinstance(value, dict | list):
        return "x"
    text = str(value).replace("/", "_").replace(" ", "_")
    return text or "empty"


def pydantic_where(exc: ValidationError) -> tuple[str, str]:
    """(dotted field, reason) of a validation error's first problem, for a one-line message."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return where, first["msg"].removeprefix("Value error, ")


S = TypeVar("S", bound=Sweep)


class CaseSpec(BaseModel):
    """One cell of the matrix: the varied values by canonical path."""

    values: dict[str, Any]

    def matches(self, rule: dict[str, Any], canonical: Callable[[str], str] = canonical_field) -> bool:
        return all(self.values.get(canonical(k)) == v for k, v in rule.items())

    def label(self) -> str:
        return "-".join(_case_label(v) for v in self.values.values())


def check_matrix(
    sweep: Sweep,
    source: str,
    known: Sequence[str],
    what: str,
    canonical: Callable[[str], str] = lambda key: key,
) -> None:
    """Every matrix key names one of ``known`` (``what``: "a trial field") once ``canonical``, with
    values; every exclude key is a matrix key. CampaignError naming the file and the entry."""
    for key, values in sweep.matrix.items():
        if not values:
            raise CampaignError(f"{source}: matrix.{key}: empty list of values")
        if canonical(key).split(".")[0] not in known:
            raise CampaignError(f"{source}: matrix.{key}: not {what} (known: {', '.join(known)})")
    keys = {canonical(k) for k in sweep.matrix}
    for i, rule in enumerate(sweep.exclude):
        for key in rule:
            if canonical(key) not in keys:
                raise CampaignError(
                    f"{source}: exclude[{i}].{key}: not a matrix field ({', '.join(sweep.matrix)})"
                )


def _check_matrix(campaign: Campaign, source: str) -> None:
    known = [*ALIASES, *TrialRequest.model_fields]
    check_matrix(campaign, source, known, "a trial field", canonical_field)
    for key in campaign.matrix:
        if canonical_field(key) in ("name", "repetition"):
            raise CampaignError(f"{source}: matrix.{key}: set by the campaign itself, cannot be varied")


def cases(sweep: Sweep, canonical: Callable[[str], str] = canonical_field) -> list[CaseSpec]:
    """The matrix cells left after ``exclude``, in the order the matrix lists its values."""
    paths = [canonical(k) for k in sweep.matrix]
    out = []
    for combo in itertools.product(*sweep.matrix.values()):
        case = CaseSpec(values=dict(zip(paths, combo, strict=True)))
        if not any(case.matches(rule, canonical) for rule in sweep.exclude):
            out.append(case)
    return out


def run_order(sweep: Sweep, cells: list[T]) -> list[tuple[T, int]]:
    """(cell, repetition) pairs in the sweep's ``order``: interleaved, grouped or shuffled (seeded)."""
    if sweep.order == "grouped":
        return [(c, r) for c in cells for r in range(sweep.repetitions)]
    pairs = [(c, r) for r in range(sweep.repetitions) for c in cells]
    if sweep.order == "shuffled":
        random.Random(sweep.seed).shuffle(pairs)
    return pairs


def _request(
    campaign: Campaign, case: CaseSpec, repetition: int, index: int, source: str, ros_distro: str
) -> TrialRequest:
    values = copy.deepcopy(campaign.base)
    for path, value in case.values.items():
        try:
            _set_path(values, path, copy.deepcopy(value))
        except KeyError as exc:
            raise CampaignError(f"{source}: base.{exc.args[0]}: must be a mapping to vary {path}") from None
    label = case.label()
    values["name"] = (
        f"{campaign.campaign}-{label}-r{repetition}" if label else f"{campaign.campaign}-r{repetition}"
    )
    values["repetition"] = repetition
    values["seed"] = int(values.get("seed", campaign.seed)) + index
    if values.get("cmd_type") == CMD_TYPE_AUTO:  # what the TurtleBot 4's cmd_vel takes on this distro
        values["cmd_type"] = BASE_CMD_TYPE[ros_distro]
    transport = values.get("transport")
    if isinstance(transport, dict) and transport.get("security") == SECURITY_ON:
        transport["security"] = resolve_security(transport.get("middleware", "dds"), SECURITY_ON)
    try:
        request = TrialRequest.model_validate(values)
    except ValidationError as exc:
        where, reason = pydantic_where(exc)
        raise CampaignError(f"{source}: {_origin_of(where, case, campaign)}: {reason}") from None
    except PlanError as exc:
        raise CampaignError(f"{source}: base.plan: {exc}") from None
    _check_names(request, case, campaign, source)
    return request


def _check_names(request: TrialRequest, case: CaseSpec, campaign: Campaign, source: str) -> None:
    """Free-text fields that must name something the kit knows: QoS profile, security setting."""
    from fieldtest.middleware import registry
    from fieldtest.qos import QosError, get_qos
    from fieldtest.security.securitysettings import SecuritySettingError

    t = request.transport
    try:
        get_qos(t.qos)
    except QosError as exc:
        raise CampaignError(f"{source}: {_origin_of('transport.qos', case, campaign)}: {exc}") from None
    try:
        registry.get(t.middleware).security_setting(t.security)
    except SecuritySettingError as exc:
        raise CampaignError(f"{source}: {_origin_of('transport.security', case, campaign)}: {exc}") from None
    # In the lab the keystore must exist on both machines; the twin makes one per trial.
    if t.security != "none" and not t.keystore and request.robot_model != "twin-create3":
        raise CampaignError(
            f"{source}: base.transport.keystore: security {t.security!r} needs a keystore path"
        )


def _origin_of(where: str, case: CaseSpec, campaign: Campaign) -> str:
    """Where the user should look: the matrix entry that set the failing field, else the base."""
    for key in campaign.matrix:
        path = canonical_field(key)
        if where == path or where.startswith(path + "."):
            return f"matrix.{key} value {case.values[path]!r}"
    return f"base.{where}"


def expand(
    campaign: Campaign, source: str | None = None, ros_distro: str | None = None
) -> list[TrialRequest]:
    """Every trial of the campaign, validated, in run order; ``cmd_type: auto`` resolved for
    ``ros_distro`` (default: the campaign's ``lab.ros_distro``)."""
    source = source or campaign.source
    ros_distro = ros_distro or campaign.lab.ros_distro
    _check_matrix(campaign, source)
    cells = cases(campaign)
    if not cells:
        raise CampaignError(f"{source}: exclude: leaves no trial to run")
    pairs = run_order(campaign, cells)
    return [_request(campaign, c, r, i, source, ros_distro) for i, (c, r) in enumerate(pairs)]


def parse_sweep(raw: Any, model: type[S], source: str, keys: str) -> S:
    """``raw`` (a YAML document) as ``model``; CampaignError naming ``source`` and the field.
    ``keys``: the top-level keys to name when it is not a mapping."""
    if not isinstance(raw, dict):
        raise CampaignError(f"{source}: expected a mapping at the top level ({keys})")
    try:
        sweep = model.model_validate(raw)
    except ValidationError as exc:
        where, reason = pydantic_where(exc)
        raise CampaignError(f"{source}: {where}: {reason}") from None
    sweep._source = source
    return sweep


def parse_campaign(raw: Any, source: str = "<campaign>") -> Campaign:
    return parse_sweep(raw, Campaign, source, "campaign:, base:, matrix:, ...")


def load_campaign(path: str | Path) -> Campaign:
    """Read and check a campaign YAML file (not yet expanded: see ``expand``)."""
    return parse_campaign(read_yaml(path), str(path))


def read_yaml(path: str | Path) -> Any:
    """The YAML document in ``path``; CampaignError naming the file (and the line) otherwise."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise CampaignError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise CampaignError(
            f"{path}: not valid YAML{line} ({getattr(exc, 'problem', None) or exc})"
        ) from None
    return raw


def load_trials(path: str | Path, ros_distro: str | None = None) -> tuple[Campaign, list[TrialRequest]]:
    """The campaign and its expanded, validated trial requests (``ros_distro`` overrides the
    campaign's ``lab.ros_distro`` for ``cmd_type: auto``)."""
    campaign = load_campaign(path)
    return campaign, expand(campaign, ros_distro=ros_distro)


def campaign_json_schema() -> dict[str, Any]:
    """JSON schema of the campaign file (trials/campaign.schema.json is generated from it)."""
    return sweep_json_schema(Campaign, TrialRequest.model_json_schema(), "TrialRequest")


def sweep_json_schema(model: type[Sweep], base_schema: dict[str, Any], base_name: str) -> dict[str, Any]:
    """JSON schema of a matrix file whose ``base`` holds ``base_name`` fields (``base_schema``)."""
    schema = model.model_json_schema()
    schema["$defs"] = {**schema.get("$defs", {}), **base_schema.pop("$defs", {}), base_name: base_schema}
    schema["properties"]["base"]["description"] += f" (see $defs.{base_name})"
    return schema
