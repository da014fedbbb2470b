"""``ggtune search WORDS``: repos of the Hugging Face Hub with GGUF files, most downloaded first.

``ggtune search qwen3 8b`` asks the hub's model search (:func:`app.sources.hf.search_models`,
the request huggingface_hub's ``list_models`` makes, ``filter=gguf``) and prints each repo
with its downloads (last 30 days) and likes; ``--limit N`` (1-100, default 30), ``--json``
prints a list. The desktop's File ▸ Find on Hugging Face… is its twin; ``ggtune hf REPO``
then compares a repo's files at your settings.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.sources.hf import MAX_SEARCH_LIMIT, SEARCH_LIMIT, search_models
from ui.cli.commands import COMMANDS
from ui.cli.output import print_table


def _limit(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= n <= MAX_SEARCH_LIMIT:
        raise argparse.ArgumentTypeError(f"must be 1 to {MAX_SEARCH_LIMIT}, got {n}")
    return n


def register(sub: Any) -> None:
    """Add the ``search`` subcommand to the ``ggtune`` subparsers ``sub``."""
    p = sub.add_parser("search", help=COMMANDS["search"].help)
    p.add_argument("words", nargs="+", help="words of the repo's name, e.g. qwen3 8b")
    p.add_argument(
        "--limit",
        type=_limit,
        default=SEARCH_LIMIT,
        help=f"how many repos (1-{MAX_SEARCH_LIMIT}, default {SEARCH_LIMIT})",
    )
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(handler=run_search)


def _count(n: int | None) -> str:
    return "?" if n is None else f"{n:,}"


def run_search(args: argparse.Namespace) -> int:
    """Search the hub and print the repos found; return the exit code."""
    words = " ".join(args.words)
    found = search_models(words, limit=args.limit)
    if args.json:
        rows = [
            {"repo": r.repo_id, "downloads": r.downloads, "likes": r.likes, "gated": r.gated}
            for r in found
        ]
        print(json.dumps(rows, indent=2))
        return 0
    if not found:
        print(f"no repo with GGUF files matches {words!r}; try fewer or other words")
        return 0
    table = [["repo", "downloads", "likes"]]
    table += [
        [r.repo_id + (" (gated)" if r.gated else ""), _count(r.downloads), _count(r.likes)]
        for r in found
    ]
    print_table(table)
    print(f"compare a repo's files at your settings: ggtune hf {found[0].repo_id} -c 16384")
    return 0
