"""Zenoh's link settings: the ``zenoh:`` block of ``TransportConfig`` (fieldtest.linkconfig).

Plain data like the catalog: every layer may read it, so it imports no middleware library.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ZENOH_PORT = 7447  # zenohd / Zenoh router default listener
ZenohPath = Literal["direct", "bridge"]


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    port: int = Field(ZENOH_PORT, ge=1, le=65535)
    # "direct" puts the kit's processes on Zenoh themselves (what the bridge would carry); "bridge"
    # runs the lab's path, each side's DDS -> zenoh-bridge-ros2dds -> Zenoh -> bridge -> DDS
    # (fieldtest.middleware.zenoh.bridge). Twin trials use "bridge" unless set.
    path: ZenohPath = "direct"
    # The bridged path: the bridges route cmd_vel at Zenoh priority 1 (real time) and express
    # (zenoh-plugin-ros2dds pub_priorities "<topic>=1:express"); other topics keep the default
    # priority 5 (data). Off by default, as in the seed study.
    express: bool = False


# The fields a lab launch takes as arguments ``zenoh_<field>:=`` (fieldtest.labrun.configuration.launchsettings)
LAUNCH_FIELDS = ("port", "express")
# The fields a perf row sweeps as ``zenoh_<field>`` (row field, ``--zenoh-path`` flag and perf file
# column: fieldtest.perf.case), with the flag's help
PERF_FIELDS = {
    "path": "Zenoh rows: direct (the nodes on Zenoh, default) or bridge (DDS -> zenoh-bridge-ros2dds -> "
    "Zenoh -> bridge -> DDS, as twin trials)",
}
