"""FileSegment commit throughput against the raw limit measured in the same run.

    python bench/driver_throughput.py --driver posix [--json] [--mib 256]
    python bench/driver_throughput.py --driver gcs|azure|s3 [--option key=value ...]

Figures:
* ``ratio_vs_raw``: FileSegment commit throughput with 4 MiB batches (append 4 MiB,
  commit) divided by the raw limit of the same backend measured in the same run:
  posix -- ``os.pwrite`` + ``os.fdatasync`` of the same bytes in 4 MiB calls, to a file
  in the same directory tree (target >= 0.85); gcs, azure and s3 -- fsspec ``pipe`` (gcsfs,
  adlfs, s3fs) of the same 4 MiB batches as objects to the same bucket or container
  (target >= 0.8). gcs, azure and s3 start their emulator (fake-gcs-server, Azurite, moto)
  when no endpoint is configured (the drivers' ``tiered_conformance_environment`` hook).
* ``driver_calls_per_mib``: SPI calls (write, size...) FileSegment made per MiB committed
  with 4 MiB batches, counted by a ``CountingLayer`` under the standard layers.
* ``requests_per_mib``: HTTP requests the driver sent per MiB committed with 4 MiB
  batches (drivers with a request hook point, ``driver.transport``, counted by the test
  kit's ``tiered_conformance.request_probe.RequestProbe``: gcs, azure, s3; target for
  s3 <= 0.3, one PUT per 4 MiB commit).
* ``batching_speedup``: 1 KiB appends committed every 4 MiB, divided by the same 1 KiB
  appends each committed on its own. Target >= 3.
* ``append_batched_mib_s``: the 1 KiB-append side alone, to show the per-append cost.

Rounds alternate raw and segment runs and the median round counts, so a noisy
neighbour hurts both sides alike.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid

from tiered_conformance.request_probe import RequestProbe
from tiered_core.plugins import conformance_environment, driver_class
from tiered_core.segment import FileSegment
from tiered_core.spi.layer import CountingLayer, layered
from tiered_core.spi.transport import RequestHookPoint

MiB = 1 << 20
BATCH = 4 * MiB
MESSAGE = 1024


def raw_pwrite(path: str, payload: bytes, total: int) -> float:
    """Seconds to pwrite+fdatasync ``total`` bytes in BATCH-sized calls."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        pos = 0
        while pos < total:
            n = os.pwrite(fd, payload, pos)
            os.fdatasync(fd)
            pos += n
        return time.perf_counter() - start
    finally:
        os.close(fd)


def raw_fsspec(name: str, options: dict, payload: bytes, total: int) -> float:
    """Seconds to fsspec-``pipe`` ``total`` bytes as BATCH-sized objects next to the driver's data."""
    tag = uuid.uuid4().hex[:8]
    if name == "gcs":
        import gcsfs

        endpoint = options.get("endpoint")
        token = options.get("token") or ("anon" if endpoint else None)
        extra = {"project": options["project"]} if options.get("project") else {}
        fs = gcsfs.GCSFileSystem(endpoint_url=endpoint, token=token, skip_instance_cache=True, **extra)
        base = "/".join(p for p in (options["bucket"], str(options.get("prefix") or "").strip("/"), "raw", tag) if p)
    elif name == "azure":
        import adlfs

        kwargs = {k: options[k] for k in ("connection_string", "account_name", "account_key", "credential",
                                          "sas_token", "client_id", "client_secret", "tenant_id", "anon")
                  if options.get(k) is not None}
        fs = adlfs.AzureBlobFileSystem(skip_instance_cache=True, **kwargs)
        base = "/".join(p for p in (options["container"], str(options.get("prefix") or "").strip("/"), "raw", tag) if p)
    elif name == "s3":
        import s3fs

        creds = {k: options[k] for k in ("key", "secret", "token") if options.get(k)}
        if options.get("emulated") and not creds:
            creds = {"key": "tiered-emulator-key", "secret": "tiered-emulator-secret"}
        region = {"region_name": options["region"]} if options.get("region") else {}
        fs = s3fs.S3FileSystem(endpoint_url=options.get("endpoint_url"), client_kwargs=region,
                               skip_instance_cache=True, use_listings_cache=False, **creds)
        base = "/".join(p for p in (options["bucket"], str(options.get("prefix") or "").strip("/"), "raw", tag) if p)
    else:
        raise SystemExit(f"no raw fsspec baseline for driver {name!r}")
    count = total // len(payload)
    start = time.perf_counter()
    for i in range(count):
        fs.pipe_file(f"{base}/{i:06d}", payload)
    elapsed = time.perf_counter() - start
    fs.rm(base, recursive=True)
    return elapsed


