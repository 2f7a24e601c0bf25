"""Send and arrival stamps taken by the transports (``stamped_publisher`` / ``timed_subscribe``).

What the twin measures as link latency is the time between these two stamps, so each transport
must put the send time it returns into the message and on the wire, read it before the message
leaves, and stamp the arrival no earlier than the message can have arrived: all on the process
clock it is given (a shifted one here, as the twin robot's). DDS stamps both ends in C; the
arrival stamp there must not wait for Python.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
import uuid

import pytest
from test_transport_dds import WAIT_S, wait_until

from fieldtest import rosmsg
from fieldtest.endpoints.clock import Clock, MonotonicClock
from fieldtest.middleware.dds.ddsstamp import ArrivalQueue, now_ns, padded_size, write_stamped
from fieldtest.middleware.mqtt.infra import MosquittoBroker
from fieldtest.middleware.registry import open_transport
from fieldtest.procs import free_port, lease_dds_domain
from fieldtest.transport import TransportConfig
from fieldtest.transport.base import Undecoded, decoder, prepare, stamped_publisher, timed_subscribe

COUNT = 20
ROBOT_SHIFT_S = 250.0  # the robot's clock runs this far ahead of the host's

# A DDS domain of this test process's own, leased until it exits: a parallel run on this machine
# (another test worker, a demo) never shares it.
DDS_DOMAIN = lease_dds_domain(100 + os.getpid() % 100)


def _dds_config() -> TransportConfig:
    return TransportConfig(domain_id=DDS_DOMAIN.domain_id, namespace=f"t{uuid.uuid4().hex[:8]}")


@pytest.fixture(params=["dds", "zenoh-peer", "mqtt-local-broker"])
def host_and_robot(request, tmp_path):
    """A host and a robot transport in this process, on loopback."""
    if request.param == "dds":
        config = _dds_config()
    elif request.param == "zenoh-peer":
        config = TransportConfig(middleware="zenoh-peer", zenoh_port=free_port())
    else:
        config = TransportConfig(middleware="mqtt-local-broker", mqtt_port=free_port())
    with contextlib.ExitStack() as stack:
        if config.middleware.startswith("mqtt"):
            stack.enter_context(MosquittoBroker(config, tmp_path))
        robot = open_transport(config, "robot")  # zenoh-peer: the robot listens, the host connects
        stack.callback(robot.close)
        host = open_transport(config, "host")
        stack.callback(host.close)
        yield host, robot


def _wait_for_link(host, robot) -> None:
    """Until a probe round trip works (every middleware drops what nobody listens to yet)."""
    seen = threading.Event()
    robot.subscribe("/ping", rosmsg.HEADER, lambda _msg: seen.set())
    ping = host.publisher("/ping", rosmsg.HEADER)
    deadline = time.monotonic() + WAIT_S
    while not seen.is_set():
        assert time.monotonic() < deadline, "no link between host and robot"
        ping(rosmsg.header(0, "ping"))
        seen.wait(0.05)


def test_send_and_arrival_stamps_bracket_the_delivery(host_and_robot):
    host, robot = host_and_robot
    host_clock, robot_clock = Clock(), Clock(ROBOT_SHIFT_S)
    got: list[tuple[int, int, int, float]] = []  # (seq, stamp in msg, arrival, callback time)

    def on_command(msg, arrival_ns: int) -> None:
        got.append(
            (
                rosmsg.seq_of(msg.header.frame_id),
                rosmsg.ns_of(msg.header.stamp),
                arrival_ns,
                robot_clock.now_ns(),
            )
        )

    timed_subscribe(robot, "/cmd_vel", rosmsg.TWIST_STAMPED, on_command, robot_clock)
    publish = stamped_publisher(host, "/cmd_vel", rosmsg.TWIST_STAMPED, rosmsg.COMMAND_SENT, host_clock)
    _wait_for_link(host, robot)
    sent = []
    for seq in range(COUNT):
        cmd = rosmsg.command(seq, 0, 0.33, 0.0)
        out = prepare(cmd, rosmsg.TWIST_STAMPED)
        before = host_clock.now_ns()
        sent_ns = publish(out)
        after = host_clock.now_ns()
        assert before <= sent_ns <= after
        assert rosmsg.ns_of(cmd.header.stamp) == sent_ns  # the message object says what was sent
        sent.append(sent_ns)
        time.sleep(0.005)
    assert wait_until(lambda: len(got) == COUNT), got
    shift_ns = round(ROBOT_SHIFT_S * 1e9)
    for seq, (got_seq, stamp, arrival, callback) in enumerate(got):
        assert (got_seq, stamp) == (seq, sent[seq])  # the wire carries the returned stamp
        assert stamp <= arrival - shift_ns  # arrival on the robot's clock, never before the send
        assert arrival <= callback  # stamped before the callback ran


def test_one_prepared_message_sent_again_reaches_an_undecoded_receiver_as_sent(host_and_robot):
    """perf's ping and echo: one prepared message, its seq patched, written again and again (the
    DDS writers keep its ctypes view); an ``Undecoded`` receiver gets each one's bytes as sent."""
    from fieldtest.perf.messages import build, parse_message, seq_of_cdr, set_ids

    host, robot = host_and_robot
    message = parse_message("Array1k")
    out = build(message)
    stamp = rosmsg.TimeField(message.typename, ("header", "stamp"), 4)
    got: list[tuple[bytes, int]] = []
    timed_subscribe(
        robot, "/cmd_stamp", message.typename, Undecoded(lambda d, t: got.append((d, t))), Clock()
    )
    publish = stamped_publisher(host, "/cmd_stamp", message.typename, stamp, Clock())
    _wait_for_link(host, robot)
    sent = []
    for seq in range(5):
        set_ids(out, seq)
        sent.append((publish(out), bytes(out.cdr)))
        time.sleep(0.005)
    assert wait_until(lambda: len(got) == 5), len(got)
    for seq, ((data, arrival), (sent_ns, as_sent)) in enumerate(zip(got, sent, strict=True)):
        assert type(data) is bytes and seq_of_cdr(data) == seq
        assert stamp.read(data) == sent_ns <= arrival
        assert data[: len(as_sent)] == as_sent and len(data) - len(as_sent) < 4  # DDS: Cyclone's padding


