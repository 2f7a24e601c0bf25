"""The Foxglove layout shipped for a trial's bags (``fieldtest/data/foxglove-layout.json``).

Built here from the kit's topic names (``fieldtest.record.recordnames``), so a renamed topic changes the
layout too; ``tests/test_foxglove_layout.py`` checks the shipped file is what this builds and that
every topic and field it names exists in a trial's bags. Regenerate the file with
``python -m fieldtest.analysis.rendering.foxglove``. Panel settings follow Foxglove's layout JSON
(``configById``, ``layout``, ``globalVariables``, ``userNodes``, ``playbackConfig``); the 3D
panel's pose options are those of its Poses scene extension (``type``, ``arrowScale``, ``color``).
"""

from __future__ import annotations

import json
from pathlib import Path

from fieldtest.record.recordnames import CMD_VEL_TOPIC, MOCAP_POSE_TOPIC, RECEIPTS_TOPIC

LAYOUT_FILE = Path(__file__).resolve().parents[2] / "data" / "foxglove-layout.json"
MOCAP_FRAME = "mocap"  # the recorder's PoseStamped frame_id (fieldtest/natnet/recorder.py)


def _series(path: str, label: str) -> dict:
    # receiveTime = the bag's log time: host clock for /cmd_vel and the mocap, robot clock for receipts
    return {"value": path, "enabled": True, "timestampMethod": "receiveTime", "label": label}


def _plot(title: str, paths: list[dict], **extra: object) -> dict:
    return {
        "title": title,
        "paths": paths,
        "showLegend": True,
        "legendDisplay": "floating",
        "showXAxisLabels": True,
        "showYAxisLabels": True,
        "isSynced": True,
        "xAxisVal": "timestamp",
        **extra,
    }


def build_layout() -> dict:
    """The layout: the mocap pose in 3D, its x-y track, command latency, the commands sent."""
    position = f"{MOCAP_POSE_TOPIC}.pose.position"
    three_d = {
        "followMode": "follow-none",
        "followTf": MOCAP_FRAME,
        "scene": {},
        "transforms": {},
        "cameraState": {
            "perspective": False,
            "distance": 8.0,
            "phi": 0.0,
            "thetaOffset": 0.0,
            "target": [0.0, 0.0, 0.0],
            "targetOffset": [0.0, 0.0, 0.0],
            "targetOrientation": [0.0, 0.0, 0.0, 1.0],
            "fovy": 45,
            "near": 0.01,
            "far": 1000,
        },
        "topics": {
            MOCAP_POSE_TOPIC: {"visible": True, "type": "arrow", "arrowScale": [0.3, 0.06, 0.06]},
        },
        "layers": {
            "grid": {
                "layerId": "foxglove.Grid",
                "instanceId": "grid",
                "label": "Grid (0.5 m)",
                "visible": True,
                "frameId": MOCAP_FRAME,
                "size": 10,
                "divisions": 20,
                "lineWidth": 1,
                "color": "#248eff",
                "position": [0.0, 0.0, 0.0],
                "rotation": [0.0, 0.0, 0.0],
                "order": 1,
            }
        },
    }
    track = _plot(
        "Mocap track: y against x (m, mocap world, Z up)",
        [_series(f"{position}.y", "y")],
        xAxisVal="custom",
        xAxisPath={"value": f"{position}.x", "enabled": True},
        isSynced=False,
    )
    latency = _plot(
        "Command latency (s, the robot's live estimate)",
        [_series(f"{RECEIPTS_TOPIC}.latency_s", "one-way latency")],
    )
    commands = _plot(
        "Commands sent",
        [
            _series(f"{CMD_VEL_TOPIC}.twist.linear.x", "linear.x (m/s)"),
            _series(f"{CMD_VEL_TOPIC}.twist.angular.z", "angular.z (rad/s)"),
        ],
    )
    return {
        "configById": {
            "3D!mocap": three_d,
            "Plot!track": track,
            "Plot!latency": latency,
            "Plot!commands": commands,
        },
        "globalVariables": {},
        "userNodes": {},
        "playbackConfig": {"speed": 1},
        "layout": {
            "direction": "row",
            "first": {
                "direction": "column",
                "first": "3D!mocap",
                "second": "Plot!track",
                "splitPercentage": 55,
            },
            "second": {
                "direction": "column",
                "first": "Plot!latency",
                "second": "Plot!commands",
                "splitPercentage": 50,
            },
            "splitPercentage": 50,
        },
    }


def layout_text() -> str:
    return json.dumps(build_layout(), indent=2) + "\n"


def foxglove_line() -> str:
    """The report's pointer to the layout."""
    return (
        f"Open in Foxglove: load {LAYOUT_FILE} as the layout, then open the trial's host/, robot/ "
        'and mocap/ bags together (docs/analysis.md, "Open in Foxglove").'
    )


if __name__ == "__main__":
    LAYOUT_FILE.write_text(layout_text())
    print(LAYOUT_FILE)
