"""``tiered static-topic create|remap|status|verify --cluster FILE [--json]``."""

from __future__ import annotations

import json
import shutil

import pytest
from pathlib import Path

from static_topic_helpers import read_logic_queue

from tiered_conformance.drills import copy_sparse
from tiered_core.cli import main
from tiered_core.static_topic import Cluster
from tiered_core.static_topic.mapping_file import mapping_path
from tiered_core.static_topic.topic_config import topic_config_path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cluster.toml"


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out) if "--json" in argv else out


def test_create_remap_status_verify(tmp_path, capsys):
    shutil.copy(EXAMPLE, tmp_path / "cluster.toml")
    f = str(tmp_path / "cluster.toml")
    code, status = run(capsys, "static-topic", "create", "--cluster", f, "--topic", "orders", "--queues", "4",
                       "--brokers", "broker-a,broker-b", "--json")
    assert code == 0 and status["totalQueues"] == 4
    assert [q["leader"]["bname"] for q in status["queues"]] == ["broker-a", "broker-b"] * 2
    code, status = run(capsys, "static-topic", "remap", "--cluster", f, "--topic", "orders",
                       "--brokers", "broker-b,broker-c", "--json")
    assert code == 0 and {q["leader"]["bname"] for q in status["queues"]} == {"broker-b", "broker-c"}
    code, status = run(capsys, "static-topic", "status", "--cluster", f, "--topic", "orders", "--json")
    assert code == 0 and all({"items", "leader", "minOffset", "maxOffset"} <= set(q) for q in status["queues"])
    assert run(capsys, "static-topic", "verify", "--cluster", f, "--json") == (
        0, {"ok": True, "violations": [], "skipped": []})
    # break it: broker c loses its mapping -> verify names it, exit 1
    path = Path(mapping_path(str(tmp_path / "cluster-data" / "broker-c")))
    path.unlink()
    code, doc = run(capsys, "static-topic", "verify", "--cluster", f, "--json")
    assert code == 1 and not doc["ok"]
    assert any(v["broker"] == "broker-c" for v in doc["violations"])
    # bad input: typed error as JSON, BAD_INPUT
    code, doc = run(capsys, "static-topic", "create", "--cluster", f, "--topic", "orders", "--queues", "6",
                    "--brokers", "broker-a", "--json")
    assert code == 2 and doc["error"]["code"] == "MAPPING" and doc["error"]["field"] == "totalQueues"
    with Cluster.load(f) as cluster:
        assert cluster.static_topic_status("orders")["totalQueues"] == 4


def test_verify_names_a_missing_topic_config_and_rerunning_create_completes_it(tmp_path, capsys):
    shutil.copy(EXAMPLE, tmp_path / "cluster.toml")
    f = str(tmp_path / "cluster.toml")
    argv = ("static-topic", "create", "--cluster", f, "--topic", "orders", "--queues", "4",
            "--brokers", "broker-a,broker-b", "--json")
    assert run(capsys, *argv)[0] == 0
    Path(topic_config_path(str(tmp_path / "cluster-data" / "broker-a"))).unlink()  # as a crash between the two
    code, doc = run(capsys, "static-topic", "verify", "--cluster", f, "--json")
    assert code == 1 and [(v["broker"], v["field"]) for v in doc["violations"]] == [("broker-a", "topicConfigTable")]
    code, text = run(capsys, "static-topic", "verify", "--cluster", f)
    assert code == 1 and "broker broker-a topicConfigTable" in text
    assert run(capsys, *argv)[0] == 0
    assert run(capsys, "static-topic", "verify", "--cluster", f, "--json") == (
        0, {"ok": True, "violations": [], "skipped": []})


def test_static_demo_never_deletes_a_directory_it_did_not_make(tmp_path):
    """``tiered demo --config`` puts the static-topic demo under the store's ``store_path``:
    a ``cluster`` directory there that an earlier demo did not make is refused, untouched;
    the demo's own directory is recreated by its next run."""
    import pytest

    from tiered_core.cli.demo_static import run_static_demo
    from tiered_core.errors import InvalidPath
    from tiered_core.ops.output_paths import MARKER

    foreign = tmp_path / "cluster"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("someone's data")
    with pytest.raises(InvalidPath, match="holds no .tiered-output marker"):
        run_static_demo(str(foreign), 40)
    assert (foreign / "keep.txt").read_text() == "someone's data"

    own = tmp_path / "own"
    first = run_static_demo(str(own), 40)
    assert (own / MARKER).is_file()
    again = run_static_demo(str(own), 40)
    assert (first.verified, first.wrong, again.verified, again.wrong) == (40, 0, 40, 0)


