"""Fast DDS family (``fastdds``): ``family`` (the name), ``transport`` (the twin's Fast DDS
participant), ``stamp`` and ``fastddsstamp.cpp`` (the C++ helper on Debian's libfastrtps),
``discovery`` (the discovery-server setting), ``security`` (DDS Security on Fast DDS)."""
