"""The republisher stand-in's record of the commands it took, and how the two-machine tests judge
what its depth-1 hops lost (fieldtest.testkit.depthonehops) by what the same trial measured."""

from __future__ import annotations

from fieldtest import rosmsg
from fieldtest.labrun.rehearsal.republisher import (
    NO_SEQ,
    TWIST,
    TWIST_STAMPED,
    Relay,
    Take,
    TakeRecord,
    command_identity,
    read_takes,
    relay_callback,
)
from fieldtest.testkit.depthonehops import DeliveryHop, SubscriptionHop, align_relayed

MS = 1_000_000


def test_a_commands_identity_is_read_from_its_serialized_header():
    stamped = rosmsg.serialize(rosmsg.command(41, 1_700_000_000_123_456_789, 0.2, 0.1), TWIST_STAMPED)
    assert command_identity(stamped, stamped=True) == (41, 1_700_000_000_123_456_789)
    relayed = rosmsg.msg_class(TWIST_STAMPED)(header=rosmsg.header(5_000_000_007), twist=rosmsg.twist(0, 0))
    assert command_identity(rosmsg.serialize(relayed, TWIST_STAMPED), stamped=True) == (NO_SEQ, 5_000_000_007)
    twist = rosmsg.serialize(rosmsg.twist(0.2, 0.1), TWIST)
    assert command_identity(twist, stamped=False) == (NO_SEQ, 0)


def test_the_relay_passes_the_bytes_on_unchanged_before_recording_the_take():
    events: list[tuple[str, bytes, int]] = []

    class Record:
        def add(self, taken_ns: int, received_ns: int, relay: Relay, data: bytes) -> None:
            events.append(("record", data, received_ns))

    commands = Relay("/cmd_vel", "/_do_not_use/cmd_vel_stamped", TWIST_STAMPED)
    data = rosmsg.serialize(rosmsg.command(3, 10, 0.2, 0.0), TWIST_STAMPED)
    callback = relay_callback(lambda b: events.append(("publish", b, 0)), commands, Record())
    callback(data, {"received_timestamp": 1234})
    assert events == [("publish", data, 0), ("record", data, 1234)] and events[0][1] is data
    callback(data)  # Humble's rclpy passes no message info
    assert events[-1] == ("record", data, 0)
    publish = events.append
    assert relay_callback(publish, commands, None) is publish  # no record asked for


def test_the_take_record_reads_back_without_a_cut_last_line(tmp_path):
    path = tmp_path / "takes.csv"
    record = TakeRecord(path)
    commands = Relay("/cmd_vel", "/_do_not_use/cmd_vel_stamped", TWIST_STAMPED)
    record.add(1_000, 990, commands, rosmsg.serialize(rosmsg.command(7, 900, 0.2, 0.0), TWIST_STAMPED))
    record.add(2_000, 0, Relay("/cmd_vel_unstamped", "/_do_not_use/cmd_vel", TWIST), b"\x00\x01\x00\x00")
    record.add(
        2_500, 2_400, Relay("/_do_not_use/odom", "/odom", "nav_msgs/msg/Odometry"), b"\x00\x01\x00\x00"
    )
    record.close()
    with path.open("a") as f:
        f.write("3000,2990,/cmd_vel,1,8")  # killed mid-write
    assert read_takes(path) == [
        Take(1_000, 990, "/cmd_vel", True, 7, 900),
        Take(2_000, 0, "/cmd_vel_unstamped", True, NO_SEQ, 0),
        Take(2_500, 2_400, "/_do_not_use/odom", False, NO_SEQ, 0),
    ]


def _subscription(
    arrived_ms: dict, taken_ms: dict, received_ms: dict, other_takes_ms: list
) -> SubscriptionHop:
    every = [*taken_ms.values(), *other_takes_ms]
    return SubscriptionHop(
        arrived_ns={k: round(v * MS) for k, v in arrived_ms.items()},
        taken_ns={k: round(v * MS) for k, v in taken_ms.items()},
        received_ns={k: round(v * MS) for k, v in received_ms.items()},
        executor_takes_ns=[round(v * MS) for v in every],
        rank={k: k for k in arrived_ms},
    )