def test_a_failed_dds_write_still_has_a_send_time():
    clock = Clock()
    data = bytearray(rosmsg.serialize(rosmsg.command(0, 0, 0.0, 0.0), rosmsg.TWIST_STAMPED))
    data += bytes(padded_size(len(data)) - len(data))
    before = clock.now_ns()
    ret, sent_ns = write_stamped(0, data, 4, clock.monotonic_base_ns)  # 0: no writer
    assert ret < 0 and before <= sent_ns <= clock.now_ns()


def test_probe_reply_stamp_is_t3_and_leaves_the_rest(host_and_robot):
    host, robot = host_and_robot
    clock = Clock()
    got = []
    timed_subscribe(robot, "/probe_reply", rosmsg.CLOCK_PROBE, lambda msg, t4: got.append((msg, t4)), clock)
    reply = stamped_publisher(host, "/probe_reply", rosmsg.CLOCK_PROBE, rosmsg.PROBE_T3, clock)
    _wait_for_link(host, robot)
    cls = rosmsg.msg_class(rosmsg.CLOCK_PROBE)
    t1, t2 = rosmsg.time_msg(111), rosmsg.time_msg(222)
    t3 = reply(prepare(cls(id=7, t1=t1, t2=t2, t3=rosmsg.time_msg(0)), rosmsg.CLOCK_PROBE))
    assert wait_until(lambda: got)
    msg, t4 = got[0]
    assert (msg.id, rosmsg.ns_of(msg.t1), rosmsg.ns_of(msg.t2), rosmsg.ns_of(msg.t3)) == (7, 111, 222, t3)
    assert t3 <= t4


def _queued(queue_fd: int, timeout_s: float) -> bool:
    """True once the arrival queue's eventfd says the listener queued a sample (it does not consume
    the count: the reader thread still finds the sample)."""
    return bool(select.select([queue_fd], [], [], timeout_s)[0])


