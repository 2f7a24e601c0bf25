"""DDS family (``dds``, ``fastdds``): ``family`` (the names), ``transport`` (CycloneDDS for the
twin), ``cyclonedds_config`` (the XML the kit, the lab and ddsperf share), ``ddsstamp`` (C stamps)."""
