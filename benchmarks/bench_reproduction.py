"""The seed studies' findings beside the kit's like-for-like figures.

    .venv/bin/python benchmarks/bench_reproduction.py --only RTI --reps 2 --duration 2   # a quick check
    .venv/bin/python benchmarks/bench_reproduction.py --json repro.json --md repro.md   # every finding
    .venv/bin/python benchmarks/bench_reproduction.py --only fastdds   # the Fast RTPS findings on Fast DDS

Every finding of Zhang et al., Fernandez et al., RTI perftest, Chen and Kim et al. that the kit can
set a figure beside (the papers' values copied into ``FINDINGS``, each naming its table or figure) names the
``fieldtest perf`` rows it needs (``CASES``). The script runs every row ``--reps`` times,
interleaved (repetition 0 of every row, then repetition 1, ...) so that a slow minute of the
shared machine cannot fall on all repetitions of one row, and records the machine's load, busy
cores and CPU steal over each row. Per finding the kit's figure is the mean over repetitions of a
paired comparison (each repetition's rows ran back to back) with a Student-t 95 % interval (for a
ratio: the geometric mean, the interval from the logarithms), and
the direction is computed from the figures: the seed's figure against its no-effect value, the
kit's interval against the same value. No setting is taken from a seed figure: message sizes, rates,
QoS profiles, security settings and link profiles are the kit's (docs/perf.md, docs/networks.md).
The findings of the studies that measured Fast RTPS (Fernandez, Chen, Kim) stand twice: on CycloneDDS
rows and, key ending ``-fastdds``, on Fast DDS rows set up as the seed was (``FASTDDS_OF``).

A script, not a test: it never fails because a direction is not reproduced. ``--from FILE`` writes
the table again from a ``--json`` file; ``--reference reference/bench-reproduction.json`` writes the
findings' summary that docs/benchmarks.md's table is rendered from (``tools/render_docs.py``);
``--until HH:MM`` (UTC) starts no row after that time and writes the table from what finished.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import itertools
import json
import math
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from fieldtest.perf import stats
from fieldtest.record.reference import ReproductionRow, ReproductionSummary, run_summary, write_reference
from fieldtest.testkit.docblocks import interval_text, reproduction_counts, reproduction_table

# ---------------------------------------------------------------------------------------------
# Table logic: intervals and directions (pure; tests/test_bench_reproduction.py)


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    n: int

    def text(self, digits: int = 2, scale: float = 1.0, unit: str = "") -> str:
        return interval_text(self.mean * scale, self.low * scale, self.high * scale, self.n, digits, unit)


def mean_interval(values: list[float]) -> Interval | None:
    """Mean and Student-t 95 % interval of repetition values, as ``fieldtest perf`` gives them
    (``fieldtest.perf.stats.mean_interval``); one value is its own interval."""
    iv = stats.mean_interval(values)
    if iv.mean is None:
        return None
    if iv.low is None or iv.high is None:
        return Interval(iv.mean, iv.mean, iv.mean, 1)
    return Interval(iv.mean, iv.low, iv.high, iv.n)


def ratio_interval(ratios: list[float]) -> Interval | None:
    """Geometric mean and 95 % interval of ratios, from the Student-t interval of their logarithms
    (ratios multiply: 2x and 0.5x average to 1x, and the interval never reaches below 0)."""
    logs = mean_interval([math.log(r) for r in ratios if r is not None and r > 0 and math.isfinite(r)])
    if logs is None:
        return None
    return Interval(math.exp(logs.mean), math.exp(logs.low), math.exp(logs.high), logs.n)


def direction(low: float, high: float, no_effect: float, tolerance: float = 0.0) -> int:
    """+1 above the no-effect band, -1 below it, 0 where the interval reaches into it."""
    if low > no_effect + tolerance:
        return 1
    if high < no_effect - tolerance:
        return -1
    return 0


def reproduced(seed_direction: int, kit: Interval | None, no_effect: float, tolerance: float = 0.0) -> bool:
    """The kit's interval says what the seed's figure says: the same side of the no-effect value, or
    no effect (within ``tolerance``) where the seed found none."""
    return kit is not None and direction(kit.low, kit.high, no_effect, tolerance) == seed_direction


def seed_direction(value: float, no_effect: float, tolerance: float = 0.0) -> int:
    return direction(value, value, no_effect, tolerance)


def same_order(seed: dict[str, float], kit: dict[str, float]) -> bool:
    """Both rank the same names in the same order (ascending)."""
    return sorted(seed, key=seed.__getitem__) == sorted(kit, key=kit.__getitem__)


# ---------------------------------------------------------------------------------------------
# The rows

# 52 m: where the mean received power falls to the -82 dBm minimum sensitivity, 10 dB below
# wifi-80211-far's 24 m at path-loss exponent 3: 24 * 10 ** (10 / 30) (docs/networks.md, "Distances")
PROFILES_YAML = """\
wifi-80211-40m:
  extends: wifi-80211-far
  wifi80211: {distance_m: 40}
wifi-80211-52m:
  extends: wifi-80211-far
  wifi80211: {distance_m: 52}
wifi-80211a-adhoc-10m:
  extends: wifi-80211a-adhoc
  wifi80211: {distance_m: 10}
wifi-80211a-adhoc-27m:
  extends: wifi-80211a-adhoc
  wifi80211: {distance_m: 27}
