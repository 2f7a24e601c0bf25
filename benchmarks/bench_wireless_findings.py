"""The seed study's wireless findings beside the twin's: a campaign's trials, grouped per network
and middleware, with the mechanism each finding is blamed on read from the same records.

    .venv/bin/fieldtest campaign trials/twin-wifi-lab.yaml --out runs/twin-wifi-lab --rerun-invalid 2
    .venv/bin/python benchmarks/bench_wireless_findings.py runs/twin-wifi-lab/twin-wifi-lab \\
        [--reference reference/bench-wireless-findings.json] [--markdown out.md] [--json out.json]

(or trials/twin-wireless.yaml: the ideal 802.11 link `wifi-80211` and `4g`). Figures per network
and middleware, valid trials only (the stack check): the clock probes' mean round trip (Zhang et
al. report mean round trips; docs/networks.md, "The twin beside the seed study"), the median over
the repetitions with its distribution-free interval (fieldtest.analysis.campaign.intervals); the
commands' one-way median and p99 (shared clock) and loss; the lap drift (``drift.mean_m``, the
figure the kit's reports use), its mean over the repetitions with a Student-t 95 % interval, and
what the kit's power analysis (fieldtest.analysis.campaign.power) says about the repetitions that
resolve the drift's differences; and the mechanisms, medians over the repetitions:

- on the ns-3 802.11 link (``outcome.stack.link_simulator`` of each record): the access point's
  group frames per second (sent once, at the basic rate, never retried) and their share of the
  airtime, unicast retries per frame, the other stations' share of the airtime, and with power
  save each station's share of the run dozing, the unicast frames the access point held for it
  and the group frames held to a DTIM beacon; each station's channel access (arrival at its MAC to
  the first transmission: mean, and the share of frames that waited an AIFS);
- on every emulated link: DDS discovery packets per second on the robot's link (both ways);
- the round trip's excess over two one-way medians: what a probe or its reply waits beyond the
  path the commands take (Nagle's algorithm and delayed acknowledgements on MQTT's TCP).

Each finding of the seed compares two middlewares on one network (Zhang et al. Table 2, Array1k
mean round trips; the seed's Wi-Fi figures stand for `wifi-80211` and `wifi-lab` alike): "yes" is
computed, the twin's difference has the seed's sign and the two intervals do not overlap
(fieldtest.testkit.docblocks). A script, not a test: it reads what the campaign recorded and never
fails on a figure. ``--reference`` writes the summary docs/networks.md's block is rendered from.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

import numpy as np
import yaml

from fieldtest.analysis.campaign.intervals import median_interval
from fieldtest.analysis.metrics.schema import METRICS_FILE
from fieldtest.perf.stats import mean_interval
from fieldtest.plan import SquarePlan
from fieldtest.record.reference import (
    Conditions,
    WirelessFindingsRow,
    WirelessFindingsSummary,
    run_summary,
    write_reference,
)
from fieldtest.testkit.docblocks import (
    SEED_MEDIUM,
    wireless_drift_lines,
    wireless_findings_table,
    wireless_mechanisms_table,
    wireless_set_aside_lines,
    wireless_verdict_table,
    wireless_verdicts,
)

# Zhang et al., Table 2b (Wi-Fi) and 2c (4G), Array1k, mean round trip in ms.
# Their Zenoh-TCP is the kit's zenoh-peer, Zenoh-broker zenoh-router, MQTT-nobroker
# mqtt-local-broker and MQTT-broker mqtt-broker.
SEED_ARRAY1K_RTT_MS = {
    ("Wi-Fi", "dds"): 51.40,
    ("Wi-Fi", "zenoh-peer"): 14.82,
    ("Wi-Fi", "zenoh-router"): 12.58,
    ("Wi-Fi", "mqtt-local-broker"): 92.93,
    ("Wi-Fi", "mqtt-broker"): 173.62,
    ("4G", "dds"): 58.80,
    ("4G", "zenoh-peer"): 72.11,
    ("4G", "zenoh-router"): 134.02,
    ("4G", "mqtt-local-broker"): 279.17,
    ("4G", "mqtt-broker"): 679.91,
}

STATIONS = ("host", "robot")  # the trial's own stations of the access point


def seed_rtt_ms(network: str, middleware: str) -> float | None:
    return SEED_ARRAY1K_RTT_MS.get((SEED_MEDIUM.get(network, ""), middleware))


def _get(tree: dict | None, path: str):
    for key in path.split("."):
        if not isinstance(tree, dict) or key not in tree:
            return None
        tree = tree[key]
    return tree


def _ratio(numerator, denominator) -> float | None:
    return None if numerator is None or not denominator else numerator / denominator


def air_figures(link_simulator: dict | None) -> dict:
    """The 802.11 mechanisms from the ns-3 program's stats (trial.yaml outcome.stack.link_simulator)."""
    sim = link_simulator or {}
    tx, wall_s = sim.get("tx") or {}, sim.get("wall_s")
    airtime = sum(kind.get("airtime_s", 0.0) for kind in tx.values())
    group, unicast = tx.get("group", {}), tx.get("unicast", {})
    by_station = sim.get("airtime_by_station") or {}
    station_airtime = sum(s.get("airtime_s", 0.0) for s in by_station.values())
    power_save = sim.get("power_save") or {}
    dozing = {
        name: power_save["stations"][name] for name in STATIONS if name in (power_save.get("stations") or {})
    }
    access = {name: a for name, a in (sim.get("channel_access_ms") or {}).items() if name in STATIONS}
    return {
        "group_per_s": _ratio(group.get("frames", 0), wall_s) if tx else None,
        "group_airtime_share": _ratio(group.get("airtime_s", 0.0), airtime) if tx else None,
        "unicast_retries_per_frame": _ratio(unicast.get("retries", 0), unicast.get("frames")),
        "others_airtime_share": _ratio((by_station.get("others") or {}).get("airtime_s"), station_airtime),
        "group_frames_held": power_save.get("group_frames_buffered"),
        "frames_held": {name: float(s.get("frames_buffered", 0)) for name, s in dozing.items()},
        "doze_share": {
            name: v for name, s in dozing.items() if (v := _ratio(s.get("doze_s"), wall_s)) is not None
        },
        "channel_access_mean_ms": {
            name: a["mean"] for name, a in access.items() if a.get("mean") is not None
        },
        "channel_access_deferred": {
            name: v
            for name, a in access.items()
            if (v := _ratio(a.get("deferred"), a.get("frames"))) is not None
        },
        "lag_p99_ms": _get(sim, "lag_ms.p99"),
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
    drift, loss = _get(metrics, "drift.mean_m"), _get(metrics, "latency.loss_ratio")
    rtt, one_way = _get(metrics, "latency.round_trip_ms.mean"), _get(metrics, "latency.one_way_ms.median")
    machine = _get(metrics, "stack.machine") or _get(record, "outcome.stack.machine") or {}
    stopped = _get(record, "outcome.stopped_ns.host")
    return {
        "network": _get(metrics, "trial.network"),
        "middleware": _get(metrics, "trial.middleware"),
        "campaign": trial_dir.parent.name,
        "valid": bool(_get(metrics, "stack.valid")),
        "invalid_reasons": _get(metrics, "stack.invalid_reasons") or [],
        "rtt_mean_ms": rtt,
        "one_way_median_ms": one_way,
        "rtt_excess_ms": rtt_excess_ms(rtt, one_way),
        "one_way_p99_ms": _get(metrics, "latency.one_way_ms.p99"),
        "loss_pct": None if loss is None else 100 * loss,
        "drift_mm": None if drift is None else 1000 * drift,
        "load": machine.get("loadavg_1min"),
        "busy_pct": machine.get("busy_pct"),
        "steal_pct": machine.get("steal_pct"),
        "steal_max_pct": machine.get("steal_max_pct"),
        "plan": _get(record, "request.plan") or {},
        "topology": _get(record, "request.topology"),
        "software": _get(record, "outcome.software") or {},
        "stopped_ns": stopped,
        **air_figures(_get(record, "outcome.stack.link_simulator")),
        **wire_figures(metrics),
    }


MEDIAN_FIGURES = (
    "one_way_median_ms",
    "one_way_p99_ms",
    "loss_pct",
    "rtt_excess_ms",
    "discovery_per_s",
    "group_per_s",
    "group_airtime_share",
    "unicast_retries_per_frame",
    "others_airtime_share",
    "group_frames_held",
    "lag_p99_ms",
)
STATION_FIGURES = ("frames_held", "doze_share", "channel_access_mean_ms", "channel_access_deferred")


def _median(values: list) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.median(present)) if present else None


