"""`splatforge` command line: a thin tyro layer over library functions.

Each subcommand lives in its own module as a function whose arguments (usually one dataclass config)
tyro turns into flags. Modules are listed here by name so that a subcommand whose module is missing
does not break the others.
"""

from __future__ import annotations

import rasterizer  # noqa: F401  (first: sets GOMP_SPINCOUNT before torch loads; see rasterizer/__init__.py)
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
    "compare": "recon.commands.compare:compare",
    "image": "recon.commands.image:image",
    "mesh": "recon.commands.mesh:mesh",
    "mesh2splat": "recon.commands.mesh2splat:mesh2splat",
    "sdf": "recon.commands.sdf:sdf",
    "insert": "recon.commands.insert:insert",
    "partition": "recon.commands.partition:partition",
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


def with_default_preset(argv: list[str]) -> list[str]:
    """``train --data X`` -> ``train default --data X``: `splatforge train` takes a preset name first
    (recon.training.presets.PRESETS); without one the default preset is meant. ``train`` / ``train --help``
    alone are left as they are when asking for help (the help lists the presets)."""
    if not argv or argv[0] != "train":
        return argv
    from recon.training.presets import DEFAULT_PRESET, PRESETS

    rest = argv[1:]
    if rest and (rest[0] in PRESETS or rest[0] in ("-h", "--help")):
        return argv
    return ["train", method_preset(rest) or DEFAULT_PRESET, *rest]


def method_preset(args: list[str]) -> str | None:
    """The preset named like the method of ``--method M`` / ``--method=M`` in ``args`` (``nerf``: its own
    strategy and schedule), or None."""
    from recon.training.presets import PRESETS

    for i, a in enumerate(args):
        name = args[i + 1] if a == "--method" and i + 1 < len(args) else (a.split("=", 1)[1] if a.startswith("--method=") else None)
        if name is not None:
            return name if name in PRESETS and PRESETS[name][0].method == name else None
    return None


def unknown_subcommand(argv: list[str], names) -> str | None:
    """The one-line error for a first argument that is no subcommand (``trian`` -> "did you mean
    'train'?"), or None when ``argv`` starts with a subcommand or a flag (tyro handles those)."""
    import difflib

    if not argv or argv[0].startswith("-") or argv[0] in names:
        return None
    close = difflib.get_close_matches(argv[0], list(names), n=1, cutoff=0.5)
    hint = f"did you mean '{close[0]}'?" if close else f"the commands are {', '.join(names)}"
    return f"splatforge: error: unknown command '{argv[0]}'; {hint} (splatforge --help lists them)"


def main(argv: list[str] | None = None) -> None:
    """Run the subcommand named in ``argv`` (default ``sys.argv[1:]``). A user error escaping a command
    (:func:`recon.core.errors.is_user_error`: a :class:`SplatforgeError`, an OSError naming its file) is printed
    as one line (exit status 2); any other exception is a bug in splatforge: its traceback and a request to
    report it (exit status 1)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    message = unknown_subcommand(argv, SUBCOMMANDS)
    if message is not None:
        print(message, file=sys.stderr)
        raise SystemExit(2)
    from recon.core.errors import fail

    try:
        run_subcommand(argv)
    except Exception as err:  # noqa: BLE001 - SystemExit / KeyboardInterrupt pass; fail() tells user error from bug
        fail(argv[0] if argv else "", err, inputs=input_paths(argv[1:]))


def input_paths(args: list[str]) -> str | None:
    """The arguments (or ``--flag=value`` values) of a command line that name existing files or folders,
    joined for a message (a MemoryError names them: the input declared more than fits); None if none."""
    import os

    found = []
    for arg in args:
        value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
        if value and not value.startswith("-") and os.path.exists(value) and value not in found:
            found.append(value)
    return ", ".join(found) or None


def run_subcommand(argv: list[str]) -> None:
    """Dispatch ``argv`` (its first item a subcommand) to the subcommand's function through tyro."""
    import tyro

    if argv[:1] == ["train"] and any(a == "--config" or a.startswith("--config=") for a in argv[1:]):
        from recon.commands.train import train_from_config_file

        return train_from_config_file(argv[1:])
    if argv[:1] == ["train"] and any(a == "--blocks" or a.startswith("--blocks=") for a in argv[1:]):
        from recon.distributed.launch import train_blocks  # block training on torchrun workers

        return train_blocks(argv[1:])
    argv = with_default_preset(argv)
    commands = load_subcommands()
    if not commands:
        print("splatforge: no subcommands are available in this build", file=sys.stderr)
        raise SystemExit(2)
    tyro.extras.subcommand_cli_from_dict(commands, args=argv, description="splatforge: Gaussian splatting toolkit")


if __name__ == "__main__":
    main()