"""


def _case(mw="dds", sec="none", qos="default", net="loopback", msg="Array1k", subs=1, mode="roundtrip"):
    return {"middleware": mw, "security": sec, "qos": qos, "network": net, "message": msg,
            "subscribers": subs, "mode": mode}  # fmt: skip


CASES: dict[str, dict] = {
    # Zhang et al., Table 2: round trips, reliable, 10 Hz
    "eth-dds-1k": _case(net="ethernet"),
    "eth-dds-1m": _case(net="ethernet", msg="Array1m"),
    "eth-zenoh-1m": _case("zenoh-peer", net="ethernet", msg="Array1m"),
    "eth-mqttb-1m": _case("mqtt-broker", net="ethernet", msg="Array1m"),
    "wifi-dds-1k": _case(net="wifi-80211"),
    "wifi-zenoh-1k": _case("zenoh-peer", net="wifi-80211"),
    "wifi-dds-1m": _case(net="wifi-80211", msg="Array1m"),
    "wifi-zenoh-1m": _case("zenoh-peer", net="wifi-80211", msg="Array1m"),
    "4g-dds-1k": _case(net="4g"),
    "4g-zenoh-1k": _case("zenoh-peer", net="4g"),
    "4g-zenoh-1k-tls": _case("zenoh-peer", sec="mtls-acl", net="4g"),
    "4g-dds-256k": _case(net="4g", msg="Array256k"),
    "4g-zenoh-256k": _case("zenoh-peer", net="4g", msg="Array256k"),
    # Fernandez et al.: 0.25 MB, QoS a..e x plaintext/secure, one way over a wired link
    **{
        f"fern-{s}-{q}": _case(sec=sec, qos=f"fernandez-{q}", net="ethernet", msg="Array256k", mode="one-way")
        for s, sec in (("1", "none"), ("2", "sros2"))
        for q in "abcde"
    },  # fmt: skip
    # RTI perftest: strict reliable, round trip / 2, median
    **{
        f"rti-{sec}-{msg}": _case(sec=sec, msg=msg)
        for sec in (
            "none",
            "plugins-only",
            "rtps-sign",
            "rtps-encrypt",
            "sign-submessage-encrypt",
            "origin-auth-encrypt",
            "sign-submessage-origin-encrypt-data",
        )
        for msg in ("Array1k", "Array16k")
    },  # fmt: skip
    # Kim et al.: round trip / 2, 16 to 12 000 bytes, no security vs SROS2, wired
    **{
        f"kim-{sec}-{msg}": _case(sec=sec, net="ethernet", msg=msg)
        for sec in ("none", "sros2")
        for msg in ("Array16", "Array12000")
    },  # fmt: skip
    # Chen: one way on the 802.11 link; Default = the kit's default, Sensor = sensor
    **{
        f"chen-{qos}-{tag}": _case(qos=qos, net=net, msg="Array128", mode="one-way")
        for qos in ("default", "sensor")
        for tag, net in (("24m", "wifi-80211-far"), ("40m", "wifi-80211-40m"), ("52m", "wifi-80211-52m"))
    },  # fmt: skip
    "chen-dds-10m": _case(net="wifi-80211", msg="Array128", mode="one-way"),
    "chen-dds-10m-x4": _case(net="wifi-80211", msg="Array128", subs=4, mode="one-way"),
    "chen-dds-10m-sros2": _case(sec="sros2", net="wifi-80211", msg="Array128", mode="one-way"),
}


# Throughput at saturation (fieldtest perf --rate max: back to back, one way, on the ethernet link):
# Fernandez's 0.25 MB with QoS d (KEEP_LAST 1000 RELIABLE), Kim's SROS2 cost over three sizes
SATURATION_CASES: dict[str, dict] = {
    **{
        f"fern-sat-{s}-d": _case(sec=sec, qos="fernandez-d", net="ethernet", msg="Array256k", mode="one-way")
        for s, sec in (("1", "none"), ("2", "sros2"))
    },
    **{
        f"kim-sat-{sec}-{msg}": _case(sec=sec, net="ethernet", msg=msg, mode="one-way")
        for sec in ("none", "sros2")
        for msg in ("Array1k", "Array64k", "Array256k")
    },
}  # fmt: skip
CASES.update(SATURATION_CASES)

# The seeds' Fast RTPS findings on Fast DDS, like for like: Fernandez on loopback, as the seed ran
# (the CycloneDDS rows use the ethernet profile); Chen on Chen's radio (wifi-80211a-adhoc: 802.11a
# ad hoc at 54 Mbit/s) at 24 and 27 m, the two ends of the range Chen swept, and at 10 m; Kim wired.
FASTDDS = "fastdds"
FASTDDS_OF: dict[str, tuple[str, str | None]] = {  # Fast DDS row -> (CycloneDDS row, its network here)
    **{f"fern-fastdds-{s}-{q}": (f"fern-{s}-{q}", "loopback") for s in "12" for q in "abcde"},
    **{f"fern-sat-fastdds-{s}-d": (f"fern-sat-{s}-d", "loopback") for s in "12"},
    **{f"kim-fastdds-{sec}-{msg}": (f"kim-{sec}-{msg}", None)
       for sec in ("none", "sros2") for msg in ("Array16", "Array12000")},
    **{f"kim-sat-fastdds-{sec}-{msg}": (f"kim-sat-{sec}-{msg}", None)
       for sec in ("none", "sros2") for msg in ("Array1k", "Array64k", "Array256k")},
    **{f"chen-fastdds-{qos}-{tag}": (f"chen-{qos}-{cyclone_tag}", net) for qos in ("default", "sensor")
       for tag, cyclone_tag, net in (("24m", "24m", "wifi-80211a-adhoc"), ("27m", "40m", "wifi-80211a-adhoc-27m"))},
    **{f"chen-fastdds-10m{tail}": (f"chen-dds-10m{tail}", "wifi-80211a-adhoc-10m") for tail in ("", "-x4", "-sros2")},
}  # fmt: skip
# Fernandez's overhead packets (F5) come from the capture of the emulated link, which loopback has
# not: the plaintext cases a, c, d, e once more on the ethernet profile, as the CycloneDDS rows
FASTDDS_CAPTURED = {f"fern-fastdds-eth-1-{q}": f"fern-1-{q}" for q in "acde"}
FASTDDS_OF.update({name: (cyclone, None) for name, cyclone in FASTDDS_CAPTURED.items()})
for _name, (_cyclone, _network) in FASTDDS_OF.items():
    CASES[_name] = {
        **CASES[_cyclone],
        "middleware": FASTDDS,
        "network": _network or CASES[_cyclone]["network"],
    }
    if _cyclone in SATURATION_CASES:
        SATURATION_CASES[_name] = CASES[_name]
SATURATED_RATE = 0.0  # fieldtest.perf.run.SATURATION


def perf_case(name: str, rate: float, duration: float):
    """The PerfCase of row ``name``: the script's rate, or saturation for SATURATION_CASES."""
    from fieldtest.perf.run import PerfCase

    return PerfCase(**CASES[name], rate_hz=SATURATED_RATE if name in SATURATION_CASES else rate,
                    duration_s=duration)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Figures of one repetition's rows

Reps = dict[str, list[dict]]  # case name -> one record per repetition (see record_row)


def counted(rec: dict) -> bool:
    """A row that ran and whose link kept up (``fieldtest.perf.case.PerfRow.counted``): an invalid
    row stays in the JSON but no verdict uses it."""
    return rec["status"] == "ok" and rec.get("valid") is not False


def delivered(rec: dict) -> float | None:
    """Share of the messages that arrived (also in a row that failed after sending, e.g. "rate not
    held"); 0 for a row refused or failed before it sent anything; None for an invalid row."""
    if rec.get("valid") is False:
        return None
    loss = rec["figures"].get(LOSS)
    return 0.0 if loss is None else 1.0 - loss


def delivered_gain(carrier: dict, failing: dict) -> float:
    """The first row's delivered share minus the second's (TypeError on an invalid row: skipped)."""
    return delivered(carrier) - delivered(failing)


def fig(rec: dict, key: str) -> float | None:
    return rec["figures"].get(key) if counted(rec) else None


def overhead_share(rec: dict) -> float | None:
    """Reliability-only RTPS packets (HEARTBEAT, ACKNACK, GAP) / all datagrams on the robot link.
    IP fragments after a datagram's first are left out: Wireshark, which the seed counted with,
    shows a reassembled datagram as one packet."""
    kinds = (rec.get("traffic") or {}).get("kinds")
    if not counted(rec) or not kinds:
        return None
    total = sum(k["packets"] for name, k in kinds.items() if name != "ip_fragment")
    return kinds["heartbeat_acknack"]["packets"] / total if total else None


def paired(reps: Reps, names: list[str], fn: Callable[..., float | None]) -> list[float]:
    """fn over the named rows of each repetition, where all of them have a record."""
    count = min((len(reps.get(n, [])) for n in names), default=0)
    out = []
    for i in range(count):
        try:
            value = fn(*(reps[n][i] for n in names))
        except (TypeError, ZeroDivisionError):
            value = None
        if value is not None:
            out.append(value)
    return out


def ratio(key: str, scale: float = 1.0):
    return lambda a, b: fig(a, key) / fig(b, key) * scale


RTT, RTT50, OW = "round_trip_mean (ms)", "round_trip_p50 (ms)", "one_way_mean (ms)"
THR, LOSS = "throughput_received (B/s)", "relative_loss"


def fan_out_added(one: dict, four: dict) -> float | None:
    """Mean one-way latency per subscriber with 4 subscribers minus with 1 (ms)."""
    if not counted(one) or not counted(four):
        return None
    means = [s.get(OW) for s in four["subscribers"]]
    return statistics.fmean(means) - fig(one, OW) if None not in means else None


