"""What one perf row measures (PerfCase) and what it gave (PerfRow): the row's reduction
(fieldtest.perf.stats) and its runners (fieldtest.perf.run, .lab) build on these."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, make_dataclass, replace
from typing import TYPE_CHECKING, Any, get_args

from pydantic import BaseModel

from fieldtest.catalog import CATALOG
from fieldtest.linkconfig import TransportConfig, family_modules, reads_settings

# rate_hz 0: saturation, publish as fast as the middleware accepts (performance_test's --rate 0,
# "publish as fast as possible": ApexAI/performance_test performance_test/src/main.cpp)
SATURATION = 0.0


@dataclass(frozen=True)
class FamilyPerfField:
    """A perf row field a family declares (its settings module's ``PERF_FIELDS``): one field of its
    link ``Settings``, swept as ``<family>_<field>`` (row field, command-line flag, file column)."""

    family: str
    field: str
    model: type[BaseModel]
    help: str

    @property
    def name(self) -> str:
        return f"{self.family.replace('-', '_')}_{self.field}"

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def default(self) -> str:
        return str(self.model.model_fields[self.field].default)

    @property
    def choices(self) -> tuple[str, ...]:
        """The values its settings field takes (a ``Literal``'s)."""
        return tuple(str(value) for value in get_args(self.model.model_fields[self.field].annotation))


def _family_perf_fields() -> dict[str, FamilyPerfField]:
    found = {}
    for family, module in family_modules("settings").items():
        for name, help_text in getattr(module, "PERF_FIELDS", {}).items():
            declared = FamilyPerfField(family, name, module.Settings, help_text)
            if not declared.choices:
                raise TypeError(f"{family} PERF_FIELDS {name!r}: a perf field is a Literal of its values")
            found[declared.name] = declared
    return found


# Row field name -> the family field it is, in catalog order
FAMILY_PERF_FIELDS: dict[str, FamilyPerfField] = _family_perf_fields()


@dataclass(frozen=True)
class _CaseFields:
    """What one row measures: the fields every middleware reads (``PerfCase`` adds the families')."""

    middleware: str = CATALOG[0].name
    security: str = "none"
    qos: str = "default"
    network: str = "loopback"
    message: str = "Array1k"
    rate_hz: float = 10.0
    duration_s: float = 30.0
    subscribers: int = 1
    mode: str = "roundtrip"
    # a VPN over the network ("openvpn": fieldtest.netem.vpn), or "none"
    vpn: str = "none"

    def family_values(self) -> dict[str, str]:
        """The families' row fields (``FAMILY_PERF_FIELDS``) and their values, "" where the
        middleware does not read it (after ``normalized``)."""
        return {name: getattr(self, name) for name in FAMILY_PERF_FIELDS}

    def set_apart(self) -> dict[str, str]:
        """The family fields the case sets to other than their default: what sets its row apart."""
        return {
            name: value
            for name, value in self.normalized().family_values().items()
            if value and value != FAMILY_PERF_FIELDS[name].default
        }

    @property
    def label(self) -> str:
        subs = f" x{self.subscribers}" if self.subscribers > 1 else ""
        settings = "".join(f" {value}" for value in self.family_values().values() if value)
        vpn = f"+{self.vpn}" if self.vpn != "none" else ""
        return (
            f"{self.middleware}{settings}/{self.security}/{self.qos}/{self.network}{vpn} {self.message} "
            f"{rate_text(self.rate_hz)}{subs} {self.mode}"
        )

    @property
    def saturated(self) -> bool:
        return self.rate_hz == SATURATION

    def normalized(self) -> PerfCase:
        """The case with the family fields its middleware does not read blanked and those it reads
        but leaves blank at their default, so two cases that differ only there are one
        (``linkconfig.reads_settings``)."""
        changes: dict[str, Any] = {}
        for name, declared in FAMILY_PERF_FIELDS.items():
            value = getattr(self, name)
            reads = reads_settings(self.middleware, declared.model)
            if value and not reads:
                changes[name] = ""
            elif not value and reads:
                changes[name] = declared.default
        return replace(self, **changes)

    def transport(self, **addresses: Any) -> TransportConfig:
        """The row's TransportConfig (before its ports, addresses and keystore are known)."""
        settings: dict[str, dict[str, str]] = {}
        for name, value in self.family_values().items():
            if value:
                declared = FAMILY_PERF_FIELDS[name]
                settings.setdefault(declared.family, {})[declared.field] = value
        return TransportConfig(
            middleware=self.middleware, qos=self.qos, security=self.security, **settings, **addresses
        )


# What one row measures: the generic fields, then each family's (``FAMILY_PERF_FIELDS``, "" for
# the middlewares that do not read it), so perf files and campaign files name them as declared.
if TYPE_CHECKING:
    PerfCase = _CaseFields
else:
    PerfCase = make_dataclass(
        "PerfCase",
        [(name, str, field(default=f.default)) for name, f in FAMILY_PERF_FIELDS.items()],
        bases=(_CaseFields,),
        frozen=True,
        namespace={"__module__": __name__, "__doc__": "What one row measures."},
    )


def rate_text(rate_hz: float) -> str:
    return "max rate" if rate_hz == SATURATION else f"{rate_hz:g} Hz"


@dataclass
class PerfRow:
    case: PerfCase
    repetition: int = 0
    # "ok", "failed" (ran, no figures), "refused" (bad input, not run), "interrupted" (a stop signal
    # cut it short: no figures, and a sweep keeps it out of its files)
    status: str = "ok"
    error: str = ""
    figures: dict = field(default_factory=dict)
    subscribers: list[dict] = field(default_factory=list)
    processes: dict = field(default_factory=dict)
    link: dict = field(default_factory=dict)
    # None: not judged (a loopback row, or one that did not run); False: its link emulator or ns-3
    # fell behind (``judge_row``), the row is kept but left out of every summary and verdict
    valid: bool | None = None
    invalid_reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)

    @property
    def counted(self) -> bool:
        """Does the row count in summaries and verdicts: it ran and its link kept up."""
        return self.status == "ok" and self.valid is not False


def judge_row(row: PerfRow) -> PerfRow:
    """Judge an emulated row as a twin trial on the same link (one set of bounds:
    ``fieldtest.analysis.link_behind_reasons``); loopback rows stay unjudged."""
    if not row.link.get("emulated") or row.status != "ok":
        return row
    from fieldtest.analysis import link_behind_reasons  # numpy: not at import

    row.invalid_reasons = link_behind_reasons(row.link.get("simulator"), row.link.get("forwarder"))
    row.valid = not row.invalid_reasons
    return row
