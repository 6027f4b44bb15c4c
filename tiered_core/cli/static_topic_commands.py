"""``tiered static-topic create|remap|status|verify|put --cluster FILE``: static topics (seed 002).

FILE is a cluster TOML file (``examples/cluster.toml``): shared ``[tiered]`` settings and
one ``[[broker]]`` table per broker. ``create`` spreads ``--queues`` logic queues over
``--brokers``; ``remap`` moves logic queue leaders onto ``--brokers`` (re-run it to finish
an interrupted one); ``status`` shows logic and physical queues; ``verify`` lists every
broken rule across brokers and exits 1 when there is one; ``put`` puts one message into a
logic queue (through its leader: ``tiered put`` into a static topic's physical queue is
refused); ``takeover --broker B`` brings back broker B after it lost its disk: its store
takes its tier prefix over (the old owner is fenced, the metadata rebuilt from the tier)
and its static-topic mappings are restored from the other brokers' files (with
``--restore-lost-queues`` also the logic queues only its lost file knew, inferred; exit 1
while some logic queue stays unmapped).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tiered_core.cli.shared import add_json_option
from tiered_core.cli.exit_codes import ExitCode


def _brokers(text: str) -> list[str]:
    return [b.strip() for b in text.split(",") if b.strip()]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("static-topic",
                       help="static topics: logic queues over brokers (create, remap, status, verify, put)",
                       description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    actions = p.add_subparsers(dest="static_action", metavar="ACTION", required=True)
    for name, helptext in (("create", "create a static topic"), ("remap", "move logic queue leaders to brokers"),
                           ("status", "logic queues, their generations, leaders and offsets"),
                           ("verify", "check every static topic across the brokers"),
                           ("put", "put one message into a logic queue (body from --body or stdin)"),
                           ("takeover", "bring back a broker that lost its disk: take its tier prefix over, "
                                        "restore its mappings")):
        a = actions.add_parser(name, help=helptext)
        a.add_argument("--cluster", required=True, metavar="FILE", help="cluster TOML file (examples/cluster.toml)")
        if name not in ("verify", "takeover"):
            a.add_argument("--topic", required=True, help="the static topic")
        if name == "takeover":
            a.add_argument("--broker", required=True, help="the broker (its [[broker]] table in FILE) to bring back")
            a.add_argument("--restore-lost-queues", action="store_true",
                           help="also write the logic queues only the broker's lost mapping file knew, as inferred "
                                "from how create allocates physical queues and what the tier holds")
        if name == "create":
            a.add_argument("--queues", required=True, type=int, help="number of logic queues (fixed forever)")
        if name in ("create", "remap"):
            a.add_argument("--brokers", required=True, type=_brokers, metavar="A,B",
                           help="comma-separated broker names")
        if name == "put":
            a.add_argument("--queue", type=_logic_queue, default=0, metavar="ID", help="logic queue id (default 0)")
            a.add_argument("--key", action="append", default=[], help="index key (repeatable)")
            a.add_argument("--tags", help="message tags")
            a.add_argument("--body", help="message body (default: read stdin)")
        add_json_option(a, {"verify": "the violations", "put": "the put result",
                            "takeover": "the new owner and what was restored per topic"}.get(name, "the topic status"))
        a.set_defaults(func=run)


def _logic_queue(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a logic queue id is an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a logic queue id is an integer >= 0, got {value}")
    return value


def _print_status(status: dict) -> None:
    print(f"static topic {status['topic']}: {status['totalQueues']} logic queues, epoch {status['epoch']}")
    for q in status["queues"]:
        gens = " -> ".join(f"gen{i['gen']} {i['bname']}/{i['queueId']}@{i['logicOffset']}" for i in q["items"])
        print(f"  logic queue {q['queue']}: [{q.get('minOffset', '-')}, {q.get('maxOffset', '-')}) {gens}")


def print_json(doc: Any) -> None:
    """Print ``doc`` as one JSON document: its outer two levels indented, one line per logic
    queue or violation (linear and quick for 100,000 logic queues, unlike an indented dump)."""
    from tiered_core.static_topic.mapping_file import dumps_layered

    sys.stdout.write(dumps_layered(doc, 2, indent=2) + "\n")
    sys.stdout.flush()


def run(args: argparse.Namespace) -> int:
    from tiered_core.static_topic.bulk import gc_paused

    with gc_paused():  # the command builds and prints one entry per logic queue: see static_topic.bulk
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from tiered_core.static_topic import Cluster

    if args.static_action == "takeover":
        return _takeover(args)
    # status and verify only read: their brokers' stores are opened read-only
    with Cluster.load(args.cluster, read_only=args.static_action in ("status", "verify")) as cluster:
        if args.static_action == "verify":
            problems = [v.to_json() for v in cluster.verify()]
            skipped = cluster.skipped_offsets()  # allowed (documented), so not a violation
            if args.json:
                print_json({"ok": not problems, "violations": problems, "skipped": skipped})
            else:
                for v in problems:
                    print(f"{v['topic']} queue {v['queue']} broker {v['broker']} {v['field']}: {v['message']}")
                for g in skipped:
                    print(f"{g['topic']} queue {g['queue']} gen {g['gen']} on gone broker {g['bname']}: "
                          f"{g['count']} logic offset(s) [{g['from']}, {g['to']}) never tiered, skipped by readers")
                print("ok" if not problems else f"{len(problems)} violation(s)")
            return int(ExitCode.FAILURE) if problems else 0
        if args.static_action == "put":
            return _put(cluster, args)
        if args.static_action == "create":
            status = cluster.create_static_topic(args.topic, args.queues, args.brokers)
        elif args.static_action == "remap":
            status = cluster.remap_static_topic(args.topic, args.brokers)
        else:
            status = cluster.static_topic_status(args.topic)
    if args.json:
        print_json(status)
    else:
        _print_status(status)
    return 0


def _put(cluster, args: argparse.Namespace) -> int:
    """``static-topic put``: one message into logic queue ``--queue`` through its leader."""
    from tiered_core.codec.message import Message
    from tiered_core.errors import IllegalParam, StateConflict

    body = args.body.encode() if args.body is not None else sys.stdin.buffer.read()
    leader = cluster.leader(args.topic, args.queue)
    res = cluster.put_message(Message(topic=args.topic, body=body, keys=args.key, tags=args.tags), args.queue)
    result = {"status": res.status.name, "topic": args.topic, "queue": args.queue, "queue_offset": res.queue_offset,
              "broker": leader.bname, "physical_queue": leader.queueId, "commitlog_offset": res.commitlog_offset,
              "store_timestamp": res.store_timestamp}
    if not res.ok:
        kind = IllegalParam if res.status.name == "MESSAGE_ILLEGAL" else StateConflict
        raise kind(f"put to static topic {args.topic!r} logic queue {args.queue} answered {res.status.name}",
                   topic=args.topic, queue=args.queue, status=res.status.name)
    if args.json:
        print_json(result)
    else:
        print(f"{result['status']} topic={args.topic} logic queue={args.queue} queue_offset={res.queue_offset} "
              f"(broker {leader.bname} physical queue {leader.queueId})")
    return 0


def _takeover(args: argparse.Namespace) -> int:
    """``static-topic takeover``: open the cluster with ``--broker`` taking its prefix over,
    then restore its mappings; exit 1 while a logic queue stays unmapped."""
    import dataclasses

    from tiered_core.errors import IllegalParam
    from tiered_core.static_topic import Cluster, load_cluster_configs

    configs = load_cluster_configs(args.cluster)
    if args.broker not in {c.broker for c in configs}:
        raise IllegalParam(f"broker {args.broker!r} is not in cluster file {args.cluster!r} (brokers: "
                           f"{sorted(c.broker for c in configs)})", broker=args.broker, field="broker")
    with Cluster(configs, take_over=[args.broker], source=args.cluster) as cluster:
        ownership = cluster.stores[args.broker].ownership
        previous = ownership.took_over_from
        topics = cluster.restore_broker(args.broker, restore_lost=args.restore_lost_queues)
    result = {"broker": args.broker, "prefix": ownership.prefix,
              "owner": dataclasses.asdict(ownership.record) if ownership.record is not None else None,
              "took_over_from": dataclasses.asdict(previous) if previous is not None else None, "topics": topics}
    if args.json:
        print_json(result)
    else:
        if previous is None:
            print(f"broker {args.broker}: its store already owns {ownership.prefix!r}; nothing to take over")
        else:
            print(f"broker {args.broker}: took {ownership.prefix!r} over from {previous.describe()}")
        for t in topics:
            print(f"  {t['topic']}: logic queues restored from the other brokers: {t['from_peers'] or 'none'}")
            for q in t["lost"]:
                state = "restored" if t["restored"] else "not written (--restore-lost-queues writes it)"
                print(f"  {t['topic']}: logic queue {q['queue']} was known only to the lost file: "
                      f"{q['bname']}/{q['queueId']} (inferred), {state}")
            if t["empty"]:
                print(f"  {t['topic']}: logic queues {t['empty']} were known only to the lost file and their "
                      "physical queues hold nothing in the tier: not restorable")
            if t["reason"]:
                print(f"  {t['topic']}: the lost logic queues cannot be inferred: {t['reason']}")
            if t["unmapped"]:
                print(f"  {t['topic']}: logic queues {t['unmapped']} stay unmapped (`static-topic verify` lists them)")
    return int(ExitCode.FAILURE) if any(t["unmapped"] for t in topics) else 0