def secure_minus_qos(*recs: dict) -> float:
    """Fernandez: the smallest secure latency factor minus the largest plaintext QoS factor (vs 1a)."""
    plain, secure = recs[:5], recs[5:]
    base = fig(plain[0], OW)
    return min(fig(r, OW) for r in secure) / base - max(fig(r, OW) for r in plain[1:]) / base


def worst_is_b(*recs: dict) -> float:
    """Latency of case b over the largest of a, c, d, e (> 1: b is the worst)."""
    values = [fig(r, OW) for r in recs]
    return values[1] / max(values[:1] + values[2:])


def reliable_overhead_gain(a: dict, c: dict, d: dict, e: dict) -> float:
    """Mean overhead-packet share of the reliable cases c, d, e minus best-effort a (percentage points)."""
    return 100 * (statistics.fmean(overhead_share(r) for r in (c, d, e)) - overhead_share(a))


def secure_reliable_loss(d1: dict, e1: dict, d2: dict, e2: dict) -> float:
    """Mean loss of secure d, e minus plaintext d, e (percentage points)."""
    return 100 * (
        statistics.fmean(fig(r, LOSS) for r in (d2, e2)) - statistics.fmean(fig(r, LOSS) for r in (d1, e1))
    )


def loss_difference(default: dict, sensor: dict) -> float:
    """Default's loss minus Sensor's (percentage points)."""
    return 100 * (fig(default, LOSS) - fig(sensor, LOSS))


def protected_growth(*recs: dict) -> float:
    """RTI: mean extra median one-way (us) of the protected settings at 16 KB minus at 1 KB."""
    none_1k, none_16k, *rest = recs
    small = [fig(r, RTT50) - fig(none_1k, RTT50) for r in rest[0::2]]
    large = [fig(r, RTT50) - fig(none_16k, RTT50) for r in rest[1::2]]
    return 1e3 / 2 * (statistics.fmean(large) - statistics.fmean(small))


def ratio_growth(n_small: dict, s_small: dict, n_large: dict, s_large: dict) -> float:
    """Kim: SROS2/none round-trip ratio at 12 000 B minus at 16 B."""
    return fig(s_large, RTT) / fig(n_large, RTT) - fig(s_small, RTT) / fig(n_small, RTT)


def loss_gain(plain: dict, secure: dict) -> float:
    """The secure row's loss minus the plaintext row's (percentage points)."""
    return 100 * (fig(secure, LOSS) - fig(plain, LOSS))


def throughput_cost_growth(*recs: dict) -> float:
    """Kim at saturation: the secure / none delivered-throughput ratio at the smallest size minus at
    the largest (records: none, sros2 per size, smallest first); > 0: the cost grows with size."""
    ratios = [fig(s, THR) / fig(n, THR) for n, s in zip(recs[0::2], recs[1::2], strict=True)]
    return ratios[0] - ratios[-1]


# ---------------------------------------------------------------------------------------------
# The findings


@dataclass
class Finding:
    key: str
    study: str
    source: str  # table or figure of the paper
    claim: str
    seed_text: str  # the seed's figures
    seed_value: float | None  # the comparison's value from the seed's figures (None: figure only)
    cases: list[str]
    kit: Callable[..., float | None]  # over one repetition's records of ``cases``
    unit: str = ""
    no_effect: float = 1.0
    tolerance: float = 0.0
    stated_direction: int | None = None  # where the paper gives a direction but no value
    notes: str = ""
    digits: int = 2

    @property
    def expected(self) -> int:
        if self.seed_value is None:
            return self.stated_direction or 0
        return seed_direction(self.seed_value, self.no_effect, self.tolerance)


FERN = [f"fern-{s}-{q}" for s in "12" for q in "abcde"]
RTI_PROTECTED = (
    "rtps-sign",
    "rtps-encrypt",
    "sign-submessage-encrypt",
    "origin-auth-encrypt",
    "sign-submessage-origin-encrypt-data",
)
# RTI perftest, median one way (us) at 1024 and 16384 B: no protection, then RTPS
# sign, RTPS encrypt, sign + submsg encrypt, sign + origin auth + data encrypt, sign + submsg
# encrypt with origin auth + data encrypt ("full"), in RTI_PROTECTED's order
RTI_NONE_1K, RTI_NONE_16K = 23, 55
RTI_1K = dict(zip(RTI_PROTECTED, (27, 27, 30, 32, 35), strict=True))
RTI_16K = dict(zip(RTI_PROTECTED, (63, 66, 72, 74, 83), strict=True))
CHEN_TABLE5_DEFAULT_NS = (712_332, 10_706_034, 20_725_019, 30_793_318)
NOT_FAST_RTPS = (
    "seed: Fast RTPS, both ends on one machine's loopback, latency from Wireshark's timestamps of the "
    "fragments; kit: CycloneDDS on an emulated link"
)

