"""The two ends of a trial's command link, shared by the digital twin and the lab.

Pure logic over a ``fieldtest.transport.base.Transport``: no simulated physics, no rclpy. The twin
(``fieldtest.twin.host`` / ``fieldtest.twin.robot``) and the lab (``fieldtest.labrun.nodelogic.driver`` /
``fieldtest.labrun.nodelogic.monitor``, run by the rclpy nodes and the ROS-free stand-ins) compose them:

- ``streamer.CommandStreamer``: the host end. Plan -> ticks on absolute deadlines -> send, the
  clock-probe answers, the host bag, the stop burst on every way out, ``host_status.json``.
- ``receiver.CommandReceiver``: the robot end. Arrival stamps, Humble's Twist/Header pairing,
  a CommandReceipt with its latency per command, the clock-offset probes, the robot bag and the
  link's counts in ``robot_status.json``. What a command drives (the twin's Create 3 model, the
  lab's relay to the real base) is the composer's callback.
- ``stop``: the stops besides the burst: the relay's stop-on-silence watchdog and the emergency
  stop's zero commands.
- ``link``, ``clock``, ``status``, ``loop``: what both ends need around that (topic remapping,
  closing a link that hangs, process clock, status files, the periodic loop and its lateness).
"""
