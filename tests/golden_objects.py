"""Write the old-layout golden fixtures of the object-store drivers (a tool, not a test).

    python tests/golden_objects.py [--driver gcs|azure] [--out DIR]

Each driver, as the repository has it when this runs, writes a few segments the way a
store does (through ``FileSegment``) on its emulator (fake-gcs-server, Azurite, started
here), and then every raw backend object under the prefix is dumped with the backend's own
API, not the driver's:

* ``objects.json``: each object's name (relative to the bucket or container), bytes
  (base64, plus their SHA-256), custom metadata, content type and, for Azure, the blob type
  and the append blob's sealed flag;
* ``expected.json``: what a driver opened with ``prefix`` on those objects must answer:
  ``list("")``, and per segment ``size``, ``is_sealed`` and the whole content.

The segments: a sealed commit-log segment (five commits, then sealed); an unsealed one with
four commits (for GCS: a base and three parts not yet composed into it); an unsealed one
with 70 small commits (for GCS: 64 parts composed into the base, six parts after it); an
empty consume-queue segment (created, never written); and an owner record written with
``write_if_absent``.

The fixtures in ``drivers/gcs/tests/golden/`` and ``drivers/azure/tests/golden/`` were
written with main at b460b12 (the GCS driver's own JSON-API client, the Azure driver on
azure-storage-blob); ``test_gcs_golden.py`` and ``test_azure_golden.py`` upload them raw into
a fresh bucket or container and check that today's driver reads them byte for byte.
Regenerating them with a later driver defeats their purpose: do it only to add a case,
from a checkout of that commit.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import random
import sys
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable

from tiered_core.codec.naming import segment_path
from tiered_core.flat.ownership import owner_prefix
from tiered_core.segment import FileSegment
from tiered_core.spi import SegmentDriver

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "golden-store"
CLUSTER, BROKER, TOPIC = "DefaultCluster", "broker-a", "GoldenTopic"


def _data(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


def write_segments(driver: SegmentDriver) -> dict[str, Any]:
    """Write the fixture's segments with ``driver``; return what must be read back."""
    sealed = segment_path(CLUSTER, BROKER, TOPIC, 0, "COMMIT_LOG", 0)
    unsealed = segment_path(CLUSTER, BROKER, TOPIC, 1, "COMMIT_LOG", 0)
    many = segment_path(CLUSTER, BROKER, TOPIC, 2, "COMMIT_LOG", 0)
    empty = segment_path(CLUSTER, BROKER, TOPIC, 0, "CONSUME_QUEUE", 0)
    owner = f"{owner_prefix(CLUSTER, BROKER)}{1:020d}"
    contents: dict[str, bytes] = {}

    def commits(path: str, pieces: list[bytes], seal: bool) -> None:
        seg = FileSegment(driver, path)
        for piece in pieces:
            seg.append(piece)
            if not seg.commit():
                raise RuntimeError(f"commit to {path} failed")
        if seal:
            seg.seal()
        contents[path] = b"".join(pieces)

    commits(sealed, [_data(10 + i, 300 + 17 * i) for i in range(5)], seal=True)
    commits(unsealed, [_data(20 + i, 200 + 31 * i) for i in range(4)], seal=False)
    commits(many, [_data(100 + i, 40 + i) for i in range(70)], seal=False)
    driver.create(empty)
    contents[empty] = b""
    record = json.dumps({"epoch": 1, "owner": "golden", "note": "written by write_if_absent"}).encode()
    if not driver.write_if_absent(owner, record):
        raise RuntimeError(f"{owner} already existed")
    contents[owner] = record

    expected = {"prefix": PREFIX, "list": [[p, s] for p, s in driver.list("")], "segments": {}}
    for path, data in sorted(contents.items()):
        size, is_sealed = driver.size(path), driver.is_sealed(path)
        if size != len(data) or (size and driver.read(path, 0, size) != data):
            raise RuntimeError(f"{path}: the driver does not read back what it wrote")
        expected["segments"][path] = {"size": size, "sealed": is_sealed,
                                      "sha256": hashlib.sha256(data).hexdigest(),
                                      "data": base64.b64encode(data).decode()}
    if expected["list"] != sorted([p, len(d)] for p, d in contents.items()):
        raise RuntimeError(f"unexpected listing {expected['list']}")
    return expected