FINDINGS: list[Finding] = [
    Finding(
        "Z1",
        "Zhang",
        "Table 2a",
        "round trip grows with size (Ethernet, DDS): Array1m / Array1k",
        "19.28 / 1.29 ms",
        19.28 / 1.29,
        ["eth-dds-1m", "eth-dds-1k"],
        ratio(RTT),
        "x",
        notes="seed: two laptops; kit: emulated gigabit link, one machine",
    ),
    Finding(
        "Z2",
        "Zhang",
        "Table 2a",
        "Zenoh slower than DDS at 1 MB on Ethernet: Zenoh / DDS round trip",
        "Zenoh-TCP 32.88 / DDS 19.28 ms",
        32.88 / 19.28,
        ["eth-zenoh-1m", "eth-dds-1m"],
        ratio(RTT),
        "x",
        notes="seed Zenoh-TCP = DDS + zenoh-bridge-ros2dds; kit zenoh-peer runs Zenoh directly (no bridge)",
    ),
    Finding(
        "Z3",
        "Zhang",
        "Table 2a",
        "MQTT with a broker far slowest at 1 MB on Ethernet: MQTT-broker / DDS",
        "5545.04 / 19.28 ms",
        5545.04 / 19.28,
        ["eth-mqttb-1m", "eth-dds-1m"],
        ratio(RTT),
        "x",
        notes="seed: mqtt_client bridge between DDS hosts; kit: its own MQTT processes, Mosquitto on its own machine",
    ),
    Finding(
        "Z4",
        "Zhang",
        "Table 2b",
        "DDS slower than Zenoh at 1 KB on Wi-Fi: DDS / Zenoh round trip",
        "51.40 / 14.82 ms",
        51.40 / 14.82,
        ["wifi-dds-1k", "wifi-zenoh-1k"],
        ratio(RTT),
        "x",
        notes="seed blames multicast discovery on Wi-Fi; kit DDS announces participants by SPDP multicast "
        "(default `spdp`, as the lab), endpoints and data by unicast (docs/networks.md, DDS discovery); "
        "kit link: ns-3 802.11n, both machines stations of one access point, 10 m",
    ),
    Finding(
        "Z5",
        "Zhang",
        "Table 2b",
        "DDS fails at 1 MB on Wi-Fi where Zenoh carries it: delivered share, Zenoh - DDS",
        "DDS -, Zenoh-TCP 5960.16 ms",
        1.0,
        ["wifi-zenoh-1m", "wifi-dds-1m"],
        delivered_gain,
        "",
        no_effect=0.0,
        notes="a refused row, or one that sent nothing, counts as nothing delivered",
    ),
    Finding(
        "Z6",
        "Zhang",
        "Fig. 6",
        "Zenoh's throughput higher than DDS's on Wi-Fi (Array1m): Zenoh / DDS received B/s",
        "figure only: Zenoh higher",
        None,
        ["wifi-zenoh-1m", "wifi-dds-1m"],
        ratio(THR),
        "x",
        stated_direction=1,
        notes="10 Hz offered load, as the seed's runs",
    ),
    Finding(
        "Z7",
        "Zhang",
        "Table 2c",
        "DDS faster than Zenoh at 1 KB on 4G: DDS / Zenoh round trip",
        "58.80 / 72.11 ms",
        58.80 / 72.11,
        ["4g-dds-1k", "4g-zenoh-1k"],
        ratio(RTT),
        "x",
        notes="seed: cellular dongles + ZeroTier; kit: 4g profile (netem legs, overlay)",
    ),
    Finding(
        "Z8",
        "Zhang",
        "Table 2c",
        "DDS fails at 256 KB on 4G where Zenoh carries it: delivered share, Zenoh - DDS",
        "DDS -, Zenoh-TCP 7458.61 ms",
        1.0,
        ["4g-zenoh-256k", "4g-dds-256k"],
        delivered_gain,
        "",
        no_effect=0.0,
        notes="256 KB at 10 Hz = 21 Mbit/s, more than the 4g profile's 5 Mbit/s uplink: the kit refuses both rows",
    ),
    Finding(
        "Z9",
        "Zhang",
        "Table 4",
        "security costs little at 1 KB on 4G (Zenoh): secure / plain round trip",
        "77.35 / 72.11 ms",
        77.35 / 72.11,
        ["4g-zenoh-1k-tls", "4g-zenoh-1k"],
        ratio(RTT),
        "x",
        notes="seed: SROS2 over the bridge; kit: Zenoh mutual TLS + ACL (mtls-acl)",
    ),
    Finding(
        "F1",
        "Fernandez",
        "Table III",
        "security costs more than QoS: smallest secure factor - largest QoS factor (latency vs 1a)",
        "2a..2e >= +138.8 %, 1b..1e <= +54.3 %",
        2.388 - 1.543,
        FERN,
        secure_minus_qos,
        "",
        no_effect=0.0,
        notes=f"{NOT_FAST_RTPS} (ethernet profile); one-way latency; secure = sros2",
    ),
    Finding(
        "F2",
        "Fernandez",
        "Table III",
        "security cuts throughput at 0.25 MB: 2a / 1a received B/s",
        "0.988 / 2.477 Gbps",
        0.988 / 2.477,
        ["fern-2-a", "fern-1-a"],
        ratio(THR),
        "x",
        notes="seed sends as fast as it can; kit sends at 10 Hz, so received throughput is the offered "
        "load less loss",
    ),
    Finding(
        "F3",
        "Fernandez",
        "Table III",
        "KEEP_ALL + TRANSIENT_LOCAL (b) worst, plaintext: b / worst of a, c, d, e",
        "162 / 129.6 us",
        162 / 129.6,
        FERN[:5],
        worst_is_b,
        "x",
        notes=NOT_FAST_RTPS,
    ),
    Finding(
        "F4",
        "Fernandez",
        "Table III",
        "KEEP_ALL + TRANSIENT_LOCAL (b) worst, secure: b / worst of a, c, d, e",
        "345.6 / 297.7 us",
        345.6 / 297.7,
        FERN[5:],
        worst_is_b,
        "x",
        notes=NOT_FAST_RTPS,
    ),
    Finding(
        "F5",
        "Fernandez",
        "Table II",
        "RELIABLE adds overhead packets: share of c, d, e - share of a (plaintext)",
        "c 33.56, d 21.38, e 21.91 vs a 1.23 %",
        (33.56 + 21.38 + 21.91) / 3 - 1.23,
        ["fern-1-a", "fern-1-c", "fern-1-d", "fern-1-e"],
        reliable_overhead_gain,
        " pp",
        no_effect=0.0,
        notes="overhead = HEARTBEAT/ACKNACK/GAP-only datagrams on the robot link (capture) / all datagrams "
        "(later IP fragments left out, as Wireshark shows a datagram once); seed Fast RTPS, kit CycloneDDS",
    ),
    Finding(
        "F6",
        "Fernandez",
        "Table II",
        "secure RELIABLE still loses at 0.25 MB: loss of 2d, 2e - 1d, 1e",
        "2d 12.1 %, 2e 12.9 % vs 1d, 1e 0 %",
        (12.1 + 12.9) / 2 - 0.0,
        ["fern-1-d", "fern-1-e", "fern-2-d", "fern-2-e"],
        secure_reliable_loss,
        " pp",
        no_effect=0.0,
        notes=NOT_FAST_RTPS,
    ),
    Finding(
        "R1",
        "RTI perftest",
        "security table",
        "plugins without protection cost nothing (1 KB): plugins-only / none median",
        "23 / 23 us",
        23 / 23,
        ["rti-plugins-only-Array1k", "rti-none-Array1k"],
        ratio(RTT50),
        "x",
        tolerance=0.05,
        notes="seed: Connext on 10 Gbps Ethernet; kit: CycloneDDS on loopback; 'no effect' = within 5 %",
    ),
    Finding(
        "R2",
        "RTI perftest",
        "security table",
        "plugins without protection cost nothing (16 KB): plugins-only / none median",
        "55 / 55 us",
        55 / 55,
        ["rti-plugins-only-Array16k", "rti-none-Array16k"],
        ratio(RTT50),
        "x",
        tolerance=0.05,
        notes="as R1",
    ),
    Finding(
        "R4",
        "RTI perftest",
        "security table",
        "protection's extra latency grows with size: extra at 16 KB - at 1 KB",
        "e.g. origin auth: +19 us at 16 KB, +9 us at 1 KB",
        statistics.fmean(v - RTI_NONE_16K for v in RTI_16K.values())
        - statistics.fmean(v - RTI_NONE_1K for v in RTI_1K.values()),
        [
            "rti-none-Array1k",
            "rti-none-Array16k",
            *(f"rti-{s}-{m}" for s in RTI_PROTECTED for m in ("Array1k", "Array16k")),
        ],
        protected_growth,
        " us",
        no_effect=0.0,
        digits=1,
        notes="median round trip / 2, as perftest",
    ),
    Finding(
        "K1",
        "Kim",
        "wired latency figure",
        "SROS2's latency cost grows with size: ratio at 12 000 B - at 16 B",
        "figure only: grows, almost doubles",
        None,
        ["kim-none-Array16", "kim-sros2-Array16", "kim-none-Array12000", "kim-sros2-Array12000"],
        ratio_growth,
        "",
        no_effect=0.0,
        stated_direction=1,
        notes="Fast RTPS on a wired LAN; kit: ethernet profile",
    ),
    Finding(
        "K2",
        "Kim",
        "throughput figure",
        "SROS2 roughly halves throughput (12 000 B): SROS2 / none received B/s",
        "figure only: about 0.5",
        0.5,
        ["kim-sros2-Array12000", "kim-none-Array12000"],
        ratio(THR),
        "x",
        notes="seed: packets back to back with a 1 ms pause; kit at 10 Hz: received = offered load less loss",
    ),
    Finding(
        "C1",
        "Chen",
        "loss vs distance",
        "Default loses less than Sensor before 25.7 m (24 m): loss Default - Sensor",
        "figure only: less",
        None,
        ["chen-default-24m", "chen-sensor-24m"],
        loss_difference,
        " pp",
        no_effect=0.0,
        stated_direction=-1,
        notes="seed: ns-3 802.11a, fixed 54 Mbit/s, ad hoc; kit: ns-3 802.11n, Minstrel-HT, access point",
    ),
    Finding(
        "C2",
        "Chen",
        "loss vs distance",
        "Default loses more than Sensor beyond 25.7 m (40 m): loss Default - Sensor",
        "figure only: more",
        None,
        ["chen-default-40m", "chen-sensor-40m"],
        loss_difference,
        " pp",
        no_effect=0.0,
        stated_direction=1,
        notes="as C1; 40 m: wifi-80211-far with distance_m 40",
    ),
    Finding(
        "C2b",
        "Chen",
        "loss vs distance",
        "Default loses more than Sensor beyond 25.7 m (52 m): loss Default - Sensor",
        "figure only: more",
        None,
        ["chen-default-52m", "chen-sensor-52m"],
        loss_difference,
        " pp",
        no_effect=0.0,
        stated_direction=1,
        notes="as C1; 52 m: mean received power at the -82 dBm minimum sensitivity",
    ),
    Finding(
        "C3",
        "Chen",
        "Table 5",
        "more subscribers add latency: mean per node with 4 - with 1 (Default)",
        "0.71 / 10.71 / 20.73 / 30.79 vs 0.64 ms",
        statistics.fmean(CHEN_TABLE5_DEFAULT_NS) / 1e6 - 0.639480,
        ["chen-dds-10m", "chen-dds-10m-x4"],
        fan_out_added,
        " ms",
        no_effect=0.0,
        notes="as C1, 10 m (wifi-80211); every subscriber a station of its own",
    ),
    Finding(
        "C4",
        "Chen",
        "security overhead",
        "security's latency cost, Default, 0-24 m (10 m): sros2 / none one way",
        "+60 %",
        1.60,
        ["chen-dds-10m-sros2", "chen-dds-10m"],
        ratio(OW),
        "x",
        notes="as C1",
    ),
]