def segment_batched(driver, path: str, message: bytes, total: int) -> float:
    """Seconds for FileSegment to append ``total`` bytes as ``message`` pieces, committing every 4 MiB."""
    seg = FileSegment(driver, path, max_size=total + BATCH)
    per_batch = max(1, BATCH // len(message))
    start = time.perf_counter()
    written = 0
    while written < total:
        for _ in range(per_batch):
            seg.append(message)
        if not seg.commit():
            raise RuntimeError(f"commit failed at {seg.commit_position}")
        written += per_batch * len(message)
    return time.perf_counter() - start


def segment_per_message(driver, path: str, message: bytes, count: int) -> float:
    """Seconds for ``count`` appends each followed by its own commit."""
    seg = FileSegment(driver, path, max_size=count * len(message) + 1)
    start = time.perf_counter()
    for _ in range(count):
        seg.append(message)
        if not seg.commit():
            raise RuntimeError(f"commit failed at {seg.commit_position}")
    return time.perf_counter() - start


def parse_options(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            sys.exit(f"--option wants key=value, got {pair!r}")
        out[key] = value
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--driver", default="posix")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--mib", type=int, default=128, help="MiB written per side per round")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--small-writes", type=int, default=2000, help="1 KiB commits for the unbatched side")
    ap.add_argument("--workdir", default=None, help="where raw files and the posix root go")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    workdir = tempfile.mkdtemp(prefix="tiered-bench-", dir=args.workdir)
    total = args.mib * MiB
    payload = os.urandom(BATCH)
    message = os.urandom(MESSAGE)
    if args.driver == "gcs":  # gcsfs 2026.x probes HNS buckets, which the emulator lacks
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    cls = driver_class(args.driver)
    options = parse_options(args.option)
    remote = args.driver in ("gcs", "azure", "s3")
    try:
        with conformance_environment(args.driver, workdir) as env_options:
            all_options = cls.coerce_options({**env_options, **options})
            backend = cls(**all_options)
            counting = CountingLayer(backend)
            driver = layered(counting)  # as open_driver opens it, with a counting layer under the layers
            # HTTP drivers pass each request through a hook point: the test kit's probe counts them.
            probe = RequestProbe.install(backend) if isinstance(getattr(backend, "transport", None),
                                                                 RequestHookPoint) else None
            raw_rates, seg_rates, append_rates, small_rates, req_rates, call_rates = [], [], [], [], [], []
            for rnd in range(args.rounds):
                tag = uuid.uuid4().hex[:8]

                def raw_side() -> float:
                    if remote:
                        return raw_fsspec(args.driver, all_options, payload, total)
                    raw_file = os.path.join(workdir, f"raw-{tag}")
                    try:
                        return raw_pwrite(raw_file, payload, total)
                    finally:
                        os.unlink(raw_file)

                def segment_side() -> float:
                    seg_path = f"bench/{tag}/batched"
                    sent = probe.requests if probe is not None else None
                    calls = sum(counting.snapshot()["calls"].values())
                    seconds = segment_batched(driver, seg_path, payload, total)
                    call_rates.append((sum(counting.snapshot()["calls"].values()) - calls) / (total / MiB))
                    if sent is not None:
                        req_rates.append((probe.requests - sent) / (total / MiB))
                    driver.delete(seg_path)
                    return seconds

                # Alternate which side goes first, so background writeback hurts both alike.
                if rnd % 2 == 0:
                    raw_s, seg_s = raw_side(), segment_side()
                else:
                    seg_s = segment_side()
                    raw_s = raw_side()
                append_path = f"bench/{tag}/appends"
                append_s = segment_batched(driver, append_path, message, total)
                driver.delete(append_path)
                small_path = f"bench/{tag}/per-message"
                small_s = segment_per_message(driver, small_path, message, args.small_writes)
                driver.delete(small_path)
                raw_rates.append(total / MiB / raw_s)
                seg_rates.append(total / MiB / seg_s)
                append_rates.append(total / MiB / append_s)
                small_rates.append(args.small_writes * MESSAGE / MiB / small_s)
            driver.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    raw = statistics.median(raw_rates)
    seg = statistics.median(seg_rates)
    appends = statistics.median(append_rates)
    small = statistics.median(small_rates)
    raw_key = "raw_fsspec_pipe_mib_s" if remote else "raw_pwrite_fdatasync_mib_s"
    result = {
        "driver": args.driver,
        "mib_per_round": args.mib,
        "rounds": args.rounds,
        raw_key: round(raw, 2),
        "segment_batched_mib_s": round(seg, 2),
        "append_batched_mib_s": round(appends, 2),
        "append_per_message_commit_mib_s": round(small, 3),
        "ratio_vs_raw": round(seg / raw, 3),
        "batching_speedup": round(appends / small, 1),
        "driver_calls_per_mib": round(statistics.median(call_rates), 3),
        "targets": {"ratio_vs_raw": 0.8 if remote else 0.85, "batching_speedup": 3},
    }
    if req_rates:
        result["requests_per_mib"] = round(statistics.median(req_rates), 3)
    if args.driver == "s3":  # one PUT per 4 MiB group commit
        result["targets"]["requests_per_mib"] = 0.3
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:32} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