def _largest(values: list) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def conditions(trials: list[dict]) -> Conditions:
    """The largest load, busy share and steal over the trials."""
    return Conditions(
        load_1min=_largest([t["load"] for t in trials]),
        busy_percent=[b] if (b := _largest([t["busy_pct"] for t in trials])) is not None else [],
        steal_percent=_largest([t["steal_pct"] for t in trials]) or 0.0,
        steal_max_percent=_largest([t["steal_max_pct"] for t in trials]),
    )


def summary_row(network: str, middleware: str, members: list[dict]) -> WirelessFindingsRow:
    """One network and middleware over its trials: the figures of the valid ones."""
    valid = [t for t in members if t["valid"]]
    rtt = median_interval([t["rtt_mean_ms"] for t in valid])
    drift_each = [t["drift_mm"] for t in valid if t["drift_mm"] is not None]
    drift = mean_interval(drift_each)
    loads = [t["load"] for t in valid if t["load"] is not None]
    return WirelessFindingsRow(
        network=network,
        middleware=middleware,
        valid=len(valid),
        invalid=len(members) - len(valid),
        invalid_reasons=[
            "; ".join(t["invalid_reasons"]) or "no figures to judge by" for t in members if not t["valid"]
        ],
        seed_rtt_ms=seed_rtt_ms(network, middleware),
        rtt_ms=_median([t["rtt_mean_ms"] for t in valid]),
        rtt_low_ms=rtt["low"],
        rtt_high_ms=rtt["high"],
        rtt_coverage=rtt["coverage"],
        drift_mm=drift.mean,
        drift_low_mm=drift.low,
        drift_high_mm=drift.high,
        drift_each_mm=drift_each,
        **{name: _median([t[name] for t in valid]) for name in MEDIAN_FIGURES},
        **{
            name: {
                station: m
                for station in STATIONS
                if (m := _median([t[name].get(station) for t in valid])) is not None
            }
            for name in STATION_FIGURES
        },
        load_range=[min(loads), max(loads)] if loads else [],
        conditions=conditions(valid or members),
    )