SAT_MODE = "saturation (--rate max), one way"
SAT_CPU_BOUND = "both ends share 2 cores, so the rate is CPU-bound"
SAT_NOTES = f"{SAT_MODE}, ethernet profile; {SAT_CPU_BOUND}"
FINDINGS += [
    Finding(
        "F2s",
        "Fernandez",
        "Table III",
        "security cuts throughput at 0.25 MB, sent as fast as accepted: 2d / 1d delivered B/s",
        "0.850 / 1.979 Gbps",
        0.850 / 1.979,
        ["fern-sat-2-d", "fern-sat-1-d"],
        ratio(THR),
        "x",
        notes=f"{SAT_NOTES}; {NOT_FAST_RTPS}",
    ),
    Finding(
        "F6s",
        "Fernandez",
        "Table II",
        "secure RELIABLE still loses at 0.25 MB, sent as fast as accepted: loss 2d - 1d",
        "2d 12.1 % vs 1d 0 %",
        12.1,
        ["fern-sat-1-d", "fern-sat-2-d"],
        loss_gain,
        " pp",
        no_effect=0.0,
        notes=f"{SAT_NOTES}; loss: not delivered by the row's end plus its drain time",
    ),
    Finding(
        "K2s",
        "Kim",
        "throughput figure",
        "SROS2 roughly halves throughput, sent as fast as accepted (Array1k): SROS2 / none delivered B/s",
        "figure only: about 0.5",
        0.5,
        ["kim-sat-sros2-Array1k", "kim-sat-none-Array1k"],
        ratio(THR),
        "x",
        notes=SAT_NOTES,
    ),
    Finding(
        "K3s",
        "Kim",
        "throughput figure",
        "SROS2's throughput cost grows with size: SROS2 / none at Array1k - at Array256k",
        "figure only: grows",
        None,
        [f"kim-sat-{sec}-{msg}" for msg in ("Array1k", "Array64k", "Array256k") for sec in ("none", "sros2")],
        throughput_cost_growth,
        "",
        no_effect=0.0,
        stated_direction=1,
        notes=f"{SAT_NOTES}; Array64k's rows shown beside",
    ),
]


FASTDDS_NOTES = {
    "F": "seed: Fast RTPS, both ends on one machine's loopback; kit: Fast DDS 2.9.1 (Debian's libfastrtps), "
    "both ends on loopback; secure = sros2 (Fast DDS's builtin plugins)",
    "K": "seed: Fast RTPS on a wired LAN; kit: Fast DDS 2.9.1 on the ethernet profile; secure = sros2",
    "C": "seed: Fast RTPS on ns-3 802.11a ad hoc at 54 Mbit/s; kit: Fast DDS 2.9.1 on Chen's radio "
    "(wifi-80211a-adhoc, the same set-up); RTPS packets by kind from the capture of the robot's link",
}
# Chen's radio: 24 and 27 m are the ends of the range Chen swept, either side of the seed's 25.7 m
FASTDDS_CLAIMS = {"C2": "Default loses more than Sensor beyond 25.7 m (27 m): loss Default - Sensor",
                  "C3": "more subscribers add latency: mean per node with 4 - with 1 (Default, 10 m)",
                  "C4": "security's latency cost, Default, 0-24 m (10 m): sros2 / none one way"}  # fmt: skip
FASTDDS_SUFFIX = "-fastdds"


# CycloneDDS row -> its Fast DDS twin (the captured ethernet rows stand for F5e alone)
FASTDDS_TWIN = {cyclone: name for name, (cyclone, _) in FASTDDS_OF.items() if name not in FASTDDS_CAPTURED}


def fast_dds_finding(finding: Finding) -> Finding | None:
    """``finding`` on the seed's own vendor: the same seed figure and metric over the Fast DDS rows
    (FASTDDS_OF), or None where the kit has no Fast DDS row for one of its rows. A saturation
    finding's note names the Fast DDS rows' own network."""
    if not all(c in FASTDDS_TWIN for c in finding.cases):
        return None
    cases = [FASTDDS_TWIN[c] for c in finding.cases]
    notes = FASTDDS_NOTES[finding.key[0]]
    if finding.key.endswith("s"):
        networks = dict.fromkeys(CASES[c]["network"] for c in cases)
        where = ", ".join(f"{n} profile" if n != "loopback" else n for n in networks)
        notes += f"; {SAT_MODE}, {where}; {SAT_CPU_BOUND}"
    return replace(
        finding,
        key=finding.key + FASTDDS_SUFFIX,
        claim=FASTDDS_CLAIMS.get(finding.key, finding.claim),
        cases=cases,
        notes=notes,
    )


FINDINGS = [
    variant for finding in FINDINGS for variant in (finding, fast_dds_finding(finding)) if variant is not None
]
_f5 = next(i for i, f in enumerate(FINDINGS) if f.key == "F5" + FASTDDS_SUFFIX)
FINDINGS.insert(
    _f5 + 1,
    replace(
        FINDINGS[_f5],
        key="F5e" + FASTDDS_SUFFIX,
        claim=FINDINGS[_f5].claim + ", on the ethernet profile, where the link is captured",
        cases=list(FASTDDS_CAPTURED),
        notes="seed: Fast RTPS on loopback, counted with Wireshark; kit: Fast DDS 2.9.1 on the ethernet "
        "profile (the capture needs the emulated link), counted as F5",
    ),
)

# Metrics the kit takes from the capture of the emulated robot link (none on loopback)
CAPTURED_METRICS: tuple[Callable, ...] = (reliable_overhead_gain,)
# Metrics for which a refused row is a figure (nothing delivered), not a gap
REFUSAL_MEASURES: tuple[Callable, ...] = (delivered_gain,)


@functools.cache
def script_profiles() -> dict:
    """The built-in link profiles and the script's own (PROFILES_YAML)."""
    import yaml

    from fieldtest.netem.profiles import load_profiles

    return load_profiles(yaml.safe_load(PROFILES_YAML), origin="bench_reproduction.PROFILES_YAML")


