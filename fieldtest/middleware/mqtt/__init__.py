"""MQTT family (``mqtt-local-broker``, ``mqtt-broker``): ``family`` (the names), ``transport`` (the
kit's MQTT client), ``infra`` (Mosquitto)."""
