"""The seed study's wireless findings beside the twin's: a campaign's trials, grouped per network
and middleware, with the mechanism each finding is blamed on read from the same records.

    .venv/bin/fieldtest campaign trials/twin-wireless.yaml --out runs/wireless --rerun-invalid 2
    .venv/bin/python benchmarks/bench_wireless_findings.py runs/wireless [--markdown out.md] [--json out.json]

Figures per configuration (valid trials only, by the stack check): the clock probes' mean round
trip (Zhang et al. report mean round trips; docs/networks.md, "The twin beside the seed study"),
with the median over repetitions and its distribution-free interval (fieldtest.analysis.campaign.intervals);
the commands' one-way median and p99 (shared clock), loss and lap drift; and the mechanisms:

- on the ns-3 802.11 link: the access point's group frames per second (sent once, at the basic
  rate, never retried), their share of the airtime, and unicast retries per frame;
- on every emulated link: DDS discovery packets per second on the robot's link (both ways);
- the round trip's excess over two one-way medians: what a probe or its reply waits beyond the
  path the commands take (Nagle's algorithm and delayed acknowledgements on MQTT's TCP).

Each finding compares two configurations on one network: the seed's pair of Array1k mean round
trips (Zhang et al. Table 2) and the twin's pair of medians. "reproduced" is
computed: the twin's difference has the seed's sign and the two intervals do not overlap; "same
sign, overlapping" when only the sign agrees. A script, not a test: it reads what the campaign
recorded and never fails on a figure.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from fieldtest.analysis.campaign.intervals import differ, median_interval
from fieldtest.analysis.metrics.schema import METRICS_FILE

# Zhang et al., Table 2b (Wi-Fi) and 2c (4G), Array1k, mean round trip in ms.
# Their Zenoh-TCP is the kit's zenoh-peer, Zenoh-broker zenoh-router, MQTT-nobroker
# mqtt-local-broker and MQTT-broker mqtt-broker.
SEED_ARRAY1K_RTT_MS = {
    ("wifi-80211", "dds"): 51.40,
    ("wifi-80211", "zenoh-peer"): 14.82,
    ("wifi-80211", "zenoh-router"): 12.58,
    ("wifi-80211", "mqtt-local-broker"): 92.93,
    ("wifi-80211", "mqtt-broker"): 173.62,
    ("4g", "dds"): 58.80,
    ("4g", "zenoh-peer"): 72.11,
    ("4g", "zenoh-router"): 134.02,
    ("4g", "mqtt-local-broker"): 279.17,
    ("4g", "mqtt-broker"): 679.91,
}


@dataclass(frozen=True)
class Finding:
    name: str
    network: str
    slower: str  # the configuration the seed found slower
    faster: str
    mechanism: str  # the figures that carry the seed's explanation, by key in ``figures``


FINDINGS = (
    Finding("DDS behind Zenoh on Wi-Fi", "wifi-80211", "dds", "zenoh-peer", "group_per_s discovery_per_s"),
    Finding(
        "DDS behind the Zenoh router on Wi-Fi",
        "wifi-80211",
        "dds",
        "zenoh-router",
        "group_per_s discovery_per_s",
    ),
    Finding("DDS ahead of Zenoh on 4G", "4g", "zenoh-peer", "dds", "discovery_per_s"),
    Finding("Zenoh router hop on 4G", "4g", "zenoh-router", "zenoh-peer", "one_way_median_ms"),
    Finding(
        "MQTT broker hop on Wi-Fi", "wifi-80211", "mqtt-broker", "mqtt-local-broker", "one_way_median_ms"
    ),
    Finding("MQTT broker hop on 4G", "4g", "mqtt-broker", "mqtt-local-broker", "one_way_median_ms"),
    Finding("MQTT behind Zenoh on Wi-Fi", "wifi-80211", "mqtt-local-broker", "zenoh-peer", "rtt_excess_ms"),
    Finding("MQTT behind Zenoh on 4G", "4g", "mqtt-local-broker", "zenoh-peer", "rtt_excess_ms"),
    Finding("MQTT behind DDS on 4G", "4g", "mqtt-local-broker", "dds", "rtt_excess_ms"),
)


def _get(tree: dict, path: str):
    for key in path.split("."):
        if not isinstance(tree, dict) or key not in tree:
            return None
        tree = tree[key]
    return tree


def _ratio(numerator, denominator) -> float | None:
    return None if numerator is None or not denominator else numerator / denominator


def air_figures(link_simulator: dict | None) -> dict[str, float | None]:
    """The 802.11 mechanisms from the ns-3 program's stats (trial.yaml outcome.stack.link_simulator)."""
    if not link_simulator or not link_simulator.get("tx"):
        return {"group_per_s": None, "group_airtime_share": None, "unicast_retries_per_frame": None}
    tx, wall_s = link_simulator["tx"], link_simulator.get("wall_s")
    airtime = sum(kind.get("airtime_s", 0.0) for kind in tx.values())
    group, unicast = tx.get("group", {}), tx.get("unicast", {})
    return {
        "group_per_s": _ratio(group.get("frames", 0), wall_s),
        "group_airtime_share": _ratio(group.get("airtime_s", 0.0), airtime),
        "unicast_retries_per_frame": _ratio(unicast.get("retries", 0), unicast.get("frames")),
    }