def not_measurable(finding: Finding, rate_hz: float = 10.0, profiles: dict | None = None) -> str:
    """Why the kit cannot take ``finding``'s metric on its rows ("" where it can), from the rows'
    definitions alone: a figure from the link capture on rows over loopback, or a row that
    ``fieldtest perf`` refuses for its middleware, settings or link."""
    from fieldtest.perf.run import PerfInputError, check_case

    profiles = profiles if profiles is not None else script_profiles()
    rows = [c for c in finding.cases if c in CASES]
    reasons = []
    on_loopback = [c for c in rows if CASES[c]["network"] == "loopback"]
    if finding.kit in CAPTURED_METRICS and on_loopback:
        reasons.append(
            "packets by kind come from the capture of the emulated robot link, and "
            f"{', '.join(f'`{c}`' for c in on_loopback)} run on loopback, which has none"
        )
    if finding.kit not in REFUSAL_MEASURES:
        for name in rows:
            try:
                check_case(perf_case(name, rate_hz, 1.0), profiles)
            except PerfInputError as exc:
                reasons.append(f"`{name}` refused: {exc}")
    return "; ".join(reasons)


# ---------------------------------------------------------------------------------------------
# Running the rows


def record_row(name: str, rep: int, row, load) -> dict:
    traffic = dict(row.link.get("traffic") or {})
    sim = row.link.get("simulator") or {}
    return {
        "case": name, "rep": rep, "status": row.status, "error": row.error,
        "valid": row.valid, "invalid_reasons": row.invalid_reasons, "figures": row.figures,
        "subscribers": [{k: v for k, v in s.items() if not isinstance(v, (list, dict))} for s in row.subscribers],
        "traffic": {"kinds": traffic.get("kinds")} if traffic.get("kinds") else {},
        "simulator": wifi_summary(sim),
        "load": {"loadavg_1min": load.loadavg_1min, "core_busy_percent": load.core_busy_percent,
                 "steal_percent": load.steal_percent},
    }  # fmt: skip


def wifi_summary(sim: dict) -> dict:
    """Frames, retries per frame (by MPDU size class) and MAC drops of the 802.11 link's unicast."""
    unicast = (sim.get("tx") or {}).get("unicast") or {}
    if not unicast:
        return {}
    by_size = {cls: round(v.get("retries", 0) / v["frames"], 2)
               for cls, v in (unicast.get("by_size") or {}).items() if v.get("frames")}  # fmt: skip
    drops = sum(sum(r.values()) if isinstance(r, dict) else r for r in (sim.get("mac_drops") or {}).values())
    return {"frames": unicast.get("frames"), "retries": unicast.get("retries"), "retries_by_size": by_size,
            "mac_drops": drops, "lag_p99_ms": (sim.get("lag_ms") or {}).get("p99")}  # fmt: skip


def needed_cases(findings: list[Finding]) -> list[str]:
    names: list[str] = []
    for finding in findings:
        names += [c for c in finding.cases if c not in names]
    return names


def run_all(names: list[str], reps: int, rate: float, duration: float, until: dt.datetime | None,
            work: Path, json_path: Path | None, rerun_invalid: int = 0) -> tuple[Reps, dict]:  # fmt: skip
    """Every row ``reps`` times; a row invalid by its link is run again up to ``rerun_invalid`` times,
    the last run taking its place (repetitions stay paired) and the invalid ones kept in
    ``meta["invalid"]``."""
    from bench_twin import measured_load

    from fieldtest.netem import load_profiles_file
    from fieldtest.perf.run import run_row

    profiles_file = work / "profiles.yaml"
    profiles_file.write_text(PROFILES_YAML)
    profiles = load_profiles_file(profiles_file)
    results: Reps = {n: [] for n in names}
    meta = {"reps": reps, "rate_hz": rate, "duration_s": duration, "started": _now(), "missing": [],
            "invalid": [], "command": " ".join([".venv/bin/python benchmarks/bench_reproduction.py", *sys.argv[1:]])}  # fmt: skip
    for rep in range(reps):
        for name in names:
            if until is not None and dt.datetime.now(dt.UTC) >= until:
                meta["missing"].append(f"{name} rep {rep}")
                continue
            case = perf_case(name, rate, duration)
            print(f"... rep {rep} {name}: {case.label}", file=sys.stderr, flush=True)
            for attempt in range(rerun_invalid + 1):
                if attempt:
                    meta["invalid"].append(results[name].pop())
                with measured_load() as load:
                    row = run_row(case, work / f"{name}-{rep}-{attempt}", profiles=profiles)
                results[name].append(record_row(name, rep, row, load))
                if row.valid is not False:
                    break
                print(f"    invalid: {'; '.join(row.invalid_reasons)}", file=sys.stderr, flush=True)
            if row.status != "ok":
                print(f"    {row.status}: {row.error}", file=sys.stderr, flush=True)
            if json_path:
                _write_json(json_path, results, meta)
    meta["ended"] = _now()
    return results, meta


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _write_json(path: Path, results: Reps, meta: dict) -> None:
    path.write_text(json.dumps({"meta": meta, "results": results}, indent=1, default=str))


# ---------------------------------------------------------------------------------------------
# The table


@dataclass
class Verdict:
    finding: Finding
    kit: Interval | None
    values: list[float] = field(default_factory=list)

    @property
    def reproduced(self) -> bool:
        f = self.finding
        return reproduced(f.expected, self.kit, f.no_effect, f.tolerance)


def judge(finding: Finding, reps: Reps) -> Verdict:
    values = paired(reps, finding.cases, finding.kit)
    interval = ratio_interval(values) if finding.unit == "x" else mean_interval(values)
    return Verdict(finding, interval, values)


def case_summary(rec_list: list[dict]) -> str:
    """One row's figures over its repetitions: status, latency, loss, overhead, 802.11 retries."""
    ok = [r for r in rec_list if counted(r)]
    if not rec_list:
        return "not run"
    if not ok:
        if invalid := [r for r in rec_list if r.get("valid") is False]:
            return f"invalid ({len(invalid)} of {len(rec_list)} rows): {invalid[0]['invalid_reasons'][0]}"
        errors = sorted({r["error"] for r in rec_list}) or ["not run"]
        return f"{rec_list[0]['status'] if rec_list else 'not run'}: {errors[0]}"
    f = [r["figures"] for r in ok]
    mode_key = RTT if ok[0]["figures"].get("round_trip_mean (ms)") else OW
    p50_key = RTT50 if mode_key == RTT else "one_way_p50 (ms)"
    parts = [f"{'rtt' if mode_key == RTT else 'one-way'} mean {statistics.fmean(x.get(mode_key) or math.nan for x in f):.2f} "
             f"/ p50 {statistics.fmean(x.get(p50_key) or math.nan for x in f):.2f} ms",
             f"loss {100 * statistics.fmean(x.get(LOSS) or 0.0 for x in f):.1f} %"]  # fmt: skip
    shares = [s for s in (overhead_share(r) for r in ok) if s is not None]
    if shares:
        parts.append(f"overhead pkts {100 * statistics.fmean(shares):.1f} %")
    if captured := rtps_packets(ok):
        parts.append(captured)
    sims = [r["simulator"] for r in ok if r.get("simulator")]
    if sims:
        retries = sum(s.get("retries") or 0 for s in sims) / max(1, sum(s.get("frames") or 0 for s in sims))
        lag = max((s.get("lag_p99_ms") or 0.0) for s in sims)
        parts.append(
            f"802.11 retries/frame {retries:.2f}, MAC drops {sum(s.get('mac_drops') or 0 for s in sims)}, "
            f"simulator lag p99 <= {lag:.1f} ms"
        )
        by_size = sims[-1].get("retries_by_size")
        if by_size:
            parts.append("by size " + " ".join(f"{k}:{v}" for k, v in by_size.items()))
    if len(ok[0]["subscribers"]) > 1:
        per_sub = zip(*([s.get(OW) or math.nan for s in r["subscribers"]] for r in ok), strict=True)
        parts.append("per subscriber " + " / ".join(f"{statistics.fmean(v):.2f}" for v in per_sub) + " ms")
    if rec_list[0]["case"] in SATURATION_CASES:
        parts.append(saturation_summary(f))
    if len(ok) < len(rec_list):
        parts.append(f"{len(rec_list) - len(ok)} of {len(rec_list)} failed: {rec_list[0]['error'] or ''}")
    return ", ".join(parts)