def _clear_queued(queue_fd: int) -> None:
    """Take the count of samples already queued (the reader thread, busy in a callback, then pops
    them without waiting on the eventfd)."""
    if _queued(queue_fd, 0):
        os.read(queue_fd, 8)


def test_dds_arrival_is_stamped_when_cyclone_delivers_not_when_python_gets_to_it():
    """A callback that blocks delays the next callback, not the next sample's arrival stamp: the
    second sample is stamped when Cyclone's listener queues it, while Python is still held in the
    first callback."""
    config = _dds_config()
    host, robot = open_transport(config, "host"), open_transport(config, "robot")
    clock = Clock()
    got: list[tuple[int, int, int]] = []
    release = threading.Event()
    released_ns = 0

    def slow_first(msg, arrival_ns: int) -> None:
        got.append((rosmsg.seq_of(msg.header.frame_id), arrival_ns, clock.now_ns()))
        if len(got) == 1:
            release.wait(WAIT_S)  # Python is busy while the second command arrives

    try:
        timed_subscribe(robot, "/cmd_vel", rosmsg.TWIST_STAMPED, slow_first, clock)
        publish = stamped_publisher(host, "/cmd_vel", rosmsg.TWIST_STAMPED, rosmsg.COMMAND_SENT, clock)
        assert host.wait_for_match("/cmd_vel", timeout_s=WAIT_S)
        publish(prepare(rosmsg.command(0, 0, 0.0, 0.0), rosmsg.TWIST_STAMPED))
        assert wait_until(lambda: len(got) == 1)  # Python is held in the first callback from here
        queue_fd = robot._arrivals.fd
        _clear_queued(queue_fd)
        second_sent = publish(prepare(rosmsg.command(1, 0, 0.0, 0.0), rosmsg.TWIST_STAMPED))
        assert _queued(queue_fd, WAIT_S), "the second sample never reached the arrival queue"
        released_ns = clock.now_ns()
        release.set()
        assert wait_until(lambda: len(got) == 2)
    finally:
        release.set()
        host.close()
        robot.close()
    seq, arrival, callback = got[1]
    assert seq == 1
    assert callback >= released_ns  # Python saw it only after the first callback
    assert second_sent < arrival < released_ns, "arrival stamped by Python, not by the listener"


def test_dds_stamping_helper_writes_what_the_binding_reads():
    """The C write takes the binding's sample layout; the queued bytes are the CDR as sent."""
    config = _dds_config()
    host, robot = open_transport(config, "host"), open_transport(config, "robot")
    got = []
    try:
        robot.subscribe("/probe", rosmsg.CLOCK_PROBE, got.append)  # through the C queue
        send = host.publisher("/probe", rosmsg.CLOCK_PROBE)  # through the binding's own write
        assert host.wait_for_match("/probe", timeout_s=WAIT_S)
        probe = rosmsg.msg_class(rosmsg.CLOCK_PROBE)(
            id=3, t1=rosmsg.time_msg(1), t2=rosmsg.time_msg(2), t3=rosmsg.time_msg(3)
        )
        send(probe)
        assert wait_until(lambda: got)
        assert rosmsg.serialize(got[0], rosmsg.CLOCK_PROBE) == rosmsg.serialize(probe, rosmsg.CLOCK_PROBE)
    finally:
        host.close()
        robot.close()


def test_dds_stamping_helper_refuses_what_it_cannot_stamp():
    data = rosmsg.serialize(rosmsg.command(0, 0, 0.0, 0.0), rosmsg.TWIST_STAMPED)
    bad_parameter = -3  # DDS_RETCODE_BAD_PARAMETER, before any write
    assert write_stamped(0, data, len(data) - 4, 0)[0] == bad_parameter  # Time past the end
    assert write_stamped(0, data, 0, 0)[0] == bad_parameter  # over the encapsulation header
    big_endian = b"\x00\x00" + data[2:]
    assert write_stamped(0, big_endian, 4, 0)[0] == bad_parameter


def test_dds_helper_clock_is_the_process_clock():
    clock = Clock(-3.5)
    before = clock.now_ns()
    helper = now_ns(clock.monotonic_base_ns)
    after = clock.now_ns()
    assert before <= helper <= after


