"""``deep500lite list``: frameworks, datasets, networks and recipes."""

from __future__ import annotations

import os
from deep500lite.registry import FRAMEWORKS, FRAMEWORK_ALIASES, framework_version, is_framework_available

__all__ = ["KINDS", "add_parser", "bundled_recipes", "run"]

KINDS = ("frameworks", "datasets", "networks", "recipes")


def add_parser(subparsers):
    p = subparsers.add_parser("list", help="list frameworks, datasets, networks and recipes",
                              description="List what deep500lite can run.")
    p.add_argument("kind", nargs="?", choices=KINDS, help="list only this kind")
    p.add_argument("--capabilities", action="store_true",
                   help="with frameworks: one row per framework, its roles and capabilities, from the specs")
    p.add_argument("--format", choices=("table", "markdown", "csv"), default="table",
                   help="with --capabilities: the table's format (default table)")
    p.set_defaults(func=run)
    return p


def bundled_recipes() -> dict[str, str]:
    """Recipe name -> file path for the recipes installed with deep500lite."""
    import importlib.util

    folder = importlib.util.find_spec("deep500lite.recipes").submodule_search_locations[0]
    return {f[:-3]: os.path.join(folder, f) for f in sorted(os.listdir(folder))
            if f.endswith(".py") and not f.startswith("_")}


def run(args) -> int:
    from deep500lite.datasets import list_datasets
    from deep500lite.networks import list_models

    if getattr(args, "capabilities", False):
        from deep500lite.errors import UserError
        from deep500lite.metrics.tables import format_table
        from deep500lite.registry import capability_table

        if args.kind not in (None, "frameworks"):
            raise UserError(f"--capabilities lists frameworks only. Received: {args.kind}")
        headers, rows = capability_table()
        print(format_table(headers, rows, args.format))
        return 0
    kinds = [args.kind] if args.kind else list(KINDS)
    for kind in kinds:
        print(f"{kind}:")
        if kind == "frameworks":
            aliases = {}
            for a, k in FRAMEWORK_ALIASES.items():
                aliases.setdefault(k, []).append(a)
            for k in FRAMEWORKS:
                state = (f"installed ({framework_version(k)})" if is_framework_available(k)
                         else f"not installed: {FRAMEWORKS[k].install}")
                alias = f" (alias: {', '.join(aliases[k])})" if k in aliases else ""
                print(f"  {k}{alias}: {state}")
        elif kind == "datasets":
            for name in list_datasets():
                print(f"  {name}")
        elif kind == "networks":
            for name in list_models():
                print(f"  {name}")
        else:
            recipes = bundled_recipes()
            for name, path in recipes.items():
                print(f"  {name}: {path}")
            if not recipes:
                print("  (none bundled yet)")
    return 0
