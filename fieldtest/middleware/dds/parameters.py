"""A ROS 2 node's GetParameters service as rmw_cyclonedds carries it, on the kit's CycloneDDS.

Service ``<node>/get_parameters`` is two DDS topics, ``rq<node>/get_parametersRequest`` and
``rr<node>/get_parametersReply``, of types ``rcl_interfaces::srv::dds_::GetParameters_Request_`` and
``..._Response_``, as every ROS 2 DDS RMW names them. rmw_cyclonedds puts its own request header
(the client's id and a sequence number, 16 bytes) before the request's fields in the payload and
echoes it before the reply's (rmw_cyclonedds jazzy ``rmw_cyclonedds_cpp/src/serdata.hpp``,
``cdds_request_header``; ros2/rmw_cyclonedds issue 184); rmw_fastrtps sends the bare fields and
pairs a reply with its request by the RTPS related sample identity instead. So a client and a
server of one vendor each read the other's payload with 16 bytes out of place:
``tests/test_mixed_vendors.py`` measures what that does to a Create 3's parameter read.

``ParameterClient`` asks the way an rmw_cyclonedds client asks (``ros2 param get`` on CycloneDDS);
``ParameterServer`` answers the way an rmw_cyclonedds node does.
"""

from __future__ import annotations

import random
import struct
import threading
import time
from typing import Any

from cyclonedds.core import Policy, Qos
from cyclonedds.domain import DomainParticipant
from cyclonedds.idl import IdlStruct, make_idl_struct
from cyclonedds.idl import types as idl_types
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader, InvalidSample
from cyclonedds.topic import Topic

from fieldtest.middleware.dds.transport import matched_count
from fieldtest.transport.ros_idl import idl_class

PARAMETER_VALUE = "rcl_interfaces/msg/ParameterValue"
# rcl_interfaces/msg/ParameterType
PARAMETER_NOT_SET, PARAMETER_BOOL, PARAMETER_INTEGER, PARAMETER_DOUBLE, PARAMETER_STRING = 0, 1, 2, 3, 4
# rmw_qos_profile_services_default: reliable, volatile, keep last 10
SERVICE_QOS = Qos(
    Policy.Reliability.Reliable(0),
    Policy.Durability.Volatile,
    Policy.History.KeepLast(10),
    Policy.DataRepresentation(use_cdrv0_representation=True),
)

_HEADER = {"client_guid": idl_types.uint64, "sequence_number": idl_types.int64}
Request: Any = make_idl_struct(
    "GetParametersRequestCdds",
    "rcl_interfaces::srv::dds_::GetParameters_Request_",
    {**_HEADER, "names": idl_types.sequence[str]},  # type: ignore[misc]  # cyclonedds' IDL types subscript in __class_getitem__
)
Response: Any = make_idl_struct(
    "GetParametersResponseCdds",
    "rcl_interfaces::srv::dds_::GetParameters_Response_",
    {**_HEADER, "values": idl_types.sequence[idl_class(PARAMETER_VALUE)]},  # type: ignore[misc]  # as above
)


def service_topics(node: str) -> tuple[str, str]:
    """(request topic, reply topic) of ``node``'s get_parameters: '/ns/motion_control' ->
    ('rq/ns/motion_control/get_parametersRequest', 'rr/ns/motion_control/get_parametersReply')."""
    service = "/" + node.strip("/") + "/get_parameters"
    return f"rq{service}Request", f"rr{service}Reply"


def parameter_value(value: bool | int | float | str) -> IdlStruct:
    """A ParameterValue holding ``value`` (bool, integer, double or string)."""
    fields: dict[str, Any] = {
        "type": PARAMETER_NOT_SET,
        "bool_value": False,
        "integer_value": 0,
        "double_value": 0.0,
        "string_value": "",
        "byte_array_value": [],
        "bool_array_value": [],
        "integer_array_value": [],
        "double_array_value": [],
        "string_array_value": [],
    }
    if isinstance(value, bool):
        fields.update(type=PARAMETER_BOOL, bool_value=value)
    elif isinstance(value, int):
        fields.update(type=PARAMETER_INTEGER, integer_value=value)
    elif isinstance(value, float):
        fields.update(type=PARAMETER_DOUBLE, double_value=value)
    else:
        fields.update(type=PARAMETER_STRING, string_value=value)
    return idl_class(PARAMETER_VALUE)(**fields)


def python_value(value: Any) -> bool | int | float | str | None:
    """A ParameterValue's value (None where not set or an array)."""
    return {
        PARAMETER_BOOL: value.bool_value,
        PARAMETER_INTEGER: value.integer_value,
        PARAMETER_DOUBLE: value.double_value,
        PARAMETER_STRING: value.string_value,
    }.get(value.type)


