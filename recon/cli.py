"""`splatforge` command line: a thin tyro layer over library functions.

Each subcommand lives in its own module as a function whose arguments (usually one dataclass config)
tyro turns into flags. Modules are listed here by name so that a subcommand whose module is missing
does not break the others.
"""

from __future__ import annotations

import importlib
import sys
from typing import Callable

# subcommand -> "module:function"
SUBCOMMANDS: dict[str, str] = {
    "demo": "recon.commands.demo:demo",
    "train": "recon.commands.train:train",
    "eval": "recon.commands.evaluate:evaluate",
    "render": "recon.commands.render:render",
    "export": "recon.commands.export:export",
    "view": "viewer.commands:view",
}


def load_subcommands() -> dict[str, Callable]:
    """Import the available subcommand functions (missing modules are skipped)."""
    found = {}
    for name, target in SUBCOMMANDS.items():
        module_name, func_name = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name and module_name.startswith(err.name):
                continue  # subcommand not written yet
            raise
        found[name] = getattr(module, func_name)
    return found


def main(argv: list[str] | None = None) -> None:
    import tyro

    commands = load_subcommands()
    if not commands:
        print("splatforge: no subcommands are available in this build", file=sys.stderr)
        raise SystemExit(2)
    tyro.extras.subcommand_cli_from_dict(commands, args=argv, description="splatforge: Gaussian splatting toolkit")


if __name__ == "__main__":
    main()
