"""Security for every middleware from one SROS2-layout keystore (see docs/security.md).

- ``keystore``: create/check the keystore, TLS material, governance variants.
- ``settings``: the security settings a trial can select and their per-middleware fragments.
- ``glue``: the same fragments from a ``TransportConfig``.
- ``enforce``: the glue after checking the process' own credentials (what the transports call).
- ``trial``: a trial's keystore (``prepare_trial_security``).
"""

from .enforce import (
    cyclonedds_security_xml,
    mosquitto_listener_lines,
    mqtt_configure_client,
    require_credentials,
    zenoh_config_overrides,
)
from .glue import require_tls_name
from .keystore import KeystoreError, KeystoreOptions, Validity, check_keystore, create_keystore
from .settings import SECURITY_SETTINGS, SecuritySettingError, get_setting, settings_for

__all__ = [
    "SECURITY_SETTINGS",
    "KeystoreError",
    "KeystoreOptions",
    "SecuritySettingError",
    "Validity",
    "check_keystore",
    "create_keystore",
    "cyclonedds_security_xml",
    "get_setting",
    "mosquitto_listener_lines",
    "mqtt_configure_client",
    "require_credentials",
    "require_tls_name",
    "settings_for",
    "zenoh_config_overrides",
]