class _Endpoint:
    def __init__(self, participant: DomainParticipant, node: str):
        request, reply = service_topics(node)
        self.participant = participant
        self.request_topic = Topic(participant, request, Request)
        self.reply_topic = Topic(participant, reply, Response)


class ParameterClient(_Endpoint):
    """Asks ``node``'s get_parameters as an rmw_cyclonedds client does."""

    def __init__(self, participant: DomainParticipant, node: str, client_guid: int | None = None):
        super().__init__(participant, node)
        self.writer = DataWriter(participant, self.request_topic, qos=SERVICE_QOS)
        self.reader = DataReader(participant, self.reply_topic, qos=SERVICE_QOS)
        # rmw_cyclonedds sends part of the client's writer GUID: random from one client to the next
        self.client_guid = random.getrandbits(64) if client_guid is None else client_guid
        self._sequence = 0

    def servers_matched(self) -> int:
        """Request readers (servers) this client's writer has matched."""
        return matched_count(self.writer, is_writer=True)

    def get(self, names: list[str], timeout_s: float) -> list[bool | int | float | str | None] | None:
        """The values of ``names``, or None when no reply to this request came within ``timeout_s``."""
        self._sequence += 1
        self.writer.write(Request(client_guid=self.client_guid, sequence_number=self._sequence, names=names))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for reply in self.reader.take(N=10):
                if reply.client_guid == self.client_guid and reply.sequence_number == self._sequence:
                    return [python_value(v) for v in reply.values]
            time.sleep(0.02)
        return None


class ParameterServer(_Endpoint):
    """Serves ``values`` on ``node``'s get_parameters as an rmw_cyclonedds node does: the reply
    echoes the request's header. Counts the requests it answered and those it could not read."""

    def __init__(
        self, participant: DomainParticipant, node: str, values: dict[str, bool | int | float | str]
    ):
        super().__init__(participant, node)
        self.values = dict(values)
        self.reader = DataReader(participant, self.request_topic, qos=SERVICE_QOS)
        self.writer = DataWriter(participant, self.reply_topic, qos=SERVICE_QOS)
        self.answered = 0
        self.unreadable = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="cdds-parameters", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.wait(0.02):
            try:
                requests = self.reader.take(N=1)  # one at a time: an unreadable one spoils no other
            except (struct.error, ValueError, IndexError, UnicodeDecodeError):
                self.unreadable += 1  # a payload not in this header's form
                continue
            for request in requests:
                if isinstance(request, InvalidSample):  # a client left (dispose, unregister)
                    continue
                found = [parameter_value(self.values[n]) for n in request.names if n in self.values]
                self.writer.write(
                    Response(
                        client_guid=request.client_guid, sequence_number=request.sequence_number, values=found
                    )
                )
                self.answered += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


NAMES = ("safety_override", "reflexes_enabled")  # what the Create 3 pre-flight reads first


def _read(
    participant: DomainParticipant, node: str, seconds: float, client_guid: int | None
) -> dict[str, Any]:
    client = ParameterClient(participant, node, client_guid)
    deadline = time.monotonic() + seconds
    while not client.servers_matched() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the server's reply writer may match this client's reader after its request reader
    return {"server": client.servers_matched(), "values": client.get(list(NAMES), seconds)}


def main(argv: list[str]) -> int:
    """``get [--client-guid N] SECONDS NODE...``: ask each NODE's get_parameters for NAMES, print
    JSON {NODE: {"server": servers matched, "values": [...] or null (no reply within SECONDS)}}; the
    requests' header carries N (default: random, as rmw_cyclonedds' does). ``serve NODE``:
    serve NAMES as a Create 3 with safety_override "full" until stdin closes, then print JSON
    {"answered": n, "unreadable": n}. On domain ROS_DOMAIN_ID, with CycloneDDS's own configuration."""
    import json
    import os
    import sys

    participant = DomainParticipant(int(os.environ.get("ROS_DOMAIN_ID", "0")))
    if argv[0] == "get":
        args, guid = argv[1:], None
        if args[:1] == ["--client-guid"]:
            args, guid = args[2:], int(args[1], 0)
        seconds, nodes = float(args[0]), args[1:]
        print(json.dumps({node: _read(participant, node, seconds, guid) for node in nodes}), flush=True)
        return 0
    server = ParameterServer(participant, argv[1], {"safety_override": "full", "reflexes_enabled": False})
    print("READY", flush=True)
    sys.stdin.read()
    server.close()
    print(json.dumps({"answered": server.answered, "unreadable": server.unreadable}), flush=True)
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
