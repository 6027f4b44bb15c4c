"""The README's config-key table, generated from the declaration.

    python -m tiered_core.configdef --markdown                  print the table
    python -m tiered_core.configdef --update-readme README.md   rewrite it between the markers
    python -m tiered_core.configdef --check-readme README.md    exit 1 when the README differs
"""

from __future__ import annotations

import argparse
import sys

from tiered_core.configdef import IGNORED_ROCKETMQ_KEYS, KEYS
from tiered_core.configdef.key_spec import markdown_table, with_table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tiered_core.configdef", description=__doc__.split("\n")[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--markdown", action="store_true", help="print the key table")
    group.add_argument("--update-readme", metavar="README", help="rewrite the table between the markers")
    group.add_argument("--check-readme", metavar="README", help="exit 1 when the README's table differs")
    args = ap.parse_args(argv)
    table = markdown_table(KEYS, IGNORED_ROCKETMQ_KEYS)
    if args.markdown:
        sys.stdout.write(table)
        return 0
    path = args.update_readme or args.check_readme
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    try:
        wanted = with_table(text, table)
    except ValueError as exc:
        print(f"{path}: {exc}", file=sys.stderr)
        return 2
    if args.check_readme:
        if wanted != text:
            print(f"{path}: the config-key table differs from the declaration; run "
                  f"python -m tiered_core.configdef --update-readme {path}", file=sys.stderr)
            return 1
        return 0
    if wanted != text:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
