"""A `tiered` command refuses a tier that lives inside one process (drill s14: `put --dispatch`
on the memory driver or fsspec ``memory://`` said the message was tiered, then every later
command failed with IDENTITY_MISMATCH and verify called the segment lost)."""

from __future__ import annotations

import pytest

from tiered_core.cli import main
from tiered_core.cli.exit_codes import ExitCode
from tiered_core.plugins import driver_class


@pytest.mark.parametrize("driver, option", [("memory", 'namespace = "tiered"'), ("fsspec", 'url = "memory://t"')])
def test_every_command_refuses_an_in_process_tier_and_creates_nothing(tmp_path, capsys, driver, option):
    cfg = tmp_path / "tiered.toml"
    cfg.write_text(f'[tiered]\nstore_path = "store"\ndriver = "{driver}"\n[tiered.options]\n{option}\n')
    for argv in (["put", "--topic", "o", "--body", "x", "--dispatch"], ["get", "--topic", "o", "--offset", "0"],
                 ["stat"], ["verify"], ["metadata", "rebuild"], ["takeover", "--create"]):
        assert main([*argv, "--config", str(cfg)]) == ExitCode.BAD_INPUT, argv
        err = capsys.readouterr().err
        assert "[CONFIG]" in err and "keeps the tier inside one process" in err and f"driver {driver!r}" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiered.toml"]


def test_whether_a_driver_outlives_the_process_is_known_before_it_is_opened():
    assert not driver_class("memory").outlives_process({})
    fsspec = driver_class("fsspec")
    assert not fsspec.outlives_process({"url": "memory://x"})
    assert fsspec.outlives_process({"url": "file:///var/tmp/x"})
    assert driver_class("posix").outlives_process({"root": "/x"})