def test_arrival_queue_wakes_and_frees_without_readers():
    queue = ArrivalQueue(base_ns=0)
    queue.wake()
    queue.wait()  # returns at once: woken
    assert queue.pop() is None and queue.dropped == 0
    queue.free()
    queue.free()  # twice is harmless


class PlainTransport:
    """A transport with only the protocol's three methods, delivering in the caller's thread."""

    def __init__(self):
        self.callbacks = {}
        self.closed = False

    def publisher(self, topic, typename):
        def publish(msg):
            data = rosmsg.serialize(msg, typename)  # what goes on the wire
            for callback in self.callbacks.get(topic, []):
                callback(rosmsg.deserialize(data, typename))

        return publish

    def subscribe(self, topic, typename, callback):
        self.callbacks.setdefault(topic, []).append(callback)

    def close(self):
        self.closed = True


def test_transports_without_their_own_stamping_get_them_in_python():
    transport, clock = PlainTransport(), Clock(1.0)
    got = []
    timed_subscribe(transport, "/cmd_vel", rosmsg.TWIST_STAMPED, lambda msg, t: got.append((msg, t)), clock)
    publish = stamped_publisher(transport, "/cmd_vel", rosmsg.TWIST_STAMPED, rosmsg.COMMAND_SENT, clock)
    before = clock.now_ns()
    sent_ns = publish(prepare(rosmsg.command(5, 0, 0.1, 0.2), rosmsg.TWIST_STAMPED))
    msg, arrival = got[0]
    assert before <= sent_ns <= arrival <= clock.now_ns()
    assert rosmsg.ns_of(msg.header.stamp) == sent_ns and rosmsg.seq_of(msg.header.frame_id) == 5


def test_decoder_delivers_with_the_arrival_and_drops_what_does_not_decode(caplog):
    got = []
    decode = decoder(rosmsg.HEADER, lambda msg, arrival: got.append((msg.frame_id, arrival)), "/x")
    decode(b"\x00\x01\x00", 5)  # cut short: not a Header
    decode(rosmsg.serialize(rosmsg.header(0, "ok"), rosmsg.HEADER), 7)
    assert got == [("ok", 7)]
    assert "dropping undecodable std_msgs/msg/Header on /x" in caplog.text


def test_a_failing_receiver_loses_only_its_message(host_and_robot, caplog):
    host, robot = host_and_robot
    got = []

    def on_command(msg):
        got.append(msg.header.frame_id)
        if msg.header.frame_id == "seq:0":
            raise RuntimeError("receiver failed")

    robot.subscribe("/cmd_vel", rosmsg.TWIST_STAMPED, on_command)
    publish = host.publisher("/cmd_vel", rosmsg.TWIST_STAMPED)
    deadline = time.monotonic() + WAIT_S
    while not got:  # until the link is up: each of these raises in the receiver
        assert time.monotonic() < deadline, "no link between host and robot"
        publish(rosmsg.command(0, 0, 0.1, 0.0))
        time.sleep(0.05)
    for seq in (1, 2):
        publish(rosmsg.command(seq, 0, 0.1, 0.0))
    wait_until(lambda: got[-1:] == ["seq:2"])
    assert got[-2:] == ["seq:1", "seq:2"] and set(got[:-2]) == {"seq:0"}
    assert "receiver failed" in caplog.text


@contextlib.contextmanager
def _queue_on_robot(typename: str):
    """(host, stamped publish on /payload, an ArrivalQueue fed by a reader of the robot's participant;
    both stamp CLOCK_MONOTONIC)."""
    from cyclonedds.sub import DataReader
    from cyclonedds.topic import Topic

    from fieldtest.middleware.dds.transport import _delete, dds_qos, dds_topic_name
    from fieldtest.perf.messages import register_types
    from fieldtest.qos import get_qos
    from fieldtest.transport.ros_idl import idl_class

    register_types()
    config = _dds_config()
    host, robot = open_transport(config, "host"), open_transport(config, "robot")
    queue = ArrivalQueue(base_ns=0)
    name = dds_topic_name(config.namespace, "/payload")
    topic = Topic(robot.participant, name, idl_class(typename))
    reader = DataReader(robot.participant, topic, qos=dds_qos(get_qos(config.qos)))
    try:
        assert queue.attach(reader._ref, 7) == 0
        publish = stamped_publisher(
            host, "/payload", typename, rosmsg.TimeField(typename, ("header", "stamp"), 4), MonotonicClock()
        )
        assert host.wait_for_match("/payload", timeout_s=WAIT_S)
        yield host, publish, queue
    finally:
        _delete(reader)  # Cyclone waits for a running listener; the queue is then unused
        _delete(topic)
        queue.free()
        host.close()
        robot.close()


