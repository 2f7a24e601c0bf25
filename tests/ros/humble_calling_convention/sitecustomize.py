"""Humble's calling convention for subscription callbacks, on Jazzy's rclpy (no Humble rclpy installs
here): every callback gets the message only, as Humble's executor calls it (rclpy humble,
executors.py ``_execute_subscription``), whatever its signature. Jazzy's executor passes the message
info only to a subscription whose ``_callback_type`` is WithMessageInfo, which its callback setter
chose from the signature; this keeps every subscription at MessageOnly.

Put on PYTHONPATH of the processes that should run so (tests/test_lab_humble_callbacks.py); a Python
without rclpy is left alone."""

import importlib.util

if importlib.util.find_spec("rclpy") is not None:
    from rclpy.subscription import Subscription

    _jazzy_setter = Subscription.callback.fset

    def _message_only(self, value):
        _jazzy_setter(self, value)
        self._callback_type = Subscription.CallbackType.MessageOnly

    Subscription.callback = Subscription.callback.setter(_message_only)
