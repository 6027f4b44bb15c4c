"""The Java runtime Spark needs: found and its version read, or a clear error."""

from __future__ import annotations

import os
import shutil
import subprocess

from tiered_core.errors import ConfigError


def check_java() -> str:
    """The first line of ``java -version``; :class:`ConfigError` with a clear message when Java is missing."""
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
    if shutil.which(java) is None:
        raise ConfigError(f"Spark needs a Java runtime (17 or later) and {java!r} was not found: install one "
                          "(e.g. apt-get install default-jre-headless) or set JAVA_HOME", key="java")
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"Spark needs a Java runtime: `{java} -version` failed: {exc}", key="java") from None
    if done.returncode != 0:
        raise ConfigError(f"Spark needs a Java runtime: `{java} -version` exited {done.returncode}: "
                          f"{done.stderr.strip()[:200]}", key="java")
    return (done.stderr or done.stdout).strip().splitlines()[0]
