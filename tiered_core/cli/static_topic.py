"""``tiered static-topic create|remap|status|verify --cluster FILE``: static topics (seed 002).

FILE is a cluster TOML file (``examples/cluster.toml``): shared ``[tiered]`` settings and
one ``[[broker]]`` table per broker. ``create`` spreads ``--queues`` logic queues over
``--brokers``; ``remap`` moves logic queue leaders onto ``--brokers`` (re-run it to finish
an interrupted one); ``status`` shows logic and physical queues; ``verify`` lists every
broken rule across brokers and exits 1 when there is one.
"""

from __future__ import annotations

import argparse

from tiered_core.cli.common import add_json_option, print_json
from tiered_core.cli.exit_codes import ExitCode


def _brokers(text: str) -> list[str]:
    return [b.strip() for b in text.split(",") if b.strip()]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("static-topic", help="static topics: logic queues over brokers (create, remap, status, verify)",
                       description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    actions = p.add_subparsers(dest="static_action", metavar="ACTION", required=True)
    for name, helptext in (("create", "create a static topic"), ("remap", "move logic queue leaders to brokers"),
                           ("status", "logic queues, their generations, leaders and offsets"),
                           ("verify", "check every static topic across the brokers")):
        a = actions.add_parser(name, help=helptext)
        a.add_argument("--cluster", required=True, metavar="FILE", help="cluster TOML file (examples/cluster.toml)")
        if name != "verify":
            a.add_argument("--topic", required=True, help="the static topic")
        if name == "create":
            a.add_argument("--queues", required=True, type=int, help="number of logic queues (fixed forever)")
        if name in ("create", "remap"):
            a.add_argument("--brokers", required=True, type=_brokers, metavar="A,B",
                           help="comma-separated broker names")
        add_json_option(a, "the topic status" if name != "verify" else "the violations")
        a.set_defaults(func=run)


def _print_status(status: dict) -> None:
    print(f"static topic {status['topic']}: {status['totalQueues']} logic queues, epoch {status['epoch']}")
    for q in status["queues"]:
        gens = " -> ".join(f"gen{i['gen']} {i['bname']}/{i['queueId']}@{i['logicOffset']}" for i in q["items"])
        print(f"  logic queue {q['queue']}: [{q.get('minOffset', '-')}, {q.get('maxOffset', '-')}) {gens}")


def run(args: argparse.Namespace) -> int:
    from tiered_core.static_topic import Cluster

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
