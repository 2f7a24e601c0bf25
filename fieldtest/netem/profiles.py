"""Link profiles: what an emulated network link does to packets, per direction.

A profile describes one machine's link to the rest of the lab network, e.g. a Wi-Fi station's
to its access point (see docs/networks.md for the topology: the trial's ``topology`` says which
machines have one). ``up`` is that machine's uplink (machine -> rest), ``down`` its downlink. The built-in numbers and where they come from are listed in docs/networks.md; every
number not taken from a measurement is marked there as an assumption.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fieldtest.errors import FieldtestError


class ProfileError(FieldtestError, ValueError):
    """A link profile is unknown or invalid (the message names the source and the problem)."""


class GilbertElliott(BaseModel):
    """Bursty loss: a two-state Markov chain stepped once per packet (as netem's ``gemodel``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    p_pct: float = Field(ge=0, le=100, description="chance per packet to go from good to bad state")
    r_pct: float = Field(gt=0, le=100, description="chance per packet to go from bad back to good")
    loss_bad_pct: float = Field(100.0, ge=0, le=100, description="loss chance in the bad state (1-h)")
    loss_good_pct: float = Field(0.0, ge=0, le=100, description="loss chance in the good state (1-k)")

    def stationary_loss(self) -> float:
        """Long-run fraction of packets this chain drops."""
        p, r = self.p_pct / 100.0, self.r_pct / 100.0
        bad = p / (p + r)
        return bad * self.loss_bad_pct / 100.0 + (1.0 - bad) * self.loss_good_pct / 100.0

    def mean_burst_packets(self) -> float:
        """Mean number of consecutive packets spent in the bad state."""
        return 100.0 / self.r_pct


class Direction(BaseModel):
    """What one direction of a link does to each packet."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    delay_ms: float = Field(0.0, ge=0, description="base one-way delay")
    jitter_ms: float = Field(0.0, ge=0, description="standard deviation of the one-way delay")
    jitter_interval_ms: float | None = Field(
        None, gt=0, description="correlation time of the jitter; default max(20 ms, 8 x jitter)"
    )
    loss_pct: float = Field(0.0, ge=0, le=100, description="independent random loss")
    burst: GilbertElliott | None = Field(None, description="bursty loss on top of the random loss")
    rate_kbit: float | None = Field(None, gt=0, description="rate limit (None: unlimited)")
    queue_packets: int = Field(1000, ge=1, le=4096, description="packets the link may hold")

    def jitter_interval(self) -> float:
        """Correlation time in ms. 8 x jitter keeps the delay slope well above -1, so FIFO order
        practically never has to hold a packet back (no reordering-induced delay growth)."""
        if self.jitter_interval_ms is not None:
            return self.jitter_interval_ms
        return max(20.0, 8.0 * self.jitter_ms)

    def expected_loss(self) -> float:
        random_loss = self.loss_pct / 100.0
        burst_loss = self.burst.stationary_loss() if self.burst else 0.0
        return 1.0 - (1.0 - random_loss) * (1.0 - burst_loss)


# Which band each 802.11 amendment runs in (IEEE 802.11-2016: a = clause 17 OFDM, 5 GHz; g = clause
# 18 ERP, 2.4 GHz; n = clause 19 HT, either band; ac = clause 21 VHT, 5 GHz only)
STANDARD_BANDS: dict[str, tuple[float, ...]] = {
    "802.11a": (5,),
    "802.11g": (2.4,),
    "802.11n": (2.4, 5),
    "802.11ac": (5,),
}


NS3_QUEUE_LIFETIME_MS = 500.0  # ns-3 3.37 WifiMacQueue MaxDelay default

# Unicast data modes a fixed rate may name, per standard: ns-3 3.37's WifiMode names for one spatial
# stream at 20 MHz (OfdmPhy::GetOfdmRate*, ErpOfdmPhy, HtPhy::GetHtMcs0-7, VhtPhy::GetVhtMcs0-8;
# VHT MCS 9 is not valid at 20 MHz with one stream, IEEE 802.11-2016 21.5)
_OFDM_RATES = (6, 9, 12, 18, 24, 36, 48, 54)
DATA_MODES: dict[str, tuple[str, ...]] = {
    "802.11a": tuple(f"OfdmRate{r}Mbps" for r in _OFDM_RATES),
    "802.11g": tuple(f"ErpOfdmRate{r}Mbps" for r in _OFDM_RATES),
    "802.11n": tuple(f"HtMcs{i}" for i in range(8)),
    "802.11ac": tuple(f"VhtMcs{i}" for i in range(9)),
}


class Wifi80211(BaseModel):
    """An 802.11 link simulated by ns-3 (fieldtest/netem/ns3/wifi_link.cc): the wireless nodes are
    stations of one access point; every figure the model uses comes from the standard or ns-3."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    standard: Literal["802.11a", "802.11g", "802.11n", "802.11ac"] = "802.11n"
    band_ghz: Literal[2.4, 5] = 5  # type: ignore[valid-type]  # PEP 586 has no float literals; pydantic checks it
    channel: int = Field(36, ge=1, le=196, description="channel number in the band (20 MHz wide)")
    distance_m: float = Field(gt=0, le=1000, description="every station's distance to the access point")
    path_loss_exponent: float = Field(
        3.0, gt=0, le=8, description="log-distance exponent (ns-3 LogDistancePropagationLossModel default 3)"
    )
    reference_loss_db: float | None = Field(
        None,
        gt=0,
        description="path loss at 1 m (dB); None: Friis for the channel's frequency (ns-3's own default "
        "is 46.6777 dB, Friis at 5.15 GHz)",
    )
    nakagami_m: float | None = Field(
        None, ge=0.5, le=20, description="Nakagami-m fading per frame (1: Rayleigh); None: no fading"
    )
    lag_bound_ms: float = Field(
        2.0, gt=0, description="a trial is invalid when the simulator fell further behind real time"
    )
    mac: Literal["infrastructure", "adhoc"] = Field(
        "infrastructure",
        description="infrastructure: the stations associate with one access point (ns-3 StaWifiMac / "
        "ApWifiMac); adhoc: one independent BSS, station to station, no access point (ns-3 AdhocWifiMac)",
    )
    rate_control: Literal["minstrel", "constant"] = Field(
        "minstrel",
        description="minstrel: Linux mac80211's default (ns-3 MinstrelHtWifiManager, MinstrelWifiManager "
        "for 802.11a/g); constant: every unicast data frame at data_mode (ns-3 ConstantRateWifiManager)",
    )
    data_mode: str | None = Field(None, description="the fixed rate's ns-3 WifiMode, e.g. OfdmRate54Mbps")
    # The radio's mechanisms (docs/networks.md, "Power save, beacons and other stations"); off by
    # default, so the plain profiles stay an ideal basic service set
    power_save: dict[str, float] = Field(
        default_factory=dict,
        description="station name -> dynamic power save timeout in ms (dozes after that long "
        "without sending a frame or receiving a unicast one); stations not named stay awake",
    )
    beacon_interval_tu: int = Field(
        100, ge=1, le=65535, description="beacon interval in TU of 1.024 ms (hostapd beacon_int default 100)"
    )
    dtim_period: int = Field(
        2, ge=1, le=255, description="beacons per DTIM: group frames wait for it while a station dozes"
    )
    listen_interval: int = Field(
        1, ge=1, le=255, description="a dozing station reads the TIM of every n-th beacon (and every DTIM)"
    )
    other_stations: int = Field(0, ge=0, le=30, description="other stations on the channel")
    other_load_kbit: float = Field(
        0.0, ge=0, description="offered load of each other station, half uplink, half downlink"
    )
    other_stations_radio: Literal["shared", "own"] = Field(
        "shared",
        description="shared: one simulated station sends all other stations' traffic (same frames on "
        "the air, half the simulator's work); own: each its own station, so they also contend with "
        "each other (docs/networks.md, 'Other stations')",
    )

    @model_validator(mode="after")
    def _held_frames_outlive_no_queue_lifetime(self) -> Wifi80211:
        """Held frames stay in ns-3's MAC queue, whose lifetime (WifiMacQueue MaxDelay, 500 ms)
        would drop what power save holds longer: the longest hold must stay under it."""
        hold_ms = max(self.listen_interval, self.dtim_period) * self.beacon_interval_tu * 1.024
        if self.power_save and hold_ms >= NS3_QUEUE_LIFETIME_MS:
            raise ValueError(
                f"power save would hold frames up to {hold_ms:g} ms (listen interval or DTIM period x "
                f"beacon interval), beyond ns-3's {NS3_QUEUE_LIFETIME_MS:g} ms queue lifetime"
            )
        return self

    @model_validator(mode="after")
    def _rate_and_mac_fit(self) -> Wifi80211:
        if (self.rate_control == "constant") != (self.data_mode is not None):
            raise ValueError("rate_control constant needs a data_mode, and only it takes one")
        if self.data_mode is not None and self.data_mode not in DATA_MODES[self.standard]:
            raise ValueError(
                f"data_mode {self.data_mode!r} is not a {self.standard} rate: {', '.join(DATA_MODES[self.standard])}"
            )
        if self.mac == "adhoc" and (self.power_save or self.other_stations):
            raise ValueError("an ad hoc link has no access point: no power_save, no other_stations")
        if self.power_save and self.standard in ("802.11a", "802.11g"):
            # the buffer gates the access point's QoS queues; ns-3 builds 802.11a/g without QoS
            raise ValueError(
                f"power_save needs 802.11n or 802.11ac (ns-3's {self.standard} MAC has no QoS queues)"
            )
        return self

    @model_validator(mode="after")
    def _band_fits_standard(self) -> Wifi80211:
        if self.band_ghz not in STANDARD_BANDS[self.standard]:
            bands = " or ".join(f"{b:g} GHz" for b in STANDARD_BANDS[self.standard])
            raise ValueError(f"{self.standard} runs in {bands}, not {self.band_ghz:g} GHz")
        return self

    def program_args(self) -> list[str]:
        """The simulation's arguments for wifi_link."""
        args = [
            f"--standard={self.standard.replace('.', '')}",
            f"--band={self.band_ghz:g}".replace("2.4", "2"),
            f"--channel={self.channel}",
            f"--distance={self.distance_m:g}",
            f"--exponent={self.path_loss_exponent:g}",
            f"--mac={self.mac}",
            f"--rate-control={self.rate_control}",
        ]
        args += [f"--data-mode={self.data_mode}"] if self.data_mode else []
        args += [f"--reference-loss={self.reference_loss_db:g}"] if self.reference_loss_db else []
        args += [f"--fading-m={self.nakagami_m:g}"] if self.nakagami_m else []
        args += [
            f"--beacon-interval-tu={self.beacon_interval_tu}",
            f"--dtim-period={self.dtim_period}",
            f"--listen-interval={self.listen_interval}",
            f"--others={self.other_stations}",
            f"--other-load-kbit={self.other_load_kbit:g}",
            f"--others-radio={self.other_stations_radio}",
        ]
        return args

    def power_save_args(self, stations: list[str]) -> list[str]:
        """Power save for the named stations that are stations of this link (a wired node has none)."""
        return [f"--ps={name}:{ms:g}" for name, ms in self.power_save.items() if name in stations]


class LinkProfile(BaseModel):
    """A named, documented link: per-direction impairments plus link-wide switches."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    description: str = ""
    source: str = Field("", description="where the numbers come from")
    up: Direction = Field(default_factory=Direction, description="machine -> rest of the network")
    down: Direction = Field(default_factory=Direction, description="rest of the network -> machine")
    multicast: bool = Field(True, description="False: the link drops multicast frames")
    cellular: bool = Field(
        False,
        description="every machine reaches the others through a modem of its own: in the seed topology "
        "the router/broker gets its own leg too (docs/networks.md)",
    )
    reorder: bool = Field(False, description="True: jitter may reorder packets (as plain netem)")
    overlay: bool = Field(
        False,
        description="every machine joins one overlay network tunnelled over UDP on its leg, multicast "
        "replicated by the sender, as ZeroTier (netem/overlay.py)",
    )
    wifi80211: Wifi80211 | None = Field(
        None, description="simulate the wireless nodes' link with ns-3's 802.11 model instead"
    )

    @model_validator(mode="after")
    def _simulated_or_configured(self) -> LinkProfile:
        """An 802.11 link's delay, loss and rate come from the simulation, not from fields."""
        if self.wifi80211 is not None and (
            self.up != Direction() or self.down != Direction() or not self.multicast or self.reorder
        ):
            raise ValueError(
                "wifi80211 simulates the link: leave out delay, jitter, loss, rate, multicast and reorder"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _symmetric_shorthand(cls, data: Any) -> Any:
        """Direction keys at the top level mean 'the same in both directions'."""
        if not isinstance(data, dict):
            return data
        shared = {k: data[k] for k in Direction.model_fields if k in data}
        if not shared:
            return data
        rest = {k: v for k, v in data.items() if k not in shared}
        for side in ("up", "down"):
            rest[side] = {**shared, **(rest.get(side) or {})}
        return rest

    def expected_rtt_ms(self) -> float:
        """Median round trip through this link alone (jitter is symmetric around the base)."""
        return self.up.delay_ms + self.down.delay_ms

    def expected_loss(self) -> float:
        """Round-trip loss: a probe is lost if either direction drops it."""
        return 1.0 - (1.0 - self.up.expected_loss()) * (1.0 - self.down.expected_loss())

    def summary(self) -> dict[str, Any]:
        """Compact form for trial records."""
        return self.model_dump(mode="json", exclude_none=True)


_ZHANG = (
    "Zhang et al., Comparison of Middlewares in Edge-to-Edge and Edge-to-Cloud Communication "
    "for Distributed ROS 2 Systems (docs/networks.md)"
)

BUILTIN: dict[str, dict[str, Any]] = {
    "ideal": {
        "description": "No impairment: only the emulator's own cost (used to measure it).",
        "source": "none: a reference link",
    },
    "ethernet": {
        "description": "Switched gigabit Ethernet: host, robot and broker on one wired LAN.",
        "source": f"Assumption (switched GbE one-way well under 0.1 ms); orientation: {_ZHANG}, Ethernet "
        "rows, 1.3-2.0 ms mean latency for DDS/Zenoh including the middleware.",
        "delay_ms": 0.05,
        "jitter_ms": 0.01,
        "rate_kbit": 1_000_000,
    },
    "wifi": {
        "description": "A station on a lab Wi-Fi access point at a few metres, moderate contention.",
        "source": f"Orientation: {_ZHANG}: Wi-Fi minus Ethernet mean latency is +3.2 ms (MQTT no broker) "
        "to +10.8/+12.8 ms (Zenoh broker/TCP); we take 4 ms per direction. Jitter, loss and rate are "
        "assumptions (802.11n/ac after MAC retransmissions).",
        "delay_ms": 4.0,
        "jitter_ms": 2.0,
        "loss_pct": 0.5,
        "rate_kbit": 50_000,
    },
    "wifi-lossy": {
        "description": "A station far from the access point: low modulation rate, retransmissions, loss bursts.",
        "source": "Assumptions: cell-edge 802.11 (MCS0 ~6.5 Mbit/s), doubled delay, strong jitter; "
        "bursty loss follows Chen 2019's observation that loss rises sharply with distance.",
        "delay_ms": 8.0,
        "jitter_ms": 5.0,
        "loss_pct": 2.0,
        "burst": {"p_pct": 1.0, "r_pct": 25.0, "loss_bad_pct": 50.0},
        "rate_kbit": 6_000,
        "queue_packets": 300,
    },
    # ns-3's 802.11 model (docs/networks.md, "The 802.11 link"). Every station at the profile's
    # distance from one access point: 802.11n (IEEE 802.11-2016 clause 19, HT) in the 5 GHz band,
    # channel 36, 20 MHz, as a lab access point and the TurtleBot 4's Raspberry Pi (BCM43455,
    # 802.11ac/n) support; log-distance loss with ns-3's default exponent 3.
    "wifi-80211": {
        "description": "Host and robot as stations of one 802.11n access point, 10 m away (ns-3 model).",
        "source": "Scenario assumption: a lab arena about 10 m from the access point. Fading: Nakagami "
        "m = 1.5, ns-3 NakagamiPropagationLossModel's default m0 for distances under 80 m. Everything "
        "else from IEEE 802.11-2016 and ns-3's Wi-Fi model defaults (docs/networks.md).",
        "wifi80211": {"standard": "802.11n", "band_ghz": 5, "distance_m": 10.0, "nakagami_m": 1.5},
    },
    "wifi-80211-far": {
        "description": "The same access point far away: 24 m, Rayleigh fading (ns-3 model).",
        "source": "Edge of reliable reception: the distance where the mean received power (ns-3 default "
        "16.02 dBm transmit power, exponent 3, Friis 46.73 dB at 1 m for 5.18 GHz) is 10 dB above -82 dBm, "
        "the minimum input sensitivity of the lowest rate (IEEE 802.11-2016, HT MCS 0 and OFDM 6 Mbit/s, "
        "20 MHz); 10 dB is the Rayleigh fade margin that 90 % of frames clear (1 - exp(-0.1) = 9.5 % "
        "fade deeper): 10^((16.02 - 46.73 + 72) / 30) = 24 m. Fading: Rayleigh (Nakagami m = 1), no "
        "line of sight.",
        "wifi80211": {"standard": "802.11n", "band_ghz": 5, "distance_m": 24.0, "nakagami_m": 1.0},
    },
    # Chen 2019's radio (NPS thesis): 802.11a, ad hoc, constant-rate OFDM
    # 54 Mbit/s, constant positions, everything else ns-3's defaults
    "wifi-80211a-adhoc": {
        "description": "Chen 2019's radio: 802.11a ad hoc at a fixed 54 Mbit/s, the robot 24 m from the host "
        "(ns-3 model).",
        "source": "Chen 2019 (NPS thesis): 802.11a, ad hoc, constant-rate OFDM "
        "54 Mbps, constant-position mobility, subscribers at a distance from the publisher, other settings "
        "ns-3 defaults. So: ns-3 AdhocWifiMac, ConstantRateWifiManager DataMode OfdmRate54Mbps (its "
        "ControlMode left at ns-3's default), YansWifiChannelHelper's default propagation "
        "(LogDistancePropagationLossModel, exponent 3, reference loss 46.6777 dB at 1 m, no fading), "
        "channel 36 (ns-3's default for 802.11a at 20 MHz). Distance 24 m: the start of the range Chen "
        "swept in fine steps (24-27 m); a sweep sets distance_m.",
        "wifi80211": {
            "standard": "802.11a",
            "band_ghz": 5,
            "channel": 36,
            "distance_m": 24.0,
            "reference_loss_db": 46.6777,
            "mac": "adhoc",
            "rate_control": "constant",
            "data_mode": "OfdmRate54Mbps",
        },
    },
    # The 802.11 link as a lab's Wi-Fi is (docs/networks.md, "Power save, beacons and other stations"):
    # the wifi-80211 radio plus the mechanisms every lab has, each at its shipped default.
    "wifi-lab": {
        "description": "wifi-80211 with power save on robot and laptop, beacons and DTIM as hostapd ships "
        "them, and five other stations with their own traffic (ns-3 model).",
        "source": "Power save on by default: Linux cfg80211 CONFIG_CFG80211_DEFAULT_PS=y (net/wireless/Kconfig). "
        "Robot (Raspberry Pi 4, brcmfmac): dozes after 2000 ms, pm2_sleep_ret = BRCMF_PS_MAX_TIMEOUT_MS "
        "for cfg80211's default timeout -1 (drivers/net/wireless/broadcom/brcm80211/brcmfmac/cfg80211.c, "
        "Linux 5.9 on). Laptop (a mac80211 driver): 100 ms, mac80211's dynamic power save default "
        "(net/mac80211/mlme.c, ieee80211_recalc_ps). Beacon interval 100 TU and DTIM period 2: hostapd's "
        "defaults (hostapd/hostapd.conf beacon_int, dtim_period). Listen interval 1: the station reads "
        "every beacon (IEEE 802.11-2016 11.2.3.1). Other stations: assumption, five laptops or phones "
        "at 1 Mbit/s each (a video call's order of magnitude), not fitted to any figure.",
        "wifi80211": {
            "standard": "802.11n",
            "band_ghz": 5,
            "distance_m": 10.0,
            "nakagami_m": 1.5,
            "power_save": {"robot": 2000.0, "host": 100.0},
            "beacon_interval_tu": 100,
            "dtim_period": 2,
            "listen_interval": 1,
            "other_stations": 5,
            "other_load_kbit": 1000.0,
        },
    },
    "4g": {
        "description": "A machine on a 4G/LTE modem (edge-to-cloud style): one cellular leg.",
        "source": f"Orientation: {_ZHANG}: 4G rows 58.8 ms (DDS) and 72.1 ms (Zenoh-TCP) mean latency; "
        "we take a 60 ms RTT with a slower uplink, a common LTE figure (assumption). Rates and loss "
        "are assumptions.",
        "up": {"delay_ms": 35.0, "jitter_ms": 8.0, "loss_pct": 0.5, "rate_kbit": 5_000},
        "down": {"delay_ms": 25.0, "jitter_ms": 6.0, "loss_pct": 0.5, "rate_kbit": 20_000},
        # the seed's 4G set-up: each machine on its own cellular modem, all joined by a ZeroTier
        # overlay (Zhang et al. section 3.1)
        "cellular": True,
        "overlay": True,
    },
}


def _build(name: str, spec: dict[str, Any], known: dict[str, LinkProfile], origin: str) -> LinkProfile:
    spec = dict(spec)
    base_name = spec.pop("extends", None)
    if base_name is not None:
        if base_name not in known:
            raise ProfileError(f"{origin}: profile {name!r} extends unknown profile {base_name!r}")
        merged = known[base_name].model_dump(exclude={"name"})
        for side in ("up", "down"):
            merged[side] = {**merged[side], **{k: v for k, v in spec.items() if k in Direction.model_fields}}
            merged[side].update(spec.pop(side, None) or {})
        if isinstance(merged.get("wifi80211"), dict) and isinstance(spec.get("wifi80211"), dict):
            spec["wifi80211"] = {**merged["wifi80211"], **spec["wifi80211"]}  # override single fields
        spec = {**merged, **{k: v for k, v in spec.items() if k not in Direction.model_fields}}
    try:
        return LinkProfile.model_validate({**spec, "name": name})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "profile"
        raise ProfileError(f"{origin}: profile {name!r}: {where}: {first['msg']}") from None


def builtin_profiles() -> dict[str, LinkProfile]:
    return {name: _build(name, spec, {}, "built-in profiles") for name, spec in BUILTIN.items()}


def load_profiles(specs: dict[str, Any] | None, origin: str = "trial plan") -> dict[str, LinkProfile]:
    """Built-in profiles plus user-defined ones (a mapping name -> fields, as in a trial plan).

    A user profile may ``extends: <name>`` another profile and override some fields.
    """
    profiles = builtin_profiles()
    if specs is None:
        return profiles
    if not isinstance(specs, dict):
        raise ProfileError(f"{origin}: link profiles must be a mapping of name -> fields")
    for name, spec in specs.items():
        if not isinstance(spec, dict):
            raise ProfileError(f"{origin}: profile {name!r} must be a mapping of fields")
        profiles[str(name)] = _build(str(name), spec, profiles, origin)
    return profiles


def load_profiles_file(path: str | Path) -> dict[str, LinkProfile]:
    """Profiles from a YAML file: either a mapping of profiles or one with a ``profiles`` key."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if isinstance(data, dict) and "profiles" in data:
        data = data["profiles"]
    return load_profiles(data, origin=str(path))


def get_profile(
    spec: str | dict[str, Any] | LinkProfile, user_profiles: dict[str, Any] | None = None
) -> LinkProfile:
    """Resolve a profile given by name (built-in or user-defined), by fields, or as a model."""
    if isinstance(spec, LinkProfile):
        return spec
    profiles = load_profiles(user_profiles)
    if isinstance(spec, dict):
        spec = dict(spec)
        name = str(spec.pop("name", "custom"))
        return _build(name, spec, profiles, "link profile")
    if spec not in profiles:
        raise ProfileError(f"unknown link profile {spec!r}; known: {', '.join(sorted(profiles))}")
    return profiles[spec]


def loss_tolerance(expected: float, packets: int, burst: GilbertElliott | None = None) -> float:
    """A generous bound on |measured - expected| loss for ``packets`` probes (about 4.5 sigma).

    Bursty loss is correlated from packet to packet, which widens the spread; the factor
    (1 + rho) / (1 - rho) with rho = 1 - p - r is the variance inflation of a two-state chain.
    """
    inflation = 1.0
    if burst is not None:
        rho = max(0.0, 1.0 - (burst.p_pct + burst.r_pct) / 100.0)
        inflation = (1.0 + rho) / (1.0 - rho)
    sigma = math.sqrt(max(expected * (1.0 - expected), 1e-4) * inflation / max(packets, 1))
    return 4.5 * sigma + 0.01