RTPS_KINDS = ("user_data", "heartbeat_acknack", "rtps_protected")


def rtps_packets(recs: list[dict]) -> str:
    """The capture's RTPS datagrams by kind per repetition, with their mean size: repairs sent
    bundled (several DATA and a HEARTBEAT in one datagram, as Chen saw of Fast RTPS) show as
    user-data datagrams larger than one sample's."""
    kinds = [k for k in ((r.get("traffic") or {}).get("kinds") for r in recs) if k]
    parts = []
    for kind in RTPS_KINDS:
        packets = sum(k.get(kind, {}).get("packets", 0) for k in kinds)
        if packets:
            size = sum(k[kind]["bytes"] for k in kinds) / packets
            parts.append(f"{kind} {packets / len(kinds):.0f} ({size:.0f} B each)")
    return "capture per repetition: " + ", ".join(parts) if parts else ""


def saturation_summary(figures: list[dict]) -> str:
    """A saturation row's offered and delivered rates and its sender's CPU, over its repetitions."""
    mean = {k: statistics.fmean(x.get(k) or 0.0 for x in figures)
            for k in ("throughput_sent (msg/s)", "throughput_received (msg/s)", "throughput_received (MB/s)",
                      "cpu_usage (%)")}  # fmt: skip
    return (f"offered {mean['throughput_sent (msg/s)']:.0f} msg/s, delivered {mean['throughput_received (msg/s)']:.0f} "
            f"msg/s = {mean['throughput_received (MB/s)']:.1f} MB/s, sender CPU {mean['cpu_usage (%)']:.0f} %")  # fmt: skip


def conditions(recs: list[dict]) -> str:
    loads = [r["load"] for r in recs]
    if not loads:
        return ""
    avg = [x["loadavg_1min"] for x in loads]
    busy = [statistics.fmean(x["core_busy_percent"]) for x in loads]
    steal = max(x["steal_percent"] for x in loads)
    return (f"load {min(avg):.1f}-{max(avg):.1f}, busy {min(busy):.0f}-{max(busy):.0f} %"
            + (f", steal <= {steal:.0f} %" if steal >= 0.5 else ""))  # fmt: skip


def direction_word(value: int) -> str:
    return {1: "up", -1: "down", 0: "none"}[value]


MIDDLEWARE_LABELS = {"dds": "CycloneDDS", FASTDDS: "Fast DDS"}


def no_link(rec: dict) -> bool:
    """A row that failed because no relay answered a warm-up ping: nothing crossed its link."""
    from fieldtest.perf.run import NO_LINK

    return rec["status"] == "failed" and NO_LINK in (rec.get("error") or "")


def verdict_text(finding: Finding, reps: Reps, rate_hz: float = 10.0) -> str:
    """The verdict where it is not yes or no: "not measurable here: <why>" (``not_measurable``, or
    a row whose link carried nothing in any repetition, unless nothing delivered is the figure),
    "not run" where no row of the finding has a record yet; "" otherwise."""
    if reason := not_measurable(finding, rate_hz):
        return f"not measurable here: {reason}"
    silent = [c for c in finding.cases if reps.get(c) and all(no_link(r) for r in reps[c])]
    if silent and finding.kit not in REFUSAL_MEASURES:
        networks = ", ".join(dict.fromkeys(CASES[c]["network"] for c in silent if c in CASES))
        return (
            f"not measurable here: no link, {', '.join(f'`{c}`' for c in silent)} never reached the "
            f"robot on {networks} (no warm-up ping answered in any repetition)"
        )
    return "" if any(reps.get(c) for c in finding.cases) else "not run"


def finding_row(finding: Finding, reps: Reps, rate_hz: float = 10.0) -> ReproductionRow:
    """One finding beside the kit's figure over its repetitions, the verdict computed. The
    conditions name the rows' networks, then the machine's load over them."""
    v = judge(finding, reps)
    seed_fig = finding.seed_text
    if finding.seed_value is not None:
        seed_fig += f" = {finding.seed_value:.{finding.digits}f}{finding.unit}"
    kit_dir = direction(v.kit.low, v.kit.high, finding.no_effect, finding.tolerance) if v.kit else None
    recs = [r for c in finding.cases for r in reps.get(c, [])]
    defined = [CASES[c] for c in finding.cases if c in CASES]
    networks = ", ".join(dict.fromkeys(c["network"] for c in defined))
    return ReproductionRow(
        key=finding.key, claim=finding.claim, study=finding.study, source=finding.source,
        seed_figure=seed_fig, kit_mean=v.kit.mean if v.kit else None, kit_low=v.kit.low if v.kit else None,
        kit_high=v.kit.high if v.kit else None, repetitions=v.kit.n if v.kit else 0, unit=finding.unit,
        digits=finding.digits,
        seed_direction=direction_word(finding.expected),
        kit_direction=direction_word(kit_dir) if kit_dir is not None else None,
        reproduced=v.reproduced,
        rows_behind="; ".join(f"`{c}`: {case_summary(reps.get(c, []))}" for c in finding.cases),
        conditions="; ".join(x for x in (networks, conditions(recs)) if x), notes=finding.notes,
        verdict=verdict_text(finding, reps, rate_hz),
        kit_middleware=", ".join(dict.fromkeys(MIDDLEWARE_LABELS.get(c["middleware"], c["middleware"]) for c in defined)),
    )  # fmt: skip


def table(reps: Reps, findings: list[Finding]) -> list[str]:
    return reproduction_table([finding_row(f, reps) for f in findings])


def order_resolved(ranked: list[str], spread: dict[str, tuple[float, float]]) -> bool:
    """Every neighbour in ``ranked`` apart: the lower one's highest repetition under the next one's lowest."""
    return all(spread[a][1] < spread[b][0] for a, b in itertools.pairwise(ranked))