def test_status_of_an_unknown_topic_is_not_found(tmp_path, capsys):
    """Issue 18 list 8: ``static-topic status`` of a topic no broker maps exits 3 (NOT_FOUND),
    naming the topic and the static topics there are; a broken mapping stays exit 2."""
    shutil.copy(EXAMPLE, tmp_path / "cluster.toml")
    f = str(tmp_path / "cluster.toml")
    assert run(capsys, "static-topic", "create", "--cluster", f, "--topic", "orders", "--queues", "2",
               "--brokers", "broker-a", "--json")[0] == 0
    for action in ("status", "remap"):
        extra = ("--brokers", "broker-b") if action == "remap" else ()
        code, doc = run(capsys, "static-topic", action, "--cluster", f, "--topic", "nope", *extra, "--json")
        assert code == 3, (action, doc)
        assert (doc["error"]["code"], doc["error"]["topic"], doc["error"]["known"]) == ("NOT_FOUND", "nope", ["orders"])


def test_a_restored_brokers_unknown_objects_name_a_command_that_mends_it(tmp_path, capsys):
    """A broker's directory restored from a backup older than its tiered data: the error's fix
    is a command line that runs (it named `--config FILE [[broker]] NAME` before)."""
    from tiered_core import Message

    shutil.copy(EXAMPLE, tmp_path / "cluster.toml")
    f = str(tmp_path / "cluster.toml")
    c_dir = tmp_path / "cluster-data" / "broker-c"
    with Cluster.load(f) as cluster:
        cluster.create_static_topic("orders", 2, ["broker-a", "broker-b"])
    shutil.copytree(c_dir, tmp_path / "backup-c", copy_function=copy_sparse)
    with Cluster.load(f) as cluster:
        cluster.remap_static_topic("orders", ["broker-c", "broker-b"])
        sent = [cluster.put_message(Message(topic="orders", body=b"m%d" % i), 0).queue_offset for i in range(3)]
        cluster.dispatch()
    shutil.rmtree(c_dir)
    shutil.copytree(tmp_path / "backup-c", c_dir, copy_function=copy_sparse)
    code, doc = run(capsys, "static-topic", "status", "--cluster", f, "--topic", "orders", "--json")
    assert code == 5 and doc["error"]["code"] == "UNKNOWN_OBJECTS"
    fix = doc["error"]["fix"]
    assert fix == f"tiered static-topic takeover --cluster {f} --broker broker-c" and fix in doc["error"]["message"]
    assert main(fix.split()[1:]) == 0
    capsys.readouterr()
    with Cluster.load(f) as cluster:
        got = cluster.get_message("g", "orders", 0, 0, 8)
        assert [(m.queue_offset, m.body) for m in got.messages] == [(o, b"m%d" % o) for o in sent]
        assert cluster.put_message(Message(topic="orders", body=b"next"), 0).queue_offset == 3


def test_a_leader_whose_own_mapping_is_older_names_the_take_over_that_mends_it(tmp_path, capsys):
    """Broker c's directory restored from before it became leader (its metadata rebuilt):
    the cluster names c the leader, c's file does not. A put said "fenced; puts go to the
    leader", naming no leader and no fix."""
    from tiered_core import Message
    from tiered_core.errors import Fenced

    text = EXAMPLE.read_text().replace("[tiered]\n", '[tiered]\nmetadata_recovery = "rebuild"\n', 1)
    (tmp_path / "cluster.toml").write_text(text)
    f = str(tmp_path / "cluster.toml")
    c_dir = tmp_path / "cluster-data" / "broker-c"
    with Cluster.load(f) as cluster:
        cluster.create_static_topic("orders", 2, ["broker-a", "broker-b"])
    shutil.copytree(c_dir, tmp_path / "backup-c", copy_function=copy_sparse)
    with Cluster.load(f) as cluster:
        cluster.remap_static_topic("orders", ["broker-c", "broker-b"])
        for i in range(3):
            cluster.put_message(Message(topic="orders", body=b"m%d" % i), 0)
        cluster.dispatch()
    shutil.rmtree(c_dir)
    shutil.copytree(tmp_path / "backup-c", c_dir, copy_function=copy_sparse)
    with Cluster.load(f) as cluster:
        with pytest.raises(Fenced) as err:
            cluster.put_message(Message(topic="orders", body=b"x"), 0)
    fix = f"tiered static-topic takeover --cluster {f} --broker broker-c"
    assert (err.value.context["leader"], err.value.context["fix"]) == ("broker-c", fix)
    assert main(fix.split()[1:]) == 0
    capsys.readouterr()
    with Cluster.load(f) as cluster:
        assert cluster.put_message(Message(topic="orders", body=b"m3"), 0).queue_offset == 3
        got = read_logic_queue(cluster, "orders", 0).messages
        assert [(m.queue_offset, m.body) for m in got] == [(i, b"m%d" % i) for i in range(4)]
