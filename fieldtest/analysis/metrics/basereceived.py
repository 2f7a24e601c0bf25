"""What the base received against what the host sent (docs/analysis.md, "What the base received").

Sources, in order: the simulated base's own record (``<trial>/base/commands.csv``, written by a lab
rehearsal's ``fieldtest.labrun.rehearsal.simbase``); in a twin trial the robot's receipts (the twin's robot
process is its Create 3 model's only input). A real Create 3 keeps no record of the commands it
took: a lab trial without one reports "not available" and names what stands in for it.

Matched by sequence number where the base's message carries one (a TwistStamped keeps the host's
"seq:<k>" frame_id through create3_republisher); a Twist carries none, so counts and values are
compared in arrival order and missing/reordered are not available.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fieldtest.analysis.loading.trialdata import Commands, TrialData
from fieldtest.analysis.metrics.latency import ClockModel
from fieldtest.analysis.metrics.schema import BaseLateness, BaseReceived
from fieldtest.record.basecommands import BASE_COMMANDS_FILE, BASE_DIR, BaseCommands, read_base_commands

# The base missing more than this share of the host's commands is a warning: the robot did not do
# what the trial says was commanded (a mismatched topic type, a relay that dropped them).
MISSING_WARNING_SHARE = 0.05
VALUE_TOLERANCE = 1e-6  # m/s, rad/s: float32 wire formats round; anything more is a changed value
LAB_INSTEAD = (
    "a real Create 3 keeps no record of the commands it took: the link monitor's receipts show what "
    "reached the robot computer, and the ground truth (motion start, laps completed) whether the base moved"
)


def base_check(data: TrialData, clock: ClockModel) -> BaseReceived:
    """The ``base`` section of metrics.json, with the warnings it raises under ``warnings``."""
    if data.commands is None or not len(data.commands.seq):
        return BaseReceived(available=False, reason="no sent commands (host bag)", warnings=[])
    record = data.trial_dir / BASE_DIR / BASE_COMMANDS_FILE
    if record.is_file():
        base = read_base_commands(record)
        source = f"simulated base's record ({BASE_DIR}/{BASE_COMMANDS_FILE})"
    elif not data.record.outcome.lab and data.receipts is not None:
        r = data.receipts
        base = BaseCommands(r.received_ns, np.ones(len(r.seq), bool), r.seq, r.sent_ns, r.linear, r.angular)
        source = "twin robot's receipts (its Create 3 model's only input)"
    elif data.record.outcome.lab:
        return BaseReceived(
            available=False, reason="no record of what the base received", instead=LAB_INSTEAD, warnings=[]
        )
    else:
        return BaseReceived(available=False, reason="no robot receipts (robot bag)", warnings=[])
    out = compare(data.commands, base, clock).model_copy(update={"source": source})
    if data.record.outcome.lab.get("dry_run"):  # the base is not driven on purpose
        kept = [w for w in out.warnings if "received none" not in w and "no motion" not in w]
        out = out.model_copy(update={"note": "dry run: the base was not driven", "warnings": kept})
    return out


def compare(sent: Commands, base: BaseCommands, clock: ClockModel) -> BaseReceived:
    n_sent, n_base = int(len(sent.seq)), int(len(base.received_ns))
    received_types = sorted({"twist_stamped" if s else "twist" for s in base.stamped})
    moving_sent = int(np.count_nonzero((sent.linear != 0) | (sent.angular != 0)))
    moving_received = int(np.count_nonzero((base.linear != 0) | (base.angular != 0)))
    if n_base and np.all(base.seq >= 0):
        m = _by_seq(sent, base, clock)
        out = BaseReceived(
            available=True,
            sent=n_sent,
            received=n_base,
            received_types=received_types,
            moving_sent=moving_sent,
            moving_received=moving_received,
            matched_by="sequence number (frame_id)",
            missing=len(m.missing),
            missing_seq_first=m.missing[:20],
            reordered=m.reordered,
            duplicates=m.duplicates,
            unknown_seq=m.unknown_seq,
            values_changed=m.values_changed,
            zeroed=m.zeroed,
            lateness_ms=_stats(m.late_ms),
        )
    else:
        k = min(n_sent, n_base)
        v0, w0, v1, w1 = sent.linear[:k], sent.angular[:k], base.linear[:k], base.angular[:k]
        out = BaseReceived(
            available=True,
            sent=n_sent,
            received=n_base,
            received_types=received_types,
            moving_sent=moving_sent,
            moving_received=moving_received,
            matched_by="arrival order (the base's messages carry no sequence number)",
            missing=None,
            reordered=None,
            duplicates=None,
            lateness_ms=None,
            values_changed=_changed(v0, w0, v1, w1),
            zeroed=_zeroed(v0, w0, v1, w1),
        )
    return out.model_copy(update={"warnings": _warnings(out)})


@dataclass(frozen=True)
class _SeqMatch:
    missing: list[int]  # the host's sequence numbers the base never received, in order
    reordered: int
    duplicates: int
    unknown_seq: int
    values_changed: int
    zeroed: int
    late_ms: np.ndarray


def _by_seq(sent: Commands, base: BaseCommands, clock: ClockModel) -> _SeqMatch:
    seqs, first = np.unique(base.seq, return_index=True)
    host = {int(s): i for i, s in enumerate(sent.seq) if s >= 0}
    missing = sorted(set(host) - {int(s) for s in seqs})
    order = base.seq[np.sort(first)]  # first arrivals, in arrival order
    reordered = int(np.count_nonzero(order[1:] < np.maximum.accumulate(order)[:-1]))
    both = [(host[int(s)], i) for s, i in zip(seqs, first, strict=True) if int(s) in host]
    hi = np.array([h for h, _ in both], dtype=np.int64)
    bi = np.array([b for _, b in both], dtype=np.int64)
    late_s = (
        (clock.to_host_ns(base.received_ns[bi]) - sent.sent_ns[hi].astype(float)) / 1e9 if len(both) else []
    )
    return _SeqMatch(
        missing=missing,
        reordered=reordered,
        duplicates=int(len(base.seq) - len(seqs)),
        unknown_seq=int(len(seqs) - len(both)),
        values_changed=_changed(sent.linear[hi], sent.angular[hi], base.linear[bi], base.angular[bi]),
        zeroed=_zeroed(sent.linear[hi], sent.angular[hi], base.linear[bi], base.angular[bi]),
        late_ms=np.asarray(late_s, float) * 1e3,
    )


def _changed(v0: np.ndarray, w0: np.ndarray, v1: np.ndarray, w1: np.ndarray) -> int:
    return int(np.count_nonzero((np.abs(v1 - v0) > VALUE_TOLERANCE) | (np.abs(w1 - w0) > VALUE_TOLERANCE)))


def _zeroed(v0: np.ndarray, w0: np.ndarray, v1: np.ndarray, w1: np.ndarray) -> int:
    return int(np.count_nonzero(((v0 != 0) | (w0 != 0)) & (v1 == 0) & (w1 == 0)))


def _stats(ms: np.ndarray) -> BaseLateness | None:
    if not len(ms):
        return None
    return BaseLateness(median=float(np.median(ms)), p99=float(np.percentile(ms, 99)), max=float(np.max(ms)))


def _warnings(out: BaseReceived) -> list[str]:
    sent, got = out.sent or 0, out.received or 0
    if got == 0:
        return [f"the base received none of the {sent} commands the host sent: the robot stood still"]
    warnings = []
    short = sent - got if out.missing is None else out.missing
    if short > MISSING_WARNING_SHARE * sent:
        warnings.append(
            f"the base received {sent - short} of the {sent} commands the host sent "
            f"({short / sent:.0%} missing, more than {MISSING_WARNING_SHARE:.0%})"
        )
    if out.moving_sent and not out.moving_received:
        warnings.append("the base received no motion command: every command it took was zero")
    if out.values_changed:
        warnings.append(f"{out.values_changed} commands reached the base with other values than sent")
    return warnings
