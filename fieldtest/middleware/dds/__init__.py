"""DDS family on CycloneDDS (``dds``; Fast DDS is ``fieldtest.middleware.fastdds``): ``family``
(the name), ``transport`` (CycloneDDS for the twin), ``cyclonedds_config`` (the XML the kit, the lab
and ddsperf share), ``ddsstamp`` (C stamps)."""