def _popped(queue: ArrivalQueue):
    deadline = time.monotonic() + WAIT_S
    while (item := queue.pop()) is None:
        assert time.monotonic() < deadline, "nothing queued"
        time.sleep(0.005)
    return item


@pytest.mark.parametrize(
    "large, small", [("Array1m", "Array1k"), ("Array256k", "Array4k"), ("PointCloud2m", "PointCloud512k")]
)
def test_dds_queue_copies_each_sample_once_at_its_own_size(large, small):
    """After a large sample grew the pop buffer, a small one costs its own size, not the buffer's
    (the old pop copied the whole buffer, then sliced it)."""
    import tracemalloc

    from fieldtest.perf.messages import build, parse_message

    big, little = parse_message(large), parse_message(small)
    with _queue_on_robot(big.typename) as (_host, publish, queue):
        publish(build(big))
        assert len(_popped(queue)[2]) >= big.size
        sent = build(little)
        publish(sent)
        tracemalloc.start()
        try:
            tag, _arrival, data = _popped(queue)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    expected = bytes(sent.cdr).ljust(padded_size(len(sent.cdr)), b"\0")  # as Cyclone carries it
    assert tag == 7 and data[:4] + data[12:] == expected[:4] + expected[12:]  # all but the stamp
    assert peak < little.size + big.size // 2, f"popping {small} allocated {peak} bytes"


def test_dds_queue_next_sleeps_until_the_listener_queues_a_sample():
    """``next`` returns what the middleware's listener queued, woken by it (no poll interval: it
    stays blocked while nothing comes), and None after ``wake``."""
    from fieldtest.perf.messages import build, parse_message

    message = parse_message("Array1k")
    with _queue_on_robot(message.typename) as (_host, publish, queue):
        got: list = []
        reader = threading.Thread(target=lambda: got.append(queue.next()), daemon=True)
        reader.start()
        reader.join(0.3)
        assert reader.is_alive() and not got, "next returned with nothing queued"
        sent = build(message)
        sent_ns = publish(sent)
        reader.join(WAIT_S)
        assert not reader.is_alive()
        tag, arrival_ns, data = got[0]
        assert tag == 7 and arrival_ns >= sent_ns and data == bytes(sent.cdr)
        woken: list = []
        reader = threading.Thread(target=lambda: woken.append(queue.next()), daemon=True)
        reader.start()
        queue.wake()
        reader.join(WAIT_S)
        assert woken == [None]


@pytest.mark.parametrize("message", ["Array1k", "Array64k", "Array2m"])
def test_dds_stamped_publish_stamps_the_prepared_bytes_in_place(message):
    """The prepared bytes go to C without a copy: the send stamp lands in them, and the reader
    gets exactly them (the old write copied them twice and left the caller's bytes unstamped)."""
    from fieldtest.perf.messages import build, parse_message

    perf_message = parse_message(message)
    with _queue_on_robot(perf_message.typename) as (_host, publish, queue):
        out = build(perf_message)
        assert len(out.cdr) % 4 == 0  # padded as Cyclone sends it
        sent_ns = publish(out)
        stamped = rosmsg.deserialize(bytes(out.cdr), perf_message.typename).header.stamp
        assert rosmsg.ns_of(stamped) == sent_ns
        assert _popped(queue)[2] == bytes(out.cdr)
        unpadded = out.cdr + b"x"  # not Cyclone's padded size: copied and padded, never changed
        before = bytes(unpadded)
        write_stamped(0, unpadded, 4, 0)  # no writer 0: fails after stamping its own copy
        assert unpadded == before
