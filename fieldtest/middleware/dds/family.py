"""DDS: the kit's processes and the robot on one DDS domain (CycloneDDS; rmw_cyclonedds in the lab).
Fast DDS, the same family, has its own package (``fieldtest.middleware.fastdds``).

Security: DDS Security governance profiles (SROS2 enclaves). No infrastructure process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fieldtest.errors import FieldtestError
from fieldtest.linkconfig import Role, TransportConfig
from fieldtest.middleware.dds import security
from fieldtest.middleware.dds.settings import mixed_vendor_problem, side_middleware
from fieldtest.middleware.declaration import Middleware

if TYPE_CHECKING:
    from fieldtest.middleware.launch import LabLaunch
    from fieldtest.transport.base import Transport


class Dds(Middleware):
    name = "dds"
    summary = "CycloneDDS alone: the RMW crosses the network"
    secure_default = "sros2"
    security_settings = security.SETTINGS
    transport_library = "cyclonedds"
    security_plugin_check = "fieldtest.middleware.dds.security"  # the binding's libdds_security_*
    # CycloneDDS serializes into a 32-bit size (ddsi serdata), kept well under 2 GiB here
    max_payload = 1 << 30

    def open_transport(self, config: TransportConfig, role: Role) -> Transport:
        return open_side(self, config, role)

    def open_own_transport(self, config: TransportConfig, role: Role) -> Transport:
        from fieldtest.middleware.dds.transport import open_dds

        return open_dds(config, role, security_xml=security.security_xml(config, role))

    def lab_launch_problem(self, cfg: LabLaunch) -> str:
        from fieldtest.middleware.dds.lab import robot_dds_off_the_network

        return robot_dds_off_the_network(cfg)


def open_side(trial_middleware: Middleware, config: TransportConfig, role: Role) -> Transport:
    """``role``'s transport on the DDS library it runs (the dds ``robot_vendor`` setting): the
    trial middleware's own, or the other vendor's for a robot on the other one."""
    from fieldtest.middleware import registry

    problem = mixed_vendor_problem(config)
    if problem:
        raise MixedVendorError(problem)
    name = side_middleware(config, role)
    own = trial_middleware if name == trial_middleware.name else registry.get(name)
    return own.open_own_transport(config.model_copy(update={"middleware": name}), role)  # type: ignore[attr-defined]


class MixedVendorError(FieldtestError, ValueError):
    """A trial's sides on two DDS vendors in a way the kit does not run."""


MIDDLEWARES = (Dds(),)
