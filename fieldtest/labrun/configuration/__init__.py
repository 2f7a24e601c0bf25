"""The lab's configuration: launch arguments (``middleware:=``, ``security:=``, ``plan:=`` ...) parsed
and checked into ``LabLaunch`` (fieldtest.middleware.launch), and built from a ``TrialRequest``."""