def _object(name: str, data: bytes, metadata: dict[str, str], content_type: str | None,
            **extra: Any) -> dict[str, Any]:
    return {"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
            "metadata": dict(sorted(metadata.items())), "content_type": content_type, **extra,
            "data": base64.b64encode(data).decode()}


def dump_gcs(url: str, bucket: str, prefix: str) -> list[dict[str, Any]]:
    """Every object below ``prefix`` in ``bucket``, through fake-gcs-server's JSON API."""
    query = urllib.parse.urlencode({"prefix": prefix})
    with urllib.request.urlopen(f"{url}/storage/v1/b/{bucket}/o?{query}", timeout=30) as resp:
        listing = json.load(resp)
    if listing.get("nextPageToken"):
        raise RuntimeError("more objects than one page: the fixture is meant to be small")
    out = []
    for item in sorted(listing.get("items", []), key=lambda i: i["name"]):
        quoted = urllib.parse.quote(item["name"], safe="")
        with urllib.request.urlopen(f"{url}/storage/v1/b/{bucket}/o/{quoted}?alt=media", timeout=30) as resp:
            data = resp.read()
        out.append(_object(item["name"], data, item.get("metadata") or {}, item.get("contentType")))
    return out


def dump_azure(connection_string: str, container: str, prefix: str) -> list[dict[str, Any]]:
    """Every blob below ``prefix`` in ``container``, through azure-storage-blob."""
    from azure.storage.blob import BlobServiceClient

    out = []
    with BlobServiceClient.from_connection_string(connection_string) as svc:
        cont = svc.get_container_client(container)
        for item in sorted(cont.list_blobs(name_starts_with=prefix), key=lambda b: b.name):
            blob = cont.get_blob_client(item.name)
            props = blob.get_blob_properties()
            data = blob.download_blob().readall()
            blob_type = getattr(props.blob_type, "value", props.blob_type)
            out.append(_object(item.name, data, props.metadata or {}, props.content_settings.content_type,
                               blob_type=str(blob_type),
                               sealed=bool(getattr(props, "is_append_blob_sealed", False))))
    return out


def generate(driver_name: str, out_dir: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="golden-") as work:
        if driver_name == "gcs":
            from tiered_driver_gcs import GcsDriver
            from tiered_driver_gcs.emulator import FakeGcsServer

            server = FakeGcsServer(os.path.join(work, "data"))
            bucket = "golden"
            setup: Callable = lambda s: s.create_bucket(bucket)  # noqa: E731
            make = lambda s: GcsDriver(**s.driver_options(bucket, PREFIX))  # noqa: E731
            dump = lambda s: dump_gcs(s.url, bucket, PREFIX + "/")  # noqa: E731
        elif driver_name == "azure":
            from tiered_driver_azure import AzureDriver
            from tiered_driver_azure.emulator import Azurite

            server = Azurite(os.path.join(work, "data"))
            container = "golden"
            setup = lambda s: s.create_container(container)  # noqa: E731
            make = lambda s: AzureDriver(**s.driver_options(container, PREFIX))  # noqa: E731
            dump = lambda s: dump_azure(s.connection_string, container, PREFIX + "/")  # noqa: E731
        else:
            raise SystemExit(f"no golden fixture for driver {driver_name!r}")
        from tiered_conformance.emulator import running

        with running(server, setup):
            driver = make(server)
            try:
                expected = write_segments(driver)
            finally:
                driver.close()
            objects = dump(server)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "objects.json").write_text(json.dumps({"driver": driver_name, "objects": objects}, indent=1) + "\n")
    (out_dir / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(f"{driver_name}: {len(objects)} objects, {len(expected['segments'])} segments -> {out_dir}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--driver", choices=["gcs", "azure"], action="append")
    ap.add_argument("--out", type=Path, default=None, help="instead of drivers/<name>/tests/golden/")
    args = ap.parse_args(argv)
    for name in args.driver or ["gcs", "azure"]:
        generate(name, (args.out / name) if args.out else ROOT / "drivers" / name / "tests" / "golden")
    return 0


if __name__ == "__main__":
    sys.exit(main())