def wire_figures(metrics: dict) -> dict[str, float | None]:
    """Discovery packets per second on the robot's link, both ways (metrics.json ``wire``)."""
    discovery = [
        _get(metrics, f"wire.{way}.groups.discovery.packets_per_s")
        for way in ("host_to_robot", "robot_to_host")
    ]
    return {
        "discovery_per_s": None if all(d is None for d in discovery) else sum(d or 0.0 for d in discovery)
    }


def rtt_excess_ms(rtt_mean: float | None, one_way_median: float | None) -> float | None:
    """The probes' mean round trip beyond two of the commands' one-way medians (shared clock)."""
    return None if rtt_mean is None or one_way_median is None else rtt_mean - 2 * one_way_median


def trial_figures(trial_dir: Path) -> dict | None:
    """One trial's figures, or None when it has no analysis."""
    metrics_path = trial_dir / "analysis" / METRICS_FILE
    if not metrics_path.is_file():
        return None
    metrics = json.loads(metrics_path.read_text())
    record = yaml.safe_load((trial_dir / "trial.yaml").read_text())
    drift = _get(metrics, "drift.mean_m")
    return {
        "network": _get(metrics, "trial.network"),
        "middleware": _get(metrics, "trial.middleware"),
        "valid": bool(_get(metrics, "stack.valid")),
        "rtt_mean_ms": _get(metrics, "latency.round_trip_ms.mean"),
        "one_way_median_ms": _get(metrics, "latency.one_way_ms.median"),
        "rtt_excess_ms": rtt_excess_ms(
            _get(metrics, "latency.round_trip_ms.mean"), _get(metrics, "latency.one_way_ms.median")
        ),
        "one_way_p99_ms": _get(metrics, "latency.one_way_ms.p99"),
        "loss_pct": None
        if _get(metrics, "latency.loss_ratio") is None
        else 100 * _get(metrics, "latency.loss_ratio"),
        "drift_mm": None if drift is None else 1000 * drift,
        "load": _get(metrics, "stack.machine.loadavg_1min"),
        "steal_pct": _get(metrics, "stack.machine.steal_pct"),
        **air_figures(_get(record, "outcome.stack.link_simulator")),
        **wire_figures(metrics),
    }


FIGURES = (
    "rtt_mean_ms",
    "one_way_median_ms",
    "one_way_p99_ms",
    "loss_pct",
    "drift_mm",
    "group_per_s",
    "group_airtime_share",
    "unicast_retries_per_frame",
    "discovery_per_s",
    "rtt_excess_ms",
    "load",
    "steal_pct",
)