def order_line(reps: Reps) -> str:
    """RTI's cost order at 16 KB beside the kit's (median round trip / 2 per setting), and whether the
    kit's order is resolved: point means in the same order say nothing while neighbours' repetitions
    overlap."""
    kit, spread = {}, {}
    for s in RTI_PROTECTED:
        values = [
            v / 2 * 1e3 for v in (fig(r, RTT50) for r in reps.get(f"rti-{s}-Array16k", [])) if v is not None
        ]
        if values:
            kit[s], spread[s] = statistics.fmean(values), (min(values), max(values))
    if len(kit) < len(RTI_16K):
        return "R3 RTI's cost order at 16 KB: not every setting has a figure."
    ranked = sorted(kit, key=kit.__getitem__)
    seed_order = " < ".join(sorted(RTI_16K, key=RTI_16K.__getitem__))
    kit_order = " < ".join(f"{s} {kit[s]:.0f} us ({spread[s][0]:.0f}-{spread[s][1]:.0f})" for s in ranked)
    resolved = order_resolved(ranked, spread)
    verdict = (
        ("yes" if same_order(RTI_16K, kit) else "no")
        if resolved
        else "not resolved (neighbours' repetitions overlap)"
    )
    return (
        f"R3 RTI perftest's cost order at 16 KB (median one way): seed {seed_order} "
        f"({', '.join(f'{v} us' for v in sorted(RTI_16K.values()))}); kit, mean (range over repetitions): "
        f"{kit_order}; same order: {verdict}."
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="repetitions of every row (default 3)")
    parser.add_argument("--duration", type=float, default=10.0, help="s per row (default 10)")
    parser.add_argument("--rate", type=float, default=10.0, help="Hz (default 10, as Zhang et al.)")
    parser.add_argument(
        "--only",
        nargs="+",
        default=None,
        help="finding keys or prefixes (Z, F1, RTI ...), or a vendor ending (fastdds)",
    )
    parser.add_argument(
        "--skip",
        nargs="+",
        default=None,
        help="leave these out, named as for --only (e.g. --skip fastdds: the CycloneDDS findings only)",
    )
    parser.add_argument("--until", default=None, help="HH:MM UTC: start no row after it")
    parser.add_argument("--json", type=Path, default=None, help="write every row's figures here")
    parser.add_argument("--md", type=Path, default=None, help="write the table here")
    parser.add_argument(
        "--from", dest="source", type=Path, nargs="+", default=None,
        help="table from --json files (a later file's rows replace an earlier one's of the same case)",
    )  # fmt: skip
    parser.add_argument("--keep", type=Path, default=None, help="keep the rows' directories here")
    parser.add_argument(
        "--reference", type=Path, default=None,
        help="write the findings' summary here (reference/bench-reproduction.json; tools/render_docs.py)",
    )  # fmt: skip
    parser.add_argument(
        "--rerun-invalid", type=int, default=0, metavar="N",
        help="run a row whose link emulator or ns-3 fell behind again, up to N times (default 0)",
    )  # fmt: skip
    args = parser.parse_args()
    findings = _select(args.only)
    if args.skip:
        skipped = {f.key for f in _select(args.skip)}
        findings = [f for f in findings if f.key not in skipped]
    if args.source:
        results, meta = merged_runs(args.source)
    else:
        until = _until(args.until)
        with tempfile.TemporaryDirectory(prefix="bench-repro-") as tmp:
            work = args.keep or Path(tmp)
            work.mkdir(parents=True, exist_ok=True)
            results, meta = run_all(needed_cases(findings), args.reps, args.rate, args.duration, until,
                                    work, args.json, args.rerun_invalid)  # fmt: skip
        if args.json:
            _write_json(args.json, results, meta)
    rows = [finding_row(f, reps=results, rate_hz=meta["rate_hz"]) for f in findings]
    lines = reproduction_lines(findings, results, meta)
    out = [f"Seed findings beside the kit: {meta['reps']} repetitions of every row, {rate_heading(findings, meta)}, "
           f"{meta['duration_s']:g} s per row, {meta['started']}" + (f" to {meta['ended']}" if meta.get("ended") else ""), "",
           *reproduction_table(rows), "", reproduction_counts(rows), *[x for line in lines.values() for x in ("", line)]]  # fmt: skip
    text = "\n".join(out)
    print(text)
    if args.md:
        args.md.write_text(text + "\n")
    if args.reference:
        settings = {"reps": meta["reps"], "rate": rate_heading(findings, meta), "duration_s": meta["duration_s"],
                    "started": meta["started"], "ended": meta.get("ended") or "", **lines}  # fmt: skip
        summary = run_summary(ReproductionSummary, args.reference, "", None, settings, rows)
        command = meta.get("command") or MEASURE_COMMAND.format(
            reps=meta["reps"], duration=meta["duration_s"]
        )
        # the data's own end, not this write's: a table from --from files is not a new measurement
        ended = {"measured_utc": meta["measured_utc"]} if meta.get("measured_utc") else {}
        write_reference(args.reference, summary.model_copy(update={"command": command, **ended}))
    return 0


# What a --from table's data was measured with, when its --json file does not say.
MEASURE_COMMAND = (
    "nice -n 5 .venv/bin/python benchmarks/bench_reproduction.py --reps {reps} --duration {duration:g} "
    "--rerun-invalid 1 --reference reference/bench-reproduction.json"
)


def reproduction_lines(findings: list[Finding], results: Reps, meta: dict) -> dict[str, str]:
    """The lines under the table: RTI's order, rows not run, rows left out as invalid."""
    lines = {}
    if any(f.key.startswith("R") for f in findings):
        lines["order_line"] = order_line(results)
    if meta.get("missing"):
        lines["missing_line"] = f"Not run (time): {', '.join(meta['missing'])}"
    invalid = [r for rows in results.values() for r in rows if r.get("valid") is False]
    if invalid or meta.get("invalid"):
        lines["invalid_line"] = (
            f"Left out as invalid (link fell behind): {len(invalid)} rows in the table's place, "
            f"{len(meta.get('invalid') or [])} re-run"
        )
    return lines


def rate_heading(findings: list[Finding], meta: dict) -> str:
    """The rows' rate for the table's heading: the script's, saturation, or both."""
    saturated = [c in SATURATION_CASES for c in needed_cases(findings)]
    if all(saturated):
        return "max rate (saturation)"
    fixed = f"{meta['rate_hz']:g} Hz"
    return f"{fixed} (the saturation rows: max rate)" if any(saturated) else fixed


def merged_runs(paths: list[Path]) -> tuple[Reps, dict]:
    """The rows of several --json files; the conditions line names each run."""
    results: Reps = {}
    metas = []
    for path in paths:
        data = json.loads(path.read_text())
        results.update(data["results"])
        metas.append(data["meta"])
    meta = dict(metas[0])
    # a merged table is the whole run's (MEASURE_COMMAND), not what one part of it was run with
    meta.pop("command", None)
    meta["started"] = "; ".join(f"{m['started']} to {m.get('ended', '?')}" for m in metas)
    meta["ended"] = None
    ends = [_iso_utc(m["ended"], path) for path, m in zip(paths, metas, strict=True) if m.get("ended")]
    meta["measured_utc"] = max(ends) if ends else None
    meta["missing"] = [m for one in metas for m in one.get("missing", [])]
    return results, meta


def _iso_utc(stamp: str, path: Path) -> str:
    """A run's "YYYY-MM-DD HH:MM UTC" as a summary's ISO 8601 measured_utc."""
    try:
        return dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M UTC").strftime("%Y-%m-%dT%H:%M:00Z")
    except ValueError:
        raise SystemExit(f"{path}: meta.ended {stamp!r} is not 'YYYY-MM-DD HH:MM UTC'") from None


def _select(only: list[str] | None) -> list[Finding]:
    """The findings named: a key's prefix (Z, F1, RTI ...) or a vendor ending (fastdds)."""
    if not only:
        return FINDINGS
    aliases = {"RTI": "R", "ZHANG": "Z", "FERNANDEZ": "F", "CHEN": "C", "KIM": "K"}
    keys = [aliases.get(o.upper(), o.upper()) for o in only]
    chosen = [
        f
        for f in FINDINGS
        if any(f.key.upper().startswith(k) or f.key.upper().endswith(f"-{k}") for k in keys)
    ]
    if not chosen:
        raise SystemExit(
            f"--only/--skip: no finding matches {' '.join(only)} (keys: {' '.join(f.key for f in FINDINGS)})"
        )
    return chosen


def _until(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    try:
        hh, mm = (int(x) for x in text.split(":"))
    except ValueError:
        raise SystemExit(f"--until {text!r}: use HH:MM (UTC)") from None
    now = dt.datetime.now(dt.UTC)
    return now.replace(hour=hh, minute=mm, second=0, microsecond=0)


if __name__ == "__main__":
    sys.exit(main())