def test_a_command_replaced_before_the_executor_took_anything_is_overwritten():
    # 1 and 2 arrived together (the link held 1); the executor's next take was 2's
    hop = _subscription(
        {0: 0, 1: 50, 2: 50.3, 3: 100}, {0: 0.5, 2: 50.9, 3: 100.5}, {0: 0.2, 2: 50.4, 3: 100.2}, [25, 75]
    )
    assert hop.longest_lag_ns() == round(0.2 * MS)
    assert hop.lost() == [1] and hop.next_taken(1) == 2 and hop.overwritten(1) and hop.unexplained() == []


def test_a_command_the_executor_was_free_to_take_is_not_overwritten():
    # the executor took the base's odometry at 125 ms, after 2 arrived and before 3 did
    arrived = {k: 50.0 * k for k in range(5)}
    taken = {k: t + 0.5 for k, t in arrived.items() if k != 2}
    received = {k: t + 0.2 for k, t in arrived.items() if k != 2}
    hop = _subscription(arrived, taken, received, [25, 75, 125, 175])
    assert hop.free_take(2, 3) == 125 * MS and hop.unexplained() == [2]
    # the last command, with nothing later taken, has nothing that replaced it
    last = _subscription(arrived, {k: t for k, t in taken.items() if k != 4} | {2: 100.5}, received, [])
    assert last.unexplained() == [4]


def test_a_command_cannot_have_arrived_before_the_one_ahead_was_taken():
    # the executor stalled: 1 taken late at 60 ms, so 2 (its sibling's stamp 52) arrived after
    # that; the take at 61 ms is 1's batch, and 3 replaced 2 before any later take
    hop = _subscription({1: 50, 2: 52, 3: 62}, {1: 60, 3: 63}, {1: 50.1, 3: 62.1}, [61])
    assert hop.latest_arrival_ns(2) == 60 * MS and hop.free_take(2, 3) == 61 * MS
    stalled = _subscription({1: 50, 2: 52, 3: 62}, {1: 60, 3: 63}, {1: 50.1, 3: 62.1}, [])
    assert stalled.unexplained() == []


def test_a_taken_command_is_lost_at_the_base_only_when_a_later_one_followed_within_the_delivery_time():
    published = {0: 0, 1: 50 * MS, 2: 50 * MS + 300_000, 3: 100 * MS}
    delivered = {0: MS, 2: 51 * MS, 3: 101 * MS}
    hop = DeliveryHop(published, delivered, rank={k: k for k in published})
    assert hop.longest_delivery_ns() == MS and hop.replaced_by(1) == 2 and hop.unexplained() == []
    dropped = DeliveryHop(published, {k: t + MS for k, t in published.items() if k != 0}, rank=hop.rank)
    assert dropped.unexplained() == [0]


def test_relayed_stamps_are_matched_to_the_receipts_they_were_relayed_from():
    # receipts (seq, arrival): 1 and 2 arrived together; the relay stamps each after its arrival
    arrivals = [(0, 0), (1, 50 * MS), (2, 50 * MS + 100), (3, 100 * MS)]
    both = [1_000, 50 * MS + 200, 50 * MS + 300, 100 * MS + 1_000]
    assert align_relayed(both, arrivals, 300 * MS) == {s: k for k, s in enumerate(both)}
    # the hop kept only the later of the two (the one that overwrote seq 1)
    survivor = [1_000, 50 * MS + 300, 100 * MS + 1_000]
    assert align_relayed(survivor, arrivals, 300 * MS) == {1_000: 0, 50 * MS + 300: 2, 100 * MS + 1_000: 3}
    # the relay's own zeros (silence and final stop) come long after the last arrival
    zeros = [100 * MS + 400 * MS, 100 * MS + 401 * MS]
    assert align_relayed([*both, *zeros], arrivals, 300 * MS) == {s: k for k, s in enumerate(both)}