def summarise(trials: list[dict]) -> list[WirelessFindingsRow]:
    """One row per (network, middleware), in the trials' order (the campaign's run order) within a
    network, networks sorted."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for t in sorted(trials, key=lambda t: t["network"]):
        groups.setdefault((t["network"], t["middleware"]), []).append(t)
    return [summary_row(network, middleware, members) for (network, middleware), members in groups.items()]


def _versions(trials: list[dict]) -> dict[str, str]:
    """The software the trials ran (their records), each package's versions joined where they differ."""
    seen: dict[str, list[str]] = {}
    for t in trials:
        for name, version in t["software"].items():
            if name != "platform" and str(version) not in seen.setdefault(name, []):
                seen[name].append(str(version))
    return {name: " / ".join(versions) for name, versions in seen.items()}


def settings(trials: list[dict]) -> dict:
    plans = [SquarePlan.model_validate(t["plan"]) for t in trials if t["plan"]]
    return {
        "campaigns": sorted({t["campaign"] for t in trials}),
        "trials": len(trials),
        "networks": sorted({t["network"] for t in trials}),
        "plan_laps": sorted({p.laps for p in plans})[-1] if plans else 0,
        "plan_s": round(max(p.motion_s for p in plans), 1) if plans else 0.0,
        "topology": ", ".join(sorted({str(t["topology"]) for t in trials})),
    }


def summary(trials: list[dict], reference: Path, argv: list[str]) -> WirelessFindingsSummary:
    """The reference summary: when the campaign's last trial ended and the software it ran."""
    out = run_summary(
        WirelessFindingsSummary,
        reference,
        ".venv/bin/python benchmarks/bench_wireless_findings.py",
        argv,
        settings(trials),
        summarise(trials),
        versions=_versions(trials),
    )
    campaigns = {t["campaign"] for t in trials}
    if len(campaigns) == 1:  # the campaign itself, then this script on its folder, from the repository
        (name,) = campaigns
        out.command = (
            f".venv/bin/fieldtest campaign trials/{name}.yaml --out runs/{name} --rerun-invalid 2 && "
            f".venv/bin/python benchmarks/bench_wireless_findings.py runs/{name}/{name} --reference {reference}"
        )
    ended = max((t["stopped_ns"] for t in trials if t["stopped_ns"]), default=None)
    if ended is not None:
        out.measured_utc = dt.datetime.fromtimestamp(ended / 1e9, dt.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )
    return out


def markdown(rows: list[WirelessFindingsRow]) -> str:
    verdicts = wireless_verdicts(rows)
    mechanisms = wireless_mechanisms_table(rows)
    lines = [
        *wireless_findings_table(rows),
        "",
        *wireless_set_aside_lines(rows),
        *(mechanisms + [""] if mechanisms else []),
        *wireless_verdict_table(verdicts),
        "",
        *wireless_drift_lines(rows),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "campaign_dir",
        type=Path,
        help="a campaign's folder of trials (`fieldtest campaign ... --out DIR`: DIR/<campaign>)",
    )
    parser.add_argument("--markdown", type=Path, help="also write the tables here")
    parser.add_argument("--json", type=Path, help="also write every trial's figures and the rows here")
    parser.add_argument("--reference", type=Path, help="write the summary the docs are rendered from here")
    args = parser.parse_args(argv)
    dirs = sorted(p.parent for p in args.campaign_dir.rglob("trial.yaml"))
    trials = [t for t in (trial_figures(d) for d in dirs) if t is not None]
    if not trials:
        print(f"{args.campaign_dir}: no analyzed trials (run the campaign first)", file=sys.stderr)
        return 2
    if len(trials) < len(dirs):
        print(f"{len(dirs) - len(trials)} of {len(dirs)} trials not analyzed: left out", file=sys.stderr)
    rows = summarise(trials)
    text = markdown(rows)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        payload = {"trials": trials, "rows": [r.model_dump(mode="json") for r in rows]}
        args.json.write_text(json.dumps(payload, indent=2))
    if args.reference:
        given = sys.argv[1:] if argv is None else argv
        write_reference(args.reference, summary(trials, args.reference, given))
    return 0


if __name__ == "__main__":
    sys.exit(main())
