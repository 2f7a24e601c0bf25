"""``TransportConfig``: everything a process needs to join the trial's link (a schema, no behaviour).

It lives below the transports so that the trial record (``fieldtest.record``) and security
(``fieldtest.security``) can hold and read it without importing any middleware library.

The settings only one family reads (its ports, Zenoh's path, MQTT's Nagle, DDS's discovery) are that
family's: its package's ``settings.py`` (``fieldtest.middleware.<family>.settings``, plain data)
declares them as ``Settings``, a pydantic model with a default for every field, found here by the
family's name in the catalog. A config holds every family's settings and writes each under the
family's name::

    middleware: zenoh-peer
    zenoh: {port: 7447, path: bridge, express: false}
    mqtt: {port: 1883, nagle: true}

Configs written before the families held their settings (flat ``zenoh_path``, ``mqtt_port``, ...:
``<family>_<field>``) are read as the nested form.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from types import ModuleType
from typing import Any, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, model_serializer, model_validator

from fieldtest.catalog import CATALOG, TWIN_MIDDLEWARES, family, family_package

Role = Literal["host", "robot"]
TwinMiddleware = Literal[TWIN_MIDDLEWARES]  # type: ignore[valid-type]  # the names the twin runs
SettingsModel = TypeVar("SettingsModel", bound=BaseModel)
Holder = TypeVar("Holder", bound="FamilySettingsHolder")


def family_modules(part: str) -> dict[str, ModuleType]:
    """Family name -> its module ``part`` (``fieldtest.middleware.<family>.<part>``), in catalog order,
    for every catalog family whose package has one: how the generic layers find what a family declares
    (its ``settings``, its ``wire`` form) without naming it."""
    modules = {}
    for name in dict.fromkeys(entry.family for entry in CATALOG):
        module = family_package(name) + "." + part
        if importlib.util.find_spec(module) is not None:
            modules[name] = importlib.import_module(module)
    return modules


# Family name -> its ``Settings`` model, for every catalog family whose package has settings.py.
SETTINGS_MODELS: dict[str, type[BaseModel]] = {
    name: module.Settings for name, module in family_modules("settings").items()
}


def settings_family(model: type[BaseModel]) -> str:
    """The family whose settings ``model`` is."""
    for name, known in SETTINGS_MODELS.items():
        if known is model:
            return name
    raise KeyError(f"{model.__module__}.{model.__qualname__} is no family's Settings")


def reads_settings(middleware: str, model: type[BaseModel]) -> bool:
    """Whether middleware ``middleware`` reads the family settings ``model`` (its own family's)."""
    return family(middleware) == settings_family(model)


def _legacy_key(key: str) -> tuple[str, str] | None:
    """(family, field) of a flat key of the configs written before the nesting (``zenoh_path``)."""
    for name, model in SETTINGS_MODELS.items():
        prefix = name.replace("-", "_") + "_"
        if key.startswith(prefix) and key[len(prefix) :] in model.model_fields:
            return name, key[len(prefix) :]
    return None


def _written_form(schema: dict[str, Any]) -> None:
    """The JSON schema of the form configs are written in: each family's settings under its name
    (``families`` is internal), and the older flat keys, marked deprecated."""
    properties = schema["properties"]
    properties.pop("families", None)
    for name, model in SETTINGS_MODELS.items():
        nested = model.model_json_schema()
        properties[name] = {
            **nested,
            "description": f"{name}'s link settings ({family_package(name)}.settings)",
        }
        for field, spec in nested["properties"].items():
            flat = f"{name.replace('-', '_')}_{field}"
            properties[flat] = {
                **spec,
                "deprecated": True,
                "description": f"older spelling of {name}.{field}",
            }


class FamilySettingsHolder(BaseModel):
    """A model that holds every family's link settings by family name, written as top-level keys
    (``zenoh: {...}``) and read from them or from the older flat keys (``zenoh_port``): the trial's
    ``TransportConfig`` and a lab side's ``LabLaunch`` (fieldtest.middleware.launch)."""

    middleware: str = "dds"  # a catalog name: whose family's settings ``own_settings`` answers
    # Every family's link settings by family name (written as top-level keys: see the module's doc).
    families: dict[str, SerializeAsAny[BaseModel]] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _family_settings(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "families" in data:
            return data
        data = dict(data)
        # a family named like a field of the model (LabLaunch's ``dds:=`` RMW choice) is read flat only
        given: dict[str, dict[str, Any]] = {
            name: dict(data.pop(name) or {})
            for name in SETTINGS_MODELS
            if name in data and name not in cls.model_fields
        }
        for key in [k for k in data if k not in cls.model_fields]:
            legacy = _legacy_key(key)
            if legacy:
                value = data.pop(key)
                given.setdefault(legacy[0], {}).setdefault(legacy[1], value)
        families = {}
        for name, model in SETTINGS_MODELS.items():
            try:
                families[name] = model.model_validate(given.get(name, {}))
            except ValueError as exc:  # pydantic's ValidationError: one line naming the field
                first = exc.errors()[0] if hasattr(exc, "errors") else {"loc": (), "msg": str(exc)}
                where = ".".join(str(part) for part in (name, *first["loc"]))
                raise ValueError(f"{where}: {first['msg']}") from None
        data["families"] = families
        return data

    @model_serializer(mode="wrap")
    def _families_by_name(self, handler: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        out = handler(self)
        for name, settings in out.pop("families", {}).items():
            if name in type(self).model_fields:  # written flat, as it is read
                out.update({f"{name.replace('-', '_')}_{field}": value for field, value in settings.items()})
            else:
                out[name] = settings
        return out

    def settings(self, model: type[SettingsModel]) -> SettingsModel:
        """The settings of the family whose ``Settings`` is ``model`` (``config.settings(zenoh.Settings).path``)."""
        return cast(SettingsModel, self.families[settings_family(model)])

    def own_settings(self, model: type[SettingsModel]) -> SettingsModel | None:
        """``settings(model)`` where this config's middleware reads them, else None."""
        return self.settings(model) if reads_settings(self.middleware, model) else None

    def with_settings(self: Holder, model: type[SettingsModel], **changes: Any) -> Holder:
        """A copy with ``changes`` to one family's settings (the others as they are)."""
        current = self.settings(model)
        updated = model.model_validate({**current.model_dump(exclude_unset=True), **changes})
        return self.model_copy(update={"families": {**self.families, settings_family(model): updated}})

    def with_ports(self: Holder, pick: Callable[[], int]) -> Holder:
        """A copy whose every family ``port`` setting is ``pick()`` (a free port each, for a trial
        beside others)."""
        families = {
            name: settings.model_copy(update={"port": pick()})
            if "port" in type(settings).model_fields
            else settings
            for name, settings in self.families.items()
        }
        return self.model_copy(update={"families": families})


class TransportConfig(FamilySettingsHolder):
    """Everything a process needs to join the trial's link."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_written_form)

    middleware: TwinMiddleware = "dds"
    qos: str = "default"  # a profile name from fieldtest.qos
    namespace: str = ""  # ROBOT_NAMESPACE, prepended to every topic
    domain_id: int = 0
    # Addresses of the peers (host/robot/router/broker). Loopback by default; the network
    # emulation sets these to namespace addresses.
    host_address: str = "127.0.0.1"
    robot_address: str = "127.0.0.1"
    router_address: str = "127.0.0.1"
    broker_address: str = "127.0.0.1"
    security: str = "none"  # a security setting name (fieldtest.security); "none" = plain
    keystore: str = ""  # path of the keystore when security is on
    # The roles whose network interface stands for a Wi-Fi one (the twin: on an emulated Wi-Fi link)
    wifi_roles: tuple[Role, ...] = ()
