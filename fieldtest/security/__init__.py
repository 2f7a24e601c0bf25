"""Security for every middleware from one SROS2-layout keystore (see docs/security.md).

- ``keystore``: create/check the keystore, TLS material, governance variants.
- ``securitysettings``: the security settings a trial can select (which ones a middleware takes, and their
  fragments, are its family's: ``fieldtest.middleware.<family>.security``).
- ``glue``: the checks every family's fragment makes on a ``TransportConfig`` (keystore, domain, TLS names).
- ``enforce``: the process' own credentials, checked before a family's fragment is handed out
  (``fieldtest.middleware.<family>.security``).
- ``trialsecurity``: a trial's keystore (``prepare_trial_security``).
"""

from .enforce import require_credentials
from .glue import require_tls_name
from .keystore import KeystoreError, KeystoreOptions, Validity, create_keystore
from .machineshare import check_keystore
from .securitysettings import SECURITY_SETTINGS, SecuritySettingError, get_setting

__all__ = [
    "SECURITY_SETTINGS",
    "KeystoreError",
    "KeystoreOptions",
    "SecuritySettingError",
    "Validity",
    "check_keystore",
    "create_keystore",
    "get_setting",
    "require_credentials",
    "require_tls_name",
]