def summarise(trials: list[dict]) -> dict[tuple[str, str], dict]:
    """Per (network, middleware): valid/invalid counts, the median of each figure over the valid
    trials, and the round trip's interval."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for t in trials:
        groups.setdefault((t["network"], t["middleware"]), []).append(t)
    out = {}
    for key, members in sorted(groups.items()):
        valid = [t for t in members if t["valid"]]
        row = {"valid": len(valid), "invalid": len(members) - len(valid)}
        for name in FIGURES:
            values = [t[name] for t in valid if t[name] is not None]
            row[name] = float(np.median(values)) if values else None
        row["rtt_interval"] = median_interval([t["rtt_mean_ms"] for t in valid])
        row["load_range"] = _range([t["load"] for t in valid])
        out[key] = row
    return out


def _range(values: list) -> tuple[float, float] | None:
    present = [v for v in values if v is not None]
    return (min(present), max(present)) if present else None


def verdict(finding: Finding, rows: dict[tuple[str, str], dict]) -> dict:
    """The seed's pair, the twin's pair and whether the twin reproduces the seed's direction."""
    seed_slow = SEED_ARRAY1K_RTT_MS[(finding.network, finding.slower)]
    seed_fast = SEED_ARRAY1K_RTT_MS[(finding.network, finding.faster)]
    slow, fast = rows.get((finding.network, finding.slower)), rows.get((finding.network, finding.faster))
    result = {"finding": finding.name, "network": finding.network, "seed": (seed_slow, seed_fast)}
    if not slow or not fast or slow["rtt_mean_ms"] is None or fast["rtt_mean_ms"] is None:
        return {**result, "twin": None, "reproduced": "no valid trials"}
    twin_sign = np.sign(slow["rtt_mean_ms"] - fast["rtt_mean_ms"])
    seed_sign = np.sign(seed_slow - seed_fast)
    separated = differ(slow["rtt_interval"], fast["rtt_interval"])
    if twin_sign != seed_sign:
        reproduced = "no: opposite or no difference"
    elif separated:
        reproduced = "yes"
    else:
        reproduced = "same sign, intervals overlap"
    return {**result, "twin": (slow["rtt_mean_ms"], fast["rtt_mean_ms"]), "reproduced": reproduced}


def _fmt(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _interval(iv: dict) -> str:
    if iv.get("low") is None:
        return "-"
    return f"{iv['low']:.1f}-{iv['high']:.1f} ({100 * iv['coverage']:.0f} %)"


def markdown(rows: dict[tuple[str, str], dict], verdicts: list[dict]) -> str:
    lines = [
        "| network | middleware | valid / invalid | seed Array1k RTT mean (ms) | twin probe RTT mean, median over reps (ms) | interval (coverage) | one-way median / p99 (ms) | loss (%) | drift (mm) | AP group frames/s | group airtime share | unicast retries/frame | discovery pkt/s | RTT beyond 2 x one-way (ms) | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (network, middleware), r in rows.items():
        load = "-" if r["load_range"] is None else f"{r['load_range'][0]:.1f}-{r['load_range'][1]:.1f}"
        lines.append(
            f"| {network} | {middleware} | {r['valid']} / {r['invalid']} | "
            f"{_fmt(SEED_ARRAY1K_RTT_MS.get((network, middleware)), 2)} | {_fmt(r['rtt_mean_ms'])} | "
            f"{_interval(r['rtt_interval'])} | {_fmt(r['one_way_median_ms'], 2)} / {_fmt(r['one_way_p99_ms'], 2)} | "
            f"{_fmt(r['loss_pct'], 2)} | {_fmt(r['drift_mm'])} | {_fmt(r['group_per_s'], 2)} | "
            f"{_fmt(r['group_airtime_share'], 3)} | {_fmt(r['unicast_retries_per_frame'], 3)} | "
            f"{_fmt(r['discovery_per_s'], 2)} | {_fmt(r['rtt_excess_ms'])} | {load} |"
        )
    lines += [
        "",
        "| finding | network | seed RTT slower / faster (ms) | twin RTT slower / faster (ms) | direction reproduced |",
        "|---|---|---|---|---|",
    ]
    for v in verdicts:
        twin = "-" if v["twin"] is None else f"{v['twin'][0]:.1f} / {v['twin'][1]:.1f}"
        lines.append(
            f"| {v['finding']} | {v['network']} | {v['seed'][0]:.2f} / {v['seed'][1]:.2f} | {twin} | {v['reproduced']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "campaign_dir", type=Path, help="the --out folder of `fieldtest campaign trials/twin-wireless.yaml`"
    )
    parser.add_argument("--markdown", type=Path, help="also write the tables here")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args(argv)
    dirs = sorted(p.parent for p in args.campaign_dir.rglob("trial.yaml"))
    trials = [t for t in (trial_figures(d) for d in dirs) if t is not None]
    if not trials:
        print(f"{args.campaign_dir}: no analysed trials (run the campaign first)", file=sys.stderr)
        return 2
    rows = summarise(trials)
    verdicts = [verdict(f, rows) for f in FINDINGS]
    text = markdown(rows, verdicts)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        payload = {
            "trials": trials,
            "configurations": {f"{n}/{m}": r for (n, m), r in rows.items()},
            "findings": verdicts,
        }
        args.json.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
