"""``tiered drivers [--json]``: the installed drivers and where they come from.

One line per driver (name, distribution, version, capabilities, aliases), or with
``--json`` a JSON list of objects on stdout. Plugins that failed to load are reported
on stderr (distribution and error); the listing still shows every driver that did
load. With ``TIERED_STRICT_PLUGINS=1`` a broken plugin is an error instead.
Only names are printed, never option values, so no secret can leak from here.

With ``--config FILE`` the driver that config selects is also opened (as a store would
open it; nothing is written) and described: its options (secrets redacted), the
capabilities of that instance (a driver may derive them from its options, as fsspec does
from its filesystem) and whatever else its ``describe`` reports, e.g. fsspec's
``single_writer``. In ``--json`` it is the ``configured`` field of that driver's entry.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import warnings
from typing import Any

from tiered_core.plugins import PluginEntry, PluginLoadWarning, Registry
from tiered_core.spi.capabilities import Capabilities


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("drivers", help="list installed drivers",
                                   description="List installed drivers: name, distribution, version, "
                                               "capabilities and aliases.")
    parser.add_argument("--json", action="store_true", help="print a JSON list of objects")
    parser.add_argument("--config", metavar="FILE", default=None,
                        help="also open the driver this config selects (writing nothing) and show its options "
                             "(secrets redacted) and this instance's capabilities")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    registry = _load_quietly(Registry())
    drivers = [describe(info) for _, info in sorted(registry.drivers.items())]
    text = json.dumps(drivers, indent=2) + "\n" if args.json else format_table(drivers)
    if getattr(args, "config", None):
        name, configured = describe_configured(args.config)
        for entry in drivers:
            if entry["name"] == name:
                entry["configured"] = configured
        text = json.dumps(drivers, indent=2) + "\n" if args.json else text + format_configured(name, configured)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. `tiered drivers --json | head`: not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    for failure in registry.failures:
        print(f"tiered drivers: plugin {failure.plugin!r} from distribution {failure.distribution!r} "
              f"failed to load and was skipped: {failure.error}", file=sys.stderr)
    return 0


def _load_quietly(registry: Registry) -> Registry:
    """Load plugins; failures are reported by ``run`` once, not also as warnings/log lines."""
    logger = logging.getLogger("tiered_core.plugins")
    disabled = logger.disabled
    logger.disabled = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PluginLoadWarning)
            return registry.load()
    finally:
        logger.disabled = disabled


def describe(info: PluginEntry) -> dict[str, Any]:
    """A JSON-ready description of one registered driver (names only, no values)."""
    caps = info.cls.capabilities.as_dict()
    caps.pop("overridden", None)
    return {
        "name": info.name,
        "distribution": info.distribution,
        "version": info.version,
        "aliases": list(info.aliases),
        "capabilities": caps,
        "options": info.cls.option_names(),
        "class": f"{info.cls.__module__}:{info.cls.__qualname__}",
    }


def describe_configured(path: str) -> tuple[str, dict[str, Any]]:
    """``(driver name, description)`` of the driver the config at ``path`` selects, opened
    with its options as a store opens it (nothing is written): options redacted, the
    instance's capabilities, and the driver's own extra fields."""
    from tiered_core.config import StoreConfig
    from tiered_core.plugins import open_driver

    config = StoreConfig.load(path)
    driver = open_driver(config.driver, **config.effective_driver_options())
    try:
        info = dict(driver.describe())
    finally:
        driver.close()
    info.pop("name", None)
    info["config"] = path
    return config.driver, info


def format_configured(name: str, info: dict[str, Any]) -> str:
    lines = [f"\nconfigured by {info['config']}: driver {name!r}, options {info.get('options', {})}",
             f"  capabilities of this instance: {capability_summary(info.get('capabilities', {}))}"]
    for cap, reason in sorted((info.get("capabilities", {}).get("overridden") or {}).items()):
        lines.append(f"  capability {cap} overridden: {reason}")
    if info.get("single_writer") and info.get("missing"):
        lines.append(f"  single_writer = true: the backend lacks {', '.join(info['missing'])}; nothing refuses a "
                     "second store writing to this location, so only one store may ever use it")
    elif info.get("single_writer"):
        lines.append("  single_writer = true (not needed: the backend refuses a second store itself)")
    return "\n".join(lines) + "\n"


def capability_summary(caps: dict[str, Any]) -> str:
    """The capabilities a driver has, e.g. ``atomic_write,seal,max_write_size=4194304``."""
    parts = []
    for name in Capabilities.fields():
        value = caps.get(name)
        if value is True:
            parts.append(name)
        elif value not in (False, None):
            parts.append(f"{name}={value}")
    return ",".join(parts) or "-"


def format_table(drivers: list[dict[str, Any]]) -> str:
    header = ("NAME", "DISTRIBUTION", "VERSION", "CAPABILITIES", "ALIASES")
    rows = [
        (d["name"], d["distribution"], d["version"] or "-", capability_summary(d["capabilities"]),
         ",".join(d["aliases"]) or "-")
        for d in drivers
    ]
    if not rows:
        return "no drivers installed (install e.g. tiered-driver-posix)\n"
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    return "\n".join(lines) + "\n"
