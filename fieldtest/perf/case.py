"""What one perf row measures (PerfCase) and what it gave (PerfRow): the row's reduction
(fieldtest.perf.stats) and its runners (fieldtest.perf.run, .lab) build on these."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from fieldtest.linkconfig import TransportConfig, reads_settings
from fieldtest.middleware.zenoh.settings import Settings as ZenohSettings

# rate_hz 0: saturation, publish as fast as the middleware accepts (performance_test's --rate 0,
# "publish as fast as possible": ApexAI/performance_test performance_test/src/main.cpp)
SATURATION = 0.0


@dataclass(frozen=True)
class PerfCase:
    """What one row measures."""

    middleware: str = "dds"
    security: str = "none"
    qos: str = "default"
    network: str = "loopback"
    message: str = "Array1k"
    rate_hz: float = 10.0
    duration_s: float = 30.0
    subscribers: int = 1
    mode: str = "roundtrip"
    # Zenoh rows: "direct" (the nodes on Zenoh) or "bridge" (DDS -> zenoh-bridge-ros2dds -> Zenoh ->
    # bridge -> DDS, as a twin trial's default); "" for the middlewares that do not read it
    zenoh_path: str = "direct"
    # a VPN over the network ("openvpn": fieldtest.netem.vpn), or "none"
    vpn: str = "none"

    @property
    def label(self) -> str:
        subs = f" x{self.subscribers}" if self.subscribers > 1 else ""
        path = f" {self.zenoh_path}" if self.zenoh_path else ""
        vpn = f"+{self.vpn}" if self.vpn != "none" else ""
        return (
            f"{self.middleware}{path}/{self.security}/{self.qos}/{self.network}{vpn} {self.message} "
            f"{rate_text(self.rate_hz)}{subs} {self.mode}"
        )

    @property
    def saturated(self) -> bool:
        return self.rate_hz == SATURATION

    def normalized(self) -> PerfCase:
        """The case with the family settings its middleware does not read blanked, so two cases that
        differ only there are one (``linkconfig.reads_settings``)."""
        reads_path = reads_settings(self.middleware, ZenohSettings)
        if self.zenoh_path and not reads_path:
            return replace(self, zenoh_path="")
        if not self.zenoh_path and reads_path:
            return replace(self, zenoh_path="direct")
        return self

    def transport(self, **addresses) -> TransportConfig:
        """The row's TransportConfig (before its ports, addresses and keystore are known)."""
        path = {"zenoh": {"path": self.zenoh_path}} if self.zenoh_path else {}
        return TransportConfig(
            middleware=self.middleware, qos=self.qos, security=self.security, **path, **addresses
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
    ``fieldtest.analysis.causes.stackfaults.link_behind_reasons``); loopback rows stay unjudged."""
    if not row.link.get("emulated") or row.status != "ok":
        return row
    from fieldtest.analysis.causes.stackfaults import link_behind_reasons  # numpy: not at import

    row.invalid_reasons = link_behind_reasons(row.link.get("simulator"), row.link.get("forwarder"))
    row.valid = not row.invalid_reasons
    return row
